package client

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
)

// A one-phase COMMIT answered by an error that ends the session is not a
// refusal: PostgreSQL's FATAL (57P01, a backend told to terminate once its
// commit is done) and MariaDB's "connection was killed" or "query
// interrupted" can come after the commit ran. The outcome is unknown, and
// nothing is rolled back. An ordinary ERROR is a refusal: aborted.
func TestOnePhaseCommitEndedByTheSessionIsUnknown(t *testing.T) {
	for _, tc := range []struct {
		name, rm, driver string
		err              error
		want             error
	}{
		{"pg FATAL", "pg", "postgres", &pgconn.PgError{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command"}, ErrOutcomeUnknown},
		{"pg ERROR", "pg", "postgres", &pgconn.PgError{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: "23503", Message: "violates foreign key constraint"}, ErrAborted},
		{"maria killed", "maria", "mysql", &mysql.MySQLError{Number: 1927, Message: "Connection was killed"}, ErrOutcomeUnknown},
		{"maria interrupted", "maria", "mysql", &mysql.MySQLError{Number: 1317, Message: "Query execution was interrupted"}, ErrOutcomeUnknown},
		{"maria refused", "maria", "mysql", &mysql.MySQLError{Number: 1614, Message: "Transaction branch was rolled back: deadlock was detected"}, ErrAborted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, Config{RMs: []RM{{Name: "pg", Driver: "postgres"}, {Name: "maria", Driver: "mysql"}}})
			ctx := context.Background()
			tx := c.Begin()
			conn, db := fakeConnTo(t)
			b, err := tx.Branch(ctx, tc.rm, conn)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.ExecContext(ctx, "UPDATE t SET v = 1"); err != nil {
				t.Fatal(err)
			}
			commit := "COMMIT"
			if tc.driver == "mysql" {
				commit = "XA COMMIT " + xaID(tx.GTRID()) + " ONE PHASE"
			}
			db.mu.Lock()
			db.fail[commit] = tc.err
			db.mu.Unlock()
			_, err = tx.Commit(ctx)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Commit after %v = %v, want %v", tc.err, err, tc.want)
			}
			if tc.want == ErrOutcomeUnknown {
				for _, s := range db.log() {
					if strings.Contains(s, "ROLLBACK") {
						t.Errorf("SPLIT risk: %q sent after a one-phase commit that may have run", s)
					}
				}
			}
		})
	}
}
