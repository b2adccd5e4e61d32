package coord

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/tandem-tx/tandem/internal/failpoint"
	"github.com/tandem-tx/tandem/internal/wal"
	"github.com/tandem-tx/tandem/waits"
	"github.com/tandem-tx/tandem/xid"
)

// MaxBranches bounds the branches of one global transaction.
const MaxBranches = 64

// CommitMode is a Commit's durability and visibility.
type CommitMode struct {
	// Durability: DurabilityDefault takes Options.NoWait.
	Durability Durability
	// WaitPhase2 is visibility sync (true) or async (false).
	WaitPhase2 bool
	// MayTakeOver (visibility async only): the client lets the coordinator
	// take its client-settled branches over when the standby does not hold
	// the decision within Options.TakeOverAfter (takeOverWhileStandbyLags).
	MayTakeOver bool
}

// Durability of one COMMIT decision.
type Durability uint8

// The durability modes of a Commit (README, "Commit modes").
const (
	DurabilityDefault Durability = iota
	DurabilityWait               // reply once the COMMIT record is on disk
	DurabilityNoWait             // reply once it is queued for the log writer
)

// Commit decides COMMIT for gtrid unless ABORT was decided first, and waits
// for phase 2 as visibility asks. See the package doc for the rules.
//
// With mode.WaitPhase2, it returns when phase 2 finished, or shortly before
// ctx's deadline (or after Options.Phase2Wait without a deadline) with
// Phase2Pending set. The reply is COMMITTED either way once the record is durable.
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
	if err := c.checkSkew(g); err != nil {
		return Report{}, err
	}
	if err := c.checkUsable(g, rms); err != nil {
		return Report{}, err
	}
	if err := c.checkKnowable(g); err != nil {
		return Report{}, err
	}
	// ABORTs are remembered MaxTxnAge after their decision; a gtrid stamped
	// by a clock up to MaxClockSkew ahead looks that much younger.
	if age := time.Since(g.Time()); age+c.opts.MaxClockSkew > c.opts.MaxTxnAge {
		t, err := c.decide(ctx, g, Aborted, AbortTooOld, rms)
		if err != nil {
			return Report{}, err
		}
		if taken, _ := c.takeOverWhileStandbyLags(ctx, t, false); taken {
			// A COMMIT decided (and taken over) before this Commit came.
			r, err := c.finish(ctx, t, false, "")
			r.TakenOver = true
			return r, err
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
		if taken, now := c.takeOverWhileStandbyLags(ctx, t, mode.MayTakeOver && !waitPhase2); taken {
			r, err := c.finish(ctx, t, waitPhase2, "")
			r.TakenOver, r.TookOver = true, now
			return r, err
		}
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
	if err := c.checkKnowable(g); err != nil {
		return Report{}, err
	}
	t, err := c.decide(ctx, g, Aborted, AbortRequested, rms)
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
// A gtrid with no record here whose prepared branches name a commit point
// is answered from that commit point's decision table instead (with
// resolve, by taking its key); nothing is written to the log for it.
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
	if t == nil {
		// A commit-point transaction is decided in its commit point's
		// table, not here (cprecover.go); an unsynchronized promotion
		// changes nothing for it.
		if r, ok, err := c.cpStatus(ctx, g, resolve); ok || err != nil {
			return r, err
		}
	}
	if resolve && t == nil && c.unknowable(g) {
		return Report{}, inputErr("gtrid", "gtrid %s began before this coordinator's promotion with --accept-data-loss and has no decision here: the old primary may have decided it; it is not resolved by presumption: settle it with tandem resolve after looking at what each database holds", g)
	}
	if !resolve {
		if t != nil { // being decided right now
			<-t.deciding
			return c.Status(ctx, gtrid, false)
		}
		return Report{GTRID: g, Outcome: Undecided, Message: c.undecidedMessage(ctx, g)}, nil
	}
	if err := c.checkSkew(g); err != nil {
		return Report{}, err
	}
	if c.closed() {
		return Report{}, ErrClosed
	}
	// Absence of evidence is not abort. "No record" may mean "committed and
	// forgotten": a finished COMMIT is forgotten EndedRetention after its
	// phase 2 ended, or earlier when a checkpoint needs the log space, and
	// a client's clock may be ahead. So resolve always asks the resource
	// managers and writes ABORT only if a branch is still prepared
	// somewhere: a COMMIT is forgotten only once every branch acknowledged
	// it, so a prepared branch proves that no forgotten COMMIT exists.
	held, err := c.branchesOf(ctx, g, time.Now())
	if err != nil {
		return Report{}, err
	}
	var inDoubt []BranchRef
	for _, b := range held {
		if why := c.holdReason(b); why != "" {
			// Not this coordinator's to presume: nothing is written, for
			// any branch of g.
			return Report{}, inputErr("gtrid", "gtrid %s has a branch prepared on %s (owner %s) that this coordinator never presumes aborted: %s; "+
				"it is listed by tandem status --in-doubt: settle it with tandem resolve after looking at what each database holds; nothing was written",
				g, b.RM, b.Owner.Short(), why.Describe())
		}
		if !hasRM(inDoubt, b.RM) {
			inDoubt = append(inDoubt, BranchRef{RM: b.RM})
		}
	}
	if len(inDoubt) == 0 {
		return Report{GTRID: g, Outcome: Undecided, Message: "no decision recorded and no branch prepared on any resource manager: nothing is in doubt " +
			"(it never prepared, it is still running, or it finished and was forgotten); nothing was written"}, nil
	}
	t, err = c.decide(ctx, g, Aborted, AbortResolved, inDoubt)
	if err != nil {
		return Report{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return t.report(false), nil
}

// undecidedAskTimeout bounds how long Status waits for the resource
// managers' answers about an undecided gtrid.
const undecidedAskTimeout = 2 * time.Second

// undecidedMessage says what the resource managers hold of g, which has no
// decision here: prepared branches (in doubt: where, and when the in-doubt
// scan aborts them), or none. An RM that cannot answer is named.
func (c *Coordinator) undecidedMessage(ctx context.Context, g xid.GTRID) string {
	ctx, cancel := context.WithTimeout(ctx, undecidedAskTimeout)
	defer cancel()
	var held, failed, kept []string
	var firstSeen time.Time
	for _, name := range c.rmList {
		bs, err := c.preparedOf(ctx, name, g, time.Now())
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s (%v)", name, err))
			continue
		}
		for _, b := range bs {
			if b.CommitPoint != "" {
				continue
			}
			if why := c.holdReason(b); why != "" {
				kept = append(kept, fmt.Sprintf("%s (owner %s: %s)", name, b.Owner.Short(), why.Describe()))
				continue
			}
			held = append(held, name)
			c.mu.Lock()
			if s, seen := c.seen[b]; seen && (firstSeen.IsZero() || s.Before(firstSeen)) {
				firstSeen = s
			}
			c.mu.Unlock()
		}
	}
	var msg string
	switch {
	case len(kept) > 0:
		msg = fmt.Sprintf("no decision recorded here; prepared on %s: never presumed aborted by this coordinator, listed by tandem status --in-doubt; "+
			"its owner's coordinator settles it, or an operator with tandem resolve", strings.Join(kept, ", "))
		if len(held) > 0 {
			msg += "; also prepared under this coordinator's own name on " + strings.Join(held, ", ")
		}
	case len(held) > 0:
		when := fmt.Sprintf("within %s (the orphan timeout, counted from the scan that first sees it)", c.opts.OrphanTimeout+c.opts.ScanInterval)
		if !firstSeen.IsZero() {
			when = fmt.Sprintf("in about %s (first seen %s ago; orphan timeout %s)",
				max(time.Until(firstSeen.Add(c.opts.OrphanTimeout)), 0).Round(time.Second), time.Since(firstSeen).Round(time.Second), c.opts.OrphanTimeout)
		}
		msg = fmt.Sprintf("no decision recorded; the transaction is in doubt: prepared on %s. Unless its client's Commit arrives first, "+
			"the in-doubt scan rolls it back %s; to abort it now: tandem status --resolve %s", strings.Join(held, ", "), when, g)
	default:
		msg = "no decision recorded and no branch is prepared on any resource manager: it was never committed (or is still running), " +
			"or it finished and was forgotten (finished COMMITs are remembered for " + c.opts.EndedRetention.String() + ")"
	}
	if len(failed) > 0 {
		msg += "; could not ask " + strings.Join(failed, ", ")
	}
	return msg
}

// checkUsable refuses a new COMMIT that involves a resource manager whose
// database refused the coordinator's login (an *rm.ConfigError): phase 2
// could not reach its branch, which would hold its locks until an operator
// fixed the DSN. A gtrid already decided is answered as usual.
func (c *Coordinator) checkUsable(g xid.GTRID, rms []BranchRef) error {
	for _, b := range rms {
		// An atomic load per branch; the lock only when one is misconfigured.
		if err := c.rms[b.RM].Misconfigured(); err != nil {
			c.mu.Lock()
			decided := c.txns[g] != nil
			c.mu.Unlock()
			if decided {
				return nil
			}
			return fmt.Errorf("coord: commit refused, nothing written: %w", err)
		}
	}
	return nil
}

// closed reports whether Close began.
func (c *Coordinator) closed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cancel == nil || c.ctx.Err() != nil
}

// checkSkew refuses a gtrid stamped further in the future than
// MaxClockSkew: its client's clock is ahead, and every age rule would be
// off by that much. Nothing is written.
func (c *Coordinator) checkSkew(g xid.GTRID) error {
	if ahead := time.Until(g.Time()); ahead > c.opts.MaxClockSkew {
		return inputErr("gtrid", "gtrid %s is stamped %s in the future, more than max-clock-skew %s: the client's clock is ahead; "+
			"synchronize it (NTP) and retry the transaction", g, ahead.Round(time.Millisecond), c.opts.MaxClockSkew)
	}
	return nil
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
// Only ctx's span is taken (tracing.go): its end does not cut the decision
// short.
func (c *Coordinator) decide(ctx context.Context, g xid.GTRID, outcome Outcome, reason AbortReason, rms []BranchRef) (*txn, error) {
	return c.decideMode(context.WithoutCancel(ctx), g, outcome, reason, rms, true)
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
//
// It runs in four steps, one exit: reserve (find g's decision, or hold g
// as being decided), admit (admission control), write (the record) and
// publish (the decision enters the table and its phase 2 starts, or g is
// let go; either way the calls waiting for g wake up).
func (c *Coordinator) decideMode(ctx context.Context, g xid.GTRID, outcome Outcome, reason AbortReason, rms []BranchRef, durable bool) (*txn, error) {
	t, reserved, err := c.reserve(g, outcome, reason, rms, tracedSpan(ctx))
	if !reserved {
		return t, err
	}
	// t.deciding is set: publish clears it, whatever happens below.
	at, err := c.admitDecision(ctx, t, outcome, reason)
	var pos wal.Position
	if err == nil {
		pos, err = c.writeDecision(ctx, g, outcome, reason, at, rms, durable)
	}
	return c.publish(t, rms, pos, durable, err)
}

// reserve returns g's decision if one exists (reserved false; a late
// ABORTED answer also rolls back branches the first decision did not list),
// waiting while another call is deciding g; otherwise it enters a new
// transaction for g, held as being decided (t.deciding set), and reports
// reserved: the caller must then publish it. It fails with ErrClosed once
// the coordinator is closed or halted. A new transaction's phase 2 is
// traced under span (txn.traceParent), if not nil.
func (c *Coordinator) reserve(g xid.GTRID, outcome Outcome, reason AbortReason, rms []BranchRef, span trace.Span) (*txn, bool, error) {
	for {
		c.mu.Lock()
		if c.cancel == nil || c.ctx.Err() != nil {
			c.mu.Unlock()
			return nil, false, ErrClosed
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
			return t, false, nil
		}
		t = newTxn(g, outcome, reason, time.Now(), rms)
		t.traceParent = span
		t.deciding = make(chan struct{})
		c.txns[g] = t
		if outcome == Aborted {
			t.seg = c.log.Segment() // the record goes here or later
		}
		c.mu.Unlock()
		return t, true, nil
	}
}

// admitDecision passes a reserved decision through admission control
// (admit.go) when it needs to: every COMMIT, and an ABORT whose reason is
// admitted. An admitted COMMIT is stamped then: its decision time and the
// log segment its record goes to or after. It returns the decision's time.
func (c *Coordinator) admitDecision(ctx context.Context, t *txn, outcome Outcome, reason AbortReason) (time.Time, error) {
	at := t.decidedAt // set by reserve, in this goroutine
	if outcome != Committed && !reason.admitted() {
		return at, nil
	}
	if outcome != Committed {
		return at, c.admitAbort(ctx)
	}
	if err := c.admitCommit(ctx, t.gtrid); err != nil {
		return at, err
	}
	c.mu.Lock()
	// Under c.mu: a checkpoint that does not see seg yet read its segment
	// before this, so this record lands at or after it.
	t.seg = c.log.Segment()
	t.decidedAt = time.Now()
	at = t.decidedAt
	c.mu.Unlock()
	return at, nil
}

// writeDecision writes the COMMIT or ABORT record of g: on disk at return
// when durable (Append), queued for the log writer otherwise (AppendAsync).
// A failure is logged and returned as ErrOutcomeUnknown. When ctx's span
// records, the write is a span (SpanDecisionLog).
func (c *Coordinator) writeDecision(ctx context.Context, g xid.GTRID, outcome Outcome, reason AbortReason, at time.Time, rms []BranchRef, durable bool) (pos wal.Position, err error) {
	typ := recCommit
	if outcome == Aborted {
		typ = recAbort
	}
	if sp := startSpan(tracedSpan(ctx), SpanDecisionLog); sp != nil {
		sp.SetAttributes(attrOutcome.String(outcomeName(outcome)), attrDurable.Bool(durable))
		defer func() { endSpan(sp, err) }()
	}
	d := decision{gtrid: g, decidedAt: at, reason: reason, rms: names(rms)}
	err = failpoint.Inject("before-commit-record")
	if err == nil {
		if durable {
			start := time.Now()
			pos, err = c.log.Append(typ, d.encode())
			c.opts.Waits.SinceTx(waits.LogFileSync, start, g, "")
		} else {
			pos, err = c.log.AppendAsync(typ, d.encode())
		}
	}
	if err != nil {
		c.logger.Error("decision log write failed; no more decisions until restart", "gtrid", g.String(), "outcome", outcome.String(), "error", err)
		return pos, fmt.Errorf("%w: writing %s for gtrid %s: %v; restart the coordinator to replay its log, then ask Status", ErrOutcomeUnknown, outcome, g, err)
	}
	_ = failpoint.Inject("after-commit-record") // kill or sleep; the record is durable
	return pos, nil
}

// publish ends a reservation, decideMode's one exit. After err (refused by
// admission control, or the record not written), or when the coordinator
// was halted (fenced or stopped) while the record was written, g is
// forgotten: no decision of this coordinator exists for it, and a halted
// one reports ErrOutcomeUnknown. Otherwise the decision is in the table and
// its phase 2 starts (pos: the record's position, exact for a durable
// write, a lower bound otherwise). The calls waiting for g wake up either
// way.
func (c *Coordinator) publish(t *txn, rms []BranchRef, pos wal.Position, durable bool, err error) (*txn, error) {
	c.mu.Lock()
	ch := t.deciding
	t.deciding = nil
	if err == nil && c.halted {
		err = fmt.Errorf("%w: the coordinator was halted (fenced or stopped) while writing %s for gtrid %s: the coordinator that took over decides it; ask it (Status)", ErrOutcomeUnknown, t.outcome, t.gtrid)
	}
	if err != nil {
		delete(c.txns, t.gtrid)
	} else {
		for _, r := range rms {
			for _, b := range c.ownNames(t.gtrid, r.RM) {
				delete(c.seen, b)
			}
		}
		t.seg = max(t.seg, pos.Segment)
		c.unfinished.Add(1)
		t.unsynced = !durable
		c.startPhase2Locked(t, false)
	}
	c.mu.Unlock()
	close(ch)
	if err != nil {
		return nil, err
	}
	return t, nil
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
