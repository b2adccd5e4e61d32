package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/trace"

	"github.com/tandem-tx/tandem/internal/decision"
	"github.com/tandem-tx/tandem/internal/failpoint"
	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/waits"
	"github.com/tandem-tx/tandem/xid"
)

// The commit point (README, "Deciding in the databases").
//
// A transaction with two or more writers can be decided by one of its own
// branches instead of the coordinator: the others are prepared (in
// parallel), then that branch — the commit point — inserts the row
// (gtrid, 'C', its participants) into its database's tandem_decision table
// and commits, in one round trip. Its local COMMIT is the decision: durable
// where the database makes commits durable, with no coordinator call and no
// coordinator fsync. Then the prepared branches are committed. The prepared branches are named
// with the commit point (xid.Branch.CommitPoint) and owned by its decision
// table's id (xid.Branch.Owner; tableid.go), so that whoever finds one
// later — this SDK after a broken call, any coordinator's in-doubt scan —
// settles it by taking the key: inserting (gtrid, 'A'). A duplicate key
// means a decision exists (read and apply it); a successful insert means no
// COMMIT can ever land (the late commit point's insert conflicts and its
// transaction fails), so the prepared branches are rolled back.
//
// Which branch: a MariaDB/MySQL branch that begins while the transaction has
// none yet (it begins as its own XA branch, xid.CommitPointSelf, which it
// never prepares: it commits with XA COMMIT … ONE PHASE after the decision's
// INSERT, and inside it the server refuses whatever would end it), else, at
// Commit, a PostgreSQL writer (any PostgreSQL branch is a plain transaction
// until PREPARE): cp_choice.go.
//
// This file reads top to bottom: commitAtRM, the decision's round trip
// (commitDecision) and how its answers are read, taking the key after a
// broken call (resolveByKey), and the background phase 2 (visibility
// async). Phase 1 and phase 2 are shared with the coordinator's path
// (prepare.go, phase2.go); forgetting rows is cp_forget.go.

// commitAtRM decides at cp: prepare the other writers, then record COMMIT
// and commit at cp in one round trip, then commit the prepared branches.
func (t *Tx) commitAtRM(ctx context.Context, all, writers []*Branch, cp *Branch, commitReaders func() error) (Result, txState, error) {
	res := Result{Path: PathCommitPoint, CommitPoint: cp.rm.name}
	if !slices.Contains(all, cp) {
		all = append(all, cp) // a pinned commit point that ran nothing yet
	}
	var recovered []string // the RMs the coordinator knows
	for _, w := range append([]*Branch{cp}, writers...) {
		known, asked := t.c.coordinatorKnows(ctx, w.rm.name)
		if asked && known && !slices.Contains(recovered, w.rm.name) {
			recovered = append(recovered, w.rm.name)
		}
		if asked && !known {
			t.abortAll(ctx, all)
			return res, txAborted, &AbortedError{GTRID: t.gtrid, Reason: fmt.Sprintf(
				"the coordinator does not know resource manager %q, so it could not recover this transaction's branches if this process died; nothing was prepared: "+
					"give the coordinator --rm %s=DRIVER:DSN (the name in client.Config.RMs)", w.rm.name, w.rm.name), stage: stageSetup}
		}
	}
	t.c.noteUnrecoverable(t.gtrid.String(), recovered)
	cpID, err := t.c.tableID(ctx, cp.rm, nil)
	if err != nil {
		t.abortAll(ctx, all)
		return res, txAborted, &AbortedError{GTRID: t.gtrid, Reason: "the commit point's decision-table id is not known; nothing was prepared", Cause: err, stage: stageSetup}
	}
	var prepared []*Branch
	var parts []decision.Participant
	for _, w := range writers {
		if w == cp || w.state == branchCommitted {
			continue
		}
		// PostgreSQL: named at PREPARE; MySQL: named at XA START already.
		w.id.CommitPoint, w.id.Owner = cp.rm.name, cpID
		prepared = append(prepared, w)
		id, err := t.c.tableID(ctx, w.rm, nil)
		if err != nil {
			t.abortAll(ctx, all)
			return res, txAborted, &AbortedError{GTRID: t.gtrid, Cause: err, Reason: fmt.Sprintf(
				"the decision row must name every participant by its decision-table id, and %q's is not known (give it client.RM.DB, or run tandem init-rm on it); nothing was prepared", w.rm.name), stage: stageSetup}
		}
		parts = append(parts, decision.Participant{RM: w.rm.name, Table: id})
	}
	if cp.state == branchIdle {
		// A pinned PostgreSQL commit point that ran nothing begins before
		// any branch prepares, so that its transaction's start (now(), the
		// age check's origin) comes before any recoverer could see a
		// prepared branch of it.
		if err := cp.execSteps(ctx, waits.RMRoundtrip, []string{"BEGIN"}); err != nil {
			t.abortAll(ctx, all)
			return res, txAborted, &AbortedError{GTRID: t.gtrid, Reason: "could not begin the commit point " + cp.rm.name, Cause: err, stage: stageSetup}
		}
		cp.state = branchActive
	}
	if err := t.prepareAll(ctx, prepared, commitReaders); err != nil {
		t.abortAll(ctx, all)
		return res, txAborted, &AbortedError{GTRID: t.gtrid, Reason: "phase 1 failed", Cause: err, stage: stagePrepare}
	}
	_ = failpoint.Inject("before-commit-point") // kill: every other branch prepared, no decision anywhere
	var forget []xid.GTRID
	if cp.rm.db == nil {
		forget = cp.rm.cp.takeForget(time.Now()) // no pool: carried by this commit
	}
	dc := decision.Commit{GTRID: t.gtrid, Table: cpID, TableChecked: cp.rm.tableChecked(), Participants: parts, MaxAge: t.c.cfg.MaxTxnAge, Forget: forget}
	if cp.selfCP {
		dc.XA = cp.id.MySQLXID()
	}
	decided := time.Now()
	dctx, dspan := t.decisionSpan(ctx, "commit-point", cp.rm.name)
	err = cp.commitDecision(dctx, decision.CommitStatements(cp.rm.dialect.Driver(), dc))
	endSpan(dspan, err)
	_ = failpoint.Inject("after-commit-point") // kill: decided COMMIT; the prepared branches wait for a recoverer
	switch {
	case err == nil:
		cp.state = branchCommitted
	case isRefused(err) || cp.rm.dialect.Driver() == rm.Postgres && pgStatementFailed(err):
		// The database answered: the INSERT (or PostgreSQL's COMMIT)
		// failed, so the commit point's transaction did not commit and
		// never will.
		cp.rm.cp.giveBack(forget)
		reason := "the commit point " + cp.rm.name + " could not record the decision"
		if why, ok := decision.Refused(err); ok {
			reason = "the commit point " + cp.rm.name + " refused the decision: " + why
			if why == decision.RefusedDuplicate {
				reason += t.c.checkForeignCommit(ctx, cp.rm, t.gtrid, cpID)
			}
			if (why == decision.RefusedWrongTable || why == decision.RefusedUnchecked) && dc.TableChecked {
				cp.rm.forgetTableChecked()
			}
		}
		t.abortAll(ctx, all)
		return res, txAborted, &AbortedError{GTRID: t.gtrid, Reason: reason, Cause: err, stage: stageCommit}
	default:
		// The call broke, or MySQL/MariaDB answered an error other than a
		// refusal of the decision (which statement failed — the COMMIT
		// itself? — is not known): the COMMIT may or may not have
		// happened. End the session (an uncommitted decision row goes with
		// it), then take the key.
		cp.rm.cp.giveBack(forget)
		cp.releaseSession()
		cp.state = branchHandedOver
		kctx, kspan := t.startSpan(ctx, SpanTakeKey, cp.rm.name)
		o, rerr := t.c.resolveByKey(kctx, cp.rm, t.gtrid, cpID, decided)
		if rerr == nil && t.rec {
			kspan.SetAttributes(AttrOutcome.String(keyOutcome(o)))
		}
		endSpan(kspan, rerr)
		if rerr != nil {
			t.releaseOwn(prepared)
			return res, txUnknown, &OutcomeUnknownError{GTRID: t.gtrid, Cause: fmt.Errorf(
				"rm %q (the commit point): commit: %w; learning the outcome by taking the decision key failed too: %v; nothing was rolled back: "+
					"the prepared branches are settled by the coordinator's scan from %s's decision table", cp.rm.name, err, rerr, cp.rm.name)}
		}
		if o == decision.Aborted {
			t.settlePrepared(ctx, prepared, false)
			return res, txAborted, &AbortedError{GTRID: t.gtrid, Reason: "the commit point's connection broke during its commit, and taking the decision key found no decision (its COMMIT never happened; now none can): aborted", Cause: err, stage: stageDecidedAbort}
		}
	}
	if t.opts.Visibility == VisibilityAsync && pooled(prepared) && t.c.background.TryAcquire() {
		// Decided and durable: the prepared branches are committed in the
		// background through each RM's pool; a failure leaves them to the
		// coordinator's scan, which finds the 'C'.
		for _, b := range prepared {
			b.state = branchHandedOver
		}
		res.Phase2Pending = true
		go t.c.commitInBackground(t.spanContext(context.Background()), t.rec, t.gtrid, cp.rm, prepared, parts)
		return res, txCommitted, nil
	}
	if !t.settlePrepared(ctx, prepared, true) {
		res.Phase2Pending = true
	} else {
		t.c.forgetLater(cp.rm, t.gtrid)
	}
	return res, txCommitted, nil
}

// commitDecision sends the commit point's statements in one round trip:
// PostgreSQL's simple query protocol runs them in order and skips the rest
// at the first error (so a failed INSERT never reaches COMMIT); MySQL and
// MariaDB with multiStatements stop at the first error too. Without
// multiStatements they go one by one, stopping at the first error.
func (b *Branch) commitDecision(ctx context.Context, stmts []string) error {
	if b.rm.dialect.Driver() == rm.Postgres {
		joined := strings.Join(stmts, "; ")
		piped, err := b.withPgx(func(c *pgx.Conn) error {
			b.trips++
			start := time.Now()
			_, e := c.Exec(ctx, joined) // no arguments: the simple protocol
			b.waited(waits.RMCommit, start)
			return e
		})
		if piped {
			return err
		}
	}
	return b.execSteps(ctx, waits.RMCommit, stmts)
}

// isRefused reports whether the commit point's database refused the
// decision (decision.Refused): its transaction did not commit.
func isRefused(err error) bool {
	_, ok := decision.Refused(err)
	return ok
}

// pgStatementFailed reports whether err is PostgreSQL's ERROR for a
// statement of the commit point's round trip: the simple protocol skips the
// statements after it and a failed COMMIT rolls back, so the transaction did
// not commit. A FATAL or PANIC is not: it ends the session, and can come
// after the COMMIT ran (a backend told to terminate once its commit is done).
func pgStatementFailed(err error) bool {
	var e *pgconn.PgError
	return errors.As(err, &e) && e.Severity == "ERROR" && (e.SeverityUnlocalized == "" || e.SeverityUnlocalized == "ERROR")
}

// checkForeignCommit looks at the row that refused a commit point's
// decision as a duplicate. Only this client writes 'C' for its gtrid, and it
// did not commit, so the row should be a recoverer's 'A'. A 'C' means
// someone else wrote the decision table: an integrity alarm (logged, and
// returned to be added to the error). This transaction still rolls back
// everywhere — its commit point did not commit — so nothing of it is
// committed; the coordinator's scan finds no prepared branch to settle by
// the foreign row.
func (c *Client) checkForeignCommit(ctx context.Context, info *rmInfo, g xid.GTRID, table xid.Owner) string {
	if info.db == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	o, found, err := decision.Lookup(ctx, info.db, g, table)
	if err != nil || !found || o != decision.Committed {
		return ""
	}
	msg := "INTEGRITY: the decision table of " + info.name + " holds COMMIT for " + g.String() +
		", which no commit point of this client recorded: someone else writes that table (restrict its grants to the application and the coordinator)"
	if c.cfg.Logger != nil {
		c.cfg.Logger.Error(msg, "rm", info.name, "gtrid", g.String())
	}
	return "; " + msg
}

// resolveByKey learns the outcome of g from the commit point's decision
// table (whose id must be table: the database checks it) by taking the key
// (decision.Resolve), retrying while the commit point's transaction is
// still open, within Config.DecisionTimeout and never past keyHorizon after
// the decision was sent: a key taken after the 'C' row could have been
// forgotten (decision.ForgetMinAge after it was written) would record
// abort for a transaction committed everywhere. Past it, or when the row
// vanished while it was read (decision.ErrVanished), the outcome is
// unknown.
func (c *Client) resolveByKey(ctx context.Context, info *rmInfo, g xid.GTRID, table xid.Owner, decided time.Time) (decision.Outcome, error) {
	if info.db == nil {
		return 0, fmt.Errorf("no client.RM.DB for %q to take the decision key with", info.name)
	}
	ctx, cancel := c.decisionContext(context.WithoutCancel(ctx))
	defer cancel()
	ctx, cancelKey := context.WithDeadline(ctx, decided.Add(keyHorizon))
	defer cancelKey()
	for {
		start := time.Now()
		o, err := decision.Resolve(ctx, info.db, info.dialect.Driver(), g, table, 2*time.Second)
		c.waits.Since(waits.RMCommit, start)
		if err == nil {
			return o, nil
		}
		if !errors.Is(err, decision.ErrPending) || ctx.Err() != nil {
			return 0, err
		}
		select {
		case <-ctx.Done():
			return 0, err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// keyHorizon is how long after sending its decision a client may still
// take the key: a third of decision.ForgetMinAge, so that no 'C' row it
// could meet has been forgotten yet.
const keyHorizon = decision.ForgetMinAge / 3

// pooled reports whether every branch can be committed from another
// session, through its RM's pool (RM.DB): not session-bound, pool given.
func pooled(bs []*Branch) bool {
	for _, b := range bs {
		if b.rm.db == nil || b.rm.dialect.SessionBound() {
			return false
		}
	}
	return true
}

// commitInBackground commits prepared branches of a decided gtrid through
// their RMs' pools (visibility async), and has the decision row forgotten
// once every one is committed on a verified connection: one whose
// decision-table id is the participant's (parts, as the decision row names
// it), read on that same connection. Only there does "no such prepared
// transaction" mean committed already; a pool that reaches another
// database would answer it for a branch still prepared where it was.
//
// Its spans (rec) are children of parent's span, the transaction's, which
// ends before them: tandem.phase2 with tandem.background.
func (c *Client) commitInBackground(parent context.Context, rec bool, g xid.GTRID, cp *rmInfo, bs []*Branch, parts []decision.Participant) {
	defer c.background.Release()
	ctx, cancel := context.WithTimeout(c.closing, 10*time.Second)
	defer cancel()
	if rec {
		ctx = trace.ContextWithSpan(ctx, trace.SpanFromContext(parent))
	}
	ids := make([]xid.Branch, len(bs))
	for i, b := range bs {
		ids[i] = b.id
	}
	want := make(map[string]xid.Owner, len(parts))
	for _, p := range parts {
		want[p.RM] = p.Table
	}
	err := parallel(len(bs), func(i int) error {
		b := bs[i]
		conn, err := b.rm.db.Conn(ctx)
		if err != nil {
			return fmt.Errorf("rm %q: %w", b.rm.name, err)
		}
		defer conn.Close()
		id, err := readTableID(ctx, sqlReader{conn})
		if err != nil {
			return fmt.Errorf("rm %q: verify the pool's decision table: %w", b.rm.name, err)
		}
		if id != want[b.rm.name] {
			return fmt.Errorf("rm %q: client.RM.DB reaches decision table %s, but the branch was prepared where the table is %s (another server, database or schema): "+
				"not committed through it; give client.RM.DB the application's database", b.rm.name, id, want[b.rm.name])
		}
		sctx, sp := c.startSpan(ctx, rec, SpanPhase2, b.rm.name)
		if rec {
			sp.SetAttributes(AttrAction.String("commit"), AttrBackground.Bool(true))
		}
		start := time.Now()
		_, err = conn.ExecContext(sctx, b.rm.dialect.CommitPrepared(ids[i]))
		c.waits.Since(waits.RMCommitPrepared, start)
		if err != nil && !b.rm.dialect.IsNotFound(err) {
			endSpan(sp, err)
			return fmt.Errorf("rm %q: %w", b.rm.name, err)
		}
		endSpan(sp, nil)
		return nil
	})
	if err != nil {
		msg := "commit of a decided transaction's prepared branches failed; the decision row is kept, and the coordinator's scan commits them from it"
		if c.cfg.Logger != nil {
			c.cfg.Logger.Error(msg, "gtrid", g.String(), "commit_point", cp.name, "error", err)
		}
		return
	}
	c.forgetLater(cp, g)
}

// slots bounds goroutines: TryAcquire takes one if free.
type slots chan struct{}

// TryAcquire takes a slot if one is free.
func (s slots) TryAcquire() bool {
	select {
	case s <- struct{}{}:
		return true
	default:
		return false
	}
}

// Release gives a slot back.
func (s slots) Release() { <-s }

// maxBackground bounds the background commits of a client (visibility
// async): past it, Commit commits the prepared branches itself.
const maxBackground = 64

// keyOutcome is the tandem.outcome of a tandem.take_key span.
func keyOutcome(o decision.Outcome) string {
	if o == decision.Committed {
		return "committed"
	}
	return "aborted"
}
