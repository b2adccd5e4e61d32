package coord

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/internal/wal"
	"github.com/tandem-tx/tandem/xid"
)

// A COMMIT whose phase 2 is unfinished names a resource manager that the
// next start does not configure: Open must refuse with an error naming it,
// not start a phase-2 driver that has no connection for it.
func TestOpenRefusesUnfinishedDecisionOnAnUnconfiguredRM(t *testing.T) {
	dir := t.TempDir()
	c, err := Open(testOptions(dir))
	if err != nil {
		t.Fatal(err)
	}
	g := newGTRID()
	mustCommit(t, c, g, Committed)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	opts := testOptions(dir)
	opts.RMs = []rm.Config{rmPG}
	c, err = Open(opts)
	if err == nil {
		time.Sleep(100 * time.Millisecond) // let a phase-2 driver run into the missing RM
		c.Close()
		t.Fatal("Open without the RM of an unfinished COMMIT succeeded")
	}
	for _, want := range []string{`"maria"`, g} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Open: %v; want it to name %s", err, want)
		}
	}
	// With the RM configured again, the directory opens (Open released it).
	c = open(t, testOptions(dir))
	mustStatus(t, c, g, false, Committed)
}

// waitFor polls cond (under c.mu) until it holds or 5s pass.
func waitFor(t *testing.T, c *Coordinator, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second) // generous: a busy machine
	for {
		c.mu.Lock()
		ok := cond()
		c.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Status(resolve) aborts a gtrid prepared on pg only; its phase 2 ends at
// once. A Commit that arrives later answers ABORTED and lists prepared
// branches (maria too): the coordinator must roll those back, not leave
// them to the next scan.
func TestLateAbortedAnswerRollsBackItsBranches(t *testing.T) {
	opts := testOptions(t.TempDir())
	opts.prepared = func(_ context.Context, rm string, _ xid.Branch) (bool, error) { return rm == "pg", nil }
	opts.settle = func(_ context.Context, rm string, _ xid.Branch, _ bool) error {
		if rm == "pg" {
			return nil
		}
		return errors.New("maria is down")
	}
	c := open(t, opts)
	g := newGTRID()
	mustStatus(t, c, g, true, Aborted)
	id, _ := xid.Parse(g)
	waitFor(t, c, "the resolved ABORT ended", func() bool { return c.txns[id] != nil && c.txns[id].ended })

	mustCommit(t, c, g, Aborted)
	waitFor(t, c, "phase 2 tried the late branches", func() bool {
		for _, b := range c.txns[id].branches {
			if b.attempts == 0 {
				return false
			}
		}
		return len(c.txns[id].branches) == 2
	})
	r := mustStatus(t, c, g, false, Aborted)
	if !r.Phase2Pending {
		t.Errorf("late branches on databases that are down are not pending: %+v", r.Branches)
	}
}

// A finished COMMIT is forgotten after EndedRetention; Status with resolve
// then writes ABORT for the same gtrid (presumed abort). The log then holds
// COMMIT, END, ABORT, and the next Open must replay it.
func TestReplayOfADecisionTakenAgainAfterItWasForgotten(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(dir)
	opts.EndedRetention = time.Nanosecond
	c, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	g := newGTRID()
	mustCommit(t, c, g, Committed)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	// Phase 2 cannot finish without databases: write its END by hand.
	id, _ := xid.Parse(g)
	l, err := wal.Open(wal.Options{Dir: filepath.Join(dir, "log"), NoSync: true}, func(wal.Position, wal.Type, []byte) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(recEnd, encodeEnd(id)); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	c, err = Open(opts)
	if err != nil {
		t.Fatalf("Open after COMMIT+END: %v", err)
	}
	mustStatus(t, c, g, false, Undecided) // forgotten: ended longer ago than EndedRetention
	// Resolving a forgotten gtrid needs evidence that a branch is still
	// prepared; with every RM unreachable it refuses rather than guess ABORT.
	if _, err := c.Status(context.Background(), g, true); err == nil || !strings.Contains(err.Error(), "cannot resolve") {
		t.Fatalf("Status(resolve) of a forgotten gtrid with RMs down = %v, want a refusal", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	// An ABORT written again for it (say, a branch re-prepared by a buggy
	// client was found) must not stop the next replay.
	l, err = wal.Open(wal.Options{Dir: filepath.Join(dir, "log"), NoSync: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := decision{gtrid: id, decidedAt: time.Now(), reason: AbortResolved}
	if _, err := l.Append(recAbort, d.encode()); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	c, err = Open(opts)
	if err != nil {
		t.Fatalf("Open of a log with COMMIT, END, ABORT for one gtrid: %v", err)
	}
	defer c.Close()
	mustStatus(t, c, g, false, Aborted) // the last answer given stands
}

// Close while Commits are in flight: every Commit either decides or answers
// ErrClosed, no phase-2 driver starts after Close (goleak checks), and
// Close's bookkeeping does not race with decide (the race detector checks).
func TestCloseWhileCommitting(t *testing.T) {
	for range 5 {
		c, err := Open(testOptions(t.TempDir()))
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					_, err := c.Commit(context.Background(), newGTRID(), both, CommitMode{})
					if errors.Is(err, ErrClosed) || errors.Is(err, ErrOutcomeUnknown) {
						return
					}
					if err != nil {
						t.Errorf("Commit during Close: %v", err)
						return
					}
				}
			}()
		}
		time.Sleep(20 * time.Millisecond)
		var cwg sync.WaitGroup
		for range 2 {
			cwg.Add(1)
			go func() { defer cwg.Done(); _ = c.Close() }()
		}
		cwg.Wait()
		wg.Wait()
	}
}

// A decide whose record reached the log while Close ran must not start a
// phase-2 driver after Close stopped them all (the next Open resumes it).
func TestNoPhase2DriverStartsAfterClose(t *testing.T) {
	c, err := Open(testOptions(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	id := xid.New()
	tx := newTxn(id, Committed, 0, time.Now(), both)
	c.mu.Lock()
	c.startPhase2Locked(tx, false)
	driving := tx.driving
	c.mu.Unlock()
	if driving {
		t.Fatal("a phase-2 driver started after Close")
	}
}
