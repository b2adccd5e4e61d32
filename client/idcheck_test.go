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
	ctx := context.Background()
	pgConn, _ := fakeConnTo(t)
	myConn, maria := fakeConnTo(t)
	maria.mu.Lock()
	maria.selfChecked = checked
	maria.mu.Unlock()
	tx = c.Begin()
	bp, err := tx.Branch(ctx, "pg", pgConn)
	if err != nil {
		t.Fatal(err)
	}
	bm, err := tx.Branch(ctx, "maria", myConn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bp.ExecContext(ctx, "UPDATE a SET v = 1"); err != nil {
		t.Fatal(err)
	}
	if _, err := bm.ExecContext(ctx, "UPDATE b SET v = 2"); err != nil {
		t.Fatal(err)
	}
	return tx, maria
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
		got := maria.log()
		if got := got[len(got)-len(want):]; strings.Join(got, "; ") != strings.Join(want, "; ") {
			t.Fatalf("maria's decision:\n got %q\nwant %q", got, want)
		}
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
		want := cpDecision(rm.MySQL, tx.GTRID(), "maria", "pg")
		got := maria.log()
		if got := got[len(got)-len(want):]; strings.Join(got, "; ") != strings.Join(want, "; ") {
			t.Fatalf("maria's decision:\n got %q\nwant %q", got, want)
		}
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
		want := cpDecision(rm.MySQL, tx2.GTRID(), "maria", "pg")
		got := maria2.log()
		if got := got[len(got)-len(want):]; strings.Join(got, "; ") != strings.Join(want, "; ") {
			t.Fatalf("after the refusal, maria's decision:\n got %q\nwant the subquery form %q", got, want)
		}
	})
}
