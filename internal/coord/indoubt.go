package coord

import (
	"context"
	"fmt"
	"sort"
	"time"

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
// itself (see Options.InDoubtBefore).
type InDoubtBranch struct {
	GTRID     string    `json:"gtrid"`
	RM        string    `json:"rm"`
	FirstSeen time.Time `json:"first_seen"`
}

// InDoubt lists the prepared branches, seen by the in-doubt scan, of gtrids
// that began before an unsynchronized promotion and have no decision here.
// It does no I/O.
func (c *Coordinator) InDoubt() []InDoubtBranch {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []InDoubtBranch
	for b, at := range c.seen {
		if c.txns[b.GTRID] == nil && c.unknowable(b.GTRID) {
			out = append(out, InDoubtBranch{GTRID: b.GTRID.String(), RM: b.RM, FirstSeen: at})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].GTRID != out[j].GTRID {
			return out[i].GTRID < out[j].GTRID
		}
		return out[i].RM < out[j].RM
	})
	return out
}

// InDoubtBranches is the number of InDoubt branches (the gauge
// tandem_in_doubt_branches).
func (c *Coordinator) InDoubtBranches() int { return len(c.InDoubt()) }

// Holdings asks every resource manager whether it holds a branch of gtrid
// prepared (what an operator looks at before ResolveInDoubt, which asks
// again). It answers from a recover scan that started at most
// HoldingsMaxAge ago (scans are shared): asked in a loop, by anyone who may
// read the admin listener, it makes each database scan at most about once
// per HoldingsMaxAge.
func (c *Coordinator) Holdings(ctx context.Context, gtrid string) (map[string]bool, error) {
	g, err := xid.Parse(gtrid)
	if err != nil {
		return nil, &InputError{Field: "gtrid", Reason: err.Error()}
	}
	prepared, err := c.preparedBranchesSince(ctx, g, time.Now().Add(-HoldingsMaxAge))
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, name := range c.rmList {
		out[name] = false
	}
	for _, b := range prepared {
		out[b.RM] = true
	}
	return out, nil
}

// ResolveInDoubt settles gtrid as an operator chose (commit or abort)
// after looking at what each resource manager holds: it writes the decision
// for the branches prepared now and drives their phase 2. A gtrid already
// decided here keeps its decision (returned, with an error if it differs
// from the choice); one with no prepared branch is refused (nothing to
// settle, nothing written).
func (c *Coordinator) ResolveInDoubt(ctx context.Context, gtrid string, commit bool) (Report, error) {
	g, err := xid.Parse(gtrid)
	if err != nil {
		return Report{}, &InputError{Field: "gtrid", Reason: err.Error()}
	}
	want := Aborted
	if commit {
		want = Committed
	}
	prepared, err := c.preparedBranches(ctx, g)
	if err != nil {
		return Report{}, err
	}
	c.mu.Lock()
	t := c.txns[g]
	c.mu.Unlock()
	if t == nil && len(prepared) == 0 {
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
	r, err := c.finish(ctx, t, true, "")
	if err == nil && r.Outcome != want {
		err = fmt.Errorf("%w: gtrid %s was already decided %s here; that decision stands", ErrAlreadyCommitted, g, r.Outcome)
	}
	return r, err
}

// HoldingsMaxAge is how old a recover scan Holdings may answer from (see
// Holdings).
const HoldingsMaxAge = 200 * time.Millisecond
