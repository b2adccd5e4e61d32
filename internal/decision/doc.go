// Package decision keeps a global transaction's outcome inside one of its own
// databases, the commit point, instead of in a coordinator's log
// (docs/ownership.md is the contract this package's SQL implements).
//
// # The tables
//
// Each database that may be a commit point or hold a prepared branch has two
// tables (DDL, Ensure, `tandem init-rm`). tandem_decision has one row per
// decided gtrid:
//
//	gtrid         32 lowercase hex digits, the primary key
//	outcome       'C' (commit) or 'A' (abort)
//	began_at      'C': when the commit point's transaction began; 'A': when the row was inserted
//	decided_at    when the row was inserted
//	participants  'C': "rm=<table id>" of every prepared branch, comma-separated, sorted
//	              (FormatParticipants); "" for 'A' rows and rows written before it existed
//
// tandem_decision_id has exactly one row (a constant primary key with a
// CHECK): id, 32 hex digits made at random with the table (xid.NewOwner),
// and created_at. The id is the table's identity: every branch decided at
// this commit point names it as its owner (xid.Branch.Owner), and every
// statement here that writes or reads a decision names the id it expects
// and has the database compare it (ReadID reads it).
//
// Every time is the database's own clock (PostgreSQL timestamptz; MySQL and
// MariaDB DATETIME(6) in UTC, whatever the session's time zone), never a
// client's.
//
// # Committing
//
// The commit point is one writer branch of the global transaction; it is
// never prepared. Its transaction begins with BeginStatements, which notes the
// database's clock; on MariaDB it is an XA branch (XA START, named
// xid.CommitPointSelf), inside which the server itself refuses every
// statement that would end the transaction implicitly (XAER_RMFAIL). When
// every other branch is prepared, CommitStatements, sent in ONE round trip,
// inserts (gtrid, 'C') and commits (PostgreSQL COMMIT; MariaDB XA END and XA
// COMMIT … ONE PHASE): that local commit is the decision. If the insert
// fails, nothing after it runs (PostgreSQL skips the rest of a simple-query
// string after an error and leaves the transaction aborted; MySQL/MariaDB
// stop a multi-statement at the first error, and the transaction — or the
// ACTIVE XA branch — stays open until the caller rolls it back: it must
// never be committed). The tests check each of these on the real servers.
//
// The insert fails, so the commit point does not commit, when:
//   - a row for the gtrid exists (a recoverer recorded 'A' first): Refused
//     says RefusedDuplicate;
//   - the transaction began longer than MaxAge ago by the database's clock
//     (RefusedTooOld): the age check is what lets 'A' rows be deleted at all
//     (a late committer that began before an 'A' row was written can no
//     longer commit once the row is older than MaxAge, so SweepAborts may
//     delete 'A' rows older than MaxAge plus a margin). This holds because a
//     recoverer acts only on a prepared branch, and the commit point's
//     transaction began before any other branch was prepared: an 'A' row is
//     always younger than the transaction it refuses;
//   - the table the connection reaches has another id than Commit.Table
//     (RefusedWrongTable): the participants value is a scalar subquery of
//     tandem_decision_id WHERE id = the expected id, NULL for another table,
//     and the column is NOT NULL. So a DSN that reaches another schema,
//     database or server never records a decision there. On MariaDB a
//     table that checks its id itself (idcheck.go) is told the expected id
//     in its table_id column instead (Commit.TableChecked): its foreign
//     key to the id table refuses another.
//
// On MySQL/MariaDB, begin every commit point with BeginStatements: a
// transaction begun otherwise on a session that still holds an earlier
// @tandem_began would be aged from that earlier time. On InnoDB the INSERT
// keeps a shared lock on the id row until the commit; nothing here ever
// locks that row exclusively (Ensure reads before it inserts).
//
// # Recovering
//
// A recoverer never reads a decision and then acts on what it did not find.
// Resolve takes the key: it inserts (gtrid, 'A') and commits, with a bounded
// lock wait, the table's id checked in the insert as for 'C' (ErrWrongTable).
// If the insert succeeds, no 'C' can ever be committed for the gtrid (the
// commit point's insert would meet the key), so the outcome is abort. If the
// key exists, the recorded outcome is read and returned; a row deleted
// between the key and the read is ErrVanished: the outcome is unknown, never
// an abort, and the key is not taken again. If the commit point's
// uncommitted insert holds the key past the lock wait, the commit point's
// transaction is still open and Resolve answers ErrPending: try again later.
// Any number of recoverers may race on one gtrid: the key admits one outcome.
// Lookup reads a row and the table's id in one statement (ErrWrongTable on
// another id): an absent row in another table says nothing.
//
// # Durability
//
// A 'C' or 'A' row that a crash of the database could lose would let the other
// outcome be taken later. CheckDurable refuses a database whose commits are
// not flushed (PostgreSQL fsync=off; MariaDB innodb_flush_log_at_trx_commit
// other than 1, or sync_binlog other than 1 with the binary log on); on
// PostgreSQL every statement list here forces synchronous_commit=on for its
// own transaction.
//
// # Garbage
//
// No 'C' row is deleted before it is ForgetMinAge (30 s) old by the
// database's clock, by anyone: CommitStatements' forget list and Forget skip
// younger rows (forget them again later). A key taken after a row was
// forgotten would record 'A' for a transaction committed everywhere; the
// horizon keeps every key-taker ahead of the forgetting (see ForgetMinAge).
// A 'C' row is forgotten once every participant it names is known, by a
// party that reaches that RM and verified its id, to hold no branch of the
// gtrid: the SDK after committing each prepared branch itself; a
// coordinator's sweep after a recover scan of each named RM (internal/coord,
// cpgc.go). 'A' rows go only by SweepAborts, after the keep time. Rows lists
// old rows with their participants.
//
// # Use
//
//	id := ReadID(pool)                               once per pool: the commit point's table
//	tx: BeginStatements(d, xa) ... the application's writes ...
//	    prepare the other branches
//	    exec(strings.Join(CommitStatements(d, Commit{GTRID: g, Table: id,
//	        Participants: ps, MaxAge: age, Forget: old, XA: xa}), "; "))
//	    err == nil            → committed: commit the prepared branches
//	    Refused(err) ok       → not committed: roll back (MariaDB: XA END, XA ROLLBACK), then abort the others
//	    other error           → outcome unknown until Resolve answers (within a bounded time: ForgetMinAge)
//	recovery: o, err := Resolve(ctx, db, d, g, id, lockTimeout)
//
// Every gtrid and id is written into SQL as a literal: a GTRID's and an
// Owner's String are 32 lowercase hex digits, which need no quoting; the
// participants string is quoted for the dialect. Resolve refuses the zero
// gtrid. The zero Table (Commit, Resolve, Lookup) checks no id: for callers
// that have not read it yet.
package decision
