package client

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tandem-tx/tandem/api"
)

// clientSettled maps each branch of a Commit request to its client_settles.
func clientSettled(req *api.CommitRequest) map[string]bool {
	m := map[string]bool{}
	for _, b := range req.GetBranches() {
		m[b.GetRm()] = b.GetClientSettles()
	}
	return m
}

// A coordinator whose Health says it accepts client_settles on any RM gets
// every branch as the client's under visibility sync: the client commits
// PostgreSQL's branch too, on its own connection, as raw 2PC would. Under
// visibility async the coordinator keeps it (the reply waits for no
// branch of the coordinator's).
func TestClientSettlesEveryBranchWhenTheCoordinatorAllowsIt(t *testing.T) {
	f := &fakeCoordinator{settlesAny: true, commit: func(*api.CommitRequest) (*api.CommitResponse, error) {
		return &api.CommitResponse{Outcome: api.Outcome_COMMITTED}, nil
	}}
	c := newClient(t, Config{Coordinator: startCoordinator(t, f)})

	tx, pg, maria := twoBranches(t, c)
	tx.SetOptions(CommitOptions{DecideAt: DecideAtCoordinator})
	if res, err := tx.Commit(context.Background()); err != nil || res.Path != PathTwoPhase || res.Phase2Pending {
		t.Fatalf("Commit = %+v, %v", res, err)
	}
	g := tx.GTRID()
	x := xaOwned(g)
	wantLog(t, "pg", pg, "BEGIN", "UPDATE a SET v = 1", "PREPARE TRANSACTION "+pgGID(g), "COMMIT PREPARED "+pgGID(g))
	wantLog(t, "maria", maria, "XA START "+x, "UPDATE b SET v = 2", "XA END "+x, "XA PREPARE "+x, "XA COMMIT "+x)
	if got := clientSettled(f.commits[0]); !reflect.DeepEqual(got, map[string]bool{"pg": true, "maria": true}) {
		t.Errorf("visibility sync: Commit request branches (rm → client settles) = %v, want both the client's", got)
	}

	tx, pg, _ = twoBranches(t, c)
	tx.SetOptions(CommitOptions{DecideAt: DecideAtCoordinator, Visibility: VisibilityAsync})
	if _, err := tx.Commit(context.Background()); err != nil {
		t.Fatalf("Commit (visibility async): %v", err)
	}
	g = tx.GTRID()
	wantLog(t, "pg", pg, "BEGIN", "UPDATE a SET v = 1", "PREPARE TRANSACTION "+pgGID(g))
	if got := clientSettled(f.commits[1]); !reflect.DeepEqual(got, map[string]bool{"pg": false, "maria": true}) {
		t.Errorf("visibility async: Commit request branches (rm → client settles) = %v, want only maria the client's", got)
	}
}

// A coordinator that refuses client_settles on PostgreSQL (one older than
// its Health said: replaced at the same address) refuses before writing
// anything: the client asks again the old way, and keeps doing so.
func TestARefusedClientSettlesIsAskedAgainTheOldWay(t *testing.T) {
	f := &fakeCoordinator{settlesAny: true}
	f.commit = func(req *api.CommitRequest) (*api.CommitResponse, error) {
		if clientSettled(req)["pg"] {
			return nil, status.Error(codes.InvalidArgument, `client_settles is set on the branch on "pg", a postgres resource manager whose prepared branches the coordinator settles itself`)
		}
		return &api.CommitResponse{Outcome: api.Outcome_COMMITTED}, nil
	}
	c := newClient(t, Config{Coordinator: startCoordinator(t, f)})
	tx, pg, _ := twoBranches(t, c)
	tx.SetOptions(CommitOptions{DecideAt: DecideAtCoordinator})
	res, err := tx.Commit(context.Background())
	if err != nil || res.CoordinatorCalls != 2 {
		t.Fatalf("Commit refused once by the coordinator: %+v, %v; want committed on the second call", res, err)
	}
	g := tx.GTRID()
	// PostgreSQL's branch is the coordinator's (which, a fake, leaves it).
	wantLog(t, "pg", pg, "BEGIN", "UPDATE a SET v = 1", "PREPARE TRANSACTION "+pgGID(g))
	if got := clientSettled(f.commits[1]); !reflect.DeepEqual(got, map[string]bool{"pg": false, "maria": true}) {
		t.Errorf("asked again: Commit request branches (rm → client settles) = %v, want only maria the client's", got)
	}

	tx, _, _ = twoBranches(t, c)
	tx.SetOptions(CommitOptions{DecideAt: DecideAtCoordinator})
	if res, err := tx.Commit(context.Background()); err != nil || res.CoordinatorCalls != 1 {
		t.Fatalf("the next Commit: %+v, %v; want one call", res, err)
	}
	if got := clientSettled(f.commits[2]); !reflect.DeepEqual(got, map[string]bool{"pg": false, "maria": true}) {
		t.Errorf("after the refusal: Commit request branches (rm → client settles) = %v, want only maria the client's", got)
	}

	// Another refusal (not of client_settles) rolls back, as ever.
	f.commit = func(*api.CommitRequest) (*api.CommitResponse, error) {
		return nil, status.Error(codes.InvalidArgument, "gtrid began 30s in the future")
	}
	tx, _, _ = twoBranches(t, c)
	tx.SetOptions(CommitOptions{DecideAt: DecideAtCoordinator})
	if _, err := tx.Commit(context.Background()); !errors.Is(err, ErrAborted) {
		t.Fatalf("Commit refused by the coordinator: %v, want ErrAborted", err)
	}
}

// The client's own COMMIT PREPARED fails (PostgreSQL unreachable after the
// decision): the outcome is still known, COMMITTED, with phase 2 pending:
// the branch is the coordinator's, whose check finds it prepared and
// commits it.
func TestClientSettledBranchThatFailsIsPendingNotLost(t *testing.T) {
	f := &fakeCoordinator{settlesAny: true, commit: func(*api.CommitRequest) (*api.CommitResponse, error) {
		return &api.CommitResponse{Outcome: api.Outcome_COMMITTED}, nil
	}}
	c := newClient(t, Config{Coordinator: startCoordinator(t, f)})
	tx, pg, _ := twoBranches(t, c)
	tx.SetOptions(CommitOptions{DecideAt: DecideAtCoordinator})
	g := tx.GTRID()
	pg.mu.Lock()
	pg.fail["COMMIT PREPARED "+pgGID(g)] = errors.New("connection reset by peer")
	pg.mu.Unlock()
	res, err := tx.Commit(context.Background())
	if err != nil || !res.Phase2Pending {
		t.Fatalf("Commit whose own COMMIT PREPARED failed: %+v, %v; want committed with phase 2 pending", res, err)
	}
	if got := clientSettled(f.commits[0]); !got["pg"] {
		t.Fatalf("Commit request branches (rm → client settles) = %v, want pg the client's", got)
	}
}
