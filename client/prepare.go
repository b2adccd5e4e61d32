package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tandem-tx/tandem/internal/failpoint"
	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/waits"
)

// Phase 1, shared by the commit point's path and the coordinator's: every
// writer but the commit point prepares, in parallel.

// prepareAll runs phase 1 on every branch of ws in parallel, and
// commitReaders (if not nil) beside it; the last of them runs on the
// calling goroutine. A branch whose prepare failed is left active (the
// database said no) or in doubt (the call broke).
func (t *Tx) prepareAll(ctx context.Context, ws []*Branch, commitReaders func() error) error {
	n := len(ws)
	if commitReaders != nil {
		n++
	}
	return parallel(n, func(i int) error {
		if i == len(ws) {
			return commitReaders()
		}
		b := ws[i]
		pctx, sp := t.startSpan(ctx, SpanPrepare, b.rm.name)
		err := failpoint.Inject("before-prepare")
		if err == nil {
			err = b.prepare(pctx)
		}
		endSpan(sp, err)
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

// prepare runs phase 1. On PostgreSQL it checks the command tag: a PREPARE
// TRANSACTION inside a failed transaction rolls back instead of preparing.
func (b *Branch) prepare(ctx context.Context) error {
	stmts := b.rm.dialect.Prepare(b.id)
	if b.rm.dialect.Driver() == rm.Postgres {
		var tag pgconn.CommandTag
		piped, err := b.withPgx(func(c *pgx.Conn) error {
			b.trips++
			start := time.Now()
			var e error
			tag, e = c.Exec(ctx, stmts[0])
			b.waited(waits.RMPrepare, start)
			return e
		})
		if piped {
			if err != nil {
				return err
			}
			if tag.String() != "PREPARE TRANSACTION" {
				return fmt.Errorf("%w: PREPARE TRANSACTION answered %q: the transaction had failed", errPrepareRolledBack, tag.String())
			}
			return nil
		}
	}
	return b.execSteps(ctx, waits.RMPrepare, stmts)
}

// errPrepareRolledBack: PostgreSQL answered PREPARE TRANSACTION with ROLLBACK.
var errPrepareRolledBack = errors.New("prepare rolled back")

// serverSaidNo reports whether the database itself answered err (so the
// statement's effect is known), as opposed to a broken connection.
func serverSaidNo(err error) bool {
	var pgErr *pgconn.PgError
	var myErr *mysql.MySQLError
	return errors.As(err, &pgErr) || errors.As(err, &myErr) || errors.Is(err, errPrepareRolledBack)
}
