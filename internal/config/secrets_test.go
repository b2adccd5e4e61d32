package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestExpandEnv(t *testing.T) {
	t.Setenv("TANDEM_TEST_PW", "s3cr:t@x")
	t.Setenv("TANDEM_TEST_EMPTY", "")
	for _, tc := range []struct{ in, want string }{
		{"postgres://u:${TANDEM_TEST_PW}@h/db", "postgres://u:s3cr:t@x@h/db"},
		{"u:${TANDEM_TEST_PW}@tcp(h)/db?x=${TANDEM_TEST_EMPTY}", "u:s3cr:t@x@tcp(h)/db?x="},
		{"postgres://u:$TANDEM_TEST_PW@h/db", "postgres://u:$TANDEM_TEST_PW@h/db"}, // only ${NAME}
		{"u:pa$$word@tcp(h)/db", "u:pa$$word@tcp(h)/db"},
		{"no references", "no references"},
	} {
		got, err := ExpandEnv(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ExpandEnv(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestExpandEnvErrorsNameTheVariable(t *testing.T) {
	os.Unsetenv("TANDEM_TEST_UNSET")
	for _, tc := range []struct{ in, want string }{
		{"postgres://u:${TANDEM_TEST_UNSET}@h/db", "environment variable TANDEM_TEST_UNSET is not set"},
		{"postgres://u:${TANDEM TEST}@h/db", `"TANDEM TEST" inside`},
		{"postgres://u:${}@h/db", `"" inside`},
		{"postgres://u:Sekr1t${@h/db", "without a closing }"},
	} {
		_, err := ExpandEnv(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ExpandEnv(%q): error %v, want one containing %q", tc.in, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "Sekr1t") {
			t.Errorf("ExpandEnv(%q): the error shows the DSN: %v", tc.in, err)
		}
	}
}

func TestParseRMFlagEnvAndFile(t *testing.T) {
	t.Setenv("TANDEM_TEST_PW", secret)
	name, r, err := ParseRMFlag("pg=postgres:postgres://u:${TANDEM_TEST_PW}@127.0.0.1/db")
	if err != nil || name != "pg" || r.DSN != "postgres://u:"+secret+"@127.0.0.1/db" || r.DSNFile != "" {
		t.Fatalf("${VAR}: %q %+v %v", name, r, err)
	}
	f := filepath.Join(t.TempDir(), "maria.dsn")
	// Read literally: ${...} in a file is not expanded; white space around it is dropped.
	if err := os.WriteFile(f, []byte("  u:"+secret+"${x@tcp(127.0.0.1:3306)/db\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	name, r, err = ParseRMFlag("maria=mysql:@" + f)
	if err != nil || name != "maria" || r.DSN != "u:"+secret+"${x@tcp(127.0.0.1:3306)/db" || r.DSNFile != f {
		t.Fatalf("@FILE: %q %+v %v", name, r, err)
	}
}

// Bad input: each error says what is wrong and never shows the password.
func TestParseRMFlagBadSecrets(t *testing.T) {
	os.Unsetenv("TANDEM_TEST_UNSET")
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.dsn")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	unreadable := filepath.Join(dir, "unreadable.dsn")
	if err := os.WriteFile(unreadable, []byte("postgres://u:"+secret+"@h/db"), 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.dsn")
	if err := os.WriteFile(big, []byte(strings.Repeat("x", MaxDSNFile+1)), 0o600); err != nil {
		t.Fatal(err)
	}
	// A directory cannot be read as a file, even by root (chmod 000 can).
	for _, tc := range []struct{ flag, want string }{
		{"pg=postgres:postgres://u:" + secret + "@h/${TANDEM_TEST_UNSET}", "environment variable TANDEM_TEST_UNSET is not set"},
		{"pg=postgres:@" + filepath.Join(dir, "missing.dsn"), "missing.dsn: no such file"},
		{"pg=postgres:@" + dir, "is a directory"},
		{"pg=postgres:@" + empty, "is empty"},
		{"pg=postgres:@" + big, "is larger than 65536 bytes"},
		{"pg=postgres:@/dev/zero", "is larger than 65536 bytes"},
		{"pg=postgres:@", "want NAME=DRIVER:DSN or NAME=DRIVER:@FILE"},
	} {
		_, _, err := ParseRMFlag(tc.flag)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseRMFlag(%q): %v, want an error containing %q", tc.flag, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("ParseRMFlag(%q): the error shows the password: %v", tc.flag, err)
		}
	}
	if os.Geteuid() != 0 { // root reads any file
		if err := os.Chmod(unreadable, 0); err != nil {
			t.Fatal(err)
		}
		if _, _, err := ParseRMFlag("pg=postgres:@" + unreadable); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("unreadable dsn file: %v", err)
		}
	}
}

func TestLoadDSNFromEnvAndFile(t *testing.T) {
	t.Setenv("TANDEM_TEST_PW", secret)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "maria.dsn"), []byte("u:"+secret+"@tcp(127.0.0.1:3306)/db\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "tandem.yaml")
	if err := os.WriteFile(path, []byte(`rms:
  pg:    {driver: postgres, dsn: "postgres://u:${TANDEM_TEST_PW}@127.0.0.1/db"}
  maria: {driver: mysql, dsn_file: maria.dsn}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.RMs["pg"]; got.DSN != "postgres://u:"+secret+"@127.0.0.1/db" || got.DSNFile != "" {
		t.Errorf("pg: %+v", got)
	}
	// A relative dsn_file is relative to the config file's directory.
	if got := c.RMs["maria"]; got.DSN != "u:"+secret+"@tcp(127.0.0.1:3306)/db" || got.DSNFile != filepath.Join(dir, "maria.dsn") {
		t.Errorf("maria: %+v", got)
	}
	if err := c.Validate(); err != nil {
		t.Error(err)
	}
}

func TestLoadBadSecrets(t *testing.T) {
	os.Unsetenv("TANDEM_TEST_UNSET")
	for _, tc := range []struct{ name, yaml, want string }{
		{"unset variable", `rms: {pg: {driver: postgres, dsn: "postgres://u:` + secret + `@h/${TANDEM_TEST_UNSET}"}}`,
			`rm "pg": dsn: environment variable TANDEM_TEST_UNSET is not set`},
		{"missing dsn_file", `rms: {pg: {driver: postgres, dsn_file: nowhere.dsn}}`, `rm "pg": dsn_file: open `},
		{"both", `rms: {pg: {driver: postgres, dsn: "postgres://u:` + secret + `@h/db", dsn_file: x}}`, `rm "pg": set dsn or dsn_file, not both`},
		// A DSN typed where a map belongs: YAML's error would quote its start.
		{"dsn as the rm", `rms: {maria: "u:` + secret + `@tcp(h)/db"}`, "cannot unmarshal !!str (value hidden)"},
		{"dsn as max_conns", `rms: {maria: {driver: mysql, max_conns: "u:` + secret[:3] + `@tcp(h)/db"}}`, "(value hidden)"},
	} {
		path := writeFile(t, tc.yaml)
		_, err := Load(path)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Load: %v, want an error containing %q", tc.name, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), secret[:3]) {
			t.Errorf("%s: Load: the error shows the password: %v", tc.name, err)
		}
	}
}

// An expanded value is not expanded again: a password containing "${" that
// comes from the environment is taken as it is.
func TestExpandEnvOnce(t *testing.T) {
	t.Setenv("TANDEM_TEST_DSN", "postgres://u:a${B}c@h/db")
	got, err := ExpandEnv("${TANDEM_TEST_DSN}")
	if err != nil || got != "postgres://u:a${B}c@h/db" {
		t.Fatalf("ExpandEnv = %q, %v", got, err)
	}
}
