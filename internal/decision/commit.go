package decision

import (
	"strconv"
	"time"

	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/xid"
)

// BeginStatements begins a commit-point branch on the application's
// connection, noting the database's own clock for the age check of
// CommitStatements: on MySQL/MariaDB "START TRANSACTION" and the session
// variables @tandem_began (UTC) and @tandem_began_s (the server's real
// clock, which a session's SET timestamp does not freeze); on PostgreSQL "BEGIN", whose now() is the
// transaction's start. They may be joined with "; " where the connection
// allows several statements in one round trip.
func BeginStatements(d rm.Driver) []string {
	if d == rm.MySQL {
		// @tandem_began_s is the server's real clock: SYSDATE ignores a
		// session's SET timestamp, which freezes UTC_TIMESTAMP.
		return []string{"START TRANSACTION", "SET @tandem_began = UTC_TIMESTAMP(6), @tandem_began_s = UNIX_TIMESTAMP(SYSDATE(6))"}
	}
	return []string{"BEGIN"}
}

// CommitStatements records COMMIT for g and commits the commit point's
// transaction (begun by BeginStatements). Send them joined by "; " in ONE
// round trip (PostgreSQL: the simple query protocol, as pgx uses for a
// statement without arguments; MySQL: a connection with multiStatements).
//
// In the same transaction they delete the 'C' rows of forget (gtrids whose
// other branches are all committed; never an 'A' row). Forget only rows this
// caller wrote and nobody else deletes: on InnoDB, deleting a key that is
// not there locks the gap, which can make concurrent commit points deadlock.
//
// The INSERT fails, so the COMMIT after it never runs, when a row for g
// exists (duplicate key) or when the transaction began more than maxAge ago
// by the database's own clock (began_at, NOT NULL, receives NULL; a
// transaction not begun by BeginStatements on MySQL has no start noted and
// is refused the same way). maxAge <= 0 refuses every commit. See Refused.
//
// On PostgreSQL they start with SET LOCAL synchronous_commit = on.
func CommitStatements(d rm.Driver, g xid.GTRID, maxAge time.Duration, forget []xid.GTRID) []string {
	return defaultTable.commitStatements(d, g, maxAge, forget)
}

func (t table) commitStatements(d rm.Driver, g xid.GTRID, maxAge time.Duration, forget []xid.GTRID) []string {
	us := strconv.FormatInt(maxAge.Microseconds(), 10)
	var out []string
	if d == rm.MySQL {
		// Also refused (began_at NULL): outside a transaction (something
		// ended it implicitly: its writes are already committed, and this
		// must fail loudly, not commit a decision alone), and when the
		// server's durability settings changed since the commit point was
		// checked (a decision a crash could lose).
		out = []string{"INSERT INTO " + t.name + " (gtrid, outcome, began_at) VALUES (" + literal(g) + ", 'C', " +
			"IF(@@in_transaction = 1 AND @@GLOBAL.innodb_flush_log_at_trx_commit = 1 AND (@@GLOBAL.log_bin = 0 OR @@GLOBAL.sync_binlog = 1) AND " +
			"TIMESTAMPDIFF(MICROSECOND, @tandem_began, UTC_TIMESTAMP(6)) < " + us + " AND " +
			"(UNIX_TIMESTAMP(SYSDATE(6)) - @tandem_began_s) * 1000000 < " + us + ", @tandem_began, NULL))"}
	} else {
		out = []string{"SET LOCAL synchronous_commit = on",
			"INSERT INTO " + t.name + " (gtrid, outcome, began_at) VALUES (" + literal(g) + ", 'C', " +
				"CASE WHEN clock_timestamp() - now() < interval '" + us + " microseconds' AND current_setting('fsync') = 'on' THEN now() END)"}
	}
	if len(forget) > 0 {
		out = append(out, "DELETE FROM "+t.name+" WHERE outcome = 'C' AND gtrid IN "+inList(forget))
	}
	return append(out, "COMMIT")
}

// The reasons Refused gives.
const (
	// RefusedDuplicate: a row for the gtrid exists. Only the commit point's
	// own transaction writes 'C' for its gtrid, so the row is a recoverer's
	// 'A' — provided CommitStatements for a gtrid is sent at most once (a
	// resend after a broken connection meets the first one's 'C': never
	// resend; use Resolve).
	RefusedDuplicate = "a decision row for the gtrid exists (a recoverer recorded abort)"
	// RefusedTooOld: the transaction began more than maxAge ago by the
	// database's clock, or (MySQL) was not begun by BeginStatements, or is
	// no longer open, or the server's durability settings changed.
	RefusedTooOld = "the transaction began longer ago than the maximum transaction age by the database's clock, was ended implicitly, or the database no longer flushes every commit"
)

// Refused reports whether err, from sending CommitStatements, means the
// database refused to record the decision: the INSERT failed, so the COMMIT
// did not run and the commit point did NOT commit. Roll the commit point's
// transaction back (on MySQL/MariaDB it is still open, with the
// application's writes: committing it would split the transaction); the
// outcome is abort. why is RefusedDuplicate or RefusedTooOld.
//
// Any other error leaves the outcome unknown until Resolve answers (a broken
// connection may have lost the COMMIT's reply, not the COMMIT).
func Refused(err error) (why string, ok bool) {
	switch {
	case err == nil:
		return "", false
	case isDuplicate(err):
		return RefusedDuplicate, true
	case isBadNull(err):
		return RefusedTooOld, true
	}
	return "", false
}
