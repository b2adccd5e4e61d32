"""The Tandem client: configuration, transactions, and what it learns once
per resource manager (decision-table ids, whether an RM can be a commit
point) and per coordinator cluster (its identity, which RMs it recovers).

A Client is safe to share between threads; make one per process. A
transaction (Tx) and its branches are used by one thread at a time."""

from __future__ import annotations

import heapq
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import grpc

from . import _db, decision
from ._coord import Coordinators, describe, place_in
from .errors import ConfigError, NoCoordinator, TandemError, UnknownRM
from .xid import check_owner, new_gtrid, validate_rm_name

DEFAULT_DECISION_TIMEOUT = 30.0

#: How long after sending its decision a client may still take the key: a
#: third of decision.FORGET_MIN_AGE, so that no 'C' row it could meet has
#: been forgotten yet.
KEY_HORIZON = decision.FORGET_MIN_AGE / 3

# Forget batching (cp_forget.go): a row waits FORGET_AFTER in the queue, then
# is deleted in batches of at least FORGET_BATCH, at most FORGET_MAX.
FORGET_BATCH = 32
FORGET_MAX = 256
FORGET_KEEP = 1 << 19
FORGET_AFTER = decision.FORGET_MIN_AGE + 5.0

CP_RECHECK = 60.0  # how long a negative commit-point answer is kept
CP_RETRY = 5.0  # how long a transient failure of the checks is kept
ID_RETRY = 5.0
# How long a reading of whether a MariaDB decision table checks its own id
# (its foreign key) stands before a branch's begin reads it again: a table
# can lose the key (a copy made with CREATE TABLE ... LIKE, an online schema
# change). One query a minute per RM, on a connection before its begin.
SELF_CHECK_TTL = 60.0
CLUSTER_RETRY = 1.0
RM_PROBE_AGAIN = 5.0

AUTO, COORDINATOR, RM_ = "auto", "coordinator", "rm"


def parse_decide_at(s: Optional[str]) -> str:
    """Where a transaction with two or more writers is decided: "auto" (a
    commit point when one qualifies, else the coordinator), "coordinator"
    (every writer prepares; one Commit RPC), "rm" (auto, with a warning
    when it falls back)."""
    if s in (None, "", AUTO):
        return AUTO
    if s in (COORDINATOR, RM_):
        return s
    raise ConfigError("tandem: decide_at %r: use auto, coordinator or rm" % (s,))


@dataclass
class RM:
    """A resource manager the application uses. name must be the
    coordinator's --rm NAME. driver is "postgres" (psycopg 3) or "mysql"
    (MySQL/MariaDB through PyMySQL).

    connect, when given, opens a new connection to the same database and
    user as the application's (a psycopg.Connection or pymysql Connection):
    the client uses it for its own statements — creating the decision table
    at first use, taking the decision key at once when a commit point's
    connection broke during its commit, deleting decided rows in the
    background. Without it the table must exist (the coordinator creates
    it), such an outcome is reported unknown (the coordinator's scan
    settles the branches), and decided rows are deleted by later commits."""

    name: str
    driver: str
    connect: Optional[Callable[[], Any]] = None
    never_commit_point: bool = False
    commit_point_strength: int = 0


@dataclass
class CommitOptions:
    """What a commit waits for. durability: "wait" (the decision on disk) or
    "nowait"; visibility: "sync" (every branch committed) or "async"; None
    takes the coordinator's defaults. decide_at: see parse_decide_at.

    may_take_over, with visibility "async" and a coordinator deciding: when
    the coordinator's standby has not acknowledged the COMMIT within a few
    milliseconds, the coordinator may take the prepared MariaDB branches
    over instead of making commit() wait for the standby. commit() then
    closes those sessions (the application's connection is closed: open a
    new one) and Result.ended_sessions names their RMs; the coordinator
    commits the branches once its standby holds the decision. Ignored
    otherwise."""

    durability: Optional[str] = None
    visibility: Optional[str] = None
    decide_at: str = AUTO
    may_take_over: bool = False


def checked_options(o: CommitOptions) -> CommitOptions:
    """A copy of o, its values checked."""
    if o.durability not in (None, "wait", "nowait"):
        raise ConfigError("tandem: durability %r: use None, \"wait\" or \"nowait\"" % (o.durability,))
    if o.visibility not in (None, "sync", "async"):
        raise ConfigError("tandem: visibility %r: use None, \"sync\" or \"async\"" % (o.visibility,))
    if not isinstance(o.may_take_over, bool):
        raise ConfigError("tandem: may_take_over %r: use True or False" % (o.may_take_over,))
    return CommitOptions(o.durability, o.visibility, parse_decide_at(o.decide_at), o.may_take_over)


@dataclass
class Status:
    """A coordinator's answer about a gtrid: outcome is "COMMITTED",
    "ABORTED" or "UNDECIDED"."""

    gtrid: str
    outcome: str
    phase2_pending: bool
    decided_at: float
    message: str


class _Watch:
    """One bounded call: fire runs once if the call outlives its time."""

    def __init__(self, fire: Callable[[], None]):
        self._mu = threading.Lock()
        self._fire = fire
        self.done = False
        self.fired = False

    def expire(self) -> None:
        with self._mu:
            if self.done:
                return
            self.done = self.fired = True
            try:
                self._fire()
            except Exception:
                pass

    def cancel(self) -> bool:
        """Ends the watch (the call returned); reports whether it had fired."""
        with self._mu:
            self.done = True
            return self.fired


class _Watchdog:
    """A single thread that interrupts the calls that outlive their bound
    (started at the first one). Starting a watch costs a lock and a heap
    push: no thread per call, and no wake-up unless the new watch ends
    before every other."""

    def __init__(self):
        self._cv = threading.Condition()
        self._heap: List[Tuple[float, int, _Watch]] = []
        self._seq = 0
        self._thread: Optional[threading.Thread] = None

    def start(self, seconds: float, fire: Callable[[], None]) -> _Watch:
        w = _Watch(fire)
        with self._cv:
            self._seq += 1
            heapq.heappush(self._heap, (time.monotonic() + seconds, self._seq, w))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="tandem-watchdog", daemon=True)
                self._thread.start()
            if self._heap[0][2] is w:
                self._cv.notify()
        return w

    def _run(self) -> None:
        while True:
            with self._cv:
                while True:
                    while self._heap and self._heap[0][2].done:
                        heapq.heappop(self._heap)
                    if not self._heap:
                        self._cv.wait()
                        continue
                    left = self._heap[0][0] - time.monotonic()
                    if left <= 0:
                        w = heapq.heappop(self._heap)[2]
                        break
                    self._cv.wait(left)
            w.expire()


class _CPState:
    """What a client knows of one RM as a commit point, and its queue of
    decided rows to forget."""

    def __init__(self):
        self.mu = threading.Lock()
        self.checked = 0.0  # 0: never
        self.why: Optional[str] = None
        self.transient = False
        self.forget: List[str] = []
        self.forget_at: List[float] = []
        self.forgetting = False

    def known(self) -> bool:
        with self.mu:
            return self.checked != 0.0 and self.why is None

    def take_forget(self, now: float) -> List[str]:
        with self.mu:
            n = 0
            while n < len(self.forget) and n < FORGET_MAX and self.forget_at[n] <= now - FORGET_AFTER:
                n += 1
            if n < FORGET_BATCH:
                return []
            out = self.forget[:n]
            del self.forget[:n]
            del self.forget_at[:n]
            return out

    def give_back(self, gs: Sequence[str]) -> None:
        if gs:
            with self.mu:
                self.forget[:0] = list(gs)
                self.forget_at[:0] = [0.0] * len(gs)  # old enough already

    def add_forget(self, g: str) -> None:
        with self.mu:
            if len(self.forget) < FORGET_KEEP:
                self.forget.append(g)
                self.forget_at.append(time.monotonic())


class _RMInfo:
    def __init__(self, r: RM):
        self.name = validate_rm_name(r.name)
        self.driver = _db.parse_driver(r.driver)
        self.dialect = _db.dialect_for(self.driver)
        self.connect = r.connect
        self.never_cp = r.never_commit_point
        self.strength = r.commit_point_strength
        self.cp = _CPState()
        self.id_mu = threading.Lock()
        self.id = ""  # its decision table's id; "" not known
        self.id_err: Optional[BaseException] = None
        self.id_checked = 0.0
        self.self_checked = False  # its table checks the id itself (decision.id_checked_query)
        self.flag_at = 0.0  # when self_checked was last read (a completed reading; time.monotonic)
        self.reread_at = -1e18  # when a reading again last began (one at a time)
        self.refused = False  # a table refused the checked form: never again in this process

    def known_table_id(self) -> str:
        with self.id_mu:
            return self.id

    def table_checked(self) -> bool:
        """Whether its table checks the id itself, as last read; a reading older
        than twice SELF_CHECK_TTL (nothing read it again) no longer counts."""
        with self.id_mu:
            return self.self_checked and time.monotonic() - self.flag_at < 2 * SELF_CHECK_TTL


class Client:
    """Runs global transactions over PostgreSQL (psycopg 3) and MySQL/MariaDB
    (PyMySQL) connections that the application owns.

    coordinator / coordinators: the coordinators' gRPC addresses
    (host:port) — a primary and its standbys: calls go to the one found
    serving. Contacted only when two or more branches wrote and no commit
    point decides, and once (Health) to learn the cluster's identity and
    which RMs it recovers. auth_token: the coordinator's --auth-token-file
    contents. tls_root_certificates (PEM bytes) turns TLS on;
    tls_private_key / tls_certificate_chain for a coordinator that asks for
    a client certificate.

    decision_timeout bounds a commit's wait for its decision (default 30 s):
    past it the outcome is unknown (OutcomeUnknown), never guessed.
    max_txn_age (default and at most 1 h): a commit point refuses to record
    COMMIT for a transaction that began longer ago by its database's clock.
    Creating a client makes no network call."""

    def __init__(
        self,
        rms: Sequence[RM],
        coordinator: Optional[str] = None,
        coordinators: Sequence[str] = (),
        auth_token: Optional[str] = None,
        tls_root_certificates: Optional[bytes] = None,
        tls_private_key: Optional[bytes] = None,
        tls_certificate_chain: Optional[bytes] = None,
        defaults: Optional[CommitOptions] = None,
        decision_timeout: float = DEFAULT_DECISION_TIMEOUT,
        max_txn_age: float = decision.MAX_COMMIT_POINT_AGE,
        logger: Optional[logging.Logger] = None,
    ):
        self.logger = logger if logger is not None else logging.getLogger("tandem")
        if not rms:
            raise ConfigError("tandem: rms is empty: declare every resource manager the application uses")
        if max_txn_age <= 0:
            max_txn_age = decision.MAX_COMMIT_POINT_AGE
        if max_txn_age > decision.MAX_COMMIT_POINT_AGE:
            raise ConfigError(
                "tandem: max_txn_age %ss is longer than %ss, the longest coordinators keep the abort decisions that refuse a late commit point"
                % (max_txn_age, decision.MAX_COMMIT_POINT_AGE)
            )
        self.max_txn_age = max_txn_age
        self.decision_timeout = decision_timeout
        self.defaults = checked_options(defaults or CommitOptions())
        self.rms: Dict[str, _RMInfo] = {}
        for r in rms:
            try:
                info = _RMInfo(r)
            except ValueError as e:
                raise ConfigError(str(e)) from e
            if info.name in self.rms:
                raise ConfigError("tandem: resource manager %r is declared twice" % info.name)
            self.rms[info.name] = info
        addrs: List[str] = []
        for a in ([coordinator] if coordinator else []) + list(coordinators):
            if not a or a in addrs:
                continue
            if any(c.isspace() for c in a) or "," in a or ":" not in a:
                raise ConfigError("tandem: coordinator address %r: want host:port" % a)
            addrs.append(a)
        self.coords: Optional[Coordinators] = None
        if addrs:
            self.coords = Coordinators(
                addrs,
                auth_token=auth_token,
                root_certificates=tls_root_certificates,
                private_key=tls_private_key,
                certificate_chain=tls_certificate_chain,
                logger=self.logger,
            )
        self._pool = ThreadPoolExecutor(max_workers=32, thread_name_prefix="tandem")
        self._cluster_mu = threading.Lock()
        self._cluster_id = ""
        self._cluster_err: Optional[BaseException] = None
        self._cluster_at = 0.0
        self._rms_probe = threading.Lock()
        self._rms_known: Optional[Dict[str, str]] = None
        self._rms_next = 0.0
        self._closed = False
        self._watchdog = _Watchdog()

    # --- public ------------------------------------------------------------------

    def begin(self, options: Optional[CommitOptions] = None) -> "Tx":
        """Starts a global transaction: the gtrid is made here (no round trip).
        Nothing is sent to a database until a branch's first statement."""
        from .tx import Tx

        return Tx(self, new_gtrid(), checked_options(options or self.defaults))

    def transaction(self, options: Optional[CommitOptions] = None) -> "Tx":
        """A transaction to use as a context manager: committed when the block
        ends normally (its Result in tx.result), rolled back when it raises.

            with client.transaction() as tx:
                tx.branch("pg", pg_conn).execute(...)
        """
        return self.begin(options)

    def run(self, fn: Callable[["Tx"], Any], options: Optional[CommitOptions] = None):
        """Runs fn(tx) in a new transaction and commits it, or rolls it back
        when fn raises (and re-raises). Returns the commit's Result."""
        tx = self.begin(options)
        try:
            fn(tx)
        except BaseException:
            tx.rollback()
            raise
        return tx.commit()

    def status(self, gtrid: str, resolve: bool = False, timeout: Optional[float] = None) -> Status:
        """Asks the coordinator for the outcome of gtrid (after
        OutcomeUnknown, say), following the primary. With resolve, an
        undecided gtrid is aborted."""
        if self.coords is None:
            raise NoCoordinator("tandem: no coordinator configured")
        deadline = time.monotonic() + (timeout if timeout is not None else self.decision_timeout)
        st = self.coords.status(gtrid, resolve, deadline)
        from ._pb import tandem_pb2 as pb

        return Status(gtrid, pb.Outcome.Name(st.outcome), st.phase2_pending, st.decided_unix_nano / 1e9, st.message)

    def current_coordinator(self) -> str:
        """The address calls go to now ("" without a coordinator)."""
        return self.coords.current().addr if self.coords else ""

    def coordinator_calls(self) -> int:
        """RPCs sent to the coordinators since the client was made (retries
        and probes included)."""
        return self.coords.calls if self.coords else 0

    def close(self) -> None:
        """Closes the channels to the coordinators. Safe to call twice. A
        commit running meanwhile ends as usual: Aborted when the close came
        before its decision could be sent (a Commit RPC never sent), else
        committed or OutcomeUnknown; its work on the databases (prepares,
        phase 2) goes on, on the calling thread."""
        if self._closed:
            return
        self._closed = True
        if self.coords is not None:
            self.coords.close()
        self._pool.shutdown(wait=False)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- internals used by Tx ----------------------------------------------------------

    def _rm(self, name: str) -> _RMInfo:
        info = self.rms.get(name)
        if info is None:
            raise UnknownRM("tandem: unknown resource manager %r: declare it in Client(rms=...)" % name)
        return info

    def _warn(self, msg: str, *args) -> None:
        self.logger.warning(msg, *args)

    def _parallel(self, fns: Sequence[Callable[[], None]]) -> List[Optional[BaseException]]:
        """Runs fns concurrently (the last on the calling thread); returns
        each one's exception or None."""
        out: List[Optional[BaseException]] = [None] * len(fns)

        def run(i):
            try:
                fns[i]()
            except BaseException as e:  # collected, reported by the caller
                out[i] = e

        futs = []
        for i in range(len(fns) - 1):
            try:
                futs.append(self._pool.submit(run, i))
            except RuntimeError:  # the pool was shut down (close()): on this thread
                run(i)
        if fns:
            run(len(fns) - 1)
        for f in futs:
            f.result()
        return out

    def _deadline(self, timeout: Optional[float]) -> float:
        """When a wait for a decision ends: timeout, bounded by the
        client's decision_timeout (negative: no bound but timeout)."""
        t = timeout
        if self.decision_timeout is not None and self.decision_timeout >= 0:
            t = self.decision_timeout if t is None else min(t, self.decision_timeout)
        if t is None:
            t = 365 * 86400.0
        return time.monotonic() + t

    def _cluster(self) -> str:
        """The coordinators' cluster identity (Health's cluster=), learnt once:
        branches a coordinator decides are named after it."""
        if self.coords is None:
            raise NoCoordinator("tandem: no coordinator configured")
        with self._cluster_mu:
            if self._cluster_id:
                return self._cluster_id
            if self._cluster_err is not None and time.monotonic() - self._cluster_at < CLUSTER_RETRY:
                raise self._cluster_err
            try:
                self._cluster_id = self._ask_cluster()
                return self._cluster_id
            except TandemError as e:
                self._cluster_err, self._cluster_at = e, time.monotonic()
                raise

    def _ask_cluster(self) -> str:
        cs = self.coords
        name = cs.cluster
        ep = cs.current()
        if not name:
            err: Optional[BaseException] = None
            for e in [ep] + [x for x in cs.eps if x is not ep]:
                ep = e
                try:
                    h = cs.health(e, 2.0)
                except (grpc.RpcError, ValueError) as x:  # ValueError: the channel closed (Client.close())
                    err = x
                    continue
                err = None
                name, _ = place_in(h.message)
                break
            if err is not None:
                raise TandemError(
                    "tandem: ask the coordinator at %s for its cluster's identity (Health), which names the branches it decides: %s"
                    % (ep.addr, describe(ep.addr, err))
                )
            if not name:
                raise TandemError(
                    "tandem: the coordinator at %s names no cluster in its Health (no cluster=…): it is older than this client; "
                    "upgrade it, or decide at a commit point (decide_at auto or rm)" % ep.addr
                )
            if not cs.cluster:
                cs.cluster = name
        try:
            return check_owner(name)
        except ValueError as e:
            raise TandemError("tandem: the coordinator at %s names its cluster %r, which is not an identity: %s" % (ep.addr, name, e)) from e

    def _coordinator_knows(self, name: str) -> Tuple[bool, bool]:
        """(known, asked): whether the coordinator recovers RM name, asked
        once by Health (a yes kept, a no asked again after 5 s). asked is
        False without a coordinator or when it could not be asked: the
        commit point, which needs no coordinator to commit, then goes on."""
        if self.coords is None:
            return False, False
        m = self._rms_known
        if m is not None and m.get(name) == "":
            return True, True

        def answer():
            m = self._rms_known
            return (name in m, True) if m is not None else (False, False)

        if time.monotonic() < self._rms_next or not self._rms_probe.acquire(blocking=False):
            return answer()
        try:
            ep = self.coords.current()
            try:
                h = self.coords.health(ep, 2.0)
            except (grpc.RpcError, ValueError) as e:  # ValueError: the channel closed (Client.close())
                self._warn("could not ask the coordinator which resource managers it recovers; commit points go on without it: %s", describe(ep.addr, e))
                return answer()
            if h.rms:
                self._rms_known = {r.name: ("" if r.reachable else (r.error or "unreachable")) for r in h.rms}
            m = self._rms_known or {}
            for rm, why in m.items():
                if why:
                    self._warn("the coordinator cannot reach resource manager %s (%s): it could not recover branches there if this process died", rm, why)
            return answer()
        finally:
            self._rms_next = time.monotonic() + RM_PROBE_AGAIN
            self._rms_probe.release()

    def _table_id(self, info: _RMInfo, conn: Any = None) -> str:
        """info's decision-table id, read once through conn (the application's
        connection, outside any transaction) when given, else through
        info.connect."""
        with info.id_mu:
            known = info.id
            now = time.monotonic()
            reread = (
                bool(known) and conn is not None and info.driver == _db.MYSQL and not info.refused
                and now - info.flag_at >= SELF_CHECK_TTL and now - info.reread_at >= SELF_CHECK_TTL
            )
            if reread:
                info.reread_at = now  # this caller reads it again; the others go on
            if known and not reread:
                return known
            if not known and info.id_err is not None and time.monotonic() - info.id_checked < ID_RETRY:
                raise info.id_err
        if reread:
            self._reread_self_check(info, conn, known)
            return known
        own = None
        try:
            q = conn
            if q is None and info.connect is not None:
                q = own = _own_conn(info)
            if q is None:
                raise TandemError("tandem: rm %r: its decision-table id is not known yet, and there is no RM.connect to read it with" % info.name)
            checked = False
            try:
                row = _db.read_row(info.driver, q, decision.id_checked_query(info.driver))
                checked = row is not None and int(row[1]) == 1
            except Exception:
                # A server without the catalog it reads: the plain read.
                row = _db.read_row(info.driver, q, "SELECT id FROM " + decision.ID_TABLE_NAME)
            if row is None:
                raise TandemError("tandem: rm %r: %s has no row: run `tandem init-rm`" % (info.name, decision.ID_TABLE_NAME))
            ident = check_owner(str(row[0]).strip())
        except Exception as e:
            err = e if isinstance(e, TandemError) else TandemError(
                "tandem: rm %r: read the decision-table id from %s (%s): run `tandem init-rm` on it, start the coordinator with this RM, or give RM.connect"
                % (info.name, decision.ID_TABLE_NAME, e)
            )
            if err is not e:
                err.__cause__ = e
            with info.id_mu:
                info.id_err, info.id_checked = err, time.monotonic()
            raise err
        finally:
            if own is not None:
                _db.close_conn(own)
        with info.id_mu:
            info.id, info.id_err, info.self_checked, info.flag_at = ident, None, checked, time.monotonic()
        return ident

    def _reread_self_check(self, info: _RMInfo, conn: Any, known: str) -> None:
        """Reads again, through conn, whether info's MariaDB table checks its
        own id. The known id is never replaced: a table answering another one
        is another table, which the subquery form refuses. A failed reading
        counts as no reference until the next: the subquery form is checked by
        the database whatever the table has."""
        checked = False
        try:
            # Only on a session in autocommit mode outside a transaction (a
            # table-less SELECT first, which opens none): the reading would
            # otherwise open one, and the branch's XA START would fail.
            idle = _db.read_row(info.driver, conn, "SELECT @@autocommit, @@in_transaction")
            if idle is not None and int(idle[0]) == 1 and int(idle[1]) == 0:
                row = _db.read_row(info.driver, conn, decision.id_checked_query(info.driver))
                checked = row is not None and str(row[0]).strip() == known and int(row[1]) == 1
        except Exception:
            checked = False
        with info.id_mu:
            info.self_checked, info.flag_at = checked and not info.refused, time.monotonic()

    def _qualifies(self, info: _RMInfo, conn: Any) -> bool:
        """Whether info can be a commit point: its decision table exists, has
        an id, and its database makes commits durable (checked once, a no
        kept CP_RECHECK, a transient failure CP_RETRY). conn is the
        application's connection outside any transaction, or None."""
        if info.never_cp:
            return False
        s = info.cp
        with s.mu:
            checked, why, transient = s.checked, s.why, s.transient
        wait = CP_RETRY if transient else CP_RECHECK
        if checked and (why is None or time.monotonic() - checked < wait):
            return why is None
        if conn is None and info.connect is None:
            return False
        why, transient = self._check_commit_point(info, conn)
        with s.mu:
            s.checked, s.why, s.transient = time.monotonic(), why, transient
        if why is not None:
            self._warn(
                "resource manager %s cannot be a commit point; its branches are prepared and another branch or the coordinator decides (checked again later): %s",
                info.name,
                why,
            )
        return why is None

    def _check_commit_point(self, info: _RMInfo, conn: Any) -> Tuple[Optional[str], bool]:
        d = info.driver
        own = None
        try:
            q = conn
            if info.connect is not None:
                own = q = _own_conn(info)
                decision.ensure(d, own)
                if conn is not None:
                    a = _db.read_row(d, conn, _identity_query(d))
                    b = _db.read_row(d, own, _identity_query(d))
                    if a != b:
                        return (
                            "rm %r: RM.connect reaches another decision table than the application's connections (%s against %s): "
                            "give it the same database and user, or none" % (info.name, b, a),
                            False,
                        )
            why = decision.check_durable(d, lambda sql: _db.read_row(d, q, sql))
            if why is not None:
                return why, False
            try:
                _db.read_row(d, q, "SELECT gtrid FROM " + decision.TABLE_NAME + " WHERE 1 = 0")
            except Exception as e:
                return (
                    "rm %r: the decision table %s is not usable (%s): start the coordinator with this RM (it creates the table), "
                    "run tandem init-rm, or give RM.connect" % (info.name, decision.TABLE_NAME, e),
                    _transient(e),
                )
            ident = self._table_id(info, conn)
            if own is not None and conn is not None:
                row = _db.read_row(d, own, "SELECT id FROM " + decision.ID_TABLE_NAME)
                pid = str(row[0]).strip() if row else ""
                if pid != ident:
                    return (
                        "rm %r: RM.connect reaches decision table %s, the application's connections %s: give it the same database and user"
                        % (info.name, pid, ident),
                        False,
                    )
            return None, False
        except Exception as e:
            return "rm %r: %s" % (info.name, e), _transient(e)
        finally:
            if own is not None:
                _db.close_conn(own)

    def _forget_later(self, info: _RMInfo, g: str) -> None:
        """Queues g's decision row for deletion: with RM.connect a full batch
        is deleted in the background, in its own statement; without, the
        next commit at this commit point carries it."""
        s = info.cp
        s.add_forget(g)
        if info.connect is None:
            return
        with s.mu:
            start = (
                not s.forgetting
                and len(s.forget) >= FORGET_BATCH
                and s.forget_at[FORGET_BATCH - 1] <= time.monotonic() - FORGET_AFTER
            )
            if start:
                s.forgetting = True
        if start:
            try:
                self._pool.submit(self._forget_rows, info)
            except RuntimeError:  # closed: a later client's commits or the coordinator's sweep forget them
                with s.mu:
                    s.forgetting = False

    def _forget_rows(self, info: _RMInfo) -> None:
        s = info.cp
        try:
            while True:
                gs = s.take_forget(time.monotonic())
                if not gs:
                    return
                try:
                    conn = _own_conn(info)
                    try:
                        decision.forget(info.driver, conn, gs)
                    finally:
                        _db.close_conn(conn)
                except Exception as e:
                    s.give_back(gs)
                    self._warn("deleting decided rows from the decision table of %s failed; will try again with the next batch: %s", info.name, e)
                    return
        finally:
            with s.mu:
                s.forgetting = False

    def _resolve_by_key(self, info: _RMInfo, g: str, table: str, decided: float) -> str:
        """Learns the outcome of g from the commit point's table by taking
        the key, retrying while the commit point's transaction is still
        open, within the decision timeout and never past KEY_HORIZON after
        the decision was sent (decided, time.monotonic()).

        The horizon is checked before every attempt, the first included: a
        key taken after the 'C' row could have been forgotten would record
        'A' for a transaction committed everywhere. Past it (or the decision
        timeout) a TandemError is raised without touching the table, and the
        caller reports the outcome unknown. An attempt's lock wait ends at
        the horizon too."""
        if info.connect is None:
            raise TandemError("no RM.connect for %r to take the decision key with" % info.name)
        horizon = decided + KEY_HORIZON
        deadline = min(self._deadline(None), horizon)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TandemError(
                    "the decision was sent %.1fs ago, past the %.0fs within which its key may be taken (its 'C' row may have been "
                    "forgotten since), or the decision timeout passed: not taken" % (time.monotonic() - decided, KEY_HORIZON)
                )
            try:
                return decision.resolve(info.driver, lambda: info.connect(), g, table, max(0.1, min(2.0, left)))
            except decision.Pending:
                if time.monotonic() + 0.1 >= deadline:
                    raise
            except Exception as e:
                if isinstance(e, decision.DecisionError) or time.monotonic() + 0.1 >= deadline or _db.server_said_no(e):
                    raise
                # the database unreachable for a moment: try again within the horizon
            time.sleep(0.1)


def _own_conn(info: _RMInfo) -> Any:
    conn = info.connect()
    _db.make_autocommit(info.driver, conn)
    return conn


def _identity_query(d: str) -> str:
    """What a connection reaches as the decision table: database, server and
    the table's own identity (cp_choice.go's tableIdentity)."""
    if d == _db.MYSQL:
        return (
            "SELECT concat_ws('/', DATABASE(), @@hostname, @@port, @@server_id, "
            "(SELECT coalesce(create_time, '') FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = '"
            + decision.TABLE_NAME
            + "'))"
        )
    return (
        "SELECT concat_ws('/', current_database(), coalesce(inet_server_addr()::text, 'local'), inet_server_port()::text, "
        "pg_postmaster_start_time()::text, coalesce(to_regclass('" + decision.TABLE_NAME + "')::oid::text, 'none'))"
    )


def _transient(e: BaseException) -> bool:
    """Whether e may pass by itself (a failed connection, a timeout), as
    opposed to the database's answer or a verdict on its settings."""
    if _db.server_said_no(e) or isinstance(e, (TandemError, decision.DecisionError, ValueError)):
        return False
    return True
