"""The branch's session: what the application (or its driver, or its pool)
may do to a branch's connection behind the client's back, and how the
client keeps that from committing part of a transaction on its own."""

import warnings

import pytest

import tandem
from conftest import make_client


@pytest.mark.parametrize("with_pg", [False, True], ids=["maria-alone", "maria-and-pg"])
def test_mariadb_reconnect_is_refused_before_anything_is_sent(db, with_pg):
    """The branch's MariaDB session is killed and PyMySQL reconnects
    (ping(reconnect=True); PyMySQL 1.1.0's ping() reconnects by default):
    the new session is in autocommit and knows nothing of the XA branch, so
    a statement sent there would commit on its own. The client must notice
    the session changed (its thread id) and refuse before sending, and the
    commit must abort with nothing committed on MariaDB."""
    db.table("py_reconnect")
    cli = make_client(db, None)
    my = db.my_conn()
    tx = cli.begin()
    if with_pg:
        tx.branch("pg", db.pg_conn()).execute("INSERT INTO py_reconnect VALUES (1, 'pg')")
    b = tx.branch("maria", my)
    b.execute("INSERT INTO py_reconnect VALUES (1, 'maria')")
    with db.my.cursor() as c:
        c.execute("KILL %d" % my.thread_id())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        my.ping(reconnect=True)  # a new session, autocommit
    try:
        with pytest.raises(tandem.BranchFailed) as e:
            b.execute("INSERT INTO py_reconnect VALUES (2, 'maria')")
        assert "session" in str(e.value)
        assert db.count("maria", "py_reconnect", 2) == 0, "the statement was sent on the new session and committed on its own"
        with pytest.raises(tandem.Aborted) as a:
            tx.commit()
        assert a.value.stage == "statement"
        assert db.count("maria", "py_reconnect", 1) == 0 and db.count("maria", "py_reconnect", 2) == 0
        assert db.count("pg", "py_reconnect", 1) == 0
        assert db.prepared_for(tx.gtrid) == []
    finally:
        cli.close()


def test_mariadb_reconnect_before_commit_aborts_before_xa_end(db):
    """The same reconnect after the last statement: commit aborts before
    sending XA END / XA PREPARE on the new session."""
    db.table("py_reconnect2")
    cli = make_client(db, None)
    my = db.my_conn()
    tx = cli.begin()
    tx.branch("pg", db.pg_conn()).execute("INSERT INTO py_reconnect2 VALUES (1, 'pg')")
    tx.branch("maria", my).execute("INSERT INTO py_reconnect2 VALUES (1, 'maria')")
    with db.my.cursor() as c:
        c.execute("KILL %d" % my.thread_id())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        my.ping(reconnect=True)
    try:
        with pytest.raises(tandem.Aborted) as a:
            tx.commit()
        assert a.value.stage == "statement" and "session" in str(a.value)
        assert db.count("maria", "py_reconnect2", 1) == 0 and db.count("pg", "py_reconnect2", 1) == 0
        assert db.prepared_for(tx.gtrid) == []
    finally:
        cli.close()
