package client

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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
// (gtrid, 'C') into its database's tandem_decision table and commits, in one
// round trip. Its local COMMIT is the decision: durable where the database
// makes commits durable, with no coordinator call and no coordinator fsync.
// Then the prepared branches are committed. The prepared branches are named
// with the commit point (xid.Branch.CommitPoint), so that whoever finds one
// later — this SDK after a broken call, any coordinator's in-doubt scan —
// settles it by taking the key: inserting (gtrid, 'A'). A duplicate key
// means a decision exists (read and apply it); a successful insert means no
// COMMIT can ever land (the late commit point's insert conflicts and its
// transaction fails), so the prepared branches are rolled back.
//
// Which branch: a MariaDB/MySQL branch that begins while the transaction has
// none yet (it begins as a plain transaction, never prepares, and so binds
// no XA branch to its session), else, at Commit, a PostgreSQL writer (any
// PostgreSQL branch is a plain transaction until PREPARE). An RM qualifies
// when its decision table exists and its database makes commits durable
// (decision.CheckDurable); checked on first use and cached.

// cpState is what a client knows of one RM as a commit point.
type cpState struct {
	mu        sync.Mutex
	checked   time.Time // zero: never checked
	why       error     // nil: qualifies
	transient bool      // why may pass by itself: checked again after cpRetry
	// forget holds gtrids whose branches are all committed: their 'C' rows
	// are deleted by a later commit on this RM, in the same round trip.
	forget     []xid.GTRID
	forgetting bool // a background delete runs (forgetRows)
}

// cpRecheck is how long a negative eligibility answer is kept.
const cpRecheck = time.Minute

// Forget batching: the rows of committed gtrids are deleted once at least
// forgetBatch are pending, at most forgetMax at a time; past forgetKeep the
// oldest are dropped from memory (the coordinator's sweep deletes them).
const (
	forgetBatch = 32
	forgetMax   = 256
	forgetKeep  = 4096
)

// qualifies reports whether info can be a commit point, checking when it
// has not yet (or when a negative answer is older than cpRecheck, or a
// transient one older than cpRetry). conn is the branch's connection,
// outside any transaction, or nil when it cannot be used now: the checks
// run on the RM's pool when there is one (the application's connection is
// left alone, but for comparing what it and the pool reach), else on conn.
func (c *Client) qualifies(ctx context.Context, info *rmInfo, conn rowReader) bool {
	if info.neverCP {
		return false
	}
	s := &info.cp
	s.mu.Lock()
	checked, why, transient := s.checked, s.why, s.transient
	s.mu.Unlock()
	wait := cpRecheck
	if transient {
		wait = cpRetry
	}
	if !checked.IsZero() && (why == nil || time.Since(checked) < wait) {
		return why == nil
	}
	if conn == nil && info.db == nil {
		return false // nothing to check with now; not cached
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	why, transient = c.checkCommitPoint(ctx, info, conn)
	s.mu.Lock()
	s.checked, s.why, s.transient = time.Now(), why, transient
	s.mu.Unlock()
	if why != nil {
		c.warn("resource manager cannot be a commit point; its branches are prepared and another branch or the coordinator decides (checked again later)",
			"rm", info.name, "why", why.Error())
	}
	return why == nil
}

// cpRetry is how long a transient failure of the checks (the database not
// reachable) is kept.
const cpRetry = 5 * time.Second

// checkCommitPoint says why info cannot be a commit point (nil: it can),
// and whether that may pass by itself (a failed connection, say).
func (c *Client) checkCommitPoint(ctx context.Context, info *rmInfo, conn rowReader) (why error, transient bool) {
	d := info.dialect.Driver()
	q := conn
	if info.db != nil {
		q = sqlReader{info.db}
		if err := decision.Ensure(ctx, info.db, d); err != nil {
			return err, !isDefinite(err)
		}
		if conn != nil {
			// Taking the key through the pool must hit the table the
			// branches' commits write: the same database, server, table.
			a, err := tableIdentity(ctx, conn, d)
			if err != nil {
				return fmt.Errorf("rm %q: identify the decision table through the application's connection: %w", info.name, err), !isDefinite(err)
			}
			b, err := tableIdentity(ctx, q, d)
			if err != nil {
				return fmt.Errorf("rm %q: identify the decision table through client.RM.DB: %w", info.name, err), !isDefinite(err)
			}
			if a != b {
				return fmt.Errorf("rm %q: client.RM.DB reaches another decision table than the application's connections (%s against %s): "+
					"give it a pool on the same database and user, or no pool", info.name, b, a), false
			}
		}
	}
	if err := decision.CheckDurableRead(ctx, q.readRow, d); err != nil {
		return err, !isDefinite(err)
	}
	var g string
	if err := q.readRow(ctx, "SELECT gtrid FROM "+decision.TableName+" WHERE 1 = 0", &g); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("rm %q: the decision table %s is not usable (%w): start the coordinator with this RM (it creates the table), run tandem init-rm, or give client.RM.DB", info.name, decision.TableName, err), !isDefinite(err)
	}
	return nil, false
}

// isDefinite reports whether err is an answer (the database's, or a
// verdict on its settings), as opposed to a failed connection or a timeout,
// which may pass by itself.
func isDefinite(err error) bool {
	var netErr net.Error
	switch {
	case serverSaidNo(err):
		return true
	case errors.As(err, &netErr), errors.Is(err, driver.ErrBadConn), errors.Is(err, mysql.ErrInvalidConn),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return false
	}
	return true
}

// tableIdentity names what q reaches as the decision table: database,
// server and the table's own identity.
func tableIdentity(ctx context.Context, q rowReader, d rm.Driver) (string, error) {
	query := "SELECT concat_ws('/', current_database(), coalesce(inet_server_addr()::text, 'local'), inet_server_port()::text, pg_postmaster_start_time()::text, " +
		"coalesce(to_regclass('" + decision.TableName + "')::oid::text, 'none'))"
	if d == rm.MySQL {
		query = "SELECT concat_ws('/', DATABASE(), @@hostname, @@port, @@server_id, " +
			"(SELECT coalesce(create_time, '') FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = '" + decision.TableName + "'))"
	}
	var id string
	if err := q.readRow(ctx, query, &id); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return "", err
	}
	return id, nil
}

// rowReader is a connection as the commit point's checks use it: the
// application's (database/sql or pgx) or the RM's pool.
type rowReader interface {
	// readRow reads the first row of query into dest; with no row, an
	// error matching sql.ErrNoRows.
	readRow(ctx context.Context, query string, dest ...any) error
}

// sqlReader reads through database/sql (*sql.DB or *sql.Conn).
type sqlReader struct {
	q interface {
		QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	}
}

func (r sqlReader) readRow(ctx context.Context, query string, dest ...any) error {
	return r.q.QueryRowContext(ctx, query).Scan(dest...)
}

// pgxReader reads through a pgx connection (pgx.ErrNoRows matches sql.ErrNoRows).
type pgxReader struct{ c *pgx.Conn }

func (r pgxReader) readRow(ctx context.Context, query string, dest ...any) error {
	return r.c.QueryRow(ctx, query).Scan(dest...)
}

// beginForm says how a MariaDB/MySQL branch begins: as the transaction's
// commit point (a plain transaction), or as an XA branch named with the
// commit point the transaction already has — the plain branch, or a
// PostgreSQL branch pinned as the commit point when this RM cannot be one —
// or with none (the coordinator decides). Called once per branch, before
// its begin is sent.
func (t *Tx) beginForm(ctx context.Context, b *Branch) {
	if b.rm.dialect.Driver() != rm.MySQL {
		return
	}
	t.mu.Lock()
	decideAt := t.opts.DecideAt
	t.mu.Unlock()
	plainOK := decideAt != DecideAtCoordinator && t.c.qualifies(ctx, b.rm, b.reader())
	var pin *Branch
	if !plainOK && decideAt != DecideAtCoordinator {
		pin = t.postgresCandidate(ctx)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.cp != nil:
		b.id.CommitPoint = t.cp.rm.name
	case t.unnamedXA:
	case plainOK:
		t.cp, b.plain = b, true
	case pin != nil:
		t.cp = pin
		b.id.CommitPoint = pin.rm.name
	default:
		t.unnamedXA = true
	}
}

// postgresCandidate returns the enlisted PostgreSQL branch that would be
// the commit point (the qualifying RM of highest strength, then the first
// enlisted), checking RMs not checked yet.
func (t *Tx) postgresCandidate(ctx context.Context) *Branch {
	t.mu.Lock()
	bs := append([]*Branch(nil), t.branches...)
	t.mu.Unlock()
	var best *Branch
	for _, w := range bs {
		if w.rm.dialect.Driver() != rm.Postgres || w.rm.neverCP {
			continue
		}
		ok := w.rm.cp.known()
		switch {
		case ok:
		case w.mu.TryLock():
			// Idle, the check may use its connection (outside any
			// transaction); busy, another goroutine runs a statement on
			// it: never wait for it here.
			if w.state == branchIdle {
				ok = t.c.qualifies(ctx, w.rm, w.reader())
			}
			w.mu.Unlock()
		}
		if ok && (best == nil || w.rm.cpStrength > best.rm.cpStrength) {
			best = w
		}
	}
	return best
}

// known reports whether the RM was checked and qualifies.
func (s *cpState) known() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.checked.IsZero() && s.why == nil
}

// checkPostgres learns, before a PostgreSQL branch begins, whether its RM
// qualifies (the check cannot run inside the application's transaction: a
// missing table would abort it).
func (t *Tx) checkPostgres(ctx context.Context, b *Branch) {
	if b.rm.dialect.Driver() != rm.Postgres || b.rm.neverCP {
		return
	}
	t.mu.Lock()
	decideAt := t.opts.DecideAt
	t.mu.Unlock()
	if decideAt != DecideAtCoordinator {
		t.c.qualifies(ctx, b.rm, b.reader())
	}
}

// commitPoint picks the commit point among the writers, or nil when the
// coordinator decides. A commit point chosen at a MySQL branch's begin (a
// plain branch, or a pinned PostgreSQL branch that XA branches are named
// with) is kept, whether it wrote or not.
func (t *Tx) commitPoint(writers []*Branch) *Branch {
	t.mu.Lock()
	cp, unnamed, decideAt := t.cp, t.unnamedXA, t.opts.DecideAt
	t.mu.Unlock()
	if cp != nil {
		return cp
	}
	if decideAt == DecideAtCoordinator || unnamed {
		return nil
	}
	var best *Branch
	for _, w := range writers {
		if w.rm.dialect.Driver() != rm.Postgres {
			return nil // an XA branch named with no commit point
		}
		if w.rm.cp.known() && !w.rm.neverCP && (best == nil || w.rm.cpStrength > best.rm.cpStrength) {
			best = w
		}
	}
	if best == nil && decideAt == DecideAtRM {
		t.c.warn("decide-at rm: no writer of the transaction can be its commit point; the coordinator decides", "gtrid", t.gtrid.String())
	}
	return best
}

// commitAtRM decides at cp: prepare the other writers, then record COMMIT
// and commit at cp in one round trip, then commit the prepared branches.
func (t *Tx) commitAtRM(ctx context.Context, all, writers []*Branch, cp *Branch, commitReaders func() error) (Result, txState, error) {
	res := Result{Path: PathCommitPoint, CommitPoint: cp.rm.name}
	if !slices.Contains(all, cp) {
		all = append(all, cp) // a pinned commit point that ran nothing yet
	}
	for _, w := range append([]*Branch{cp}, writers...) {
		if known, asked := t.c.coordinatorKnows(ctx, w.rm.name); asked && !known {
			t.abortAll(ctx, all)
			return res, txAborted, &AbortedError{GTRID: t.gtrid, Reason: fmt.Sprintf(
				"the coordinator does not know resource manager %q, so it could not recover this transaction's branches if this process died; nothing was prepared: "+
					"give the coordinator --rm %s=DRIVER:DSN (the name in client.Config.RMs)", w.rm.name, w.rm.name)}
		}
	}
	var prepared []*Branch
	for _, w := range writers {
		if w != cp && w.state != branchCommitted {
			w.id.CommitPoint = cp.rm.name // PostgreSQL: named at PREPARE; MySQL: named at XA START already
			prepared = append(prepared, w)
		}
	}
	if cp.state == branchIdle {
		// A pinned PostgreSQL commit point that ran nothing begins before
		// any branch prepares, so that its transaction's start (now(), the
		// age check's origin) comes before any recoverer could see a
		// prepared branch of it.
		if err := cp.execSteps(ctx, waits.RMRoundtrip, []string{"BEGIN"}); err != nil {
			t.abortAll(ctx, all)
			return res, txAborted, &AbortedError{GTRID: t.gtrid, Reason: "could not begin the commit point " + cp.rm.name, Cause: err}
		}
		cp.state = branchActive
	}
	if err := t.prepareAll(ctx, prepared, commitReaders); err != nil {
		t.abortAll(ctx, all)
		return res, txAborted, &AbortedError{GTRID: t.gtrid, Reason: "phase 1 failed", Cause: err}
	}
	_ = failpoint.Inject("before-commit-point") // kill: every other branch prepared, no decision anywhere
	var forget []xid.GTRID
	if cp.rm.db == nil {
		forget = cp.rm.cp.takeForget() // no pool: carried by this commit
	}
	err := cp.commitDecision(ctx, decision.CommitStatements(cp.rm.dialect.Driver(), decision.Commit{GTRID: t.gtrid, MaxAge: t.c.cfg.MaxTxnAge, Forget: forget}))
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
				reason += t.c.checkForeignCommit(ctx, cp.rm, t.gtrid)
			}
		}
		t.abortAll(ctx, all)
		return res, txAborted, &AbortedError{GTRID: t.gtrid, Reason: reason, Cause: err}
	default:
		// The call broke, or MySQL/MariaDB answered an error other than a
		// refusal of the decision (which statement failed — the COMMIT
		// itself? — is not known): the COMMIT may or may not have
		// happened. End the session (an uncommitted decision row goes with
		// it), then take the key.
		cp.rm.cp.giveBack(forget)
		cp.releaseSession()
		cp.state = branchHandedOver
		o, rerr := t.c.resolveByKey(ctx, cp.rm, t.gtrid)
		if rerr != nil {
			t.releaseOwn(prepared)
			return res, txUnknown, &OutcomeUnknownError{GTRID: t.gtrid, Cause: fmt.Errorf(
				"rm %q (the commit point): commit: %w; learning the outcome by taking the decision key failed too: %v; nothing was rolled back: "+
					"the prepared branches are settled by the coordinator's scan from %s's decision table", cp.rm.name, err, rerr, cp.rm.name)}
		}
		if o == decision.Aborted {
			t.settlePrepared(ctx, prepared, false)
			return res, txAborted, &AbortedError{GTRID: t.gtrid, Reason: "the commit point's connection broke during its commit, and taking the decision key found no decision (its COMMIT never happened; now none can): aborted", Cause: err}
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
		go t.c.commitInBackground(t.gtrid, cp.rm, prepared)
		return res, txCommitted, nil
	}
	if !t.settlePrepared(ctx, prepared, true) {
		res.Phase2Pending = true
	} else {
		t.c.forgetLater(cp.rm, t.gtrid)
	}
	return res, txCommitted, nil
}

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
// once all are.
func (c *Client) commitInBackground(g xid.GTRID, cp *rmInfo, bs []*Branch) {
	defer c.background.Release()
	ctx, cancel := context.WithTimeout(c.closing, 10*time.Second)
	defer cancel()
	ids := make([]xid.Branch, len(bs))
	for i, b := range bs {
		ids[i] = b.id
	}
	err := parallel(len(bs), func(i int) error {
		b := bs[i]
		start := time.Now()
		_, err := b.rm.db.ExecContext(ctx, b.rm.dialect.CommitPrepared(ids[i]))
		c.waits.Since(waits.RMCommitPrepared, start)
		if err != nil && !b.rm.dialect.IsNotFound(err) {
			return fmt.Errorf("rm %q: %w", b.rm.name, err)
		}
		return nil
	})
	if err != nil {
		c.warn("commit of a decided transaction's prepared branches failed; the coordinator's scan commits them from the commit point's decision row",
			"gtrid", g.String(), "commit_point", cp.name, "error", err)
		return
	}
	c.forgetLater(cp, g)
}

// prepareAll runs phase 1 on every branch of ws in parallel, and
// commitReaders beside it. A branch whose prepare failed is left active
// (the database said no) or in doubt (the call broke).
func (t *Tx) prepareAll(ctx context.Context, ws []*Branch, commitReaders func() error) error {
	return parallel(len(ws)+1, func(i int) error {
		if i == len(ws) {
			return commitReaders()
		}
		b := ws[i]
		err := failpoint.Inject("before-prepare")
		if err == nil {
			err = b.prepare(ctx)
		}
		if err == nil {
			_ = failpoint.Inject("after-prepare")
		}
		if err != nil {
			if serverSaidNo(err) {
				b.state = branchActive
			} else {
				b.state = branchInDoubt
			}
			return fmt.Errorf("rm %q: prepare: %w", b.rm.name, err)
		}
		b.state = branchPrepared
		return nil
	})
}

// settlePrepared commits (or rolls back) prepared branches on their own
// connections, in parallel, after the decision. A branch it cannot settle
// is left to a recoverer (a session-bound one has its session closed so
// that others can). It reports whether all were settled.
func (t *Tx) settlePrepared(ctx context.Context, bs []*Branch, commit bool) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err := parallel(len(bs), func(i int) error {
		b := bs[i]
		stmt, ev := b.rm.dialect.RollbackPrepared(b.id), waits.RMRollbackPrepared
		if commit {
			stmt, ev = b.rm.dialect.CommitPrepared(b.id), waits.RMCommitPrepared
		}
		if err := b.execSteps(ctx, ev, []string{stmt}); err != nil && !b.rm.dialect.IsNotFound(err) {
			if b.rm.dialect.SessionBound() {
				b.releaseSession()
			}
			b.state = branchHandedOver
			return err
		}
		if commit {
			b.state = branchCommitted
		} else {
			b.state = branchRolledBack
		}
		return nil
	})
	return err == nil
}

// checkForeignCommit looks at the row that refused a commit point's
// decision as a duplicate. Only this client writes 'C' for its gtrid, and it
// did not commit, so the row should be a recoverer's 'A'. A 'C' means
// someone else wrote the decision table: an integrity alarm (logged, and
// returned to be added to the error). This transaction still rolls back
// everywhere — its commit point did not commit — so nothing of it is
// committed; the coordinator's scan finds no prepared branch to settle by
// the foreign row.
func (c *Client) checkForeignCommit(ctx context.Context, info *rmInfo, g xid.GTRID) string {
	if info.db == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	o, found, err := decision.Lookup(ctx, info.db, g, xid.Owner{})
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

// resolveByKey learns the outcome of g from the commit point's decision
// table by taking the key (decision.Resolve), retrying while the commit
// point's transaction is still open, within Config.DecisionTimeout.
func (c *Client) resolveByKey(ctx context.Context, info *rmInfo, g xid.GTRID) (decision.Outcome, error) {
	if info.db == nil {
		return 0, fmt.Errorf("no client.RM.DB for %q to take the decision key with", info.name)
	}
	ctx, cancel := c.decisionContext(context.WithoutCancel(ctx))
	defer cancel()
	for {
		start := time.Now()
		o, err := decision.Resolve(ctx, info.db, info.dialect.Driver(), g, xid.Owner{}, 2*time.Second)
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

// forgetLater queues g's decision row for deletion. With the RM's pool, a
// full batch is deleted in the background, in its own autocommit statement:
// off the commit path, and holding no lock inside an application's
// transaction (a DELETE carried by the commit point's transaction cost
// about a fifth of the throughput at 32 threads on MariaDB). Without a pool
// the next commit on the RM carries the batch.
func (c *Client) forgetLater(info *rmInfo, g xid.GTRID) {
	s := &info.cp
	s.addForget(g)
	if info.db == nil {
		return
	}
	s.mu.Lock()
	start := !s.forgetting && len(s.forget) >= forgetBatch
	if start {
		s.forgetting = true
	}
	s.mu.Unlock()
	if start {
		go c.forgetRows(info)
	}
}

// forgetRows deletes full batches of decided rows through info's pool
// until fewer than a batch are pending. A failed delete gives the batch
// back (a later one tries again; the coordinator's sweep is the backstop).
func (c *Client) forgetRows(info *rmInfo) {
	s := &info.cp
	defer func() {
		s.mu.Lock()
		s.forgetting = false
		s.mu.Unlock()
	}()
	for {
		gs := s.takeForget()
		if gs == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := decision.Forget(ctx, info.db, info.dialect.Driver(), gs)
		cancel()
		if err != nil {
			s.giveBack(gs)
			c.warn("deleting decided rows from the decision table failed; will try again with the next batch", "rm", info.name, "rows", len(gs), "error", err)
			return
		}
	}
}

func (s *cpState) takeForget() []xid.GTRID {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.forget) < forgetBatch {
		return nil
	}
	n := min(len(s.forget), forgetMax)
	out := append([]xid.GTRID(nil), s.forget[:n]...)
	s.forget = s.forget[n:]
	return out
}

func (s *cpState) giveBack(gs []xid.GTRID) {
	if len(gs) == 0 {
		return
	}
	s.mu.Lock()
	s.forget = append(s.forget, gs...)
	s.mu.Unlock()
}

func (s *cpState) addForget(g xid.GTRID) {
	s.mu.Lock()
	if len(s.forget) >= forgetKeep {
		s.forget = s.forget[1:]
	}
	s.forget = append(s.forget, g)
	s.mu.Unlock()
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

// pgStatementFailed reports whether err is PostgreSQL's ERROR for a
// statement of the commit point's round trip: the simple protocol skips the
// statements after it and a failed COMMIT rolls back, so the transaction did
// not commit. A FATAL or PANIC is not: it ends the session, and can come
// after the COMMIT ran (a backend told to terminate once its commit is done).
func pgStatementFailed(err error) bool {
	var e *pgconn.PgError
	return errors.As(err, &e) && e.Severity == "ERROR" && (e.SeverityUnlocalized == "" || e.SeverityUnlocalized == "ERROR")
}

// isRefused reports whether the commit point's database refused the
// decision (decision.Refused): its transaction did not commit.
func isRefused(err error) bool {
	_, ok := decision.Refused(err)
	return ok
}
