package coord

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/xid"
)

// An RM that is down for a long time under load: phase 2 must not keep a
// goroutine (and a retry timer) per unfinished transaction, nor call the
// RM once per transaction per backoff. Failed branches wait in the RM's
// retry queue (one goroutine per RM); a circuit breaker lets one probe
// through while the RM keeps failing; once it answers, the backlog drains
// and every transaction ends.
func TestPhase2WithAnRMDownStaysBounded(t *testing.T) {
	sw := &phase2Switch{}
	opts := circularOptions(t, 64<<20, sw)
	c := open(t, opts)
	before := runtime.NumGoroutine()
	const n = 1500
	for i := 0; i < n; i++ {
		r, err := c.Commit(context.Background(), newGTRID(), []BranchRef{{RM: rmLong.Name}}, CommitMode{})
		if err != nil || r.Outcome != Committed {
			t.Fatalf("Commit %d: %v %v", i, r.Outcome, err)
		}
	}
	// Every first attempt made and failed, every branch parked, the breaker
	// open: from here on only probes reach the RM.
	q := c.retry[rmLong.Name]
	waitFor(t, c, "every branch parked behind the open breaker", func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.open && len(q.items) == n
	})
	// The drivers end once their branches are parked.
	g := runtime.NumGoroutine()
	for deadline := time.Now().Add(30 * time.Second); g > before+64 && time.Now().Before(deadline); g = runtime.NumGoroutine() {
		time.Sleep(20 * time.Millisecond)
	}
	calls0 := sw.calls.Load()
	time.Sleep(time.Second)
	calls := sw.calls.Load() - calls0
	t.Logf("%d unfinished: goroutines %d → %d; %d settle calls in 1s with the RM down", c.Phase2Backlog(), before, g, calls)
	if g > before+64 {
		t.Errorf("%d unfinished transactions hold %d goroutines (%d before): want a bounded number", n, g, before)
	}
	if calls > 20 {
		t.Errorf("%d settle calls in one second to an RM that keeps failing: want a probe, not a call per transaction", calls)
	}
	sw.up.Store(true)
	deadline := time.Now().Add(30 * time.Second)
	for c.Phase2Backlog() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("phase 2 did not drain after the RM came back: %d unfinished", c.Phase2Backlog())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A branch its RM keeps refusing (one poison branch; the RM answers every
// other) must not hold back the rest: the breaker opens on its failed
// retries, yet every new transaction's phase 2 finishes at once.
func TestOneFailingBranchDoesNotHoldBackOthers(t *testing.T) {
	var poison atomic.Value
	opts := testOptions(t.TempDir())
	opts.settle = func(_ context.Context, _ string, b xid.Branch, _ bool) error {
		if g, _ := poison.Load().(xid.GTRID); g == b.GTRID {
			return errors.New("XAER_RMERR: this branch only")
		}
		return nil
	}
	c := open(t, opts)
	bad := xid.New()
	poison.Store(bad)
	if r, err := c.Commit(short(t), bad.String(), both, CommitMode{}); err != nil || r.Outcome != Committed {
		t.Fatalf("Commit of the poison transaction: %v %v", r.Outcome, err)
	}
	for _, b := range both { // its retries fail; the breakers open
		q := c.retry[b.RM]
		waitFor(t, c, "the breaker of "+b.RM+" open", func() bool { q.mu.Lock(); defer q.mu.Unlock(); return q.open })
	}
	for i := 0; i < 50; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		r, err := c.Commit(ctx, newGTRID(), both, CommitMode{WaitPhase2: true})
		cancel()
		if err != nil || r.Outcome != Committed || r.Phase2Pending {
			t.Fatalf("Commit %d behind a poison branch: %v %v pending=%v", i, r.Outcome, err, r.Phase2Pending)
		}
	}
	if r := mustStatus(t, c, bad.String(), false, Committed); !r.Phase2Pending {
		t.Errorf("the poison transaction finished: %+v", r)
	}
}
