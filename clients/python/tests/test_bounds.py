"""Availability: a database that goes silent during phase 2 or a rollback
does not hold the commit (or the rollback) longer than the bound (the Go
SDK's 10 s, made short here); Client.close() during a commit ends it as
Aborted before the decision, and never in an exception that is neither
Aborted nor OutcomeUnknown after it."""

import threading
import time

import psycopg
import pytest

import tandem
import tandem.tx
from conftest import make_client
from proxy import Proxy
from tandem import _failpoint


def _in_thread(fn, limit):
    """Runs fn in a thread; returns (finished in time, its result or exception)."""
    out = {}

    def run():
        try:
            out["v"] = fn()
        except BaseException as e:
            out["v"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(limit)
    return not t.is_alive(), out.get("v"), t


def _pg_via(db):
    info = psycopg.conninfo.conninfo_to_dict(db.pg_dsn)
    proxy = Proxy(info.get("host", "127.0.0.1"), int(info.get("port", 5432)))
    return proxy, psycopg.connect(db.pg_dsn, host=proxy.host, port=proxy.port, autocommit=True)


def test_phase2_on_a_silent_database_is_bounded(db, monkeypatch):
    """MariaDB decides; PostgreSQL's COMMIT PREPARED goes into a silent
    connection (the proxy holds it): the commit returns committed, phase 2
    pending, after the bound, the branch left prepared for a recoverer."""
    monkeypatch.setattr(tandem.tx, "PHASE2_TIMEOUT", 1.0, raising=False)
    db.table("py_bound_p2")
    proxy, pg = _pg_via(db)
    cli = make_client(db, None)
    tx = cli.begin()
    tx.branch("pg", pg).execute("INSERT INTO py_bound_p2 VALUES (1, 'pg')")
    tx.branch("maria", db.my_conn()).execute("INSERT INTO py_bound_p2 VALUES (1, 'maria')")
    proxy.arm(b"COMMIT PREPARED", "hold")
    t0 = time.monotonic()
    done, res, t = _in_thread(tx.commit, 8)
    try:
        assert done, "commit() still waiting for the silent database after 8 s"
        assert isinstance(res, tandem.Result), res
        assert res.path == tandem.COMMIT_POINT and res.phase2_pending
        assert time.monotonic() - t0 < 5
        assert db.count("maria", "py_bound_p2", 1) == 1
        assert [p.split(" ")[0] for p in db.prepared_for(tx.gtrid)] == ["pg"]
    finally:
        proxy.cut_all()
        t.join(5)
        for p in db.prepared_for(tx.gtrid):  # decided COMMIT: finish it as a recoverer would
            db.pg.execute("COMMIT PREPARED '" + p.split(" ", 1)[1] + "'")
        proxy.close()
        cli.close()


def test_rollback_on_a_silent_database_is_bounded(db, monkeypatch):
    monkeypatch.setattr(tandem.tx, "PHASE2_TIMEOUT", 1.0, raising=False)
    db.table("py_bound_rb")
    proxy, pg = _pg_via(db)
    cli = make_client(db, None)
    tx = cli.begin()
    tx.branch("pg", pg).execute("INSERT INTO py_bound_rb VALUES (1, 'pg')")
    tx.branch("maria", db.my_conn()).execute("INSERT INTO py_bound_rb VALUES (1, 'maria')")
    proxy.arm(b"ROLLBACK", "hold")
    t0 = time.monotonic()
    done, res, t = _in_thread(tx.rollback, 8)
    try:
        assert done, "rollback() still waiting for the silent database after 8 s"
        assert time.monotonic() - t0 < 5
        assert db.count("maria", "py_bound_rb", 1) == 0
    finally:
        proxy.cut_all()
        t.join(5)
        proxy.close()
        cli.close()
    assert db.count("pg", "py_bound_rb", 1) == 0


def test_close_before_the_commit_rpc_is_an_abort(db, coordinator, monkeypatch):
    """Client.close() while the branches are prepared, before the Commit RPC
    is sent: nothing was decided, so the commit is Aborted and everything is
    rolled back (not a ValueError from the closed channel)."""
    db.table("py_close_2pc")
    cli = make_client(db, coordinator, decide_at="coordinator")
    tx = cli.begin()
    tx.branch("pg", db.pg_conn()).execute("INSERT INTO py_close_2pc VALUES (1, 'pg')")
    tx.branch("maria", db.my_conn()).execute("INSERT INTO py_close_2pc VALUES (1, 'maria')")
    monkeypatch.setattr(_failpoint, "hook", lambda step: cli.close() if step == "before-commit-rpc" else None)
    with pytest.raises(tandem.TandemError) as e:
        tx.commit()
    assert isinstance(e.value, tandem.Aborted), "want Aborted, got %s: %s" % (type(e.value).__name__, e.value)
    assert db.count("pg", "py_close_2pc", 1) == 0 and db.count("maria", "py_close_2pc", 1) == 0
    assert db.prepared_for(tx.gtrid) == []


def test_close_after_the_commit_point_decided_commits(db, monkeypatch):
    """Client.close() right after the commit point's decision, with two
    branches left to commit in phase 2 (on the client's thread pool, shut
    down by close): the transaction is committed, and commit() says so (not
    RuntimeError from the pool)."""
    db.table("py_close_cp")
    cli = make_client(db, None, extra_rms=[tandem.RM("pg2", "postgres", connect=db.pg_conn)])
    tx = cli.begin()
    tx.branch("pg", db.pg_conn()).execute("INSERT INTO py_close_cp VALUES (1, 'pg')")
    tx.branch("pg2", db.pg_conn()).execute("INSERT INTO py_close_cp VALUES (2, 'pg2')")
    tx.branch("maria", db.my_conn()).execute("INSERT INTO py_close_cp VALUES (1, 'maria')")
    monkeypatch.setattr(_failpoint, "hook", lambda step: cli.close() if step == "after-commit-point" else None)
    try:
        res = tx.commit()
    except Exception as e:
        pytest.fail("want committed, got %s: %s" % (type(e).__name__, e))
    assert res.path == tandem.COMMIT_POINT and not res.phase2_pending
    assert db.count("pg", "py_close_cp", 1) == 1 and db.count("pg", "py_close_cp", 2) == 1 and db.count("maria", "py_close_cp", 1) == 1
    assert db.prepared_for(tx.gtrid) == []
