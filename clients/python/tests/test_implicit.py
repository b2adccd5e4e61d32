"""Implicit commits on a MariaDB commit point (the corpus
api/testdata/implicit-commit.txt, shared with the Go and Java clients): the
client refuses each one before sending it and the transaction rolls back
whole; sent anyway through the driver's own connection, the server refuses
it inside the XA branch, and the two databases still agree."""

import pymysql
import pytest

import tandem
from conftest import make_client
from test_classify import CORPUS

ENDS = [s for s, ends in CORPUS if ends]


def test_every_implicit_commit_is_refused_on_the_commit_point(db, coordinator):
    db.table("py_impl")
    cli = make_client(db, coordinator)
    pg, my = db.pg_conn(), db.my_conn()
    for i, stmt in enumerate(ENDS):
        tx = cli.begin()
        tx.branch("pg", pg).execute("INSERT INTO py_impl VALUES (%s, 'pg')", (i,))
        b = tx.branch("maria", my)
        b.execute("INSERT INTO py_impl VALUES (%s, 'maria')", (i,))
        with pytest.raises(tandem.StatementRefused) as e:
            b.execute(stmt)
        assert "implicit commit" in str(e.value), stmt
        with pytest.raises(tandem.Aborted):
            tx.commit()
        assert db.count("pg", "py_impl", i) == 0 and db.count("maria", "py_impl", i) == 0, stmt
    with my.cursor() as c:  # the refused DDL never ran
        c.execute("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = 'x'")
        assert c.fetchone()[0] == 0
    assert db.prepared() == []
    cli.close()


def test_the_server_keeps_the_commit_point_whole_with_the_check_bypassed(db, coordinator):
    db.table("py_impl_raw")
    cli = make_client(db, coordinator)
    pg, my = db.pg_conn(), db.my_conn()
    refused = 0
    for i, stmt in enumerate(ENDS):
        tx = cli.begin()
        tx.branch("pg", pg).execute("INSERT INTO py_impl_raw VALUES (%s, 'pg')", (i,))
        tx.branch("maria", my).execute("INSERT INTO py_impl_raw VALUES (%s, 'maria')", (i,))
        cur = my.cursor()  # the driver's own connection: no early check
        try:
            cur.execute(stmt)
            while cur.nextset():
                pass
        except pymysql.err.MySQLError as e:
            refused += e.args[0] == 1399  # XAER_RMFAIL: not in the XA branch's state
        try:
            tx.commit()
        except tandem.TandemError:
            pass
        p, m = db.count("pg", "py_impl_raw", i), db.count("maria", "py_impl_raw", i)
        assert p == m, "split after %r: PostgreSQL %d, MariaDB %d" % (stmt, p, m)
    assert refused > 0
    assert db.prepared() == []
    cli.close()
