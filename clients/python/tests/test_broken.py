"""The commit point's connection breaks during its decision (a proxy cuts
it): the outcome is learnt by taking the decision key (RM.connect) —
committed when the decision reached the database, aborted when it did
not — never reported unknown, never split."""

import psycopg
import pymysql
import pytest

import tandem
from conftest import eventually, make_client
from proxy import Proxy
from tandem.dsn import mysql_kwargs


@pytest.mark.parametrize("mode", ["after", "before"])
def test_mariadb_commit_point_broken_during_its_decision(db, coordinator, mode):
    db.table("py_broken")
    kw = mysql_kwargs(db.my_dsn)
    proxy = Proxy(kw["host"], kw["port"])
    kw.update(host=proxy.host, port=proxy.port)
    my = pymysql.connect(**kw)
    cli = make_client(db, coordinator)
    tx = cli.begin()
    tx.branch("pg", db.pg_conn()).execute("INSERT INTO py_broken VALUES (1, 'pg')")
    tx.branch("maria", my).execute("INSERT INTO py_broken VALUES (1, 'maria')")
    proxy.arm(b"INSERT INTO tandem_decision", mode)
    try:
        if mode == "after":
            res = tx.commit()
            assert res.path == tandem.COMMIT_POINT and res.commit_point == "maria"
            want, row = 1, "C"
        else:
            with pytest.raises(tandem.Aborted) as e:
                tx.commit()
            assert e.value.stage == "decided-abort"
            want, row = 0, "A"
        assert proxy.cut.is_set(), "the proxy never saw the decision"
        assert db.count("pg", "py_broken", 1) == want and db.count("maria", "py_broken", 1) == want
        assert db.decision_row("maria", tx.gtrid) == row
        assert db.prepared_for(tx.gtrid) == []
    finally:
        proxy.close()
        cli.close()


@pytest.mark.parametrize("mode", ["after", "before"])
def test_postgres_commit_point_broken_during_its_decision(db, coordinator, mode):
    """PostgreSQL pinned as the commit point (MariaDB kept out): the same."""
    db.table("py_broken_pg")
    info = psycopg.conninfo.conninfo_to_dict(db.pg_dsn)
    proxy = Proxy(info.get("host", "127.0.0.1"), int(info.get("port", 5432)))
    pg = psycopg.connect(db.pg_dsn, host=proxy.host, port=proxy.port, autocommit=True)
    cli = tandem.Client(
        rms=[tandem.RM("pg", "postgres", connect=db.pg_conn), tandem.RM("maria", "mysql", connect=db.my_conn, never_commit_point=True)],
        coordinator=coordinator.addr,
    )
    tx = cli.begin()
    tx.branch("pg", pg).execute("INSERT INTO py_broken_pg VALUES (1, 'pg')")
    tx.branch("maria", db.my_conn()).execute("INSERT INTO py_broken_pg VALUES (1, 'maria')")
    proxy.arm(b"INSERT INTO tandem_decision", mode)
    try:
        if mode == "after":
            res = tx.commit()
            assert res.path == tandem.COMMIT_POINT and res.commit_point == "pg"
            want, row = 1, "C"
        else:
            with pytest.raises(tandem.Aborted) as e:
                tx.commit()
            assert e.value.stage == "decided-abort"
            want, row = 0, "A"
        assert proxy.cut.is_set()
        assert db.count("pg", "py_broken_pg", 1) == want and db.count("maria", "py_broken_pg", 1) == want
        assert db.decision_row("pg", tx.gtrid) == row
        assert db.prepared_for(tx.gtrid) == []
    finally:
        proxy.close()
        cli.close()


def test_key_horizon_passed_before_the_first_key(db, monkeypatch):
    """The commit point's decision ran (its 'C' row committed, the MariaDB
    branch committed) but the reply never came, and by the time the error
    surfaces the key horizon has passed and the 'C' row is gone (deleted
    here by hand, as a forget would 30 s later). Taking the key now would
    insert 'A' and succeed, reporting Aborted for a transaction committed
    at MariaDB: past the horizon the outcome must be unknown at once, with
    no key taken (the Go SDK sets the horizon's deadline before its first
    attempt)."""
    import time

    import tandem.client
    from tandem.tx import Branch

    monkeypatch.setattr(tandem.client, "KEY_HORIZON", 0.3)
    orig = Branch._commit_decision

    def decided_then_lost(self, stmts):
        orig(self, stmts)  # the INSERT 'C' and the commit ran
        with db.my.cursor() as c:  # test-only: the row forgotten
            c.execute("DELETE FROM tandem_decision WHERE gtrid = %s", (self.tx.gtrid,))
        time.sleep(0.5)  # the reply comes after the horizon
        raise pymysql.err.OperationalError(2013, "Lost connection to server during query")

    monkeypatch.setattr(Branch, "_commit_decision", decided_then_lost)
    db.table("py_horizon")
    cli = make_client(db, None)
    tx = cli.begin()
    tx.branch("pg", db.pg_conn()).execute("INSERT INTO py_horizon VALUES (1, 'pg')")
    tx.branch("maria", db.my_conn()).execute("INSERT INTO py_horizon VALUES (1, 'maria')")
    try:
        with pytest.raises(tandem.OutcomeUnknown) as e:
            tx.commit()
        assert e.value.gtrid == tx.gtrid
        assert db.decision_row("maria", tx.gtrid) is None, "a key was taken past the horizon"
        assert db.count("maria", "py_horizon", 1) == 1
        assert [p.split(" ")[0] for p in db.prepared_for(tx.gtrid)] == ["pg"]  # left to a recoverer, not rolled back
    finally:
        for p in db.prepared_for(tx.gtrid):  # it committed: finish it as a recoverer would have
            db.pg.execute("COMMIT PREPARED '" + p.split(" ", 1)[1] + "'")
        cli.close()


def _pg_fatal(code: str, msg: str) -> bytes:
    """A PostgreSQL ErrorResponse of severity FATAL."""
    body = b"".join(t + v.encode() + b"\0" for t, v in ((b"S", "FATAL"), (b"V", "FATAL"), (b"C", code), (b"M", msg))) + b"\0"
    return b"E" + (len(body) + 4).to_bytes(4, "big") + body


def _my_error(seq: int, errno: int, state: str, msg: str) -> bytes:
    """A MySQL/MariaDB ERR packet."""
    body = b"\xff" + errno.to_bytes(2, "little") + b"#" + state.encode() + msg.encode()
    return len(body).to_bytes(3, "little") + bytes([seq]) + body


@pytest.mark.parametrize("side", ["pg-fatal-57P01", "maria-killed-1927"])
def test_one_phase_commit_answered_by_an_ended_session_is_unknown(db, side):
    """A single writer's one-phase COMMIT runs on the server, and the answer
    that comes back ends the session: PostgreSQL's FATAL 57P01 ("terminating
    connection due to administrator command", which a backend terminated
    while its commit waited for a synchronous standby sends after its commit
    ran locally), MariaDB's 1927 "Connection was killed". Both are the
    server's words, yet neither says the COMMIT did not run: the outcome is
    unknown, not an abort (the Go SDK's TestCommitPointFatalAfterCommitIsNotARollback
    and TestOnePhaseCommitEndedByTheSessionIsUnknown; here the proxy forwards
    the COMMIT and replaces the server's reply with the error)."""
    db.table("py_1pc_fatal")
    cli = make_client(db, None)
    if side.startswith("pg"):
        info = psycopg.conninfo.conninfo_to_dict(db.pg_dsn)
        proxy = Proxy(info.get("host", "127.0.0.1"), int(info.get("port", 5432)))
        conn = psycopg.connect(db.pg_dsn, host=proxy.host, port=proxy.port, autocommit=True)
        rm, tside = "pg", "pg"
        proxy_args = (b"; COMMIT\x00", "replace", _pg_fatal("57P01", "terminating connection due to administrator command"))
    else:
        kw = mysql_kwargs(db.my_dsn)
        proxy = Proxy(kw["host"], kw["port"])
        kw.update(host=proxy.host, port=proxy.port)
        conn = pymysql.connect(**kw)
        rm, tside = "maria", "maria"
        proxy_args = (b"ONE PHASE", "replace", _my_error(1, 1927, "70100", "Connection was killed"))
    try:
        tx = cli.begin()
        tx.branch(rm, conn).execute("INSERT INTO py_1pc_fatal VALUES (1, 'x')")
        proxy.arm(*proxy_args)
        with pytest.raises(tandem.OutcomeUnknown) as e:
            tx.commit()
        assert proxy.cut.is_set(), "the proxy never saw the COMMIT"
        assert e.value.gtrid == tx.gtrid
        # It did commit (MariaDB may answer XA END before it runs XA COMMIT,
        # and the proxy cuts at the first answer: the commit lands just after).
        eventually(5, "the one-phase commit on the server", lambda: db.count(tside, "py_1pc_fatal", 1) == 1)
    finally:
        proxy.close()
        cli.close()
