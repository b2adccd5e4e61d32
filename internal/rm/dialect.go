package rm

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/tandem-tx/tandem/xid"
)

// Driver names a kind of resource manager.
type Driver string

// The supported drivers.
const (
	Postgres Driver = "postgres"
	MySQL    Driver = "mysql"
)

// ErrBranchNotFound means the database has no prepared branch by that name:
// it was never prepared, or phase 2 already finished there.
var ErrBranchNotFound = errors.New("rm: no such prepared branch")

// ParseDriver checks a driver name from configuration.
func ParseDriver(s string) (Driver, error) {
	switch Driver(s) {
	case Postgres, MySQL:
		return Driver(s), nil
	case "mariadb":
		return MySQL, nil
	case "postgresql", "pgx":
		return Postgres, nil
	}
	return "", fmt.Errorf("rm: unknown driver %q: use %q or %q", s, Postgres, MySQL)
}

// InDoubt is a prepared branch in Tandem's format found by a recovery scan.
type InDoubt struct {
	Branch xid.Branch
	// PreparedAt is when the branch was prepared, on this process's clock:
	// the database's own measure of the branch's age (its clock at the scan
	// minus its prepare time) counted back from when the row was read, so
	// a database clock far ahead or behind does not move it, and it is
	// later than the truth by at most the scan's latency, never earlier.
	// Zero when the database does not say (MySQL/MariaDB).
	PreparedAt time.Time
}

// Querier is what a dialect needs to run a scan: *sql.DB, *sql.Conn or *sql.Tx.
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// Dialect is the SQL one kind of database speaks for each step of a branch.
// Statements that return a list must be sent in order; where the connection
// allows several statements in one round trip, they may be joined with "; ".
type Dialect interface {
	Driver() Driver
	// SQLDriverName is the database/sql driver name to open a pool with.
	SQLDriverName() string
	// Begin starts the branch on the application's connection.
	Begin(b xid.Branch) string
	// Prepare runs phase 1 on the application's connection.
	Prepare(b xid.Branch) []string
	// CommitOnePhase commits the branch without a prepare (the only writer, or read-only).
	CommitOnePhase(b xid.Branch) []string
	// RollbackActive rolls back a branch that was begun but not prepared.
	RollbackActive(b xid.Branch) []string
	// CommitPrepared and RollbackPrepared run phase 2, from any connection.
	CommitPrepared(b xid.Branch) string
	RollbackPrepared(b xid.Branch) string
	// ReadOnlyQuery returns one boolean row: true when the active branch has
	// written nothing. Empty when the database cannot tell cheaply; the
	// branch then counts as a writer.
	ReadOnlyQuery() string
	// IsNotFound reports whether err says the prepared branch does not exist.
	IsNotFound(err error) bool
	// SessionBound reports whether a prepared branch stays bound to the
	// session that prepared it until that session ends (MariaDB). Then only
	// that session can settle it meanwhile, and "not found" from any other
	// session is ambiguous: confirm with a recover scan.
	SessionBound() bool
	// Recover lists the prepared branches in Tandem's format.
	Recover(ctx context.Context, q Querier) ([]InDoubt, error)
}

// DialectFor returns the dialect of a driver.
func DialectFor(d Driver) (Dialect, error) {
	switch d {
	case Postgres:
		return postgresDialect{}, nil
	case MySQL:
		return mysqlDialect{}, nil
	}
	return nil, fmt.Errorf("rm: unknown driver %q: use %q or %q", d, Postgres, MySQL)
}
