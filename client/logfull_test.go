package client

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tandem-tx/tandem/api"
)

// A coordinator whose decision log stays full refuses every Commit with
// RESOURCE_EXHAUSTED (nothing written): the SDK retries until its context
// ends, then rolls back every branch and reports ErrAborted with the
// coordinator's message.
func TestTwoPhaseLogFullRollsBack(t *testing.T) {
	const full = "decision log full: 58.0 of 64.0 MiB in use; 12 transactions unfinished"
	f := &fakeCoordinator{commit: func(*api.CommitRequest) (*api.CommitResponse, error) {
		return nil, status.Error(codes.ResourceExhausted, full)
	}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := newClient(t, Config{Coordinator: startCoordinator(t, f), DialOptions: endAfterAnswers(3, cancel)})
	tx, pg, maria := twoBranches(t, c)
	res, err := tx.Commit(ctx)
	if !errors.Is(err, ErrAborted) || errors.Is(err, ErrOutcomeUnknown) || !strings.Contains(err.Error(), full) {
		t.Fatalf("Commit: %v, want ErrAborted with the coordinator's message", err)
	}
	if commits, _ := f.counts(); commits != 3 || res.CoordinatorCalls != commits {
		t.Errorf("Commit RPCs: %d sent, %d reported; want 3 (retries until the context ended)", commits, res.CoordinatorCalls)
	}
	g := tx.GTRID()
	x := xaOwned(g)
	wantLog(t, "pg", pg, "BEGIN", "UPDATE a SET v = 1", "PREPARE TRANSACTION "+pgGID(g), "ROLLBACK PREPARED "+pgGID(g))
	wantLog(t, "maria", maria, "XA START "+x, "UPDATE b SET v = 2", "XA END "+x, "XA PREPARE "+x, "XA ROLLBACK "+x)
}

// The log frees up while the SDK retries: the transaction commits.
func TestTwoPhaseLogFullThenRoom(t *testing.T) {
	var calls atomic.Int32
	f := &fakeCoordinator{commit: func(*api.CommitRequest) (*api.CommitResponse, error) {
		if calls.Add(1) < 3 {
			return nil, status.Error(codes.ResourceExhausted, "decision log full")
		}
		return &api.CommitResponse{Outcome: api.Outcome_COMMITTED}, nil
	}}
	c := newClient(t, Config{Coordinator: startCoordinator(t, f)})
	tx, _, _ := twoBranches(t, c)
	res, err := tx.Commit(context.Background())
	if err != nil || res.CoordinatorCalls != 3 {
		t.Fatalf("Commit: %v after %d calls, want committed on the third", err, res.CoordinatorCalls)
	}
}

// Refused, but one try failed otherwise (the coordinator unreachable: it may
// have written the decision before it went): the outcome is unknown, and no
// prepared branch is touched.
func TestTwoPhaseLogFullAfterUnavailableIsUnknown(t *testing.T) {
	var calls atomic.Int32
	f := &fakeCoordinator{commit: func(*api.CommitRequest) (*api.CommitResponse, error) {
		if calls.Add(1) == 1 {
			return nil, status.Error(codes.Unavailable, "connection reset")
		}
		return nil, status.Error(codes.ResourceExhausted, "decision log full")
	}}
	c := newClient(t, Config{Coordinator: startCoordinator(t, f)})
	tx, pg, _ := twoBranches(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := tx.Commit(ctx)
	if !errors.Is(err, ErrOutcomeUnknown) || errors.Is(err, ErrAborted) {
		t.Fatalf("Commit: %v, want ErrOutcomeUnknown", err)
	}
	g := tx.GTRID()
	wantLog(t, "pg", pg, "BEGIN", "UPDATE a SET v = 1", "PREPARE TRANSACTION "+pgGID(g))
}
