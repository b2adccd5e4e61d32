package main

import (
	"fmt"
	"log/slog"

	"github.com/tandem-tx/tandem/internal/config"
	"github.com/tandem-tx/tandem/internal/fileperm"
)

// rmFlagHelp is the help of --rm, for every command that takes it.
const rmFlagHelp = "resource manager NAME=DRIVER:DSN or NAME=DRIVER:@FILE, DRIVER postgres or mysql (repeatable). Keep passwords off the command line: ${VAR} in the DSN is replaced by the environment variable VAR, and @FILE reads the DSN from FILE"

// loadConfig reads the configuration file (if file is set; a loose mode is
// warned about) and adds each --rm flag over its rms (a flag replaces the
// file's RM of the same name). Every dsn_file with loose permissions is
// warned about.
func loadConfig(file string, rms []string, logger *slog.Logger) (config.Config, error) {
	var cfg config.Config
	if file != "" {
		var err error
		if cfg, err = config.Load(file); err != nil {
			return cfg, err
		}
		fileperm.Warn(logger, file, "config file")
	}
	for _, f := range rms {
		name, r, err := config.ParseRMFlag(f)
		if err != nil {
			return cfg, err
		}
		if cfg.RMs == nil {
			cfg.RMs = map[string]config.RM{}
		}
		cfg.RMs[name] = r
	}
	for _, name := range cfg.RMNames() {
		if f := cfg.RMs[name].DSNFile; f != "" {
			fileperm.Warn(logger, f, fmt.Sprintf("rm %q: dsn_file", name))
		}
	}
	return cfg, nil
}
