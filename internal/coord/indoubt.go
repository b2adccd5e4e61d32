package coord

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/xid"
)

// unknowable reports whether g may have been decided by a primary whose
// decisions this coordinator's log lacks (Options.InDoubtBefore): then the
// absence of a decision here proves nothing.
// The boundary is moved later by MaxClockSkew: a client whose clock runs
// ahead stamps a gtrid it began before the promotion with a later time.
func (c *Coordinator) unknowable(g xid.GTRID) bool {
	return !c.opts.InDoubtBefore.IsZero() && g.Time().Before(c.opts.InDoubtBefore.Add(c.opts.MaxClockSkew))
}

// checkKnowable refuses to decide an unknowable gtrid that has no decision
// here by presumption (a Commit, an Abort, a too-old Commit's ABORT): the
// old primary may have decided it and acted on it, so any decision taken
// here could split it. The answer is an unknown outcome — never a refusal,
// which a client would take as leave to roll back; an operator settles it
// (ResolveInDoubt) after looking at what each database holds.
func (c *Coordinator) checkKnowable(g xid.GTRID) error {
	if !c.unknowable(g) {
		return nil
	}
	c.mu.Lock()
	decided := c.txns[g] != nil
	c.mu.Unlock()
	if decided {
		return nil
	}
	return fmt.Errorf("%w: gtrid %s began before this coordinator was promoted with --accept-data-loss and has no decision here: "+
		"the old primary may have decided it; it is settled by an operator (tandem resolve --gtrid %s), never by presumption", ErrOutcomeUnknown, g, g)
}

// InDoubtBranch is a prepared branch the coordinator will not settle by
// itself, and why.
type InDoubtBranch struct {
	GTRID string `json:"gtrid"`
	RM    string `json:"rm"`
	// Owner is the branch's owner, 32 hex digits ("" for a legacy,
	// unowned name); OwnerShort its first 8 digits ("unowned").
	Owner      string `json:"owner"`
	OwnerShort string `json:"owner_short"`
	// Reason is one of InDoubtReasons; Why says it in words.
	Reason InDoubtReason `json:"reason"`
	Why    string        `json:"why"`
	// Began is the gtrid's start (its time stamp, the client's clock);
	// AgeSeconds how long ago that was when listed.
	Began      time.Time `json:"began"`
	AgeSeconds float64   `json:"age_seconds"`
	// FirstSeen is when this coordinator's scan first saw it prepared.
	FirstSeen time.Time `json:"first_seen"`
}

// InDoubt lists the prepared branches, seen by the in-doubt scan, that
// this coordinator never settles by itself (owner.go): another cluster's
// (even with a decision for the gtrid here), unowned legacy names unless
// adopted, and its own of gtrids with no decision here that began before
// its log was born or before an unsynchronized promotion. It does no I/O.
func (c *Coordinator) InDoubt() []InDoubtBranch {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []InDoubtBranch
	for b, at := range c.seen {
		why := c.owned(b)
		if why != ReasonForeign {
			if c.txns[b.GTRID] != nil {
				continue // decided here: phase 2 settles it
			}
			why = c.holdReason(b)
		}
		if why == "" {
			continue // presumed aborted once past the orphan timeout
		}
		ib := InDoubtBranch{GTRID: b.GTRID.String(), RM: b.RM, OwnerShort: b.Owner.Short(), Reason: why, Why: why.Describe(),
			Began: b.GTRID.Time().UTC(), AgeSeconds: now.Sub(b.GTRID.Time()).Seconds(), FirstSeen: at}
		if b.Owned() {
			ib.Owner = b.Owner.String()
		}
		out = append(out, ib)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].GTRID != out[j].GTRID {
			return out[i].GTRID < out[j].GTRID
		}
		if out[i].RM != out[j].RM {
			return out[i].RM < out[j].RM
		}
		return out[i].Owner < out[j].Owner
	})
	return out
}

// InDoubtBranches is the number of InDoubt branches (the gauge
// tandem_in_doubt_branches).
func (c *Coordinator) InDoubtBranches() int { return len(c.InDoubt()) }

// InDoubtByReason counts the InDoubt branches by reason (every reason
// present, zero or not): the gauge tandem_in_doubt_branches_by_reason.
func (c *Coordinator) InDoubtByReason() map[InDoubtReason]int {
	out := map[InDoubtReason]int{}
	for _, r := range InDoubtReasons {
		out[r] = 0
	}
	for _, b := range c.InDoubt() {
		out[b.Reason]++
	}
	return out
}

// Holdings asks every resource manager whether it holds a branch of gtrid
// prepared, under any owner's name (what an operator looks at before
// ResolveInDoubt, which asks again). It answers from a recover scan that
// started at most HoldingsMaxAge ago (scans are shared): asked in a loop,
// by anyone who may read the admin listener, it makes each database scan
// at most about once per HoldingsMaxAge.
func (c *Coordinator) Holdings(ctx context.Context, gtrid string) (map[string]bool, error) {
	g, err := xid.Parse(gtrid)
	if err != nil {
		return nil, &InputError{Field: "gtrid", Reason: err.Error()}
	}
	held, err := c.branchesOf(ctx, g, time.Now().Add(-HoldingsMaxAge))
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, name := range c.rmList {
		out[name] = false
	}
	for _, b := range held {
		out[b.RM] = true
	}
	return out, nil
}

// branchesOf asks every resource manager which branches of g decided by a
// coordinator (CommitPoint "", any owner) it holds prepared, from scans
// that started no earlier than since. An RM that cannot answer makes it
// fail: settling needs evidence.
func (c *Coordinator) branchesOf(ctx context.Context, g xid.GTRID, since time.Time) ([]xid.Branch, error) {
	var out []xid.Branch
	for _, name := range c.rmList {
		bs, err := c.preparedOf(ctx, name, g, since)
		if err != nil {
			return nil, fmt.Errorf("coord: cannot resolve gtrid %s: cannot tell what resource manager %q holds of it: %w; try again when it is reachable", g, name, err)
		}
		for _, b := range bs {
			if b.CommitPoint == "" {
				out = append(out, b)
			}
		}
	}
	return out, nil
}

// ResolveInDoubt settles gtrid as an operator chose (commit or abort)
// after looking at what each resource manager holds: it writes the decision
// for the branches prepared now and drives their phase 2. A gtrid already
// decided here keeps its decision (returned, with an error if it differs
// from the choice); one with no prepared branch is refused (nothing to
// settle, nothing written).
//
// Branches of another owner (foreign) are settled too, by their own names,
// once the decision is in this log: this is how an operator settles
// another cluster's branches whose coordinator is gone for good. A foreign
// branch that fails stays prepared and listed: resolving again retries it.
func (c *Coordinator) ResolveInDoubt(ctx context.Context, gtrid string, commit bool) (Report, error) {
	g, err := xid.Parse(gtrid)
	if err != nil {
		return Report{}, &InputError{Field: "gtrid", Reason: err.Error()}
	}
	want := Aborted
	if commit {
		want = Committed
	}
	held, err := c.branchesOf(ctx, g, time.Now())
	if err != nil {
		return Report{}, err
	}
	var prepared []BranchRef
	var foreign []xid.Branch
	for _, b := range held {
		if c.owned(b) == ReasonForeign {
			foreign = append(foreign, b)
		} else if !hasRM(prepared, b.RM) {
			prepared = append(prepared, BranchRef{RM: b.RM})
		}
	}
	c.mu.Lock()
	t := c.txns[g]
	c.mu.Unlock()
	if t == nil && len(held) == 0 {
		return Report{}, inputErr("gtrid", "no resource manager holds a branch of %s prepared: nothing to settle, nothing written", g)
	}
	reason := AbortResolved
	if commit {
		reason = 0
	}
	t, err = c.decideMode(ctx, g, want, reason, prepared, true)
	if err != nil {
		return Report{}, err
	}
	if t.outcome != want {
		r, _ := c.finish(ctx, t, true, "")
		return r, fmt.Errorf("%w: gtrid %s was already decided %s here; that decision stands (nothing settled by hand)", ErrAlreadyCommitted, g, t.outcome)
	}
	var byHand []BranchReport
	for _, b := range foreign {
		br := BranchReport{RM: b.RM, State: BranchDone, Attempts: 1}
		if err := c.settleNamed(ctx, b, commit); err != nil && !errors.Is(err, rm.ErrBranchNotFound) {
			br.State, br.LastError = BranchPending, fmt.Sprintf("owner %s: %v (still prepared and listed: resolve again)", b.Owner.Short(), err)
		}
		c.logger.Warn("settled another cluster's prepared branch by hand (tandem resolve)", "gtrid", g.String(), "rm", b.RM, "owner", b.Owner.String(),
			"outcome", want.String(), "error", br.LastError)
		byHand = append(byHand, br)
	}
	r, err := c.finish(ctx, t, true, "")
	r.Branches = append(r.Branches, byHand...)
	for _, br := range byHand {
		if br.State == BranchPending {
			r.Phase2Pending = true
		}
	}
	return r, err
}

// settleNamed commits or rolls back the prepared branch named b exactly
// (an operator's choice for another owner's branch).
func (c *Coordinator) settleNamed(ctx context.Context, b xid.Branch, commit bool) error {
	ctx, cancel := context.WithTimeout(ctx, phase2CallTimeout)
	defer cancel()
	conn := c.rms[b.RM]
	switch {
	case c.opts.settle != nil:
		return c.opts.settle(ctx, b.RM, b, commit)
	case commit:
		return conn.CommitPrepared(ctx, b)
	}
	return conn.RollbackPrepared(ctx, b)
}

func hasRM(bs []BranchRef, name string) bool {
	for _, b := range bs {
		if b.RM == name {
			return true
		}
	}
	return false
}

// HoldingsMaxAge is how old a recover scan Holdings may answer from (see
// Holdings).
const HoldingsMaxAge = 200 * time.Millisecond

// scanRecord is what the last in-doubt scan was: when it started, and the
// resource managers it could not read (their branches are listed as the
// scan before saw them).
type scanRecord struct {
	Started time.Time
	Unread  []string
}

// freshScans spaces the scans run for InDoubtNow: one at a time, each
// shared by every listing asked before it started, and at most one per
// HoldingsMaxAge however often anyone asks.
type freshScans struct {
	mu   sync.Mutex
	last time.Time // when the last scan run for a listing was requested
}

// InDoubtListing is InDoubt as of one in-doubt scan.
type InDoubtListing struct {
	InDoubt []InDoubtBranch `json:"in_doubt"`
	// ScannedAt is when the scan the list comes from started (zero: no
	// scan has ended since this coordinator started).
	ScannedAt time.Time `json:"scanned_at"`
	// ScanComplete: that scan read every resource manager. When false,
	// UnreadRMs names those it could not read: their branches are listed
	// as an earlier scan saw them, or not at all.
	ScanComplete bool     `json:"scan_complete"`
	UnreadRMs    []string `json:"unread_rms,omitempty"`
}

// LastInDoubtListing is InDoubt as of the last scan, without I/O.
func (c *Coordinator) LastInDoubtListing() InDoubtListing {
	c.mu.Lock()
	rec := c.lastScan
	c.mu.Unlock()
	return InDoubtListing{InDoubt: c.InDoubt(), ScannedAt: rec.Started, ScanComplete: !rec.Started.IsZero() && len(rec.Unread) == 0,
		UnreadRMs: append([]string(nil), rec.Unread...)}
}

// InDoubtNow is InDoubt as of a scan of every resource manager that started
// after it was called: what an operator lists is what the databases hold
// when asked, not what the periodic scan saw up to ScanInterval earlier
// (right after a promotion, the old primary's clients may have prepared
// branches since). Callers arriving while a scan runs share the next one;
// scans run on this account start at least HoldingsMaxAge apart, so asking
// in a loop (the listing is a read, open to local users on a loopback
// admin listener) scans each database at most about once per
// HoldingsMaxAge.
func (c *Coordinator) InDoubtNow(ctx context.Context) (InDoubtListing, error) {
	asked := time.Now()
	c.listScan.mu.Lock()
	defer c.listScan.mu.Unlock()
	c.mu.Lock()
	started := c.lastScan.Started
	c.mu.Unlock()
	if started.Before(asked) {
		if wait := time.Until(c.listScan.last.Add(HoldingsMaxAge)); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return InDoubtListing{}, ctx.Err()
			}
		}
		c.listScan.last = time.Now()
		if err := c.ScanNow(ctx); err != nil {
			return InDoubtListing{}, fmt.Errorf("coord: scanning the resource managers for in-doubt branches: %w", err)
		}
	}
	return c.LastInDoubtListing(), nil
}
