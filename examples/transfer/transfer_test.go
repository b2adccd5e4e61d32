package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/client"
	"github.com/tandem-tx/tandem/internal/config"
	"github.com/tandem-tx/tandem/internal/server"
)

// A short run against the real databases keeps every invariant, with
// PostgreSQL over database/sql and over pgx natively (--pg-driver).
func TestTransferKeepsInvariants(t *testing.T) {
	for _, driver := range []string{"sql", "pgx"} {
		t.Run(driver, func(t *testing.T) {
			cfg := dbConfig(t)
			cfg.Workers, cfg.Transfers, cfg.Accounts, cfg.DataDir, cfg.PGDriver = 4, 300, 50, t.TempDir(), driver
			// Own tables and RM names: another run on the same databases cannot interfere.
			cfg.Prefix = fmt.Sprintf("t%d%s_", os.Getpid(), driver)
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
		})
	}
}

// --check-only verifies what is there: it never recreates the tables (which
// would wipe the journal it is asked to check), and asking for both is refused.
func TestCheckOnlyNeverResets(t *testing.T) {
	cfg, err := parseFlags([]string{"--check-only"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Reset {
		t.Fatal("--check-only left --reset on: the check would recreate the tables it checks")
	}
	if _, err := parseFlags([]string{"--check-only", "--reset"}, io.Discard); err == nil || !strings.Contains(err.Error(), "--check-only") {
		t.Fatalf("--check-only --reset: got %v, want a refusal naming both flags", err)
	}
	if _, err := Run(context.Background(), Config{CheckOnly: true, Reset: true, PGDSN: "x", MySQLDSN: "y", Workers: 1, Accounts: 1}, io.Discard); err == nil || !strings.Contains(err.Error(), "Reset") {
		t.Fatalf("Run with CheckOnly and Reset: got %v, want a refusal", err)
	}
	if _, err := parseFlags([]string{"--check-only", "--reset-only"}, io.Discard); err == nil {
		t.Fatal("--check-only --reset-only: accepted, want a refusal")
	}
	if cfg, err := parseFlags([]string{"--reset-only"}, io.Discard); err != nil || !cfg.ResetOnly || !cfg.Reset {
		t.Fatalf("--reset-only: %+v, %v", cfg, err)
	}
	if cfg, err := parseFlags([]string{"--reset=false"}, io.Discard); err != nil || cfg.Reset {
		t.Fatalf("--reset=false: %+v, %v", cfg, err)
	}
	if cfg, err := parseFlags(nil, io.Discard); err != nil || !cfg.Reset {
		t.Fatalf("no flags: reset should stay on by default: %+v, %v", cfg, err)
	}
}

// A run, then a check with the command line a user types: the journal the
// run wrote is still there and checked.
func TestCheckOnlyKeepsTheJournal(t *testing.T) {
	if os.Getenv("TANDEM_PG_DSN") == "" || os.Getenv("TANDEM_MYSQL_DSN") == "" {
		if os.Getenv("TANDEM_E2E_REQUIRED") == "1" {
			t.Fatal("TANDEM_PG_DSN and TANDEM_MYSQL_DSN are required")
		}
		t.Skip("TANDEM_PG_DSN / TANDEM_MYSQL_DSN not set")
	}
	prefix := fmt.Sprintf("c%d_", os.Getpid())
	t.Cleanup(func() { dropTables(t, prefix) })
	rms := []string{"--rm-pg", fmt.Sprintf("pgc%d", os.Getpid()), "--rm-maria", fmt.Sprintf("mariac%d", os.Getpid())}
	ack := filepath.Join(t.TempDir(), "acked")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run, err := parseFlags(append([]string{"--workers", "2", "--transfers", "40", "--accounts", "20", "--prefix", prefix,
		"--data-dir", t.TempDir(), "--acked", ack}, rms...), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := Run(ctx, run, io.Discard); err != nil || rep.JournalPG != 40 {
		t.Fatalf("run: %+v, %v", rep, err)
	}
	chk, err := parseFlags(append([]string{"--check-only", "--accounts", "20", "--prefix", prefix, "--acked", ack}, rms...), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Run(ctx, chk, io.Discard)
	if err != nil {
		t.Fatalf("check: %v (report %+v)", err, rep)
	}
	if rep.JournalPG != 40 || rep.JournalMySQL != 40 {
		t.Fatalf("after --check-only the journals hold %d (postgres) and %d (mariadb) rows, want the run's 40: the check recreated the tables", rep.JournalPG, rep.JournalMySQL)
	}
	// --reset-only is how a fresh start is asked for (the chaos test's setup).
	reset, err := parseFlags([]string{"--reset-only", "--accounts", "20", "--prefix", prefix}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := Run(ctx, reset, io.Discard); rep != nil || err != nil {
		t.Fatalf("--reset-only: %+v, %v", rep, err)
	}
	chk.AckFile = ""
	if rep, err := Run(ctx, chk, io.Discard); err != nil || rep.JournalPG != 0 || rep.Total != rep.Want {
		t.Fatalf("check after --reset-only: %+v, %v", rep, err)
	}
}

// dropTables removes a run's tables from both databases.
func dropTables(t *testing.T, prefix string) {
	for _, db := range []struct{ driver, dsn string }{{"pgx", os.Getenv("TANDEM_PG_DSN")}, {"mysql", os.Getenv("TANDEM_MYSQL_DSN")}} {
		h, err := sql.Open(db.driver, db.dsn)
		if err != nil {
			t.Errorf("drop the test tables: %v", err)
			continue
		}
		for _, tbl := range []string{prefix + "accounts", prefix + "transfer_journal"} {
			if _, err := h.Exec("DROP TABLE IF EXISTS " + tbl); err != nil {
				t.Errorf("drop %s: %v", tbl, err)
			}
		}
		h.Close()
	}
}

// The demo's tables have an unmistakable default prefix, and a reset never
// drops a table the demo did not create: a user's own "accounts" (here,
// one named like the demo's on each database) is left as it was, and the
// error says what to do.
func TestResetNeverDropsATableItDidNotCreate(t *testing.T) {
	if cfg, err := parseFlags(nil, io.Discard); err != nil || cfg.Prefix != "tandem_demo_" {
		t.Fatalf("default prefix %q (%v), want tandem_demo_", cfg.Prefix, err)
	}
	if os.Getenv("TANDEM_PG_DSN") == "" || os.Getenv("TANDEM_MYSQL_DSN") == "" {
		if os.Getenv("TANDEM_E2E_REQUIRED") == "1" {
			t.Fatal("TANDEM_PG_DSN and TANDEM_MYSQL_DSN are required")
		}
		t.Skip("TANDEM_PG_DSN / TANDEM_MYSQL_DSN not set")
	}
	prefix := fmt.Sprintf("u%d_", os.Getpid())
	t.Cleanup(func() { dropTables(t, prefix) })
	for _, db := range []struct{ driver, dsn string }{{"pgx", os.Getenv("TANDEM_PG_DSN")}, {"mysql", os.Getenv("TANDEM_MYSQL_DSN")}} {
		h, err := sql.Open(db.driver, db.dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		for _, q := range []string{"DROP TABLE IF EXISTS " + prefix + "accounts", "CREATE TABLE " + prefix + "accounts (id int PRIMARY KEY, owner varchar(20))",
			"INSERT INTO " + prefix + "accounts VALUES (1, 'mine')"} {
			if _, err := h.Exec(q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cfg, err := parseFlags([]string{"--reset-only", "--accounts", "5", "--prefix", prefix}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		_, err = Run(ctx, cfg, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "was not created by this demo") || !strings.Contains(err.Error(), "--prefix") {
			t.Fatalf("reset over a user's table: %v, want a refusal that says to pick another --prefix", err)
		}
		var owner string
		if err := h.QueryRow("SELECT owner FROM " + prefix + "accounts WHERE id = 1").Scan(&owner); err != nil || owner != "mine" {
			t.Fatalf("the user's table after the refused reset: %q, %v", owner, err)
		}
		if _, err := h.Exec("DROP TABLE " + prefix + "accounts"); err != nil {
			t.Fatal(err)
		}
	}
	// Tables the demo created it recreates freely.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range 2 {
		cfg, _ := parseFlags([]string{"--reset-only", "--accounts", "5", "--prefix", prefix}, io.Discard)
		if _, err := Run(ctx, cfg, io.Discard); err != nil {
			t.Fatalf("reset of the demo's own tables: %v", err)
		}
	}
}

// --coordinator with several addresses: the client finds the one that
// serves. The first listed is a port where nothing listens, so every
// transfer the coordinator decides goes through the client's move to the
// second.
func TestTransferFollowsTheListedCoordinators(t *testing.T) {
	cfg := defaultConfig()
	cfg.PGDSN, cfg.MySQLDSN = os.Getenv("TANDEM_PG_DSN"), os.Getenv("TANDEM_MYSQL_DSN")
	if cfg.PGDSN == "" || cfg.MySQLDSN == "" {
		if os.Getenv("TANDEM_E2E_REQUIRED") == "1" {
			t.Fatal("TANDEM_PG_DSN and TANDEM_MYSQL_DSN are required")
		}
		t.Skip("TANDEM_PG_DSN / TANDEM_MYSQL_DSN not set")
	}
	cfg.Workers, cfg.Transfers, cfg.Accounts = 2, 60, 20
	cfg.Prefix = fmt.Sprintf("t%dlist_", os.Getpid())
	cfg.PGName, cfg.MariaName = fmt.Sprintf("pgl%d", os.Getpid()), fmt.Sprintf("marial%d", os.Getpid())
	cfg.DecideAt = client.DecideAtCoordinator
	n := cfg.names()
	srv, err := server.Start(config.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(),
		RMs: map[string]config.RM{n.pg: {Driver: "postgres", DSN: cfg.PGDSN}, n.maria: {Driver: "mysql", DSN: cfg.MySQLDSN}}},
		server.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), AdminBestEffort: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(5 * time.Second)
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	cfg.Coordinator = deadAddr + ", " + srv.Addr()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Committed != 60 || rep.AtCommitPoint != 0 || rep.JournalPG != 60 || rep.JournalMySQL != 60 || rep.Total != rep.Want || rep.Dangling != 0 {
		t.Fatalf("through %q: report %+v; want 60 committed, decided by the coordinator at %s", cfg.Coordinator, rep, srv.Addr())
	}
	if got := coordinatorList(" a:1,, b:2 ,"); strings.Join(got, "|") != "a:1|b:2" {
		t.Errorf("coordinatorList: %q", got)
	}
}

// Statements that end a transaction, sent on the MariaDB branch by a careless
// application that ignores their errors and commits anyway (hostile.go),
// never split a transfer, at the commit point and at the coordinator alike,
// and none of those transfers is acknowledged as committed. Before the commit
// point became an XA branch, the auto run failed: 26 transfers committed on
// MariaDB only, 2 acknowledged (the coordinator's path, whose MariaDB branch
// was already XA, passed).
func TestHostileStatementsNeverSplit(t *testing.T) {
	for _, decideAt := range []client.DecideAt{client.DecideAuto, client.DecideAtCoordinator} {
		t.Run(string(decideAt), func(t *testing.T) {
			cfg := dbConfig(t)
			cfg.Workers, cfg.Transfers, cfg.Accounts, cfg.DataDir, cfg.DecideAt = 4, 200, 50, t.TempDir(), decideAt
			cfg.Hostile = 0.5
			cfg.Prefix = fmt.Sprintf("h%d%s_", os.Getpid(), decideAt)
			cfg.PGName, cfg.MariaName = fmt.Sprintf("hpg%d", os.Getpid()), fmt.Sprintf("hmaria%d", os.Getpid())
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			rep, err := Run(ctx, cfg, io.Discard)
			if rep != nil {
				rep.Print(os.Stderr)
			}
			if err != nil {
				t.Fatal(err)
			}
			if rep.HostileSent == 0 || rep.HostileCommitted != 0 || len(rep.Violations) != 0 {
				t.Fatalf("hostile statements sent %d, acknowledged %d, violations %v", rep.HostileSent, rep.HostileCommitted, rep.Violations)
			}
		})
	}
}

// dbConfig is the default configuration on the databases the environment
// names (scripts/db test-env); without them the test is skipped, or fails
// under TANDEM_E2E_REQUIRED=1.
func dbConfig(t *testing.T) Config {
	t.Helper()
	cfg := defaultConfig()
	cfg.PGDSN, cfg.MySQLDSN = os.Getenv("TANDEM_PG_DSN"), os.Getenv("TANDEM_MYSQL_DSN")
	if cfg.PGDSN == "" || cfg.MySQLDSN == "" {
		if os.Getenv("TANDEM_E2E_REQUIRED") == "1" {
			t.Fatal("TANDEM_PG_DSN and TANDEM_MYSQL_DSN are required")
		}
		t.Skip("TANDEM_PG_DSN / TANDEM_MYSQL_DSN not set")
	}
	return cfg
}
