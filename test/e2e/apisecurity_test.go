package e2e

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/internal/testcerts"
)

// A real tandem serve with an admin listener and no token configured:
// DATA_DIR/admin.token is made 0600 at start; role POSTs without it get 401
// naming the file, with an Origin header 403; the CLI finds the token with
// --data-dir (or says where it is) and its call then reaches the role
// change.
func TestRoleChangesNeedTheAdminToken(t *testing.T) {
	admin := freeAddr(t)
	c := startCoordinator(t, coordOpts{extra: []string{"--admin", admin}})
	// The harness's shared token file is not used here: each data directory's own.
	c.stop()
	c.restart("TANDEM_ADMIN_TOKEN_FILE=")
	tokFile := filepath.Join(c.dataDir, "admin.token")
	fi, err := os.Stat(tokFile)
	if err != nil {
		t.Fatalf("no admin token in the data directory: %v\n%s", err, c.out.String())
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("admin token mode %v, want 0600", fi.Mode().Perm())
	}
	tok, _ := os.ReadFile(tokFile)
	for _, path := range []string{"/role/promote", "/role/demote", "/role/resume", "/role/follow?primary=127.0.0.1:1"} {
		code, body := httpPost(t, "http://"+admin+path, "")
		if code != http.StatusUnauthorized || !strings.Contains(body, tokFile) {
			t.Fatalf("POST %s without a token: %d %q; want 401 naming %s", path, code, body, tokFile)
		}
		req, _ := http.NewRequest(http.MethodPost, "http://"+admin+path, nil)
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
		req.Header.Set("Origin", "http://attacker.example")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("POST %s with Origin: %d, want 403", path, resp.StatusCode)
		}
	}
	if code, _ := httpGet(t, "http://"+admin+"/metrics"); code != 200 {
		t.Fatalf("GET /metrics on loopback: %d, want open", code)
	}
	// The CLI, run where no token is at the default path, says where it is.
	elsewhere := t.TempDir()
	follow := exec.Command(tandemBin, "follow", "--admin", admin, "--primary", "127.0.0.1:1")
	follow.Dir, follow.Env = elsewhere, append(os.Environ(), "TANDEM_ADMIN_TOKEN_FILE=")
	out, err := follow.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "admin token") || !strings.Contains(string(out), "--data-dir") {
		t.Fatalf("tandem follow without a token: %v\n%s", err, out)
	}
	// With --data-dir it reaches the role change (a primary does not follow: 409).
	follow = exec.Command(tandemBin, "follow", "--admin", admin, "--primary", "127.0.0.1:1", "--data-dir", c.dataDir)
	follow.Dir, follow.Env = elsewhere, append(os.Environ(), "TANDEM_ADMIN_TOKEN_FILE=")
	out, _ = follow.CombinedOutput()
	if !strings.Contains(string(out), "409 Conflict") || !strings.Contains(string(out), "only a demoted or fenced one follows") {
		t.Fatalf("tandem follow --data-dir: want the role check's 409\n%s", out)
	}
	if h := healthMessage(c); strings.Contains(h, "FENCED") || strings.Contains(h, "DEMOTED") {
		t.Fatalf("the role changed: %s", h)
	}
}

// Plaintext on a non-loopback address is refused at start, before anything
// listens (192.0.2.1 is a documentation address, only a configuration value
// here), with a message that says how to fix it.
func TestPlaintextOffLoopbackIsRefusedAtStart(t *testing.T) {
	tokFile := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokFile, []byte("0123456789abcdef0123456789abcdef\n"), 0o600)
	for _, c := range []struct {
		args  []string
		names string
	}{
		{[]string{"--listen", "192.0.2.1:7070", "--auth-token-file", tokFile, "--admin", ""}, "--listen 192.0.2.1:7070"},
		{[]string{"--listen", freeAddr(t), "--admin", "192.0.2.1:7071"}, "--admin 192.0.2.1:7071"},
	} {
		args := c.args
		cmd := exec.Command(tandemBin, append([]string{"serve", "--data-dir", t.TempDir(), "--rm", "pg=postgres:" + pgDSN}, args...)...)
		out, _ := cmd.CombinedOutput()
		if cmd.ProcessState.ExitCode() == 0 || !strings.Contains(string(out), c.names) || !strings.Contains(string(out), "in plaintext") ||
			!strings.Contains(string(out), "--tls-cert") || !strings.Contains(string(out), "--insecure-no-tls") {
			t.Fatalf("serve %v: exit %d\n%s", args, cmd.ProcessState.ExitCode(), out)
		}
	}
}

// A coordinator with --tls-cert, --tls-key and --tls-client-ca (mutual TLS,
// certificates made here): tandem status without TLS, or with the CA but
// no client certificate, is refused; with both it is served, as is tandem
// waits over HTTPS.
func TestMutualTLSCoordinatorAndCLI(t *testing.T) {
	ca := testcerts.NewCA(t, "tandem e2e CA")
	dir := t.TempDir()
	srv := ca.WriteFiles(t, dir, "server", "127.0.0.1", "localhost")
	cli := ca.WriteFiles(t, dir, "client", "operator")
	admin := freeAddr(t)
	c := &coordinator{t: t, addr: freeAddr(t), dataDir: t.TempDir()}
	c.args = []string{"serve", "--listen", c.addr, "--data-dir", c.dataDir, "--admin", admin,
		"--tls-cert", srv.Cert, "--tls-key", srv.Key, "--tls-client-ca", srv.CA,
		"--rm", "pg=postgres:" + pgDSN, "--rm", "maria=mysql:" + myDSN}
	c.launch()
	t.Cleanup(c.stop)

	status := func(extra ...string) (string, error) {
		out, err := exec.Command(tandemBin, append([]string{"status", "--coordinator", c.addr, "--timeout", "2s"}, extra...)...).CombinedOutput()
		return string(out), err
	}
	eventually(t, 20*time.Second, "the TLS coordinator serves tandem status with a client certificate", func() bool {
		out, err := status("--tls-ca", cli.CA, "--tls-cert", cli.Cert, "--tls-key", cli.Key)
		return err == nil && strings.Contains(out, "serving=true")
	})
	if out, err := status(); err == nil {
		t.Fatalf("plaintext tandem status was served:\n%s", out)
	}
	if out, err := status("--tls-ca", cli.CA); err == nil {
		t.Fatalf("tandem status without a client certificate was served:\n%s", out)
	}
	other := testcerts.NewCA(t, "another CA").WriteFiles(t, t.TempDir(), "x", "127.0.0.1")
	if out, err := status("--tls-ca", other.CA, "--tls-cert", cli.Cert, "--tls-key", cli.Key); err == nil || !strings.Contains(out, "certificate") {
		t.Fatalf("tandem status trusting another CA: %v\n%s", err, out)
	}
	w := exec.Command(tandemBin, "waits", "--admin", admin, "--side", "coordinator")
	w.Env = append(os.Environ(), "TANDEM_TLS_CA="+cli.CA, "TANDEM_TLS_CERT="+cli.Cert, "TANDEM_TLS_KEY="+cli.Key)
	if out, err := w.CombinedOutput(); err != nil || !strings.Contains(string(out), "coordinator") {
		t.Fatalf("tandem waits over mutual TLS (TANDEM_TLS_*): %v\n%s", err, out)
	}
	if out, err := exec.Command(tandemBin, "waits", "--admin", admin).CombinedOutput(); err == nil {
		t.Fatalf("plaintext tandem waits against the TLS admin listener was served:\n%s", out)
	}
}

func httpPost(t *testing.T, url, auth string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	return do(t, req)
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return do(t, req)
}

func do(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
