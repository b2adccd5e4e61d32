package decision

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/xid"
)

// Ensure, run by many processes at once, makes one id row: every caller
// reads the same id, and the id table refuses a second row.
func TestEnsureMakesOneID(t *testing.T) {
	forEachDB(t, func(t *testing.T, e *dbEnv) {
		ctx := testCtx(t)
		fresh := table{name: e.tab.name + "_n", id: e.tab.id + "_n"}
		t.Cleanup(func() {
			for _, tb := range []string{fresh.name, fresh.id} {
				_, _ = e.db.Exec("DROP TABLE IF EXISTS " + tb)
			}
		})
		var wg sync.WaitGroup
		errs := make([]error, 6)
		for i := range errs {
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = fresh.ensure(ctx, e.db, e.d) }()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("concurrent Ensure %d: %v", i, err)
			}
		}
		id, err := fresh.readID(ctx, e.db, e.d)
		if err != nil || id.IsZero() {
			t.Fatalf("ReadID = %s %v", id, err)
		}
		if err := fresh.ensure(ctx, e.db, e.d); err != nil {
			t.Fatal(err)
		}
		if again, _ := fresh.readID(ctx, e.db, e.d); again != id {
			t.Fatalf("the id changed after another Ensure: %s, then %s", id, again)
		}
		var n int
		if err := e.db.QueryRowContext(ctx, "SELECT count(*) FROM "+fresh.id).Scan(&n); err != nil || n != 1 {
			t.Fatalf("%d id rows (%v), want 1", n, err)
		}
		for _, ins := range []string{
			"INSERT INTO " + fresh.id + " (id) VALUES ('" + xid.NewOwner().String() + "')",
			"INSERT INTO " + fresh.id + " (one, id) VALUES (" + map[rm.Driver]string{rm.Postgres: "false", rm.MySQL: "2"}[e.d] + ", '" + xid.NewOwner().String() + "')",
		} {
			if _, err := e.db.ExecContext(ctx, ins); err == nil {
				t.Errorf("a second id row was accepted: %s", ins)
			}
		}
	})
}

// ReadID on a database without the id table names tandem init-rm.
func TestReadIDWithoutTheTable(t *testing.T) {
	forEachDB(t, func(t *testing.T, e *dbEnv) {
		_, err := table{name: "tandem_decision_none", id: "tandem_decision_id_none"}.readID(testCtx(t), e.db, e.d)
		if !errors.Is(err, ErrNoID) {
			t.Fatalf("ReadID without the table: %v, want ErrNoID", err)
		}
		if !strings.Contains(err.Error(), "tandem init-rm") {
			t.Fatalf("the error does not say what to do: %v", err)
		}
	})
}

// A decision table made before participants existed gains the column (its
// rows name none), and keeps its rows.
func TestEnsureMigratesAnOldTable(t *testing.T) {
	forEachDB(t, func(t *testing.T, e *dbEnv) {
		ctx := testCtx(t)
		old := table{name: e.tab.name + "_o", id: e.tab.id + "_o"}
		t.Cleanup(func() {
			for _, tb := range []string{old.name, old.id} {
				_, _ = e.db.Exec("DROP TABLE IF EXISTS " + tb)
			}
		})
		ddl := "CREATE TABLE " + old.name + " (gtrid char(32) PRIMARY KEY, outcome char(1) NOT NULL, began_at timestamptz NOT NULL, decided_at timestamptz NOT NULL DEFAULT clock_timestamp())"
		now := "clock_timestamp()"
		if e.d == rm.MySQL {
			ddl = "CREATE TABLE " + old.name + " (gtrid CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY, outcome CHAR(1) NOT NULL, began_at DATETIME(6) NOT NULL, decided_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6))) ENGINE=InnoDB"
			now = "UTC_TIMESTAMP(6)"
		}
		g := xid.New()
		for _, s := range []string{ddl, "INSERT INTO " + old.name + " (gtrid, outcome, began_at) VALUES (" + literal(g) + ", 'C', " + now + ")"} {
			if _, err := e.db.ExecContext(ctx, s); err != nil {
				t.Fatal(err)
			}
		}
		if err := old.ensure(ctx, e.db, e.d); err != nil {
			t.Fatalf("Ensure on an old table: %v", err)
		}
		rows, err := old.rows(ctx, e.db, e.d, -time.Hour)
		if err != nil || len(rows) != 1 || rows[0].GTRID != g || rows[0].Participants != "" {
			t.Fatalf("rows after the migration: %+v %v, want the old row with no participants", rows, err)
		}
		id, err := old.readID(ctx, e.db, e.d)
		if err != nil {
			t.Fatal(err)
		}
		if o, found, err := old.lookup(ctx, e.db, g, id); err != nil || !found || o != Committed {
			t.Fatalf("Lookup after the migration: %v %v %v", o, found, err)
		}
	})
}

// A connection that reaches a decision table with another id than the one
// expected is refused by the database itself: the commit point's INSERT
// (RefusedWrongTable, nothing committed), a recoverer's key (ErrWrongTable,
// nothing inserted), and a lookup (ErrWrongTable, even where a row exists).
func TestWrongTableIsRefused(t *testing.T) {
	forEachDB(t, func(t *testing.T, e *dbEnv) {
		ctx := testCtx(t)
		other := xid.NewOwner()
		c := e.beginCP(t, ctx)
		_, err := c.conn.ExecContext(ctx, strings.Join(e.tab.commitStatements(e.d, Commit{GTRID: c.g, Table: other, MaxAge: time.Hour}), "; "))
		if why, ok := Refused(err); !ok || why != RefusedWrongTable {
			t.Fatalf("commit against a table with another id: %v (refused %v %q), want RefusedWrongTable", err, ok, why)
		}
		c.exec(t, ctx, "ROLLBACK")
		if e.rowVisible(t, c.row) || e.decisionRows(t, c.g) != 0 {
			t.Fatal("the refused commit point committed something")
		}
		if _, err := e.tab.resolve(ctx, e.db, e.d, c.g, other, time.Second); !errors.Is(err, ErrWrongTable) {
			t.Fatalf("Resolve against a table with another id: %v, want ErrWrongTable", err)
		} else if !strings.Contains(err.Error(), e.id.String()) || !strings.Contains(err.Error(), other.String()) {
			t.Fatalf("the error does not name both ids: %v", err)
		}
		if n := e.decisionRows(t, c.g); n != 0 {
			t.Fatalf("Resolve against the wrong table inserted %d rows", n)
		}
		y := e.beginCP(t, ctx)
		if err := y.commit(ctx, time.Hour, nil); err != nil {
			t.Fatal(err)
		}
		if _, _, err := e.tab.lookup(ctx, e.db, y.g, other); !errors.Is(err, ErrWrongTable) {
			t.Fatalf("Lookup of a committed gtrid against another id: %v, want ErrWrongTable", err)
		}
		if _, _, err := e.tab.lookup(ctx, e.db, xid.New(), other); !errors.Is(err, ErrWrongTable) {
			t.Fatalf("Lookup of an absent gtrid against another id: %v, want ErrWrongTable", err)
		}
		if o, found, err := e.tab.lookup(ctx, e.db, y.g, e.id); err != nil || !found || o != Committed {
			t.Fatalf("Lookup with the right id: %v %v %v", o, found, err)
		}
	})
}

// A row deleted between Resolve's duplicate key and its read is an unknown
// outcome: ErrVanished, never an abort, and no 'A' is inserted after it.
func TestVanishedRowIsUnknownNotAbort(t *testing.T) {
	forEachDB(t, func(t *testing.T, e *dbEnv) {
		ctx := testCtx(t)
		c := e.beginCP(t, ctx)
		if err := c.commit(ctx, time.Hour, nil); err != nil {
			t.Fatal(err)
		}
		tab := e.tab
		tab.betweenKeyAndRead = func() {
			if _, err := e.db.Exec("DELETE FROM " + e.tab.name + " WHERE gtrid = " + literal(c.g)); err != nil {
				t.Error(err)
			}
		}
		o, err := tab.resolve(ctx, e.db, e.d, c.g, e.id, time.Second)
		if !errors.Is(err, ErrVanished) {
			t.Fatalf("Resolve of a row deleted after the duplicate key: %v %v, want ErrVanished", o, err)
		}
		if n := e.decisionRows(t, c.g); n != 0 {
			t.Fatalf("Resolve wrote %d rows after the row vanished, want none", n)
		}
	})
}

// Ensure never waits for an open commit point: on InnoDB the commit point's
// INSERT reads the id row (its participants subquery) and keeps a shared
// lock on it until its COMMIT, so an Ensure that took an exclusive lock on
// the id row would wait for it — and, queued, make every later decision and
// key wait behind it.
func TestEnsureDoesNotWaitForAnOpenCommitPoint(t *testing.T) {
	forEachDB(t, func(t *testing.T, e *dbEnv) {
		ctx := testCtx(t)
		c := e.beginCP(t, ctx)
		c.insertC(t, ctx) // its 'C' inserted, not committed
		ectx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		if err := e.tab.ensure(ectx, e.db, e.d); err != nil {
			t.Fatalf("Ensure while a commit point is open: %v", err)
		}
		r := e.resolveAsync(ctx, xid.New(), 2*time.Second)
		if got := <-r; got.err != nil || got.o != Aborted {
			t.Fatalf("a key taken for another gtrid while a commit point is open: %v %v", got.o, got.err)
		}
		c.exec(t, ctx, "COMMIT")
	})
}

// Ensure takes PostgreSQL's "already exists" of a concurrent CREATE TABLE
// IF NOT EXISTS (TestEnsureMakesOneID: type "…" already exists, 42710) as
// the race it is only when the table exists after it: a type of the
// table's name that is no table's (a domain here) is a conflict, and stays
// an error that says so.
func TestEnsureRefusesATypeOfTheTablesName(t *testing.T) {
	forEachDB(t, func(t *testing.T, e *dbEnv) {
		if e.d != rm.Postgres {
			t.Skip("PostgreSQL's row types only")
		}
		ctx := testCtx(t)
		clash := table{name: e.tab.name + "_c", id: e.tab.id + "_c"}
		if _, err := e.db.ExecContext(ctx, "CREATE DOMAIN "+clash.name+" AS int"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_, _ = e.db.Exec("DROP TABLE IF EXISTS " + clash.id)
			_, _ = e.db.Exec("DROP DOMAIN IF EXISTS " + clash.name)
		})
		err := clash.ensure(ctx, e.db, e.d)
		if err == nil || !strings.Contains(err.Error(), "already exists") {
			t.Fatalf("Ensure with a type named %s: %v, want its error", clash.name, err)
		}
	})
}
