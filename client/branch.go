package client

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/tandem-tx/tandem/internal/decision"
	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/waits"
	"github.com/tandem-tx/tandem/xid"
)

// branchState is where one branch is in its life. Transitions only move forward.
type branchState uint8

const (
	branchIdle       branchState = iota // enlisted; nothing sent to the database yet
	branchActive                        // begun on the database
	branchPrepared                      // phase 1 done: the database holds it prepared
	branchInDoubt                       // the prepare was sent and its outcome is unknown
	branchCommitted                     // committed locally (read-only or one-phase)
	branchRolledBack                    // rolled back
	branchHandedOver                    // prepared and handed to the coordinator for phase 2
)

// Branch is the part of a global transaction on one resource manager. It runs
// on the application's own connection; every statement of the branch must go
// through it (not through the *sql.Conn directly) so that the branch is begun
// on the first statement, in the same round trip where the driver allows.
//
// A Branch is not safe for concurrent use, like the connection beneath it.
type Branch struct {
	tx   *Tx
	rm   *rmInfo
	conn *sql.Conn // the application's connection (Tx.Branch), or nil
	// pgc is the application's pgx connection (Tx.BranchPgx), or nil:
	// exactly one of conn and pgc is set.
	pgc   *pgx.Conn
	id    xid.Branch
	mu    sync.Mutex
	state branchState
	wrote bool // ran ExecContext: counts as a writer
	// selfCP: the transaction's commit point on MySQL/MariaDB, its own XA
	// branch (xid.CommitPointSelf), begun with the decision's clock noted
	// (decision.BeginStatements) and decided by decision.CommitStatements:
	// it never prepares.
	selfCP bool
	// clientSettles: the coordinator path's Commit named this branch
	// client_settles: the client commits or rolls it back itself after the
	// decision (always so for a session-bound one).
	clientSettles bool
	formChosen    bool // chooseBegin ran
	trips         int  // round trips to this RM made for this branch
	lastErr       error
}

// RM returns the name of the branch's resource manager.
func (b *Branch) RM() string { return b.rm.name }

// ExecContext runs a statement that may write. The first statement of the
// branch carries the begin with it in one round trip (PostgreSQL through pgx;
// MySQL/MariaDB when the RM is configured with MultiStatements).
func (b *Branch) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.admit(ctx, query); err != nil {
		return nil, err
	}
	b.wrote = true
	if b.state == branchIdle {
		res, err := b.beginWithExec(ctx, query, args)
		if err != nil {
			return nil, b.fail(fmt.Errorf("rm %q: begin and first statement: %w", b.rm.name, err))
		}
		return res, b.checkAfter(query)
	}
	b.trips++
	start := time.Now()
	res, err := b.conn.ExecContext(ctx, query, args...)
	b.waited(waits.RMRoundtrip, start)
	if err != nil {
		return nil, b.fail(fmt.Errorf("rm %q: %w", b.rm.name, err))
	}
	return res, b.checkAfter(query)
}

// QueryContext runs a statement that returns rows. A PostgreSQL branch that
// only ran queries is checked at commit and, if it wrote nothing, committed
// locally and left out of the two-phase protocol. An error the rows return
// later (Next, Scan, Err, Close) dooms the transaction, as one from the
// query does (rows.go).
func (b *Branch) QueryContext(ctx context.Context, query string, args ...any) (*Rows, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.admit(ctx, query); err != nil {
		return nil, err
	}
	if err := b.beginAlone(ctx); err != nil {
		return nil, err
	}
	b.trips++
	start := time.Now()
	rows, err := b.conn.QueryContext(ctx, query, args...)
	b.waited(waits.RMRoundtrip, start)
	if err != nil {
		return nil, b.fail(fmt.Errorf("rm %q: %w", b.rm.name, err))
	}
	return &Rows{Rows: rows, b: b}, nil
}

// QueryRowContext runs a query expected to return at most one row. Errors are
// deferred to the returned row's Scan, as with database/sql; an error Scan
// returns (but sql.ErrNoRows) dooms the transaction (rows.go).
func (b *Branch) QueryRowContext(ctx context.Context, query string, args ...any) *Row {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.admit(ctx, query); err != nil {
		return &Row{b: b, err: err}
	}
	if err := b.beginAlone(ctx); err != nil {
		return &Row{b: b, err: err}
	}
	b.trips++
	start := time.Now()
	row := b.conn.QueryRowContext(ctx, query, args...) // database/sql runs the query here; Scan only reads
	b.waited(waits.RMRoundtrip, start)
	return &Row{row: row, b: b}
}

func (b *Branch) usable() error {
	if b.lastErr != nil {
		return fmt.Errorf("%w: an earlier statement failed: %v", ErrBranchFailed, b.lastErr)
	}
	if b.state > branchActive {
		return fmt.Errorf("%w: the transaction is finishing or finished", ErrTxDone)
	}
	return nil
}

// admit checks that the branch may run query: usable, still inside its
// transaction (PostgreSQL: pgcontrol.go), and query's text does not end the
// transaction (pgcontrol.go, implicit.go).
func (b *Branch) admit(ctx context.Context, query string) error {
	if err := b.usable(); err != nil {
		return err
	}
	if err := b.pgStatus(""); err != nil {
		return b.fail(err)
	}
	if b.state == branchIdle {
		b.chooseBegin(ctx)
	}
	if err := b.checkText(query); err != nil {
		return b.fail(err)
	}
	return nil
}

// checkAfter checks, after query ran without error, that the branch is
// still inside its transaction (PostgreSQL: pgcontrol.go); if not, the
// transaction is doomed.
func (b *Branch) checkAfter(query string) error {
	if err := b.pgStatus(query); err != nil {
		return b.fail(err)
	}
	return nil
}

// fail records that the branch can no longer commit: the transaction will roll back.
func (b *Branch) fail(err error) error {
	b.lastErr = err
	return err
}

// beginAlone begins the branch with a round trip of its own (used before a
// query, whose rows cannot be pipelined behind the begin through database/sql).
func (b *Branch) beginAlone(ctx context.Context) error {
	if b.state != branchIdle {
		return nil
	}
	b.chooseBegin(ctx)
	if err := b.execSteps(ctx, waits.RMRoundtrip, b.beginSQL()); err != nil {
		return b.fail(fmt.Errorf("rm %q: begin: %w", b.rm.name, err))
	}
	b.state = branchActive
	return nil
}

// chooseBegin settles, before the branch's begin is sent, how it begins
// (cp_choice.go): as the transaction's commit point or as an XA branch
// named with it. At most once per branch.
func (b *Branch) chooseBegin(ctx context.Context) {
	if b.formChosen {
		return
	}
	b.formChosen = true
	b.tx.beginForm(ctx, b)
	b.tx.checkPostgres(ctx, b)
	b.tx.mu.Lock()
	decideAt := b.tx.opts.DecideAt
	b.tx.mu.Unlock()
	if decideAt != DecideAtCoordinator {
		// A participant under a commit point is listed in the decision row
		// by its decision table's id: read it (once) while the connection
		// is outside any transaction. A failure is met again at Commit.
		_, _ = b.tx.c.tableID(ctx, b.rm, b.reader())
	}
}

// beginSQL is the branch's begin, as statements to send in order.
func (b *Branch) beginSQL() []string {
	if b.selfCP {
		return decision.BeginStatements(b.rm.dialect.Driver(), b.id.MySQLXID())
	}
	return []string{b.rm.dialect.Begin(b.id)}
}

// onePhaseSQL commits the branch without a prepare (MySQL/MariaDB: XA END;
// XA COMMIT … ONE PHASE, the commit point's own branch included).
func (b *Branch) onePhaseSQL() []string {
	return b.rm.dialect.CommitOnePhase(b.id)
}

// rollbackActiveSQL rolls back the branch before a prepare.
func (b *Branch) rollbackActiveSQL() []string {
	return b.rm.dialect.RollbackActive(b.id)
}

// beginWithExec sends the begin and the first statement in one round trip.
func (b *Branch) beginWithExec(ctx context.Context, query string, args []any) (sql.Result, error) {
	b.chooseBegin(ctx)
	begin := strings.Join(b.beginSQL(), "; ")
	switch {
	case b.rm.dialect.Driver() == rm.Postgres:
		var res sql.Result
		piped, err := b.withPgx(func(c *pgx.Conn) error {
			tag, err := b.pipeBeginExec(ctx, c, begin, query, args)
			res = tagResult(tag)
			return err
		})
		if piped {
			return res, err
		}
	case b.rm.multiStatements:
		b.trips++
		b.state = branchActive // the begin runs first; if the statement fails the branch is active and rolled back
		start := time.Now()
		res, err := b.conn.ExecContext(ctx, begin+"; "+query, args...)
		b.waited(waits.RMRoundtrip, start)
		return res, err
	}
	if err := b.beginAlone(ctx); err != nil {
		return nil, err
	}
	b.trips++
	start := time.Now()
	res, err := b.conn.ExecContext(ctx, query, args...)
	b.waited(waits.RMRoundtrip, start)
	return res, err
}

// pipeBeginExec sends the begin and the first statement through the
// PostgreSQL pipeline (a pgx batch: one Sync, one round trip) and returns
// the statement's command tag.
func (b *Branch) pipeBeginExec(ctx context.Context, c *pgx.Conn, begin, query string, args []any) (pgconn.CommandTag, error) {
	b.trips++
	start := time.Now()
	defer b.waited(waits.RMRoundtrip, start)
	var batch pgx.Batch
	batch.Queue(begin)
	batch.Queue(query, args...)
	br := c.SendBatch(ctx, &batch)
	// BEGIN went out: even if the statement failed, the session is inside
	// a (failed) transaction that rollback must end.
	b.state = branchActive
	_, err := br.Exec()
	var tag pgconn.CommandTag
	if err == nil {
		tag, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

// withPgx runs fn on the branch's pgx connection: its own (BranchPgx), or
// the one under its database/sql connection. ok is false when there is none
// (a database/sql connection of another PostgreSQL driver).
func (b *Branch) withPgx(fn func(*pgx.Conn) error) (ok bool, err error) {
	if b.pgc != nil {
		return true, fn(b.pgc)
	}
	rawErr := b.conn.Raw(func(dc any) error {
		sc, isPgx := dc.(*stdlib.Conn)
		if !isPgx {
			return errNotPgx
		}
		ok = true
		return fn(sc.Conn())
	})
	if errors.Is(rawErr, errNotPgx) {
		return false, nil
	}
	return ok, rawErr
}

var errNotPgx = errors.New("not a pgx connection")

type tagResult pgconn.CommandTag

func (r tagResult) LastInsertId() (int64, error) {
	return 0, errors.New("client: LastInsertId is not supported by PostgreSQL; use RETURNING")
}
func (r tagResult) RowsAffected() (int64, error) { return pgconn.CommandTag(r).RowsAffected(), nil }

// execSteps runs statements in order on the branch's connection, in one round
// trip when the RM allows several statements at once. Each round trip is
// recorded as wait event ev.
func (b *Branch) execSteps(ctx context.Context, ev waits.Event, stmts []string) error {
	if len(stmts) > 1 && b.rm.multiStatements {
		b.trips++
		start := time.Now()
		err := b.exec(ctx, strings.Join(stmts, "; "))
		b.waited(ev, start)
		return err
	}
	for _, s := range stmts {
		b.trips++
		start := time.Now()
		err := b.exec(ctx, s)
		b.waited(ev, start)
		if err != nil {
			return err
		}
	}
	return nil
}

// exec runs one statement on the branch's connection, without arguments
// (PostgreSQL: the simple protocol, which runs several joined statements).
func (b *Branch) exec(ctx context.Context, query string) error {
	if b.pgc != nil {
		_, err := b.pgc.Exec(ctx, query)
		return err
	}
	_, err := b.conn.ExecContext(ctx, query)
	return err
}

// queryRow reads one row on the branch's connection into dest.
func (b *Branch) queryRow(ctx context.Context, query string, dest ...any) error {
	if b.pgc != nil {
		return b.pgc.QueryRow(ctx, query).Scan(dest...)
	}
	return b.conn.QueryRowContext(ctx, query).Scan(dest...)
}

// reader is the branch's connection as the commit point's checks read it.
func (b *Branch) reader() rowReader {
	if b.pgc != nil {
		return pgxReader{b.pgc}
	}
	return sqlReader{b.conn}
}

// enlist returns t's branch on info, making it on conn or pgc (exactly one
// is set) when there is none; an existing branch must be on the same
// connection (one branch per RM per global transaction).
func (t *Tx) enlist(info *rmInfo, conn *sql.Conn, pgc *pgx.Conn) (*Branch, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.state != txActive {
		return nil, ErrTxDone
	}
	for _, b := range t.branches {
		if b.rm == info {
			if b.conn != conn || b.pgc != pgc {
				return nil, fmt.Errorf("client: resource manager %q already has a branch in transaction %s on another connection; reuse it (one branch per RM)", info.name, t.gtrid)
			}
			return b, nil
		}
	}
	b := &Branch{tx: t, rm: info, conn: conn, pgc: pgc, id: xid.Branch{GTRID: t.gtrid, RM: info.name}}
	t.branches = append(t.branches, b)
	return b, nil
}

// rmNamed returns the declared RM called name.
func (c *Client) rmNamed(name string) (*rmInfo, error) {
	info, ok := c.rms[name]
	if !ok {
		return nil, fmt.Errorf("%w %q: declare it in client.Config.RMs", ErrUnknownRM, name)
	}
	return info, nil
}

// waited records one wait of the branch since start, in the client's
// registry and in the transaction's trace if it has one.
func (b *Branch) waited(e waits.Event, start time.Time) {
	d := b.tx.c.waits.Since(e, start)
	b.tx.trace.Add(waits.SideClient, e, b.rm.name, start, d)
}

// releaseSession closes the branch's connection (database/sql discards it).
// A session-bound prepared branch is then detached and any connection, the
// coordinator's included, can settle it. The application's *sql.Conn is
// closed by this: later calls on it return sql.ErrConnDone.
func (b *Branch) releaseSession() {
	if b.pgc != nil {
		closePgx(b.pgc)
		return
	}
	_ = b.conn.Raw(func(any) error { return driver.ErrBadConn })
}

// readOnly asks the database whether an active branch wrote nothing. It
// answers false when the dialect cannot tell (the branch counts as a writer).
func (b *Branch) readOnly(ctx context.Context) (bool, error) {
	q := b.rm.dialect.ReadOnlyQuery()
	if q == "" {
		return false, nil
	}
	b.trips++
	start := time.Now()
	var ro bool
	err := b.queryRow(ctx, q, &ro)
	b.waited(waits.RMRoundtrip, start)
	if err != nil {
		return false, err
	}
	return ro, nil
}
