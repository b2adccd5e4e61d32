package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
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
	{"rm", []string{"--rm", "nonsense"}, `config: --rm "nonsense": want NAME=DRIVER:DSN or NAME=DRIVER:@FILE, e.g. pg=postgres:postgres://user:${PGPASSWORD}@127.0.0.1:5432/db`, ""},
	{"config file", []string{"--config", "/nonexistent/tandem-test/tandem.yaml"}, "config: open /nonexistent/tandem-test/tandem.yaml: no such file or directory", ""},
	{"log size", withRM("--log-size", "12XB"), `--log-size: size "12XB": write a number of bytes, or one with a unit like 512KiB, 64MiB or 1GiB`, ""},
	{"max send", withRM("--max-send", "x"), `--max-send: size "x": write a number of bytes, or one with a unit like 512KiB, 64MiB or 1GiB`, ""},
	{"send buffer", withRM("--socket-send-buffer", "-1"), `--socket-send-buffer: size "-1": write a number of bytes, or one with a unit like 512KiB, 64MiB or 1GiB`, ""},
	{"receive buffer", withRM("--socket-receive-buffer", "1QB"), `--socket-receive-buffer: size "1QB": write a number of bytes, or one with a unit like 512KiB, 64MiB or 1GiB`, ""},
	{"tls cert without key", withRM("--tls-cert", "/nonexistent/c.pem"), "--tls-cert, --tls-key, --tls-client-ca: tls: a server needs both a certificate and its key (--tls-cert and --tls-key)", ""},
	{"tls key without cert", withRM("--tls-key", "/nonexistent/k.pem"), "--tls-cert, --tls-key, --tls-client-ca: tls: a server needs both a certificate and its key (--tls-cert and --tls-key)", ""},
	{"auth token file", withRM("--auth-token-file", "/nonexistent/tandem-test/token"), "token file: open /nonexistent/tandem-test/token: no such file or directory", ""},
	{"standby secret file", withRM("--standby-secret-file", "/nonexistent/tandem-test/secret"), "standby secret file: open /nonexistent/tandem-test/secret: no such file or directory (make one with: tandem secret --out /nonexistent/tandem-test/secret)", ""},
	{"standby tls partial", withRM("--standby-tls-cert", "/nonexistent/c.pem"), "standby TLS needs all three of --standby-tls-cert, --standby-tls-key and --standby-tls-ca", ""},
	{"log size before token file", withRM("--log-size", "x", "--auth-token-file", "/nonexistent/t"), `--log-size: size "x": write a number of bytes, or one with a unit like 512KiB, 64MiB or 1GiB`, ""},
	{"standby auth before sizes and tls", withRM("--max-send", "x", "--tls-cert", "/nonexistent/c.pem", "--standby-secret-file", "/nonexistent/s"), "standby secret file: open /nonexistent/s: no such file or directory (make one with: tandem secret --out /nonexistent/s)", ""},
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
