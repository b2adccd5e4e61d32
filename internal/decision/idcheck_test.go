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

// refusedAndNothingCommitted checks that err is the refusal want and that
// c committed nothing.
func (c *cp) refusedAndNothingCommitted(t *testing.T, ctx context.Context, err error, want, what string) {
	t.Helper()
	if why, ok := Refused(err); !ok || why != want {
		t.Fatalf("%s: %v (refused %v %q), want %q", what, err, ok, why, want)
	}
	c.exec(t, ctx, "ROLLBACK")
	if c.e.rowVisible(t, c.row) || c.e.decisionRows(t, c.g) != 0 {
		t.Fatalf("%s: the refused commit committed something", what)
	}
}

// On MariaDB, AddIDCheck gives the decision table a reference to its id (a
// foreign key): ReadIDChecked says so, and a commit point that names the
// id it expects in that column commits without the id table's subquery,
// while one that expects another id, or runs on a session with
// foreign-key checks off, is refused by the database and commits nothing.
// PostgreSQL keeps the subquery (its check also places the id row beside
// the decision table on the search path).
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
		bad.refusedAndNothingCommitted(t, ctx, bad.checkedCommit(ctx, xid.NewOwner()), RefusedWrongTable, "checked commit expecting another id")

		off := e.beginCP(t, ctx)
		off.exec(t, ctx, "SET SESSION foreign_key_checks = 0")
		off.refusedAndNothingCommitted(t, ctx, off.checkedCommit(ctx, xid.NewOwner()), RefusedUnchecked, "checked commit on a session with foreign_key_checks = 0")
	})
}

// The id row cannot change under the decisions that name it: with a
// decision row in the table, the id table refuses an UPDATE or DELETE of
// its row. And a table whose id was replaced while it had no rows (the
// only way to re-key it) refuses a commit point that still expects the old
// id: the reference compares with the id table, not with a copy.
func TestTheIDCannotChangeUnderItsDecisions(t *testing.T) {
	forEachDB(t, func(t *testing.T, e *dbEnv) {
		if e.d != rm.MySQL {
			t.Skip("MariaDB only")
		}
		ctx := testCtx(t)
		c := e.beginCP(t, ctx)
		if err := c.checkedCommit(ctx, e.id); err != nil {
			t.Fatal(err)
		}
		other := xid.NewOwner()
		for _, s := range []string{
			"UPDATE " + e.tab.id + " SET id = " + ownerLiteral(other),
			"DELETE FROM " + e.tab.id,
		} {
			if _, err := e.db.ExecContext(ctx, s); err == nil {
				t.Fatalf("%s with a decision naming the id: accepted", s)
			}
		}
		if got, err := e.tab.readID(ctx, e.db, e.d); err != nil || got != e.id {
			t.Fatalf("the id after the refused changes: %s %v, want %s", got, err, e.id)
		}

		if _, err := e.db.ExecContext(ctx, "DELETE FROM "+e.tab.name); err != nil {
			t.Fatal(err)
		}
		if _, err := e.db.ExecContext(ctx, "UPDATE "+e.tab.id+" SET id = "+ownerLiteral(other)); err != nil {
			t.Fatalf("re-keying an empty table: %v", err)
		}
		late := e.beginCP(t, ctx)
		late.refusedAndNothingCommitted(t, ctx, late.checkedCommit(ctx, e.id), RefusedWrongTable, "checked commit expecting the id the table had")

		// Writers that omit table_id (keys, older clients, the subquery
		// form) get its default, still the old id: AddIDCheck repairs it.
		if err := e.tab.addIDCheck(ctx, e.db, e.d); err != nil {
			t.Fatalf("AddIDCheck after a re-key: %v", err)
		}
		if o, err := e.tab.resolve(ctx, e.db, e.d, xid.New(), other, time.Second); err != nil || o != Aborted {
			t.Fatalf("a key after the re-key and AddIDCheck: %v %v", o, err)
		}
		sub := e.beginCP(t, ctx)
		s := e.tab.commitStatements(e.d, Commit{GTRID: sub.g, Table: other, MaxAge: time.Hour})
		if _, err := sub.conn.ExecContext(ctx, strings.Join(s, "; ")); err != nil {
			t.Fatalf("the subquery form with the new id after AddIDCheck: %v", err)
		}
	})
}

// A MariaDB decision table made before the reference (by an older Tandem,
// or the Java or Python client's DDL) refuses the checked form (no such
// column: another table than expected, as far as the form can tell) and
// gains the reference from AddIDCheck, keeping its rows; the subquery form
// and a recoverer's key still work on it afterwards (the column's default
// is the id).
func TestAddIDCheckToAnOldTable(t *testing.T) {
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
		c.refusedAndNothingCommitted(t, ctx, c.checkedCommit(ctx, e.id), RefusedWrongTable, "checked commit on an old table")

		if err := e.tab.addIDCheck(ctx, e.db, e.d); err != nil {
			t.Fatalf("AddIDCheck on an old table: %v", err)
		}
		if _, checked, err := e.tab.readIDChecked(ctx, e.db, e.d); err != nil || !checked {
			t.Fatalf("after AddIDCheck: checked %v (%v), want true", checked, err)
		}
		if err := e.tab.addIDCheck(ctx, e.db, e.d); err != nil {
			t.Fatalf("AddIDCheck again: %v", err)
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

// Adding the reference needs the tables to itself for a moment;
// AddIDCheck never waits long for an open commit point to get them: it
// gives up within its bound with an error that says what to run, leaves
// the table as it was (the subquery form works), and adds it later.
func TestAddIDCheckDoesNotWaitLong(t *testing.T) {
	forEachDB(t, func(t *testing.T, e *dbEnv) {
		if e.d != rm.MySQL {
			t.Skip("MariaDB only")
		}
		ctx := testCtx(t)
		e.dropIDCheck(t, ctx)
		open := e.beginCP(t, ctx)
		open.insertC(t, ctx)
		start := time.Now()
		err := e.tab.addIDCheck(ctx, e.db, e.d)
		if took := time.Since(start); took > 2*idCheckLockWait+3*time.Second {
			t.Fatalf("AddIDCheck waited %s for an open commit point, want at most about %s", took, 2*idCheckLockWait)
		}
		if err == nil || !strings.Contains(err.Error(), "tandem init-rm") {
			t.Fatalf("AddIDCheck while a commit point is open: %v, want an error saying what to run", err)
		}
		if _, checked, err := e.tab.readIDChecked(ctx, e.db, e.d); err != nil || checked {
			t.Fatalf("with a commit point open: checked %v (%v), want the table left as it was", checked, err)
		}
		open.exec(t, ctx, "COMMIT")
		if o, found := e.lookupMust(t, open.g); !found || o != Committed {
			t.Fatalf("the open commit point after AddIDCheck gave up: %v %v", o, found)
		}
		if err := e.tab.addIDCheck(ctx, e.db, e.d); err != nil {
			t.Fatalf("AddIDCheck with nothing open: %v", err)
		}
	})
}

// dropIDCheck makes e's table as it was before the reference existed.
func (e *dbEnv) dropIDCheck(t *testing.T, ctx context.Context) {
	t.Helper()
	for _, s := range []string{
		"ALTER TABLE " + e.tab.name + " DROP FOREIGN KEY " + e.tab.idCheckName(),
		"ALTER TABLE " + e.tab.name + " DROP COLUMN " + tableIDColumn,
		"ALTER TABLE " + e.tab.id + " DROP KEY " + e.tab.id + "_id",
	} {
		if _, err := e.db.ExecContext(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}
