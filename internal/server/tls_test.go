package server

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/tandem-tx/tandem/api"
	"github.com/tandem-tx/tandem/internal/testcerts"
	"github.com/tandem-tx/tandem/internal/tlsconf"
)

// health calls Health over TLS with cfg; the error, if any.
func health(t *testing.T, addr string, cfg *tls.Config) error {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = api.NewCoordinatorClient(conn).Health(ctx, &api.HealthRequest{})
	return err
}

// adminGet reads /metrics over HTTPS with cfg.
func adminGet(addr string, cfg *tls.Config) (int, error) {
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 5 * time.Second}
	resp, err := c.Get("https://" + addr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// With --tls-cert/--tls-key the API and the admin listener speak TLS only:
// a client that does not trust the CA is refused, one that does is served,
// and a plaintext client gets nothing.
func TestTLSServerRefusesClientsWithoutTheCA(t *testing.T) {
	ca := testcerts.NewCA(t, "tandem test CA")
	files := ca.WriteFiles(t, t.TempDir(), "server", "127.0.0.1", "localhost")
	srvTLS, err := tlsconf.Server(tlsconf.Files{Cert: files.Cert, Key: files.Key})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := startAdmin(t, Options{TLS: srvTLS})

	other := testcerts.NewCA(t, "someone else's CA")
	if err := health(t, s.Addr(), &tls.Config{RootCAs: other.Pool()}); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("API, a client trusting another CA: %v; want UNAVAILABLE about the certificate", err)
	}
	if _, err := adminGet(s.AdminAddr(), &tls.Config{RootCAs: other.Pool()}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("admin, a client trusting another CA: %v; want a certificate error", err)
	}
	cli, err := tlsconf.Client(tlsconf.Files{CA: files.CA})
	if err != nil {
		t.Fatal(err)
	}
	if err := health(t, s.Addr(), cli); err != nil {
		t.Fatalf("API, a client trusting the CA: %v", err)
	}
	if code, err := adminGet(s.AdminAddr(), cli); err != nil || code != 200 {
		t.Fatalf("admin, a client trusting the CA: %d %v", code, err)
	}
	resp, err := http.Get("http://" + s.AdminAddr() + "/metrics")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatal("admin answered /metrics in plaintext")
		}
	}
}

// With --tls-client-ca (mutual TLS), a client without a certificate, or
// with one another CA signed, is refused by the handshake; one with a
// certificate the CA signed is served. Mutual TLS authenticates API calls,
// so it may listen off loopback without a token (checked by
// checkExposure, no listening off loopback here).
func TestMutualTLSRefusesClientsWithoutACertificate(t *testing.T) {
	ca := testcerts.NewCA(t, "tandem test CA")
	dir := t.TempDir()
	files := ca.WriteFiles(t, dir, "server", "127.0.0.1")
	clientFiles := ca.WriteFiles(t, dir, "client", "tandem-cli")
	srvTLS, err := tlsconf.Server(tlsconf.Files{Cert: files.Cert, Key: files.Key, CA: files.CA})
	if err != nil {
		t.Fatal(err)
	}
	if !tlsconf.MutualTLS(srvTLS) {
		t.Fatal("a server with a client CA is not mutual TLS")
	}
	s, _ := startAdmin(t, Options{TLS: srvTLS})

	noCert, _ := tlsconf.Client(tlsconf.Files{CA: files.CA})
	if err := health(t, s.Addr(), noCert); err == nil {
		t.Fatal("API: a client without a certificate was served")
	}
	if _, err := adminGet(s.AdminAddr(), noCert); err == nil {
		t.Fatal("admin: a client without a certificate was served")
	}
	stranger := testcerts.NewCA(t, "stranger CA")
	foreign := noCert.Clone()
	foreign.Certificates = []tls.Certificate{stranger.TLSCert(t, "intruder")}
	if err := health(t, s.Addr(), foreign); err == nil {
		t.Fatal("API: a client whose certificate another CA signed was served")
	}
	withCert, err := tlsconf.Client(tlsconf.Files{CA: files.CA, Cert: clientFiles.Cert, Key: clientFiles.Key})
	if err != nil {
		t.Fatal(err)
	}
	if err := health(t, s.Addr(), withCert); err != nil {
		t.Fatalf("API, a client with a certificate: %v", err)
	}
	if code, err := adminGet(s.AdminAddr(), withCert); err != nil || code != 200 {
		t.Fatalf("admin, a client with a certificate: %d %v", code, err)
	}
	if err := checkExposure("192.0.2.1:7070", Options{TLS: srvTLS}); err != nil {
		t.Fatalf("mutual TLS off loopback refused: %v", err)
	}
	if err := checkExposure("192.0.2.1:7070", Options{TLS: &tls.Config{}}); err == nil || !strings.Contains(err.Error(), "without authentication") {
		t.Fatalf("TLS without a token or client CA off loopback: %v; want refused for authentication", err)
	}
}

// An authenticated role change keeps its connection past the read and write
// timeouts of the admin listener: its context is not cancelled, and its
// answer is delivered.
func TestRoleChangeOutlivesTheReadTimeout(t *testing.T) {
	l := httpLimits{ReadHeader: 100 * time.Millisecond, Read: 100 * time.Millisecond, Write: 100 * time.Millisecond,
		Idle: 100 * time.Millisecond, RoleWrite: 10 * time.Second, MaxHeaderBytes: 4 << 10}
	for _, extend := range []bool{false, true} {
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if extend {
				l.extendForRole(w)
			}
			select {
			case <-time.After(400 * time.Millisecond):
				_, _ = io.WriteString(w, "done")
			case <-r.Context().Done():
				http.Error(w, "cancelled", 500)
			}
		})
		srv := l.server(h, nil, nil)
		lis := listenLoopback(t)
		go srv.Serve(lis)
		resp, err := http.Post("http://"+lis.Addr().String()+"/role/x", "", nil)
		var body string
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
		}
		_ = srv.Close()
		if extend && body != "done" {
			t.Fatalf("with extendForRole: %q, %v; want the answer", body, err)
		}
		if !extend && body == "done" {
			t.Fatalf("without extendForRole the slow handler was answered: the timeouts do not apply")
		}
	}
}

// The admin listener speaks HTTP/1.1 only, also over TLS: with HTTP/2 one
// connection could hold hundreds of answers at once (each up to a MiB of
// /console/data, kept until the write deadline by a client that does not
// read), past the connection cap's bound on memory.
func TestAdminListenerSpeaksHTTP1Only(t *testing.T) {
	ca := testcerts.NewCA(t, "tandem test CA")
	files := ca.WriteFiles(t, t.TempDir(), "server", "127.0.0.1", "localhost")
	srvTLS, err := tlsconf.Server(tlsconf.Files{Cert: files.Cert, Key: files.Key})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := startAdmin(t, Options{TLS: srvTLS})
	cfg, err := tlsconf.Client(tlsconf.Files{CA: files.CA})
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}, Timeout: 5 * time.Second}
	resp, err := c.Get("https://" + s.AdminAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 1 {
		t.Fatalf("GET /metrics over TLS offering h2: answered in %s, want HTTP/1.1", resp.Proto)
	}
	// The API, which shares the TLS configuration, still speaks gRPC (HTTP/2).
	if err := health(t, s.Addr(), cfg); err != nil {
		t.Fatalf("Health over TLS: %v", err)
	}
}
