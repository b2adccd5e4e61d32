package coord

import (
	"context"
	"fmt"
	"time"

	dtable "github.com/tandem-tx/tandem/internal/decision"
	"github.com/tandem-tx/tandem/xid"
)

// Garbage of the decision tables: a client forgets the 'C' rows of its own
// transactions once their branches are committed (decision.CommitStatements'
// forget list). What a dead client left, and every 'A' row, the sweep here
// deletes.

// sweepEvery is how often the scan loop sweeps the decision tables.
const sweepEvery = time.Minute

// abortKeepMargin is added to MaxTxnAge for how long 'A' rows are kept.
const abortKeepMargin = 10 * time.Minute

// forgetAfterOrphans: a 'C' row is forgotten only once it is this many
// orphan timeouts old (and no branch of its gtrid is prepared anywhere): a
// client whose commit-point call broke learns its outcome from the row
// (decision.Resolve) well before that, however slow.
const forgetAfterOrphans = 5

// SweepStats is what one sweep of the decision tables did.
type SweepStats struct {
	// AbortsSwept: 'A' rows deleted (older than MaxTxnAge + 10 min).
	AbortsSwept int64
	// CommitsForgotten: 'C' rows deleted, of gtrids with no branch prepared
	// on any RM.
	CommitsForgotten int64
	// Complete: every RM answered the scan. Without a complete scan no 'C'
	// row is forgotten.
	Complete bool
}

// SweepNow runs one sweep of the decision tables (with the in-doubt scan it
// needs) and returns what it did (tests; the scan loop sweeps every minute).
func (c *Coordinator) SweepNow(ctx context.Context) (SweepStats, error) {
	reply := make(chan SweepStats, 1)
	select {
	case c.sweepNow <- reply:
	case <-ctx.Done():
		return SweepStats{}, ctx.Err()
	case <-c.ctx.Done():
		return SweepStats{}, ErrClosed
	}
	select {
	case st := <-reply:
		return st, nil
	case <-ctx.Done():
		return SweepStats{}, ctx.Err()
	}
}

// ensureTable creates the decision table on RM name if it does not exist
// (Open, and each sweep until it succeeds). A failure is a warning, not a
// failed start: the RM cannot be a commit point until the table exists, and
// the SDK then decides at the coordinator.
func (c *Coordinator) ensureTable(name string) {
	if c.tableReady[name] {
		return
	}
	ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
	defer cancel()
	if err := c.decisions().Ensure(ctx, name); err != nil {
		if c.ctx.Err() == nil {
			c.logger.Warn(fmt.Sprintf("the decision table %s could not be created: %s cannot be a commit point until it exists; "+
				"create it as a user allowed to CREATE TABLE there: tandem init-rm --rm %s=DRIVER:DSN (retried every minute)", dtable.TableName, name, name),
				"rm", name, "error", err)
		}
		return
	}
	c.tableReady[name] = true
}

// sweepOnce deletes, on every RM:
//   - the 'A' rows older than max(MaxTxnAge, decision.MaxCommitPointAge) +
//     abortKeepMargin. An 'A' row is what
//     refuses a late commit point's 'C'; once the row is gone, the commit
//     point's own age check (decision.CommitStatements, the SDK's
//     Config.MaxTxnAge, default 1h like the coordinator's) refuses it
//     instead. The SDK's MaxTxnAge is at most decision.MaxCommitPointAge,
//     which this keep time covers whatever --max-txn-age is; the margin covers the database's clock stepping back and the commit
//     point's transaction beginning a little before its gtrid's row check.
//   - the 'C' rows older than forgetAfterOrphans orphan timeouts whose gtrid
//     has no branch prepared on any RM in a complete scan that began after
//     the rows were read, at most decision.RowsLimit per RM per sweep.
//
// Why forgetting such a 'C' row is safe: the row was read committed, at
// time R, before the scan began. A commit point inserts its 'C' only after
// every other branch of its gtrid is prepared (the SDK prepares them all,
// then sends the INSERT and COMMIT), and a gtrid's branch is never prepared
// again once settled. So after R no branch of the gtrid can become
// prepared: prepared branches only disappear (committed, per the row). Each
// RM's scan began after R; a gtrid it does not list has no branch prepared
// there now or ever again. With every RM answering, no recoverer will ever
// need the row. (Taken for granted: every RM that shares transactions with
// this coordinator's commit points is configured here, under the same name
// that its branches carry; a coordinator that cannot see an RM's branches
// must not forget rows they depend on. The README says so.)
//
// Without a complete scan only the 'A' rows are swept.
func (c *Coordinator) sweepOnce() SweepStats {
	var st SweepStats
	tables := c.decisions()
	keep := max(c.opts.MaxTxnAge, dtable.MaxCommitPointAge) + abortKeepMargin
	olderThan := forgetAfterOrphans * c.opts.OrphanTimeout
	candidates := map[string][]xid.GTRID{}
	for _, name := range c.rmList {
		c.ensureTable(name)
		if !c.tableReady[name] {
			continue
		}
		ctx, cancel := context.WithTimeout(c.ctx, phase2CallTimeout)
		n, err := tables.SweepAborts(ctx, name, keep)
		st.AbortsSwept += n
		if err == nil {
			var rows []dtable.Row
			rows, err = tables.Rows(ctx, name, olderThan)
			for _, r := range rows {
				if r.Outcome == dtable.Committed {
					candidates[name] = append(candidates[name], r.GTRID)
				}
			}
		}
		cancel()
		if err != nil && c.ctx.Err() == nil {
			c.logger.Warn("sweep of the decision table failed; tried again in a minute", "rm", name, "error", err)
		}
	}
	// The scan begins after every row above was read (see above).
	prepared, complete := c.scanOnce()
	st.Complete = complete
	if !complete {
		return st
	}
	for _, name := range c.rmList {
		var gone []xid.GTRID
		for _, g := range candidates[name] {
			if !prepared[g] {
				gone = append(gone, g)
			}
		}
		if len(gone) == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(c.ctx, phase2CallTimeout)
		n, err := tables.Forget(ctx, name, gone)
		cancel()
		st.CommitsForgotten += n
		if err != nil && c.ctx.Err() == nil {
			c.logger.Warn("could not forget committed decisions; tried again in a minute", "rm", name, "error", err)
		}
	}
	if st.AbortsSwept > 0 || st.CommitsForgotten > 0 {
		c.logger.Info("decision tables swept", "aborts_deleted", st.AbortsSwept, "commits_forgotten", st.CommitsForgotten)
	}
	return st
}
