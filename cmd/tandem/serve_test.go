package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testRM is a valid --rm flag; nothing dials it before the server starts.
var testRM = []string{"--rm", "pg=postgres:postgres://u@127.0.0.1:1/db"}

func withRM(args ...string) []string { return append(args, testRM...) }

// serveFlagErrors are bad flag combinations of tandem serve and the error
// each one gives (the first problem, in the order the flags are checked),
// before anything is started.
var serveFlagErrors = []struct {
	name   string
	args   []string
	err    string
	stderr string
}{
	{"extra argument", []string{"extra"}, "usage", "tandem serve: unexpected argument \"extra\"\n"},
	{"unknown flag", []string{"--nosuchflag"}, "usage", "flag provided but not defined: -nosuchflag\n"},
	{"log level", []string{"--log-level", "loud"}, `--log-level "loud": use debug, info, warn or error`, ""},
	{"otlp endpoint", withRM("--otlp-endpoint", "collector"), `--otlp-endpoint "collector": address collector: missing port in address: use HOST:PORT, http://HOST:PORT (plaintext) or https://HOST:PORT (TLS), e.g. localhost:4317`, ""},
	{"otlp endpoint scheme", withRM("--otlp-endpoint", "grpc://collector:4317"), `--otlp-endpoint "grpc://collector:4317": use HOST:PORT, http://HOST:PORT (plaintext) or https://HOST:PORT (TLS), e.g. localhost:4317`, ""},
	{"rm", []string{"--rm", "nonsense"}, `config: --rm "nonsense": want NAME=DRIVER:DSN or NAME=DRIVER:@FILE, e.g. pg=postgres:postgres://user:${PGPASSWORD}@127.0.0.1:5432/db`, ""},
	{"config file", []string{"--config", "/nonexistent/tandem-test/tandem.yaml"}, "config: open /nonexistent/tandem-test/tandem.yaml: no such file or directory", ""},
	{"log size", withRM("--log-size", "12XB"), `--log-size: size "12XB": write a number of bytes, or one with a unit like 512KiB, 64MiB or 1GiB`, ""},
	{"max send", withRM("--max-send", "x"), `--max-send: size "x": write a number of bytes, or one with a unit like 512KiB, 64MiB or 1GiB`, ""},
	{"send buffer", withRM("--socket-send-buffer", "-1"), `--socket-send-buffer: size "-1": write a number of bytes, or one with a unit like 512KiB, 64MiB or 1GiB`, ""},
	{"receive buffer", withRM("--socket-receive-buffer", "1QB"), `--socket-receive-buffer: size "1QB": write a number of bytes, or one with a unit like 512KiB, 64MiB or 1GiB`, ""},
	{"tls cert without key", withRM("--tls-cert", "/nonexistent/c.pem"), "--tls-cert, --tls-key, --tls-client-ca: tls: a server needs both a certificate and its key", ""},
	{"tls key without cert", withRM("--tls-key", "/nonexistent/k.pem"), "--tls-cert, --tls-key, --tls-client-ca: tls: a server needs both a certificate and its key", ""},
	{"auth token file", withRM("--auth-token-file", "/nonexistent/tandem-test/token"), "token file: open /nonexistent/tandem-test/token: no such file or directory", ""},
	{"standby secret file", withRM("--standby-secret-file", "/nonexistent/tandem-test/secret"), "--standby-secret-file /nonexistent/tandem-test/secret (standby.secret_file in the config file): standby secret file unreadable: open /nonexistent/tandem-test/secret: no such file or directory. To fix: make one with: tandem secret --out /nonexistent/tandem-test/secret", ""},
	{"standby tls partial", withRM("--standby-tls-cert", "/nonexistent/c.pem"), "--standby-tls-cert/--standby-tls-key/--standby-tls-ca (standby.tls_cert/tls_key/tls_ca in the config file): standby TLS needs all three: this coordinator's certificate, its key and the CA. To fix: give all three of --standby-tls-cert, --standby-tls-key and --standby-tls-ca, or none", ""},
	{"log size before token file", withRM("--log-size", "x", "--auth-token-file", "/nonexistent/t"), `--log-size: size "x": write a number of bytes, or one with a unit like 512KiB, 64MiB or 1GiB`, ""},
	{"standby auth before sizes and tls", withRM("--max-send", "x", "--tls-cert", "/nonexistent/c.pem", "--standby-secret-file", "/nonexistent/s"), "--standby-secret-file /nonexistent/s (standby.secret_file in the config file): standby secret file unreadable: open /nonexistent/s: no such file or directory. To fix: make one with: tandem secret --out /nonexistent/s", ""},
	{"sizes before tls", withRM("--max-send", "x", "--tls-cert", "/nonexistent/c.pem"), `--max-send: size "x": write a number of bytes, or one with a unit like 512KiB, 64MiB or 1GiB`, ""},
}

func checkServeFlagError(t *testing.T, err error, stderr string, want string, wantStderr string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error; want %q", want)
	}
	if err.Error() != want {
		t.Errorf("error %q\nwant  %q", err, want)
	}
	if want == "usage" && !errors.Is(err, errUsage) {
		t.Errorf("error %v is not errUsage", err)
	}
	if !strings.HasPrefix(stderr, wantStderr) {
		t.Errorf("stderr %q, want it to start with %q", stderr, wantStderr)
	}
}

// TestServeBadFlagsRefusedBeforeStart: tandem serve refuses each bad flag
// combination with its error, before it starts anything.
func TestServeBadFlagsRefusedBeforeStart(t *testing.T) {
	for _, tc := range serveFlagErrors {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			err := runServe(tc.args, &bytes.Buffer{}, &stderr)
			checkServeFlagError(t, err, stderr.String(), tc.err, tc.stderr)
		})
	}
}

// TestServeConfigRefusesBadFlags: the flags-to-config builder gives the
// same errors as tandem serve itself, once explained for the command line.
func TestServeConfigRefusesBadFlags(t *testing.T) {
	for _, tc := range serveFlagErrors {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			_, _, err := serveConfig(tc.args, &stderr)
			checkServeFlagError(t, explain(err), stderr.String(), tc.err, tc.stderr)
		})
	}
}

// TestServeConfigFlagsOverrideFile: every flag lands in the configuration
// or the server's options, a flag wins over the config file, and what no
// flag sets keeps the file's value.
func TestServeConfigFlagsOverrideFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "tandem.yaml")
	yaml := "listen: 127.0.0.1:9999\ndata_dir: /from/file\nscan_interval: 7s\nrms:\n  maria: {driver: mysql, dsn: \"u@tcp(127.0.0.1:1)/db\"}\n"
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := withRM("--config", file, "--listen", "127.0.0.1:7000", "--orphan-timeout", "90s", "--log-size", "2MiB",
		"--durability", "nowait", "--write", "batch", "--batch-window", "3ms", "--visibility", "async",
		"--auth-token-file", token, "--insecure-no-auth",
		"--standby-of", "127.0.0.1:7072", "--standby-listen", "127.0.0.1:7082", "--transport", "arch", "--max-connections", "3",
		"--net-timeout", "4s", "--arch-lag", "250ms", "--peer", "127.0.0.1:7072", "--max-send", "4MiB", "--socket-send-buffer", "1MiB",
		"--socket-receive-buffer", "2MiB", "--no-tcp-nodelay", "--admin-token-file", "/x/admin.token")
	cfg, o, err := serveConfig(args, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != "127.0.0.1:7000" || cfg.DataDir != "/from/file" || cfg.ScanInterval != 7*time.Second || cfg.OrphanTimeout != 90*time.Second {
		t.Errorf("listen %q data dir %q scan %v orphan %v: want the flag's listen and orphan timeout, the file's data dir and scan interval",
			cfg.Listen, cfg.DataDir, cfg.ScanInterval, cfg.OrphanTimeout)
	}
	if cfg.LogSize != 2<<20 || cfg.Durability != "nowait" || cfg.Write != "batch" || cfg.BatchWindow != 3*time.Millisecond || cfg.Visibility != "async" {
		t.Errorf("log size %d durability %q write %q batch window %v visibility %q", cfg.LogSize, cfg.Durability, cfg.Write, cfg.BatchWindow, cfg.Visibility)
	}
	if got := cfg.RMNames(); len(got) != 2 || got[0] != "maria" || got[1] != "pg" {
		t.Errorf("rms %v: want the file's maria and the flag's pg", got)
	}
	if o.Logger == nil || o.AuthToken != "0123456789abcdef0123" || !o.InsecureNoAuth || o.InsecureNoTLS || o.TLS != nil || o.AdminTokenFile != "/x/admin.token" {
		t.Errorf("options: logger %v token %q insecure-no-auth %v insecure-no-tls %v tls %v admin token file %q", o.Logger, o.AuthToken, o.InsecureNoAuth, o.InsecureNoTLS, o.TLS, o.AdminTokenFile)
	}
	so := o.Standby
	if so.Of != "127.0.0.1:7072" || so.Listen != "127.0.0.1:7082" || so.Transport != "arch" || so.Protection != "" || so.MaxConnections != 3 ||
		so.NetTimeout != 4*time.Second || so.ArchLag != 250*time.Millisecond || so.Peer != "127.0.0.1:7072" {
		t.Errorf("standby options %+v", so)
	}
	if so.MaxSend != 4<<20 || so.SendBuffer != 1<<20 || so.ReceiveBuffer != 2<<20 || !so.DisableNoDelay || so.Auth != nil {
		t.Errorf("standby link: max send %d buffers %d/%d no-delay off %v auth %v", so.MaxSend, so.SendBuffer, so.ReceiveBuffer, so.DisableNoDelay, so.Auth)
	}
}

// TestServeConfigAdminDefaultIsBestEffort: the default admin address is
// best effort (the coordinator starts without it if it is taken); one given
// with --admin, even the same or empty, is not.
func TestServeConfigAdminDefaultIsBestEffort(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		admin      string
		bestEffort bool
	}{
		{nil, defaultAdmin, true},
		{[]string{"--admin", defaultAdmin}, defaultAdmin, false},
		{[]string{"--admin", ""}, "", false},
	} {
		_, o, err := serveConfig(withRM(tc.args...), &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		if o.Admin != tc.admin || o.AdminBestEffort != tc.bestEffort {
			t.Errorf("%q: admin %q best effort %v, want %q %v", tc.args, o.Admin, o.AdminBestEffort, tc.admin, tc.bestEffort)
		}
	}
}

// TestServeConfigStandbyDefaults: without standby flags the link's options
// keep their flag defaults and no authentication.
func TestServeConfigStandbyDefaults(t *testing.T) {
	cfg, o, err := serveConfig(testRM, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != "" || cfg.LogSize != 0 {
		t.Errorf("listen %q log size %d: unset flags must leave the config's defaults to SetDefaults", cfg.Listen, cfg.LogSize)
	}
	so := o.Standby
	if so.NetTimeout != 10*time.Second || so.ArchLag != time.Second || so.MaxSend != 0 || so.DisableNoDelay || so.Auth != nil || so.Listen != "" || so.Of != "" {
		t.Errorf("standby options %+v", so)
	}
}

// TestServeConfigStandbyFromFile: the config file's standby: section sets
// the link (a coordinator configured from one file); a flag still wins.
func TestServeConfigStandbyFromFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "tandem.yaml")
	yaml := "rms:\n  maria: {driver: mysql, dsn: \"u@tcp(127.0.0.1:1)/db\"}\n" +
		"standby:\n  listen: 127.0.0.1:7082\n  peer: 127.0.0.1:7072\n  protection: max-protection\n  net_timeout: 3s\n  arch_lag: 400ms\n  max_connections: 2\n"
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	_, o, err := serveConfig([]string{"--config", file}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	so := o.Standby
	if so.Listen != "127.0.0.1:7082" || so.Peer != "127.0.0.1:7072" || so.Protection != "max-protection" || so.NetTimeout != 3*time.Second ||
		so.ArchLag != 400*time.Millisecond || so.MaxConnections != 2 {
		t.Errorf("standby options from the file: %+v", so)
	}
	_, o, err = serveConfig([]string{"--config", file, "--net-timeout", "10s", "--protection", "max-availability"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if so := o.Standby; so.NetTimeout != 10*time.Second || so.Protection != "max-availability" || so.Listen != "127.0.0.1:7082" {
		t.Errorf("a flag equal to its default must still win over the file: %+v", so)
	}
}

// Exporting traces is off unless --otlp-endpoint or an
// OTEL_EXPORTER_OTLP_*ENDPOINT variable is set; a bare HOST:PORT and
// http:// are plaintext, https:// is TLS.
func TestOTLPEndpoint(t *testing.T) {
	for _, v := range otlpEnv {
		t.Setenv(v, "")
	}
	if _, on, err := otlpOptions(""); on || err != nil {
		t.Errorf("no flag, no environment: on=%v err=%v, want off", on, err)
	}
	for _, flag := range []string{"localhost:4317", "http://localhost:4317", "https://collector.example:4317"} {
		if opts, on, err := otlpOptions(flag); !on || err != nil || len(opts) == 0 {
			t.Errorf("--otlp-endpoint %s: on=%v err=%v options=%d, want on", flag, on, err, len(opts))
		}
	}
	if opts, _, _ := otlpOptions("localhost:4317"); len(opts) != 2 {
		t.Errorf("--otlp-endpoint HOST:PORT: %d options, want 2 (the endpoint, plaintext)", len(opts))
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4317")
	if opts, on, err := otlpOptions(""); !on || err != nil || len(opts) != 0 {
		t.Errorf("OTEL_EXPORTER_OTLP_ENDPOINT set: on=%v err=%v options=%d, want on, the exporter reading the environment", on, err, len(opts))
	}
}
