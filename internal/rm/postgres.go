package rm

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/tandem-tx/tandem/xid"
)

// postgresDialect speaks PostgreSQL's two-phase commit: a branch is an ordinary
// transaction (BEGIN) that PREPARE TRANSACTION 'gid' turns into a prepared
// transaction, settled later by COMMIT PREPARED / ROLLBACK PREPARED from any
// session of the same role (or a superuser). The server needs
// max_prepared_transactions > 0.
type postgresDialect struct{}

func (postgresDialect) Driver() Driver        { return Postgres }
func (postgresDialect) SQLDriverName() string { return "pgx" }
func (postgresDialect) Begin(xid.Branch) string {
	return "BEGIN"
}
func (postgresDialect) Prepare(b xid.Branch) []string {
	return []string{"PREPARE TRANSACTION '" + b.PostgresGID() + "'"}
}
func (postgresDialect) CommitOnePhase(xid.Branch) []string { return []string{"COMMIT"} }
func (postgresDialect) RollbackActive(xid.Branch) []string { return []string{"ROLLBACK"} }
func (postgresDialect) CommitPrepared(b xid.Branch) string {
	return "COMMIT PREPARED '" + b.PostgresGID() + "'"
}
func (postgresDialect) RollbackPrepared(b xid.Branch) string {
	return "ROLLBACK PREPARED '" + b.PostgresGID() + "'"
}
func (postgresDialect) ReadOnlyQuery() string {
	return "SELECT txid_current_if_assigned() IS NULL"
}

// IsNotFound: COMMIT/ROLLBACK PREPARED of an unknown GID fails with SQLSTATE
// 42704 (undefined_object): "prepared transaction with identifier ... does not exist".
func (postgresDialect) IsNotFound(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42704"
}

// SessionBound is false: after PREPARE TRANSACTION the session is free and
// any session of the same role can settle the prepared transaction.
func (postgresDialect) SessionBound() bool { return false }

func (postgresDialect) Recover(ctx context.Context, q Querier) ([]InDoubt, error) {
	// The age is the database's own clock minus its own prepare time, so
	// that a database clock far from this process's cannot move PreparedAt
	// (see InDoubt).
	rows, err := q.QueryContext(ctx,
		"SELECT gid, (extract(epoch FROM clock_timestamp() - prepared) * 1000000)::bigint FROM pg_prepared_xacts WHERE database = current_database() AND "+
			xid.PostgresScanPredicate+" ORDER BY prepared")
	if err != nil {
		return nil, fmt.Errorf("scan pg_prepared_xacts: %w", err)
	}
	defer rows.Close()
	var out []InDoubt
	for rows.Next() {
		var gid string
		var us int64
		if err := rows.Scan(&gid, &us); err != nil {
			return nil, fmt.Errorf("scan pg_prepared_xacts: %w", err)
		}
		// Read after the database measured the age: a little later than
		// the truth, never earlier.
		at := time.Now().Add(-time.Duration(max(us, 0)) * time.Microsecond)
		if b, ok := xid.ParsePostgresGID(gid); ok {
			out = append(out, InDoubt{Branch: b, PreparedAt: at})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("scan pg_prepared_xacts: %w", err)
	}
	return out, nil
}
