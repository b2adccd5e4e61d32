"""The coordinator's path when things go wrong: an ambiguous answer is an
unknown outcome, never a rollback; the outcome is what the coordinator
settles; the client follows the primary across a list of coordinators.
Real coordinators, and a scripted fake one (a gRPC server in this process)
for a standby's refusal and the ambiguity rules."""

import re
import threading
from concurrent import futures

import grpc
import pytest

import tandem
from conftest import eventually, free_addr, make_client
from tandem._pb import tandem_pb2 as pb
from tandem._pb import tandem_pb2_grpc as pb_grpc
from test_commit import write_both


class FakeCoordinator(pb_grpc.CoordinatorServicer):
    """A scripted coordinator: health() answers Health; commit is a list of
    answers for successive Commit calls: a grpc.StatusCode (refused with
    it; with the tandem-not-primary trailer when not_primary is set),
    "taken-over" (COMMITTED, with the headers of a coordinator that took the
    session-bound branches over; it settles nothing), "committed" (COMMITTED;
    it settles nothing) or "refuse-client-settles" (an older coordinator's
    refusal of client_settles on PostgreSQL). metadata holds each Commit's
    request metadata, requests the requests; with settles_any its Health
    says it accepts client_settles on any RM."""

    def __init__(self, cluster: str, serving: bool, role: str = "primary", commit=(), not_primary: str = "", settles_any: bool = False):
        self.cluster, self.serving, self.role = cluster, serving, role
        self.settles_any = settles_any
        self.requests = []
        self.commit_answers = list(commit)
        self.not_primary = not_primary
        self.commits = 0
        self.metadata = []
        self.addr = free_addr()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_CoordinatorServicer_to_server(self, self.server)
        self.server.add_insecure_port(self.addr)
        self.server.start()
        self.mu = threading.Lock()

    def stop(self):
        self.server.stop(0)

    def Health(self, request, context):
        if self.settles_any:
            context.send_initial_metadata((("tandem-client-settles-any", "1"),))
        return pb.HealthResponse(
            serving=self.serving, message="role=%s cluster=%s epoch=1" % (self.role, self.cluster),
            rms=[pb.RMHealth(name="pg", reachable=True), pb.RMHealth(name="maria", reachable=True)],
        )

    def _refuse(self, context, code):
        if self.not_primary:
            context.set_trailing_metadata((("tandem-not-primary", self.not_primary),))
        context.abort(code, "fake coordinator: %s" % code.name)

    def Commit(self, request, context):
        with self.mu:
            self.commits += 1
            self.metadata.append(dict(context.invocation_metadata()))
            self.requests.append(request)
            a = self.commit_answers.pop(0) if self.commit_answers else grpc.StatusCode.FAILED_PRECONDITION
        if a == "committed":
            return pb.CommitResponse(outcome=pb.COMMITTED)
        if a == "refuse-client-settles":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, 'client_settles is set on the branch on "pg": client_settles is only for session-bound branches (mysql)')
        if a == "taken-over":
            context.send_initial_metadata((("tandem-decision", "COMMITTED"), ("tandem-taken-over", "1")))
            return pb.CommitResponse(outcome=pb.COMMITTED, phase2_pending=True)
        self._refuse(context, a)

    def Status(self, request, context):
        self._refuse(context, grpc.StatusCode.FAILED_PRECONDITION)

    def Abort(self, request, context):
        self._refuse(context, grpc.StatusCode.FAILED_PRECONDITION)


def cluster_of(coord) -> str:
    with grpc.insecure_channel(coord.addr) as ch:
        h = pb_grpc.CoordinatorStub(ch).Health(pb.HealthRequest(), timeout=5)
    return re.search(r"cluster=(\S+)", h.message).group(1)


def test_coordinator_dying_after_its_decision_is_unknown_then_committed(db, coordinator_factory):
    """The coordinator dies right after its durable COMMIT record: the client
    cannot learn the outcome, says so naming the gtrid, and rolls nothing
    back; the restarted coordinator commits both branches."""
    coord = coordinator_factory(failpoints="after-commit-record=kill")
    db.table("py_unknown")
    cli = make_client(db, coord, decide_at="coordinator", decision_timeout=2.0)
    tx = cli.begin()
    write_both(tx, db, "py_unknown", 1)
    with pytest.raises(tandem.OutcomeUnknown) as e:
        tx.commit()
    assert e.value.gtrid == tx.gtrid and tx.gtrid in str(e.value)
    left = db.prepared_for(tx.gtrid)
    assert len(left) == 2, "nothing may be rolled back after an ambiguous answer; prepared: %s" % left
    assert db.count("pg", "py_unknown", 1) == 0 and db.count("maria", "py_unknown", 1) == 0
    coord.kill()
    coord.start()
    eventually(15, "both branches committed by the restarted coordinator",
               lambda: db.count("pg", "py_unknown", 1) == 1 and db.count("maria", "py_unknown", 1) == 1)
    assert cli.status(tx.gtrid).outcome == "COMMITTED"
    eventually(10, "nothing left prepared", lambda: db.prepared_for(tx.gtrid) == [])
    cli.close()


def test_unreachable_coordinator_is_unknown_and_its_orphans_are_rolled_back(db, coordinator_factory):
    """The coordinator is gone when the Commit is sent: the outcome is
    unknown (the decision could have been written by an attempt that went
    unanswered); the coordinator, back, never got the Commit and rolls the
    prepared branches back after its orphan timeout."""
    coord = coordinator_factory()
    db.table("py_gone")
    cli = make_client(db, coord, decide_at="coordinator", decision_timeout=1.5)
    pg, my = db.pg_conn(), db.my_conn()
    tx = cli.begin()
    write_both(tx, db, "py_gone", 1, pg, my)
    tx.commit()  # learns the cluster's identity
    tx = cli.begin()
    write_both(tx, db, "py_gone", 2, pg, my)
    coord.kill()
    with pytest.raises(tandem.OutcomeUnknown) as e:
        tx.commit()
    assert e.value.gtrid == tx.gtrid
    assert len(db.prepared_for(tx.gtrid)) == 2
    coord.start()
    eventually(15, "the orphans rolled back", lambda: db.prepared_for(tx.gtrid) == [])
    assert db.count("pg", "py_gone", 2) == 0 and db.count("maria", "py_gone", 2) == 0
    cli.close()


def test_follows_the_primary_past_an_unreachable_address(db, coordinator):
    db.table("py_follow1")
    cli = tandem.Client(
        rms=[tandem.RM("pg", "postgres", connect=db.pg_conn), tandem.RM("maria", "mysql", connect=db.my_conn)],
        coordinators=[free_addr(), coordinator.addr],
        defaults=tandem.CommitOptions(decide_at="coordinator"),
        decision_timeout=10,
    )
    tx = cli.begin()
    write_both(tx, db, "py_follow1", 1)
    res = tx.commit()
    assert res.path == tandem.TWO_PHASE
    assert cli.current_coordinator() == coordinator.addr
    assert db.count("pg", "py_follow1", 1) == 1 and db.count("maria", "py_follow1", 1) == 1
    cli.close()


def test_follows_the_primary_past_a_standby(db, coordinator):
    """A standby refuses the Commit (tandem-not-primary, FAILED_PRECONDITION,
    nothing written): the client finds the primary by Health and commits there."""
    standby = FakeCoordinator(cluster_of(coordinator), serving=False, role="standby", not_primary="standby")
    db.table("py_follow2")
    cli = tandem.Client(
        rms=[tandem.RM("pg", "postgres", connect=db.pg_conn), tandem.RM("maria", "mysql", connect=db.my_conn)],
        coordinators=[standby.addr, coordinator.addr],
        defaults=tandem.CommitOptions(decide_at="coordinator"),
    )
    tx = cli.begin()
    write_both(tx, db, "py_follow2", 1)
    res = tx.commit()
    assert res.path == tandem.TWO_PHASE and standby.commits == 1
    assert cli.current_coordinator() == coordinator.addr
    assert db.count("pg", "py_follow2", 1) == 1 and db.count("maria", "py_follow2", 1) == 1
    assert cli.status(tx.gtrid).outcome == "COMMITTED"
    cli.close()
    standby.stop()


def test_a_refusal_after_an_unanswered_attempt_is_unknown_never_a_rollback(db):
    fake = FakeCoordinator("0123456789abcdef0123456789abcdef", serving=True,
                           commit=[grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.PERMISSION_DENIED])
    db.table("py_ambig")
    cli = tandem.Client(
        rms=[tandem.RM("pg", "postgres", connect=db.pg_conn), tandem.RM("maria", "mysql", connect=db.my_conn)],
        coordinator=fake.addr, defaults=tandem.CommitOptions(decide_at="coordinator"), decision_timeout=5,
    )
    tx = cli.begin()
    write_both(tx, db, "py_ambig", 1)
    try:
        with pytest.raises(tandem.OutcomeUnknown) as e:
            tx.commit()
        assert "does not settle it" in str(e.value) and fake.commits == 2
        assert len(db.prepared_for(tx.gtrid)) == 2, "rolled back after an ambiguous answer"
    finally:
        db.rollback_leftovers()
        cli.close()
        fake.stop()


def test_a_refusal_first_is_an_abort(db):
    fake = FakeCoordinator("0123456789abcdef0123456789abcdef", serving=True, commit=[grpc.StatusCode.PERMISSION_DENIED])
    db.table("py_refused")
    cli = tandem.Client(
        rms=[tandem.RM("pg", "postgres", connect=db.pg_conn), tandem.RM("maria", "mysql", connect=db.my_conn)],
        coordinator=fake.addr, defaults=tandem.CommitOptions(decide_at="coordinator"), decision_timeout=5,
    )
    tx = cli.begin()
    write_both(tx, db, "py_refused", 1)
    with pytest.raises(tandem.Aborted) as e:
        tx.commit()
    assert e.value.stage == "refused" and fake.commits == 1
    assert db.prepared_for(tx.gtrid) == []
    cli.close()
    fake.stop()


def test_follows_the_primary_through_a_switchover(db, coordinator_factory, tandem_bin):
    """A real primary and standby (two `tandem serve`), `tandem switchover`
    between two transactions: the client, given both addresses, commits the
    first at the old primary and the second at the new one, with no
    repointing; both are committed on both databases."""
    import os
    import subprocess

    la, lb, aa, ab = free_addr(), free_addr(), free_addr(), free_addr()
    a = coordinator_factory(extra=["--admin", aa, "--standby-listen", la, "--peer", lb])
    b = coordinator_factory(extra=["--admin", ab, "--standby-of", la, "--standby-listen", lb, "--peer", la])
    db.table("py_switch")
    cli = tandem.Client(
        rms=[tandem.RM("pg", "postgres", connect=db.pg_conn), tandem.RM("maria", "mysql", connect=db.my_conn)],
        coordinators=[a.addr, b.addr],
        defaults=tandem.CommitOptions(decide_at="coordinator"),
        decision_timeout=30,
    )
    try:
        tx1 = cli.begin()
        write_both(tx1, db, "py_switch", 1)
        assert tx1.commit().path == tandem.TWO_PHASE
        assert cli.current_coordinator() == a.addr
        out = subprocess.run(
            [tandem_bin, "switchover", "--primary-admin", aa, "--standby-admin", ab,
             "--primary-token-file", os.path.join(a.data_dir, "admin.token"),
             "--standby-token-file", os.path.join(b.data_dir, "admin.token")],
            capture_output=True, text=True, timeout=90)
        assert "switchover done" in out.stdout + out.stderr, (
            "tandem switchover: " + out.stdout + out.stderr + "\nA:\n" + a.output() + "\nB:\n" + b.output())
        tx2 = cli.begin()
        write_both(tx2, db, "py_switch", 2)
        assert tx2.commit().path == tandem.TWO_PHASE
        assert cli.current_coordinator() == b.addr
        for i in (1, 2):
            assert db.count("pg", "py_switch", i) == 1 and db.count("maria", "py_switch", i) == 1
        assert cli.status(tx1.gtrid).outcome == "COMMITTED" and cli.status(tx2.gtrid).outcome == "COMMITTED"
    finally:
        cli.close()


def _health(addr: str) -> str:
    with grpc.insecure_channel(addr) as ch:
        try:
            return pb_grpc.CoordinatorStub(ch).Health(pb.HealthRequest(), timeout=1).message
        except grpc.RpcError as e:
            return str(e)


def test_may_take_over_while_the_standby_lags(db, coordinator_factory):
    """A primary whose async standby lags (its shipping held 3 s a frame by a
    failpoint): with may_take_over and visibility "async", commit() does not
    wait for the standby. The coordinator takes the MariaDB branch over,
    commit() closes that session and names it in Result.ended_sessions, and
    the coordinator commits the branch once its standby holds the decision.
    Without may_take_over the client commits on its own session, which stays
    usable."""
    import pymysql

    sb_listen = free_addr()
    prim = coordinator_factory(extra=["--standby-listen", sb_listen, "--transport", "async", "--net-timeout", "20s"])
    coordinator_factory(extra=["--standby-of", sb_listen])
    eventually(10, "the standby connected", lambda: "standby=127.0.0.1" in _health(prim.addr))
    # Restarted with its shipping held: the standby reconnects and gets
    # nothing new for 3 s a frame.
    prim.stop()
    prim.start("standby-before-ship=sleep(3s)")
    eventually(10, "the standby connected again", lambda: "standby=127.0.0.1" in _health(prim.addr))
    db.table("py_takeover")
    cli = make_client(db, prim, decide_at="coordinator", decision_timeout=30)
    try:
        tx = cli.begin(tandem.CommitOptions(decide_at="coordinator", visibility="async", may_take_over=True))
        pg, my = write_both(tx, db, "py_takeover", 1)
        res = tx.commit()
        assert res.ended_sessions == ["maria"] and res.phase2_pending, res
        with pytest.raises(pymysql.err.Error):
            my.cursor().execute("SELECT 1")
        assert len(db.prepared_for(tx.gtrid)) == 2 and db.count("maria", "py_takeover", 1) == 0, (
            "a branch was settled before the standby could hold the decision")
        eventually(30, "the taken-over transaction committed on both databases",
                   lambda: db.count("pg", "py_takeover", 1) == 1 and db.count("maria", "py_takeover", 1) == 1 and db.prepared_for(tx.gtrid) == [])

        tx2 = cli.begin(tandem.CommitOptions(decide_at="coordinator", visibility="async"))
        _, my2 = write_both(tx2, db, "py_takeover", 2)
        res2 = tx2.commit()
        assert res2.ended_sessions == [], res2
        assert db.count("maria", "py_takeover", 2) == 1, "without a take-over the MariaDB branch is committed on the client's session before commit() returns"
        with my2.cursor() as c:
            c.execute("SELECT 1")
    finally:
        cli.close()


def test_may_take_over_must_be_a_bool():
    with pytest.raises(tandem.ConfigError):
        tandem.Client(rms=[tandem.RM("pg", "postgres")], defaults=tandem.CommitOptions(decide_at="coordinator", may_take_over="yes"))


def test_a_take_over_answered_to_a_retry_is_honoured_even_unasked(db):
    """The Commit's first attempt goes unanswered; the retry is answered
    COMMITTED with the branches taken over (as a coordinator answers every
    repeat of a gtrid it took over, asked or not). The client must not commit
    its MariaDB branch itself: it closes the session (the branch stays
    prepared for the coordinator) and names it in ended_sessions."""
    import pymysql

    fake = FakeCoordinator("0123456789abcdef0123456789abcdef", serving=True, commit=[grpc.StatusCode.UNAVAILABLE, "taken-over"])
    db.table("py_taken")
    cli = tandem.Client(
        rms=[tandem.RM("pg", "postgres", connect=db.pg_conn), tandem.RM("maria", "mysql", connect=db.my_conn)],
        coordinator=fake.addr, defaults=tandem.CommitOptions(decide_at="coordinator", visibility="async"), decision_timeout=5,
    )
    try:
        tx = cli.begin()
        _, my = write_both(tx, db, "py_taken", 1)
        res = tx.commit()
        assert fake.commits == 2 and "tandem-may-take-over" not in fake.metadata[-1], fake.metadata
        assert res.ended_sessions == ["maria"] and res.phase2_pending, res
        with pytest.raises(pymysql.err.Error):
            my.cursor().execute("SELECT 1")
        assert len(db.prepared_for(tx.gtrid)) == 2, "a branch was settled by the client after the coordinator took it over"
    finally:
        db.rollback_leftovers()
        cli.close()
        fake.stop()


def settled_by_client(req) -> dict:
    return {b.rm: b.client_settles for b in req.branches}


def test_client_settles_every_branch_when_the_coordinator_allows_it(db):
    """A coordinator whose Health says tandem-client-settles-any: 1 gets both
    branches as the client's under visibility sync: the client commits
    PostgreSQL's too, on its own connection (the fake settles nothing, so
    the row is the client's doing). Under visibility async PostgreSQL's
    branch stays the coordinator's."""
    fake = FakeCoordinator("0123456789abcdef0123456789abcdef", serving=True, commit=["committed", "committed"], settles_any=True)
    db.table("py_settle_all")
    cli = tandem.Client(
        rms=[tandem.RM("pg", "postgres", connect=db.pg_conn), tandem.RM("maria", "mysql", connect=db.my_conn)],
        coordinator=fake.addr, defaults=tandem.CommitOptions(decide_at="coordinator"), decision_timeout=5,
    )
    try:
        tx = cli.begin()
        write_both(tx, db, "py_settle_all", 1)
        res = tx.commit()
        assert settled_by_client(fake.requests[0]) == {"pg": True, "maria": True}, fake.requests[0]
        assert not res.phase2_pending, res
        assert db.count("pg", "py_settle_all", 1) == 1 and db.count("maria", "py_settle_all", 1) == 1
        assert db.prepared_for(tx.gtrid) == []

        tx = cli.begin(tandem.CommitOptions(decide_at="coordinator", visibility="async"))
        write_both(tx, db, "py_settle_all", 2)
        tx.commit()
        assert settled_by_client(fake.requests[1]) == {"pg": False, "maria": True}, fake.requests[1]
        assert len(db.prepared_for(tx.gtrid)) == 1, "PostgreSQL's branch is the coordinator's under visibility async"
    finally:
        db.rollback_leftovers()
        cli.close()
        fake.stop()


def test_a_refused_client_settles_is_asked_again_the_old_way(db):
    """An older coordinator at the same address refuses client_settles on
    PostgreSQL before writing anything: the client sends the Commit again
    with only MariaDB's branch its own, and keeps doing so."""
    fake = FakeCoordinator("0123456789abcdef0123456789abcdef", serving=True, commit=["refuse-client-settles", "committed", "committed"], settles_any=True)
    db.table("py_settle_old")
    cli = tandem.Client(
        rms=[tandem.RM("pg", "postgres", connect=db.pg_conn), tandem.RM("maria", "mysql", connect=db.my_conn)],
        coordinator=fake.addr, defaults=tandem.CommitOptions(decide_at="coordinator"), decision_timeout=5,
    )
    try:
        for i in (1, 2):
            tx = cli.begin()
            write_both(tx, db, "py_settle_old", i)
            tx.commit()
            assert db.count("maria", "py_settle_old", i) == 1
            assert len(db.prepared_for(tx.gtrid)) == 1, "PostgreSQL's branch left to the (fake) coordinator"
            db.rollback_leftovers()
        assert fake.commits == 3, fake.commits
        assert [settled_by_client(r) for r in fake.requests] == [{"pg": True, "maria": True}, {"pg": False, "maria": True}, {"pg": False, "maria": True}]
    finally:
        db.rollback_leftovers()
        cli.close()
        fake.stop()
