package coord

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tandem-tx/tandem/internal/failpoint"
	"github.com/tandem-tx/tandem/internal/waits"
	"github.com/tandem-tx/tandem/internal/wal"
	"github.com/tandem-tx/tandem/xid"
)

// MaxBranches bounds the branches of one global transaction.
const MaxBranches = 64

// Commit decides COMMIT for gtrid unless ABORT was decided first, and waits
// for phase 2 as visibility asks. See the package doc for the rules.
//
// With waitPhase2, it returns when phase 2 finished, or shortly before ctx's
// deadline (or after Options.Phase2Wait without a deadline) with
// Phase2Pending set. The reply is COMMITTED either way once the record is durable.
// CommitMode is a Commit's durability and visibility.
type CommitMode struct {
	// Durability: DurabilityDefault takes Options.NoWait.
	Durability Durability
	// WaitPhase2 is visibility sync (true) or async (false).
	WaitPhase2 bool
}

// Durability of one COMMIT decision.
type Durability uint8

const (
	DurabilityDefault Durability = iota
	DurabilityWait               // reply once the COMMIT record is on disk
	DurabilityNoWait             // reply once it is queued for the log writer
)

func (c *Coordinator) Commit(ctx context.Context, gtrid string, rms []BranchRef, mode CommitMode) (Report, error) {
	waitPhase2 := mode.WaitPhase2
	durable := mode.Durability == DurabilityWait || (mode.Durability == DurabilityDefault && !c.opts.NoWait)
	for _, b := range rms {
		// A client-settled branch (MariaDB) is committed by the client as soon
		// as it has the reply: the reply must not come before the decision is
		// on disk, or a crash could lose it with that branch already committed.
		if b.ClientSettles {
			durable = true
		}
	}
	g, err := c.validate(gtrid, names(rms), true)
	if err != nil {
		return Report{}, err
	}
	if age := time.Since(g.Time()); age > c.opts.MaxTxnAge {
		t, err := c.decide(g, Aborted, AbortTooOld, rms)
		if err != nil {
			return Report{}, err
		}
		if anyClientSettles(rms) {
			if err := c.answerAfterStandby(ctx, t); err != nil {
				return Report{}, err
			}
		}
		return c.finish(ctx, t, false, fmt.Sprintf("gtrid %s began %s ago, more than max-txn-age %s", g, age.Round(time.Second), c.opts.MaxTxnAge))
	}
	t, err := c.decideMode(ctx, g, Committed, 0, rms, durable)
	if err != nil {
		return Report{}, err
	}
	if anyClientSettles(rms) {
		if err := c.answerAfterStandby(ctx, t); err != nil {
			return Report{}, err
		}
	}
	return c.finish(ctx, t, waitPhase2, "")
}

// Abort decides ABORT for gtrid and rolls back the listed branches. If COMMIT
// was decided first it fails with ErrAlreadyCommitted.
func (c *Coordinator) Abort(ctx context.Context, gtrid string, rms []BranchRef) (Report, error) {
	g, err := c.validate(gtrid, names(rms), false)
	if err != nil {
		return Report{}, err
	}
	t, err := c.decide(g, Aborted, AbortRequested, rms)
	if err != nil {
		return Report{}, err
	}
	if t.outcome == Committed {
		return Report{}, fmt.Errorf("%w: gtrid %s was committed at %s; it cannot be aborted",
			ErrAlreadyCommitted, g, t.decidedAt.UTC().Format(time.RFC3339Nano))
	}
	return c.finish(ctx, t, true, "")
}

// Status reports what the coordinator knows of gtrid. With resolve, an
// undecided gtrid is settled by writing ABORT (the first decision wins).
func (c *Coordinator) Status(ctx context.Context, gtrid string, resolve bool) (Report, error) {
	g, err := xid.Parse(gtrid)
	if err != nil {
		return Report{}, &InputError{Field: "gtrid", Reason: err.Error()}
	}
	c.mu.Lock()
	t := c.txns[g]
	if t != nil && t.deciding == nil {
		r := t.report(false)
		c.mu.Unlock()
		return r, nil
	}
	c.mu.Unlock()
	if resolve && t == nil && c.unknowable(g) {
		return Report{}, inputErr("gtrid", "gtrid %s began before this coordinator's promotion with --accept-data-loss and has no decision here: the old primary may have decided it; it is not resolved by presumption: settle it with tandem resolve after looking at what each database holds", g)
	}
	if !resolve {
		if t != nil { // being decided right now
			<-t.deciding
			return c.Status(ctx, gtrid, false)
		}
		return Report{GTRID: g, Outcome: Undecided, Message: "no decision recorded for this gtrid: it was never committed, or it finished more than " +
			c.opts.EndedRetention.String() + " ago"}, nil
	}
	// A COMMIT is forgotten EndedRetention after its phase 2 finished. For a
	// gtrid older than that, "no record" may mean "committed long ago": abort
	// it only if a branch is still prepared somewhere (then it cannot have
	// committed), never on absence of evidence.
	var inDoubt []BranchRef
	if time.Since(g.Time()) > c.opts.EndedRetention {
		var err error
		if inDoubt, err = c.preparedBranches(ctx, g); err != nil {
			return Report{}, err
		}
		if len(inDoubt) == 0 {
			return Report{GTRID: g, Outcome: Undecided, Message: "no decision recorded and no branch prepared on any resource manager: nothing is in doubt " +
				"(it never prepared, or it finished more than " + c.opts.EndedRetention.String() + " ago); nothing was written"}, nil
		}
	}
	t, err = c.decide(g, Aborted, AbortResolved, inDoubt)
	if err != nil {
		return Report{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return t.report(false), nil
}

// preparedBranches asks every resource manager whether it holds a branch of g
// prepared. An RM that cannot answer makes it fail: resolving needs evidence.
func (c *Coordinator) preparedBranches(ctx context.Context, g xid.GTRID) ([]BranchRef, error) {
	var out []BranchRef
	for _, name := range c.rmList {
		ok, err := c.rms[name].IsPrepared(ctx, xid.Branch{GTRID: g, RM: name}, time.Now())
		if err != nil {
			return nil, fmt.Errorf("coord: cannot resolve gtrid %s: %w; try again when it is reachable", g, err)
		}
		if ok {
			out = append(out, BranchRef{RM: name})
		}
	}
	return out, nil
}

// validate checks a request before anything is written.
func (c *Coordinator) validate(gtrid string, rms []string, needBranches bool) (xid.GTRID, error) {
	g, err := xid.Parse(gtrid)
	if err != nil {
		return g, &InputError{Field: "gtrid", Reason: err.Error()}
	}
	if needBranches && len(rms) == 0 {
		return g, inputErr("branches", "the branch list is empty: list every prepared branch (one per resource manager)")
	}
	if len(rms) > MaxBranches {
		return g, inputErr("branches", "%d branches, more than the maximum of %d", len(rms), MaxBranches)
	}
	for i, r := range rms {
		if _, ok := c.rms[r]; !ok {
			return g, inputErr("branches", "unknown resource manager %q: this coordinator knows %s", clip(r), strings.Join(c.rmList, ", "))
		}
		for _, prev := range rms[:i] {
			if prev == r {
				return g, inputErr("branches", "resource manager %q is listed twice: one branch per resource manager", r)
			}
		}
	}
	return g, nil
}

// decide writes outcome for g unless a decision exists; it returns the
// transaction as decided (by this call or an earlier one). The first decision
// to reach the log wins: concurrent deciders for one gtrid wait for it.
func (c *Coordinator) decide(g xid.GTRID, outcome Outcome, reason AbortReason, rms []BranchRef) (*txn, error) {
	return c.decideMode(context.Background(), g, outcome, reason, rms, true)
}

// decideMode is decide with a choice of durability for this record. A
// non-durable (nowait) decision is queued for the log writer; its phase 2
// waits until it is on disk (a branch committed on a decision the log then
// lost would break atomicity).
//
// A new COMMIT first passes admission control (admit.go), which may delay
// it while ctx allows, or refuse it with a *LogFullError: then nothing is
// written and no decision exists. Meanwhile the gtrid is held as being
// decided, so that concurrent calls for it wait for the outcome.
func (c *Coordinator) decideMode(ctx context.Context, g xid.GTRID, outcome Outcome, reason AbortReason, rms []BranchRef, durable bool) (*txn, error) {
	for {
		c.mu.Lock()
		if c.cancel == nil || c.ctx.Err() != nil {
			c.mu.Unlock()
			return nil, ErrClosed
		}
		t := c.txns[g]
		if t != nil && t.deciding != nil {
			ch := t.deciding
			c.mu.Unlock()
			<-ch
			continue
		}
		if t != nil {
			// Decided before. A late ABORTED answer also rolls back branches the
			// first decision did not list.
			if t.outcome == Aborted && t.addBranches(rms) {
				c.reopenTxn(t) // if phase 2 of the first decision finished: drive it again
				c.startPhase2Locked(t, false)
			}
			c.mu.Unlock()
			return t, nil
		}
		now := time.Now()
		t = newTxn(g, outcome, reason, now, rms)
		t.deciding = make(chan struct{})
		c.txns[g] = t
		if outcome == Aborted {
			t.seg = c.log.Segment() // the record goes here or later
		}
		c.mu.Unlock()

		if outcome == Committed {
			err := c.admitCommit(ctx, g)
			c.mu.Lock()
			if err != nil {
				ch := t.deciding
				t.deciding = nil
				delete(c.txns, g)
				c.mu.Unlock()
				close(ch)
				return nil, err
			}
			// Under c.mu: a checkpoint that does not see seg yet read its
			// segment before this, so this record lands at or after it.
			t.seg = c.log.Segment()
			t.decidedAt = time.Now()
			now = t.decidedAt
			c.mu.Unlock()
		}

		typ := recCommit
		if outcome == Aborted {
			typ = recAbort
		}
		d := decision{gtrid: g, decidedAt: now, reason: reason, rms: names(rms)}
		err := failpoint.Inject("before-commit-record")
		var pos wal.Position
		if err == nil {
			if durable {
				start := time.Now()
				pos, err = c.log.Append(typ, d.encode())
				waits.Coordinator.SinceTx(waits.LogFileSync, start, g, "")
			} else {
				pos, err = c.log.AppendAsync(typ, d.encode())
			}
		}
		if err == nil {
			_ = failpoint.Inject("after-commit-record") // kill or sleep; the record is durable
		}

		c.mu.Lock()
		ch := t.deciding
		t.deciding = nil
		if err != nil {
			delete(c.txns, g)
			c.mu.Unlock()
			close(ch)
			c.logger.Error("decision log write failed; no more decisions until restart", "gtrid", g.String(), "outcome", outcome.String(), "error", err)
			return nil, fmt.Errorf("%w: writing %s for gtrid %s: %v; restart the coordinator to replay its log, then ask Status", ErrOutcomeUnknown, outcome, g, err)
		}
		if c.halted {
			delete(c.txns, g)
			c.mu.Unlock()
			close(ch)
			return nil, fmt.Errorf("%w: the coordinator was halted (fenced or stopped) while writing %s for gtrid %s: the coordinator that took over decides it; ask it (Status)", ErrOutcomeUnknown, outcome, g)
		}
		for _, r := range rms {
			delete(c.seen, xid.Branch{GTRID: g, RM: r.RM})
		}
		t.seg = max(t.seg, pos.Segment) // exact for Append, a lower bound for AppendAsync
		c.unfinished.Add(1)
		t.unsynced = !durable
		c.startPhase2Locked(t, false)
		c.mu.Unlock()
		close(ch)
		return t, nil
	}
}

// finish waits for phase 2 (if asked) and reports.
func (c *Coordinator) finish(ctx context.Context, t *txn, waitPhase2 bool, msg string) (Report, error) {
	if waitPhase2 {
		wait := c.opts.Phase2Wait
		if dl, ok := ctx.Deadline(); ok {
			// Reply a little before the caller's deadline so the reply arrives in time.
			left := time.Until(dl)
			wait = min(wait, left-min(left/10+5*time.Millisecond, 250*time.Millisecond))
		}
		if wait > 0 {
			timer := time.NewTimer(wait)
			select {
			case <-t.replyReady:
			case <-timer.C:
			case <-ctx.Done():
			case <-c.ctx.Done():
			}
			timer.Stop()
		}
	}
	c.mu.Lock()
	r := t.report(true)
	c.mu.Unlock()
	if msg != "" {
		r.Message = msg
	}
	if r.Phase2Pending && r.Message == "" {
		r.Message = pendingMessage(r)
	}
	return r, nil
}

func pendingMessage(r Report) string {
	var parts []string
	for _, b := range r.Branches {
		if b.State == BranchPending && !b.ClientSettles {
			s := b.RM
			if b.LastError != "" {
				s += " (" + b.LastError + ")"
			}
			parts = append(parts, s)
		}
	}
	return fmt.Sprintf("%s is durable; phase 2 is still pending on %s and the coordinator keeps retrying", r.Outcome, strings.Join(parts, ", "))
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
