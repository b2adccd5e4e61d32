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

// resolveAttempts bounds Resolve's retries after a deadlock or a row that
// vanished between the duplicate key and the read.
const resolveAttempts = 5

// Resolve takes the key for g: it inserts (g, 'A') and commits, durably, in a
// transaction of its own whose lock wait is bounded by lockTimeout
// (PostgreSQL lock_timeout; MySQL/MariaDB innodb_lock_wait_timeout, whole
// seconds, at least 1). Then:
//   - the insert succeeded: Abort. No 'C' can be committed for g any more;
//     roll back g's prepared branches.
//   - a row exists (duplicate key): the recorded outcome, read back.
//   - the lock wait timed out: ErrPending.
//
// Concurrent Resolves of one gtrid, from any processes, return the same
// outcome. The database must pass CheckDurable: a lost 'A' would let a late
// commit point commit after the prepared branches were rolled back.
// Any other error says nothing about the outcome.
func Resolve(ctx context.Context, db *sql.DB, d rm.Driver, g xid.GTRID, lockTimeout time.Duration) (Outcome, error) {
	return defaultTable.resolve(ctx, db, d, g, lockTimeout)
}

func (t table) resolve(ctx context.Context, db *sql.DB, d rm.Driver, g xid.GTRID, lockTimeout time.Duration) (Outcome, error) {
	if err := checkGTRID(g); err != nil {
		return 0, err
	}
	var err error
	for range resolveAttempts {
		err = t.insertAbort(ctx, db, d, g, lockTimeout)
		switch {
		case err == nil:
			return Abort, nil
		case isLockTimeout(err):
			return 0, fmt.Errorf("%w (gtrid %s, lock wait %s): %w", ErrPending, g, lockTimeout, err)
		case isDeadlock(err):
			// InnoDB: recoverers waiting on the key of a commit point that
			// rolled back may deadlock as each turns its shared lock into
			// an insert; the victim's transaction is rolled back whole.
			continue
		case !isDuplicate(err):
			return 0, t.explain("record abort for gtrid "+g.String(), err)
		}
		o, found, lerr := t.lookup(ctx, db, g)
		if lerr != nil {
			return 0, lerr
		}
		if found {
			return o, nil
		}
		// Deleted between the key and the read: a forgotten 'C' (every
		// branch committed) or a swept 'A'. Take the key again.
	}
	return 0, fmt.Errorf("decision: record abort for gtrid %s: no outcome after %d attempts; try again: %w", g, resolveAttempts, err)
}

// insertAbort runs the insert of (g, 'A') and its commit on one connection.
func (t table) insertAbort(ctx context.Context, db *sql.DB, d rm.Driver, g xid.GTRID, lockTimeout time.Duration) (err error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	var pre []string
	ins := "INSERT INTO " + t.name + " (gtrid, outcome, began_at) VALUES (" + literal(g) + ", 'A', "
	if d == rm.MySQL {
		// The session's own value is restored afterwards; a connection
		// whose restore fails is discarded, not returned to the pool.
		secs := max(int64((lockTimeout+time.Second-1)/time.Second), 1)
		if _, err := conn.ExecContext(ctx, "SET @tandem_lwt = @@SESSION.innodb_lock_wait_timeout, SESSION innodb_lock_wait_timeout = "+strconv.FormatInt(secs, 10)); err != nil {
			return err
		}
		defer func() {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if _, rerr := conn.ExecContext(rctx, "SET SESSION innodb_lock_wait_timeout = @tandem_lwt"); rerr != nil {
				_ = conn.Raw(func(any) error { return driver.ErrBadConn })
			}
		}()
		ins += "UTC_TIMESTAMP(6))"
	} else {
		ms := max(lockTimeout.Milliseconds(), 1)
		pre = []string{"SET LOCAL lock_timeout = " + strconv.FormatInt(ms, 10), "SET LOCAL synchronous_commit = on"}
		ins += "clock_timestamp())"
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	for _, s := range append(pre, ins) {
		if _, err = tx.ExecContext(ctx, s); err != nil {
			_ = tx.Rollback()
			return err
		}
	}
	return tx.Commit()
}

// Lookup reads the recorded outcome of g. found is false when there is no
// row: g is undecided (or its row was forgotten). It decides nothing: only
// Resolve may act on an absence.
func Lookup(ctx context.Context, q rm.Querier, g xid.GTRID) (o Outcome, found bool, err error) {
	return defaultTable.lookup(ctx, q, g)
}

func (t table) lookup(ctx context.Context, q rm.Querier, g xid.GTRID) (Outcome, bool, error) {
	var s string
	err := queryRow(ctx, q, "SELECT outcome FROM "+t.name+" WHERE gtrid = "+literal(g), &s)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, t.explain("read the decision of gtrid "+g.String(), err)
	}
	if len(s) == 1 && (Outcome(s[0]) == Commit || Outcome(s[0]) == Abort) {
		return Outcome(s[0]), true, nil
	}
	return 0, false, fmt.Errorf("decision: gtrid %s has outcome %q in %s, want C or A: the table was written by something else; inspect it", g, s, t.name)
}
