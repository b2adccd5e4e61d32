package e2e

import (
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tandem-tx/tandem/api"
)

// withPassword returns a postgres:// URL DSN with its password replaced.
func withPassword(t *testing.T, dsn, pw string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil || u.User == nil {
		t.Fatalf("TANDEM_PG_DSN is not a postgres:// URL with a user: %v", err)
	}
	u.User = url.UserPassword(u.User.Username(), pw)
	return u.String()
}

// DSNs given as ${VAR} (in a config file) and @FILE never reach the command
// line (ps), the coordinator reaches both databases with them, and a config
// file and a dsn_file other users can read are warned about with their mode
// and the fix.
func TestSecretsOffTheCommandLine(t *testing.T) {
	dir := t.TempDir()
	dsnFile := filepath.Join(dir, "maria.dsn")
	if err := os.WriteFile(dsnFile, []byte(myDSN+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dsnFile, 0o644); err != nil {
		t.Fatal(err)
	}
	// pg from the config file (world-readable, warned about), through ${VAR}.
	cfgFile := filepath.Join(dir, "tandem.yaml")
	if err := os.WriteFile(cfgFile, []byte("rms:\n  pg: {driver: postgres, dsn: \"${E2E_SECRET_PG_DSN}\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(cfgFile, 0o604); err != nil {
		t.Fatal(err)
	}
	c := startCoordinator(t, coordOpts{
		rms:   []string{"maria=mysql:@" + dsnFile},
		extra: []string{"--config", cfgFile},
		env:   []string{"E2E_SECRET_PG_DSN=" + pgDSN},
	})
	h, err := c.api().Health(t.Context(), &api.HealthRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range h.Rms {
		if !r.Reachable {
			t.Errorf("rm %s unreachable with its DSN from the environment or a file: %s", r.Name, r.Error)
		}
	}
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(c.cmd.Process.Pid) + "/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(cmdline), pgDSN) || strings.Contains(string(cmdline), myDSN) {
		t.Errorf("a DSN is on the command line: %q", cmdline)
	}
	log := c.out.String()
	for _, want := range []string{"level=WARN", "file=" + dsnFile, "mode=0644", "chmod 600 " + dsnFile,
		"config file " + cfgFile + " is readable by other users (mode 0604)", "chmod 600 " + cfgFile} {
		if !strings.Contains(log, want) {
			t.Errorf("no warning about the world-readable dsn_file or config file (want %q) in:\n%s", want, log)
		}
	}
}

// Bad secrets stop the start with an error that names what to fix and shows
// no password.
func TestSecretsBadInput(t *testing.T) {
	const pw = "Kp4SecretPw7Z"
	dir := t.TempDir()
	for _, tc := range []struct {
		rm, want string
	}{
		{"pg=postgres:postgres://tandem:" + pw + "@127.0.0.1:1/x?a=${E2E_SECRET_UNSET}", "environment variable E2E_SECRET_UNSET is not set"},
		{"pg=postgres:@" + filepath.Join(dir, "missing.dsn"), "missing.dsn: no such file or directory"},
	} {
		cmd := exec.Command(tandemBin, "serve", "--listen", freeAddr(t), "--admin", "", "--data-dir", t.TempDir(), "--rm", tc.rm)
		for _, kv := range os.Environ() { // unset, whatever the caller's environment holds
			if !strings.HasPrefix(kv, "E2E_SECRET_UNSET=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("serve --rm %s: %v, want a failure saying %q:\n%s", tc.rm, err, tc.want, out)
		}
		if strings.Contains(string(out), pw) {
			t.Errorf("the password is shown:\n%s", out)
		}
	}
}
