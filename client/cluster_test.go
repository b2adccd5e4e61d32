package client

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tandem-tx/tandem/api"
	"github.com/tandem-tx/tandem/xid"
)

// oldCoordinator answers Health without naming a cluster (a coordinator
// older than owned branch names).
type oldCoordinator struct{ fakeCoordinator }

func (f *oldCoordinator) Health(context.Context, *api.HealthRequest) (*api.HealthResponse, error) {
	return &api.HealthResponse{Serving: true, Message: "role=primary epoch=1"}, nil
}

// A coordinator whose Health names no cluster cannot own the branches it
// would decide: the coordinator path is refused before anything is
// prepared, with an error that says to upgrade it.
func TestACoordinatorNamingNoClusterIsRefused(t *testing.T) {
	f := &oldCoordinator{fakeCoordinator{commit: func(*api.CommitRequest) (*api.CommitResponse, error) {
		return &api.CommitResponse{Outcome: api.Outcome_COMMITTED}, nil
	}}}
	c := newClient(t, Config{Coordinator: startCoordinator(t, f)})
	tx, pg, _ := twoBranches(t, c)
	_, err := tx.Commit(context.Background())
	if !errors.Is(err, ErrAborted) || !strings.Contains(err.Error(), "upgrade the coordinator") {
		t.Fatalf("Commit = %v, want ErrAborted saying to upgrade the coordinator", err)
	}
	if commits, _ := f.counts(); commits != 0 {
		t.Errorf("the coordinator was asked to commit %d times", commits)
	}
	wantLog(t, "pg", pg, "BEGIN", "UPDATE a SET v = 1", "ROLLBACK")
}

// Branches decided by the coordinator are named after its cluster: the
// MariaDB branch at XA START, the PostgreSQL branch at PREPARE; the
// identity is asked once.
func TestCoordinatorBranchesAreOwnedByTheCluster(t *testing.T) {
	f := &fakeCoordinator{commit: func(*api.CommitRequest) (*api.CommitResponse, error) {
		return &api.CommitResponse{Outcome: api.Outcome_COMMITTED}, nil
	}}
	c := newClient(t, Config{Coordinator: startCoordinator(t, f)})
	for range 2 {
		tx, pg, maria := twoBranches(t, c)
		if _, err := tx.Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
		g := tx.GTRID()
		wantLog(t, "pg", pg, "BEGIN", "UPDATE a SET v = 1", "PREPARE TRANSACTION '"+xid.Branch{GTRID: g, RM: "pg", Owner: fakeCluster}.PostgresGID()+"'")
		want := "XA START " + xid.Branch{GTRID: g, RM: "maria", Owner: fakeCluster}.MySQLXID()
		if got := maria.log()[0]; got != want {
			t.Errorf("maria began with %q, want an XA branch owned by the cluster", got)
		}
	}
	if s := c.Stats(); s.CoordinatorCalls != 3 {
		t.Errorf("%d coordinator calls, want 3 (one Health, two Commits)", s.CoordinatorCalls)
	}
	// Each Commit names the owner, so that a coordinator of another cluster
	// at the same address refuses it before deciding (api.MetadataOwner).
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, o := range f.owners {
		if o != fakeCluster.String() {
			t.Errorf("Commit %d named owner %q, want %s", i, o, fakeCluster)
		}
	}
}
