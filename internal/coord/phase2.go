package coord

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/tandem-tx/tandem/internal/failpoint"
	"github.com/tandem-tx/tandem/internal/rm"
)

// Phase-2 retry backoff bounds, and the limit on one attempt.
const (
	phase2FirstBackoff = 50 * time.Millisecond
	phase2MaxBackoff   = 2 * time.Second
	phase2CallTimeout  = 10 * time.Second
	// clientSettleFirstCheck: how long the coordinator leaves a client to
	// settle its own branch (client_settles) before it first checks. Nothing
	// waits for the check (not even a visibility sync reply); a check that
	// comes before the client's XA COMMIT costs an XA COMMIT that fails
	// and a recover scan per retry, which a client slowed by load (32
	// threads on 2 CPUs: p99 tens of ms) made common at 20 ms.
	clientSettleFirstCheck = 100 * time.Millisecond
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

// drive settles every pending branch of t in parallel, once each. A branch
// its resource manager does not acknowledge goes to that RM's retry queue
// (retryQueue): the driver then ends, so an RM that is down holds no
// goroutine per transaction. Branches added while it runs (a late ABORTED
// answer) are picked up before it ends; the last branch settled, here or
// by a retry queue, writes END.
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
			if b.state == BranchPending && !b.parked {
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
				c.settleFirst(t, b, recovered)
			}()
		}
		c.settleFirst(t, pending[len(pending)-1], recovered)
		wg.Wait()
		if c.ctx.Err() != nil {
			c.mu.Lock()
			t.driving = false
			c.mu.Unlock()
			return // shutting down: the next Open resumes from the log
		}
	}
	c.endIfSettled(t)
}

// endIfSettled writes END for t once every branch is settled and no driver
// runs, exactly once. END needs no fsync: without it, a restart simply
// drives phase 2 again and finds every branch already done.
func (c *Coordinator) endIfSettled(t *txn) {
	c.mu.Lock()
	if t.ended || t.ending || t.driving || c.ctx.Err() != nil {
		c.mu.Unlock()
		return
	}
	for _, b := range t.branches {
		if b.state == BranchPending {
			c.mu.Unlock()
			return
		}
	}
	t.ending = true
	c.mu.Unlock()
	_ = failpoint.Inject("after-phase2")
	_ = failpoint.Inject("before-end")
	if _, err := c.log.AppendNoWait(recEnd, encodeEnd(t.gtrid)); err != nil {
		c.logger.Warn("could not write END; phase 2 will be re-driven after a restart", "gtrid", t.gtrid.String(), "error", err)
	}
	_ = failpoint.Inject("after-end")
	c.mu.Lock()
	defer c.mu.Unlock()
	t.ending = false
	for _, b := range t.branches {
		if b.state == BranchPending {
			// A branch appeared while END was being written (the in-doubt
			// scan found one the decision did not list): not ended; it is
			// driven, and a later END follows.
			c.startPhase2Locked(t, true)
			return
		}
	}
	c.setEnded(t, time.Now())
}

// settleFirst makes the first attempt at one branch (after the client's
// head start, for a branch the client settles itself: only the check that
// it is gone). A branch still pending after it is parked in the RM's retry
// queue. The first attempt is made even while the RM's breaker is open: a
// failure may be one branch's (one poison branch must not hold back every
// other), and its success closes the breaker.
func (c *Coordinator) settleFirst(t *txn, b *branchProgress, recovered bool) {
	p := &parked{t: t, b: b, recovered: recovered}
	c.mu.Lock()
	waitForClient := b.clientSettles && !recovered
	c.mu.Unlock()
	if waitForClient {
		// The first look needs a scan that began well into the client's
		// head start: one begun earlier (another branch's, reused) would
		// find this branch prepared before a live client could commit it,
		// and the coordinator would race the client's own commit. Half the
		// head start still lets the branches checked within 50 ms share a
		// scan.
		p.scanSince = time.Now().Add(clientSettleFirstCheck / 2)
		if !c.sleep(clientSettleFirstCheck) {
			return
		}
	}
	switch c.attempt(p, !waitForClient) {
	case attemptSettled:
		c.retry[b.rm].answered()
	case attemptHeld:
		c.retry[b.rm].answered()
		c.park(p)
	default:
		c.park(p)
	}
}

// park hands p to its RM's retry queue.
func (c *Coordinator) park(p *parked) {
	if c.ctx.Err() != nil {
		return
	}
	c.mu.Lock()
	p.b.parked = true
	c.mu.Unlock()
	p.backoff = phase2FirstBackoff
	p.next = time.Now().Add(p.backoff)
	c.retry[p.b.rm].push(p)
}

// attemptResult is what one phase-2 attempt at a branch came to.
type attemptResult uint8

const (
	attemptSettled attemptResult = iota // acknowledged (or known done)
	attemptHeld                         // prepared and held by the client's session: not the RM's fault
	attemptFailed                       // the RM did not acknowledge (down, or an error)
)

// String names the result in a span's tandem.result: settled, held, failed.
func (r attemptResult) String() string {
	switch r {
	case attemptSettled:
		return "settled"
	case attemptHeld:
		return "held"
	}
	return "failed"
}

// attempt makes one phase-2 attempt at p's branch: with call, COMMIT or
// ROLLBACK PREPARED; without, only the confirmation that a branch the
// client settles itself is gone.
//
// "Not found" is final on PostgreSQL. On a session-bound RM (MariaDB) it is
// ambiguous — the branch may still be prepared and held by the client's
// session — so the coordinator confirms with a (shared) recover scan: absent
// means settled; present means wait and try again (it becomes settleable here
// once that session ends).
//
// When the decision was traced (txn.traceParent), each of the first
// maxSpannedAttempts attempts is a span.
func (c *Coordinator) attempt(p *parked, call bool) (res attemptResult) {
	t, b := p.t, p.b
	conn := c.rms[b.rm]
	bound := conn.Dialect().SessionBound()
	ctx, cancel := context.WithTimeout(c.ctx, phase2CallTimeout)
	defer cancel()
	var err error
	if t.traceParent != nil && p.spanned < maxSpannedAttempts {
		p.spanned++
		sp := startSpan(t.traceParent, SpanPhase2)
		act := "check" // a client-settled branch: only the confirmation that it is gone
		switch {
		case call && t.outcome == Committed:
			act = "commit"
		case call:
			act = "rollback"
		}
		defer func() {
			// Runs after c.mu is unlocked below.
			sp.SetAttributes(attrRM.String(b.rm), attrAction.String(act), attrAttempt.Int(p.spanned), attrResult.String(res.String()))
			var serr error
			if res == attemptFailed {
				serr = err
			}
			endSpan(sp, serr)
		}()
	}
	if call {
		err = failpoint.Inject("before-phase2-call")
	}
	switch {
	case err != nil:
	case call:
		// Under this coordinator's names only (owned, then legacy): never
		// another owner's branch of the same gtrid.
		err = c.settleOwn(ctx, t.gtrid, b.rm, t.outcome == Committed)
	default:
		err = rm.ErrBranchNotFound
	}
	if call {
		_ = failpoint.Inject("after-phase2-call") // kill or sleep: the call's effect stands
	}
	// A client-settled branch's first look (!call) is a scan. Prepared
	// still, a session-bound one is held by the client's session; any
	// other the client has not settled yet (slow, or gone): its retries
	// settle it.
	heldElsewhere, notYet := false, false
	if errors.Is(err, rm.ErrBranchNotFound) && (bound || !call) {
		if p.scanSince.IsZero() {
			p.scanSince = t.decidedAt
		}
		// Any scan that started after the decision will do: a branch once
		// gone never comes back (its XID is never prepared again), so
		// "absent" is final; "present" is retried with a later scan. This
		// lets every branch decided before a scan share it.
		prepared, perr := c.ownPreparedSince(ctx, b.rm, t.gtrid, p.scanSince)
		switch {
		case perr != nil:
			err = perr
		case prepared && bound:
			heldElsewhere = true
		case prepared:
			notYet = true
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if call {
		b.attempts++
	}
	if heldElsewhere {
		p.scanSince = time.Now() // seen present: the next check needs a newer scan
	}
	switch {
	case heldElsewhere:
		b.lastErr = "prepared and held by the client's session; waiting for the client to settle it or disconnect"
	case notYet:
		b.lastErr = "still prepared after the client's head start; the coordinator settles it"
	case err == nil:
		b.state, b.lastErr = BranchDone, ""
	case errors.Is(err, rm.ErrBranchNotFound):
		// After a crash (or on a retry) "not found" means done. On the very
		// first live attempt of a COMMIT the coordinator drives, it means the
		// branch was never prepared there (or someone else settled it): say so.
		// A branch taken over from its client may have been committed by
		// that client all the same (a Commit answered without the take-over).
		if b.attempts == 1 && !p.recovered && !b.clientSettles && !t.takenOver && t.outcome == Committed {
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
	if b.state != BranchPending {
		t.checkReplyReady()
		return attemptSettled
	}
	if heldElsewhere || notYet {
		return attemptHeld
	}
	return attemptFailed
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
