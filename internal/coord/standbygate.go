package coord

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tandem-tx/tandem/waits"
	"github.com/tandem-tx/tandem/xid"
)

// StandbyWaiter is implemented by a LogHook that copies the decision log to
// a standby (standby.Shipper). The coordinator calls it before anything
// acts on a decision: before phase 2 touches a branch, and before Commit
// answers a request with a client-settled branch (the client settles that
// branch as soon as it has the answer, or the early-decision header).
//
// The rule it keeps: no branch is touched before the decision is where a
// failover will look. A standby that never saw a COMMIT that committed one
// branch would, once promoted, roll the others back (its orphan scan):
// the transaction would be split. Waiting here turns that into, at worst,
// a lost decision (all branches rolled back), in every transport.
type StandbyWaiter interface {
	// WaitStandby returns nil once the standby holds every record that was
	// durable in the log when it was called, or once the protection mode
	// lets the primary go on without the standby (max-availability and
	// max-performance after the net timeout: the standby is then marked
	// not synchronized, see standby.Shipper). It returns an error when ctx
	// ends or the hook is closed first: the decision must not be acted on.
	WaitStandby(ctx context.Context) error
}

// standbyDecisionAck times the waits of WaitStandby: how long decisions
// wait for the standby before a branch may be touched.
var standbyDecisionAck = waits.Define("standby decision ack")

// waitStandby waits until the standby holds decision g (see StandbyWaiter);
// nil at once without a standby.
func (c *Coordinator) waitStandby(ctx context.Context, g xid.GTRID) error {
	w, ok := c.opts.LogHook.(StandbyWaiter)
	if !ok {
		return nil
	}
	start := time.Now()
	err := w.WaitStandby(ctx)
	d := c.opts.Waits.SinceTx(standbyDecisionAck, start, g, "")
	if err == nil {
		// An exponential moving average (1/8 weight) of completed waits.
		avg := c.standbyAck.Load()
		c.standbyAck.Store(avg + (int64(d)-avg)/8)
	}
	return err
}

// answerAfterStandby is for a Commit whose answer lets the client settle
// its own branches: it returns only once the standby holds the decision.
// On failure the decision is durable here but may be missing from the
// standby: the outcome is unknown to the client (it must not settle
// anything; Status tells).
func (c *Coordinator) answerAfterStandby(ctx context.Context, t *txn) error {
	if err := c.waitStandby(ctx, t.gtrid); err != nil {
		return fmt.Errorf("%w: the %s of gtrid %s is durable here, but the standby did not acknowledge it before the call ended (%v): do not settle any branch; ask Status",
			ErrOutcomeUnknown, t.outcome, t.gtrid, err)
	}
	return nil
}

// takeOverWhileStandbyLags is for a COMMIT under visibility async whose
// client lets the coordinator take its client-settled (session-bound)
// branches over (CommitMode.MayTakeOver: allowed). If the standby holds the
// decision within Options.TakeOverAfter (not waited for when its
// acknowledgements have lately taken longer than that), or ships
// synchronously (the decision is there once durable here), it returns false:
// the client settles them as usual once answered. Otherwise the coordinator
// takes them over (taken and now): it settles them itself, like every other
// branch, once the standby holds the decision, and the answer tells the
// client to end their sessions instead of waiting for the standby
// (Report.TakenOver; a MariaDB branch outlives its session prepared, and is
// settleable from any connection once that session has ended). The rule of
// StandbyWaiter is kept: nobody touches a branch before the standby holds
// the decision; only the client no longer waits for it.
//
// Only a COMMIT is taken over: a client rolls its branches back on an
// ABORTED answer, which must wait for the standby as before. A decision
// taken over once reports taken (not now) on every later Commit, allowed or
// not, so that no client settles a branch the coordinator drives.
func (c *Coordinator) takeOverWhileStandbyLags(ctx context.Context, t *txn, allowed bool) (taken, now bool) {
	c.mu.Lock()
	outcome, taken := t.outcome, t.takenOver
	c.mu.Unlock()
	if taken {
		return true, false
	}
	if !allowed || outcome != Committed {
		return false, false
	}
	w, ok := c.opts.LogHook.(StandbyWaiter)
	if !ok {
		return false, false
	}
	if s, ok := w.(interface{ Synchronous() bool }); ok && s.Synchronous() {
		return false, false
	}
	wait := c.opts.TakeOverAfter
	if time.Duration(c.standbyAck.Load()) > wait {
		wait = 0 // the standby has been slower than that lately: only a look
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	err := w.WaitStandby(wctx) // a look, not a wait event: phase 2's wait is the one recorded
	cancel()
	if err == nil || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
		// Held in time; or the call itself ends, or the shipper stopped:
		// answerAfterStandby says what that means for the client.
		return false, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.takenOver {
		return true, false // a concurrent Commit of the same gtrid took it over
	}
	for _, b := range t.branches {
		// Phase 2 is blocked on the standby (drive): it reads this after.
		// Should the standby answer in between, its first look at the branch
		// only checks that it is gone, finds it prepared once the client
		// ended the session, and its retries commit it.
		b.clientSettles = false
	}
	t.takenOver = true
	return true, true
}

func anyClientSettles(rms []BranchRef) bool {
	for _, b := range rms {
		if b.ClientSettles {
			return true
		}
	}
	return false
}

// SwitchLogSegment closes the decision log's current segment and writes a
// record that replays as nothing into the next one, so that a standby fed
// completed segments only (arch) gets the decisions of the closed one
// (standby.Shipper.SetSwitcher). END of the zero gtrid names no decision.
func (c *Coordinator) SwitchLogSegment() error {
	if _, err := c.log.Switch(); err != nil {
		return fmt.Errorf("coord: switch the log segment: %w", err)
	}
	if _, err := c.log.Append(recEnd, encodeEnd(xid.GTRID{})); err != nil {
		return fmt.Errorf("coord: write after a segment switch: %w", err)
	}
	return nil
}
