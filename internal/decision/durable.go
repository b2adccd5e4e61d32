package decision

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/tandem-tx/tandem/internal/rm"
)

// CheckDurable says why the database may NOT be a commit point, or nil when
// it may: a decision row that a crash of the database could lose would let
// the other outcome be taken later.
//
// MySQL/MariaDB need innodb_flush_log_at_trx_commit=1, and sync_binlog=1 when
// the binary log is on (InnoDB's crash recovery rolls back a transaction the
// binary log lost). PostgreSQL needs fsync=on; synchronous_commit is forced
// on for the decision's own transaction by CommitStatements and Resolve.
// The error names the setting and the fix.
func CheckDurable(ctx context.Context, q rm.Querier, d rm.Driver) error {
	return CheckDurableRead(ctx, func(ctx context.Context, query string, dest ...any) error {
		return queryRow(ctx, q, query, dest...)
	}, d)
}

// RowReader reads the first row of query into dest; with no row it returns
// an error that matches sql.ErrNoRows. It lets a connection that is not
// database/sql's (pgx's own) be checked.
type RowReader func(ctx context.Context, query string, dest ...any) error

// CheckDurableRead is CheckDurable through read.
func CheckDurableRead(ctx context.Context, read RowReader, d rm.Driver) error {
	if d == rm.MySQL {
		var flush, syncBinlog, logBin sql.NullInt64
		if err := read(ctx, "SELECT @@GLOBAL.innodb_flush_log_at_trx_commit, @@GLOBAL.sync_binlog, @@GLOBAL.log_bin", &flush, &syncBinlog, &logBin); err != nil {
			return fmt.Errorf("decision: read the durability settings: %w", err)
		}
		if flush.Int64 != 1 {
			return fmt.Errorf("decision: innodb_flush_log_at_trx_commit is %d, so a committed decision can be lost in a crash: "+
				"set innodb_flush_log_at_trx_commit=1 (server configuration, or SET GLOBAL), or do not make this database a commit point", flush.Int64)
		}
		if logBin.Int64 == 1 && syncBinlog.Int64 != 1 {
			return fmt.Errorf("decision: the binary log is on and sync_binlog is %d, so a committed decision can be lost in a crash: "+
				"set sync_binlog=1 (server configuration, or SET GLOBAL), or do not make this database a commit point", syncBinlog.Int64)
		}
		return nil
	}
	var fsync string
	if err := read(ctx, "SHOW fsync", &fsync); err != nil {
		return fmt.Errorf("decision: read the durability settings: %w", err)
	}
	if fsync != "on" {
		return fmt.Errorf("decision: fsync is %s, so a committed decision can be lost in a crash: "+
			"set fsync = on in postgresql.conf and reload, or do not make this database a commit point", fsync)
	}
	return nil
}

// queryRow reads one row through a Querier (which has no QueryRowContext).
func queryRow(ctx context.Context, q rm.Querier, query string, dest ...any) error {
	rows, err := q.QueryContext(ctx, query)
	if err != nil {
		return err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	if err := rows.Scan(dest...); err != nil {
		return err
	}
	return rows.Close()
}
