package coord

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/xid"
)

// preparedSet answers "is this branch prepared?" for the coordinator's
// prepared seam, and counts the questions.
type preparedSet struct {
	mu   sync.Mutex
	held map[xid.Branch]bool
	asks atomic.Int32
}

func (p *preparedSet) prepared(_ context.Context, rmName string, b xid.Branch) (bool, error) {
	p.asks.Add(1)
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held[xid.Branch{GTRID: b.GTRID, RM: rmName}], nil
}

// heldEverywhere makes every resource manager answer that it holds a
// branch of any gtrid prepared: resolve then aborts an unknown gtrid (tests
// of what a resolved ABORT does next).
func heldEverywhere(o Options) Options {
	o.prepared = func(context.Context, string, xid.Branch) (bool, error) { return true, nil }
	return o
}

// Absence of evidence is not abort. A finished COMMIT forgotten early
// (a checkpoint under log pressure drops it before EndedRetention) leaves
// no record; Status --resolve of that gtrid must not write ABORT (a client
// that asks after an unknown outcome would be told "aborted" and redo work
// that committed). It asks the resource managers, finds nothing prepared,
// and writes nothing.
func TestResolveNeverAbortsACommitForgottenEarly(t *testing.T) {
	sw := &phase2Switch{}
	sw.up.Store(true)
	const logSize = 64 << 10
	opts := circularOptions(t, logSize, sw)
	opts.EndedRetention = time.Hour // only the early forget can drop a COMMIT here
	ps := &preparedSet{held: map[xid.Branch]bool{}}
	opts.prepared = ps.prepared
	c := open(t, opts)
	var first string
	for i := 0; i < 5000 && c.Stats().ForgotEarly == 0; i++ {
		g := newGTRID()
		if first == "" {
			first = g
		}
		r, err := c.Commit(context.Background(), g, []BranchRef{{RM: rmLong.Name}}, CommitMode{WaitPhase2: true})
		if err != nil || r.Outcome != Committed || r.Phase2Pending {
			t.Fatalf("Commit %d: %v %v pending %v", i, r.Outcome, err, r.Phase2Pending)
		}
	}
	if c.Stats().ForgotEarly == 0 {
		t.Fatalf("no COMMIT was forgotten early (stats %+v): the test cannot show anything", c.Stats())
	}
	mustStatus(t, c, first, false, Undecided) // forgotten: no record
	r, err := c.Status(context.Background(), first, true)
	if err != nil {
		t.Fatalf("Status --resolve: %v", err)
	}
	if r.Outcome == Aborted {
		t.Fatalf("Status --resolve of a committed (forgotten) gtrid wrote ABORT: %s", r.Message)
	}
	if r.Outcome != Undecided || !strings.Contains(r.Message, "nothing was written") {
		t.Errorf("Status --resolve = %s (%q), want Undecided saying nothing was written", r.Outcome, r.Message)
	}
	if ps.asks.Load() == 0 {
		t.Errorf("resolve did not ask the resource managers")
	}
	mustStatus(t, c, first, false, Undecided)
}

// Resolve still settles what it can prove undecided: a branch prepared
// somewhere with no decision → ABORT, and the branch is rolled back.
func TestResolveAbortsAPreparedUndecidedBranch(t *testing.T) {
	opts := testOptions(t.TempDir())
	ps := &preparedSet{held: map[xid.Branch]bool{}}
	opts.prepared = ps.prepared
	c := open(t, opts)
	g := xid.New()
	ps.held[xid.Branch{GTRID: g, RM: "pg"}] = true
	r := mustStatus(t, c, g.String(), true, Aborted)
	if len(r.Branches) != 1 || r.Branches[0].RM != "pg" {
		t.Errorf("resolved ABORT lists branches %+v, want pg", r.Branches)
	}
}

// A resource manager that cannot answer makes resolve fail: no evidence,
// no decision.
func TestResolveWithoutEvidenceRefuses(t *testing.T) {
	opts := testOptions(t.TempDir())
	opts.prepared = func(context.Context, string, xid.Branch) (bool, error) {
		return false, errors.New("connection refused")
	}
	c := open(t, opts)
	g := newGTRID()
	if _, err := c.Status(context.Background(), g, true); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Status --resolve with an RM down: %v, want an error naming the cause", err)
	}
	mustStatus(t, c, g, false, Undecided)
}

// A gtrid stamped further in the future than MaxClockSkew comes from a
// client whose clock is ahead: every age rule (max-txn-age, ABORT
// retention) would be off by that much, so Commit and resolve refuse it
// before anything is written, and say what to fix.
func TestFutureGTRIDIsRefused(t *testing.T) {
	opts := testOptions(t.TempDir())
	opts.MaxClockSkew = 5 * time.Second
	ps := &preparedSet{held: map[xid.Branch]bool{}}
	opts.prepared = ps.prepared
	c := open(t, opts)
	g := xid.NewAt(0, time.Now().Add(30*time.Second))
	ps.held[xid.Branch{GTRID: g, RM: "pg"}] = true
	_, err := c.Commit(short(t), g.String(), both, CommitMode{})
	var ie *InputError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "clock") {
		t.Fatalf("Commit of a gtrid 30s in the future: %v, want an InputError about the client's clock", err)
	}
	if _, err := c.Status(context.Background(), g.String(), true); !errors.As(err, &ie) {
		t.Fatalf("Status --resolve of a gtrid 30s in the future: %v, want an InputError", err)
	}
	mustStatus(t, c, g.String(), false, Undecided)
	// Within the bound: accepted.
	mustCommit(t, c, xid.NewAt(0, time.Now().Add(2*time.Second)).String(), Committed)
}

// client_settles on a branch that is not session-bound (PostgreSQL): the
// client commits it itself after the decision, and the coordinator never
// takes its word for it. After the client's head start the coordinator
// looks (a scan of the prepared branches): gone, it is done without a call;
// still prepared (the client died, or is slow), the coordinator commits it.
// Before this was allowed, Commit refused it (an InputError), since the
// first look was no look at all.
func TestClientSettledPostgresBranchIsCheckedNotTrusted(t *testing.T) {
	opts := testOptions(t.TempDir())
	ps := &preparedSet{held: map[xid.Branch]bool{}}
	opts.prepared = ps.prepared
	var mu sync.Mutex
	settled := map[xid.Branch]bool{}
	calls := map[xid.Branch]int{}
	opts.settle = func(_ context.Context, rmName string, b xid.Branch, commit bool) error {
		k := xid.Branch{GTRID: b.GTRID, RM: rmName}
		mu.Lock()
		calls[k]++
		mu.Unlock()
		ps.mu.Lock()
		held := ps.held[k]
		delete(ps.held, k)
		ps.mu.Unlock()
		if !held {
			return rm.ErrBranchNotFound
		}
		mu.Lock()
		settled[k] = commit
		mu.Unlock()
		return nil
	}
	c := open(t, opts)
	refs := []BranchRef{{RM: "pg", ClientSettles: true}, {RM: "maria", ClientSettles: true}}

	// The client committed both before the coordinator looked.
	done := xid.New()
	start := time.Now()
	r, err := c.Commit(short(t), done.String(), refs, CommitMode{WaitPhase2: true})
	if err != nil || r.Outcome != Committed || r.Phase2Pending {
		t.Fatalf("Commit with client_settles on pg and maria: %+v, %v", r, err)
	}
	if d := time.Since(start); d >= clientSettleFirstCheck {
		t.Errorf("the reply took %s: it waited for the client's branches", d)
	}
	waitPhase2Done(t, c, done, "both branches checked and done")

	// The client died after the decision: both branches still prepared.
	dead := xid.New()
	ps.mu.Lock()
	ps.held[xid.Branch{GTRID: dead, RM: "pg"}] = true
	ps.mu.Unlock()
	if r, err := c.Commit(short(t), dead.String(), refs, CommitMode{WaitPhase2: true}); err != nil || r.Outcome != Committed {
		t.Fatalf("Commit: %+v, %v", r, err)
	}
	waitPhase2Done(t, c, dead, "the coordinator settled the dead client's PostgreSQL branch")
	mu.Lock()
	defer mu.Unlock()
	if !settled[xid.Branch{GTRID: dead, RM: "pg"}] {
		t.Errorf("the dead client's PostgreSQL branch is done without the coordinator's COMMIT")
	}
	for _, rmName := range []string{"pg", "maria"} {
		if n := calls[xid.Branch{GTRID: done, RM: rmName}]; n != 0 {
			t.Errorf("the coordinator made %d phase-2 calls on the %s branch the client had settled, want none (the scan says it is gone)", n, rmName)
		}
	}
}

// waitPhase2Done waits until Status says g's COMMIT has no phase 2 left.
func waitPhase2Done(t *testing.T, c *Coordinator, g xid.GTRID, what string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); mustStatus(t, c, g.String(), false, Committed).Phase2Pending; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

// The first look at a client-settled branch accepts only a scan begun well
// into the client's head start. A scan begun earlier (another branch's,
// shared) found the branch still prepared before a live client could
// commit it, and the coordinator raced the client's own COMMIT PREPARED
// (334 times in a 15 s bench run at 2 threads).
func TestClientSettledBranchIsCheckedByALateEnoughScan(t *testing.T) {
	opts := testOptions(t.TempDir())
	opts.prepared = func(context.Context, string, xid.Branch) (bool, error) { return false, nil }
	var mu sync.Mutex
	first := map[string]time.Time{}
	opts.scanSince = func(rmName string, _ xid.Branch, since time.Time) {
		mu.Lock()
		defer mu.Unlock()
		if _, ok := first[rmName]; !ok {
			first[rmName] = since
		}
	}
	c := open(t, opts)
	g := xid.New()
	start := time.Now()
	if r, err := c.Commit(short(t), g.String(), []BranchRef{{RM: "pg", ClientSettles: true}, {RM: "maria", ClientSettles: true}}, CommitMode{WaitPhase2: true}); err != nil || r.Outcome != Committed {
		t.Fatalf("Commit: %+v, %v", r, err)
	}
	waitPhase2Done(t, c, g, "the branches checked")
	mu.Lock()
	defer mu.Unlock()
	for _, rmName := range []string{"pg", "maria"} {
		since, ok := first[rmName]
		if !ok {
			t.Fatalf("the %s branch was never checked by a scan", rmName)
		}
		if d := since.Sub(start); d < clientSettleFirstCheck/2 {
			t.Errorf("the %s branch's first check accepts a scan begun %s after the Commit was sent; want at least %s (half the client's head start)", rmName, d.Round(time.Millisecond), clientSettleFirstCheck/2)
		}
	}
}

// Status of a gtrid with no decision that is prepared right now asks the
// resource managers and says where, when the in-doubt scan will abort it,
// and that --resolve exists; without branches it says nothing is prepared.
func TestStatusOfAPreparedUndecidedGTRIDSaysWhere(t *testing.T) {
	opts := testOptions(t.TempDir())
	opts.OrphanTimeout = time.Minute
	ps := &preparedSet{held: map[xid.Branch]bool{}}
	opts.prepared = ps.prepared
	c := open(t, opts)
	g := xid.New()
	ps.held[xid.Branch{GTRID: g, RM: "maria"}] = true
	r := mustStatus(t, c, g.String(), false, Undecided)
	for _, want := range []string{"prepared on maria", "orphan timeout", "--resolve"} {
		if !strings.Contains(r.Message, want) {
			t.Errorf("Status message %q does not say %q", r.Message, want)
		}
	}
	r = mustStatus(t, c, xid.New().String(), false, Undecided)
	if !strings.Contains(r.Message, "no branch is prepared") {
		t.Errorf("Status of an unknown gtrid: %q, want it to say no branch is prepared", r.Message)
	}
}
