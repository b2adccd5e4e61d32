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

// forgetAfterOrphans: a legacy 'C' row (one written before rows named
// their participants) is forgotten only once it is this many orphan
// timeouts old and no configured RM holds a branch of its gtrid.
const forgetAfterOrphans = 5

// The reasons the sweep keeps a 'C' row older than decision.ForgetMinAge
// (SweepStats.Kept, DecisionRowsKept, the gauge tandem_decision_rows_kept).
// The first three are alarms: the row may be kept for ever.
const (
	// KeptUnknownRM: a participant is not an RM of this coordinator.
	KeptUnknownRM = "participant-rm-not-configured"
	// KeptTableDiffers: a participant's RM here reaches a decision table
	// with another id than the row names (or the row names none).
	KeptTableDiffers = "participant-table-differs"
	// KeptUnreadable: the participants column cannot be read.
	KeptUnreadable = "participants-unreadable"
	// KeptUnanswered: a participant's RM did not answer its recover scan,
	// or its table's id could not be read: tried again at the next sweep.
	KeptUnanswered = "participant-rm-unanswered"
	// KeptPrepared: a participant still holds a branch of the gtrid.
	KeptPrepared = "branch-prepared"
	// KeptLegacyYoung: a legacy row (no participants) younger than
	// forgetAfterOrphans orphan timeouts.
	KeptLegacyYoung = "legacy-row-young"
)

// KeptReasons lists the reasons, alarms first.
var KeptReasons = []string{KeptUnknownRM, KeptTableDiffers, KeptUnreadable, KeptUnanswered, KeptPrepared, KeptLegacyYoung}

// SweepStats is what one sweep of the decision tables did.
type SweepStats struct {
	// AbortsSwept: 'A' rows deleted (older than MaxTxnAge + 10 min).
	AbortsSwept int64
	// CommitsForgotten: 'C' rows deleted (see sweepOnce).
	CommitsForgotten int64
	// Complete: every RM answered the scan.
	Complete bool
	// Kept: the 'C' rows older than decision.ForgetMinAge that this sweep
	// read and kept, by reason (KeptReasons).
	Kept map[string]int
	// PassGoesOn: a page was full, so a pass over a table has rows left:
	// the scan loop sweeps the next page at its next scan, not a minute
	// later (a backlog is paged through at the scan interval).
	PassGoesOn bool
}

// sweepPass is where the sweep of one RM's decision table is. Each sweep
// reads one page of decision.RowsLimit rows, after the last page's last
// gtrid; a shorter page ends the pass, and the next sweep starts again from
// the first gtrid. So rows kept for ever (more than a page of them) do not
// hide the younger rows behind them, and are read, counted and alarmed
// again on every pass. A table of fewer rows is one page: every sweep is a
// whole pass.
type sweepPass struct {
	// after: the next page is the rows after this gtrid (zero: the start).
	after xid.GTRID
	// kept: the rows kept so far in this pass, by reason; done: the last
	// whole pass's.
	kept, done map[string]int
}

// DecisionRowsKept is the rows the sweep keeps, by reason, every reason
// present (the gauge tandem_decision_rows_kept): per RM, the last whole pass
// over its table (sweepPass), or the pass under way where it has already
// kept more. It does no I/O.
func (c *Coordinator) DecisionRowsKept() map[string]int {
	out := map[string]int{}
	for _, r := range KeptReasons {
		out[r] = 0
	}
	c.cpst.mu.Lock()
	defer c.cpst.mu.Unlock()
	for r, n := range c.cpst.kept {
		out[r] = n
	}
	return out
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
	// The table's reference to its id (MariaDB) makes every decision
	// cheaper; without it decisions check through the id table, so a
	// failure (a lock held past a second, no ALTER privilege) is a warning,
	// tried again at the next start.
	if a, ok := c.decisions().(interface {
		AddIDCheck(ctx context.Context, rm string) error
	}); ok {
		if err := a.AddIDCheck(ctx, name); err != nil && c.ctx.Err() == nil {
			c.logger.Warn("the decision table has no reference to its id yet: decisions at this RM check the id through the id table (slower); "+
				"tried again at the next start, or run tandem init-rm --rm "+name+"=DRIVER:DSN", "rm", name, "error", err)
		}
	}
}

// sweepOnce deletes, on every RM (the 'C' rows: of the next page of its pass
// over the table, sweepPass):
//   - the 'A' rows older than max(MaxTxnAge, decision.MaxCommitPointAge) +
//     abortKeepMargin. An 'A' row is what refuses a late commit point's
//     'C'; once the row is gone, the commit point's own age check
//     (decision.CommitStatements, the SDK's Config.MaxTxnAge, default 1h
//     like the coordinator's) refuses it instead. The SDK's MaxTxnAge is at
//     most decision.MaxCommitPointAge, which this keep time covers whatever
//     --max-txn-age is; the margin covers the database's clock stepping
//     back and the commit point's transaction beginning a little before its
//     gtrid's row check.
//   - a 'C' row older than decision.ForgetMinAge only when every
//     participant it names (decision.ParseParticipants) is an RM of this
//     coordinator whose decision table has the id the row names — read by
//     this sweep both before and after that RM's scan, never an id
//     remembered from earlier (the DSN may reach another database now) —
//     and a recover scan of that RM, begun after the row was read (so
//     after it was written), lists no branch of the gtrid, under any name
//     — nor does any other RM's scan (the participants are the client's
//     word; a branch it left out keeps the row too). A row
//     naming an RM unknown here, or another table id, is kept, counted
//     (SweepStats.Kept, DecisionRowsKept) and logged as an error
//     (rate-limited): another coordinator, or an RM taken out of --rm,
//     may still need it.
//   - a legacy 'C' row (participants "", written before rows named them)
//     only when it is forgetAfterOrphans orphan timeouts old and every
//     configured RM answered a recover scan, begun after the row was read,
//     listing no branch of its gtrid. Such a row cannot say which RMs took
//     part: an RM that shares transactions with this coordinator's commit
//     points but is not configured here is not asked (the README says to
//     configure them all).
//
// Why forgetting is safe: a commit point inserts its 'C' only after every
// other branch of its gtrid is prepared (the SDK prepares them all, then
// sends the INSERT and COMMIT), and a gtrid's branch is never prepared
// again once settled. So once the row is committed, no branch of the gtrid
// can become prepared: prepared branches only disappear (committed, per the
// row). A participant's scan that began after the row was read and does not
// list the gtrid proves that it holds no branch now or ever again. No
// recoverer will need the row; and a party that took the key later would
// have to have seen a branch prepared after the row was gone, which the
// participants' scans exclude, or be an SDK still taking keys
// decision.ForgetMinAge after its decision, which the SDK never does.
func (c *Coordinator) sweepOnce() SweepStats {
	st := SweepStats{Kept: map[string]int{}}
	tables := c.decisions()
	keep := max(c.opts.MaxTxnAge, dtable.MaxCommitPointAge) + abortKeepMargin
	legacyAge := max(forgetAfterOrphans*c.opts.OrphanTimeout, dtable.ForgetMinAge)
	type candidate struct {
		table string
		row   dtable.Row
	}
	var candidates []candidate
	if c.sweepPass == nil {
		c.sweepPass = map[string]*sweepPass{}
	}
	// pageEnd: where each RM's pass goes on at the next sweep, for the RMs
	// whose page was read (the zero gtrid: the page was short, the pass
	// ends).
	pageEnd := map[string]xid.GTRID{}
	legacyOld := map[string]map[xid.GTRID]bool{}
	// idBefore: each RM's table id read by this sweep before its rows and
	// scans (never one remembered from earlier: the DSN may reach another
	// database now).
	idBefore := map[string]xid.Owner{}
	for _, name := range c.rmList {
		c.ensureTable(name)
		if !c.tableReady[name] {
			continue
		}
		ctx, cancel := context.WithTimeout(c.ctx, phase2CallTimeout)
		n, err := tables.SweepAborts(ctx, name, keep)
		st.AbortsSwept += n
		if err == nil {
			if id, ierr := c.refreshID(ctx, name); ierr != nil {
				if c.ctx.Err() == nil {
					c.logger.Warn("cannot read the id of a decision table; rows naming it are kept", "rm", name, "error", ierr)
				}
			} else {
				idBefore[name] = id
			}
			pass := c.sweepPass[name]
			if pass == nil {
				pass = &sweepPass{}
				c.sweepPass[name] = pass
			}
			var rows []dtable.Row
			rows, err = tables.Rows(ctx, name, dtable.ForgetMinAge, pass.after)
			if err == nil {
				pageEnd[name] = xid.GTRID{}
				if len(rows) >= dtable.RowsLimit {
					pageEnd[name] = rows[len(rows)-1].GTRID
				}
			}
			legacy := false
			for _, r := range rows {
				if r.Outcome == dtable.Committed {
					candidates = append(candidates, candidate{name, r})
					legacy = legacy || r.Participants == ""
				}
			}
			if err == nil && legacy {
				// From the same gtrid: the rows old enough for the
				// legacy rule up to the page's last gtrid are among the
				// page's, so this page holds them all.
				rows, err = tables.Rows(ctx, name, legacyAge, pass.after)
				legacyOld[name] = map[xid.GTRID]bool{}
				for _, r := range rows {
					legacyOld[name][r.GTRID] = true
				}
			}
		}
		cancel()
		if err != nil && c.ctx.Err() == nil {
			c.logger.Warn("sweep of the decision table failed; tried again in a minute", "rm", name, "error", err)
		}
	}
	// The in-doubt scan settles what is prepared; then a scan of every RM,
	// begun after every row above was read, is the evidence.
	_, st.Complete = c.scanOnce()
	held := map[string]map[xid.GTRID]bool{}
	for _, name := range c.rmList {
		ctx, cancel := context.WithTimeout(c.ctx, phase2CallTimeout)
		found, err := c.recoverRM(ctx, name)
		cancel()
		if err != nil {
			st.Complete = false
			continue
		}
		held[name] = map[xid.GTRID]bool{}
		for _, d := range found {
			held[name][d.Branch.GTRID] = true
		}
	}
	// Each answering RM's id read again after its scan: the same id before
	// and after is the evidence that the scan reached the database the id
	// names.
	verified := map[string]xid.Owner{}
	for name, before := range idBefore {
		if held[name] == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(c.ctx, phase2CallTimeout)
		after, err := c.refreshID(ctx, name)
		cancel()
		switch {
		case err != nil:
			if c.ctx.Err() == nil {
				c.logger.Warn("cannot read the id of a decision table; rows naming it are kept", "rm", name, "error", err)
			}
		case after == before:
			verified[name] = after
		}
	}
	now := time.Now()
	forget := map[string][]xid.GTRID{}
	pageKept := map[string]map[string]int{}
	for _, cand := range candidates {
		why, detail := c.keepReason(cand.row, held, verified, legacyOld[cand.table])
		if why == "" {
			forget[cand.table] = append(forget[cand.table], cand.row.GTRID)
			continue
		}
		st.Kept[why]++
		if pageKept[cand.table] == nil {
			pageKept[cand.table] = map[string]int{}
		}
		pageKept[cand.table][why]++
		if (why == KeptUnknownRM || why == KeptTableDiffers || why == KeptUnreadable) && c.sayEvery("kept:"+cand.table+":"+why, now) {
			c.logger.Error("ALARM: a committed decision row is kept: it names a participant this coordinator cannot check, so forgetting it could let a recoverer record abort for a committed transaction "+
				"(configure every RM that takes part in commit-point transactions here, under the name its branches carry, reaching the same database; said again every minute while it lasts)",
				"rm", cand.table, "gtrid", cand.row.GTRID.String(), "reason", why, "detail", detail, "participants", cand.row.Participants)
		}
	}
	for _, name := range c.rmList {
		if len(forget[name]) == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(c.ctx, phase2CallTimeout)
		n, err := tables.Forget(ctx, name, forget[name])
		cancel()
		st.CommitsForgotten += n
		if err != nil && c.ctx.Err() == nil {
			c.logger.Warn("could not forget committed decisions; tried again in a minute", "rm", name, "error", err)
		}
	}
	for _, end := range pageEnd {
		st.PassGoesOn = st.PassGoesOn || !end.IsZero()
	}
	shown := c.advancePasses(pageEnd, pageKept)
	c.cpst.mu.Lock()
	c.cpst.kept = shown
	c.cpst.mu.Unlock()
	if st.AbortsSwept > 0 || st.CommitsForgotten > 0 {
		c.logger.Info("decision tables swept", "aborts_deleted", st.AbortsSwept, "commits_forgotten", st.CommitsForgotten)
	}
	return st
}

// advancePasses adds each page's kept rows to its RM's pass and moves the
// pass to pageEnd (ending it at the zero gtrid), and returns
// DecisionRowsKept's counts.
func (c *Coordinator) advancePasses(pageEnd map[string]xid.GTRID, pageKept map[string]map[string]int) map[string]int {
	for name, end := range pageEnd {
		p := c.sweepPass[name]
		if p.kept == nil {
			p.kept = map[string]int{}
		}
		for r, n := range pageKept[name] {
			p.kept[r] += n
		}
		p.after = end
		if end.IsZero() {
			p.done, p.kept = p.kept, nil
		}
	}
	shown := map[string]int{}
	for _, p := range c.sweepPass {
		for _, r := range KeptReasons {
			if n := max(p.done[r], p.kept[r]); n > 0 {
				shown[r] += n
			}
		}
	}
	return shown
}

// keepReason says why the 'C' row r must be kept ("" when it may be
// forgotten; see sweepOnce), and a detail for the log. held is each
// answering RM's scan; ids each RM's table id as read by this sweep both
// before and after its scan (an RM missing from it is unanswered);
// legacyOld the table's rows old enough for the legacy rule.
func (c *Coordinator) keepReason(r dtable.Row, held map[string]map[xid.GTRID]bool, ids map[string]xid.Owner, legacyOld map[xid.GTRID]bool) (why, detail string) {
	ps, err := dtable.ParseParticipants(r.Participants)
	if err != nil {
		return KeptUnreadable, err.Error()
	}
	if len(ps) == 0 {
		for _, name := range c.rmList {
			if held[name] == nil {
				return KeptUnanswered, name
			}
			if held[name][r.GTRID] {
				return KeptPrepared, name
			}
		}
		if !legacyOld[r.GTRID] {
			return KeptLegacyYoung, ""
		}
		return "", ""
	}
	for _, p := range ps {
		if _, ok := c.rms[p.RM]; !ok {
			return KeptUnknownRM, p.RM
		}
	}
	for _, p := range ps {
		id, ok := ids[p.RM]
		if ok && (p.Table.IsZero() || id != p.Table) {
			return KeptTableDiffers, fmt.Sprintf("%s: row names %s, its table here is %s", p.RM, p.Table, id)
		}
		if !ok {
			return KeptUnanswered, p.RM + " (its table's id was not read, the same, before and after its scan in this sweep)"
		}
	}
	for _, p := range ps {
		if held[p.RM] == nil {
			return KeptUnanswered, p.RM
		}
		if held[p.RM][r.GTRID] {
			return KeptPrepared, p.RM
		}
	}
	// The participants column is the client's word; a branch of the gtrid
	// that any answering RM lists, named there or not, keeps the row.
	for _, name := range c.rmList {
		if held[name][r.GTRID] {
			return KeptPrepared, name + " (not named in the row's participants)"
		}
	}
	return "", ""
}
