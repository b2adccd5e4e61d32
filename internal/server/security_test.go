package server

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/internal/config"
	"github.com/tandem-tx/tandem/internal/setting"
)

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

func unreachableRMs() map[string]config.RM {
	return map[string]config.RM{"pg": {Driver: "postgres", DSN: "postgres://u:p@127.0.0.1:1/db"}}
}

// startAdmin starts a primary with an admin listener on loopback.
func startAdmin(t *testing.T, o Options) (*Server, string) {
	t.Helper()
	dir := t.TempDir()
	o.Logger, o.NoSync, o.Admin = quietLog, true, "127.0.0.1:0"
	s, err := Start(config.Config{Listen: "127.0.0.1:0", DataDir: dir, RMs: unreachableRMs()}, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(time.Second) })
	return s, dir
}

func post(t *testing.T, url string, hdr map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Role changes always need the admin token, even when the API has none: an
// unauthenticated POST is refused with 401 and told where the token is;
// with the token it reaches the role change (here refused for the role:
// 409, a primary does not resume).
func TestRolePOSTNeedsTheAdminToken(t *testing.T) {
	s, dir := startAdmin(t, Options{})
	base := "http://" + s.AdminAddr()
	tokFile := filepath.Join(dir, "admin.token")
	for _, path := range []string{"/role/promote", "/role/demote", "/role/resume", "/role/follow?primary=127.0.0.1:1"} {
		for _, auth := range []string{"", "Bearer wrong", "Bearer "} {
			code, body := post(t, base+path, map[string]string{"Authorization": auth})
			if code != http.StatusUnauthorized || !strings.Contains(body, tokFile) {
				t.Fatalf("POST %s with Authorization %q: %d %q; want 401 naming %s", path, auth, code, body, tokFile)
			}
		}
	}
	if s.Role() != RolePrimary {
		t.Fatalf("role %s after refused role changes", s.Role())
	}
	tok, err := ReadTokenFile(tokFile)
	if err != nil {
		t.Fatal(err)
	}
	if code, body := post(t, base+"/role/resume", map[string]string{"Authorization": "Bearer " + tok}); code != http.StatusConflict {
		t.Fatalf("POST /role/resume with the token: %d %q; want 409 (a primary does not resume)", code, body)
	}
}

// A request from a web page (it carries Origin) other than the console's own
// is refused before anything else, with or without the token.
func TestAdminRefusesBrowserRequests(t *testing.T) {
	s, dir := startAdmin(t, Options{})
	base := "http://" + s.AdminAddr()
	tok, _ := ReadTokenFile(filepath.Join(dir, "admin.token"))
	// The listener's own origin (the console's page) is let through: see
	// TestConsolePageRequests.
	for _, origin := range []string{"http://evil.example", "null", "http://localhost:1", "https://" + s.AdminAddr()} {
		code, body := post(t, base+"/role/demote", map[string]string{"Origin": origin, "Authorization": "Bearer " + tok})
		if code != http.StatusForbidden {
			t.Fatalf("POST /role/demote with Origin %q: %d %q; want 403", origin, code, body)
		}
		req, _ := http.NewRequest(http.MethodGet, base+"/standby", nil)
		req.Header.Set("Origin", origin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("GET /standby with Origin %q: %d; want 403", origin, resp.StatusCode)
		}
	}
	if s.Role() != RolePrimary {
		t.Fatalf("role %s after a refused demote", s.Role())
	}
}

// The admin token file is made at first start, 0600, 32 random bytes in hex,
// and kept across restarts.
func TestAdminTokenFileCreated0600(t *testing.T) {
	dir := t.TempDir()
	cfg := config.Config{Listen: "127.0.0.1:0", DataDir: dir, RMs: unreachableRMs()}
	s, err := Start(cfg, Options{Logger: quietLog, NoSync: true, Admin: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "admin.token")
	fi, err := os.Stat(path)
	if err != nil {
		_ = s.Stop(time.Second)
		t.Fatalf("no admin token file after start: %v", err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("admin token file mode %v, want 0600", fi.Mode().Perm())
	}
	first, err := ReadTokenFile(path)
	if err != nil || len(first) != 64 || strings.Trim(first, "0123456789abcdef") != "" {
		t.Errorf("admin token %q (%v): want 64 hex digits", first, err)
	}
	_ = s.Stop(time.Second)
	s, err = Start(cfg, Options{Logger: quietLog, NoSync: true, Admin: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop(time.Second)
	if again, _ := ReadTokenFile(path); again != first {
		t.Errorf("the token changed across a restart: %q then %q", first, again)
	}
}

// Plaintext on a non-loopback address is refused before anything listens.
// 192.0.2.1 (TEST-NET-1) is only a configuration value here: nothing is
// sent to it, and it is not an address of this host, so listening on it
// would fail with another error.
func TestPlaintextOffLoopbackIsRefused(t *testing.T) {
	const off = "192.0.2.1:7070"
	for _, c := range []struct {
		name string
		cfg  config.Config
		o    Options
		want setting.Name
		addr string
	}{
		{"API", config.Config{Listen: off}, Options{AuthToken: "0123456789abcdef0123"}, setting.Listen, off},
		{"admin", config.Config{Listen: "127.0.0.1:0"}, Options{Admin: "192.0.2.1:7071"}, setting.Admin, "192.0.2.1:7071"},
	} {
		c.cfg.DataDir, c.cfg.RMs = t.TempDir(), unreachableRMs()
		c.o.Logger, c.o.NoSync = quietLog, true
		s, err := Start(c.cfg, c.o)
		if err == nil {
			_ = s.Stop(time.Second)
			t.Fatalf("%s: started in plaintext off loopback", c.name)
		}
		var se *setting.Error
		if !errors.Is(err, ErrPlaintext) || !errors.As(err, &se) || se.Setting != c.want || se.Value != c.addr {
			t.Errorf("%s: error %q, want ErrPlaintext naming %s %s", c.name, err, c.want, c.addr)
		}
	}
}

func listenLoopback(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}
