package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"testing"
	"time"
)

// A short run against the real databases keeps every invariant.
func TestTransferKeepsInvariants(t *testing.T) {
	cfg := defaultConfig()
	cfg.PGDSN, cfg.MySQLDSN = os.Getenv("TANDEM_PG_DSN"), os.Getenv("TANDEM_MYSQL_DSN")
	if cfg.PGDSN == "" || cfg.MySQLDSN == "" {
		if os.Getenv("TANDEM_E2E_REQUIRED") == "1" {
			t.Fatal("TANDEM_PG_DSN and TANDEM_MYSQL_DSN are required")
		}
		t.Skip("TANDEM_PG_DSN / TANDEM_MYSQL_DSN not set")
	}
	cfg.Workers, cfg.Transfers, cfg.Accounts, cfg.DataDir = 4, 300, 50, t.TempDir()
	// Own tables and RM names: another run on the same databases cannot interfere.
	cfg.Prefix = fmt.Sprintf("t%d_", os.Getpid())
	cfg.PGName, cfg.MariaName = fmt.Sprintf("pg%d", os.Getpid()), fmt.Sprintf("maria%d", os.Getpid())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg, io.Discard)
	if err != nil {
		if rep != nil {
			rep.Print(os.Stderr)
		}
		t.Fatal(err)
	}
	if rep.Committed != 300 || rep.JournalPG != 300 || rep.JournalMySQL != 300 || rep.Total != rep.Want || rep.Dangling != 0 {
		t.Fatalf("report %+v", rep)
	}
}
