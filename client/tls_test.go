package client_test

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/api"
	"github.com/tandem-tx/tandem/client"
	"github.com/tandem-tx/tandem/internal/config"
	"github.com/tandem-tx/tandem/internal/server"
	"github.com/tandem-tx/tandem/internal/testcerts"
	"github.com/tandem-tx/tandem/xid"
)

// Config.TLS reaches a coordinator that serves mutual TLS; without the
// client certificate, or trusting another CA, the call fails.
func TestConfigTLS(t *testing.T) {
	ca := testcerts.NewCA(t, "tandem test CA")
	srv, err := server.Start(config.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(),
		RMs: map[string]config.RM{"pg": {Driver: "postgres", DSN: "postgres://u:p@127.0.0.1:1/db"}}},
		server.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), NoSync: true,
			TLS: &tls.Config{Certificates: []tls.Certificate{ca.TLSCert(t, "coordinator", "127.0.0.1")},
				ClientCAs: ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(time.Second)
	status := func(cfg *tls.Config) error {
		c, err := client.New(client.Config{Coordinator: srv.Addr(), TLS: cfg, RMs: []client.RM{{Name: "pg", Driver: "postgres"}}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := c.Status(ctx, xid.New(), false)
		if err == nil && st.Outcome != api.Outcome_UNDECIDED {
			t.Fatalf("Status of a new gtrid: %v", st)
		}
		return err
	}
	other := testcerts.NewCA(t, "another CA")
	if err := status(&tls.Config{RootCAs: other.Pool(), Certificates: []tls.Certificate{ca.TLSCert(t, "app")}}); err == nil {
		t.Fatal("a client that does not trust the coordinator's CA was served")
	}
	if err := status(&tls.Config{RootCAs: ca.Pool()}); err == nil {
		t.Fatal("a client without a certificate was served by a mutual-TLS coordinator")
	}
	if err := status(&tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{ca.TLSCert(t, "app")}}); err != nil {
		t.Fatalf("a client with the CA and a certificate: %v", err)
	}
}
