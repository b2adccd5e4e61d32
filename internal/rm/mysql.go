package rm

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-sql-driver/mysql"
	"github.com/tandem-tx/tandem/xid"
)

// mysqlDialect speaks the XA statements of MySQL and MariaDB. A branch is
// XA START … XA END … XA PREPARE; phase 2 is XA COMMIT / XA ROLLBACK from any
// connection. Prepared branches survive the preparing connection (MariaDB
// 10.5 and later, MySQL 5.7.7 and later).
type mysqlDialect struct{}

func (mysqlDialect) Driver() Driver        { return MySQL }
func (mysqlDialect) SQLDriverName() string { return "mysql" }
func (mysqlDialect) Begin(b xid.Branch) string {
	return "XA START " + b.MySQLXID()
}
func (mysqlDialect) Prepare(b xid.Branch) []string {
	x := b.MySQLXID()
	return []string{"XA END " + x, "XA PREPARE " + x}
}
func (mysqlDialect) CommitOnePhase(b xid.Branch) []string {
	x := b.MySQLXID()
	return []string{"XA END " + x, "XA COMMIT " + x + " ONE PHASE"}
}
func (mysqlDialect) RollbackActive(b xid.Branch) []string {
	x := b.MySQLXID()
	return []string{"XA END " + x, "XA ROLLBACK " + x}
}
func (mysqlDialect) CommitPrepared(b xid.Branch) string   { return "XA COMMIT " + b.MySQLXID() }
func (mysqlDialect) RollbackPrepared(b xid.Branch) string { return "XA ROLLBACK " + b.MySQLXID() }

// ReadOnlyQuery is empty: telling whether an XA branch wrote needs the PROCESS
// privilege (information_schema.INNODB_TRX), so a MySQL branch that ran
// statements counts as a writer.
func (mysqlDialect) ReadOnlyQuery() string { return "" }

// IsNotFound: error 1397, XAER_NOTA "Unknown XID".
func (mysqlDialect) IsNotFound(err error) bool {
	var myErr *mysql.MySQLError
	return errors.As(err, &myErr) && myErr.Number == 1397
}

// SessionBound is true: MariaDB keeps a prepared XA branch attached to the
// preparing session until it disconnects; XA COMMIT from another session
// answers XAER_NOTA meanwhile, although XA RECOVER lists the branch.
// (MySQL 8.0.29+ detaches on prepare by default; treating it as bound is
// still correct, only one round trip slower.)
func (mysqlDialect) SessionBound() bool { return true }

func (mysqlDialect) Recover(ctx context.Context, q Querier) ([]InDoubt, error) {
	rows, err := q.QueryContext(ctx, "XA RECOVER")
	if err != nil {
		return nil, fmt.Errorf("XA RECOVER: %w", err)
	}
	defer rows.Close()
	var out []InDoubt
	for rows.Next() {
		var formatID int64
		var gl, bl int
		var data []byte
		if err := rows.Scan(&formatID, &gl, &bl, &data); err != nil {
			return nil, fmt.Errorf("XA RECOVER: %w", err)
		}
		if b, ok := xid.ParseMySQLXID(formatID, gl, bl, data); ok {
			out = append(out, InDoubt{Branch: b})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("XA RECOVER: %w", err)
	}
	return out, nil
}
