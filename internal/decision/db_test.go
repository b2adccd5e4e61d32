package decision

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/xid"
)

// These tests run against the real PostgreSQL and MariaDB that scripts/db
// starts (eval "$(scripts/db env)" sets TANDEM_PG_DSN and TANDEM_MYSQL_DSN).
// Without them they skip, unless TANDEM_E2E_REQUIRED=1 (scripts/test, CI),
// where they fail. Each test uses tables of its own, dropped at its end.

// dbEnv is one database under test, with a decision table and a scratch table
// (the application's writes) of this test's own.
type dbEnv struct {
	name    string
	d       rm.Driver
	db      *sql.DB
	tab     table
	id      xid.Owner // tab's id (ReadID after Ensure)
	scratch string
}

// forEachDB runs f on PostgreSQL and on MariaDB, each as a subtest.
func forEachDB(t *testing.T, f func(t *testing.T, e *dbEnv)) {
	t.Helper()
	for _, k := range []struct {
		name, env, driver string
		d                 rm.Driver
	}{{"postgres", "TANDEM_PG_DSN", "pgx", rm.Postgres}, {"mariadb", "TANDEM_MYSQL_DSN", "mysql", rm.MySQL}} {
		t.Run(k.name, func(t *testing.T) {
			dsn := os.Getenv(k.env)
			if dsn == "" {
				if os.Getenv("TANDEM_E2E_REQUIRED") == "1" {
					t.Fatalf("%s is required: run scripts/db up and eval \"$(scripts/db env)\"", k.env)
				}
				t.Skipf("skipping: %s not set (scripts/db up; eval \"$(scripts/db env)\")", k.env)
			}
			db, err := sql.Open(k.driver, dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			suffix := randHex(t)
			e := &dbEnv{name: k.name, d: k.d, db: db, tab: table{name: "tandem_decision_t" + suffix, id: "tandem_decision_id_t" + suffix}, scratch: "tandem_dscratch_" + suffix}
			ctx := testCtx(t)
			if err := e.tab.ensure(ctx, db, k.d); err != nil {
				t.Fatal(err)
			}
			if err := e.tab.ensure(ctx, db, k.d); err != nil {
				t.Fatalf("a second Ensure: %v", err)
			}
			if err := e.tab.addIDCheck(ctx, db, k.d); err != nil {
				t.Fatalf("AddIDCheck: %v", err)
			}
			if e.id, err = e.tab.readID(ctx, db, k.d); err != nil {
				t.Fatal(err)
			}
			if _, err := db.ExecContext(ctx, "CREATE TABLE "+e.scratch+" (id varchar(64) PRIMARY KEY)"); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				for _, tb := range []string{e.tab.name, e.tab.id, e.scratch} {
					if _, err := db.Exec("DROP TABLE IF EXISTS " + tb); err != nil {
						t.Errorf("drop %s: %v", tb, err)
					}
				}
			})
			f(t, e)
		})
	}
}

func randHex(t *testing.T) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// cp is a commit point's transaction on a connection of its own.
type cp struct {
	e    *dbEnv
	conn *sql.Conn
	g    xid.GTRID
	row  string // the application's write in it
}

// beginCP begins a commit point's transaction and writes one scratch row.
func (e *dbEnv) beginCP(t *testing.T, ctx context.Context) *cp {
	t.Helper()
	conn, err := e.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := &cp{e: e, conn: conn, g: xid.New()}
	c.row = "row-" + c.g.String()
	c.exec(t, ctx, strings.Join(BeginStatements(e.d, ""), "; "))
	c.exec(t, ctx, "INSERT INTO "+e.scratch+" (id) VALUES ('"+c.row+"')")
	return c
}

func (c *cp) exec(t *testing.T, ctx context.Context, s string) {
	t.Helper()
	if _, err := c.conn.ExecContext(ctx, s); err != nil {
		t.Fatalf("%s: %s: %v", c.e.name, s, err)
	}
}

// commit sends the commit statements in one round trip.
func (c *cp) commit(ctx context.Context, maxAge time.Duration, forget []xid.GTRID) error {
	_, err := c.conn.ExecContext(ctx, strings.Join(c.e.tab.commitStatements(c.e.d, Commit{GTRID: c.g, Table: c.e.id, MaxAge: maxAge, Forget: forget}), "; "))
	return err
}

// insertC sends the commit statements without the final COMMIT: the 'C'
// row is inserted, uncommitted, holding the key.
func (c *cp) insertC(t *testing.T, ctx context.Context) {
	t.Helper()
	s := c.e.tab.commitStatements(c.e.d, Commit{GTRID: c.g, Table: c.e.id, MaxAge: time.Hour})
	c.exec(t, ctx, strings.Join(s[:len(s)-1], "; "))
}

// rowVisible reports whether another connection sees the committed row id.
func (e *dbEnv) rowVisible(t *testing.T, id string) bool {
	t.Helper()
	var n int
	if err := e.db.QueryRow("SELECT count(*) FROM " + e.scratch + " WHERE id = '" + id + "'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// decisionRows counts g's rows.
func (e *dbEnv) decisionRows(t *testing.T, g xid.GTRID) int {
	t.Helper()
	var n int
	if err := e.db.QueryRow("SELECT count(*) FROM " + e.tab.name + " WHERE gtrid = " + literal(g)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (e *dbEnv) lookupMust(t *testing.T, g xid.GTRID) (Outcome, bool) {
	t.Helper()
	o, found, err := e.tab.lookup(context.Background(), e.db, g, e.id)
	if err != nil {
		t.Fatal(err)
	}
	return o, found
}

// waitForLockWait returns once some session is waiting for a lock in a
// statement on this test's decision table (the table name is unique to the
// test, so no other test's session matches).
func (e *dbEnv) waitForLockWait(t *testing.T, ctx context.Context) {
	t.Helper()
	q := "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%INSERT INTO " + e.tab.name + " %'"
	if e.d == rm.MySQL {
		// Without the PROCESS privilege the process list shows this user's
		// sessions, which is all of this test's. An INSERT of one row still
		// executing after the poll interval is waiting for a lock.
		q = "SELECT count(*) FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND COMMAND = 'Query' AND INFO LIKE '%INSERT INTO " + e.tab.name + " %'"
	}
	for {
		var n int
		if err := e.db.QueryRowContext(ctx, q).Scan(&n); err != nil {
			t.Fatalf("waiting for a lock wait: %v", err)
		}
		if n > 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no session waits for a lock on %s: %v", e.tab.name, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

type result struct {
	o   Outcome
	err error
	at  time.Duration
}

// resolveAsync runs Resolve in a goroutine.
func (e *dbEnv) resolveAsync(ctx context.Context, g xid.GTRID, lockTimeout time.Duration) <-chan result {
	ch := make(chan result, 1)
	start := time.Now()
	go func() {
		o, err := e.tab.resolve(ctx, e.db, e.d, g, e.id, lockTimeout)
		ch <- result{o, err, time.Since(start)}
	}()
	return ch
}

func notYet[T any](t *testing.T, ch <-chan T, what string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s returned while it should wait: %+v", what, r)
	default:
	}
}

func fmtDur(d time.Duration) string { return fmt.Sprint(d.Round(time.Millisecond)) }

// age moves the rows of gs back by d (decided_at and began_at), as if they
// had been written d ago.
func (e *dbEnv) age(t *testing.T, d time.Duration, gs ...xid.GTRID) {
	t.Helper()
	us := fmt.Sprint(d.Microseconds())
	set := "decided_at = decided_at - interval '" + us + " microseconds', began_at = began_at - interval '" + us + " microseconds'"
	if e.d == rm.MySQL {
		set = "decided_at = decided_at - INTERVAL " + us + " MICROSECOND, began_at = began_at - INTERVAL " + us + " MICROSECOND"
	}
	if _, err := e.db.Exec("UPDATE " + e.tab.name + " SET " + set + " WHERE gtrid IN " + inList(gs)); err != nil {
		t.Fatal(err)
	}
}
