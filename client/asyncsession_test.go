package client

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tandem-tx/tandem/api"
	"github.com/tandem-tx/tandem/waits"
)

// asyncCoordinator answers as the service does under visibility async: the
// durable decision in the response headers, then at once a reply with
// phase 2 pending (its own branches are committed after the reply). With
// lostReply, the call fails after the headers instead (the reply lost after
// the early decision, which the client reports as committed, phase 2
// pending).
type asyncCoordinator struct {
	fakeCoordinator
	lostReply bool
}

func (f *asyncCoordinator) Commit(ctx context.Context, req *api.CommitRequest) (*api.CommitResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if len(md.Get(api.MetadataEarlyDecision)) == 0 {
		return nil, status.Error(codes.FailedPrecondition, "the client did not ask for the early decision")
	}
	if err := grpc.SendHeader(ctx, metadata.Pairs(api.MetadataDecision, "COMMITTED")); err != nil {
		return nil, err
	}
	if f.lostReply {
		return nil, status.Error(codes.Unavailable, "connection reset after the early decision")
	}
	return &api.CommitResponse{Outcome: api.Outcome_COMMITTED, Phase2Pending: true}, nil
}

// A reply with phase 2 pending must not return the MariaDB session to the
// application before the SDK's XA COMMIT on it is answered: the session
// would still hold the prepared branch, and the application's next XA
// START on it would fail with XAER_RMFAIL. The fake MariaDB answers that
// XA COMMIT late (it is logged when answered). The same holds when the
// reply is lost after the early decision.
func TestAsyncReplyWaitsForTheSessionBoundCommit(t *testing.T) {
	t.Run("reply with phase 2 pending", func(t *testing.T) { testReplyWaitsForSessionBoundCommit(t, &asyncCoordinator{}) })
	t.Run("reply lost after the decision", func(t *testing.T) { testReplyWaitsForSessionBoundCommit(t, &asyncCoordinator{lostReply: true}) })
}

func testReplyWaitsForSessionBoundCommit(t *testing.T, f *asyncCoordinator) {
	reg := waits.NewRegistry(waits.SideClient)
	c := newClient(t, Config{Coordinator: startCoordinatorServer(t, f), Waits: reg})
	ctx := context.Background()
	tx := c.Begin()
	tx.SetOptions(CommitOptions{Visibility: VisibilityAsync, DecideAt: DecideAtCoordinator})
	pgConn, _ := fakeConnTo(t)
	myConn, maria := fakeConnTo(t)
	x := xaOwned(tx.GTRID())
	maria.slow = map[string]time.Duration{"XA COMMIT " + x: 300 * time.Millisecond}
	bp, _ := tx.Branch(ctx, "pg", pgConn)
	bm, _ := tx.Branch(ctx, "maria", myConn)
	if _, err := bp.ExecContext(ctx, "UPDATE a SET v = 1"); err != nil {
		t.Fatal(err)
	}
	if _, err := bm.ExecContext(ctx, "UPDATE b SET v = 2"); err != nil {
		t.Fatal(err)
	}
	res, err := tx.Commit(ctx)
	if err != nil || res.Path != PathTwoPhase || !res.Phase2Pending {
		t.Fatalf("Commit: %+v, %v; want two-phase, committed, phase 2 pending (the coordinator's)", res, err)
	}
	if !slices.Contains(maria.log(), "XA COMMIT "+x) {
		t.Fatalf("Commit returned the MariaDB session while it still held the prepared branch (its XA COMMIT unanswered); statements so far: %q", maria.log())
	}
	// The client commits its branch on the call's goroutine, after the early
	// decision and before reading the reply: that time is the branch's
	// wait (rm commit prepared), not the coordinator's.
	s := reg.Snapshot()
	if cp, cc := s.Get(waits.RMCommitPrepared), s.Get(waits.CoordinatorCommit); cp.Total < 300*time.Millisecond || cc.Count != 1 || cc.Total >= 300*time.Millisecond {
		t.Errorf("waits: rm commit prepared %d for %v (want at least 300ms), coordinator commit %d for %v (want 1, under 300ms: the client's commit is not the coordinator's)",
			cp.Count, cp.Total, cc.Count, cc.Total)
	}
}
