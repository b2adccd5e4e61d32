package coord

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/internal/wal"
	"github.com/tandem-tx/tandem/xid"
)

// slowStandby is a LogHook standing in for the shipper of an async standby
// that acknowledges nothing until the test says so.
type slowStandby struct {
	mu      sync.Mutex
	changed chan struct{}
	last    wal.Position // the last durable record written
	acked   wal.Position // what the "standby" holds
}

func newSlowStandby() *slowStandby { return &slowStandby{changed: make(chan struct{})} }

func (s *slowStandby) Replayed(pos wal.Position, _ wal.Type, _ []byte) {
	s.mu.Lock()
	s.last = pos
	s.mu.Unlock()
}

func (s *slowStandby) Written(recs []wal.Written, synced bool) {
	if !synced || len(recs) == 0 {
		return
	}
	s.mu.Lock()
	s.last = recs[len(recs)-1].Pos
	s.mu.Unlock()
}

func (s *slowStandby) Released(uint64) {}

// WaitStandby: what the shipper does, with the test as the standby.
func (s *slowStandby) WaitStandby(ctx context.Context) error {
	s.mu.Lock()
	target := s.last
	for s.acked.Less(target) {
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		s.mu.Lock()
	}
	s.mu.Unlock()
	return nil
}

// ackAll makes the standby hold every record written so far.
func (s *slowStandby) ackAll() {
	s.mu.Lock()
	s.acked = s.last
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

// written is the last durable record written.
func (s *slowStandby) written() wal.Position {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// waitAnswer waits for a Commit's answer, acknowledging again whatever is
// written meanwhile (a record written after the last ackAll), for a minute
// at most.
func (s *slowStandby) waitAnswer(t *testing.T, answered <-chan Report) Report {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		select {
		case r := <-answered:
			return r
		case <-time.After(50 * time.Millisecond):
			s.ackAll()
		case <-deadline:
			t.Fatal("Commit did not answer within a minute of the standby holding every record")
		}
	}
}

func (s *slowStandby) holds() wal.Position {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acked
}

// With an async standby attached, no branch is touched before the standby
// holds the decision: neither by the coordinator's phase 2 (a Commit under
// visibility async, answered at once) nor by the client (a client-settled
// branch, which the client commits as soon as it has the answer: Commit
// itself must not answer before the standby holds the decision).
// Otherwise a failover to a standby that never saw the COMMIT rolls the
// other branches back (its orphan scan): a split.
func TestNoBranchTouchedBeforeTheStandbyHoldsTheDecision(t *testing.T) {
	sb := newSlowStandby()
	var mu sync.Mutex
	var settled []string
	opts := testOptions(t.TempDir())
	opts.LogHook = sb
	opts.settle = func(_ context.Context, rm string, b xid.Branch, _ bool) error {
		mu.Lock()
		defer mu.Unlock()
		if sb.holds() == (wal.Position{}) {
			t.Errorf("phase 2 settled %s of %s before the standby acknowledged the decision record (standby holds %s)", rm, b.GTRID, sb.holds())
		}
		settled = append(settled, rm)
		return nil
	}
	c := open(t, opts)
	n := func() int { mu.Lock(); defer mu.Unlock(); return len(settled) }

	g := newGTRID()
	r, err := c.Commit(context.Background(), g, both, CommitMode{WaitPhase2: false})
	if err != nil || r.Outcome != Committed {
		t.Fatalf("Commit = %v, %v", r.Outcome, err)
	}
	// Nothing may happen until the standby acknowledges: give a wrong
	// implementation time to show itself.
	time.Sleep(200 * time.Millisecond)
	if k := n(); k != 0 {
		t.Fatalf("%d branches settled while the standby holds nothing; want 0", k)
	}

	// A client-settled branch: the answer (which lets the client commit
	// it) must wait for the standby too.
	g2 := newGTRID()
	answered := make(chan Report, 1)
	before := sb.written()
	go func() {
		r, err := c.Commit(context.Background(), g2, []BranchRef{{RM: "pg"}, {RM: "maria", ClientSettles: true}}, CommitMode{WaitPhase2: false})
		if err != nil {
			t.Errorf("Commit(%s): %v", g2, err)
		}
		answered <- r
	}()
	// Its decision record written (on a busy machine the goroutine may not
	// even have started within the window below), the answer must wait.
	waitFor(t, c, "the second decision's record written", func() bool { return sb.written() != before })
	select {
	case r := <-answered:
		t.Fatalf("Commit with a client-settled branch answered %s before the standby held the decision: the client would commit its branch on it", r.Outcome)
	case <-time.After(200 * time.Millisecond):
	}

	sb.ackAll()
	if r := sb.waitAnswer(t, answered); r.Outcome != Committed {
		t.Fatalf("Commit(%s) = %s after the ack, want COMMITTED", g2, r.Outcome)
	}
	sb.ackAll() // the second decision's record
	id, _ := xid.Parse(g)
	waitFor(t, c, "phase 2 of the first commit ran once the standby held it", func() bool { return c.txns[id] != nil && c.txns[id].ended })
}

// A COMMIT under visibility async whose client lets the coordinator take
// its session-bound branch over (CommitMode.MayTakeOver) is answered as
// soon as the decision is durable here, even while the standby holds
// nothing: the answer says the branch was taken over (the client ends its
// session instead of committing it), and still no branch is touched —
// neither by the client nor by phase 2 — before the standby holds the
// decision. Once it does, the coordinator commits the taken-over branch
// itself. A repeated Commit is answered the same way.
func TestTakeOverWhileTheStandbyLags(t *testing.T) {
	sb := newSlowStandby()
	var mu sync.Mutex
	settled := map[string]int{}
	opts := testOptions(t.TempDir())
	opts.LogHook = sb
	opts.TakeOverAfter = 20 * time.Millisecond
	opts.settle = func(_ context.Context, rm string, b xid.Branch, commit bool) error {
		mu.Lock()
		defer mu.Unlock()
		if sb.holds() == (wal.Position{}) {
			t.Errorf("phase 2 settled %s of %s before the standby acknowledged the decision record", rm, b.GTRID)
		}
		if !commit {
			t.Errorf("phase 2 rolled back %s of %s; want commit", rm, b.GTRID)
		}
		settled[rm]++
		return nil
	}
	c := open(t, opts)
	count := func(rm string) int { mu.Lock(); defer mu.Unlock(); return settled[rm] }

	g := newGTRID()
	refs := []BranchRef{{RM: "pg"}, {RM: "maria", ClientSettles: true}}
	mode := CommitMode{WaitPhase2: false, MayTakeOver: true}
	answered := make(chan Report, 1)
	go func() {
		r, err := c.Commit(context.Background(), g, refs, mode)
		if err != nil {
			t.Errorf("Commit(%s): %v", g, err)
		}
		answered <- r
	}()
	var r Report
	select {
	case r = <-answered:
	case <-time.After(30 * time.Second):
		t.Fatal("Commit with MayTakeOver waited for a standby that holds nothing: it should have taken the client-settled branch over")
	}
	if r.Outcome != Committed || !r.TakenOver || !r.TookOver || !r.Phase2Pending {
		t.Fatalf("Commit = %+v; want COMMITTED, taken over by this call, phase 2 pending", r)
	}
	for _, b := range r.Branches {
		if b.ClientSettles {
			t.Fatalf("branch %s still reported client-settled after the take-over: %+v", b.RM, r.Branches)
		}
	}
	time.Sleep(200 * time.Millisecond) // a wrong implementation's phase 2 shows itself here
	if n := count("pg") + count("maria"); n != 0 {
		t.Fatalf("%d branches settled while the standby holds nothing; want 0", n)
	}
	again, err := c.Commit(context.Background(), g, refs, mode)
	if err != nil || !again.TakenOver || again.TookOver {
		t.Fatalf("repeated Commit = %+v, %v; want taken over again, not by this call (the client must not settle a branch the coordinator drives)", again, err)
	}
	// A repeat that does not allow a take-over is told all the same.
	again, err = c.Commit(context.Background(), g, refs, CommitMode{WaitPhase2: false})
	if err != nil || !again.TakenOver {
		t.Fatalf("repeated Commit without MayTakeOver = %+v, %v; want taken over", again, err)
	}

	sb.ackAll()
	id, _ := xid.Parse(g)
	waitFor(t, c, "phase 2 committed both branches once the standby held the decision", func() bool {
		return count("pg") == 1 && count("maria") == 1 && c.txns[id] != nil && c.txns[id].ended
	})

	// Without a standby there is nothing to wait for: no take-over.
	plain := open(t, testOptions(t.TempDir()))
	r, err = plain.Commit(context.Background(), newGTRID(), refs, mode)
	if err != nil || r.TakenOver {
		t.Fatalf("Commit without a standby = %+v, %v; want no take-over", r, err)
	}
}

// A take-over is for a COMMIT only: a Commit that allows it for a gtrid
// already decided ABORT (the orphan scan, or an Abort, came first) must not
// answer before the standby holds the ABORT — the client rolls its
// session-bound branch back on that answer, and a failover that lost the
// ABORT would then find one branch gone and the other prepared (found by
// review: the take-over ran whatever the outcome).
func TestNoTakeOverOfAnAbort(t *testing.T) {
	sb := newSlowStandby()
	opts := testOptions(t.TempDir())
	opts.LogHook = sb
	opts.TakeOverAfter = 20 * time.Millisecond
	opts.settle = func(context.Context, string, xid.Branch, bool) error { return nil }
	c := open(t, opts)
	g := newGTRID()
	before := sb.written()
	go func() { _, _ = c.Abort(context.Background(), g, both) }()
	waitFor(t, c, "the ABORT record written", func() bool { return sb.written() != before })
	answered := make(chan Report, 1)
	go func() {
		r, err := c.Commit(context.Background(), g, []BranchRef{{RM: "pg"}, {RM: "maria", ClientSettles: true}}, CommitMode{MayTakeOver: true})
		if err != nil {
			t.Errorf("Commit(%s): %v", g, err)
		}
		answered <- r
	}()
	select {
	case r := <-answered:
		t.Fatalf("Commit with MayTakeOver for an aborted gtrid answered %s (taken over %v) before the standby held the ABORT", r.Outcome, r.TakenOver)
	case <-time.After(300 * time.Millisecond):
	}
	sb.ackAll()
	if r := sb.waitAnswer(t, answered); r.Outcome != Aborted || r.TakenOver {
		t.Fatalf("Commit = %s, taken over %v; want ABORTED, not taken over", r.Outcome, r.TakenOver)
	}
}
