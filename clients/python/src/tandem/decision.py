"""The commit point's decision table: the SQL of the Go package
internal/decision, text for text (tests/test_golden.py compares every
statement with what the Go package prints), so that a coordinator's
recovery settles a Python transaction's branches exactly like a Go one's.

tandem_decision has one row per decided gtrid (outcome 'C' or 'A');
tandem_decision_id holds the table's identity, one random id, which every
branch decided at this commit point names as its owner and every statement
that writes or reads a decision checks (the database compares it).

Committing: the commit point's transaction begins with begin_statements;
when every other branch is prepared, commit_statements, sent in ONE round
trip, inserts (gtrid, 'C') and commits. If the insert fails nothing after
it runs (refused() says why): the commit point did not commit. Any other
error leaves the outcome unknown until resolve() takes the key: it inserts
(gtrid, 'A'); a duplicate key means a decision exists (read it); a
successful insert means no COMMIT can ever land.
"""

from __future__ import annotations

import secrets
from typing import Any, Callable, Iterable, List, Optional, Sequence, Tuple

from . import _db
from ._db import MYSQL, POSTGRES
from .xid import check_gtrid, check_owner

TABLE_NAME = "tandem_decision"
ID_TABLE_NAME = "tandem_decision_id"

#: How old, by the database's clock, a 'C' row must be before anyone deletes
#: it (seconds). A key taken after the row is gone would record 'A' for a
#: transaction committed everywhere: every key-taker stops well before.
FORGET_MIN_AGE = 30.0

#: The longest a commit point's transaction may run before its decision
#: (seconds): coordinators keep the 'A' rows that refuse a late commit point
#: longer than that.
MAX_COMMIT_POINT_AGE = 3600.0

#: The most gtrids one forget statement deletes (below MariaDB's
#: in_predicate_conversion_threshold, 1000, at which an IN list becomes a
#: subquery and the DELETE scans and locks the whole table).
FORGET_BATCH = 256

#: How long a forget waits for a row lock (seconds): its DELETE holds the
#: locks it took while it waits, which can block a commit point's or a
#: recoverer's INSERT of a neighbouring key; rows it could not delete now are
#: deleted by a later batch or a coordinator's sweep.
GC_LOCK_WAIT = 1.0

UNKNOWN_ID = "0" * 32

COMMITTED = "C"
ABORTED = "A"

REFUSED_DUPLICATE = "a decision row for the gtrid exists (a recoverer recorded abort)"
REFUSED_TOO_OLD = (
    "the transaction began longer ago than the maximum transaction age by the database's clock, "
    "was ended implicitly, or the database no longer flushes every commit"
)
REFUSED_WRONG_TABLE = (
    "the connection reaches another decision table than the commit point's (its id differs): "
    "wrong schema, database or server"
)
REFUSED_UNCHECKED = (
    "the session has foreign-key checks turned off (foreign_key_checks = 0), "
    "which the decision table's id check needs: turn them back on"
)

# The MariaDB decision table's reference to its id (the Go package's
# idcheck.go): a column with a foreign key <table>_table to the id.
TABLE_ID_COLUMN = "table_id"



class DecisionError(Exception):
    """An error reading or writing a decision table."""


class Pending(DecisionError):
    """The commit point's transaction holds the gtrid's key uncommitted: not
    decided yet. Try again later."""


class Vanished(DecisionError):
    """The key was taken (the insert met a row) but the row was gone when
    read back. The outcome is NOT known, and is never taken for an abort."""


class WrongTable(DecisionError):
    """The decision table reached has another id than the one expected."""


class NoID(DecisionError):
    """The database has no decision-table id: run `tandem init-rm`, or start
    a coordinator that has this database in --rm."""


# --- statements ---------------------------------------------------------------


def _literal(g: str) -> str:
    return "'" + check_gtrid(g) + "'"


def _owner_literal(o: str) -> str:
    return "'" + check_owner(o) + "'"


def string_literal(d: str, s: str) -> str:
    """s as an SQL literal safe on both databases whatever the session's
    modes: quotes doubled, and on MySQL backslashes doubled."""
    s = s.replace("'", "''")
    if d == MYSQL:
        s = s.replace("\\", "\\\\")
    return "'" + s + "'"


def _in_list(gs: Sequence[str]) -> str:
    return "(" + ",".join(_literal(g) for g in gs) + ")"


def _us(seconds: float) -> str:
    return str(int(round(seconds * 1_000_000)))


def format_participants(ps: Iterable[Tuple[str, str]]) -> str:
    """(rm, table id) pairs as the participants column holds them:
    "rm=<id>", sorted, comma-separated; an unknown id as 32 zeros."""
    return ",".join(sorted("%s=%s" % (rm, tid or UNKNOWN_ID) for rm, tid in ps))


def begin_statements(d: str, xa: str = "") -> List[str]:
    """Begins a commit-point branch, noting the database's own clock for the
    age check: on MySQL/MariaDB XA START xa (or START TRANSACTION when xa is
    "") and @tandem_began; on PostgreSQL BEGIN (whose now() is the start)."""
    if d == MYSQL:
        start = "XA START " + xa if xa else "START TRANSACTION"
        return [start, "SET @tandem_began = UTC_TIMESTAMP(6), @tandem_began_s = UNIX_TIMESTAMP(SYSDATE(6))"]
    return ["BEGIN"]


def _pg_same_schema(alias: str) -> str:
    return (
        "(SELECT relnamespace FROM pg_class WHERE oid = to_regclass('" + TABLE_NAME + "')) = "
        "(SELECT relnamespace FROM pg_class WHERE oid = " + alias + ".tableoid)"
    )


def _pg_schemas(alias: str) -> str:
    ns = "(SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = "
    return ns + "to_regclass('" + TABLE_NAME + "')), " + ns + alias + ".tableoid)"


def checked_value(d: str, value: str, want: str) -> str:
    """value if the id table holds the id want (PostgreSQL: beside the
    decision table), else NULL: written into a NOT NULL column it makes the
    database refuse a statement that reached another table. want "" checks
    nothing."""
    if not want:
        return value
    if d == POSTGRES:
        return "(SELECT " + value + " FROM " + ID_TABLE_NAME + " i WHERE i.id = " + _owner_literal(want) + " AND " + _pg_same_schema("i") + ")"
    return "(SELECT " + value + " FROM " + ID_TABLE_NAME + " WHERE id = " + _owner_literal(want) + ")"


def _older_than(d: str, age: float) -> str:
    us = _us(max(age, 0.0))
    if d == MYSQL:
        return (
            "decided_at < UTC_TIMESTAMP(6) - INTERVAL " + us + " MICROSECOND AND "
            "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', decided_at) < UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 - " + us
        )
    return "decided_at < clock_timestamp() - interval '" + us + " microseconds'"


def _delete_by_key(d: str, where: str) -> str:
    if d == MYSQL:
        return "DELETE d FROM " + TABLE_NAME + " d FORCE INDEX (PRIMARY) WHERE " + where
    return "DELETE FROM " + TABLE_NAME + " WHERE " + where


def forget_statement(d: str, gs: Sequence[str]) -> str:
    """Deletes the 'C' rows of gs at least FORGET_MIN_AGE old (never an 'A')."""
    return _delete_by_key(d, "outcome = 'C' AND gtrid IN " + _in_list(gs) + " AND " + _older_than(d, FORGET_MIN_AGE))


def commit_statements(
    d: str,
    gtrid: str,
    table: str,
    participants: Iterable[Tuple[str, str]] = (),
    max_age: float = MAX_COMMIT_POINT_AGE,
    forget: Sequence[str] = (),
    xa: str = "",
    table_checked: bool = False,
) -> List[str]:
    """Records COMMIT for gtrid and commits the commit point's transaction
    (begun by begin_statements). Send them joined by "; " in ONE round trip.
    The INSERT fails, so nothing after it runs, when a row for the gtrid
    exists, when the transaction began more than max_age seconds ago by the
    database's clock, or when the decision table's id is not table."""
    us = _us(min(max_age, MAX_COMMIT_POINT_AGE))
    parts = checked_value(d, string_literal(d, format_participants(participants)), table)
    cols = "gtrid, outcome, began_at, participants"
    if d == MYSQL and table_checked and table:
        # The table's foreign key compares the id (id_checked_query); a
        # session that turned foreign-key checks off writes NULL, which NOT
        # NULL refuses.
        cols += ", " + TABLE_ID_COLUMN
        parts = string_literal(d, format_participants(participants)) + ", IF(@@foreign_key_checks = 1, " + _owner_literal(table) + ", NULL)"
    if d == MYSQL:
        out = [
            "INSERT INTO " + TABLE_NAME + " (" + cols + ") VALUES (" + _literal(gtrid) + ", 'C', "
            "IF(@@in_transaction = 1 AND @@GLOBAL.innodb_flush_log_at_trx_commit = 1 AND (@@GLOBAL.log_bin = 0 OR @@GLOBAL.sync_binlog = 1) AND "
            "TIMESTAMPDIFF(MICROSECOND, @tandem_began, UTC_TIMESTAMP(6)) < " + us + " AND "
            "(UNIX_TIMESTAMP(SYSDATE(6)) - @tandem_began_s) * 1000000 < " + us + ", @tandem_began, NULL), " + parts + ")"
        ]
    else:
        out = [
            "SET LOCAL synchronous_commit = on",
            "INSERT INTO " + TABLE_NAME + " (gtrid, outcome, began_at, participants) VALUES (" + _literal(gtrid) + ", 'C', "
            "CASE WHEN clock_timestamp() - now() < interval '" + us + " microseconds' AND current_setting('fsync') = 'on' THEN now() END, "
            + parts + ")",
        ]
    if forget:
        out.append(forget_statement(d, forget))
    if d == MYSQL and xa:
        return out + ["XA END " + xa, "XA COMMIT " + xa + " ONE PHASE"]
    return out + ["COMMIT"]


def ddl(d: str) -> List[str]:
    """The statements that create the decision table and its id table."""
    if d == MYSQL:
        return [
            "CREATE TABLE IF NOT EXISTS " + TABLE_NAME + " ("
            "gtrid CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY, "
            "outcome CHAR(1) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, "
            "began_at DATETIME(6) NOT NULL, "
            "decided_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)), "
            "participants TEXT CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '', "
            "CONSTRAINT " + TABLE_NAME + "_outcome CHECK (outcome IN ('C','A'))"
            ") ENGINE=InnoDB",
            "CREATE TABLE IF NOT EXISTS " + ID_TABLE_NAME + " ("
            "one TINYINT NOT NULL DEFAULT 1 PRIMARY KEY, "
            "id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, "
            "created_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)), "
            "CONSTRAINT " + ID_TABLE_NAME + "_one CHECK (one = 1), "
            "CONSTRAINT " + ID_TABLE_NAME + "_hex CHECK (id REGEXP '^[0-9a-f]{32}$' AND id <> '00000000000000000000000000000000')"
            ") ENGINE=InnoDB",
        ]
    return [
        "CREATE TABLE IF NOT EXISTS " + TABLE_NAME + " ("
        'gtrid char(32) COLLATE "C" PRIMARY KEY, '
        "outcome char(1) NOT NULL CHECK (outcome IN ('C','A')), "
        "began_at timestamptz NOT NULL, "
        "decided_at timestamptz NOT NULL DEFAULT clock_timestamp(), "
        "participants text COLLATE \"C\" NOT NULL DEFAULT '')",
        "CREATE TABLE IF NOT EXISTS " + ID_TABLE_NAME + " ("
        "one boolean PRIMARY KEY DEFAULT true CHECK (one), "
        "id char(32) COLLATE \"C\" NOT NULL CHECK (id ~ '^[0-9a-f]{32}$' AND id <> '00000000000000000000000000000000'), "
        "created_at timestamptz NOT NULL DEFAULT clock_timestamp())",
    ]


def durability_query(d: str) -> str:
    if d == MYSQL:
        return "SELECT @@GLOBAL.innodb_flush_log_at_trx_commit, @@GLOBAL.sync_binlog, @@GLOBAL.log_bin"
    return "SHOW fsync"


def id_checked_query(d: str) -> str:
    """One row: the id and 1 when the decision table references that id
    itself (MariaDB: its foreign key; decision.IDCheckedQuery, the same
    text), else 0."""
    if d != MYSQL:
        return "SELECT id, 0 FROM " + ID_TABLE_NAME
    return (
        "SELECT i.id, (SELECT count(*) FROM information_schema.KEY_COLUMN_USAGE k WHERE k.CONSTRAINT_SCHEMA = DATABASE() AND k.TABLE_SCHEMA = DATABASE() AND k.TABLE_NAME = '"
        + TABLE_NAME + "' AND k.CONSTRAINT_NAME = '" + TABLE_NAME + "_table' AND k.COLUMN_NAME = '" + TABLE_ID_COLUMN
        + "' AND k.REFERENCED_TABLE_SCHEMA = DATABASE() AND k.REFERENCED_TABLE_NAME = '" + ID_TABLE_NAME + "' AND k.REFERENCED_COLUMN_NAME = 'id') FROM " + ID_TABLE_NAME + " i"
    )


def read_id_query(d: str) -> str:
    """The read of the table's id that checks, on PostgreSQL, that both
    tables resolve to one schema (decision.ReadID)."""
    if d == POSTGRES:
        return "SELECT i.id, " + _pg_schemas("i") + " FROM " + ID_TABLE_NAME + " i"
    return "SELECT id FROM " + ID_TABLE_NAME


def lookup_query(d: str, g: str, want: str) -> str:
    """The read of g's row with the table's id (and, on PostgreSQL, both
    tables' schemas) in one statement; want "" reads the row alone."""
    if not want:
        return "SELECT outcome FROM " + TABLE_NAME + " WHERE gtrid = " + _literal(g)
    if d == POSTGRES:
        return "SELECT i.id, d.outcome, " + _pg_schemas("i") + " FROM " + ID_TABLE_NAME + " i LEFT JOIN " + TABLE_NAME + " d ON d.gtrid = " + _literal(g)
    return "SELECT i.id, d.outcome FROM " + ID_TABLE_NAME + " i LEFT JOIN " + TABLE_NAME + " d ON d.gtrid = " + _literal(g)


def abort_insert(d: str, g: str, want: str) -> str:
    """The key: the insert of (g, 'A'), the table's id checked in it."""
    end = "UTC_TIMESTAMP(6))" if d == MYSQL else "clock_timestamp())"
    return "INSERT INTO " + TABLE_NAME + " (gtrid, outcome, participants, began_at) VALUES (" + _literal(g) + ", 'A', " + checked_value(d, "''", want) + ", " + end


def bounded_statements(d: str, stmts: List[str], lock_timeout: float) -> Tuple[List[str], List[str], List[str]]:
    """stmts run as the Go package's execBounded runs them: in a transaction
    of their own, durably (PostgreSQL: synchronous_commit on), every lock
    wait bounded by lock_timeout (PostgreSQL lock_timeout; MySQL/MariaDB
    innodb_lock_wait_timeout and lock_wait_timeout, whole seconds rounded
    up, at least 1, the session's own values restored after). Returned as (statements before the
    transaction, the transaction's statements, statements after it); the
    transaction is begun and committed by the caller's driver."""
    if d == MYSQL:
        secs = max(int(-(-lock_timeout // 1)), 1)
        n = str(secs)
        # Row locks (innodb_lock_wait_timeout) and table locks: LOCK TABLES,
        # DDL, a backup stage (metadata locks, lock_wait_timeout).
        return (
            ["SET @tandem_lwt = @@SESSION.innodb_lock_wait_timeout, @tandem_mdl = @@SESSION.lock_wait_timeout, "
             "SESSION innodb_lock_wait_timeout = " + n + ", SESSION lock_wait_timeout = " + n],
            list(stmts),
            ["SET SESSION innodb_lock_wait_timeout = @tandem_lwt, SESSION lock_wait_timeout = @tandem_mdl"],
        )
    ms = max(int(lock_timeout * 1000), 1)
    return [], ["SET LOCAL lock_timeout = " + str(ms), "SET LOCAL synchronous_commit = on"] + list(stmts), []


def resolve_statements(d: str, g: str, want: str, lock_timeout: float) -> Tuple[List[str], List[str], List[str]]:
    """Taking the key: its insert, bounded (bounded_statements)."""
    return bounded_statements(d, [abort_insert(d, g, want)], lock_timeout)


def forget_statements(d: str, gs: Sequence[str]) -> Tuple[List[str], List[str], List[str]]:
    """Forgetting a batch: its DELETE, bounded by GC_LOCK_WAIT."""
    return bounded_statements(d, [forget_statement(d, gs)], GC_LOCK_WAIT)


# --- errors ---------------------------------------------------------------------


def _is_duplicate(e: BaseException) -> bool:
    return _db.pg_code(e) == "23505" or _db.my_code(e) == 1062


def _is_bad_null(e: BaseException, col: str) -> bool:
    if _db.pg_code(e) == "23502":
        return getattr(getattr(e, "diag", None), "column_name", None) == col
    return _db.my_code(e) == 1048 and ("'" + col + "'") in _db.my_message(e)


def _is_lock_timeout(e: BaseException) -> bool:
    return _db.pg_code(e) == "55P03" or _db.my_code(e) == 1205


def _is_deadlock(e: BaseException) -> bool:
    return _db.pg_code(e) == "40P01" or _db.my_code(e) == 1213


def _is_no_table(e: BaseException) -> bool:
    return _db.pg_code(e) == "42P01" or _db.my_code(e) == 1146


def refused(e: Optional[BaseException]) -> Optional[str]:
    """Why the database refused to record the decision (its INSERT failed,
    so the COMMIT did not run and the commit point did NOT commit), or None
    when e is something else, which leaves the outcome unknown."""
    if e is None:
        return None
    if _is_duplicate(e):
        return REFUSED_DUPLICATE
    if _is_bad_null(e, "began_at"):
        return REFUSED_TOO_OLD
    if _is_bad_null(e, "participants"):
        return REFUSED_WRONG_TABLE
    msg = _db.my_message(e)
    if (_db.my_code(e) == 1452 and "_table` FOREIGN KEY (`" + TABLE_ID_COLUMN + "`) REFERENCES" in msg) or (
        _db.my_code(e) == 1054 and "'" + TABLE_ID_COLUMN + "'" in msg
    ):
        return REFUSED_WRONG_TABLE  # the table's reference to its id, or a table older than it
    if _is_bad_null(e, TABLE_ID_COLUMN):
        return REFUSED_UNCHECKED
    return None


def _explain(what: str, e: BaseException) -> DecisionError:
    if _is_no_table(e):
        return DecisionError(
            "decision: %s: table %s or %s does not exist: run `tandem init-rm` or start the coordinator, which creates them: %s"
            % (what, TABLE_NAME, ID_TABLE_NAME, e)
        )
    return DecisionError("decision: %s: %s" % (what, e))


# --- operations (on a connection of the RM's own, in autocommit mode) ------------


def read_id(d: str, conn: Any) -> str:
    """The id of the decision table conn reaches (decision.ReadID)."""
    try:
        row = _db.read_row(d, conn, read_id_query(d))
    except Exception as e:
        if _is_no_table(e):
            raise NoID("decision: the database has no decision-table id (%s does not exist): run `tandem init-rm`: %s" % (ID_TABLE_NAME, e)) from e
        raise DecisionError("decision: read the decision-table id from %s: %s" % (ID_TABLE_NAME, e)) from e
    if row is None:
        raise NoID("decision: the database has no decision-table id (%s has no row): run `tandem init-rm`" % ID_TABLE_NAME)
    if d == POSTGRES:
        ident, d_schema, id_schema = row
        if d_schema is None:
            raise NoID("decision: %s is not on this connection's search path; %s is in schema %s" % (TABLE_NAME, ID_TABLE_NAME, id_schema))
        if d_schema != id_schema:
            raise WrongTable(
                "decision: wrong decision table: on this connection's search path %s resolves to schema %s, but %s is in schema %s"
                % (TABLE_NAME, d_schema, ID_TABLE_NAME, id_schema)
            )
    else:
        ident = row[0]
    try:
        return check_owner(str(ident).strip())
    except ValueError as e:
        raise DecisionError("decision: the id in %s is not an id (%s): inspect the table" % (ID_TABLE_NAME, e)) from e


def ensure(d: str, conn: Any) -> None:
    """Creates the decision table and its id table if missing, adds the
    participants column to an old table, and gives the id table its row
    (decision.Ensure)."""
    for s in ddl(d):
        try:
            _db.exec_text(d, conn, s).close()
        except Exception as e:
            if d == POSTGRES and _db.pg_code(e) in ("23505", "42P07"):
                continue  # two CREATE TABLE IF NOT EXISTS at once: the table exists
            raise DecisionError(
                "decision: create the tables %s and %s: %s; the database user needs the CREATE privilege (or run tandem init-rm)"
                % (TABLE_NAME, ID_TABLE_NAME, e)
            ) from e
    if d == MYSQL:
        q = ("SELECT count(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = '" + TABLE_NAME + "' AND COLUMN_NAME = 'participants'")
        alter = "ALTER TABLE " + TABLE_NAME + " ADD COLUMN participants TEXT CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT ''"
    else:
        q = "SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass('" + TABLE_NAME + "') AND attname = 'participants' AND NOT attisdropped"
        alter = "ALTER TABLE " + TABLE_NAME + " ADD COLUMN IF NOT EXISTS participants text COLLATE \"C\" NOT NULL DEFAULT ''"
    row = _db.read_row(d, conn, q)
    if not row or not row[0]:
        try:
            _db.exec_text(d, conn, alter).close()
        except Exception as e:
            if not (_db.pg_code(e) == "42701" or _db.my_code(e) == 1060):
                raise DecisionError("decision: add the participants column to %s: %s" % (TABLE_NAME, e)) from e
    try:
        read_id(d, conn)
        return
    except WrongTable:
        raise
    except DecisionError:
        pass
    fresh = secrets.token_hex(16)  # a random id (xid.NewOwner)
    if d == MYSQL:
        ins = "INSERT IGNORE INTO " + ID_TABLE_NAME + " (id) VALUES ('" + fresh + "')"
    else:
        ins = "INSERT INTO " + ID_TABLE_NAME + " (id) VALUES ('" + fresh + "') ON CONFLICT DO NOTHING"
    _db.exec_text(d, conn, ins).close()
    read_id(d, conn)


def check_durable(d: str, read: Callable[[str], Optional[Sequence[Any]]]) -> Optional[str]:
    """Why the database may NOT be a commit point (its committed decision
    could be lost in a crash), or None when it may."""
    row = read(durability_query(d))
    if d == MYSQL:
        flush, sync_binlog, log_bin = (int(x) if x is not None else 0 for x in row)
        if flush != 1:
            return (
                "decision: innodb_flush_log_at_trx_commit is %d, so a committed decision can be lost in a crash: "
                "set innodb_flush_log_at_trx_commit=1, or do not make this database a commit point" % flush
            )
        if log_bin == 1 and sync_binlog != 1:
            return (
                "decision: the binary log is on and sync_binlog is %d, so a committed decision can be lost in a crash: "
                "set sync_binlog=1, or do not make this database a commit point" % sync_binlog
            )
        return None
    if row[0] != "on":
        return "decision: fsync is %s, so a committed decision can be lost in a crash: set fsync = on, or do not make this database a commit point" % row[0]
    return None


def lookup(d: str, conn: Any, g: str, want: str) -> Optional[str]:
    """The recorded outcome of g ('C' or 'A'), or None when there is no row.
    With want, the table's id is read in the same statement (WrongTable on
    another). It decides nothing: only resolve() may act on an absence."""
    try:
        row = _db.read_row(d, conn, lookup_query(d, g, want))
    except Exception as e:
        raise _explain("read the decision of gtrid " + g, e) from e
    if not want:
        outcome = row[0] if row else None
    else:
        if row is None:
            raise NoID("decision: the database has no decision-table id (%s has no row)" % ID_TABLE_NAME)
        ident, outcome = str(row[0]).strip(), row[1]
        if d == POSTGRES and (row[2] is None or row[2] != row[3]):
            raise WrongTable("decision: read the decision of gtrid %s: %s and %s are not in one schema on this search path" % (g, TABLE_NAME, ID_TABLE_NAME))
        if ident != want:
            raise WrongTable(
                "decision: wrong decision table: read the decision of gtrid %s: expected decision table %s, this database's is %s"
                % (g, want, ident)
            )
    if outcome is None:
        return None
    outcome = outcome.decode() if isinstance(outcome, (bytes, bytearray)) else str(outcome)
    if outcome in (COMMITTED, ABORTED):
        return outcome
    raise DecisionError("decision: gtrid %s has outcome %r in %s, want C or A: inspect the table" % (g, outcome, TABLE_NAME))


def resolve(d: str, connect: Callable[[], Any], g: str, want: str, lock_timeout: float = 2.0) -> str:
    """Takes the key for g on a new connection (connect()): inserts (g, 'A')
    and commits, with a bounded lock wait. Returns 'A' when the insert
    succeeded (no 'C' can ever be committed for g now), the recorded outcome
    when a row exists; raises Pending while the commit point's transaction
    holds the key, Vanished when the row was gone by the read, WrongTable on
    another table. Any other error says nothing about the outcome."""
    check_gtrid(g)
    before, body, after = resolve_statements(d, g, want, lock_timeout)
    last: Optional[BaseException] = None
    for _ in range(5):
        conn = connect()
        try:
            _db.make_autocommit(d, conn)
            err = _insert_abort(d, conn, before, body, after)
            if err is None:
                return ABORTED
            if _is_lock_timeout(err):
                raise Pending("decision: the commit point's transaction is still open (gtrid %s, lock wait %ss): %s" % (g, lock_timeout, err)) from err
            if _is_deadlock(err):
                last = err
                continue
            if _is_bad_null(err, "participants"):
                try:
                    got = read_id(d, conn)
                except Exception as e2:
                    raise WrongTable("decision: record abort for gtrid %s: expected decision table %s, and this database's id cannot be read (%s)" % (g, want, e2)) from err
                raise WrongTable("decision: wrong decision table: record abort for gtrid %s: expected decision table %s, this database's is %s" % (g, want, got)) from err
            if not _is_duplicate(err):
                raise _explain("record abort for gtrid " + g, err) from err
            o = lookup(d, conn, g, want)
            if o is None:
                raise Vanished("decision: the gtrid's decision row was deleted while it was read (gtrid %s): the outcome is unknown here, and is NOT abort" % g)
            return o
        finally:
            _db.close_conn(conn)
    raise DecisionError("decision: record abort for gtrid %s: no outcome after 5 attempts (deadlocks); try again: %s" % (g, last))


def _insert_abort(d: str, conn: Any, before: List[str], body: List[str], after: List[str]) -> Optional[BaseException]:
    """Runs the key's transaction; returns the database's error, or None."""
    try:
        _exec_bounded(d, conn, before, body, after)
    except Exception as e:
        if not _db.server_said_no(e):
            raise
        return e
    return None


def _exec_bounded(d: str, conn: Any, before: List[str], body: List[str], after: List[str]) -> int:
    """Runs bounded_statements' three parts on conn (autocommit): the
    transaction rolled back on an error, which is raised; the statements
    after it (restoring the session's lock wait) run either way; a
    connection whose restore failed is closed. Returns the rows the last
    statement affected."""
    for s in before:
        _db.exec_text(d, conn, s).close()
    try:
        try:
            _db.exec_text(d, conn, "BEGIN").close()
            n = 0
            for s in body:
                cur = _db.exec_text(d, conn, s)
                n = cur.rowcount
                cur.close()
            _db.exec_text(d, conn, "COMMIT").close()
            return max(n, 0)
        except Exception:
            try:
                _db.exec_text(d, conn, "ROLLBACK").close()
            except Exception:
                pass
            raise
    finally:
        for s in after:
            try:
                _db.exec_text(d, conn, s).close()
            except Exception:
                _db.close_conn(conn)


def forget(d: str, conn: Any, gs: Sequence[str]) -> int:
    """Deletes the 'C' rows of gs at least FORGET_MIN_AGE old, in batches of
    FORGET_BATCH, each in a transaction of its own whose lock waits last at
    most GC_LOCK_WAIT; returns how many rows it deleted."""
    n = 0
    for i in range(0, len(gs), FORGET_BATCH):
        batch = list(gs[i : i + FORGET_BATCH])
        try:
            n += _exec_bounded(d, conn, *forget_statements(d, batch))
        except Exception as e:
            if _is_lock_timeout(e):
                raise DecisionError(
                    "decision: forget committed decisions: a row of %s stayed locked by another transaction for %ss (an open commit point's; "
                    "the rows are deleted by a later batch or sweep): %s" % (TABLE_NAME, GC_LOCK_WAIT, e)
                ) from e
            raise _explain("forget committed decisions", e) from e
    return n
