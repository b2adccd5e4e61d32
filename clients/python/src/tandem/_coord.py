"""The coordinator's gRPC API as the client uses it: the Commit call and
its ambiguity rules, Status and Abort, following the primary across a list
of coordinators (the Go SDK's client/commit_coordinator.go and follow.go).

Rules kept from Go:
- A Commit attempt that ended without a definite answer (UNAVAILABLE,
  DEADLINE_EXCEEDED, …) may have written the decision: from then on the
  outcome is unknown until a coordinator that serves answers it, and no
  later refusal makes a rollback safe.
- A refusal from a coordinator that is not the primary (the
  tandem-not-primary trailer, or FAILED_PRECONDITION with several
  coordinators) wrote nothing: the call moves to the one that serves.
- After an unanswered attempt, the first call to the coordinator moved to
  is Status without resolve (never anything that could write ABORT).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, List, Optional, Sequence, Tuple

import grpc

from ._pb import tandem_pb2 as pb
from ._pb import tandem_pb2_grpc as pb_grpc

MD_EARLY_DECISION = "tandem-early-decision"
MD_DECISION = "tandem-decision"
MD_NOT_PRIMARY = "tandem-not-primary"
MD_OWNER = "tandem-owner"
# A Commit that lets the coordinator take session-bound branches over while
# its standby lags (visibility async); the response header MD_TAKEN_OVER,
# beside MD_DECISION, says it did.
MD_MAY_TAKE_OVER = "tandem-may-take-over"
MD_TAKEN_OVER = "tandem-taken-over"
# Health's header: "1" when the coordinator accepts client_settles on a
# branch of any resource manager, not only a session-bound one.
MD_CLIENT_SETTLES_ANY = "tandem-client-settles-any"

PROBE_TIMEOUT = 1.0
PROBE_QUIET = 0.05

_EPOCH = re.compile(r"\bepoch=(\d+)")
_CLUSTER = re.compile(r"\bcluster=(\S+)")

_REJECTIONS = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.UNIMPLEMENTED,
}


def code_of(e: Optional[BaseException]) -> Optional[grpc.StatusCode]:
    if e is None:
        return None
    f = getattr(e, "code", None)
    if callable(f):
        try:
            return f()
        except Exception:
            return grpc.StatusCode.UNKNOWN
    return grpc.StatusCode.UNKNOWN


def is_rejection(e: Optional[BaseException]) -> bool:
    """The coordinator refused the request as a whole: nothing was written."""
    return code_of(e) in _REJECTIONS


def retryable(e: Optional[BaseException]) -> bool:
    return code_of(e) in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED)


def describe(addr: str, e: BaseException) -> str:
    c = code_of(e)
    details = getattr(e, "details", None)
    d = details() if callable(details) else str(e)
    return "coordinator %s: %s: %s" % (addr, c.name if c else "?", d)


def trailer_of(e_or_call) -> Sequence[Tuple[str, str]]:
    f = getattr(e_or_call, "trailing_metadata", None)
    if not callable(f):
        return ()
    try:
        return f() or ()
    except Exception:
        return ()


def not_primary(trailer: Sequence[Tuple[str, str]]) -> Optional[str]:
    for k, v in trailer:
        if k == MD_NOT_PRIMARY:
            return v
    return None


def place_in(msg: str) -> Tuple[str, int]:
    """The cluster and epoch of a Health message, read from its
    "role=… cluster=ID epoch=N" line (the whole message when it has none)."""
    line = msg
    for l in msg.split("\n"):
        if l.startswith("role="):
            line = l
            break
    cluster, epoch = "", 0
    m = _EPOCH.search(line)
    if m:
        epoch = int(m.group(1))
    m = _CLUSTER.search(line)
    if m:
        cluster = m.group(1)
    return cluster, epoch


class UnknownAfter(Exception):
    """An attempt was refused after an earlier one ended without an answer:
    the refusal does not settle the earlier attempt; the outcome is unknown."""

    def __init__(self, ambiguous: str, last: str):
        self.ambiguous, self.last = ambiguous, last
        super().__init__(
            "an earlier Commit attempt ended without an answer (%s), so the decision may exist; a later attempt was refused (%s), "
            "which does not settle it. Ask the current primary (Status) for the outcome" % (ambiguous, last)
        )


class GaveUp(Exception):
    """The decision deadline passed after an unanswered attempt: unknown."""


class NoPrimary(Exception):
    """Every attempt was refused before anything was written (no coordinator
    served as the primary) until the deadline: no decision exists."""


class LogFull(Exception):
    """The coordinator answered RESOURCE_EXHAUSTED (decision log full,
    nothing written) until the deadline: no decision exists."""


def _details(err: BaseException) -> str:
    """The status message of a gRPC error ("" for none)."""
    try:
        return err.details() or ""  # type: ignore[attr-defined]
    except (AttributeError, TypeError):
        return ""


class Rejected(Exception):
    """Every attempt was answered, and the last refused the request as a
    whole: no decision was written anywhere."""

    def __init__(self, msg: str, code, details: str = ""):
        super().__init__(msg)
        self.code = code
        self.details = details  # the refusal's own message

    def refuses_client_settles(self) -> bool:
        """A coordinator older than tandem-client-settles-any refused
        client_settles on a branch that is not session-bound."""
        return self.code == grpc.StatusCode.INVALID_ARGUMENT and "client_settles" in self.details


class Failed(Exception):
    """An attempt ended otherwise (an error that is neither a definite
    refusal nor retryable): the outcome is unknown."""


class Closed(Exception):
    """The client was closed during the Commit. ambiguous is None when no
    attempt can have reached a coordinator's log (nothing decided), else
    the unanswered attempt's description (the outcome is unknown)."""

    def __init__(self, ambiguous: Optional[str]):
        self.ambiguous = ambiguous
        super().__init__(
            "the client was closed during the Commit"
            + (" after an attempt that ended without an answer (%s)" % ambiguous if ambiguous else ", before any attempt reached a coordinator")
        )


class _Endpoint:
    def __init__(self, addr: str, channel: grpc.Channel):
        self.addr = addr
        self.channel = channel
        self.stub = pb_grpc.CoordinatorStub(channel)
        # Its last Health said it accepts client_settles on any resource
        # manager (header tandem-client-settles-any: 1); False until one did.
        self.settles_any = False


class Coordinators:
    """The configured coordinators of one cluster and the one in use."""

    def __init__(
        self,
        addrs: Sequence[str],
        auth_token: Optional[str] = None,
        root_certificates: Optional[bytes] = None,
        private_key: Optional[bytes] = None,
        certificate_chain: Optional[bytes] = None,
        tls: bool = False,
        logger: Optional[logging.Logger] = None,
    ):
        opts = [
            # A primary whose machine went silent would hold a Commit until the
            # decision deadline: a ping after 15 s without a byte, given up 5 s
            # later, fails the call UNAVAILABLE so the client moves on.
            ("grpc.keepalive_time_ms", 15000),
            ("grpc.keepalive_timeout_ms", 5000),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.max_pings_without_data", 0),
        ]
        self.eps: List[_Endpoint] = []
        for a in addrs:
            if tls or root_certificates is not None:
                creds = grpc.ssl_channel_credentials(root_certificates, private_key, certificate_chain)
                ch = grpc.secure_channel(a, creds, options=opts)
            else:
                ch = grpc.insecure_channel(a, options=opts)
            self.eps.append(_Endpoint(a, ch))
        self.md: List[Tuple[str, str]] = []
        if auth_token:
            self.md.append(("authorization", "Bearer " + auth_token))
        self.logger = logger
        self.calls = 0
        self._cur = self.eps[0]
        self._mu = threading.Lock()
        self._probing: Optional[threading.Event] = None
        self._last_probe = 0.0
        self.cluster = ""  # the cluster followed, learnt from the first answer naming one
        self._floor = 0  # the highest epoch moved to
        self._pool = ThreadPoolExecutor(max_workers=max(2, len(self.eps)), thread_name_prefix="tandem-probe")
        self.closed = False

    def close(self) -> None:
        self.closed = True
        for ep in self.eps:
            ep.channel.close()
        self._pool.shutdown(wait=False)

    def current(self) -> _Endpoint:
        return self._cur

    def addr_list(self) -> str:
        return ", ".join(ep.addr for ep in self.eps)

    def _count(self) -> None:
        with self._mu:
            self.calls += 1

    def warn(self, msg: str, *args) -> None:
        if self.logger is not None:
            self.logger.warning(msg, *args)

    # --- Health, and where the primary is ------------------------------------

    def health(self, ep: _Endpoint, timeout: float):
        """Asks ep's Health, and keeps what its headers say it accepts."""
        self._count()
        h, call = ep.stub.Health.with_call(pb.HealthRequest(), timeout=timeout, metadata=self.md)
        ep.settles_any = any(k == MD_CLIENT_SETTLES_ANY and v == "1" for k, v in (call.initial_metadata() or ()))
        return h

    def may_have_moved(self, e: BaseException, trailer) -> bool:
        if not_primary(trailer) is not None:
            return True
        c = code_of(e)
        if c == grpc.StatusCode.UNAVAILABLE:
            return True
        if c == grpc.StatusCode.FAILED_PRECONDITION:
            return len(self.eps) > 1
        return False

    def move_from(self, frm: _Endpoint, why: BaseException, deadline: float) -> Tuple[_Endpoint, bool]:
        """Looks for the coordinator that serves after frm refused a call or
        could not be reached; returns the endpoint to use next and whether
        it differs from frm. One probe at a time: the others take its answer."""
        with self._mu:
            cur = self._cur
            if cur is not frm:
                return cur, True
            wait = self._probing
            if wait is None:
                if len(self.eps) == 1 or time.monotonic() - self._last_probe < PROBE_QUIET:
                    return frm, False
                done = threading.Event()
                self._probing = done
        if wait is not None:
            wait.wait(max(deadline - time.monotonic(), 0))
            cur = self._cur
            return cur, cur is not frm
        try:
            to, cluster, epoch = self._probe(frm, deadline)
        finally:
            with self._mu:
                self._probing = None
            done.set()
        with self._mu:
            if to is frm:
                self._last_probe = time.monotonic()
                return frm, False
            self._cur = to
            self._last_probe = 0.0
            if cluster:
                self.cluster = cluster
                self._floor = max(self._floor, epoch)
        self.warn("coordinator moved from %s to %s (because: %s; epoch %d)", frm.addr, to.addr, describe(frm.addr, why), epoch)
        return to, True

    def _probe(self, frm: _Endpoint, deadline: float) -> Tuple[_Endpoint, str, int]:
        """Asks every coordinator's Health in parallel and returns the one
        that serves with the highest epoch, following one cluster, forward
        only (follow.go's probe)."""
        budget = min(PROBE_TIMEOUT, max(deadline - time.monotonic(), 0.001))
        eps = self.eps

        def ask(ep):
            try:
                h = self.health(ep, budget)
            except grpc.RpcError:
                return None
            c, e = place_in(h.message)
            return (h.serving, c, e)

        answers = list(self._pool.map(ask, eps))
        if time.monotonic() >= deadline:
            return frm, "", 0  # cut short: the one not heard may be the newer primary
        with self._mu:
            for ep, a in zip(eps, answers):
                if ep is frm and not self.cluster and a is not None:
                    self.cluster = a[1]
            known, floor = self.cluster, self._floor
        best = -1
        clusters = set()

        def better(i, j):
            ci, cj = answers[i][1] != "", answers[j][1] != ""
            if ci != cj:
                return ci
            return answers[i][2] > answers[j][2] or (answers[i][2] == answers[j][2] and eps[i] is frm)

        for i, a in enumerate(answers):
            if a is None or not a[0]:
                continue
            if a[1] and known and a[1] != known:
                self.warn("a coordinator in the list serves another cluster than the one this client follows: never used (%s, its cluster %s, followed %s)", eps[i].addr, a[1], known)
                continue
            if a[1] and a[2] < floor:
                continue  # superseded: a primary of a newer epoch was moved to
            if a[1]:
                clusters.add(a[1])
            if best < 0 or better(i, best):
                best = i
        if best < 0 or len(clusters) > 1:
            if len(clusters) > 1:
                self.warn("coordinators of several clusters serve, and this client does not know which it follows yet: it moves to none")
            return frm, "", 0
        return eps[best], answers[best][1], answers[best][2]

    # --- Status and Abort --------------------------------------------------------

    def call(self, fn: Callable, deadline: float):
        """Runs one Status or Abort (fn(ep, timeout, metadata)) on the
        coordinator in use, following the primary until the deadline. Both
        are safe to repeat."""
        ep = self._cur
        backoff = 0.01
        while True:
            self._count()
            try:
                return fn(ep, max(deadline - time.monotonic(), 0.001), self.md)
            except grpc.RpcError as e:
                trailer = trailer_of(e)
                if not self.may_have_moved(e, trailer) or time.monotonic() >= deadline:
                    raise
                nxt, moved = self.move_from(ep, e, deadline)
                if moved:
                    ep = nxt
                    continue
                if not_primary(trailer) is None and code_of(e) != grpc.StatusCode.UNAVAILABLE:
                    raise  # FAILED_PRECONDITION with nobody else serving: a refusal
                last = e
            if time.monotonic() + backoff >= deadline:
                raise Failed("no coordinator of %s serves (the last answer, from %s)" % (self.addr_list(), describe(ep.addr, last)))
            time.sleep(backoff)
            backoff = min(2 * backoff, 1.0)

    def status(self, gtrid: str, resolve: bool, deadline: float):
        return self.call(lambda ep, t, md: ep.stub.Status(pb.StatusRequest(gtrid=gtrid, resolve=resolve), timeout=t, metadata=md), deadline)

    def abort(self, gtrid: str, rms: Sequence[str], owner: str, deadline: float):
        req = pb.AbortRequest(gtrid=gtrid, branches=[pb.Branch(rm=r) for r in rms])
        extra = [(MD_OWNER, owner)] if owner else []
        return self.call(lambda ep, t, md: ep.stub.Abort(req, timeout=t, metadata=md + extra), deadline)

    # --- Commit ------------------------------------------------------------------

    def commit(self, req, owner: str, deadline: float, on_committed: Optional[Callable[[bool], None]] = None, may_take_over: bool = False):
        """_commit; a close() meanwhile (grpc's ValueError on a closed
        channel, the probe pool's RuntimeError) raises Closed, saying
        whether an attempt may have reached a coordinator's log."""
        seen: List[str] = []
        try:
            return self._commit(req, owner, deadline, on_committed, seen, may_take_over)
        except (ValueError, RuntimeError) as e:
            if not self.closed:
                raise
            raise Closed(seen[0] if seen else None) from e

    def _commit(self, req, owner: str, deadline: float, on_committed: Optional[Callable[[bool], None]], seen: List[str], may_take_over: bool = False):
        """Sends Commit, retrying while the coordinator is unreachable (or its
        log full) until the deadline, following the primary. Returns (reply,
        calls). With on_committed, asks for the early decision and runs it
        once the response headers say COMMITTED (durable), telling it whether
        the coordinator took the session-bound branches over (asked for with
        may_take_over); from then on an error on the rest of the call is
        COMMITTED with phase 2 pending.

        Raises UnknownAfter, GaveUp, Failed (outcome unknown), NoPrimary,
        LogFull or Rejected (nothing decided)."""
        md = list(self.md)
        if owner:
            md.append((MD_OWNER, owner))
        if on_committed is not None:
            md.append((MD_EARLY_DECISION, "1"))
            if may_take_over:
                md.append((MD_MAY_TAKE_OVER, "1"))
        committed = False
        ambiguous: Optional[str] = None
        ep = self._cur
        ask_status = False
        moves = 0
        backoff = 0.01
        calls = 0
        while True:
            calls += 1
            self._count()
            timeout = max(deadline - time.monotonic(), 0.001)
            err: Optional[BaseException] = None
            trailer: Sequence[Tuple[str, str]] = ()
            if ask_status:
                try:
                    st = ep.stub.Status(pb.StatusRequest(gtrid=req.gtrid), timeout=timeout, metadata=self.md)
                except grpc.RpcError as e:
                    err, trailer = e, trailer_of(e)
                else:
                    if st.outcome == pb.ABORTED or (st.outcome == pb.COMMITTED and on_committed is None):
                        return (
                            pb.CommitResponse(
                                outcome=st.outcome,
                                phase2_pending=st.phase2_pending,
                                branches=st.branches,
                                message="after a role change, the primary at %s answers: %s" % (ep.addr, st.message),
                            ),
                            calls,
                        )
                    ask_status = False  # UNDECIDED: decide there
                    calls += 1
                    self._count()
            if not ask_status:
                try:
                    if on_committed is not None:
                        fut = ep.stub.Commit.future(req, timeout=timeout, metadata=md)
                        headers = fut.initial_metadata() or ()
                        if not committed and (MD_DECISION, "COMMITTED") in headers:
                            committed = True
                            # Any value: as the Go SDK, the header's presence decides.
                            on_committed(any(k == MD_TAKEN_OVER for k, _ in headers))
                        resp = fut.result()
                    else:
                        resp, _call = ep.stub.Commit.with_call(req, timeout=timeout, metadata=md)
                    return resp, calls
                except grpc.RpcError as e:
                    err, trailer = e, trailer_of(e)
                    if committed:
                        return (
                            pb.CommitResponse(
                                outcome=pb.COMMITTED,
                                phase2_pending=True,
                                message="the coordinator decided COMMIT (durable); its reply after phase 2 was lost: " + describe(ep.addr, e),
                            ),
                            calls,
                        )
            refused_here = not_primary(trailer) is not None  # this attempt wrote nothing
            definite = refused_here or is_rejection(err) or code_of(err) == grpc.StatusCode.RESOURCE_EXHAUSTED
            if ambiguous is None and not definite and not ask_status:
                ambiguous = describe(ep.addr, err)
                seen.append(ambiguous)
            retry = refused_here or retryable(err)
            if self.may_have_moved(err, trailer):
                nxt, moved = self.move_from(ep, err, deadline)
                if moved:
                    ep, retry = nxt, True
                    ask_status = ambiguous is not None
                    moves += 1
                    if moves == 1:
                        continue  # straight to the new primary
            last = describe(ep.addr, err)
            if not retry and ambiguous is not None and definite:
                raise UnknownAfter(ambiguous, last)
            if not retry:
                if is_rejection(err) and ambiguous is None:
                    raise Rejected(last, code_of(err), _details(err))
                raise Failed(last)
            if time.monotonic() + backoff >= deadline:
                self._give_up(ambiguous, err, last, refused_here)
            if code_of(err) == grpc.StatusCode.UNAVAILABLE:
                self.warn("coordinator unreachable at %s, retrying (gtrid %s, attempt %d): %s", ep.addr, req.gtrid, calls, last)
            time.sleep(backoff)
            backoff = min(2 * backoff, 1.0)

    def _give_up(self, ambiguous: Optional[str], err: BaseException, last: str, refused: bool):
        definite = refused or is_rejection(err) or code_of(err) == grpc.StatusCode.RESOURCE_EXHAUSTED
        if ambiguous is not None and definite and ambiguous != last:
            raise UnknownAfter(ambiguous, last)
        if ambiguous is not None:
            raise GaveUp("the decision deadline passed (last error: %s)" % last)
        if code_of(err) == grpc.StatusCode.RESOURCE_EXHAUSTED:
            raise LogFull(last)
        raise NoPrimary(
            "no coordinator of %s served as the primary before the deadline (each refused before writing anything; the last: %s)"
            % (self.addr_list(), last)
        )
