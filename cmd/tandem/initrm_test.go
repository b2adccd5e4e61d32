package main

import (
	"context"
	"database/sql"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/internal/decision"
	"github.com/tandem-tx/tandem/internal/rm"
)

// init-rm says "exists" only when the tables it reports on were there:
// with search_path "a, b" where only b has them, CREATE TABLE IF NOT EXISTS
// makes new ones in a (the first schema of the path) — a new id, which
// every party must now reach — and init-rm must say "created", not "exists".
func TestInitRMSaysCreatedForTablesMadeInTheFirstSchema(t *testing.T) {
	dsn := os.Getenv("TANDEM_PG_DSN")
	if dsn == "" {
		if os.Getenv("TANDEM_E2E_REQUIRED") == "1" {
			t.Fatal("TANDEM_PG_DSN is required: run scripts/db up and eval \"$(scripts/db env)\"")
		}
		t.Skip("skipping: TANDEM_PG_DSN not set")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	suffix := time.Now().Format("150405000000")
	sa, sb := "tandem_ira_"+suffix, "tandem_irb_"+suffix
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	for _, s := range []string{sa, sb} {
		if _, err := admin.ExecContext(ctx, "CREATE SCHEMA "+s); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = admin.Exec("DROP SCHEMA " + s + " CASCADE") })
	}
	b, err := sql.Open("pgx", dsn+sep+"search_path="+sb)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := decision.Ensure(ctx, b, rm.Postgres); err != nil {
		t.Fatal(err)
	}
	bID, err := decision.ReadID(ctx, b, rm.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	table, _, err := initRM(rm.Config{Name: "pg", Driver: rm.Postgres, DSN: dsn + sep + "search_path=" + sa + "," + sb}, 20*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(table, "exists") && !strings.Contains(table, bID.String()) {
		t.Errorf("init-rm says %q: the tables that existed (schema %s) have id %s; it made new ones in %s and must say created", table, sb, bID, sa)
	}
}
