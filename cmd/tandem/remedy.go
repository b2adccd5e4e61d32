package main

import (
	"errors"
	"strings"

	"github.com/tandem-tx/tandem/internal/server"
	"github.com/tandem-tx/tandem/internal/setting"
	"github.com/tandem-tx/tandem/internal/standby"
)

// settingFlags names the flag that sets each setting; inConfigFile says
// whether the config file has a key for it too.
var settingFlags = map[setting.Name]struct {
	flag         string
	inConfigFile bool
}{
	setting.Listen:            {"--listen", true},
	setting.Admin:             {"--admin", false},
	setting.DataDir:           {"--data-dir", true},
	setting.StandbyListen:     {"--standby-listen", true},
	setting.StandbyOf:         {"--standby-of", true},
	setting.StandbyPeer:       {"--peer", true},
	setting.StandbyTransport:  {"--transport", true},
	setting.StandbyProtection: {"--protection", true},
	setting.StandbySecretFile: {"--standby-secret-file", true},
	setting.StandbyTLS:        {"--standby-tls-cert/--standby-tls-key/--standby-tls-ca", true},
}

// remedies says what to do about each refusal the library reports, in the
// command line's words. value is the refused setting's value.
var remedies = []struct {
	err error
	fix func(value string) string
}{
	{standby.ErrLinkNotAuthenticated, func(string) string {
		return "make a secret (tandem secret --out FILE), copy it to both coordinators and start both with --standby-secret-file FILE and --standby-tls-cert/--standby-tls-key/--standby-tls-ca (an encrypted link), or use a loopback address"
	}},
	{standby.ErrLinkNotEncrypted, func(string) string {
		return "give both coordinators --standby-tls-cert, --standby-tls-key and --standby-tls-ca (mutual TLS), or pass --insecure-no-tls if this network is trusted"
	}},
	{standby.ErrSecretUnreadable, func(path string) string { return "make one with: tandem secret --out " + path }},
	{standby.ErrSecretTooShort, func(string) string { return "make a new one with: tandem secret --out FILE" }},
	{standby.ErrPartialTLS, func(string) string {
		return "give all three of --standby-tls-cert, --standby-tls-key and --standby-tls-ca, or none"
	}},
	{server.ErrNotAuthenticated, func(string) string {
		return "set --auth-token-file (clients send the token) or --tls-client-ca (clients present a certificate), listen on 127.0.0.1, or pass --insecure-no-auth if the network itself is trusted"
	}},
	{server.ErrPlaintext, func(string) string {
		return "set --tls-cert and --tls-key (and --tls-client-ca for mutual TLS), listen on 127.0.0.1, or pass --insecure-no-tls if the network itself is trusted"
	}},
	{server.ErrStandbyListenNeeded, func(string) string {
		return "add --standby-listen ADDR, or drop --transport, --protection and --peer"
	}},
}

// explained is an error reworded for the command line; it still wraps the
// library's error, so errors.Is and errors.As see through it.
type explained struct {
	msg string
	err error
}

func (e *explained) Error() string { return e.msg }
func (e *explained) Unwrap() error { return e.err }

// explain rewords a library error for the command line: each refused
// setting is named by its flag (and its config-file key), and what to do is
// added. Errors of several refusals (errors.Join) are explained one per line.
// Other errors are returned as they are.
func explain(err error) error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var lines []string
		changed := false
		for _, e := range j.Unwrap() {
			x := explain(e)
			changed = changed || x != e
			lines = append(lines, x.Error())
		}
		if !changed {
			return err
		}
		return &explained{msg: strings.Join(lines, "\n"), err: err}
	}
	var se *setting.Error
	if !errors.As(err, &se) {
		return err
	}
	msg := err.Error()
	if f, ok := settingFlags[se.Setting]; ok {
		named := f.flag
		if se.Value != "" {
			named += " " + se.Value
		}
		if f.inConfigFile {
			named += " (" + string(se.Setting) + " in the config file)"
		}
		msg = strings.Replace(msg, strings.TrimSuffix(se.Error(), se.Err.Error()), named+": ", 1)
	}
	for _, r := range remedies {
		if errors.Is(err, r.err) {
			msg += ". To fix: " + r.fix(se.Value)
			break
		}
	}
	return &explained{msg: msg, err: err}
}
