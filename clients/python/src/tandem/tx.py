"""A global transaction (Tx) and its branches (Branch): the Go SDK's commit
paths, step for step (client/tx.go, branch.go, cp_choice.go,
commit_onephase.go, commit_point.go, commit_coordinator.go, prepare.go,
phase2.go).

At commit:
- no branch wrote: each commits locally (path "local");
- one wrote: it commits in one phase, the others locally (path
  "one-phase"); no coordinator call;
- two or more, with a commit point (a MariaDB/MySQL branch that began as
  the transaction's own XA branch, or a PostgreSQL writer): the others
  prepare, then the commit point inserts its decision row and commits in
  one round trip; that local commit is the decision (path "commit-point");
  no coordinator call;
- otherwise every writer prepares and one Commit RPC decides (path
  "two-phase").
A PostgreSQL branch that only ran query() and wrote nothing (asked at
commit) commits locally and leaves the protocol.
"""

from __future__ import annotations

import contextlib
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, List, Optional, Sequence, Tuple

from . import _classify, _db, _failpoint, decision
from ._coord import Closed, GaveUp, LogFull, NoPrimary, Rejected, UnknownAfter, Failed
from ._db import MYSQL, POSTGRES, PrepareRolledBack
from .client import AUTO, COORDINATOR, RM_, CommitOptions, _RMInfo
from .errors import (
    Aborted,
    BranchEndedOutside,
    BranchFailed,
    NoCoordinator,
    OutcomeUnknown,
    RollbackFailed,
    SessionChanged,
    StatementRefused,
    TandemError,
    TxDone,
)
from .xid import BranchName, commit_point_self

#: The longest a database call of phase 2 (committing or rolling back a
#: prepared branch) or of a rollback may take (seconds), as the Go SDK's:
#: past it the connection is cut (its socket shut down), and the branch is
#: left to the coordinator's recovery.
PHASE2_TIMEOUT = 10.0

LOCAL = "local"
ONE_PHASE = "one-phase"
TWO_PHASE = "two-phase"
COMMIT_POINT = "commit-point"

# Branch states; transitions only move forward.
IDLE, ACTIVE, PREPARED, IN_DOUBT, COMMITTED, ROLLED_BACK, HANDED_OVER = range(7)

# Transaction states.
_ACTIVE, _FINISHING, _COMMITTED, _ABORTED, _UNKNOWN = range(5)


@dataclass
class Result:
    """How a transaction committed. path is "local", "one-phase",
    "two-phase" or "commit-point" (commit_point names the RM that
    decided). phase2_pending: the decision is durable but a prepared branch
    was not committed yet (a database slow or down); the coordinator's scan
    finishes it. ended_sessions: the RMs whose connections commit() closed
    because the coordinator took their prepared branches over
    (CommitOptions.may_take_over): open new ones."""

    gtrid: str
    path: str = ""
    phase2_pending: bool = False
    commit_point: str = ""
    coordinator_calls: int = 0
    round_trips: List[Tuple[str, int]] = field(default_factory=list)
    ended_sessions: List[str] = field(default_factory=list)

    @property
    def rm_round_trips(self) -> int:
        """Round trips made to the databases for this transaction."""
        return sum(n for _, n in self.round_trips)


class _Joined(Exception):
    def __init__(self, errs: Sequence[BaseException]):
        self.errors = list(errs)
        super().__init__("; ".join(str(e) or type(e).__name__ for e in errs))


def _joined(errs: Sequence[Optional[BaseException]]) -> Optional[BaseException]:
    errs = [e for e in errs if e is not None]
    if not errs:
        return None
    return errs[0] if len(errs) == 1 else _Joined(errs)


class PhaseTimeout(Exception):
    """A bounded database call (phase 2, rollback) got no answer in time; its
    connection was cut."""


class _Wrapped(Exception):
    """An error with the RM it came from named."""

    def __init__(self, rm: str, what: str, e: BaseException):
        self.rm, self.error = rm, e
        super().__init__("rm %r: %s: %s" % (rm, what, str(e).strip() or type(e).__name__))
        self.__cause__ = e


class Branch:
    """The part of a global transaction on one resource manager, on the
    application's own connection. Every statement of the branch goes through
    it (execute, query) so that it begins with its first statement, in the
    same round trip where the driver allows. Not safe for concurrent use,
    like the connection beneath it."""

    def __init__(self, tx: "Tx", info: _RMInfo, conn: Any):
        self.tx = tx
        self.rm = info
        self.conn = conn
        self.id = BranchName(tx.gtrid, info.name)
        self.state = IDLE
        self.wrote = False
        self.self_cp = False
        self.form_chosen = False
        # The coordinator's Commit named it client_settles: the client commits
        # or rolls it back itself after the decision (always a session-bound one).
        self.client_settles = False
        self.trips = 0
        self.last_err: Optional[BaseException] = None
        self._mu = threading.RLock()
        self._pending = None  # a MySQL cursor whose later result sets are not read yet
        self._session: Optional[int] = None  # MySQL: the thread id of the session the branch began on
        self.ended_outside = ""  # why the branch's transaction ended outside the client ("" it did not)

    @property
    def name(self) -> str:
        """The resource manager's name."""
        return self.rm.name

    # --- statements -------------------------------------------------------------

    def execute(self, sql: str, params: Any = None):
        """Runs a statement that may write (the branch counts as a writer).
        Returns the driver's cursor (rowcount, lastrowid, fetch*). A
        statement text with several statements runs them all; the cursor
        holds the last one's result. Any error dooms the transaction: it can
        then only roll back, and nothing more is sent on the branch."""
        with self._mu:
            self._admit(sql)
            self.wrote = True
            cur = self._run(sql, params, drain=True)
            self._check_after(sql)
            return cur

    def query(self, sql: str, params: Any = None):
        """Runs a statement that returns rows; returns the driver's cursor
        (rows are read into it at once: fetchone, fetchall). A PostgreSQL
        branch that only ran queries is asked at commit whether it wrote,
        and if not it commits locally, out of the two-phase protocol. (A
        MySQL/MariaDB branch that ran any statement counts as a writer.)"""
        with self._mu:
            self._admit(sql)
            cur = self._run(sql, params, drain=False)
            self._check_after(sql)
            return cur

    def executemany(self, sql: str, seq_of_params: Any):
        """Runs a statement once per parameter set (the driver's
        executemany); a write. A branch that has not begun begins first,
        in a round trip of its own."""
        with self._mu:
            self._admit(sql)
            self.wrote = True
            try:
                if self.state == IDLE:
                    self._note_session()
                    self._exec_steps(self._begin_sql())
                    self.state = ACTIVE
                self.trips += 1
                cur = self.conn.cursor()
                cur.executemany(sql, seq_of_params)
                if self.rm.driver == MYSQL:
                    self._after_mysql(cur, True)
            except BaseException as e:
                self._fail(e)
                raise
            self._check_after(sql)
            return cur

    def _admit(self, sql: str) -> None:
        if self.last_err is not None:
            raise BranchFailed("tandem: rm %r: an earlier statement failed: %s" % (self.rm.name, self.last_err)) from self.last_err
        if self.state > ACTIVE:
            raise TxDone("tandem: rm %r: the transaction is finishing or finished" % self.rm.name)
        self._drain()
        self._check_session("")
        if self.state == IDLE:
            self._choose_begin()
        stmt = ""
        if self.rm.driver == POSTGRES:
            stmt = _classify.pg_transaction_control(sql)
            if stmt:
                raise self._fail(StatementRefused(_classify.pg_refusal(self.rm.name, stmt)))
        elif self.self_cp:
            stmt = _classify.ends_transaction(sql)
            if stmt:
                raise self._fail(StatementRefused(_classify.implicit_refusal(self.rm.name, stmt)))

    def _run(self, sql: str, params: Any, drain: bool):
        try:
            if self.state == IDLE:
                return self._begin_with(sql, params, drain)
            self.trips += 1
            cur = self.conn.cursor()
            if self.rm.driver == POSTGRES:
                cur.execute(sql, params)
            else:
                cur.execute(sql, params)
                self._after_mysql(cur, drain)
            return cur
        except BaseException as e:
            self._fail(e)
            raise

    def _after_mysql(self, cur, drain: bool) -> None:
        if drain:
            while cur.nextset():
                pass
        else:
            self._pending = cur

    def _drain(self) -> None:
        """Reads the result sets a MySQL query left unread (its cursor's, or
        the connection's when the cursor was closed): an error among them
        dooms the transaction."""
        cur, self._pending = self._pending, None
        if self.rm.driver != MYSQL:
            return
        try:
            if cur is not None and getattr(cur, "connection", None) is not None:
                while cur.nextset():
                    pass
            r = getattr(self.conn, "_result", None)
            while r is not None and getattr(r, "has_next", False):
                self.conn.next_result()
                r = getattr(self.conn, "_result", None)
        except BaseException as e:
            self._fail(e)
            raise

    def _begin_with(self, sql: str, params: Any, drain: bool):
        """Sends the begin and the first statement in one round trip:
        PostgreSQL "BEGIN; <sql>" (simple protocol) without parameters, a
        pipeline (BEGIN, then the statement, one Sync) with them;
        MySQL/MariaDB one multi-statement when the connection allows."""
        begin = self._begin_sql()
        if self.rm.driver == POSTGRES:
            import psycopg

            self.state = ACTIVE  # BEGIN goes first: even if the statement fails, rollback must end the block
            if params is None:
                self.trips += 1
                cur = self.conn.cursor()
                cur.execute("; ".join(begin + [sql]), prepare=False)
                for _ in begin:
                    cur.nextset()  # from BEGIN's (and the mark's) result to the statement's
                return cur
            if psycopg.Pipeline.is_supported():
                self.trips += 1
                cur = self.conn.cursor()
                with self.conn.pipeline():
                    for b in begin:
                        self.conn.execute(b, prepare=False)
                    cur.execute(sql, params)
                return cur
            self._exec_steps(begin)
            self.trips += 1
            cur = self.conn.cursor()
            cur.execute(sql, params)
            return cur
        self._note_session()
        if _db.multi_statements(MYSQL, self.conn):
            self.trips += 1
            self.state = ACTIVE  # the begin runs first; if the statement fails the branch is active and rolled back
            cur = self.conn.cursor()
            cur.execute("; ".join(begin + [sql]), params)
            for _ in begin:
                cur.nextset()
            self._after_mysql(cur, drain)
            return cur
        self._exec_steps(begin)
        self.state = ACTIVE
        self.trips += 1
        cur = self.conn.cursor()
        cur.execute(sql, params)
        self._after_mysql(cur, drain)
        return cur

    def _check_after(self, sql: str) -> None:
        self._check_session(sql)

    def _note_session(self) -> None:
        """Notes, just before a MySQL/MariaDB branch's XA START is sent, the
        session it goes to (its thread id, known without a round trip)."""
        if self.rm.driver == MYSQL:
            self._session = _db.my_thread_id(self.conn)

    def _check_session(self, after: str) -> None:
        """An active branch must still be its own transaction on its own
        session, as the server last said (no round trip); otherwise the
        transaction is doomed before anything more is sent. MySQL/MariaDB:
        the same session as at XA START (thread id), still inside a
        transaction -- PyMySQL reconnects on ping(reconnect=True) (by
        default in 1.1.0), and the new session is in autocommit, where a
        branch's statement would commit on its own. PostgreSQL: still inside
        the transaction block."""
        if self.state != ACTIVE:
            return
        if self.rm.driver == MYSQL:
            self._check_mysql_session()
            return
        where = " after %s" % _classify.quote(_classify.clip(after)) if after else ""
        if getattr(self.conn, "closed", False):
            raise self._ended(
                "its connection was closed (psycopg's `with conn:` commits and closes it at the end of its block; conn.close() rolls back)", where
            )
        st = _db.pg_tx_status(self.conn)
        if st in ("", "T"):
            return
        if st == "I":
            raise self._ended(
                "its session is outside any transaction: the transaction was committed or rolled back by conn.commit() / conn.rollback(), "
                "psycopg's `with conn:` or psycopg_pool's `with pool.connection():` at the end of their block, or a statement that ended it",
                where,
            )
        what = "failed: a statement failed inside it, so PostgreSQL will only roll it back"
        raise self._fail(
            BranchFailed(
                "tandem: rm %r: the branch is outside its transaction (the backend's transaction status is %r, %s)%s: "
                "nothing more is sent on it, and the global transaction is rolled back everywhere at commit" % (self.rm.name, st, what, where)
            )
        )

    def _ended(self, why: str, where: str = "") -> BaseException:
        """Records that the branch's transaction ended outside the client
        (the split hazard BranchEndedOutside reports at commit) and returns
        the error that dooms the transaction."""
        if not self.ended_outside:
            self.ended_outside = why
        return self._fail(
            BranchFailed(
                "tandem: rm %r: the branch's transaction ended outside the client%s: %s; nothing more is sent on it, and at commit "
                "the other branches are rolled back" % (self.rm.name, where, why)
            )
        )

    def _guarded(self, stmts: Sequence[str]) -> List[str]:
        """stmts preceded, on PostgreSQL, by the guard that stops them (in
        the same round trip) on a transaction that is not the branch's."""
        if self.rm.driver == POSTGRES:
            return [_db.pg_guard(self.tx.gtrid)] + list(stmts)
        return list(stmts)

    def _guard_met(self, e: BaseException) -> bool:
        """Whether e is the guard's refusal; if so the branch is recorded as
        ended outside the client."""
        if self.rm.driver == POSTGRES and _db.pg_guard_failed(e):
            self._guard_met_text()
            return True
        return False

    def _guard_met_text(self) -> None:
        if not self.ended_outside:
            self.ended_outside = (
                "another transaction runs on its session (the connection went back to a pool, psycopg_pool's `with "
                "pool.connection():` commits at the end of its block, and was taken again?), or the branch's mark "
                "(SET LOCAL %s) was reset (RESET ALL?)" % _db.PG_MARKER
            )

    def _check_mysql_session(self) -> None:
        if self._session is None:
            return
        now = _db.my_thread_id(self.conn)
        why = ""
        if now != self._session:
            why = "its session is not the one the branch began on (thread id %s, now %s): the driver reconnected (ping(reconnect=True)?)" % (
                self._session,
                now,
            )
        elif not _db.my_in_transaction(self.conn):
            why = "the server says its session is outside any transaction"
        if why:
            raise self._fail(
                SessionChanged(
                    "tandem: rm %r: %s; the branch's work went with the old session and anything sent now would commit on its own: "
                    "nothing more is sent on it, and the global transaction is rolled back everywhere at commit" % (self.rm.name, why)
                )
            )

    def _fail(self, e: BaseException) -> BaseException:
        if self.last_err is None:
            self.last_err = e
        return e

    # --- the branch's life --------------------------------------------------------------

    def _choose_begin(self) -> None:
        """Settles, before the begin is sent, how the branch begins (as the
        transaction's commit point or named with it). Once."""
        if self.form_chosen:
            return
        self.form_chosen = True
        self.tx._begin_form(self)
        self.tx._check_postgres(self)
        if self.tx.opts.decide_at != COORDINATOR:
            # A participant under a commit point is listed in the decision row
            # by its table's id: read it now, outside any transaction.
            try:
                self.tx.client._table_id(self.rm, self.conn)
            except Exception:
                pass  # met again at commit

    def _begin_sql(self) -> List[str]:
        if self.self_cp:
            return decision.begin_statements(MYSQL, self.id.mysql_xid())
        if self.rm.driver == POSTGRES:
            return [self.rm.dialect.begin(self.id), _db.pg_mark(self.tx.gtrid)]
        return [self.rm.dialect.begin(self.id)]

    def _exec_steps(self, stmts: Sequence[str]) -> None:
        """Runs statements in order, in one round trip when the connection
        allows several at once; stops at the first error."""
        if len(stmts) > 1 and _db.multi_statements(self.rm.driver, self.conn):
            self.trips += 1
            _db.exec_text(self.rm.driver, self.conn, "; ".join(stmts)).close()
            return
        for s in stmts:
            self.trips += 1
            _db.exec_text(self.rm.driver, self.conn, s).close()

    def _read_only(self) -> bool:
        """Whether an active branch wrote nothing (PostgreSQL asks; MySQL
        cannot tell cheaply: a writer)."""
        q = self.rm.dialect.read_only_query()
        if not q:
            return False
        if self.rm.driver == POSTGRES:
            q += ", " + _db.pg_marked(self.tx.gtrid)  # and whether the transaction is the branch's, in the same round trip
        self.trips += 1
        row = _db.read_row(self.rm.driver, self.conn, q)
        if self.rm.driver == POSTGRES and not row[1]:
            self._guard_met_text()
            return False
        return bool(row[0])

    def _prepare(self) -> None:
        """Phase 1. On PostgreSQL the command tag is checked: PREPARE
        TRANSACTION inside a failed transaction rolls back instead."""
        stmts = self.rm.dialect.prepare(self.id)
        if self.rm.driver == POSTGRES:
            self.trips += 1
            try:
                cur = _db.exec_text(POSTGRES, self.conn, "; ".join(self._guarded(stmts)))
            except BaseException as e:
                self._guard_met(e)
                raise
            cur.nextset()  # from the guard's result to PREPARE's
            tag = cur.statusmessage
            cur.close()
            if tag != "PREPARE TRANSACTION":
                raise PrepareRolledBack("PREPARE TRANSACTION answered %r: the transaction had failed" % tag)
            return
        self._exec_steps(stmts)

    def _commit_decision(self, stmts: Sequence[str]) -> None:
        """The commit point's statements in one round trip: PostgreSQL's
        simple query protocol skips the rest after an error, MySQL/MariaDB
        multi-statements stop at the first error; without multi-statements
        they go one by one, stopping at the first error."""
        if self.rm.driver == POSTGRES:
            self.trips += 1
            try:
                _db.exec_text(POSTGRES, self.conn, "; ".join(self._guarded(stmts))).close()
            except BaseException as e:
                self._guard_met(e)
                raise
            return
        self._exec_steps(stmts)

    def _commit_one_phase(self) -> None:
        """The only writer's one-phase commit (guarded on PostgreSQL)."""
        try:
            self._exec_steps(self._guarded(self.rm.dialect.commit_one_phase(self.id)))
        except BaseException as e:
            self._guard_met(e)
            raise

    @contextlib.contextmanager
    def _bounded(self):
        """Bounds the database calls of its block by PHASE2_TIMEOUT: past it
        the connection's socket is shut down (from the client's watchdog
        thread) and the block's call fails with PhaseTimeout."""
        limit = PHASE2_TIMEOUT
        stop = _db.interrupter(self.rm.driver, self.conn)
        w = self.tx.client._watchdog.start(limit, stop) if stop is not None else None
        try:
            yield
        except BaseException as e:
            if w is not None and w.cancel():
                raise PhaseTimeout("rm %r: no answer within %gs: the connection was cut (%s)" % (self.rm.name, limit, e)) from e
            raise
        if w is not None:
            w.cancel()

    def _bounded_steps(self, stmts: Sequence[str]) -> None:
        with self._bounded():
            self._exec_steps(stmts)

    def _release_session(self) -> None:
        """Closes the branch's connection: an open transaction is rolled back
        by the database, a session-bound prepared branch detached for the
        coordinator. The application's connection is closed by this."""
        _db.close_conn(self.conn)

    def _rollback(self) -> None:
        """Ends the branch, whatever state it reached."""
        d = self.rm.dialect
        if self.state in (IDLE, COMMITTED, ROLLED_BACK, HANDED_OVER):
            return
        if self.ended_outside:
            # Its transaction is not on the session any more: a ROLLBACK now
            # would end whatever runs there (another user's transaction).
            self.state = HANDED_OVER
            self.tx.client._warn(
                "transaction %s: the branch on %s ended outside the client (%s): nothing was sent to roll it back; what it wrote may have been committed",
                self.tx.gtrid,
                self.rm.name,
                self.ended_outside,
            )
            return
        err: Optional[BaseException] = None
        was = self.state
        try:
            with self._bounded():
                self._drain()
        except BaseException:
            pass
        if was == ACTIVE and self.rm.driver == MYSQL and self._session is not None and _db.my_thread_id(self.conn) != self._session:
            # Its XA branch lives (active, never prepared) only on the old
            # session, which the server rolls back as it ends; nothing of it
            # can be reached from this one.
            self.state = ROLLED_BACK
            return
        if was == ACTIVE:
            try:
                self._bounded_steps(d.rollback_active(self.id))
            except BaseException as e:
                err = e
                if self.rm.driver == MYSQL and _db.server_said_no(e):
                    # XA END may fail when the branch already ended (a failed XA PREPARE): the rollback alone.
                    try:
                        self._bounded_steps([d.rollback_prepared(self.id)])
                        err = None
                    except BaseException as e2:
                        err = e2
        else:  # PREPARED, IN_DOUBT
            try:
                self._bounded_steps([d.rollback_prepared(self.id)])
            except BaseException as e:
                err = e
        if err is not None and was == ACTIVE:
            # A branch whose rollback failed is in a state nobody knows: it
            # must never be committed by whoever uses the connection next.
            self._release_session()
        if err is not None and d.session_bound and was in (PREPARED, IN_DOUBT):
            self._release_session()  # only this session could settle it: let the coordinator
        if err is not None and d.is_not_found(err):
            err = None  # nothing left to roll back
        if err is not None:
            raise _Wrapped(self.rm.name, "rollback", err)
        self.state = ROLLED_BACK


class Tx:
    """One global transaction. Use it from one thread; see Client.begin."""

    def __init__(self, client, gtrid: str, opts: CommitOptions):
        self.client = client
        self.gtrid = gtrid
        self.opts = opts
        self.result: Optional[Result] = None
        self._mu = threading.Lock()
        self._state = _ACTIVE
        self.branches: List[Branch] = []
        self.cp: Optional[Branch] = None  # the commit point chosen at a MySQL branch's begin
        self.unnamed_xa = False  # a MySQL branch began named with no commit point: the coordinator decides
        self._deciding = False  # the decision (one-phase COMMIT, commit point's, Commit RPC) may have been sent

    def __enter__(self) -> "Tx":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is not None:
            self.rollback()
            return False
        self.result = self.commit()
        return False

    # --- branches ------------------------------------------------------------------

    def branch(self, rm: str, conn: Any) -> Branch:
        """Enlists conn (a psycopg.Connection for a "postgres" RM, a PyMySQL
        connection for a "mysql" one) as the transaction's branch on rm. A
        second call for the same RM returns the same branch (one branch per
        RM per transaction; conn must be the same connection). Nothing is
        sent until the branch's first statement; the connection is put in
        autocommit mode (the client runs its own BEGIN or XA START), and must
        not be inside a transaction."""
        info = self.client._rm(rm)
        if conn is None:
            raise ValueError("tandem: branch(%r): conn is None" % rm)
        with self._mu:
            if self._state != _ACTIVE:
                raise TxDone("tandem: transaction %s is finishing or finished" % self.gtrid)
            for b in self.branches:
                if b.rm is info:
                    if b.conn is not conn:
                        raise TandemError(
                            "tandem: resource manager %r already has a branch in transaction %s on another connection; reuse it (one branch per RM)"
                            % (rm, self.gtrid)
                        )
                    return b
            _check_driver(info, conn)
            _db.make_autocommit(info.driver, conn)
            b = Branch(self, info, conn)
            self.branches.append(b)
            return b

    def set_options(self, opts: CommitOptions) -> None:
        """This transaction's commit modes (before its first MySQL branch
        begins, for decide_at)."""
        from .client import checked_options

        self.opts = checked_options(opts)

    # --- commit and rollback ----------------------------------------------------------------

    def commit(self, timeout: Optional[float] = None) -> Result:
        """Makes every branch's work visible, or none of it. Raises Aborted
        when nothing committed, OutcomeUnknown when the outcome could not be
        learnt before the timeout (default: the client's decision_timeout),
        TxDone on a finished transaction. Nothing is rolled back once an
        attempt to decide may have reached the decision's keeper."""
        with self._mu:
            if self._state != _ACTIVE:
                raise TxDone("tandem: transaction %s already finished" % self.gtrid)
            self._state = _FINISHING
        deadline = self.client._deadline(timeout)
        res = Result(self.gtrid)
        state = _UNKNOWN
        try:
            try:
                state = self._commit(res, [b for b in self.branches if b.state != IDLE], deadline)
            except TandemError:
                raise
            except Exception as e:
                # Neither the database's nor the coordinator's answer (a bug,
                # a close() the paths did not expect): before the decision
                # could be sent everything rolls back; after, unknown.
                if not self._deciding:
                    self._abort_all([b for b in self.branches if b.state != IDLE])
                    raise self._aborted("the commit failed before its decision was sent (%s)" % type(e).__name__, e, "other")
                raise OutcomeUnknown(self.gtrid, "the commit failed after its decision may have been sent: %s: %s" % (type(e).__name__, e)) from e
        except Aborted:
            state = _ABORTED
            raise
        finally:
            res.round_trips = [(b.rm.name, b.trips) for b in self.branches]
            with self._mu:
                self._state = state
        self.result = res
        return res

    def rollback(self) -> None:
        """Rolls back every branch that has not committed. Safe after commit
        (it does nothing) and twice. A prepared branch it cannot roll back is
        handed to the coordinator's Abort; failing that, the coordinator's
        orphan scan rolls it back after its timeout."""
        with self._mu:
            if self._state != _ACTIVE:
                return
            self._state = _FINISHING
        try:
            self._rollback_all([b for b in self.branches if b.state != IDLE])
        except TandemError:
            raise
        except Exception as e:  # the client's internal wrappers and the drivers' own errors
            raise RollbackFailed(self.gtrid, e) from e
        finally:
            with self._mu:
                self._state = _ABORTED

    def _aborted(self, reason: str, cause: Optional[BaseException] = None, stage: str = "other") -> Aborted:
        e = Aborted(self.gtrid, reason, cause, stage)
        if cause is not None:
            e.__cause__ = cause
        return e

    def _ended_outside(self, bs: Sequence[Branch]) -> None:
        """Raises BranchEndedOutside, after rolling back bs but those branches,
        when a branch's transaction ended outside the client."""
        gone = [b for b in self.branches if b.ended_outside]
        if not gone:
            return
        for b in gone:
            b.state = HANDED_OVER  # nothing more is sent on its session
        self._abort_all([b for b in bs if not b.ended_outside])
        raise BranchEndedOutside(self.gtrid, [b.rm.name for b in gone], "; ".join("%s: %s" % (b.rm.name, b.ended_outside) for b in gone))

    def _commit(self, res: Result, begun: List[Branch], deadline: float) -> int:
        for b in self.branches:  # enlisted, begun or not
            try:
                b._drain()
                b._check_session("")
            except BaseException:
                pass  # recorded as the branch's error
        self._ended_outside(begun)
        for b in self.branches:
            if b.last_err is not None:
                self._abort_all(begun)
                raise self._aborted("branch on %r failed earlier" % b.rm.name, b.last_err, "statement")
        # Which branches wrote? Ask the database about those that only read.
        ro = [False] * len(begun)

        def check(i):
            b = begun[i]
            if not b.wrote:
                try:
                    ro[i] = b._read_only()
                except BaseException as e:
                    raise _Wrapped(b.rm.name, "read-only check", e)

        # Only branches that ran nothing but queries are asked (no thread
        # hand-off for the others).
        err = _joined(self.client._parallel([lambda i=i: check(i) for i in range(len(begun)) if not begun[i].wrote]))
        self._ended_outside(begun)
        if err is not None:
            self._abort_all(begun)
            raise self._aborted("could not classify branches", err, "setup")
        writers = [b for i, b in enumerate(begun) if not (ro[i] and b is not self.cp)]
        readers = [b for i, b in enumerate(begun) if ro[i] and b is not self.cp]
        # A pinned PostgreSQL commit point that only read is a reader unless
        # two other branches wrote: then it commits with the decision.
        if self.cp in writers and self.cp.rm.driver == POSTGRES and len(writers) <= 2 and ro[begun.index(self.cp)]:
            writers.remove(self.cp)
            readers.append(self.cp)

        def commit_readers() -> Optional[BaseException]:
            def one(b):
                try:
                    b._exec_steps(b.rm.dialect.commit_one_phase(b.id))
                except BaseException as e:
                    raise _Wrapped(b.rm.name, "commit read-only branch", e)
                b.state = COMMITTED

            return _joined(self.client._parallel([lambda b=b: one(b) for b in readers]))

        commit_readers.needed = bool(readers)  # type: ignore[attr-defined]
        if not writers:
            res.path = LOCAL
            err = commit_readers()
            if err is not None:
                self._abort_all(begun)
                raise self._aborted("local commit failed", err, "commit")
            return _COMMITTED
        if len(writers) == 1:
            res.path = ONE_PHASE
            err = commit_readers()
            if err is not None:
                self._abort_all(begun)
                raise self._aborted("local commit of a read-only branch failed", err, "commit")
            return self._commit_one_phase(writers[0])
        cp = self._commit_point(writers)
        if cp is not None:
            return self._commit_at_rm(res, begun, writers, cp, commit_readers, deadline)
        return self._commit_two_phase(res, begun, writers, commit_readers, deadline)

    # --- one phase (commit_onephase.go) -------------------------------------------------------

    def _commit_one_phase(self, w: Branch) -> int:
        """The only writer commits alone. The database's refusal (an ERROR) is
        an abort; a broken call, or an error that ended the session (a
        PostgreSQL FATAL, MariaDB's 1927 connection killed, …: it can come
        after the COMMIT ran), is an unknown outcome, never rolled back."""
        self._deciding = True
        try:
            w._commit_one_phase()
        except BaseException as e:
            self._ended_outside([w])
            if _db.server_said_no(e):
                self._abort_all([w])
                raise self._aborted("one-phase commit on %r failed" % w.rm.name, e, "commit")
            raise OutcomeUnknown(self.gtrid, _Wrapped(w.rm.name, "one-phase commit", e)) from e
        w.state = COMMITTED
        return _COMMITTED

    # --- which branch is the commit point (cp_choice.go) ------------------------------------

    def _begin_form(self, b: Branch) -> None:
        """How a MariaDB/MySQL branch begins: as the transaction's commit point
        (its own XA branch, never prepared), as an XA branch named with the
        commit point the transaction has, or with none (the coordinator
        decides). Once per branch, before its begin is sent."""
        if b.rm.driver != MYSQL:
            return
        c = self.client
        decide_at = self.opts.decide_at
        plain_ok = decide_at != COORDINATOR and c._qualifies(b.rm, b.conn)
        pin = None
        if not plain_ok and decide_at != COORDINATOR:
            pin = self._postgres_candidate()
        if self.cp is None and (self.unnamed_xa or (not plain_ok and pin is None)) and c.coords is not None:
            # Named after the coordinator's cluster at XA START; unknown (the
            # coordinator unreachable): no owner, refused at commit if the
            # coordinator must decide.
            try:
                b.id.owner = c._cluster()
            except TandemError:
                b.id.owner = ""
        if self.cp is not None:
            b.id.commit_point, b.id.owner = self.cp.rm.name, self.cp.rm.known_table_id()
        elif self.unnamed_xa:
            pass
        elif plain_ok:
            self.cp, b.self_cp = b, True
            b.id = commit_point_self(self.gtrid, b.rm.name, b.rm.known_table_id())
        elif pin is not None:
            self.cp = pin
            b.id.commit_point, b.id.owner = pin.rm.name, pin.rm.known_table_id()
        else:
            self.unnamed_xa = True

    def _postgres_candidate(self) -> Optional[Branch]:
        """The enlisted PostgreSQL branch that would be the commit point (the
        qualifying RM of highest strength, then the first enlisted)."""
        best = None
        for w in list(self.branches):
            if w.rm.driver != POSTGRES or w.rm.never_cp:
                continue
            ok = w.rm.cp.known()
            if not ok and w._mu.acquire(blocking=False):
                try:
                    if w.state == IDLE:
                        ok = self.client._qualifies(w.rm, w.conn)
                finally:
                    w._mu.release()
            if ok and (best is None or w.rm.strength > best.rm.strength):
                best = w
        return best

    def _check_postgres(self, b: Branch) -> None:
        """Learns, before a PostgreSQL branch begins, whether its RM qualifies
        (not inside the application's transaction: a missing table would
        abort it)."""
        if b.rm.driver != POSTGRES or b.rm.never_cp or self.opts.decide_at == COORDINATOR:
            return
        self.client._qualifies(b.rm, b.conn)

    def _commit_point(self, writers: List[Branch]) -> Optional[Branch]:
        if self.cp is not None:
            return self.cp
        if self.opts.decide_at == COORDINATOR or self.unnamed_xa:
            return None
        best = None
        for w in writers:
            if w.rm.driver != POSTGRES:
                return None  # an XA branch named with no commit point
            if w.rm.cp.known() and not w.rm.never_cp and (best is None or w.rm.strength > best.rm.strength):
                best = w
        if best is None and self.opts.decide_at == RM_:
            self.client._warn("decide_at rm: no writer of transaction %s can be its commit point; the coordinator decides", self.gtrid)
        return best

    # --- phase 1 and phase 2 (prepare.go, phase2.go) ------------------------------------------

    def _prepare_all(self, ws: List[Branch], commit_readers) -> Optional[BaseException]:
        """Phase 1 on every branch of ws in parallel, the readers' commit
        beside it. A branch whose prepare failed is left active (the
        database said no) or in doubt (the call broke)."""

        def one(b):
            try:
                _failpoint.inject("before-prepare")
                b._prepare()
            except BaseException as e:
                b.state = HANDED_OVER if b.ended_outside else ACTIVE if _db.server_said_no(e) else IN_DOUBT
                raise _Wrapped(b.rm.name, "prepare", e)
            b.state = PREPARED
            _failpoint.inject("after-prepare")

        def readers():
            e = commit_readers()
            if e is not None:
                raise e

        return _joined(self.client._parallel([lambda b=b: one(b) for b in ws] + ([readers] if commit_readers.needed else [])))

    def _settle_prepared(self, bs: List[Branch], commit: bool) -> bool:
        """Commits (or rolls back) prepared branches on their own connections,
        in parallel, after the decision. One it cannot settle is left to a
        recoverer (a session-bound one has its session closed). Reports
        whether all were settled."""

        def one(b):
            d = b.rm.dialect
            stmt = d.commit_prepared(b.id) if commit else d.rollback_prepared(b.id)
            try:
                b._bounded_steps([stmt])
            except BaseException as e:
                if not d.is_not_found(e):
                    if d.session_bound:
                        b._release_session()
                    b.state = HANDED_OVER
                    raise
            b.state = COMMITTED if commit else ROLLED_BACK

        errs = self.client._parallel([lambda b=b: one(b) for b in bs])
        for b, e in zip(bs, errs):
            if e is not None:
                self.client._warn("transaction %s: phase 2 on %s failed; the coordinator's scan finishes it: %s", self.gtrid, b.rm.name, e)
        return all(e is None for e in errs)

    def _settle_own(self, writers: List[Branch], commit: bool) -> bool:
        own = []
        for b in writers:
            if b.client_settles or b.rm.dialect.session_bound:
                own.append(b)
            else:
                b.state = HANDED_OVER
        return self._settle_prepared(own, commit)

    def _release_own(self, writers: List[Branch]) -> None:
        for b in writers:
            if b.rm.dialect.session_bound:
                b._release_session()
            b.state = HANDED_OVER

    def _abort_all(self, bs: List[Branch]) -> None:
        """Rolls back after the transaction was decided (or found) aborted:
        the outcome is abort whatever the rollback does."""
        try:
            self._rollback_all(bs)
        except BaseException as e:
            self.client._warn("transaction %s: rollback: %s", self.gtrid, e)

    def _rollback_all(self, bs: List[Branch]) -> None:
        errs = self.client._parallel([lambda b=b: b._rollback() for b in bs])
        stuck = [b for b, e in zip(bs, errs) if e is not None]
        err = _joined(errs)
        if not stuck or self.client.coords is None:
            if err is not None:
                raise err
            return
        rms = [b.rm.name for b in stuck if b.state in (PREPARED, IN_DOUBT) and not b.id.commit_point]
        if not rms:
            raise err  # only active branches: the database rolls them back when their connection ends
        owner = next((b.id.owner for b in stuck if not b.id.commit_point and b.id.owner), "")
        try:
            self.client.coords.abort(self.gtrid, rms, owner, time.monotonic() + 10.0)
        except BaseException as e:
            raise TandemError(
                "%s; handing the prepared branches to the coordinator failed too (its orphan scan will roll them back): %s" % (err, e)
            ) from e

    # --- the commit point (commit_point.go) ---------------------------------------------------

    def _commit_at_rm(self, res: Result, begun: List[Branch], writers: List[Branch], cp: Branch, commit_readers, deadline: float) -> int:
        """Prepare the other writers, then record COMMIT and commit at cp in
        one round trip, then commit the prepared branches."""
        c = self.client
        res.path, res.commit_point = COMMIT_POINT, cp.rm.name
        all_ = list(begun)
        if cp not in all_:
            all_.append(cp)  # a pinned commit point that ran nothing yet
        for w in [cp] + writers:
            known, asked = c._coordinator_knows(w.rm.name)
            if asked and not known:
                self._abort_all(all_)
                raise self._aborted(
                    "the coordinator does not know resource manager %r, so it could not recover this transaction's branches if this "
                    "process died; nothing was prepared: give the coordinator --rm %s=DRIVER:DSN (the name in the client's rms)" % (w.rm.name, w.rm.name),
                    stage="setup",
                )
        try:
            cp_id = c._table_id(cp.rm)
        except BaseException as e:
            self._abort_all(all_)
            raise self._aborted("the commit point's decision-table id is not known; nothing was prepared", e, "setup")
        prepared: List[Branch] = []
        parts: List[Tuple[str, str]] = []
        for w in writers:
            if w is cp or w.state == COMMITTED:
                continue
            # PostgreSQL: named at PREPARE; MySQL: named at XA START already.
            w.id.commit_point, w.id.owner = cp.rm.name, cp_id
            prepared.append(w)
            try:
                parts.append((w.rm.name, c._table_id(w.rm)))
            except BaseException as e:
                self._abort_all(all_)
                raise self._aborted(
                    "the decision row must name every participant by its decision-table id, and %r's is not known "
                    "(give it RM.connect, or run tandem init-rm on it); nothing was prepared" % w.rm.name,
                    e,
                    "setup",
                )
        if cp.state == IDLE:
            # A pinned PostgreSQL commit point that ran nothing begins before
            # any branch prepares (now(), the age check's origin, comes first).
            try:
                cp._exec_steps(cp._begin_sql())
            except BaseException as e:
                self._abort_all(all_)
                raise self._aborted("could not begin the commit point " + cp.rm.name, e, "setup")
            cp.state = ACTIVE
        err = self._prepare_all(prepared, commit_readers)
        self._ended_outside(all_)
        if err is not None:
            self._abort_all(all_)
            raise self._aborted("phase 1 failed", err, "prepare")
        _failpoint.inject("before-commit-point")  # every other branch prepared, no decision anywhere
        forget: List[str] = []
        if cp.rm.connect is None:
            forget = cp.rm.cp.take_forget(time.monotonic())  # no pool: carried by this commit
        xa = cp.id.mysql_xid() if cp.self_cp else ""
        checked = cp.rm.table_checked()
        stmts = decision.commit_statements(cp.rm.driver, self.gtrid, cp_id, parts, c.max_txn_age, forget, xa, table_checked=checked)
        decided = time.monotonic()
        self._deciding = True
        derr: Optional[BaseException] = None
        try:
            cp._commit_decision(stmts)
        except BaseException as e:
            derr = e
        _failpoint.inject("after-commit-point")  # decided COMMIT: the prepared branches wait for a recoverer
        if derr is not None and cp.ended_outside:
            cp.rm.cp.give_back(forget)
            self._ended_outside(all_)  # the guard stopped the decision: nothing recorded
        if derr is None:
            cp.state = COMMITTED
        elif decision.refused(derr) is not None or (cp.rm.driver == POSTGRES and _db.pg_statement_failed(derr)):
            # The database answered: the INSERT (or PostgreSQL's COMMIT)
            # failed, so the commit point's transaction did not commit.
            cp.rm.cp.give_back(forget)
            why = decision.refused(derr)
            if why in (decision.REFUSED_WRONG_TABLE, decision.REFUSED_UNCHECKED) and checked:
                with cp.rm.id_mu:
                    # The next decisions ask the id table, which says whether it
                    # is, for the rest of the process (a reading again does not
                    # undo it).
                    cp.rm.self_checked, cp.rm.refused = False, True
            reason = "the commit point %s could not record the decision" % cp.rm.name
            if why is not None:
                reason = "the commit point %s refused the decision: %s" % (cp.rm.name, why)
            self._abort_all(all_)
            raise self._aborted(reason, derr, "commit")
        else:
            # The call broke, or MySQL/MariaDB answered another error (which
            # statement failed is not known): the COMMIT may or may not have
            # happened. End the session (an uncommitted decision row goes with
            # it), then take the key.
            cp.rm.cp.give_back(forget)
            cp._release_session()
            cp.state = HANDED_OVER
            try:
                o = c._resolve_by_key(cp.rm, self.gtrid, cp_id, decided)
            except BaseException as rerr:
                self._release_own(prepared)
                raise OutcomeUnknown(
                    self.gtrid,
                    "rm %r (the commit point): commit: %s; learning the outcome by taking the decision key failed too: %s; nothing was rolled back: "
                    "the prepared branches are settled by the coordinator's scan from %s's decision table" % (cp.rm.name, derr, rerr, cp.rm.name),
                ) from derr
            if o == decision.ABORTED:
                self._settle_prepared(prepared, False)
                raise self._aborted(
                    "the commit point's connection broke during its commit, and taking the decision key found no decision "
                    "(its COMMIT never happened; now none can): aborted",
                    derr,
                    "decided-abort",
                )
        if not self._settle_prepared(prepared, True):
            res.phase2_pending = True
        else:
            c._forget_later(cp.rm, self.gtrid)
        return _COMMITTED

    # --- the coordinator (commit_coordinator.go) --------------------------------------------

    def _own_by_cluster(self, writers: List[Branch]) -> None:
        """Names the writers after the coordinator's cluster: PostgreSQL at
        PREPARE (now); a MariaDB/MySQL branch was named at XA START and must
        carry the same owner."""
        ident = self.client._cluster()
        for b in writers:
            if b.rm.dialect.session_bound:
                if b.id.owner != ident:
                    raise TandemError(
                        "tandem: rm %r: its branch began (XA START) named after owner %s before the coordinator's cluster (%s) was known, "
                        "so the coordinator could not settle it: nothing was prepared; try again" % (b.rm.name, b.id.owner[:8] or "unowned", ident[:8])
                    )
                continue
            b.id.owner = ident

    def _commit_two_phase(self, res: Result, begun: List[Branch], writers: List[Branch], commit_readers, deadline: float) -> int:
        """Prepare every writer, then one Commit RPC decides. Nothing is
        rolled back once an attempt may have reached the coordinator's log."""
        from ._pb import tandem_pb2 as pb

        c = self.client
        res.path = TWO_PHASE
        if c.coords is None:
            self._abort_all(begun)
            raise self._aborted("%d branches wrote" % len(writers), NoCoordinator("tandem: no coordinator configured"), "no-coordinator")
        try:
            self._own_by_cluster(writers)
        except BaseException as e:
            self._abort_all(begun)
            raise self._aborted("the branches cannot be named after the coordinator's cluster; nothing was prepared", e, "setup")
        err = self._prepare_all(writers, commit_readers)
        self._ended_outside(begun)
        if err is not None:
            self._abort_all(begun)
            raise self._aborted("phase 1 failed", err, "prepare")
        opts = pb.CommitOptions(
            durability={None: pb.DURABILITY_DEFAULT, "wait": pb.WAIT, "nowait": pb.NOWAIT}[self.opts.durability],
            visibility={None: pb.VISIBILITY_DEFAULT, "sync": pb.SYNC, "async": pb.ASYNC}[self.opts.visibility],
        )
        # Session-bound branches (MariaDB) can only be committed on the session
        # that prepared them: they commit as soon as the response headers say
        # the COMMIT is durable, while the coordinator commits the others.
        # Under visibility sync, with a coordinator that allows it (Health's
        # tandem-client-settles-any), every branch commits here, in parallel,
        # as raw 2PC would: the reply then waits for no phase 2 of the
        # coordinator's, which only checks, after a head start, that they
        # are gone.
        settle_all = self.opts.visibility != "async" and c.coords.current().settles_any

        def request(settle_all: bool) -> pb.CommitRequest:
            for b in writers:
                b.client_settles = settle_all or b.rm.dialect.session_bound
            return pb.CommitRequest(gtrid=self.gtrid, branches=[pb.Branch(rm=b.rm.name, client_settles=b.client_settles) for b in writers], options=opts)

        req = request(settle_all)
        settled: List[Any] = []
        taken_over: List[bool] = []

        def on_committed(taken: bool):
            f: Future = Future()
            if taken:
                # The coordinator took the session-bound branches over
                # (may_take_over): it commits them once its standby holds
                # the decision; the sessions end so that it can.
                taken_over.append(True)
                self._release_own(writers)
                f.set_result(False)
                settled.append(f)
                return
            # COMMIT is durable; nothing is settled yet.
            _failpoint.inject("before-client-settles")
            # A thread of its own: _settle_own may use the client's pool.

            def run():
                try:
                    f.set_result(self._settle_own(writers, True))
                except BaseException as e:
                    f.set_exception(e)

            threading.Thread(target=run, name="tandem-settle", daemon=True).start()
            settled.append(f)

        has_bound = any(b.client_settles for b in writers)
        owner = next((b.id.owner for b in writers if not b.id.commit_point and b.id.owner), "")
        _failpoint.inject("before-commit-rpc")  # every branch prepared, nothing decided
        start = time.monotonic()
        calls_before = c.coords.calls
        resp = None
        rpc_err: Optional[BaseException] = None
        if c.coords.closed:
            self._abort_all(begun)
            raise self._aborted("the client was closed (Client.close()) before the Commit was sent; the branches were rolled back", stage="closed")
        self._deciding = True
        try:
            may_take_over = self.opts.may_take_over and self.opts.visibility == "async"
            try:
                resp, _ = c.coords.commit(req, owner, deadline, on_committed if has_bound else None, may_take_over)
            except Rejected as e:
                if not (settle_all and e.refuses_client_settles()):
                    raise
                # A coordinator older than the Health that allowed it refused
                # the request as a whole, before writing anything: ask again
                # the old way, and keep asking so until a Health says otherwise.
                c.coords.current().settles_any = False
                req = request(False)
                has_bound = any(b.client_settles for b in writers)
                resp, _ = c.coords.commit(req, owner, deadline, on_committed if has_bound else None, may_take_over)
        except (UnknownAfter, GaveUp, Failed, NoPrimary, LogFull, Rejected, Closed) as e:
            rpc_err = e
        _failpoint.inject("after-commit-rpc")  # decided: session-bound branches wait for the coordinator
        res.coordinator_calls = c.coords.calls - calls_before
        if settled:
            # The durable decision was COMMIT. Wait for the session-bound commits
            # whatever the reply says: a session is never handed back holding a
            # prepared branch.
            own = settled[0].result()
            res.phase2_pending = bool(resp is not None and resp.phase2_pending) or not own
            if taken_over:
                res.ended_sessions = [b.rm.name for b in writers if b.rm.dialect.session_bound]
            return _COMMITTED
        if resp is not None and resp.outcome == pb.COMMITTED:
            res.phase2_pending = resp.phase2_pending
            if not self._settle_own(writers, True):
                res.phase2_pending = True
            return _COMMITTED
        if resp is not None and resp.outcome == pb.ABORTED:
            self._settle_own(writers, False)
            raise self._aborted("the coordinator decided ABORT: " + resp.message, stage="decided-abort")
        if resp is not None:
            self._release_own(writers)
            raise OutcomeUnknown(self.gtrid, "coordinator answered outcome %s" % pb.Outcome.Name(resp.outcome))
        if isinstance(rpc_err, Closed) and rpc_err.ambiguous is None:
            self._abort_all(begun)
            raise self._aborted("the client was closed (Client.close()) before any Commit attempt reached a coordinator; the branches were rolled back", rpc_err, "closed")
        if isinstance(rpc_err, NoPrimary):
            self._abort_all(begun)
            raise self._aborted("no coordinator served as the primary; nothing was decided and the branches were rolled back", rpc_err, "no-coordinator")
        if isinstance(rpc_err, Rejected):
            self._abort_all(begun)
            raise self._aborted("the coordinator refused the commit", rpc_err, "refused")
        if isinstance(rpc_err, LogFull):
            self._abort_all(begun)
            raise self._aborted(
                "the coordinator's decision log stayed full until the deadline; nothing was decided and the branches were rolled back", rpc_err, "refused"
            )
        # Unknown: let go of the session-bound branches so that the
        # coordinator, which knows the outcome, can settle them.
        self._release_own(writers)
        raise OutcomeUnknown(
            self.gtrid,
            "no decision from the coordinator at %s after %d attempts in %.3fs: %s; nothing was rolled back: the prepared branches are the "
            "coordinator's to settle once it is reachable (committed if it decided COMMIT, rolled back after its orphan timeout if it never "
            "received the Commit)" % (c.current_coordinator(), res.coordinator_calls, time.monotonic() - start, rpc_err),
        ) from rpc_err


def _check_driver(info: _RMInfo, conn: Any) -> None:
    """Refuses a connection of the wrong driver for the RM, naming both."""
    mod = type(conn).__module__
    if info.driver == POSTGRES and not mod.startswith("psycopg"):
        raise TandemError("tandem: rm %r is a PostgreSQL RM: give it a psycopg 3 connection (got %s.%s)" % (info.name, mod, type(conn).__name__))
    if info.driver == MYSQL and not mod.startswith("pymysql"):
        raise TandemError("tandem: rm %r is a MySQL/MariaDB RM: give it a PyMySQL connection (got %s.%s)" % (info.name, mod, type(conn).__name__))
