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


def _committed_outside(e) -> None:
    assert type(e).__name__ == "BranchEndedOutside", "want the split hazard named, got %s: %s" % (type(e).__name__, e)
    assert e.rms == ["pg"] and "pg" in str(e)


def test_pg_branch_committed_by_psycopg_with_block(db):
    """psycopg's `with conn:` commits (and closes the connection) at the end
    of its block: the application's PostgreSQL work is committed on its own
    before tx.commit(). The commit must not report Aborted ("nothing
    committed anywhere"): the other branches are rolled back and the error
    names the branch whose transaction ended outside the client."""
    db.table("py_with_conn")
    cli = make_client(db, None)
    import psycopg

    pg = psycopg.connect(db.pg_dsn, autocommit=True)
    tx = cli.begin()
    with pg:
        tx.branch("pg", pg).execute("INSERT INTO py_with_conn VALUES (1, 'pg')")
        tx.branch("maria", db.my_conn()).execute("INSERT INTO py_with_conn VALUES (1, 'maria')")
    try:
        with pytest.raises(tandem.TandemError) as e:
            tx.commit()
        _committed_outside(e.value)
        assert "with conn" in str(e.value)
        assert db.count("pg", "py_with_conn", 1) == 1  # psycopg committed it
        assert db.count("maria", "py_with_conn", 1) == 0
        assert db.prepared_for(tx.gtrid) == []
    finally:
        cli.close()


@pytest.mark.parametrize("decider", ["maria", "pg", "one-phase", "pg-only-read"])
def test_pg_branch_connection_reused_by_another_transaction(db, decider):
    """What psycopg_pool's `with pool.connection()` does at the end of its
    block (commit, give the connection back to the pool), then another user
    of the pool begins a transaction on the same connection: the backend
    says "in a transaction" again, but it is not the branch's. PREPARE
    TRANSACTION (or the commit point's decision, or the one-phase COMMIT)
    must not run on it: the database refuses it by the branch's marker
    (SET LOCAL tandem.branch at BEGIN), the other branches roll back, and
    the other user's work is neither prepared nor committed by Tandem."""
    db.table("py_reused")
    if decider == "pg":  # MariaDB kept out: PostgreSQL decides
        cli = tandem.Client(
            rms=[tandem.RM("pg", "postgres", connect=db.pg_conn), tandem.RM("maria", "mysql", connect=db.my_conn, never_commit_point=True)]
        )
    else:
        cli = make_client(db, None)
    pg = db.pg_conn()
    tx = cli.begin()
    if decider == "pg-only-read":  # asked at commit whether it wrote: the same round trip checks the mark
        tx.branch("pg", pg).query("SELECT count(*) FROM py_reused")
    else:
        tx.branch("pg", pg).execute("INSERT INTO py_reused VALUES (1, 'pg')")
    if decider != "one-phase":
        tx.branch("maria", db.my_conn()).execute("INSERT INTO py_reused VALUES (1, 'maria')")
    pg.commit()  # the pool's commit at the end of `with pool.connection()`
    pg.execute("BEGIN")  # another user of the pool
    pg.execute("INSERT INTO py_reused VALUES (2, 'someone else')")
    try:
        with pytest.raises(tandem.TandemError) as e:
            tx.commit()
        _committed_outside(e.value)
        assert db.prepared_for(tx.gtrid) == [] and db.pg.execute("SELECT count(*) FROM pg_prepared_xacts").fetchone()[0] == 0
        assert db.count("maria", "py_reused", 1) == 0
        other = db.pg_conn()
        assert other.execute("SELECT count(*) FROM py_reused WHERE id = 2").fetchone()[0] == 0, "the other user's work was committed by Tandem"
    finally:
        pg.close()
        cli.close()
