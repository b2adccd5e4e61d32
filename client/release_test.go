package client

import (
	"context"
	"errors"
	"testing"
)

// A branch whose rollback failed is in a state nobody knows (its
// transaction may still be open, with the application's writes): its
// session must never go back to a pool, where the next user's COMMIT
// would commit them. The SDK closes the physical connection.
func TestAFailedRollbackClosesTheSession(t *testing.T) {
	for _, rmName := range []string{"pg", "maria"} {
		c := newClient(t, Config{})
		ctx := context.Background()
		tx := c.Begin()
		conn, db := fakeConnTo(t)
		b, _ := tx.Branch(ctx, rmName, conn)
		if _, err := b.ExecContext(ctx, "UPDATE a SET v = 1"); err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{"ROLLBACK", "XA END " + xaID(tx.GTRID()), "XA ROLLBACK " + xaID(tx.GTRID())} {
			db.fail[s] = errors.New("connection reset by peer")
		}
		if err := tx.Rollback(ctx); err == nil {
			t.Fatalf("%s: Rollback succeeded against a failing database", rmName)
		}
		db.mu.Lock()
		closed := db.closed
		db.mu.Unlock()
		if closed == 0 {
			t.Errorf("%s: the session whose rollback failed was kept (it would go back to the pool)", rmName)
		}
	}
}

// client.RM.DB whose decision table has another id than the one the
// application's connections reach would take keys and forget rows in the
// wrong table: the RM does not qualify as the commit point (here
// PostgreSQL decides instead).
func TestAPoolOnAnotherDecisionTableIsNoCommitPoint(t *testing.T) {
	pool, other := fakePool(t)
	other.tableID = fakeCluster // any other id
	c := cpClient(t, RM{Name: "pg", Driver: "postgres"}, RM{Name: "maria", Driver: "mysql", DB: pool})
	tx, _, _ := twoBranches(t, c)
	res, err := tx.Commit(context.Background())
	if err != nil || res.Path != PathCommitPoint || res.CommitPoint != "pg" {
		t.Fatalf("Commit = %+v, %v; want decided at pg (maria's pool reaches another decision table)", res, err)
	}
}
