package client

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tandem-tx/tandem/xid"
)

// Visibility async at a commit point commits the prepared branches in the
// background through each RM's pool (client.RM.DB). A pool that reaches
// another database than the branch's (another server, schema) answers
// COMMIT PREPARED with 42704 (no such prepared transaction), which must not
// be believed as "already committed": the branch is still prepared where
// it was, and forgetting the decision row would leave it to a recoverer
// that takes the key and rolls it back. The answer counts only from a
// connection whose decision-table id is the participant's; otherwise the
// row is kept and the error logged.
func TestBackgroundCommitBelievesNotFoundOnlyFromTheParticipantsTable(t *testing.T) {
	pool, other := fakePool(t)
	other.tableID = xid.Owner{0x07, 0x7e, 0x12}
	c := cpClient(t, RM{Name: "pg", Driver: "postgres", DB: pool}, RM{Name: "maria", Driver: "mysql"})
	ctx := context.Background()
	tx := c.Begin()
	tx.SetOptions(CommitOptions{Visibility: VisibilityAsync})
	pgConn, _ := fakeConnTo(t)
	myConn, _ := fakeConnTo(t)
	bp, _ := tx.Branch(ctx, "pg", pgConn)
	bm, _ := tx.Branch(ctx, "maria", myConn)
	if _, err := bm.ExecContext(ctx, "UPDATE b SET v = 2"); err != nil {
		t.Fatal(err)
	}
	if _, err := bp.ExecContext(ctx, "UPDATE a SET v = 1"); err != nil {
		t.Fatal(err)
	}
	g := tx.GTRID()
	other.mu.Lock()
	other.fail["COMMIT PREPARED "+cpGID(g, "pg", "maria")] = &pgconn.PgError{Code: "42704", Message: "prepared transaction with identifier does not exist"}
	other.mu.Unlock()
	res, err := tx.Commit(ctx)
	if err != nil || res.Path != PathCommitPoint || !res.Phase2Pending {
		t.Fatalf("Commit = %+v, %v; want committed at maria, phase 2 in the background", res, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(c.background) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the background commit did not end in 5 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	info, _ := c.rmNamed("maria")
	info.cp.mu.Lock()
	forgotten := slices.Contains(info.cp.forget, g)
	info.cp.mu.Unlock()
	if forgotten {
		t.Errorf("the decision row of %s is queued to be forgotten after a 42704 from a pool on another decision table (%v)", g, other.log())
	}
	for _, s := range other.log() {
		if strings.HasPrefix(s, "COMMIT PREPARED") {
			t.Errorf("COMMIT PREPARED sent through a pool whose decision table is not the participant's: %q", s)
		}
	}
}
