package decision

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/xid"
)

// ErrPending means the commit point's transaction holds the gtrid's key
// uncommitted (its INSERT of 'C' is done, its COMMIT not yet): the outcome
// is not decided yet. Try again later.
var ErrPending = errors.New("decision: the commit point's transaction is still open (its decision row is not committed yet); try again later")

// ErrVanished means the gtrid's key was taken (the insert met a row) but
// the row was gone when read back: deleted in between, a forgotten 'C'
// (every branch committed) or a swept 'A'. The outcome is NOT known, and it
// is never taken for an abort: inserting 'A' now could record abort for a
// transaction committed everywhere. Look at the branches' databases.
var ErrVanished = errors.New("decision: the gtrid's decision row was deleted while it was read (forgotten or swept): the outcome is unknown here, and is NOT abort; a transaction whose 'C' row was forgotten was committed everywhere: look at its databases")

// resolveAttempts bounds Resolve's retries after a deadlock.
const resolveAttempts = 5

// Resolve takes the key for g: it inserts (g, 'A') and commits, durably, in a
// transaction of its own whose lock wait is bounded by lockTimeout
// (PostgreSQL lock_timeout; MySQL/MariaDB innodb_lock_wait_timeout, whole
// seconds, at least 1). Then:
//   - the insert succeeded: Abort. No 'C' can be committed for g any more;
//     roll back g's prepared branches.
//   - a row exists (duplicate key): the recorded outcome, read back; if the
//     row is gone by then, ErrVanished (unknown: never retried into an 'A').
//   - the lock wait timed out: ErrPending.
//   - the database's decision table has another id than table: ErrWrongTable
//     (nothing inserted; checked by the database in the insert itself). The
//     zero table checks nothing (legacy callers).
//
// Concurrent Resolves of one gtrid, from any processes, return the same
// outcome. The database must pass CheckDurable: a lost 'A' would let a late
// commit point commit after the prepared branches were rolled back.
// Any other error says nothing about the outcome.
//
// Take a key only while some branch of g is known to be prepared, or within
// a bounded time of a broken decision: never ForgetMinAge or more after
// either (see ForgetMinAge).
func Resolve(ctx context.Context, db *sql.DB, d rm.Driver, g xid.GTRID, table xid.Owner, lockTimeout time.Duration) (Outcome, error) {
	return defaultTable.resolve(ctx, db, d, g, table, lockTimeout)
}

func (t table) resolve(ctx context.Context, db *sql.DB, d rm.Driver, g xid.GTRID, want xid.Owner, lockTimeout time.Duration) (Outcome, error) {
	if err := checkGTRID(g); err != nil {
		return 0, err
	}
	var err error
	for range resolveAttempts {
		err = t.insertAbort(ctx, db, d, g, want, lockTimeout)
		switch {
		case err == nil:
			return Aborted, nil
		case isLockTimeout(err):
			return 0, fmt.Errorf("%w (gtrid %s, lock wait %s): %w", ErrPending, g, lockTimeout, err)
		case isDeadlock(err):
			// InnoDB: recoverers waiting on the key of a commit point that
			// rolled back may deadlock as each turns its shared lock into
			// an insert; the victim's transaction is rolled back whole.
			continue
		case isBadNull(err, "participants"):
			got, rerr := t.readID(ctx, db, d)
			if rerr != nil {
				return 0, fmt.Errorf("%w: record abort for gtrid %s: expected decision table %s, and this database's id cannot be read (%v)", ErrWrongTable, g, want, rerr)
			}
			return 0, wrongTable("record abort for gtrid "+g.String(), want, got)
		case !isDuplicate(err):
			return 0, t.explain("record abort for gtrid "+g.String(), err)
		}
		if t.betweenKeyAndRead != nil {
			t.betweenKeyAndRead()
		}
		o, found, lerr := t.lookupD(ctx, db, d, true, g, want)
		if lerr != nil {
			return 0, lerr
		}
		if found {
			return o, nil
		}
		return 0, fmt.Errorf("%w (gtrid %s)", ErrVanished, g)
	}
	return 0, fmt.Errorf("decision: record abort for gtrid %s: no outcome after %d attempts (deadlocks); try again: %w", g, resolveAttempts, err)
}

// insertAbort runs the insert of (g, 'A') and its commit on one connection.
func (t table) insertAbort(ctx context.Context, db *sql.DB, d rm.Driver, g xid.GTRID, want xid.Owner, lockTimeout time.Duration) error {
	at := "clock_timestamp())"
	if d == rm.MySQL {
		at = "UTC_TIMESTAMP(6))"
	}
	ins := "INSERT INTO " + t.name + " (gtrid, outcome, participants, began_at) VALUES (" + literal(g) + ", 'A', " + t.checkedValue(d, "''", want) + ", " + at
	_, err := execBounded(ctx, db, d, lockTimeout, ins)
	return err
}

// execBounded runs stmts in one transaction of their own on one connection,
// durably (PostgreSQL: synchronous_commit on), with every lock wait bounded
// by lockTimeout (PostgreSQL lock_timeout; MySQL/MariaDB
// innodb_lock_wait_timeout and lock_wait_timeout for table locks, whole
// seconds, at least 1: the session's own
// value is restored afterwards, and a connection whose restore fails is
// discarded, not returned to the pool). It returns the rows each statement
// affected. A wait past the bound fails the statement (isLockTimeout) and
// rolls the transaction back: nothing is left holding locks, on the server
// too (a client that gives up on a statement leaves the server waiting on).
func execBounded(ctx context.Context, db *sql.DB, d rm.Driver, lockTimeout time.Duration, stmts ...string) (affected []int64, err error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	var pre []string
	if d == rm.MySQL {
		secs := max(int64((lockTimeout+time.Second-1)/time.Second), 1)
		// Row locks (innodb_lock_wait_timeout) and table locks: LOCK
		// TABLES, DDL, a backup stage (metadata locks, lock_wait_timeout).
		n := strconv.FormatInt(secs, 10)
		if _, err := conn.ExecContext(ctx, "SET @tandem_lwt = @@SESSION.innodb_lock_wait_timeout, @tandem_mdl = @@SESSION.lock_wait_timeout, "+
			"SESSION innodb_lock_wait_timeout = "+n+", SESSION lock_wait_timeout = "+n); err != nil {
			return nil, err
		}
		defer func() {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if _, rerr := conn.ExecContext(rctx, "SET SESSION innodb_lock_wait_timeout = @tandem_lwt, SESSION lock_wait_timeout = @tandem_mdl"); rerr != nil {
				_ = conn.Raw(func(any) error { return driver.ErrBadConn })
			}
		}()
	} else {
		ms := max(lockTimeout.Milliseconds(), 1)
		pre = []string{"SET LOCAL lock_timeout = " + strconv.FormatInt(ms, 10), "SET LOCAL synchronous_commit = on"}
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	for _, s := range pre {
		if _, err = tx.ExecContext(ctx, s); err != nil {
			_ = tx.Rollback()
			return nil, err
		}
	}
	for _, s := range stmts {
		res, err := tx.ExecContext(ctx, s)
		var n int64
		if err == nil {
			n, err = res.RowsAffected()
		}
		if err != nil {
			_ = tx.Rollback()
			return nil, err
		}
		affected = append(affected, n)
	}
	return affected, tx.Commit()
}

// Lookup reads the recorded outcome of g. found is false when there is no
// row: g is undecided (or its row was forgotten). It decides nothing: only
// Resolve may act on an absence.
//
// With a non-zero table, the id of the decision table is read in the same
// statement as the row, and a table with another id is ErrWrongTable: an
// absent row there says nothing about g. On PostgreSQL the same statement
// reads where both tables are, and an id table in another schema than the
// decision table is ErrWrongTable too (schema.go). The zero table checks
// nothing.
func Lookup(ctx context.Context, q rm.Querier, g xid.GTRID, table xid.Owner) (o Outcome, found bool, err error) {
	return defaultTable.lookup(ctx, q, g, table)
}

func (t table) lookup(ctx context.Context, q rm.Querier, g xid.GTRID, want xid.Owner) (Outcome, bool, error) {
	d, known := driverOf(q)
	return t.lookupD(ctx, q, d, known, g, want)
}

// lookupD is lookup on a database of driver d, when known; when not, the
// PostgreSQL form is tried first, and the MySQL form if MySQL/MariaDB
// answers it (so PostgreSQL never skips the schema check).
func (t table) lookupD(ctx context.Context, q rm.Querier, d rm.Driver, known bool, g xid.GTRID, want xid.Owner) (Outcome, bool, error) {
	var s sql.NullString
	var err error
	if want.IsZero() {
		err = queryRow(ctx, q, "SELECT outcome FROM "+t.name+" WHERE gtrid = "+literal(g), &s)
	} else {
		var id string
		if !known || d == rm.Postgres {
			// and the schemas of both tables (schema.go), in the same statement.
			var dSchema sql.NullString
			var idSchema string
			err = queryRow(ctx, q, "SELECT i.id, d.outcome, "+t.pgSchemas("i")+" FROM "+t.id+" i LEFT JOIN "+t.name+" d ON d.gtrid = "+literal(g), &id, &s, &dSchema, &idSchema)
			if !known && myCode(err) != 0 {
				known, d = true, rm.MySQL
			} else if err == nil {
				if serr := t.schemasDiffer(dSchema, idSchema, want); serr != nil {
					return 0, false, fmt.Errorf("decision: read the decision of gtrid %s: %w", g, serr)
				}
			}
		}
		if known && d == rm.MySQL {
			err = queryRow(ctx, q, "SELECT i.id, d.outcome FROM "+t.id+" i LEFT JOIN "+t.name+" d ON d.gtrid = "+literal(g), &id, &s)
		}
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return 0, false, fmt.Errorf("%w (%s has no row)", ErrNoID, t.id)
		case err == nil && id != want.String():
			got, perr := xid.ParseOwner(id)
			if perr != nil {
				return 0, false, fmt.Errorf("%w: read the decision of gtrid %s: the id in %s is %q, not an id: inspect the table", ErrWrongTable, g, t.id, id)
			}
			return 0, false, wrongTable("read the decision of gtrid "+g.String(), want, got)
		}
	}
	if errors.Is(err, sql.ErrNoRows) || err == nil && !s.Valid {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, t.explain("read the decision of gtrid "+g.String(), err)
	}
	if len(s.String) == 1 && (Outcome(s.String[0]) == Committed || Outcome(s.String[0]) == Aborted) {
		return Outcome(s.String[0]), true, nil
	}
	return 0, false, fmt.Errorf("decision: gtrid %s has outcome %q in %s, want C or A: the table was written by something else; inspect it", g, s.String, t.name)
}
