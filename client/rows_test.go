package client

import (
	"context"
	"errors"
	"testing"

	"github.com/go-sql-driver/mysql"
)

// An error that reaches the application only from a row (QueryRowContext's
// Scan, rows.Next/Err) dooms the transaction as ExecContext's does: the
// next statement is not sent, and Commit rolls back. sql.ErrNoRows does not.
func TestAnErrorReadFromRowsDoomsTheTransaction(t *testing.T) {
	deadlock := &mysql.MySQLError{Number: 1213, Message: "Deadlock found when trying to get lock"}
	for _, how := range []string{"QueryRowContext", "QueryContext"} {
		c := newClient(t, Config{})
		ctx := context.Background()
		tx := c.Begin()
		conn, db := fakeConnTo(t)
		db.rowsFail["SELECT late"] = deadlock
		b, _ := tx.Branch(ctx, "maria", conn)
		if _, err := b.ExecContext(ctx, "INSERT ok"); err != nil {
			t.Fatal(err)
		}
		if err := b.QueryRowContext(ctx, "SELECT none").Scan(new(int)); err != nil {
			t.Fatalf("%s: a row: %v", how, err)
		}
		var err error
		if how == "QueryRowContext" {
			err = b.QueryRowContext(ctx, "SELECT late").Scan(new(int))
		} else {
			rows, qerr := b.QueryContext(ctx, "SELECT late")
			if qerr != nil {
				t.Fatal(qerr)
			}
			for rows.Next() {
			}
			err = rows.Err()
			rows.Close()
		}
		if !errors.Is(err, deadlock) {
			t.Fatalf("%s: read %v, want the deadlock", how, err)
		}
		if _, err := b.ExecContext(ctx, "INSERT after"); !errors.Is(err, ErrBranchFailed) {
			t.Errorf("%s: ExecContext after the error read from rows: %v, want ErrBranchFailed", how, err)
		}
		if _, err := tx.Commit(ctx); !errors.Is(err, ErrAborted) || !errors.Is(err, deadlock) {
			t.Errorf("%s: Commit: %v, want ErrAborted caused by the deadlock", how, err)
		}
		for _, s := range db.log() {
			if s == "INSERT after" {
				t.Errorf("%s: the statement after the error was sent", how)
			}
		}
	}
}
