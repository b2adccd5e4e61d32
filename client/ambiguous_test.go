package client

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tandem-tx/tandem/api"
)

// Unknown is forever: a first Commit attempt that ended without an answer
// (UNAVAILABLE: the decision may already be durable, and a promoted standby
// may commit it) makes the outcome unknown for good. A retry that is then
// refused — the coordinator is now fenced, demoted or a standby
// (FAILED_PRECONDITION), or the credential is no longer accepted — says
// nothing about the first attempt: the SDK must not roll back a single
// branch, and must hand the session-bound one over.
func TestAmbiguousAttemptThenRefusalIsUnknownAndNeverRollsBack(t *testing.T) {
	for _, refusal := range []codes.Code{codes.FailedPrecondition, codes.Unauthenticated, codes.PermissionDenied, codes.NotFound, codes.InvalidArgument, codes.Unimplemented} {
		for _, first := range []codes.Code{codes.Unavailable, codes.ResourceExhausted} {
			t.Run(first.String()+"_then_"+refusal.String(), func(t *testing.T) {
				var calls atomic.Int32
				f := &fakeCoordinator{commit: func(*api.CommitRequest) (*api.CommitResponse, error) {
					if calls.Add(1) == 1 {
						return nil, status.Error(first, "first attempt")
					}
					return nil, status.Error(refusal, "this coordinator is fenced: the primary is now 127.0.0.1:7 (epoch 2)")
				}}
				c := newClient(t, Config{Coordinator: startCoordinator(t, f)})
				tx, pg, maria := twoBranches(t, c)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_, err := tx.Commit(ctx)
				g := tx.GTRID()
				x := xaOwned(g)
				if first == codes.ResourceExhausted {
					// RESOURCE_EXHAUSTED wrote nothing: the refusal is then the
					// whole story, and rolling back is safe.
					if !errors.Is(err, ErrAborted) {
						t.Fatalf("Commit: %v, want ErrAborted (no attempt was ambiguous)", err)
					}
					return
				}
				if !errors.Is(err, ErrOutcomeUnknown) || errors.Is(err, ErrAborted) {
					t.Fatalf("Commit: %v, want ErrOutcomeUnknown after an ambiguous first attempt", err)
				}
				wantLog(t, "pg", pg, "BEGIN", "UPDATE a SET v = 1", "PREPARE TRANSACTION "+pgGID(g))
				wantLog(t, "maria", maria, "XA START "+x, "UPDATE b SET v = 2", "XA END "+x, "XA PREPARE "+x)
				maria.mu.Lock()
				closed := maria.closed
				maria.mu.Unlock()
				if closed != 1 {
					t.Errorf("the session holding maria's prepared branch was closed %d times, want 1 (handed over)", closed)
				}
				if _, aborts := f.counts(); aborts != 0 {
					t.Errorf("the SDK called Abort %d times after an ambiguous attempt", aborts)
				}
				if err := tx.Rollback(context.Background()); err != nil {
					t.Errorf("Rollback after an unknown outcome: %v", err)
				}
				wantLog(t, "pg", pg, "BEGIN", "UPDATE a SET v = 1", "PREPARE TRANSACTION "+pgGID(g))
			})
		}
	}
}
