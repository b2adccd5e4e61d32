// Package decision keeps a global transaction's outcome inside one of its own
// databases, the commit point, instead of in a coordinator's log.
//
// # The table
//
// Each database that may be a commit point has a table tandem_decision (DDL,
// Ensure) with one row per decided gtrid:
//
//	gtrid       32 lowercase hex digits, the primary key
//	outcome     'C' (commit) or 'A' (abort)
//	began_at    'C': when the commit point's transaction began; 'A': when the row was inserted
//	decided_at  when the row was inserted
//
// Every time is the database's own clock (PostgreSQL timestamptz; MySQL and
// MariaDB DATETIME(6) in UTC, whatever the session's time zone), never a
// client's.
//
// # Committing
//
// The commit point is one writer branch of the global transaction; it is
// never prepared. Its transaction begins with BeginStatements, which notes the
// database's clock. When every other branch is prepared, CommitStatements,
// sent in ONE round trip, inserts (gtrid, 'C') and commits: that local COMMIT
// is the decision. If the insert fails, the COMMIT after it never runs
// (PostgreSQL skips the rest of a simple-query string after an error and
// leaves the transaction aborted; MySQL/MariaDB stop a multi-statement at the
// first error, and the transaction stays open until the caller rolls it back:
// it must never be committed).
//
// The insert fails, so the commit point does not commit, when a row for the
// gtrid exists (a recoverer recorded 'A' first: Refused says "duplicate"), or
// when the transaction began longer than maxAge ago by the database's clock
// (Refused says "too old"). The age check is what lets 'A' rows be deleted at
// all: a late committer that began before an 'A' row was written can no
// longer commit once the row is older than maxAge, so SweepAborts may delete
// 'A' rows older than maxAge plus a margin. This holds because a recoverer
// acts only on a prepared branch, and the commit point's transaction began
// before any other branch was prepared (the application wrote through it
// first): an 'A' row is always younger than the transaction it refuses.
// On MySQL/MariaDB, begin every commit point with BeginStatements: a
// transaction begun otherwise on a session that still holds an earlier
// @tandem_began would be aged from that earlier time.
//
// # Recovering
//
// A recoverer never reads a decision and then acts on what it did not find.
// Resolve takes the key: it inserts (gtrid, 'A') and commits, with a bounded
// lock wait. If the insert succeeds, no 'C' can ever be committed for the
// gtrid (the commit point's insert would meet the key), so the outcome is
// abort. If the key exists, the recorded outcome is read and returned. If the
// commit point's uncommitted insert holds the key past the lock wait, the
// commit point's transaction is still open and Resolve answers ErrPending: try
// again later. Any number of recoverers may race on one gtrid: the key admits
// one outcome.
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
// A 'C' row is deleted (CommitStatements' forget list, or Forget) once every
// other branch of its gtrid is committed; 'A' rows only by SweepAborts, after
// the keep time. Rows lists old rows a dead client left.
//
// # Use
//
//	tx: BeginStatements(d) ... the application's writes ...
//	    prepare the other branches
//	    exec(strings.Join(CommitStatements(d, g, maxAge, forget), "; "))
//	    err == nil            → committed: commit the prepared branches
//	    Refused(err) ok       → not committed: roll back, then abort the others
//	    other error           → outcome unknown until Resolve answers
//	recovery: o, err := Resolve(ctx, db, d, g, lockTimeout)
//
// Every gtrid is written into SQL as a literal: a GTRID's String is 32
// lowercase hex digits, which needs no quoting, and Resolve refuses the zero
// gtrid.
package decision
