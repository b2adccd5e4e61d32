package decision

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/xid"
)

// checkedCommit sends c's commit statements in the table-checked form
// (Commit.TableChecked) with the id want.
func (c *cp) checkedCommit(ctx context.Context, want xid.Owner) error {
	s := c.e.tab.commitStatements(c.e.d, Commit{GTRID: c.g, Table: want, TableChecked: true, MaxAge: time.Hour})
	_, err := c.conn.ExecContext(ctx, strings.Join(s, "; "))
	return err
}

// On MariaDB, Ensure gives the decision table its own id check (a column
// whose CHECK names the id): ReadIDChecked says so, and a commit point that
// names the id it expects in that column commits without the id table's
// subquery, while one that expects another id is refused by the table
// itself and commits nothing. PostgreSQL keeps the subquery (its check also
// places the id row beside the decision table on the search path).
func TestTableChecksItsOwnID(t *testing.T) {
	forEachDB(t, func(t *testing.T, e *dbEnv) {
		ctx := testCtx(t)
		id, checked, err := e.tab.readIDChecked(ctx, e.db, e.d)
		if err != nil || id != e.id {
			t.Fatalf("ReadIDChecked = %s %v %v, want %s", id, checked, err, e.id)
		}
		if want := e.d == rm.MySQL; checked != want {
			t.Fatalf("ReadIDChecked says the table checks its id: %v, want %v", checked, want)
		}
		if e.d != rm.MySQL {
			return
		}
		s := strings.Join(e.tab.commitStatements(e.d, Commit{GTRID: xid.New(), Table: e.id, TableChecked: true, MaxAge: time.Hour}), "; ")
		if strings.Contains(s, e.tab.id) || strings.Contains(s, "SELECT") {
			t.Fatalf("the checked form still reads the id table: %s", s)
		}

		ok := e.beginCP(t, ctx)
		if err := ok.checkedCommit(ctx, e.id); err != nil {
			t.Fatalf("checked commit with the table's id: %v", err)
		}
		if !e.rowVisible(t, ok.row) {
			t.Fatal("the checked commit did not commit the application's row")
		}
		if o, found := e.lookupMust(t, ok.g); !found || o != Committed {
			t.Fatalf("after the checked commit: %v %v, want a committed decision", o, found)
		}

		bad := e.beginCP(t, ctx)
		err = bad.checkedCommit(ctx, xid.NewOwner())
		if why, ok := Refused(err); !ok || why != RefusedWrongTable {
			t.Fatalf("checked commit expecting another id: %v (refused %v %q), want RefusedWrongTable", err, ok, why)
		}
		bad.exec(t, ctx, "ROLLBACK")
		if e.rowVisible(t, bad.row) || e.decisionRows(t, bad.g) != 0 {
			t.Fatal("the refused checked commit committed something")
		}

		// A session that turned CHECK constraints off cannot use the form.
		off := e.beginCP(t, ctx)
		off.exec(t, ctx, "SET SESSION check_constraint_checks = 0")
		err = off.checkedCommit(ctx, xid.NewOwner())
		if why, ok := Refused(err); !ok || why != RefusedUnchecked {
			t.Fatalf("checked commit on a session with check_constraint_checks = 0: %v (refused %v %q), want RefusedUnchecked", err, ok, why)
		}
		off.exec(t, ctx, "ROLLBACK")
		if e.rowVisible(t, off.row) || e.decisionRows(t, off.g) != 0 {
			t.Fatal("the refused unchecked commit committed something")
		}
	})
}

// A MariaDB decision table made before the id check (by an older Tandem, or
// the Java or Python client's DDL) refuses the checked form (it has no such
// column: another table than expected, as far as the form can tell) and
// gains the check on the next Ensure, keeping its rows; the subquery form
// and a recoverer's key still work on it afterwards (the column's default
// is the id).
func TestEnsureAddsTheIDCheckToAnOldTable(t *testing.T) {
	forEachDB(t, func(t *testing.T, e *dbEnv) {
		if e.d != rm.MySQL {
			t.Skip("MariaDB only")
		}
		ctx := testCtx(t)
		e.dropIDCheck(t, ctx)
		if _, checked, err := e.tab.readIDChecked(ctx, e.db, e.d); err != nil || checked {
			t.Fatalf("an old table: ReadIDChecked says checked %v (%v), want false", checked, err)
		}
		old := e.beginCP(t, ctx)
		if err := old.commit(ctx, time.Hour, nil); err != nil {
			t.Fatalf("the subquery form on an old table: %v", err)
		}
		c := e.beginCP(t, ctx)
		err := c.checkedCommit(ctx, e.id)
		if why, ok := Refused(err); !ok || why != RefusedWrongTable {
			t.Fatalf("checked commit on an old table: %v (refused %v %q), want RefusedWrongTable", err, ok, why)
		}
		c.exec(t, ctx, "ROLLBACK")
		if e.rowVisible(t, c.row) || e.decisionRows(t, c.g) != 0 {
			t.Fatal("the refused checked commit committed something")
		}

		if err := e.tab.ensure(ctx, e.db, e.d); err != nil {
			t.Fatalf("Ensure on an old table: %v", err)
		}
		if _, checked, err := e.tab.readIDChecked(ctx, e.db, e.d); err != nil || !checked {
			t.Fatalf("after Ensure: checked %v (%v), want true", checked, err)
		}
		if o, found := e.lookupMust(t, old.g); !found || o != Committed {
			t.Fatalf("the old row after the migration: %v %v", o, found)
		}
		again := e.beginCP(t, ctx)
		if err := again.commit(ctx, time.Hour, nil); err != nil {
			t.Fatalf("the subquery form after the migration: %v", err)
		}
		if o, err := e.tab.resolve(ctx, e.db, e.d, xid.New(), e.id, time.Second); err != nil || o != Aborted {
			t.Fatalf("a key after the migration: %v %v", o, err)
		}
		now := e.beginCP(t, ctx)
		if err := now.checkedCommit(ctx, e.id); err != nil {
			t.Fatalf("checked commit after the migration: %v", err)
		}
	})
}

// Adding the check needs the table to itself for a moment; Ensure never
// waits long for an open commit point to get it: it gives up within its
// bound, leaves the table as it was (the subquery form works), and adds the
// check on a later Ensure.
func TestEnsureDoesNotWaitLongToAddTheIDCheck(t *testing.T) {
	forEachDB(t, func(t *testing.T, e *dbEnv) {
		if e.d != rm.MySQL {
			t.Skip("MariaDB only")
		}
		ctx := testCtx(t)
		e.dropIDCheck(t, ctx)
		open := e.beginCP(t, ctx)
		open.insertC(t, ctx)
		start := time.Now()
		if err := e.tab.ensure(ctx, e.db, e.d); err != nil {
			t.Fatalf("Ensure while a commit point is open: %v", err)
		}
		if took := time.Since(start); took > idCheckLockWait+3*time.Second {
			t.Fatalf("Ensure waited %s for an open commit point, want at most about %s", took, idCheckLockWait)
		}
		if _, checked, err := e.tab.readIDChecked(ctx, e.db, e.d); err != nil || checked {
			t.Fatalf("with a commit point open: checked %v (%v), want the table left as it was", checked, err)
		}
		open.exec(t, ctx, "COMMIT")
		if o, found := e.lookupMust(t, open.g); !found || o != Committed {
			t.Fatalf("the open commit point after Ensure gave up: %v %v", o, found)
		}
		if err := e.tab.ensure(ctx, e.db, e.d); err != nil {
			t.Fatal(err)
		}
		if _, checked, err := e.tab.readIDChecked(ctx, e.db, e.d); err != nil || !checked {
			t.Fatalf("Ensure with nothing open: checked %v (%v), want true", checked, err)
		}
	})
}

// dropIDCheck makes e's table as it was before the id check existed.
func (e *dbEnv) dropIDCheck(t *testing.T, ctx context.Context) {
	t.Helper()
	if _, err := e.db.ExecContext(ctx, "ALTER TABLE "+e.tab.name+" DROP CONSTRAINT "+e.tab.idCheckName()+", DROP COLUMN "+tableIDColumn); err != nil {
		t.Fatal(err)
	}
}
