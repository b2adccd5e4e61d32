package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/internal/rm"
)

const secret = "hunter2"

func TestParseRMFlag(t *testing.T) {
	tests := []struct {
		flag string
		name string
		rm   RM
	}{
		{"pg=postgres:postgres://u:" + secret + "@127.0.0.1:5432/db", "pg", RM{Driver: "postgres", DSN: "postgres://u:" + secret + "@127.0.0.1:5432/db"}},
		{"maria=mysql:u:" + secret + "@tcp(127.0.0.1:3306)/db?tls=false", "maria", RM{Driver: "mysql", DSN: "u:" + secret + "@tcp(127.0.0.1:3306)/db?tls=false"}},
		// Only the first '=' and the first ':' after it split the flag.
		{"kv=postgres:host=h user=u password=" + secret, "kv", RM{Driver: "postgres", DSN: "host=h user=u password=" + secret}},
	}
	for _, tc := range tests {
		name, r, err := ParseRMFlag(tc.flag)
		if err != nil {
			t.Errorf("ParseRMFlag(%q): %v", tc.flag, err)
			continue
		}
		if name != tc.name || r != tc.rm {
			t.Errorf("ParseRMFlag(%q) = %q, %+v; want %q, %+v", tc.flag, name, r, tc.name, tc.rm)
		}
	}
}

func TestParseRMFlagErrorsHideThePassword(t *testing.T) {
	bad := []string{
		"",
		"pg",
		"pg=",
		"pg=postgres",
		"pg=postgres:",
		"=postgres:postgres://u:" + secret + "@127.0.0.1/db",                   // no name
		"pg=:postgres://u:" + secret + "@127.0.0.1/db",                         // no driver
		"pg:postgres:postgres://u:" + secret + "@127.0.0.1/db",                 // ':' typed for '='
		"maria:mysql:u:" + secret + "@tcp(127.0.0.1:3306)/db",                  // ':' typed for '='
		"maria:mysql:u:" + secret + "@tcp(127.0.0.1:3306)/db?tls=skip-verify",  // ... with a '=' later on
		"=postgres:postgres://u:p@" + secret + "@127.0.0.1/db",                 // '@' inside the password
		"=mysql:u:" + secret + ":pa@tcp(127.0.0.1:3306)/db",                    // ':' inside the password
		"pg:postgres:host=127.0.0.1 user=u password=" + secret,                 // keyword/value DSN
		"=postgres:host=127.0.0.1 user=u password=" + secret + " dbname=x",     // keyword/value DSN, no name
		"=postgres:host=127.0.0.1 user=u password='" + secret + " x' dbname=x", // quoted keyword value
	}
	for _, flag := range bad {
		name, r, err := ParseRMFlag(flag)
		if err == nil {
			t.Errorf("ParseRMFlag(%q) = %q, %+v; want an error", flag, name, r)
			continue
		}
		msg := err.Error()
		if strings.Contains(msg, secret) {
			t.Errorf("ParseRMFlag(%q): the error shows the password: %s", flag, msg)
		}
		if !strings.Contains(msg, "NAME=DRIVER:DSN") {
			t.Errorf("ParseRMFlag(%q): the error does not say the expected form: %s", flag, msg)
		}
	}
}

func TestParseRMFlagErrorShowsTheHead(t *testing.T) {
	for flag, head := range map[string]string{
		"=postgres:postgres://u:" + secret + "@127.0.0.1/db": `"=postgres:`,
		"pg=:postgres://u:" + secret + "@127.0.0.1/db":       `"pg=:`,
		"pg=postgres": `"pg=postgres"`,
	} {
		_, _, err := ParseRMFlag(flag)
		if err == nil || !strings.Contains(err.Error(), head) {
			t.Errorf("ParseRMFlag(%q): %v; want an error showing %s", flag, err, head)
		}
	}
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tandem.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadFullFile(t *testing.T) {
	path := writeFile(t, `
listen: 127.0.0.1:7171
data_dir: /var/lib/tandem
orphan_timeout: 90s
scan_interval: 5s
phase2_wait: 2500ms
max_txn_age: 2h
rms:
  pg:    {driver: postgres, dsn: "postgres://tandem:secret@127.0.0.1:55432/tandem"}
  maria: {driver: mariadb,  dsn: "tandem:secret@tcp(127.0.0.1:53306)/tandem", max_conns: 4}
`)
	c, err := Load(path)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	want := Config{
		Listen:        "127.0.0.1:7171",
		DataDir:       "/var/lib/tandem",
		OrphanTimeout: 90 * time.Second,
		ScanInterval:  5 * time.Second,
		Phase2Wait:    2500 * time.Millisecond,
		MaxTxnAge:     2 * time.Hour,
		RMs: map[string]RM{
			"pg":    {Driver: "postgres", DSN: "postgres://tandem:secret@127.0.0.1:55432/tandem"},
			"maria": {Driver: "mariadb", DSN: "tandem:secret@tcp(127.0.0.1:53306)/tandem", MaxConns: 4},
		},
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("Load =\n%+v\nwant\n%+v", c, want)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if got := c.RMNames(); !reflect.DeepEqual(got, []string{"maria", "pg"}) {
		t.Errorf("RMNames = %v, want [maria pg]", got)
	}
	cfgs, err := c.RMConfigs()
	if err != nil {
		t.Fatalf("RMConfigs: %v", err)
	}
	wantCfgs := []rm.Config{
		{Name: "maria", Driver: rm.MySQL, DSN: "tandem:secret@tcp(127.0.0.1:53306)/tandem", MaxConns: 4},
		{Name: "pg", Driver: rm.Postgres, DSN: "postgres://tandem:secret@127.0.0.1:55432/tandem"},
	}
	if !reflect.DeepEqual(cfgs, wantCfgs) {
		t.Errorf("RMConfigs = %+v, want %+v", cfgs, wantCfgs)
	}
}

func TestLoadEmptyFileThenDefaults(t *testing.T) {
	c, err := Load(writeFile(t, ""))
	if err != nil {
		t.Fatalf("Load of an empty file: %v", err)
	}
	c.SetDefaults()
	if c.Listen != DefaultListen || c.DataDir != DefaultDataDir {
		t.Errorf("after SetDefaults: listen %q data_dir %q, want %q %q", c.Listen, c.DataDir, DefaultListen, DefaultDataDir)
	}
	c = Config{Listen: "0.0.0.0:1", DataDir: "/d"}
	c.SetDefaults()
	if c.Listen != "0.0.0.0:1" || c.DataDir != "/d" {
		t.Errorf("SetDefaults overwrote set fields: %+v", c)
	}
}

func TestLoadRejectsUnknownKeys(t *testing.T) {
	tests := []struct{ body, key string }{
		{"listen: 127.0.0.1:7070\norphan_timout: 60s\n", "orphan_timout"},
		{"rms:\n  pg: {driver: postgres, dns: \"postgres://u@h/db\"}\n", "dns"},
	}
	for _, tc := range tests {
		_, err := Load(writeFile(t, tc.body))
		if err == nil {
			t.Errorf("Load(%q): no error for unknown key %q", tc.body, tc.key)
			continue
		}
		if !strings.Contains(err.Error(), tc.key) {
			t.Errorf("Load(%q): error does not name %q: %v", tc.body, tc.key, err)
		}
	}
}

func TestLoadMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope.yaml")
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "nope.yaml") {
		t.Fatalf("Load of a missing file: %v, want an error naming it", err)
	}
}

func TestValidate(t *testing.T) {
	good := func() Config {
		return Config{RMs: map[string]RM{
			"pg":    {Driver: "postgres", DSN: "postgres://u:p@h/db"},
			"maria": {Driver: "mysql", DSN: "u:p@tcp(h:3306)/db"},
		}}
	}
	if c := good(); c.Validate() != nil {
		t.Fatalf("Validate of a good config: %v", c.Validate())
	}
	tests := []struct {
		name   string
		change func(*Config)
		want   string // in the error
	}{
		{"no rms", func(c *Config) { c.RMs = nil }, "no resource managers"},
		{"empty rms", func(c *Config) { c.RMs = map[string]RM{} }, "no resource managers"},
		{"uppercase name", func(c *Config) { c.RMs["PG"] = RM{Driver: "postgres", DSN: "x"} }, `"PG"`},
		{"empty name", func(c *Config) { c.RMs[""] = RM{Driver: "postgres", DSN: "x"} }, "resource manager name"},
		{"long name", func(c *Config) { c.RMs[strings.Repeat("a", 33)] = RM{Driver: "postgres", DSN: "x"} }, "resource manager name"},
		{"bad driver", func(c *Config) { c.RMs["ora"] = RM{Driver: "oracle", DSN: "x"} }, `rm "ora"`},
		{"no driver", func(c *Config) { c.RMs["x"] = RM{DSN: "x"} }, `rm "x"`},
		{"empty dsn", func(c *Config) { c.RMs["pg"] = RM{Driver: "postgres"} }, `rm "pg": dsn is empty`},
		{"negative orphan_timeout", func(c *Config) { c.OrphanTimeout = -time.Second }, "orphan_timeout is negative"},
		{"negative scan_interval", func(c *Config) { c.ScanInterval = -time.Second }, "scan_interval is negative"},
		{"negative phase2_wait", func(c *Config) { c.Phase2Wait = -time.Second }, "phase2_wait is negative"},
		{"negative max_txn_age", func(c *Config) { c.MaxTxnAge = -time.Second }, "max_txn_age is negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := good()
			tc.change(&c)
			err := c.Validate()
			if err == nil {
				t.Fatalf("Validate: no error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate: %v; want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestRMConfigsRejectsBadDriver(t *testing.T) {
	c := Config{RMs: map[string]RM{"ora": {Driver: "oracle", DSN: "x"}}}
	if _, err := c.RMConfigs(); err == nil || !strings.Contains(err.Error(), `"ora"`) {
		t.Fatalf("RMConfigs: %v, want an error naming the RM", err)
	}
}

func TestLogSize(t *testing.T) {
	for in, want := range map[string]ByteSize{
		"67108864": 64 << 20, "64MiB": 64 << 20, "64 MiB": 64 << 20, "64MB": 64 << 20, "64M": 64 << 20,
		"512KiB": 512 << 10, "1GiB": 1 << 30, "2G": 2 << 30, "1048576B": 1 << 20,
	} {
		got, err := ParseByteSize(in)
		if err != nil || got != want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "-1MiB", "1.5GiB", "64TiB", "9999999999999GiB", "64 bytes"} {
		if got, err := ParseByteSize(in); err == nil {
			t.Errorf("ParseByteSize(%q) = %d, want an error", in, got)
		}
	}
	if s := ByteSize(64 << 20).String(); s != "64MiB" {
		t.Errorf("String = %q", s)
	}
	c, err := Load(writeFile(t, "log_size: 16MiB\n"))
	if err != nil || c.LogSize != 16<<20 {
		t.Fatalf("Load log_size: %d, %v", c.LogSize, err)
	}
	if _, err := Load(writeFile(t, "log_size: lots\n")); err == nil || !strings.Contains(err.Error(), "64MiB") {
		t.Fatalf("Load of a bad log_size: %v", err)
	}
	c = Config{RMs: map[string]RM{"pg": {Driver: "postgres", DSN: "x"}}}
	c.SetDefaults()
	if c.LogSize != DefaultLogSize || c.Validate() != nil {
		t.Fatalf("default log size %s: %v", c.LogSize, c.Validate())
	}
	for _, bad := range []ByteSize{MinLogSize - 1, MaxLogSize + 1} {
		c.LogSize = bad
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "log_size") {
			t.Errorf("Validate(log_size %d) = %v", bad, err)
		}
	}
}
