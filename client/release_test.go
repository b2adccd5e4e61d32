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
