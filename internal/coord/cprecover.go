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
// transactions"; docs/ownership.md).
//
// A prepared branch named with a commit point X (xid.Branch.CommitPoint) is
// decided by X's decision table (package decision), never by this
// coordinator's log: nothing here is written to the log, and c.decide is
// never called for it. Its owner (xid.Branch.Owner) is the id of the
// decision table the client decided in. The in-doubt scan settles such a
// branch b of gtrid g only when:
//   - X is configured here; otherwise b is held (ReasonCPNotConfigured):
//     logged (rate-limited), counted, listed, never guessed;
//   - b is owned and the table this coordinator reaches for X has b's owner
//     id (read with decision.ReadID, and checked again by the database in
//     the very statement that reads or takes the key); otherwise b is held
//     (ReasonCPTableDiffers) and an error says so: a client and this
//     coordinator that reach different tables could each record a
//     different outcome;
//   - b is unowned (a legacy name, made before owners existed): a committed
//     'C' row for g settles it (only the commit point's own transaction
//     writes 'C' for g, in whatever table: the gtrid committed); anything
//     else is held (ReasonCPUnowned) unless the operator passed
//     --adopt-unowned (Options.AdoptUnowned): an 'A' row, or a key taken,
//     in a table the client may not have used proves nothing.
//
// Then:
//   - b is younger than CommitPointSettleAfter (counted from the first scan
//     that saw it, or the database's prepare time where it has one): left to
//     its client, which normally settles it within milliseconds.
//   - X's table holds a committed row for g (decision.Lookup): 'C' is only
//     ever written by the commit point's own transaction, which committed;
//     'A' only by a recoverer that took the key, which committed too. Either
//     is final: b is settled per the row.
//   - no row: b is checked to be still prepared by a recover scan begun after
//     that read, and then the key is taken (decision.Resolve, a bounded lock
//     wait), all within decision.ForgetMinAge/3 of the read; the answer
//     settles b. Taking the key is always safe: a live client's decision
//     then meets it and is refused, and the client rolls back. So a dead
//     client's branches (and their row locks) go after seconds, not after
//     the orphan timeout. ErrPending (the commit point's transaction holds
//     the key uncommitted) is tried again at the next scan; ErrVanished (the
//     row deleted between the key and the read) is an unknown outcome:
//     logged, never settled as an abort. Any number of coordinators may do
//     this at once: the key admits one outcome.
//
// Why the re-check: a row is forgotten only once every branch of g is
// committed and the row is ForgetMinAge old. A branch seen prepared after
// the read that found no row means either no row was ever committed before
// that read (then any row committed later is younger than ForgetMinAge when
// the key is taken, and cannot have been forgotten), or g's branches are
// not all committed (then no row was forgotten).
//
// b is settled with COMMIT/ROLLBACK PREPARED from the RM's pool. On a
// session-bound RM (MariaDB) "not found" may mean that the client's session
// still holds b: a recover scan confirms; if b is still listed, it is tried
// again at the next scan.

// DefaultCommitPointSettleAfter is Options.CommitPointSettleAfter's default.
const DefaultCommitPointSettleAfter = 5 * time.Second

// The reasons a commit-point branch is held (listed, never settled by this
// coordinator): CommitPointHeld, the gauge tandem_commit_point_branches_held.
const (
	// ReasonCPNotConfigured: the branch's commit point is not an RM here.
	ReasonCPNotConfigured = "commit-point-not-configured"
	// ReasonCPTableDiffers: the decision table this coordinator reaches for
	// the commit point has another id than the branch's owner.
	ReasonCPTableDiffers = "commit-point-table-differs"
	// ReasonCPUnowned: a legacy (unowned) commit-point branch with no 'C'
	// row, and --adopt-unowned not given.
	ReasonCPUnowned = "commit-point-unowned-legacy-name"
	// ReasonCPVanished: the gtrid's decision row was deleted while this
	// coordinator took its key (decision.ErrVanished): the outcome is
	// unknown, and the key is not taken again into an abort. A row that
	// appears again settles the branch.
	ReasonCPVanished = "decision-row-vanished"
)

// CPHoldReasons lists the hold reasons, in the order listings show them.
var CPHoldReasons = []string{ReasonCPNotConfigured, ReasonCPTableDiffers, ReasonCPUnowned, ReasonCPVanished}

// CommitPointHold is a prepared commit-point branch this coordinator will
// not settle, and why.
type CommitPointHold struct {
	GTRID       string `json:"gtrid"`
	RM          string `json:"rm"`
	CommitPoint string `json:"commit_point"`
	// Owner is the branch's owner (the decision-table id it names), "" for
	// a legacy name; Table the id of the table this coordinator reaches for
	// the commit point ("" when unknown or not configured).
	Owner     string    `json:"owner"`
	Table     string    `json:"table"`
	Reason    string    `json:"reason"`
	Why       string    `json:"why"`
	FirstSeen time.Time `json:"first_seen"`
}

// cpState is commit-point recovery's own state.
type cpState struct {
	mu sync.Mutex
	// ids: each RM's decision-table id, as read (refreshed by each sweep),
	// and when it was read.
	ids    map[string]xid.Owner
	idRead map[string]time.Time
	// held: the commit-point branches held at the last scan that saw them.
	held map[xid.Branch]CommitPointHold
	// preparedAt: the database's prepare time of a branch, where it says.
	preparedAt map[xid.Branch]time.Time
	// kept: DecisionRowsKept's counts, by reason (cpgc.go).
	kept map[string]int
	// vanished: gtrids whose decision row vanished under a key taken here
	// (ReasonCPVanished), while a branch of theirs is listed.
	vanished map[xid.GTRID]bool
	// due: the earliest time a waiting commit-point branch becomes due;
	// lastScan and lastCP: when the scan last ran, and last saw a
	// commit-point branch (cpDue).
	// prevScan: the scan before lastScan (the floor of a prepare time).
	due, lastScan, prevScan, lastCP time.Time
}

// decisionTables is the commit points' decision tables, by RM name: package
// decision through each RM's pool, or a fake in unit tests.
type decisionTables interface {
	Ensure(ctx context.Context, rm string) error
	ID(ctx context.Context, rm string) (xid.Owner, error)
	Lookup(ctx context.Context, rm string, g xid.GTRID, table xid.Owner) (dtable.Outcome, bool, error)
	Resolve(ctx context.Context, rm string, g xid.GTRID, table xid.Owner, lockWait time.Duration) (dtable.Outcome, error)
	SweepAborts(ctx context.Context, rm string, keep time.Duration) (int64, error)
	// Rows is decision.RowsAfter.
	Rows(ctx context.Context, rm string, olderThan time.Duration, after xid.GTRID) ([]dtable.Row, error)
	Forget(ctx context.Context, rm string, gs []xid.GTRID) (int64, error)
}

// dbTables is decisionTables on the RMs' pools.
type dbTables map[string]*rm.Conn

func (t dbTables) Ensure(ctx context.Context, name string) error {
	c := t[name]
	return rmErr(c, dtable.Ensure(ctx, c.DB(), c.Dialect().Driver()))
}

// AddIDCheck gives RM name's decision table its reference to its id
// (decision.AddIDCheck; nothing on PostgreSQL).
func (t dbTables) AddIDCheck(ctx context.Context, name string) error {
	c := t[name]
	return rmErr(c, dtable.AddIDCheck(ctx, c.DB(), c.Dialect().Driver()))
}

func (t dbTables) ID(ctx context.Context, name string) (xid.Owner, error) {
	c := t[name]
	id, err := dtable.ReadID(ctx, c.DB(), c.Dialect().Driver())
	return id, rmErr(c, err)
}

func (t dbTables) Lookup(ctx context.Context, name string, g xid.GTRID, table xid.Owner) (dtable.Outcome, bool, error) {
	c := t[name]
	o, found, err := dtable.Lookup(ctx, c.DB(), g, table)
	return o, found, rmErr(c, err)
}

func (t dbTables) Resolve(ctx context.Context, name string, g xid.GTRID, table xid.Owner, lockWait time.Duration) (dtable.Outcome, error) {
	c := t[name]
	o, err := dtable.Resolve(ctx, c.DB(), c.Dialect().Driver(), g, table, lockWait)
	return o, rmErr(c, err)
}

func (t dbTables) SweepAborts(ctx context.Context, name string, keep time.Duration) (int64, error) {
	c := t[name]
	n, err := dtable.SweepAborts(ctx, c.DB(), c.Dialect().Driver(), keep)
	return n, rmErr(c, err)
}

func (t dbTables) Rows(ctx context.Context, name string, olderThan time.Duration, after xid.GTRID) ([]dtable.Row, error) {
	c := t[name]
	rows, err := dtable.RowsAfter(ctx, c.DB(), c.Dialect().Driver(), olderThan, after)
	return rows, rmErr(c, err)
}

func (t dbTables) Forget(ctx context.Context, name string, gs []xid.GTRID) (int64, error) {
	c := t[name]
	n, err := dtable.Forget(ctx, c.DB(), c.Dialect().Driver(), gs)
	return n, rmErr(c, err)
}

// rmErr names the RM and strips its DSN's password from err, keeping the
// package's sentinel errors matchable.
func rmErr(c *rm.Conn, err error) error {
	if err == nil {
		return nil
	}
	if s := err.Error(); c.Redact(s) != s {
		for _, sentinel := range []error{dtable.ErrPending, dtable.ErrWrongTable, dtable.ErrVanished, dtable.ErrNoID} {
			if errors.Is(err, sentinel) {
				return fmt.Errorf("rm %q: %w: %s", c.Name(), sentinel, c.Redact(s))
			}
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

// tableID returns the id of RM name's decision table, read once and then
// remembered (refreshID reads it again).
func (c *Coordinator) tableID(ctx context.Context, name string) (xid.Owner, error) {
	c.cpst.mu.Lock()
	id, ok := c.cpst.ids[name]
	c.cpst.mu.Unlock()
	if ok {
		return id, nil
	}
	return c.refreshID(ctx, name)
}

// refreshID reads RM name's decision-table id and remembers it.
func (c *Coordinator) refreshID(ctx context.Context, name string) (xid.Owner, error) {
	id, err := c.decisions().ID(ctx, name)
	if err != nil {
		return xid.Owner{}, err
	}
	c.cpst.mu.Lock()
	defer c.cpst.mu.Unlock()
	if old, ok := c.cpst.ids[name]; ok && old != id {
		c.logger.Error("the decision table of an RM has a new id: it was dropped and created again, or the DSN now reaches another database; "+
			"commit-point branches naming the old id are held, not settled", "rm", name, "old_id", old.String(), "id", id.String())
	}
	if c.cpst.ids == nil {
		c.cpst.ids, c.cpst.idRead = map[string]xid.Owner{}, map[string]time.Time{}
	}
	c.cpst.ids[name] = id
	c.cpst.idRead[name] = time.Now()
	return id, nil
}

// idRecheckEvery: for status, a branch naming another id than the one
// remembered for its commit point's table makes the table's id be read
// again when it was read longer ago than this.
const idRecheckEvery = 5 * time.Second

// tableIDFor returns the id of RM name's decision table to compare with
// want, a branch's owner: the remembered one, or, when it differs and was
// read before since, the id read again (the table may have been made again
// since; the scan passes its start, so that it reads it at most once).
func (c *Coordinator) tableIDFor(ctx context.Context, name string, want xid.Owner, since time.Time) (xid.Owner, error) {
	id, err := c.tableID(ctx, name)
	if err != nil || id == want {
		return id, err
	}
	c.cpst.mu.Lock()
	stale := c.cpst.idRead[name].Before(since)
	c.cpst.mu.Unlock()
	if !stale {
		return id, nil
	}
	return c.refreshID(ctx, name)
}

// settleAfter is Options.CommitPointSettleAfter or its default.
func (c *Coordinator) settleAfter() time.Duration {
	if c.opts.CommitPointSettleAfter > 0 {
		return c.opts.CommitPointSettleAfter
	}
	return DefaultCommitPointSettleAfter
}

// cpLockWait bounds how long taking a decision key waits for a commit
// point's open transaction before answering ErrPending.
const cpLockWait = 2 * time.Second

// cpKeyWithin bounds the time from the read that found no row to the taking
// of the key (see the top of this file).
const cpKeyWithin = dtable.ForgetMinAge / 3

// cpWorkers bounds the commit-point branches one scan settles at once (each
// may wait cpLockWait for a key).
const cpWorkers = 8

// cpActiveFor: while a commit-point branch was seen this recently, the scan
// runs at least every CommitPointSettleAfter (cpDue).
const cpActiveFor = 10 * time.Minute

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

// hold records that b is held for reason (listed by CommitPointHeld).
func (c *Coordinator) hold(b xid.Branch, reason, why string, table xid.Owner, first time.Time) {
	h := CommitPointHold{GTRID: b.GTRID.String(), RM: b.RM, CommitPoint: b.CommitPoint, Reason: reason, Why: why, FirstSeen: first}
	if b.Owned() {
		h.Owner = b.Owner.String()
	}
	if !table.IsZero() {
		h.Table = table.String()
	}
	c.cpst.mu.Lock()
	defer c.cpst.mu.Unlock()
	if c.cpst.held == nil {
		c.cpst.held = map[xid.Branch]CommitPointHold{}
	}
	c.cpst.held[b] = h
}

func (c *Coordinator) unhold(b xid.Branch) {
	c.cpst.mu.Lock()
	defer c.cpst.mu.Unlock()
	delete(c.cpst.held, b)
}

// CommitPointHeld lists the prepared commit-point branches this coordinator
// holds (will not settle), as of the last scan that saw them, sorted: those
// the scan still lists (or whose RM did not answer it). It does no I/O.
func (c *Coordinator) CommitPointHeld() []CommitPointHold {
	c.cpst.mu.Lock()
	held := make(map[xid.Branch]CommitPointHold, len(c.cpst.held))
	for b, h := range c.cpst.held {
		held[b] = h
	}
	c.cpst.mu.Unlock()
	out := make([]CommitPointHold, 0, len(held))
	c.mu.Lock()
	for b, h := range held {
		if _, ok := c.cpSeen[b]; ok {
			out = append(out, h)
		}
	}
	c.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].GTRID != out[j].GTRID {
			return out[i].GTRID < out[j].GTRID
		}
		return out[i].RM < out[j].RM
	})
	return out
}

// CommitPointHeldByReason counts CommitPointHeld by reason, every reason
// present (the gauge tandem_commit_point_branches_held).
func (c *Coordinator) CommitPointHeldByReason() map[string]int {
	out := map[string]int{}
	for _, r := range CPHoldReasons {
		out[r] = 0
	}
	for _, h := range c.CommitPointHeld() {
		out[h.Reason]++
	}
	return out
}

// settleCommitPoint settles b, a prepared branch named with a commit point,
// first seen prepared at first by the scan that began at now (see the top
// of this file). It reports the outcome it applied, or Undecided when b is
// left for a later scan or held.
func (c *Coordinator) settleCommitPoint(b xid.Branch, first, now time.Time) Outcome {
	cp, g := b.CommitPoint, b.GTRID
	if _, ok := c.rms[cp]; !ok {
		c.hold(b, ReasonCPNotConfigured, "its commit point "+cp+" is not configured on this coordinator", xid.Owner{}, first)
		if c.sayEvery("cp-unknown:"+cp, now) {
			c.logger.Error("prepared branches name a commit point that is not configured on this coordinator: they are left alone (never guessed); "+
				"configure the commit point's database here (--rm "+cp+"=DRIVER:DSN) or let a coordinator that has it settle them (said again every minute while it lasts)",
				"commit_point", cp, "gtrid", g.String(), "rm", b.RM)
		}
		return Undecided
	}
	ctx, cancel := context.WithTimeout(c.ctx, phase2CallTimeout)
	defer cancel()
	tables := c.decisions()
	want := b.Owner
	if b.Owned() {
		id, err := c.tableIDFor(ctx, cp, want, now)
		if err != nil {
			if c.ctx.Err() == nil && c.sayEvery("cp-id:"+cp, now) {
				c.logger.Warn("cannot read the id of a commit point's decision table; its prepared branches are tried again at the next scan (said again every minute while it lasts)",
					"commit_point", cp, "gtrid", g.String(), "error", err)
			}
			return Undecided
		}
		if id != want {
			c.hold(b, ReasonCPTableDiffers, fmt.Sprintf("the decision table this coordinator reaches for %s has id %s, the branch names %s", cp, id, want), id, first)
			if c.sayEvery("cp-table:"+cp+":"+want.String(), now) {
				c.logger.Error("ALARM: prepared branches name a decision table that is not the one this coordinator reaches for their commit point: they are held, never settled here. "+
					"The coordinator's --rm DSN reaches another schema, database or server than the client's; fix the DSN (search_path, default database) so that both reach the same table "+
					"(said again every minute while it lasts)",
					"commit_point", cp, "branch_table", want.String(), "this_table", id.String(), "gtrid", g.String(), "rm", b.RM)
			}
			return Undecided
		}
	}
	if now.Sub(c.cpBase(b, first)) < c.settleAfter() {
		return Undecided // its client is settling it
	}
	if b.RM == cp && b.Owned() {
		return c.commitCrashedDecision(ctx, b)
	}
	o, found, err := tables.Lookup(ctx, cp, g, want)
	read := time.Now()
	if err != nil {
		c.cpReadFailed(b, now, err)
		return Undecided
	}
	if !b.Owned() && !c.opts.AdoptUnowned && !(found && o == dtable.Committed) {
		// Only a 'C' row proves anything of a legacy branch (only its
		// commit point writes 'C' for its gtrid, in whatever table); an
		// 'A' row or no row here may be another table's story.
		c.hold(b, ReasonCPUnowned, "a legacy (unowned) name with no commit decision in "+cp+"'s table: whoever decided it is unknown (serve --adopt-unowned makes such branches this coordinator's)", xid.Owner{}, first)
		if c.sayEvery("cp-unowned", now) {
			c.logger.Warn("prepared commit-point branches with legacy (unowned) names and no commit decision: listed, not settled; "+
				"start the coordinator with --adopt-unowned if no other coordinator or database could hold their decision (said again every minute while it lasts)",
				"commit_point", cp, "gtrid", g.String(), "rm", b.RM)
		}
		return Undecided
	}
	took := false
	if !found && c.keyVanished(g) {
		c.holdVanished(b, first, now)
		return Undecided
	}
	if !found {
		if o, err = c.takeKey(ctx, b, want, read); err != nil {
			return Undecided
		}
		took = true
	}
	c.unhold(b)
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
		c.logger.Warn("rolled back an orphaned commit-point branch: its commit point had no decision, and abort was recorded there (the key taken)",
			"commit_point", cp, "gtrid", g.String(), "rm", b.RM, "undecided_for", now.Sub(first).Round(time.Millisecond))
	default:
		c.logger.Info("settled a commit-point branch per its commit point's decision table", "commit_point", cp, "gtrid", g.String(), "rm", b.RM, "outcome", out.String())
	}
	return out
}

// commitCrashedDecision commits b, the commit point's own branch (its RM is
// its commit point, xid.CommitPointSelf), found prepared. No client prepares
// it: it is decided by INSERT 'C'; XA END; XA COMMIT … ONE PHASE. It is
// prepared only when the database crashed while that XA COMMIT ran and its
// recovery kept the transaction prepared (MariaDB 10.11 does: the completion
// of a user XA transaction is not binlog-coordinated in crash recovery), so
// its INSERT of 'C' had succeeded, and nothing can have recorded 'A' for the
// gtrid since: this branch holds the key. Its outcome is COMMIT; committing
// it makes the 'C' row visible, and the other branches are then settled by
// it. Its owner was checked against cp's table by the caller.
func (c *Coordinator) commitCrashedDecision(ctx context.Context, b xid.Branch) Outcome {
	c.unhold(b)
	done, err := c.settleCPBranch(ctx, b, true)
	switch {
	case err != nil:
		if c.ctx.Err() == nil {
			c.logger.Warn("could not commit a commit point's own branch left prepared by a crash; tried again at the next scan",
				"commit_point", b.CommitPoint, "gtrid", b.GTRID.String(), "error", err)
		}
		return Undecided
	case !done:
		return Undecided
	}
	c.logger.Warn("committed a commit point's own branch that the database's crash recovery had left prepared: its XA COMMIT … ONE PHASE was running, "+
		"so its decision was COMMIT (the INSERT of 'C' had succeeded, and nothing can record 'A' while it holds the key); the other branches follow its 'C' row",
		"commit_point", b.CommitPoint, "gtrid", b.GTRID.String())
	return Committed
}

// keyVanished reports whether g's decision row vanished under a key taken
// here (ReasonCPVanished).
func (c *Coordinator) keyVanished(g xid.GTRID) bool {
	c.cpst.mu.Lock()
	defer c.cpst.mu.Unlock()
	return c.cpst.vanished[g]
}

// markVanished notes that g's decision row vanished under a key taken here.
func (c *Coordinator) markVanished(g xid.GTRID) {
	c.cpst.mu.Lock()
	defer c.cpst.mu.Unlock()
	if c.cpst.vanished == nil {
		c.cpst.vanished = map[xid.GTRID]bool{}
	}
	c.cpst.vanished[g] = true
}

// holdVanished holds b, whose decision row vanished under a key taken here.
func (c *Coordinator) holdVanished(b xid.Branch, first, now time.Time) {
	c.hold(b, ReasonCPVanished, "its decision row was deleted while this coordinator took its key: the outcome is unknown (never taken for an abort); "+
		"look at what each database holds of the gtrid and settle the branch by hand", xid.Owner{}, first)
	if c.sayEvery("cp-vanished:"+b.GTRID.String(), now) {
		c.logger.Error("ALARM: a prepared commit-point branch whose decision row vanished under the key is held: its outcome is unknown here (said again every minute while it lasts)",
			"commit_point", b.CommitPoint, "gtrid", b.GTRID.String(), "rm", b.RM)
	}
}

// cpBase is when b's wait for its client is counted from: the first scan
// that saw it, or the prepare time noted for it by settleCPBranches if
// earlier.
func (c *Coordinator) cpBase(b xid.Branch, first time.Time) time.Time {
	c.cpst.mu.Lock()
	defer c.cpst.mu.Unlock()
	if at, ok := c.cpst.preparedAt[b]; ok && !at.IsZero() && at.Before(first) {
		return at
	}
	return first
}

// cpReadFailed logs a failed read of a commit point's table: an alarm when
// the table's id differs (the database refused inside the read).
func (c *Coordinator) cpReadFailed(b xid.Branch, now time.Time, err error) {
	if c.ctx.Err() != nil {
		return
	}
	if errors.Is(err, dtable.ErrWrongTable) {
		c.hold(b, ReasonCPTableDiffers, err.Error(), xid.Owner{}, now)
		if c.sayEvery("cp-table-read:"+b.CommitPoint, now) {
			c.logger.Error("ALARM: a commit point's decision table has another id than its branches name: they are held, never settled here (said again every minute while it lasts)",
				"commit_point", b.CommitPoint, "gtrid", b.GTRID.String(), "rm", b.RM, "error", err)
		}
		return
	}
	if c.sayEvery("cp-read:"+b.CommitPoint, now) {
		c.logger.Warn("cannot read a commit point's decision table; its prepared branches are tried again at the next scan (said again every minute while it lasts)",
			"commit_point", b.CommitPoint, "gtrid", b.GTRID.String(), "error", err)
	}
}

// takeKey takes g's key at b's commit point after a read at read found no
// row: only if b is still prepared by a scan begun after the read, and
// within cpKeyWithin of it (see the top of this file). An error leaves b for
// a later scan (logged here).
func (c *Coordinator) takeKey(ctx context.Context, b xid.Branch, table xid.Owner, read time.Time) (dtable.Outcome, error) {
	cp, g := b.CommitPoint, b.GTRID
	prepared, err := c.cpPrepared(ctx, b, read)
	switch {
	case err != nil:
		if c.ctx.Err() == nil {
			c.logger.Warn("could not check that a commit-point branch is still prepared; tried again at the next scan", "commit_point", cp, "gtrid", g.String(), "rm", b.RM, "error", err)
		}
		return 0, err
	case !prepared:
		return 0, errors.New("no longer prepared") // settled meanwhile: nothing to do
	case time.Since(read) >= cpKeyWithin:
		c.logger.Info("a commit-point branch's check took too long to take its key safely; tried again at the next scan", "commit_point", cp, "gtrid", g.String(), "rm", b.RM)
		return 0, errors.New("too slow")
	}
	// The key's INSERT is done before this deadline, or its transaction is
	// never committed (COMMIT is sent only after the INSERT answered): the
	// bound ForgetMinAge relies on holds by itself, not only through the
	// caller's timeout.
	kctx, cancel := context.WithDeadline(ctx, read.Add(cpKeyWithin))
	defer cancel()
	o, err := c.decisions().Resolve(kctx, cp, g, table, cpLockWait)
	switch {
	case errors.Is(err, dtable.ErrPending):
		c.logger.Info("a commit-point branch with no decision: the commit point's transaction is still open; tried again at the next scan",
			"commit_point", cp, "gtrid", g.String(), "rm", b.RM)
	case errors.Is(err, dtable.ErrVanished):
		c.markVanished(g)
		c.logger.Error("OUTCOME UNKNOWN: a commit point's decision row for a prepared branch was deleted while the key was taken; nothing was settled, and the key is not taken again "+
			"(the branch is held: a row deleted while a branch is prepared was deleted against the rules, and a 'C' there means the transaction committed). "+
			"Look at what the other databases hold of the gtrid and settle the branch by hand",
			"commit_point", cp, "gtrid", g.String(), "rm", b.RM, "error", err)
		c.holdVanished(b, time.Now(), time.Now())
	case errors.Is(err, dtable.ErrWrongTable):
		c.cpReadFailed(b, time.Now(), err)
	case err != nil:
		if c.ctx.Err() == nil {
			c.logger.Warn("could not take a commit point's decision key; tried again at the next scan", "commit_point", cp, "gtrid", g.String(), "rm", b.RM, "error", err)
		}
	}
	return o, err
}

// cpPrepared reports whether b is prepared by a recover scan begun no
// earlier than since.
func (c *Coordinator) cpPrepared(ctx context.Context, b xid.Branch, since time.Time) (bool, error) {
	if c.opts.prepared != nil {
		return c.opts.prepared(ctx, b.RM, b)
	}
	return c.rms[b.RM].IsPrepared(ctx, b, since)
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
// cpWorkers at once, and waits for them. It also keeps the branches'
// prepare times, drops the holds of branches gone, and notes what cpDue
// needs: when the next waiting branch becomes due.
func (c *Coordinator) settleCPBranches(ds []rm.InDoubt, now time.Time) {
	listed := map[xid.Branch]bool{}
	c.mu.Lock()
	seen := make(map[xid.Branch]bool, len(c.cpSeen))
	for b := range c.cpSeen {
		seen[b] = true
	}
	c.mu.Unlock()
	c.cpst.mu.Lock()
	for b := range c.cpst.held {
		if !seen[b] { // gone at an earlier scan (scanOnce forgot it)
			delete(c.cpst.held, b)
		}
	}
	if len(c.cpst.vanished) > 0 {
		live := map[xid.GTRID]bool{}
		for b := range seen {
			live[b.GTRID] = true
		}
		for _, d := range ds {
			live[d.Branch.GTRID] = true
		}
		for g := range c.cpst.vanished {
			if !live[g] {
				delete(c.cpst.vanished, g)
			}
		}
	}
	if c.cpst.preparedAt == nil {
		c.cpst.preparedAt = map[xid.Branch]time.Time{}
	}
	if c.cpst.lastScan.Before(now) {
		c.cpst.prevScan, c.cpst.lastScan = c.cpst.lastScan, now
	}
	for _, d := range ds {
		listed[d.Branch] = true
		if _, noted := c.cpst.preparedAt[d.Branch]; !noted && !d.PreparedAt.IsZero() {
			// The database's prepare time, first listed now: b was
			// prepared after the scan before, which did not list it, so
			// never earlier than that; and at the first scan after the
			// start not earlier than now. The prepare time is the
			// database's clock: one far behind must not make every branch
			// look old (a live client's transaction would be aborted
			// between its prepare and its decision).
			floor := c.cpst.prevScan
			if floor.IsZero() || floor.After(now) {
				floor = now
			}
			c.cpst.preparedAt[d.Branch] = maxTime(d.PreparedAt, floor)
		}
	}
	for b := range c.cpst.preparedAt {
		if !listed[b] {
			delete(c.cpst.preparedAt, b)
		}
	}
	if len(ds) > 0 {
		c.cpst.lastCP = now
	}
	c.cpst.mu.Unlock()

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

	var due time.Time
	c.mu.Lock()
	firsts := make(map[xid.Branch]time.Time, len(c.cpSeen))
	for b, first := range c.cpSeen {
		firsts[b] = first
	}
	c.mu.Unlock()
	for b, first := range firsts {
		if at := c.cpBase(b, first).Add(c.settleAfter()); at.After(now) && (due.IsZero() || at.Before(due)) {
			due = at
		}
	}
	c.cpst.mu.Lock()
	c.cpst.due = due
	c.cpst.mu.Unlock()
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// cpDue is a channel that fires when the scan should run next for
// commit-point branches (the scan loop waits on it beside its ticker): at
// the earliest time a waiting branch becomes due, and, while commit points
// are in use here (a commit-point branch seen within cpActiveFor), at least
// every CommitPointSettleAfter, so that a dead client's branches are found
// and rolled back within about twice CommitPointSettleAfter whatever
// ScanInterval is. Nil when there is nothing to wait for.
func (c *Coordinator) cpDue() <-chan time.Time {
	c.cpst.mu.Lock()
	defer c.cpst.mu.Unlock()
	at := c.cpst.due
	if !c.cpst.lastCP.IsZero() && time.Since(c.cpst.lastCP) < cpActiveFor && c.settleAfter() < c.opts.ScanInterval {
		if next := c.cpst.lastScan.Add(c.settleAfter()); at.IsZero() || next.Before(at) {
			at = next
		}
	}
	if at.IsZero() {
		return nil
	}
	return time.After(max(time.Until(at), 100*time.Millisecond))
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

// cpStatus answers Status for g, which has no record in the log, from the
// commit points' decision tables:
//   - some RM holds a prepared branch of g named with a commit point: from
//     that commit point's table (Lookup, the table's id checked against the
//     branches' owner), or, with resolve, by taking the key (Resolve) and
//     then settling the branches;
//   - none does: from every configured RM's table, where a row for g says
//     how g was decided (COMMITTED or ABORTED at that commit point) even
//     though no branch is prepared any more. Reports never guess: while a
//     row exists, the answer is never UNDECIDED.
//
// ok is false when no table knows g and no such branch is prepared: Status
// answers as for any gtrid.
func (c *Coordinator) cpStatus(ctx context.Context, g xid.GTRID, resolve bool) (r Report, ok bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, undecidedAskTimeout+cpLockWait)
	defer cancel()
	bs, failed := c.cpBranches(ctx, g)
	if len(bs) == 0 {
		return c.cpStatusFromTables(ctx, g, resolve, failed)
	}
	r = Report{GTRID: g, Outcome: Undecided}
	cp, want := bs[0].CommitPoint, bs[0].Owner
	var held []string
	for _, b := range bs {
		if b.CommitPoint != cp {
			return Report{}, true, fmt.Errorf("coord: gtrid %s has prepared branches naming different commit points (%s on %s, %s on %s): "+
				"no single decision table decides it; inspect both tables and settle the branches by hand", g, cp, bs[0].RM, b.CommitPoint, b.RM)
		}
		if b.Owner != want {
			return Report{}, true, fmt.Errorf("coord: gtrid %s has prepared branches naming different decision tables of commit point %s (%s on %s, %s on %s): "+
				"no single decision table decides it; inspect the tables and settle the branches by hand", g, cp, want.Short(), bs[0].RM, b.Owner.Short(), b.RM)
		}
		held = append(held, b.RM)
		r.Branches = append(r.Branches, BranchReport{RM: b.RM, State: BranchPending})
	}
	sort.Strings(held)
	where := fmt.Sprintf("prepared on %s, decided by commit point %s's decision table (%s, id %s), not by this coordinator's log", strings.Join(held, ", "), cp, dtable.TableName, want.Short())
	if len(failed) > 0 {
		where += "; could not ask " + strings.Join(failed, ", ")
	}
	if _, known := c.rms[cp]; !known {
		r.Message = where + ": " + cp + " is not configured on this coordinator, so it cannot read the decision: ask a coordinator that has it"
		return r, true, nil
	}
	if !want.IsZero() {
		id, err := c.tableIDFor(ctx, cp, want, time.Now().Add(-idRecheckEvery))
		if err != nil {
			return Report{}, true, fmt.Errorf("coord: gtrid %s is %s, whose id cannot be read: %w; try again", g, where, err)
		}
		if id != want {
			r.Message = where + fmt.Sprintf(": the table this coordinator reaches for %s has another id (%s): it is not the client's table, so it says nothing of this gtrid; "+
				"nothing was read or recorded. Fix the coordinator's --rm DSN for %s so that it reaches the client's table", cp, id, cp)
			return r, true, nil
		}
	}
	tables := c.decisions()
	o, found, err := tables.Lookup(ctx, cp, g, want)
	read := time.Now()
	if err != nil {
		return Report{}, true, fmt.Errorf("coord: gtrid %s is %s, which cannot be read: %w; try again", g, where, err)
	}
	if found && o == dtable.Aborted && want.IsZero() && !c.opts.AdoptUnowned {
		r.Message = where + ": its table has an abort row, but the branches carry legacy (unowned) names: the client may have decided in another table, so this row proves nothing; " +
			"nothing was settled. Look at the databases and settle them by hand, or start the coordinator with --adopt-unowned if no other table can hold their decision"
		return r, true, nil
	}
	if !found && c.keyVanished(g) {
		r.Message = where + ": OUTCOME UNKNOWN — its decision row was deleted while this coordinator took the key earlier; the key is not taken again into an abort, and nothing was recorded. " +
			"Look at what each database holds of the gtrid and settle the branches by hand"
		return r, true, nil
	}
	if !found && resolve {
		if want.IsZero() && !c.opts.AdoptUnowned {
			r.Message = where + ": no decision there, and the branches carry legacy (unowned) names: the client may have decided in another table; nothing was recorded. " +
				"Settle them by hand, or start the coordinator with --adopt-unowned if no other table can hold their decision"
			return r, true, nil
		}
		still := false
		for _, b := range bs {
			p, err := c.cpPrepared(ctx, b, read)
			if err != nil {
				return Report{}, true, fmt.Errorf("coord: gtrid %s is %s: cannot check that its branches are still prepared: %w; try again", g, where, err)
			}
			still = still || p
		}
		if !still || time.Since(read) >= cpKeyWithin {
			r.Message = where + ": its branches were settled meanwhile (or the check was slow); nothing was recorded: ask again"
			return r, true, nil
		}
		kctx, kcancel := context.WithDeadline(ctx, read.Add(cpKeyWithin)) // as in takeKey
		o, err = tables.Resolve(kctx, cp, g, want, cpLockWait)
		kcancel()
		switch {
		case errors.Is(err, dtable.ErrPending):
			r.Message = where + ": the commit point's transaction is still open (it holds the decision key); nothing was recorded: try again in a moment"
			return r, true, nil
		case errors.Is(err, dtable.ErrVanished):
			c.markVanished(g)
			r.Message = where + ": OUTCOME UNKNOWN — the decision row was deleted while the key was taken (forgotten or swept): it is NOT taken for an abort, and nothing was recorded; " +
				"look at what each database holds of the gtrid and settle the branches by hand"
			return r, true, nil
		case err != nil:
			return Report{}, true, fmt.Errorf("coord: gtrid %s is %s: taking the decision key failed: %w; try again", g, where, err)
		}
		found = true
	}
	if !found {
		r.Message = where + ": no decision there yet. Unless its commit point commits first, the in-doubt scan records abort there and rolls the branches back after " +
			c.settleAfter().String() + " (CommitPointSettleAfter); to do so now: tandem status --resolve " + g.String()
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

// cpStatusFromTables answers Status for g when no branch of it named with a
// commit point is prepared: from the decision table of every configured
// RM (each read with its own id checked). A row says how g was decided.
// With no row anywhere, ok is false — unless some table could not be read
// and resolve is false: then the answer is UNDECIDED with the usual
// message and the tables it could not read (a row may be there).
func (c *Coordinator) cpStatusFromTables(ctx context.Context, g xid.GTRID, resolve bool, failedScans []string) (Report, bool, error) {
	tables := c.decisions()
	type hit struct {
		rm string
		o  dtable.Outcome
	}
	var hits []hit
	var failed []string
	for _, name := range c.rmList {
		id, err := c.tableID(ctx, name)
		if errors.Is(err, dtable.ErrNoID) {
			continue // no table there: nothing recorded
		}
		if err == nil {
			var o dtable.Outcome
			var found bool
			o, found, err = tables.Lookup(ctx, name, g, id)
			if err == nil && found {
				hits = append(hits, hit{name, o})
			}
		}
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s (%v)", name, err))
		}
	}
	if len(hits) == 0 {
		if len(failed) == 0 || resolve {
			return Report{}, false, nil
		}
		return Report{GTRID: g, Outcome: Undecided, Message: c.undecidedMessage(ctx, g) +
			"; could not read the decision tables of " + strings.Join(failed, ", ") + ": if it was decided at a commit point, its outcome may be recorded there"}, true, nil
	}
	for _, h := range hits[1:] {
		if h.o != hits[0].o {
			return Report{}, true, fmt.Errorf("coord: gtrid %s has decision rows that disagree: %s in %s's table, %s in %s's: inspect both tables", g, hits[0].o, hits[0].rm, h.o, h.rm)
		}
	}
	r := Report{GTRID: g, Outcome: Aborted}
	if hits[0].o == dtable.Committed {
		r.Outcome = Committed
	}
	var at []string
	for _, h := range hits {
		at = append(at, h.rm)
	}
	r.Message = fmt.Sprintf("decided at commit point %s: its decision table (%s) records %s; no branch of it is prepared any more", strings.Join(at, ", "), dtable.TableName, r.Outcome)
	if len(failedScans) > 0 {
		r.Message += " on the RMs that answered; could not ask " + strings.Join(failedScans, ", ")
	}
	return r, true, nil
}
