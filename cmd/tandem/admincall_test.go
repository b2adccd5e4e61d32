package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The CLI sends the admin token with a read only where the listener may need
// it: never in plaintext to a loopback address, where reads are open and
// whatever answers on the port (any local user can listen there once the
// coordinator stops) would receive it; always with a role change; over
// HTTPS (the certificate proves who answers) with reads too.
func TestAdminCallSendsTheTokenOnlyWhereNeeded(t *testing.T) {
	const tok = "0123456789abcdef0123456789abcdef"
	file := filepath.Join(t.TempDir(), "admin.token")
	if err := os.WriteFile(file, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var got []string
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.Header.Get("Authorization"))
		_, _ = w.Write([]byte("{}"))
	})
	plain := httptest.NewServer(h)
	defer plain.Close()
	secure := httptest.NewTLSServer(h)
	defer secure.Close()
	for _, c := range []struct {
		name   string
		srv    *httptest.Server
		scheme string
		method string
		want   string
	}{
		{"a read in plaintext on loopback", plain, "http", http.MethodGet, "GET "},
		{"a role change in plaintext on loopback", plain, "http", http.MethodPost, "POST Bearer " + tok},
		{"a read over HTTPS", secure, "https", http.MethodGet, "GET Bearer " + tok},
	} {
		got = nil
		ac := &adminClient{http: c.srv.Client(), scheme: c.scheme, tokenFile: file}
		addr := strings.TrimPrefix(strings.TrimPrefix(c.srv.URL, "http://"), "https://")
		if err := ac.call(context.Background(), c.method, addr, "/standby", nil); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if len(got) != 1 || got[0] != c.want {
			t.Errorf("%s: the listener saw %q, want %q", c.name, got, c.want)
		}
	}
}
