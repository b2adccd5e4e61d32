package client

import (
	"database/sql"
	"errors"
	"fmt"
)

// Any error that reaches the application from a branch's statement dooms
// the transaction, whichever call returns it: ExecContext, QueryContext,
// and, later, a row's Scan or the rows' Next, Err and Close. On MariaDB an
// InnoDB deadlock rolls back the whole transaction: a session that carried
// on would run its next statements outside it, each committed at once. The
// rows and the row a Branch returns therefore note their errors on the
// branch (ErrBranchFailed from then on; Commit rolls back everywhere).

// Row is the result of Branch.QueryRowContext, as *sql.Row: errors are
// deferred to Scan. An error Scan returns (but sql.ErrNoRows) dooms the
// transaction.
type Row struct {
	row *sql.Row
	b   *Branch
	err error // the statement was not sent: admit or begin failed
}

// Scan copies the row's columns into dest, as (*sql.Row).Scan.
func (r *Row) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	err := r.row.Scan(dest...)
	r.b.noteReadErr(err)
	return err
}

// Err returns the error, if any, of running the query, as (*sql.Row).Err.
func (r *Row) Err() error {
	if r.err != nil {
		return r.err
	}
	err := r.row.Err()
	r.b.noteReadErr(err)
	return err
}

// Rows is the result of Branch.QueryContext: *sql.Rows (every method of
// it), with Next, NextResultSet, Scan, Err and Close noting an error on
// the branch, which dooms the transaction.
type Rows struct {
	*sql.Rows
	b *Branch
}

// Next prepares the next row, as (*sql.Rows).Next.
func (r *Rows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.b.noteReadErr(r.Rows.Err())
	return false
}

// NextResultSet prepares the next result set, as (*sql.Rows).NextResultSet.
func (r *Rows) NextResultSet() bool {
	if r.Rows.NextResultSet() {
		return true
	}
	r.b.noteReadErr(r.Rows.Err())
	return false
}

// Scan copies the current row's columns into dest, as (*sql.Rows).Scan.
func (r *Rows) Scan(dest ...any) error {
	err := r.Rows.Scan(dest...)
	r.b.noteReadErr(err)
	return err
}

// Err returns the error met while iterating, as (*sql.Rows).Err.
func (r *Rows) Err() error {
	err := r.Rows.Err()
	r.b.noteReadErr(err)
	return err
}

// Close closes the rows, as (*sql.Rows).Close.
func (r *Rows) Close() error {
	err := r.Rows.Close()
	r.b.noteReadErr(err)
	return err
}

// noteReadErr dooms the transaction for an error that reached the
// application from a row (sql.ErrNoRows is not one).
func (b *Branch) noteReadErr(err error) {
	if err == nil || errors.Is(err, sql.ErrNoRows) {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.lastErr == nil {
		_ = b.fail(fmt.Errorf("rm %q: reading a query's rows: %w", b.rm.name, err))
	}
}
