package coord

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	dtable "github.com/tandem-tx/tandem/internal/decision"
	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/xid"
)

// Recovery of commit-point transactions (README, "Recovery of commit-point
// transactions").
//
// A prepared branch named with a commit point X (xid.Branch.CommitPoint) is
// decided by X's decision table (package decision), never by this
// coordinator's log: nothing here is written to the log, and c.decide is
// never called for it. The in-doubt scan settles such a branch b of gtrid g:
//   - b is younger than a quarter of the orphan timeout: left to its client,
//     which normally commits it within milliseconds (settling it here too
//     would race the client's COMMIT PREPARED and read the table on every
//     scan for every transaction in flight).
//   - X's table holds a committed row for g (decision.Lookup): 'C' is only
//     ever written by the commit point's own transaction, which committed;
//     'A' only by a recoverer that took the key, which committed too. Either
//     is final: b is settled per the row.
//   - no row, and b has been prepared for OrphanTimeout: the key is taken
//     (decision.Resolve, a bounded lock wait). Commit or Abort settles b;
//     ErrPending (the commit point's transaction holds the key uncommitted)
//     is tried again at the next scan. Any number of coordinators may do this
//     at once: the key admits one outcome.
//   - X is not configured here: an error is logged (rate-limited) and b is
//     left alone. Its outcome is never guessed.
//
// b is settled with COMMIT/ROLLBACK PREPARED from the RM's pool. On a
// session-bound RM (MariaDB) "not found" may mean that the client's session
// still holds b: a recover scan confirms; if b is still listed, it is tried
// again at the next scan.

// decisionTables is the commit points' decision tables, by RM name: package
// decision through each RM's pool, or a fake in unit tests.
type decisionTables interface {
	Ensure(ctx context.Context, rm string) error
	Lookup(ctx context.Context, rm string, g xid.GTRID) (dtable.Outcome, bool, error)
	Resolve(ctx context.Context, rm string, g xid.GTRID, lockWait time.Duration) (dtable.Outcome, error)
	SweepAborts(ctx context.Context, rm string, keep time.Duration) (int64, error)
	Rows(ctx context.Context, rm string, olderThan time.Duration) ([]dtable.Row, error)
	Forget(ctx context.Context, rm string, gs []xid.GTRID) (int64, error)
}

// dbTables is decisionTables on the RMs' pools.
type dbTables map[string]*rm.Conn

func (t dbTables) Ensure(ctx context.Context, name string) error {
	c := t[name]
	return rmErr(c, dtable.Ensure(ctx, c.DB(), c.Dialect().Driver()))
}

func (t dbTables) Lookup(ctx context.Context, name string, g xid.GTRID) (dtable.Outcome, bool, error) {
	c := t[name]
	o, found, err := dtable.Lookup(ctx, c.DB(), g, xid.Owner{})
	return o, found, rmErr(c, err)
}

func (t dbTables) Resolve(ctx context.Context, name string, g xid.GTRID, lockWait time.Duration) (dtable.Outcome, error) {
	c := t[name]
	o, err := dtable.Resolve(ctx, c.DB(), c.Dialect().Driver(), g, xid.Owner{}, lockWait)
	return o, rmErr(c, err)
}

func (t dbTables) SweepAborts(ctx context.Context, name string, keep time.Duration) (int64, error) {
	c := t[name]
	n, err := dtable.SweepAborts(ctx, c.DB(), c.Dialect().Driver(), keep)
	return n, rmErr(c, err)
}

func (t dbTables) Rows(ctx context.Context, name string, olderThan time.Duration) ([]dtable.Row, error) {
	c := t[name]
	rows, err := dtable.Rows(ctx, c.DB(), c.Dialect().Driver(), olderThan)
	return rows, rmErr(c, err)
}

func (t dbTables) Forget(ctx context.Context, name string, gs []xid.GTRID) (int64, error) {
	c := t[name]
	n, err := dtable.Forget(ctx, c.DB(), c.Dialect().Driver(), gs)
	return n, rmErr(c, err)
}

// rmErr names the RM and strips its DSN's password from err.
func rmErr(c *rm.Conn, err error) error {
	if err == nil {
		return nil
	}
	if s := err.Error(); c.Redact(s) != s {
		if errors.Is(err, dtable.ErrPending) {
			return fmt.Errorf("rm %q: %w: %s", c.Name(), dtable.ErrPending, c.Redact(s))
		}
		return fmt.Errorf("rm %q: %s", c.Name(), c.Redact(s))
	}
	return fmt.Errorf("rm %q: %w", c.Name(), err)
}

// decisions is the decision tables this coordinator uses.
func (c *Coordinator) decisions() decisionTables {
	if c.opts.decisions != nil {
		return c.opts.decisions
	}
	return dbTables(c.rms)
}

// recoverRM lists the prepared branches on one RM (a fresh scan).
func (c *Coordinator) recoverRM(ctx context.Context, name string) ([]rm.InDoubt, error) {
	if c.opts.recover != nil {
		return c.opts.recover(ctx, name)
	}
	return c.rms[name].Recover(ctx)
}

// cpLockWait bounds how long taking a decision key waits for a commit
// point's open transaction before answering ErrPending.
const cpLockWait = 2 * time.Second

// cpWorkers bounds the commit-point branches one scan settles at once (each
// may wait cpLockWait for a key).
const cpWorkers = 8

// sayEvery logs at most once per misconfigEvery for each key.
func (c *Coordinator) sayEvery(key string, now time.Time) bool {
	c.saidMu.Lock()
	defer c.saidMu.Unlock()
	if now.Sub(c.said[key]) < misconfigEvery {
		return false
	}
	if c.said == nil {
		c.said = map[string]time.Time{}
	}
	c.said[key] = now
	return true
}

// settleCommitPoint settles b, a prepared branch named with a commit point,
// first seen prepared at first (see the top of this file). It reports the
// outcome it applied, or Undecided when b is left for a later scan.
func (c *Coordinator) settleCommitPoint(b xid.Branch, first, now time.Time) Outcome {
	cp, g := b.CommitPoint, b.GTRID
	if _, ok := c.rms[cp]; !ok {
		if c.sayEvery("cp-unknown:"+cp, now) {
			c.logger.Error("prepared branches name a commit point that is not configured on this coordinator: they are left alone (never guessed); "+
				"configure the commit point's database here (--rm "+cp+"=DRIVER:DSN) or let a coordinator that has it settle them (said again every minute while it lasts)",
				"commit_point", cp, "gtrid", g.String(), "rm", b.RM)
		}
		return Undecided
	}
	if now.Sub(first) < c.opts.OrphanTimeout/4 {
		return Undecided // its client is settling it
	}
	ctx, cancel := context.WithTimeout(c.ctx, phase2CallTimeout)
	defer cancel()
	tables := c.decisions()
	o, found, err := tables.Lookup(ctx, cp, g)
	if err != nil {
		if c.ctx.Err() == nil && c.sayEvery("cp-read:"+cp, now) {
			c.logger.Warn("cannot read a commit point's decision table; its prepared branches are tried again at the next scan (said again every minute while it lasts)",
				"commit_point", cp, "gtrid", g.String(), "error", err)
		}
		return Undecided
	}
	took := false
	if !found {
		if now.Sub(first) < c.opts.OrphanTimeout {
			return Undecided
		}
		o, err = tables.Resolve(ctx, cp, g, cpLockWait)
		switch {
		case errors.Is(err, dtable.ErrPending):
			c.logger.Info("a commit-point branch past the orphan timeout: the commit point's transaction is still open; tried again at the next scan",
				"commit_point", cp, "gtrid", g.String(), "rm", b.RM)
			return Undecided
		case err != nil:
			if c.ctx.Err() == nil {
				c.logger.Warn("could not take a commit point's decision key; tried again at the next scan", "commit_point", cp, "gtrid", g.String(), "rm", b.RM, "error", err)
			}
			return Undecided
		}
		took = true
	}
	commit := o == dtable.Committed
	done, err := c.settleCPBranch(ctx, b, commit)
	out := Aborted
	if commit {
		out = Committed
	}
	switch {
	case err != nil:
		if c.ctx.Err() == nil {
			c.logger.Warn("could not settle a commit-point branch; tried again at the next scan", "commit_point", cp, "gtrid", g.String(), "rm", b.RM,
				"outcome", out.String(), "error", err)
		}
		return Undecided
	case !done:
		c.logger.Info("a commit-point branch is held by its client's session; tried again at the next scan", "commit_point", cp, "gtrid", g.String(), "rm", b.RM, "outcome", out.String())
		return Undecided
	case took && !commit:
		c.logger.Warn("rolled back an orphaned commit-point branch: its commit point had no decision after the orphan timeout, and abort was recorded there (the key taken)",
			"commit_point", cp, "gtrid", g.String(), "rm", b.RM, "undecided_for", now.Sub(first).Round(time.Millisecond))
	default:
		c.logger.Info("settled a commit-point branch per its commit point's decision table", "commit_point", cp, "gtrid", g.String(), "rm", b.RM, "outcome", out.String())
	}
	return out
}

// settleCPBranch commits or rolls back the prepared branch b. done is false
// when a session-bound RM answered "not found" while a recover scan still
// lists b: the client's session holds it.
func (c *Coordinator) settleCPBranch(ctx context.Context, b xid.Branch, commit bool) (done bool, err error) {
	conn := c.rms[b.RM]
	switch {
	case c.opts.settle != nil:
		err = c.opts.settle(ctx, b.RM, b, commit)
	case commit:
		err = conn.CommitPrepared(ctx, b)
	default:
		err = conn.RollbackPrepared(ctx, b)
	}
	if !errors.Is(err, rm.ErrBranchNotFound) {
		return err == nil, err
	}
	if !conn.Dialect().SessionBound() {
		return true, nil // gone: settled by its client or another recoverer
	}
	var prepared bool
	if c.opts.prepared != nil {
		prepared, err = c.opts.prepared(ctx, b.RM, b)
	} else {
		prepared, err = conn.IsPrepared(ctx, b, time.Now())
	}
	if err != nil {
		return false, err
	}
	return !prepared, nil
}

// settleCPBranches runs settleInDoubt for commit-point branches, at most
// cpWorkers at once, and waits for them.
func (c *Coordinator) settleCPBranches(ds []rm.InDoubt, now time.Time) {
	sem := make(chan struct{}, cpWorkers)
	var wg sync.WaitGroup
	for _, d := range ds {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			c.settleInDoubt(d, now)
		}()
	}
	wg.Wait()
}

// cpBranches lists the prepared branches of g named with a commit point, on
// every RM that answers; failed names the RMs that did not.
func (c *Coordinator) cpBranches(ctx context.Context, g xid.GTRID) (bs []xid.Branch, failed []string) {
	for _, name := range c.rmList {
		found, err := c.recoverRM(ctx, name)
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s (%v)", name, err))
			continue
		}
		for _, d := range found {
			if d.Branch.GTRID == g && d.Branch.CommitPoint != "" {
				bs = append(bs, d.Branch)
			}
		}
	}
	return bs, failed
}

// cpStatus answers Status for g, which has no record in the log, when some
// RM holds a prepared branch of g named with a commit point: from the commit
// point's decision table (Lookup), or, with resolve, by taking the key
// (Resolve) and then settling the branches. ok is false when no such branch
// is prepared: Status answers as for any gtrid.
func (c *Coordinator) cpStatus(ctx context.Context, g xid.GTRID, resolve bool) (r Report, ok bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, undecidedAskTimeout+cpLockWait)
	defer cancel()
	bs, failed := c.cpBranches(ctx, g)
	if len(bs) == 0 {
		return Report{}, false, nil
	}
	r = Report{GTRID: g, Outcome: Undecided}
	cp := bs[0].CommitPoint
	var held []string
	for _, b := range bs {
		if b.CommitPoint != cp {
			return Report{}, true, fmt.Errorf("coord: gtrid %s has prepared branches naming different commit points (%s on %s, %s on %s): "+
				"no single decision table decides it; inspect both tables and settle the branches by hand", g, cp, bs[0].RM, b.CommitPoint, b.RM)
		}
		held = append(held, b.RM)
		r.Branches = append(r.Branches, BranchReport{RM: b.RM, State: BranchPending})
	}
	sort.Strings(held)
	where := fmt.Sprintf("prepared on %s, decided by commit point %s's decision table (%s), not by this coordinator's log", strings.Join(held, ", "), cp, dtable.TableName)
	if len(failed) > 0 {
		where += "; could not ask " + strings.Join(failed, ", ")
	}
	if _, known := c.rms[cp]; !known {
		r.Message = where + ": " + cp + " is not configured on this coordinator, so it cannot read the decision: ask a coordinator that has it"
		return r, true, nil
	}
	tables := c.decisions()
	o, found, err := tables.Lookup(ctx, cp, g)
	if err != nil {
		return Report{}, true, fmt.Errorf("coord: gtrid %s is %s, which cannot be read: %w; try again", g, where, err)
	}
	if !found && resolve {
		if o, err = tables.Resolve(ctx, cp, g, cpLockWait); errors.Is(err, dtable.ErrPending) {
			r.Message = where + ": the commit point's transaction is still open (it holds the decision key); nothing was recorded: try again in a moment"
			return r, true, nil
		} else if err != nil {
			return Report{}, true, fmt.Errorf("coord: gtrid %s is %s: taking the decision key failed: %w; try again", g, where, err)
		}
		found = true
	}
	if !found {
		r.Message = where + ": no decision there yet. Unless its commit point commits first, the in-doubt scan records abort there and rolls the branches back after " +
			c.opts.OrphanTimeout.String() + " (the orphan timeout); to do so now: tandem status --resolve " + g.String()
		return r, true, nil
	}
	r.Outcome = Aborted
	if o == dtable.Committed {
		r.Outcome = Committed
	}
	r.Message = where + ": it says " + r.Outcome.String()
	if !resolve {
		r.Phase2Pending = true
		r.Message += "; the in-doubt scan settles the branches"
		return r, true, nil
	}
	for i, b := range bs {
		done, err := c.settleCPBranch(ctx, b, o == dtable.Committed)
		r.Branches[i].Attempts = 1
		switch {
		case err != nil:
			r.Branches[i].LastError = err.Error()
		case !done:
			r.Branches[i].LastError = "prepared and held by the client's session; the in-doubt scan settles it once that session ends"
		default:
			r.Branches[i].State = BranchDone
		}
		if r.Branches[i].State == BranchPending {
			r.Phase2Pending = true
		}
	}
	return r, true, nil
}
