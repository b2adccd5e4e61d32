package decision

import (
	"strconv"
	"time"

	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/xid"
)

// ForgetMinAge is how old, by the database's clock, a 'C' row must be before
// anyone deletes it (CommitStatements' forget list, Forget, a coordinator's
// sweep). A recoverer that takes a key (Resolve) after the row is gone would
// record 'A' for a transaction committed everywhere; the horizon is what
// keeps every key-taker ahead of the forgetting:
//   - an SDK whose decision broke takes the key only for a bounded time after
//     the decision (it answers outcome unknown after that, well within 30 s:
//     a few lock waits of 2 s);
//   - a coordinator takes a key only for a branch its recover scan listed
//     prepared a moment before (at most ForgetMinAge/3 before: cprecover);
//     a branch is committed after its 'C' row is written, so a row deleted
//     30 s after it was written cannot be what that coordinator finds missing.
//
// 30 s is long next to those bounds (2 s lock waits, a scan of a few
// seconds) and short next to the time a row costs (one small row per
// transaction, deleted by the next commit or sweep after 30 s).
const ForgetMinAge = 30 * time.Second

// BeginStatements begins a commit-point branch on the application's
// connection, noting the database's own clock for the age check of
// CommitStatements: on MySQL/MariaDB "XA START xa" (or "START TRANSACTION"
// when xa is "") and the session variables @tandem_began (UTC) and
// @tandem_began_s (the server's real clock, which a session's SET timestamp
// does not freeze); on PostgreSQL "BEGIN", whose now() is the transaction's
// start (xa is ignored). They may be joined with "; " where the connection
// allows several statements in one round trip.
//
// xa is the commit point's own branch name, xid.CommitPointSelf(g, cp,
// table).MySQLXID(): inside an XA branch MariaDB refuses every statement
// that would end the transaction implicitly (XAER_RMFAIL), and a deadlock
// leaves it rollback-only instead of ending it.
func BeginStatements(d rm.Driver, xa string) []string {
	if d == rm.MySQL {
		start := "START TRANSACTION"
		if xa != "" {
			start = "XA START " + xa
		}
		// @tandem_began_s is the server's real clock: SYSDATE ignores a
		// session's SET timestamp, which freezes UTC_TIMESTAMP.
		return []string{start, "SET @tandem_began = UTC_TIMESTAMP(6), @tandem_began_s = UNIX_TIMESTAMP(SYSDATE(6))"}
	}
	return []string{"BEGIN"}
}

// Commit is what CommitStatements records and forgets.
type Commit struct {
	// GTRID is the transaction decided.
	GTRID xid.GTRID
	// Table is the id of the commit point's decision table as the caller
	// knows it (ReadID, once per pool): the INSERT takes its participants
	// value from the id table only if the id there is this one, so a
	// connection that reaches another table is refused (RefusedWrongTable).
	// The zero Table skips that check (callers that have not read the id
	// yet); every new caller passes it.
	Table xid.Owner
	// TableChecked says the table checks its own id (ReadIDChecked: on
	// MySQL/MariaDB a table_id column with a foreign key to the id,
	// idcheck.go): the INSERT then writes Table into that column and the
	// table itself refuses another id (RefusedWrongTable), instead of
	// reading the id table in a subquery. Ignored on PostgreSQL and with
	// the zero Table.
	TableChecked bool
	// Participants are the RMs holding a prepared branch of GTRID, each with
	// its table id: who must be seen to hold no branch before the row may be
	// forgotten by a sweep.
	Participants []Participant
	// MaxAge is the longest the transaction may have run (0 refuses all);
	// at most MaxCommitPointAge, whatever is passed: 'A' rows are swept
	// once older than that plus a margin, and from then on this check is
	// what refuses a late commit point.
	MaxAge time.Duration
	// Forget lists 'C' rows of earlier gtrids whose branches are all
	// committed; rows younger than ForgetMinAge are left for later.
	Forget []xid.GTRID
	// XA is the commit point's own XA branch on MySQL/MariaDB (as given to
	// BeginStatements): the statements end with XA END and XA COMMIT … ONE
	// PHASE instead of COMMIT. Ignored on PostgreSQL.
	XA string
}

// CommitStatements records COMMIT for c.GTRID and commits the commit point's
// transaction (begun by BeginStatements). Send them joined by "; " in ONE
// round trip (PostgreSQL: the simple query protocol, as pgx uses for a
// statement without arguments; MySQL: a connection with multiStatements).
//
// In the same transaction they delete the 'C' rows of c.Forget that are at
// least ForgetMinAge old by the database's clock (never an 'A' row). Forget
// only rows this caller wrote and nobody else deletes: on InnoDB, deleting a
// key that is not there locks the gap, which can make concurrent commit
// points deadlock.
//
// The INSERT fails, so nothing after it runs and the transaction does not
// commit, when a row for the gtrid exists (duplicate key), when the
// transaction began more than c.MaxAge ago by the database's own clock
// (began_at, NOT NULL, receives NULL; a transaction not begun by
// BeginStatements on MySQL has no start noted and is refused the same way),
// or when the database's decision table has another id than c.Table
// (participants, NOT NULL, receives NULL; with c.TableChecked, the table's
// own foreign key compares the id). See Refused.
//
// On PostgreSQL they start with SET LOCAL synchronous_commit = on.
func CommitStatements(d rm.Driver, c Commit) []string {
	return defaultTable.commitStatements(d, c)
}

func (t table) commitStatements(d rm.Driver, c Commit) []string {
	// Never more than MaxCommitPointAge: the sweep of 'A' rows relies on it
	// (SweepAborts), whatever a caller passes.
	us := strconv.FormatInt(min(c.MaxAge, MaxCommitPointAge).Microseconds(), 10)
	parts := stringLiteral(d, FormatParticipants(c.Participants))
	cols := "gtrid, outcome, began_at, participants"
	if d == rm.MySQL && c.TableChecked && !c.Table.IsZero() {
		// The table's foreign key compares the id (idcheck.go); a session
		// that turned foreign-key checks off writes NULL, which NOT NULL
		// refuses.
		cols += ", " + tableIDColumn
		parts += ", IF(@@foreign_key_checks = 1, " + ownerLiteral(c.Table) + ", NULL)"
	} else {
		parts = t.checkedValue(d, parts, c.Table)
	}
	var out []string
	if d == rm.MySQL {
		// Also refused (began_at NULL): outside a transaction (something
		// ended it implicitly: its writes are already committed, and this
		// must fail loudly, not commit a decision alone), and when the
		// server's durability settings changed since the commit point was
		// checked (a decision a crash could lose).
		out = []string{"INSERT INTO " + t.name + " (" + cols + ") VALUES (" + literal(c.GTRID) + ", 'C', " +
			"IF(@@in_transaction = 1 AND @@GLOBAL.innodb_flush_log_at_trx_commit = 1 AND (@@GLOBAL.log_bin = 0 OR @@GLOBAL.sync_binlog = 1) AND " +
			"TIMESTAMPDIFF(MICROSECOND, @tandem_began, UTC_TIMESTAMP(6)) < " + us + " AND " +
			"(UNIX_TIMESTAMP(SYSDATE(6)) - @tandem_began_s) * 1000000 < " + us + ", @tandem_began, NULL), " + parts + ")"}
	} else {
		out = []string{"SET LOCAL synchronous_commit = on",
			"INSERT INTO " + t.name + " (gtrid, outcome, began_at, participants) VALUES (" + literal(c.GTRID) + ", 'C', " +
				"CASE WHEN clock_timestamp() - now() < interval '" + us + " microseconds' AND current_setting('fsync') = 'on' THEN now() END, " + parts + ")"}
	}
	if len(c.Forget) > 0 {
		out = append(out, t.forgetStatement(d, c.Forget))
	}
	if d == rm.MySQL && c.XA != "" {
		return append(out, "XA END "+c.XA, "XA COMMIT "+c.XA+" ONE PHASE")
	}
	return append(out, "COMMIT")
}

// checkedValue is the SQL for value if the id table holds the id want (on
// PostgreSQL: and is in the schema where the decision table's name
// resolves, schema.go), else NULL (a scalar subquery with no row): written
// into a NOT NULL column, it makes the database itself refuse a statement
// that reached another table. The zero want checks nothing.
func (t table) checkedValue(d rm.Driver, value string, want xid.Owner) string {
	if want.IsZero() {
		return value
	}
	if d == rm.Postgres {
		// and the id row is beside the decision table (schema.go).
		return "(SELECT " + value + " FROM " + t.id + " i WHERE i.id = " + ownerLiteral(want) + " AND " + t.pgSameSchema("i") + ")"
	}
	return "(SELECT " + value + " FROM " + t.id + " WHERE id = " + ownerLiteral(want) + ")"
}

// forgetStatement deletes the 'C' rows of gs at least ForgetMinAge old.
func (t table) forgetStatement(d rm.Driver, gs []xid.GTRID) string {
	return t.deleteByKey(d, "outcome = 'C' AND gtrid IN "+inList(gs)+" AND "+t.olderThan(d, ForgetMinAge))
}

// deleteByKey is a DELETE of the rows where says, where names them by
// gtrid. On MySQL/MariaDB it makes the optimizer read them by the primary
// key: left to itself, InnoDB reads "gtrid IN (most of a small table)" as a
// full scan, which locks every row it reads, so it waits for any commit
// point's uncommitted 'C' (up to the lock wait timeout, and on after the
// client gives up) while its own locks block every INSERT of the table.
// Only the multi-table DELETE syntax takes an index hint.
func (t table) deleteByKey(d rm.Driver, where string) string {
	if d == rm.MySQL {
		return "DELETE d FROM " + t.name + " d FORCE INDEX (PRIMARY) WHERE " + where
	}
	return "DELETE FROM " + t.name + " WHERE " + where
}

// olderThan is the SQL for "decided_at is more than age ago by the
// database's clock". On MySQL/MariaDB both clocks must agree: the session's
// (UTC_TIMESTAMP, which SET timestamp freezes) and the server's real one
// (SYSDATE), so that a session with a clock set ahead cannot forget a young
// row.
func (t table) olderThan(d rm.Driver, age time.Duration) string {
	us := strconv.FormatInt(max(age.Microseconds(), 0), 10)
	if d == rm.MySQL {
		return "decided_at < UTC_TIMESTAMP(6) - INTERVAL " + us + " MICROSECOND AND " +
			"TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', decided_at) < UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 - " + us
	}
	return "decided_at < clock_timestamp() - interval '" + us + " microseconds'"
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
	// RefusedWrongTable: the decision table the connection reaches has
	// another id than Commit.Table (ErrWrongTable): another schema,
	// database or server. Worth an alarm.
	RefusedWrongTable = "the connection reaches another decision table than the commit point's (its id differs): wrong schema, database or server"
	// RefusedUnchecked: the session turned foreign-key checks off
	// (foreign_key_checks = 0), so the table could not have checked its id
	// (Commit.TableChecked). Turn them back on for the application's
	// connections (the next decision checks through the id table).
	RefusedUnchecked = "the session has foreign-key checks turned off (foreign_key_checks = 0), which the decision table's id check needs: turn them back on"
)

// Refused reports whether err, from sending CommitStatements, means the
// database refused to record the decision: the INSERT failed, so the COMMIT
// did not run and the commit point did NOT commit. Roll the commit point's
// transaction back (on MySQL/MariaDB it is still open, with the
// application's writes: committing it would split the transaction); the
// outcome is abort. why is RefusedDuplicate, RefusedTooOld or
// RefusedWrongTable.
//
// Any other error leaves the outcome unknown until Resolve answers (a broken
// connection may have lost the COMMIT's reply, not the COMMIT).
func Refused(err error) (why string, ok bool) {
	switch {
	case err == nil:
		return "", false
	case isDuplicate(err):
		return RefusedDuplicate, true
	case isBadNull(err, "began_at"):
		return RefusedTooOld, true
	case isBadNull(err, "participants"), isIDCheckFailed(err), isUnknownColumn(err, tableIDColumn):
		// An unknown table_id: the table reached is older than the id
		// check, so not the one whose check was read.
		return RefusedWrongTable, true
	case isBadNull(err, tableIDColumn):
		return RefusedUnchecked, true
	}
	return "", false
}
