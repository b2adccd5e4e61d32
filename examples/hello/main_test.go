package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/client"
	"github.com/tandem-tx/tandem/internal/config"
	"github.com/tandem-tx/tandem/internal/server"
)

func dsns(t *testing.T) (pg, my string) {
	pg, my = os.Getenv("TANDEM_PG_DSN"), os.Getenv("TANDEM_MYSQL_DSN")
	if pg == "" || my == "" {
		if os.Getenv("TANDEM_E2E_REQUIRED") == "1" {
			t.Fatal("TANDEM_PG_DSN and TANDEM_MYSQL_DSN are required")
		}
		t.Skip("TANDEM_PG_DSN / TANDEM_MYSQL_DSN not set")
	}
	return pg, my
}

// The README's program commits one row on each database and reads both back.
func TestHelloCommitsOnBoth(t *testing.T) {
	pg, my := dsns(t)
	srv, err := server.Start(config.Config{
		Listen: "127.0.0.1:0", DataDir: t.TempDir(),
		RMs: map[string]config.RM{"pg": {Driver: "postgres", DSN: pg}, "maria": {Driver: "mysql", DSN: my}},
	}, server.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(5 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := Run(ctx, Config{PGDSN: pg, MySQLDSN: my, Coordinator: srv.Addr(), PGName: "pg", MariaName: "maria"}, &out); err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	want := regexp.MustCompile(`^committed ([0-9a-f]{32}) \(commit-point at maria, 0 coordinator calls\)
  postgres: "hello from ([0-9a-f]{32})"
  mariadb : "hello from ([0-9a-f]{32})"
$`)
	m := want.FindStringSubmatch(out.String())
	if m == nil || m[1] != m[2] || m[1] != m[3] {
		t.Fatalf("output:\n%s\nwant the committed gtrid's row on both databases", out.String())
	}
}

// Decided at the coordinator, with no coordinator, hello does not hang and
// prepares nothing: the branches are named after the coordinator's cluster,
// which the SDK asks the coordinator (Health) before anything is prepared, so
// an unreachable coordinator rolls the transaction back on both databases, and
// the error names the address.
func TestHelloWithoutACoordinatorSaysWhatToDo(t *testing.T) {
	pg, my := dsns(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	err = Run(ctx, Config{PGDSN: pg, MySQLDSN: my, Coordinator: addr, PGName: "pg", MariaName: "maria", DecideAt: client.DecideAtCoordinator}, io.Discard)
	if !errors.Is(err, client.ErrAborted) || !strings.Contains(err.Error(), "rolled back on both databases") || !strings.Contains(err.Error(), addr) {
		t.Fatalf("Run without a coordinator: %v, want rolled back on both databases, naming %s", err, addr)
	}
}
