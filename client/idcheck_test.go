package client

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/tandem-tx/tandem/internal/decision"
	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/xid"
)

// checkedBranches is twoBranches with MariaDB's decision table checking its
// own id (decision.ReadIDChecked answers 1) when checked is true.
func checkedBranches(t *testing.T, c *Client, checked bool) (tx *Tx, maria *fakeDB) {
	t.Helper()
	tx, _, maria = twoBranchesWith(t, c, func(_, maria *fakeDB) {
		maria.mu.Lock()
		maria.selfChecked = checked
		maria.mu.Unlock()
	})
	return tx, maria
}

// wantDecision checks that maria's last statements are want.
func wantDecision(t *testing.T, maria *fakeDB, want []string) {
	t.Helper()
	got := maria.log()
	if len(got) < len(want) || strings.Join(got[len(got)-len(want):], "; ") != strings.Join(want, "; ") {
		t.Fatalf("maria's decision:\n got %q\nwant %q", got, want)
	}
}

// checkedDecision is what the commit point at maria sends to decide g when
// its table checks its own id.
func checkedDecision(g xid.GTRID) []string {
	return decision.CommitStatements(rm.MySQL, decision.Commit{GTRID: g, Table: fakeTableID, TableChecked: true, MaxAge: time.Hour,
		Participants: []decision.Participant{{RM: "pg", Table: fakeTableID}}, XA: xid.CommitPointSelf(g, "maria", fakeTableID).MySQLXID()})
}

// A MariaDB commit point whose table checks its own id decides with the
// checked form (no subquery of the id table); one whose table does not,
// with the subquery. A refusal of the checked form as the wrong table makes
// the next decision use the subquery form again, which says which it is.
func TestCommitPointUsesTheTablesOwnIDCheck(t *testing.T) {
	ctx := context.Background()
	t.Run("checked", func(t *testing.T) {
		c := cpClient(t)
		tx, maria := checkedBranches(t, c, true)
		if _, err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		want := checkedDecision(tx.GTRID())
		wantDecision(t, maria, want)
		if strings.Contains(want[0], decision.IDTableName) {
			t.Fatalf("the checked form reads the id table: %s", want[0])
		}
	})
	t.Run("not checked", func(t *testing.T) {
		c := cpClient(t)
		tx, maria := checkedBranches(t, c, false)
		if _, err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		wantDecision(t, maria, cpDecision(rm.MySQL, tx.GTRID(), "maria", "pg"))
	})
	t.Run("refused as the wrong table", func(t *testing.T) {
		c := cpClient(t)
		tx, maria := checkedBranches(t, c, true)
		maria.mu.Lock()
		maria.fail[checkedDecision(tx.GTRID())[0]] = &mysql.MySQLError{Number: 1054, Message: "Unknown column 'table_id' in 'INSERT INTO'"}
		maria.mu.Unlock()
		_, err := tx.Commit(ctx)
		if !errors.Is(err, ErrAborted) || !strings.Contains(err.Error(), decision.RefusedWrongTable) {
			t.Fatalf("Commit = %v, want ErrAborted saying %q", err, decision.RefusedWrongTable)
		}
		tx2, maria2 := checkedBranches(t, c, true)
		if _, err := tx2.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		wantDecision(t, maria2, cpDecision(rm.MySQL, tx2.GTRID(), "maria", "pg")) // the subquery form again
	})
}

// Whether a MariaDB table checks its own id is read again once the reading
// is older than selfCheckTTL, on a branch's connection before its
// transaction: a table that lost its reference since (a copy made with
// CREATE TABLE … LIKE, an online schema change) gets the subquery form,
// which the database checks, within that time instead of never. A table
// that answers with another id is not followed: the known id stays, and
// the subquery form refuses it.
func TestSelfCheckIsReadAgain(t *testing.T) {
	ctx := context.Background()
	stale := func(c *Client) {
		info := c.rms["maria"]
		info.id.mu.Lock()
		info.id.flagAt = info.id.flagAt.Add(-selfCheckTTL)
		info.id.rereadAt = info.id.rereadAt.Add(-selfCheckTTL)
		info.id.mu.Unlock()
	}
	t.Run("the reference is gone", func(t *testing.T) {
		c := cpClient(t)
		tx, maria := checkedBranches(t, c, true)
		if _, err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		wantDecision(t, maria, checkedDecision(tx.GTRID()))
		// Within the time, the reading stands.
		tx2, maria2 := checkedBranches(t, c, false)
		if _, err := tx2.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		wantDecision(t, maria2, checkedDecision(tx2.GTRID()))
		// Past it, the branch's connection is asked again: no reference.
		stale(c)
		tx3, maria3 := checkedBranches(t, c, false)
		if _, err := tx3.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		wantDecision(t, maria3, cpDecision(rm.MySQL, tx3.GTRID(), "maria", "pg"))
		// And once it is back, the checked form again (after the time).
		stale(c)
		tx4, maria4 := checkedBranches(t, c, true)
		if _, err := tx4.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		wantDecision(t, maria4, checkedDecision(tx4.GTRID()))
	})
	t.Run("refused once, never again", func(t *testing.T) {
		// A pool whose sessions run with foreign_key_checks = 0: the
		// catalog still lists the key, and a reading again must not turn
		// the checked form back on to be refused each minute.
		c := checkedClient(t)
		c.rms["maria"].forgetTableChecked()
		stale(c)
		tx2, maria2 := checkedBranches(t, c, true)
		if _, err := tx2.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		wantDecision(t, maria2, cpDecision(rm.MySQL, tx2.GTRID(), "maria", "pg"))
	})
	t.Run("a session with autocommit off is not read", func(t *testing.T) {
		// The reading would open a transaction there, and XA START would
		// fail: not read, counted as no reference.
		c := checkedClient(t)
		stale(c)
		tx2, _, maria2 := twoBranchesWith(t, c, func(_, maria *fakeDB) {
			maria.mu.Lock()
			maria.selfChecked, maria.noAutocommit = true, true
			maria.mu.Unlock()
		})
		for _, s := range maria2.log() {
			if s == decision.IDCheckedQuery(rm.MySQL) {
				t.Errorf("read on a session with autocommit off: %s", s)
			}
		}
		if c.rms["maria"].tableChecked() {
			t.Error("a session that could not be read counts as checked")
		}
		_ = tx2.Rollback(ctx)
	})
	t.Run("a failed reading counts as no reference", func(t *testing.T) {
		// The database answers the id's read with an error (down, a lost
		// privilege): the subquery form, which the database checks whatever
		// the table has, until a reading succeeds.
		c := checkedClient(t)
		stale(c)
		tx2, _, _ := twoBranchesWith(t, c, func(_, maria *fakeDB) {
			maria.mu.Lock()
			maria.selfChecked = true
			maria.rowsFail["SELECT @@autocommit, @@in_transaction"] = errors.New("connection reset by peer")
			maria.mu.Unlock()
		})
		if c.rms["maria"].tableChecked() {
			t.Error("a failed reading counts as checked")
		}
		if got := c.rms["maria"].knownTableID(); got != fakeTableID {
			t.Errorf("known id %s after a failed reading, want %s", got, fakeTableID)
		}
		_ = tx2.Rollback(ctx)
	})
	t.Run("another id", func(t *testing.T) {
		c := checkedClient(t)
		stale(c)
		other := xid.NewOwner()
		tx2, _, maria2 := twoBranchesWith(t, c, func(_, maria *fakeDB) {
			maria.mu.Lock()
			maria.selfChecked, maria.tableID = true, other
			maria.mu.Unlock()
		})
		if got := c.rms["maria"].knownTableID(); got != fakeTableID {
			t.Fatalf("known id %s after the table answered %s, want the first, %s", got, other, fakeTableID)
		}
		if c.rms["maria"].tableChecked() {
			t.Error("a table answering another id is taken as checking the known one")
		}
		_, _ = tx2.Commit(ctx)
		for _, s := range maria2.log() {
			if strings.Contains(s, "table_id") && strings.HasPrefix(s, "INSERT INTO "+decision.TableName) {
				t.Errorf("decided with the checked form at a table of another id: %s", s)
			}
		}
	})
}

// checkedClient is a commit-point client that has committed once through
// a MariaDB table checking its own id: its reading of that is fresh.
func checkedClient(t *testing.T) *Client {
	t.Helper()
	c := cpClient(t)
	tx, _ := checkedBranches(t, c, true)
	if _, err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c
}
