package client

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/waits"
)

// PgxBranch is a branch on a PostgreSQL resource manager that runs on the
// application's own pgx connection (pgx v5, no database/sql in between).
// It does everything a Branch does — begin on the first statement, the
// read-only check, prepare, one-phase commit, the commit point, rollback,
// the wait events — with pgx's types: Exec, Query and QueryRow take and
// return what *pgx.Conn's do.
//
// The first statement carries the branch's BEGIN with it through the
// PostgreSQL pipeline (one pgx batch: one round trip), for Query and
// QueryRow as well as Exec. Every statement of the branch must go through
// it, not through the connection directly.
//
// The connection is the application's: the SDK never releases it to a
// pool. It closes it only where database/sql's path discards its
// connection (a commit point whose commit broke; see Branch): a closed
// *pgxpool.Conn is destroyed, not reused, by its Release.
//
// A PgxBranch is not safe for concurrent use, like the connection beneath it.
type PgxBranch struct{ b *Branch }

// BranchPgx enlists conn as the branch of tx on the named PostgreSQL
// resource manager. A second call for the same RM returns the same branch
// (one branch per RM per global transaction); conn must then be the same
// connection. Nothing is sent to the database until the branch's first
// statement. conn must be outside any transaction and stay with this
// transaction until Commit or Rollback returns.
func (t *Tx) BranchPgx(ctx context.Context, rmName string, conn *pgx.Conn) (*PgxBranch, error) {
	info, err := t.c.rmNamed(rmName)
	if err != nil {
		return nil, err
	}
	if conn == nil {
		return nil, fmt.Errorf("client: BranchPgx(%q): conn is nil", rmName)
	}
	if info.dialect.Driver() != rm.Postgres {
		return nil, fmt.Errorf("client: BranchPgx(%q): the resource manager's driver is %s; pgx speaks only PostgreSQL: use Branch with a *sql.Conn", rmName, info.dialect.Driver())
	}
	b, err := t.enlist(info, nil, conn)
	if err != nil {
		return nil, err
	}
	return &PgxBranch{b}, nil
}

// BranchPgxPool is BranchPgx for a connection acquired from a
// *pgxpool.Pool. Release it to the pool only after Commit or Rollback.
func (t *Tx) BranchPgxPool(ctx context.Context, rmName string, conn *pgxpool.Conn) (*PgxBranch, error) {
	if conn == nil {
		return nil, fmt.Errorf("client: BranchPgxPool(%q): conn is nil", rmName)
	}
	return t.BranchPgx(ctx, rmName, conn.Conn())
}

// RM returns the name of the branch's resource manager.
func (p *PgxBranch) RM() string { return p.b.rm.name }

// Exec runs a statement that may write (the branch counts as a writer).
// The branch's first statement carries BEGIN in the same round trip.
func (p *PgxBranch) Exec(ctx context.Context, query string, args ...any) (pgconn.CommandTag, error) {
	b := p.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.admit(ctx, query); err != nil {
		return pgconn.CommandTag{}, err
	}
	b.wrote = true
	if b.state == branchIdle {
		tag, err := b.pipeBeginExec(ctx, b.pgc, b.beginSQL()[0], query, args)
		if err != nil {
			return tag, b.fail(fmt.Errorf("rm %q: begin and first statement: %w", b.rm.name, err))
		}
		return tag, b.checkAfter(query)
	}
	b.trips++
	start := time.Now()
	tag, err := b.pgc.Exec(ctx, query, args...)
	b.waited(waits.RMRoundtrip, start)
	if err != nil {
		return tag, b.fail(fmt.Errorf("rm %q: %w", b.rm.name, err))
	}
	return tag, b.checkAfter(query)
}

// Query runs a statement that returns rows. A branch that only ran
// queries is asked at Commit whether it wrote; if it did not, it commits
// locally and stays out of the two-phase protocol. The rows must be closed
// (or read to the end) before the branch's next statement, as with pgx.
// The branch's first statement carries BEGIN in the same round trip.
func (p *PgxBranch) Query(ctx context.Context, query string, args ...any) (pgx.Rows, error) {
	b := p.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.admit(ctx, query); err != nil {
		return nil, err
	}
	b.trips++
	start := time.Now()
	defer b.waited(waits.RMRoundtrip, start)
	if b.state != branchIdle {
		rows, err := b.pgc.Query(ctx, query, args...)
		if err != nil {
			return nil, b.fail(fmt.Errorf("rm %q: %w", b.rm.name, err))
		}
		return rows, nil
	}
	br, err := b.pipeBegin(ctx, query, args)
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		rows.Close()
		_ = br.Close()
		return nil, b.fail(fmt.Errorf("rm %q: begin and first statement: %w", b.rm.name, err))
	}
	return &batchRows{Rows: rows, br: br}, nil
}

// QueryRow runs a query expected to return at most one row. Errors are
// deferred to the row's Scan, as with pgx; Scan must be called before the
// branch's next statement. The branch's first statement carries BEGIN in
// the same round trip.
func (p *PgxBranch) QueryRow(ctx context.Context, query string, args ...any) pgx.Row {
	rows, err := p.Query(ctx, query, args...)
	if err != nil {
		return errRow{err}
	}
	return rowOf{rows}
}

// pipeBegin queues the branch's BEGIN and query in one batch and sends
// them (one round trip), and reads BEGIN's answer. The caller reads the
// query's result, then closes the batch. The caller holds b.mu and counted
// the round trip.
func (b *Branch) pipeBegin(ctx context.Context, query string, args []any) (pgx.BatchResults, error) {
	var batch pgx.Batch
	batch.Queue(b.beginSQL()[0])
	batch.Queue(query, args...)
	br := b.pgc.SendBatch(ctx, &batch)
	b.state = branchActive // BEGIN went out: rollback must end the session's transaction
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return nil, b.fail(fmt.Errorf("rm %q: begin and first statement: %w", b.rm.name, err))
	}
	return br, nil
}

// batchRows are a query's rows read from the batch that began the branch:
// closing them closes the batch, whose error they then report.
type batchRows struct {
	pgx.Rows
	br     pgx.BatchResults
	closed bool
	err    error
}

func (r *batchRows) Close() {
	if r.closed {
		return
	}
	r.closed = true
	r.Rows.Close()
	if err := r.br.Close(); err != nil && r.Rows.Err() == nil {
		r.err = err
	}
}

func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

// rowOf is pgx's QueryRow over rows: Scan reads the first row and closes them.
type rowOf struct{ rows pgx.Rows }

func (r rowOf) Scan(dest ...any) error {
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}

// errRow is a row whose query could not run.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// closePgx closes a pgx connection, waiting at most a second for the
// goodbye to reach the server (the socket is closed either way).
func closePgx(c *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = c.Close(ctx)
}
