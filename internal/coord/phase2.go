package coord

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/tandem-tx/tandem/internal/failpoint"
	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/xid"
)

// Phase-2 retry backoff bounds, and the limit on one attempt.
const (
	phase2FirstBackoff = 50 * time.Millisecond
	phase2MaxBackoff   = 2 * time.Second
	phase2CallTimeout  = 10 * time.Second
	// clientSettleFirstCheck: how long the coordinator leaves a client to
	// settle its own session-bound branch before it first checks.
	clientSettleFirstCheck = 20 * time.Millisecond
)

// startPhase2 starts driving t's phase 2; recovered says t came from the log
// replay (then "not found" on the first attempt means already done).
func (c *Coordinator) startPhase2(t *txn, recovered bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.startPhase2Locked(t, recovered)
}

func (c *Coordinator) startPhase2Locked(t *txn, recovered bool) {
	if t.driving || t.ended || c.cancel == nil { // c.cancel is nil once Close began
		return
	}
	t.driving = true
	c.wg.Add(1)
	go c.drive(t, recovered)
}

// drive settles every pending branch of t in parallel, retrying each until
// its resource manager acknowledges, then writes END. Branches added while it
// runs (a late ABORTED answer) are picked up before END.
func (c *Coordinator) drive(t *txn, recovered bool) {
	defer c.wg.Done()
	_ = failpoint.Inject("before-phase2")
	c.mu.Lock()
	unsynced := t.unsynced
	c.mu.Unlock()
	if unsynced {
		// A nowait decision: no branch may act on it before it is durable.
		if err := c.log.Sync(); err != nil {
			c.logger.Error("a nowait decision could not be made durable; phase 2 not started (restart the coordinator to replay its log)",
				"gtrid", t.gtrid.String(), "error", err)
			c.mu.Lock()
			t.driving = false
			c.mu.Unlock()
			return
		}
		c.mu.Lock()
		t.unsynced = false
		c.mu.Unlock()
	}
	// No branch is touched before the standby holds the decision (see
	// StandbyWaiter).
	if err := c.waitStandby(c.ctx, t.gtrid); err != nil {
		if c.ctx.Err() == nil {
			c.logger.Error("phase 2 not started: the standby does not hold the decision and the shipper stopped; it is driven again by the next in-doubt scan or restart",
				"gtrid", t.gtrid.String(), "error", err)
		}
		c.mu.Lock()
		t.driving = false
		c.mu.Unlock()
		return
	}
	for {
		c.mu.Lock()
		var pending []*branchProgress
		for _, b := range t.branches {
			if b.state == BranchPending {
				pending = append(pending, b)
			}
		}
		if len(pending) == 0 {
			t.driving = false
			c.mu.Unlock()
			break
		}
		c.mu.Unlock()
		// In parallel, the last one on this goroutine: a driver costs one
		// goroutine per branch, not one more.
		var wg sync.WaitGroup
		for _, b := range pending[:len(pending)-1] {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.settleBranch(t, b, recovered)
			}()
		}
		c.settleBranch(t, pending[len(pending)-1], recovered)
		wg.Wait()
		if c.ctx.Err() != nil {
			c.mu.Lock()
			t.driving = false
			c.mu.Unlock()
			return // shutting down: the next Open resumes from the log
		}
	}
	_ = failpoint.Inject("after-phase2")
	// Every branch acknowledged. END needs no fsync: without it, a restart
	// simply drives phase 2 again and finds every branch already done.
	_ = failpoint.Inject("before-end")
	if _, err := c.log.AppendNoWait(recEnd, encodeEnd(t.gtrid)); err != nil {
		c.logger.Warn("could not write END; phase 2 will be re-driven after a restart", "gtrid", t.gtrid.String(), "error", err)
	}
	_ = failpoint.Inject("after-end")
	c.mu.Lock()
	c.setEnded(t, time.Now())
	c.mu.Unlock()
}

// settleBranch commits or rolls back one branch until its RM acknowledges.
//
// "Not found" is final on PostgreSQL. On a session-bound RM (MariaDB) it is
// ambiguous — the branch may still be prepared and held by the client's
// session — so the coordinator confirms with a (shared) recover scan: absent
// means settled; present means wait and try again (it becomes settleable here
// once that session ends). A branch the client settles itself is not called
// at first: the coordinator only confirms that it is gone.
func (c *Coordinator) settleBranch(t *txn, b *branchProgress, recovered bool) {
	conn := c.rms[b.rm]
	id := xid.Branch{GTRID: t.gtrid, RM: b.rm}
	bound := conn.Dialect().SessionBound()
	c.mu.Lock()
	waitForClient := b.clientSettles && !recovered
	c.mu.Unlock()
	backoff := phase2FirstBackoff
	var scanSince time.Time // the oldest recover scan that can confirm this branch
	if waitForClient {
		backoff = clientSettleFirstCheck
	}
	for first := true; ; first = false {
		if waitForClient && first {
			// Give the client's own XA COMMIT/ROLLBACK a head start.
			if !c.sleep(backoff) {
				return
			}
		}
		ctx, cancel := context.WithTimeout(c.ctx, phase2CallTimeout)
		var err error
		called := !(waitForClient && first)
		if called {
			err = failpoint.Inject("before-phase2-call")
		}
		switch {
		case err != nil:
		case called && c.opts.settle != nil:
			err = c.opts.settle(ctx, b.rm, id, t.outcome == Committed)
		case called && t.outcome == Committed:
			err = conn.CommitPrepared(ctx, id)
		case called:
			err = conn.RollbackPrepared(ctx, id)
		default:
			err = rm.ErrBranchNotFound
		}
		if called {
			_ = failpoint.Inject("after-phase2-call") // kill or sleep: the call's effect stands
		}
		heldElsewhere := false
		if errors.Is(err, rm.ErrBranchNotFound) && bound {
			if scanSince.IsZero() {
				scanSince = t.decidedAt
			}
			// Any scan that started after the decision will do: a branch once
			// gone never comes back (its XID is never prepared again), so
			// "absent" is final; "present" is retried with a later scan. This
			// lets every branch decided before a scan share it.
			prepared, perr := conn.IsPrepared(ctx, id, scanSince)
			switch {
			case perr != nil:
				err = perr
			case prepared:
				heldElsewhere = true
			}
		}
		cancel()
		c.mu.Lock()
		if called {
			b.attempts++
		}
		if heldElsewhere {
			scanSince = time.Now() // seen present: the next check needs a newer scan
		}
		switch {
		case heldElsewhere:
			b.lastErr = "prepared and held by the client's session; waiting for the client to settle it or disconnect"
		case err == nil:
			b.state, b.lastErr = BranchDone, ""
		case errors.Is(err, rm.ErrBranchNotFound):
			// After a crash (or on a retry) "not found" means done. On the very
			// first live attempt of a COMMIT the coordinator drives, it means the
			// branch was never prepared there (or someone else settled it): say so.
			if b.attempts == 1 && !recovered && !b.clientSettles && t.outcome == Committed {
				b.state, b.lastErr = BranchNotFound, "the resource manager did not know this branch on the first attempt: it was never prepared there, or was settled by someone else"
				c.logger.Warn("phase 2: branch not found on first attempt", "gtrid", t.gtrid.String(), "rm", b.rm)
			} else {
				b.state, b.lastErr = BranchDone, ""
			}
		default:
			b.lastErr = err.Error()
			if b.attempts <= 1 || b.attempts%20 == 0 {
				c.logger.Warn("phase 2 failed; retrying", "gtrid", t.gtrid.String(), "rm", b.rm, "outcome", t.outcome.String(), "attempt", b.attempts, "error", err)
			}
		}
		settled := b.state != BranchPending
		if settled {
			t.checkReplyReady()
		}
		c.mu.Unlock()
		if settled || !c.sleep(backoff) {
			return
		}
		backoff = min(2*backoff, phase2MaxBackoff)
	}
}

// sleep waits d; false when the coordinator is shutting down.
func (c *Coordinator) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
