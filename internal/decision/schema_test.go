package decision

import (
	"database/sql"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/xid"
)

// On PostgreSQL the decision table and its id table are each found on the
// search path, separately. A client whose search_path is "a, b", where a
// has a decision table (made by an older Tandem, before the id table) and
// b has both, wrote its 'C' into a's table while the id check read b's id
// and passed; a coordinator whose search_path is "b" took the key in b's
// table, the same id checked: both succeeded — a split. The id vouches for
// a decision table only when both are in one schema, and every statement
// that writes or reads a decision checks that too.
func TestIDAndDecisionTableInDifferentSchemasAreRefused(t *testing.T) {
	dsn := os.Getenv("TANDEM_PG_DSN")
	if dsn == "" {
		if os.Getenv("TANDEM_E2E_REQUIRED") == "1" {
			t.Fatal("TANDEM_PG_DSN is required: run scripts/db up and eval \"$(scripts/db env)\"")
		}
		t.Skip("skipping: TANDEM_PG_DSN not set")
	}
	ctx := testCtx(t)
	suffix := randHex(t)
	sa, sb := "tandem_sa_"+suffix, "tandem_sb_"+suffix
	tab := table{name: "tandem_decision_t" + suffix, id: "tandem_decision_id_t" + suffix}
	open := func(searchPath string) *sql.DB {
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		db, err := sql.Open("pgx", dsn+sep+"search_path="+searchPath)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	admin := open("public")
	for _, s := range []string{sa, sb} {
		if _, err := admin.ExecContext(ctx, "CREATE SCHEMA "+s); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if _, err := admin.Exec("DROP SCHEMA " + s + " CASCADE"); err != nil {
				t.Errorf("drop schema %s: %v", s, err)
			}
		})
	}
	coord := open(sb)
	if err := tab.ensure(ctx, coord, rm.Postgres); err != nil {
		t.Fatal(err)
	}
	id, err := tab.readID(ctx, coord, rm.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	// a's decision table only, as an older Tandem made it.
	if _, err := open(sa).ExecContext(ctx, tab.ddl(rm.Postgres)[0]); err != nil {
		t.Fatal(err)
	}
	client := open(sa + "," + sb)
	g := xid.New()
	conn, err := client.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stmts := append(BeginStatements(rm.Postgres, ""), tab.commitStatements(rm.Postgres, Commit{GTRID: g, Table: id, MaxAge: time.Hour})...)
	_, cerr := conn.ExecContext(ctx, strings.Join(stmts, "; "))
	if cerr != nil {
		_, _ = conn.ExecContext(ctx, "ROLLBACK")
	}
	o, rerr := tab.resolve(ctx, coord, rm.Postgres, g, id, time.Second)
	if cerr == nil && rerr == nil && o == Aborted {
		t.Fatalf("SPLIT: the client (search_path %s,%s) committed its decision with id %s checked, and the coordinator (search_path %s) then recorded %s for the same gtrid with the same id", sa, sb, id, sb, o)
	}
	if why, ok := Refused(cerr); !ok || why != RefusedWrongTable {
		t.Errorf("commit through a search path whose decision table is not beside its id table: %v (refused %v %q), want RefusedWrongTable", cerr, ok, why)
	}
	if _, _, err := tab.lookup(ctx, client, g, id); !errors.Is(err, ErrWrongTable) {
		t.Errorf("Lookup through that search path: %v, want ErrWrongTable", err)
	}
	if _, err := tab.readID(ctx, client, rm.Postgres); err == nil || !strings.Contains(err.Error(), sa) || !strings.Contains(err.Error(), sb) {
		t.Errorf("ReadID through that search path: %v, want an error naming both schemas", err)
	}
}

// A session's temporary table named like the decision table (pg_temp is
// searched first) is not the table the id vouches for: refused. And Lookup
// through a connection whose driver it cannot see (*sql.Conn) still checks
// (PostgreSQL) or still reads (MariaDB).
func TestTemporaryDecisionTableAndLookupThroughAConn(t *testing.T) {
	forEachDB(t, func(t *testing.T, e *dbEnv) {
		ctx := testCtx(t)
		y := e.beginCP(t, ctx)
		if err := y.commit(ctx, time.Hour, nil); err != nil {
			t.Fatal(err)
		}
		conn, err := e.db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if o, found, err := e.tab.lookup(ctx, conn, y.g, e.id); err != nil || !found || o != Committed {
			t.Fatalf("Lookup through a *sql.Conn: %v %v %v, want commit", o, found, err)
		}
		if e.d != rm.Postgres {
			return
		}
		temp := strings.Replace(e.tab.ddl(e.d)[0], "CREATE TABLE IF NOT EXISTS ", "CREATE TEMP TABLE ", 1)
		if _, err := conn.ExecContext(ctx, temp); err != nil {
			t.Fatal(err)
		}
		g := xid.New()
		stmts := append(BeginStatements(e.d, ""), e.tab.commitStatements(e.d, Commit{GTRID: g, Table: e.id, MaxAge: time.Hour})...)
		_, err = conn.ExecContext(ctx, strings.Join(stmts, "; "))
		_, _ = conn.ExecContext(ctx, "ROLLBACK")
		if why, ok := Refused(err); !ok || why != RefusedWrongTable {
			t.Errorf("commit into a session's temporary decision table: %v (refused %v %q), want RefusedWrongTable", err, ok, why)
		}
		if _, _, err := e.tab.lookup(ctx, conn, y.g, e.id); !errors.Is(err, ErrWrongTable) {
			t.Errorf("Lookup through a session with a temporary decision table: %v, want ErrWrongTable", err)
		}
	})
}

// Ensure, allowed to create tables, puts the id table beside the decision
// table the search path reaches (CREATE TABLE IF NOT EXISTS looks in the
// current schema only), so that the two are never apart after it.
func TestEnsurePutsTheIDTableBesideTheDecisionTable(t *testing.T) {
	dsn := os.Getenv("TANDEM_PG_DSN")
	if dsn == "" {
		t.Skip("skipping: TANDEM_PG_DSN not set")
	}
	ctx := testCtx(t)
	suffix := randHex(t)
	sa, sb := "tandem_sa_"+suffix, "tandem_sb_"+suffix
	tab := table{name: "tandem_decision_t" + suffix, id: "tandem_decision_id_t" + suffix}
	open := func(searchPath string) *sql.DB {
		db, err := sql.Open("pgx", dsn+map[bool]string{true: "&", false: "?"}[strings.Contains(dsn, "?")]+"search_path="+searchPath)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	admin := open("public")
	for _, s := range []string{sa, sb} {
		if _, err := admin.ExecContext(ctx, "CREATE SCHEMA "+s); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = admin.Exec("DROP SCHEMA " + s + " CASCADE") })
	}
	if _, err := open(sa).ExecContext(ctx, tab.ddl(rm.Postgres)[0]); err != nil { // the decision table only
		t.Fatal(err)
	}
	if _, err := open(sb).ExecContext(ctx, tab.ddl(rm.Postgres)[1]); err != nil { // the id table only
		t.Fatal(err)
	}
	// With "a, b", CREATE TABLE IF NOT EXISTS finds the decision table in a
	// and makes the id table in a too: the two end up side by side.
	err := tab.ensure(ctx, open(sa+","+sb), rm.Postgres)
	if err != nil {
		t.Fatalf("Ensure through %s,%s: %v (it makes the id table beside the decision table)", sa, sb, err)
	}
	if _, err := tab.readID(ctx, open(sa+","+sb), rm.Postgres); err != nil {
		t.Errorf("ReadID after Ensure: %v", err)
	}
}
