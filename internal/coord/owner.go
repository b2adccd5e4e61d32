package coord

import (
	"context"
	"errors"
	"time"

	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/xid"
)

// Ownership (docs/ownership.md). A prepared branch decided by a
// coordinator's log (CommitPoint "") carries its owner, the cluster whose
// log decides it. This coordinator:
//   - settles its own branches (owner == Options.Owner) by its log's
//     decision, and presumes abort for one with none past the orphan
//     timeout, unless its gtrid began before this log was born
//     (Options.Born) or before an unsynchronized promotion
//     (Options.InDoubtBefore): those are listed;
//   - never touches another owner's (foreign) branch: it is listed, with
//     its owner and age, for an operator (tandem resolve);
//   - lists unowned branches (legacy names, from an SDK made before owners
//     existed) unless Options.AdoptUnowned makes them its own; a decision
//     in its log for the gtrid is still applied to them (a client from
//     before owners existed committed through this coordinator).
//
// Branches named with a commit point are the commit point's table's
// (cprecover.go), whatever their owner.

// InDoubtReason says why a prepared branch is listed rather than settled
// by this coordinator.
type InDoubtReason string

// The reasons of InDoubt.
const (
	// ReasonForeign: the branch's owner is another cluster: its
	// coordinator decides it; this one never touches it.
	ReasonForeign InDoubtReason = "foreign-owner"
	// ReasonUnowned: a legacy name with no owner, and --adopt-unowned is
	// not given: whoever decided it is unknown.
	ReasonUnowned InDoubtReason = "unowned-legacy-name"
	// ReasonBeforeBirth: the gtrid began before this coordinator's log was
	// created (less the clock skew allowed): whatever decided it then is
	// not in this log.
	ReasonBeforeBirth InDoubtReason = "began-before-log-born"
	// ReasonBeforePromotion: the gtrid began before a promotion with
	// --accept-data-loss: the old primary may have decided it.
	ReasonBeforePromotion InDoubtReason = "began-before-unsynchronized-promotion"
)

// InDoubtReasons lists every reason, in the order a listing shows them.
var InDoubtReasons = []InDoubtReason{ReasonForeign, ReasonUnowned, ReasonBeforeBirth, ReasonBeforePromotion}

// Describe says the reason in words, for listings and logs.
func (r InDoubtReason) Describe() string {
	switch r {
	case ReasonForeign:
		return "foreign owner: another coordinator cluster decides it"
	case ReasonUnowned:
		return "unowned legacy name (serve --adopt-unowned makes such branches this coordinator's)"
	case ReasonBeforeBirth:
		return "began before this coordinator's log was born"
	case ReasonBeforePromotion:
		return "began before an unsynchronized promotion"
	}
	return string(r)
}

// owned classifies a coordinator-decided branch (CommitPoint ""): ""
// when it is this coordinator's own, else ReasonForeign or ReasonUnowned.
func (c *Coordinator) owned(b xid.Branch) InDoubtReason {
	switch {
	case b.Owner == c.opts.Owner:
		return ""
	case b.Owner.IsZero():
		if c.opts.AdoptUnowned {
			return ""
		}
		return ReasonUnowned
	}
	return ReasonForeign
}

// bornAfter reports whether b's gtrid may have begun before this
// coordinator's log was born: then the absence of a decision here proves
// nothing. The boundary is moved later by MaxClockSkew, as for a promotion
// (unknowable): a client whose clock runs ahead stamps a gtrid it began
// before with a later time. Not for a branch named with an owner made with
// this log (OwnerMadeWithLog): it cannot have begun before.
func (c *Coordinator) bornAfter(b xid.Branch) bool {
	if c.opts.Born.IsZero() {
		return false
	}
	boundary := c.opts.Born.Add(c.opts.MaxClockSkew)
	if c.opts.OwnerMadeWithLog && b.Owned() && b.Owner == c.opts.Owner {
		boundary = c.opts.Born
	}
	return b.GTRID.Time().Before(boundary)
}

// holdReason says why b, a prepared coordinator-decided branch with no
// decision here, must not be presumed aborted: "" when it may be.
func (c *Coordinator) holdReason(b xid.Branch) InDoubtReason {
	if r := c.owned(b); r != "" {
		return r
	}
	if c.unknowable(b.GTRID) {
		return ReasonBeforePromotion
	}
	if c.bornAfter(b) {
		return ReasonBeforeBirth
	}
	return ""
}

// ownNames are the names a branch of g on rmName decided by this
// coordinator may have on the database, most likely first: with this
// coordinator's owner (an SDK of this version), then the legacy name (an
// SDK from before owners existed). Never another owner's.
func (c *Coordinator) ownNames(g xid.GTRID, rmName string) []xid.Branch {
	legacy := xid.Branch{GTRID: g, RM: rmName}
	if c.opts.Owner.IsZero() {
		return []xid.Branch{legacy}
	}
	return []xid.Branch{{GTRID: g, RM: rmName, Owner: c.opts.Owner}, legacy}
}

// settleOwn commits or rolls back the branch of g on rmName under each of
// its own names in turn (ownNames) until one is not "not found". It
// answers rm.ErrBranchNotFound only when no name was found.
func (c *Coordinator) settleOwn(ctx context.Context, g xid.GTRID, rmName string, commit bool) error {
	conn := c.rms[rmName]
	var err error
	for _, b := range c.ownNames(g, rmName) {
		switch {
		case c.opts.settle != nil:
			err = c.opts.settle(ctx, rmName, b, commit)
		case commit:
			err = conn.CommitPrepared(ctx, b)
		default:
			err = conn.RollbackPrepared(ctx, b)
		}
		if !errors.Is(err, rm.ErrBranchNotFound) {
			return err
		}
	}
	return err
}

// ownPreparedSince reports whether rmName holds a branch of g prepared
// under one of this coordinator's own names, from a scan that started no
// earlier than since (shared among askers).
func (c *Coordinator) ownPreparedSince(ctx context.Context, rmName string, g xid.GTRID, since time.Time) (bool, error) {
	for _, b := range c.ownNames(g, rmName) {
		var ok bool
		var err error
		if c.opts.scanSince != nil {
			c.opts.scanSince(rmName, b, since)
		}
		if c.opts.prepared != nil {
			ok, err = c.opts.prepared(ctx, rmName, b)
		} else {
			ok, err = c.rms[rmName].IsPrepared(ctx, b, since)
		}
		if err != nil || ok {
			return ok, err
		}
	}
	return false, nil
}

// preparedOf lists the branches of g, under any name (owned by anyone,
// legacy, with a commit point or not), that rmName holds prepared, from a
// scan that started no earlier than since.
func (c *Coordinator) preparedOf(ctx context.Context, rmName string, g xid.GTRID, since time.Time) ([]xid.Branch, error) {
	if c.opts.prepared != nil && c.opts.recover == nil {
		// The unit tests' seam answers by name: ask for the own ones.
		var out []xid.Branch
		for _, b := range c.ownNames(g, rmName) {
			ok, err := c.opts.prepared(ctx, rmName, b)
			if err != nil {
				return nil, err
			}
			if ok {
				out = append(out, b)
				break
			}
		}
		return out, nil
	}
	if c.opts.recover != nil {
		all, err := c.opts.recover(ctx, rmName)
		if err != nil {
			return nil, err
		}
		var out []xid.Branch
		for _, d := range all {
			if d.Branch.GTRID == g {
				out = append(out, d.Branch)
			}
		}
		return out, nil
	}
	return c.rms[rmName].PreparedOf(ctx, g, since)
}

// Owner is this coordinator's cluster identity (Options.Owner): the owner of
// the branches it decides. Zero without an identity.
func (c *Coordinator) Owner() xid.Owner { return c.opts.Owner }
