"""What the client knows of each kind of database: the SQL of every step of a
branch's life (the Go package internal/rm's dialects, statement for
statement), and how to tell the database's own answer from a broken
connection, for psycopg 3 (PostgreSQL) and PyMySQL (MySQL/MariaDB)."""

from __future__ import annotations

import os
import socket
from typing import Any, Callable, List, Optional, Sequence

from .xid import BranchName, check_gtrid

POSTGRES = "postgres"
MYSQL = "mysql"


def parse_driver(s: str) -> str:
    """The driver of a resource manager: "postgres" or "mysql" (aliases as
    the coordinator's: postgresql, pgx; mariadb)."""
    if s in ("postgres", "postgresql", "pgx"):
        return POSTGRES
    if s in ("mysql", "mariadb"):
        return MYSQL
    raise ValueError("tandem: unknown driver %r: use %r or %r" % (s, POSTGRES, MYSQL))


class PrepareRolledBack(Exception):
    """PostgreSQL answered PREPARE TRANSACTION with ROLLBACK: the transaction
    had failed, and is rolled back (a definite answer)."""


# --- errors -----------------------------------------------------------------


def pg_code(e: BaseException) -> Optional[str]:
    """The SQLSTATE of a psycopg error the server sent, else None."""
    code = getattr(e, "sqlstate", None)
    if code and _is_psycopg_error(e):
        return code
    return None


def my_code(e: BaseException) -> int:
    """The error number of a MySQL/MariaDB server error (PyMySQL), else 0.
    Numbers 2000-2999 are the client library's own (lost connection, …):
    not the server's answer."""
    if not _is_pymysql_error(e):
        return 0
    args = getattr(e, "args", ())
    if args and isinstance(args[0], int):
        n = args[0]
        if 0 < n < 2000 or n >= 3000:
            return n
    return 0


def my_message(e: BaseException) -> str:
    args = getattr(e, "args", ())
    return str(args[1]) if len(args) > 1 else str(e)


def server_said_no(e: BaseException) -> bool:
    """Whether the database itself refused the statement with e (so its
    effect is known: it did not happen), as opposed to a broken connection,
    a timeout, or an error that ended the session (session_ended), which
    can come after the statement ran."""
    if session_ended(e):
        return False
    return pg_code(e) is not None or my_code(e) != 0 or isinstance(e, PrepareRolledBack)


#: MySQL/MariaDB errors that end the session or interrupt the statement
#: rather than refuse it: server shutdown in progress (1053), query execution
#: was interrupted (1317), connection was killed (1927), MySQL's session was
#: killed (3169). The Go SDK's sessionEnded.
MY_SESSION_ENDED = (1053, 1317, 1927, 3169)


def session_ended(e: BaseException) -> bool:
    """Whether e is the server ending the session (PostgreSQL's FATAL or
    PANIC: 57P01 comes once a backend terminated while its commit waited
    for a synchronous standby has committed locally; MySQL/MariaDB's
    MY_SESSION_ENDED). A COMMIT answered so may have run."""
    if pg_code(e) is not None:
        diag = getattr(e, "diag", None)
        sev = getattr(diag, "severity_nonlocalized", None) or getattr(diag, "severity", None)
        return sev in ("FATAL", "PANIC")
    return my_code(e) in MY_SESSION_ENDED


def pg_statement_failed(e: BaseException) -> bool:
    """Whether e is PostgreSQL's ERROR for a statement (the simple protocol
    skips the statements after it; a failed COMMIT rolls back). A FATAL or
    PANIC is not: it ends the session, and can come after a COMMIT ran."""
    if pg_code(e) is None:
        return False
    diag = getattr(e, "diag", None)
    sev = getattr(diag, "severity_nonlocalized", None) or getattr(diag, "severity", None)
    return sev == "ERROR"


def _is_psycopg_error(e: BaseException) -> bool:
    try:
        import psycopg
    except ImportError:  # pragma: no cover
        return False
    return isinstance(e, psycopg.Error)


def _is_pymysql_error(e: BaseException) -> bool:
    try:
        import pymysql
    except ImportError:  # pragma: no cover
        return False
    return isinstance(e, pymysql.err.MySQLError)


# --- dialects -----------------------------------------------------------------


class Dialect:
    driver = ""
    session_bound = False

    def begin(self, b: BranchName) -> str:
        raise NotImplementedError

    def prepare(self, b: BranchName) -> List[str]:
        raise NotImplementedError

    def commit_one_phase(self, b: BranchName) -> List[str]:
        raise NotImplementedError

    def rollback_active(self, b: BranchName) -> List[str]:
        raise NotImplementedError

    def commit_prepared(self, b: BranchName) -> str:
        raise NotImplementedError

    def rollback_prepared(self, b: BranchName) -> str:
        raise NotImplementedError

    def read_only_query(self) -> str:
        return ""

    def is_not_found(self, e: BaseException) -> bool:
        raise NotImplementedError


class PostgresDialect(Dialect):
    """PostgreSQL's two-phase commit: a branch is an ordinary transaction
    (BEGIN) that PREPARE TRANSACTION 'gid' turns into a prepared one, settled
    later from any session of the same role."""

    driver = POSTGRES
    session_bound = False

    def begin(self, b):
        return "BEGIN"

    def prepare(self, b):
        return ["PREPARE TRANSACTION '" + b.postgres_gid() + "'"]

    def commit_one_phase(self, b):
        return ["COMMIT"]

    def rollback_active(self, b):
        return ["ROLLBACK"]

    def commit_prepared(self, b):
        return "COMMIT PREPARED '" + b.postgres_gid() + "'"

    def rollback_prepared(self, b):
        return "ROLLBACK PREPARED '" + b.postgres_gid() + "'"

    def read_only_query(self):
        return "SELECT txid_current_if_assigned() IS NULL"

    def is_not_found(self, e):
        # 42704 undefined_object: "prepared transaction with identifier ... does not exist"
        return pg_code(e) == "42704"


class MySQLDialect(Dialect):
    """The XA statements of MySQL and MariaDB. MariaDB keeps a prepared XA
    branch bound to the preparing session until it ends (session_bound):
    only that session can settle it meanwhile."""

    driver = MYSQL
    session_bound = True

    def begin(self, b):
        return "XA START " + b.mysql_xid()

    def prepare(self, b):
        x = b.mysql_xid()
        return ["XA END " + x, "XA PREPARE " + x]

    def commit_one_phase(self, b):
        x = b.mysql_xid()
        return ["XA END " + x, "XA COMMIT " + x + " ONE PHASE"]

    def rollback_active(self, b):
        x = b.mysql_xid()
        return ["XA END " + x, "XA ROLLBACK " + x]

    def commit_prepared(self, b):
        return "XA COMMIT " + b.mysql_xid()

    def rollback_prepared(self, b):
        return "XA ROLLBACK " + b.mysql_xid()

    def is_not_found(self, e):
        return my_code(e) == 1397  # XAER_NOTA: Unknown XID


def dialect_for(driver: str) -> Dialect:
    return PostgresDialect() if driver == POSTGRES else MySQLDialect()


# --- connections ----------------------------------------------------------------


def multi_statements(driver: str, conn: Any) -> bool:
    """Whether statements joined with "; " go in one round trip on conn:
    always on PostgreSQL (the simple query protocol, no parameters), on
    MySQL/MariaDB when PyMySQL was given client_flag=CLIENT.MULTI_STATEMENTS.
    Either way the server stops at the first failing statement."""
    if driver == POSTGRES:
        return True
    from pymysql.constants import CLIENT

    return bool(getattr(conn, "client_flag", 0) & CLIENT.MULTI_STATEMENTS)


def exec_text(driver: str, conn: Any, sql: str):
    """Runs sql (one statement, or several joined with "; " where the
    connection allows) with no parameters, reading every result, and raises
    the first error (the server ran nothing after it). Returns the cursor."""
    cur = conn.cursor()
    try:
        if driver == POSTGRES:
            cur.execute(sql, prepare=False)  # no parameters: the simple query protocol
        else:
            cur.execute(sql)
            while cur.nextset():
                pass
    except BaseException:
        _close_quietly(cur)
        raise
    return cur


def read_row(driver: str, conn: Any, sql: str) -> Optional[Sequence[Any]]:
    """The first row of sql on conn, or None."""
    cur = conn.cursor()
    try:
        if driver == POSTGRES:
            cur.execute(sql, prepare=False)
        else:
            cur.execute(sql)
        row = cur.fetchone()
        if driver == MYSQL:
            while cur.nextset():
                pass
        return row
    finally:
        _close_quietly(cur)


def make_autocommit(driver: str, conn: Any) -> None:
    """Puts an application's connection in autocommit mode, so that the
    client runs its own BEGIN / XA START. Refuses one with an open
    transaction (its work would be committed or lost)."""
    if driver == POSTGRES:
        from psycopg import pq

        st = conn.info.transaction_status
        if st != pq.TransactionStatus.IDLE:
            raise ValueError(
                "tandem: the PostgreSQL connection is inside a transaction (status %s): commit or roll it back "
                "before giving it to a global transaction" % (st.name,)
            )
        if not conn.autocommit:
            conn.autocommit = True
        return
    from pymysql.constants import SERVER_STATUS

    if conn.server_status & SERVER_STATUS.SERVER_STATUS_IN_TRANS:
        raise ValueError(
            "tandem: the MySQL/MariaDB connection is inside a transaction: commit or roll it back (or open it with "
            "autocommit=True) before giving it to a global transaction"
        )
    if not conn.get_autocommit():
        conn.autocommit(True)


def pg_tx_status(conn: Any) -> str:
    """PostgreSQL's transaction status as the backend last said (no round
    trip): 'I' idle, 'T' in a transaction block, 'E' failed, '' unknown or busy."""
    from psycopg import pq

    st = conn.info.transaction_status
    return {
        pq.TransactionStatus.IDLE: "I",
        pq.TransactionStatus.INTRANS: "T",
        pq.TransactionStatus.INERROR: "E",
    }.get(st, "")


#: The custom setting a PostgreSQL branch's transaction carries from its
#: BEGIN (SET LOCAL, gone when the transaction ends): what tells the branch's
#: transaction from another on the same session.
PG_MARKER = "tandem.branch"
PG_GUARD_TEXT = "tandem: this session's transaction is not the branch's"


def pg_mark(gtrid: str) -> str:
    """The statement sent with a PostgreSQL branch's BEGIN: marks the
    transaction as gtrid's."""
    return "SET LOCAL " + PG_MARKER + " = '" + check_gtrid(gtrid) + "'"


def pg_guard(gtrid: str) -> str:
    """A statement that fails (22P02, PG_GUARD_TEXT) unless the session's
    transaction carries gtrid's mark: sent in the same round trip before
    PREPARE TRANSACTION, a commit point's decision or a one-phase COMMIT, so
    that the simple query protocol skips them on another transaction. (The
    cast is outside the CASE: a constant ELSE arm would be folded, and fail,
    at planning.)"""
    return (
        "SELECT (CASE WHEN current_setting('" + PG_MARKER + "', true) = '" + check_gtrid(gtrid) + "' THEN '1' ELSE '"
        + PG_GUARD_TEXT.replace("'", "''") + "' END)::int"
    )


def pg_marked(gtrid: str) -> str:
    """An SQL boolean: whether the session's transaction carries gtrid's mark."""
    return "coalesce(current_setting('" + PG_MARKER + "', true), '') = '" + check_gtrid(gtrid) + "'"


def pg_guard_failed(e: BaseException) -> bool:
    """Whether e is pg_guard's refusal."""
    return pg_code(e) == "22P02" and PG_GUARD_TEXT in str(e)


def my_thread_id(conn: Any) -> Optional[int]:
    """The server's id of a PyMySQL connection's session (from its
    handshake; no round trip), None when closed. A reconnect changes it."""
    if getattr(conn, "_sock", None) is None:
        return None
    try:
        return int(conn.thread_id())
    except Exception:
        return None


def my_in_transaction(conn: Any) -> bool:
    """Whether the server's last answer on a PyMySQL connection said its
    session is inside a transaction (SERVER_STATUS_IN_TRANS; no round
    trip). An XA branch sets it from XA START to its end."""
    from pymysql.constants import SERVER_STATUS

    return bool(getattr(conn, "server_status", 0) & SERVER_STATUS.SERVER_STATUS_IN_TRANS)


def interrupter(driver: str, conn: Any) -> Optional[Callable[[], None]]:
    """A function that, called from another thread, makes a call blocked on
    conn return at once with a connection error: it shuts the connection's
    socket down (both directions; the driver's own thread then reads EOF
    and closes it). Made on the connection's thread, before the call (it
    reads the socket there). None when conn has no open socket."""
    if driver == MYSQL:
        sock = getattr(conn, "_sock", None)
        if sock is None:
            return None

        def stop_my():
            sock.shutdown(socket.SHUT_RDWR)

        return stop_my
    try:
        fd = conn.pgconn.socket
    except Exception:
        return None
    if fd is None or fd < 0:
        return None

    def stop_pg():
        s = socket.socket(fileno=os.dup(fd))
        try:
            s.shutdown(socket.SHUT_RDWR)
        finally:
            s.close()

    return stop_pg


def close_conn(conn: Any) -> None:
    """Ends the session now (the database rolls back an open transaction; a
    session-bound prepared branch is detached, for any connection, the
    coordinator's included, to settle). Never raises."""
    try:
        if hasattr(conn, "_force_close"):  # PyMySQL: drop the socket, no COM_QUIT round trip
            conn._force_close()
        else:
            conn.close()
    except Exception:
        pass


def _close_quietly(cur: Any) -> None:
    try:
        cur.close()
    except Exception:
        pass
