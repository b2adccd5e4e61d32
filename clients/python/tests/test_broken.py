"""The commit point's connection breaks during its decision (a proxy cuts
it): the outcome is learnt by taking the decision key (RM.connect) —
committed when the decision reached the database, aborted when it did
not — never reported unknown, never split."""

import psycopg
import pymysql
import pytest

import tandem
from conftest import make_client
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
