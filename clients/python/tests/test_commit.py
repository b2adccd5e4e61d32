"""The commit paths against the real databases and a real coordinator:
commit point at MariaDB and at PostgreSQL, the coordinator's path, one
phase, local, rollback, and the aborts (a failed statement, a failed
prepare, a refused decision, transaction control)."""

import time

import psycopg
import pymysql
import pytest

import tandem
from conftest import make_client


def write_both(tx, db, table, id_, pg=None, my=None):
    pg = pg or db.pg_conn()
    my = my or db.my_conn()
    tx.branch("pg", pg).execute("INSERT INTO " + table + " (id, v) VALUES (%s, %s)", (id_, "pg"))
    tx.branch("maria", my).execute("INSERT INTO " + table + " (id, v) VALUES (%s, %s)", (id_, "maria"))
    return pg, my


def test_commit_point_at_mariadb(db, coordinator):
    db.table("py_cp")
    cli = make_client(db, coordinator)
    tx = cli.begin()
    write_both(tx, db, "py_cp", 1)
    res = tx.commit()
    assert res.path == tandem.COMMIT_POINT and res.commit_point == "maria" and res.coordinator_calls == 0
    # The Go SDK's round trips: PostgreSQL BEGIN+insert, PREPARE, COMMIT PREPARED;
    # MariaDB XA START+insert, decision+XA END+XA COMMIT ONE PHASE.
    assert res.round_trips == [("pg", 3), ("maria", 2)]
    assert db.count("pg", "py_cp", 1) == 1 and db.count("maria", "py_cp", 1) == 1
    assert db.prepared_for(tx.gtrid) == []
    assert db.decision_row("maria", tx.gtrid) == "C"
    cli.close()


def test_commit_point_without_any_coordinator(db):
    """A commit point needs no coordinator to commit."""
    db.table("py_cp_nocoord")
    cli = make_client(db, None)
    pg, my = db.pg_conn(), db.my_conn()
    for i in range(5):
        tx = cli.begin()
        write_both(tx, db, "py_cp_nocoord", i, pg, my)
        assert tx.commit().path == tandem.COMMIT_POINT
    assert all(db.count("pg", "py_cp_nocoord", i) == db.count("maria", "py_cp_nocoord", i) == 1 for i in range(5))
    cli.close()


def test_commit_point_at_postgres(db, coordinator_factory):
    """Two PostgreSQL RMs: the first writer whose RM qualifies decides, the
    other is prepared named with it."""
    coord = coordinator_factory(rms=["pg=postgres:${TANDEM_PG_DSN}", "pg2=postgres:${TANDEM_PG_DSN}", "maria=mysql:${TANDEM_MYSQL_DSN}"])
    db.table("py_cp_pg")
    cli = make_client(db, coord, extra_rms=[tandem.RM("pg2", "postgres", connect=db.pg_conn)])
    tx = cli.begin()
    tx.branch("pg", db.pg_conn()).execute("INSERT INTO py_cp_pg VALUES (1, 'a')")
    tx.branch("pg2", db.pg_conn()).execute("INSERT INTO py_cp_pg VALUES (2, 'b')")
    res = tx.commit()
    assert res.path == tandem.COMMIT_POINT and res.commit_point == "pg" and res.coordinator_calls == 0
    assert db.count("pg", "py_cp_pg", 1) == 1 and db.count("pg", "py_cp_pg", 2) == 1
    assert db.decision_row("pg", tx.gtrid) == "C"
    cli.close()


def test_postgres_pinned_as_commit_point_when_mariadb_cannot_be(db, coordinator):
    """MariaDB kept out (never_commit_point): PostgreSQL is pinned as the
    commit point when MariaDB's branch begins, which is named with it."""
    db.table("py_cp_pin")
    cli = tandem.Client(
        rms=[tandem.RM("pg", "postgres", connect=db.pg_conn), tandem.RM("maria", "mysql", connect=db.my_conn, never_commit_point=True)],
        coordinator=coordinator.addr,
    )
    tx = cli.begin()
    write_both(tx, db, "py_cp_pin", 1)
    res = tx.commit()
    assert res.path == tandem.COMMIT_POINT and res.commit_point == "pg" and res.coordinator_calls == 0
    assert db.count("pg", "py_cp_pin", 1) == 1 and db.count("maria", "py_cp_pin", 1) == 1
    assert db.decision_row("pg", tx.gtrid) == "C" and db.prepared_for(tx.gtrid) == []
    cli.close()


def test_coordinator_path(db, coordinator):
    db.table("py_2pc")
    cli = make_client(db, coordinator, decide_at="coordinator")
    tx = cli.begin()
    write_both(tx, db, "py_2pc", 1)
    res = tx.commit()
    assert res.path == tandem.TWO_PHASE and res.coordinator_calls == 1
    # PostgreSQL: BEGIN+INSERT, PREPARE, and the client's own COMMIT PREPARED
    # (the coordinator allows client_settles on any RM: Health's header).
    assert res.round_trips == [("pg", 3), ("maria", 3)]
    assert db.count("pg", "py_2pc", 1) == 1 and db.count("maria", "py_2pc", 1) == 1
    assert cli.status(tx.gtrid).outcome == "COMMITTED"
    assert db.prepared_for(tx.gtrid) == []
    cli.close()


def test_one_phase_and_read_only_branches(db, coordinator):
    db.table("py_1pc")
    cli = make_client(db, coordinator)
    pg, my = db.pg_conn(), db.my_conn()
    # PostgreSQL only queries (asked at commit: wrote nothing), MariaDB writes.
    tx = cli.begin()
    assert tx.branch("pg", pg).query("SELECT count(*) FROM py_1pc").fetchone() == (0,)
    tx.branch("maria", my).execute("INSERT INTO py_1pc VALUES (1, 'm')")
    res = tx.commit()
    assert res.path == tandem.ONE_PHASE and res.coordinator_calls == 0
    # One writer alone.
    tx = cli.begin()
    tx.branch("pg", pg).execute("INSERT INTO py_1pc VALUES (2, 'p')")
    assert tx.commit().path == tandem.ONE_PHASE
    # Only reads.
    tx = cli.begin()
    tx.branch("pg", pg).query("SELECT 1")
    assert tx.commit().path == tandem.LOCAL
    assert db.count("maria", "py_1pc", 1) == 1 and db.count("pg", "py_1pc", 2) == 1
    assert db.prepared() == []
    cli.close()


def test_context_manager_commits_and_rolls_back(db, coordinator):
    db.table("py_with")
    cli = make_client(db, coordinator)
    pg, my = db.pg_conn(), db.my_conn()
    with cli.transaction() as tx:
        write_both(tx, db, "py_with", 1, pg, my)
    assert tx.result.path == tandem.COMMIT_POINT
    with pytest.raises(ZeroDivisionError):
        with cli.transaction() as tx:
            write_both(tx, db, "py_with", 2, pg, my)
            1 / 0
    assert db.count("pg", "py_with", 2) == 0 and db.count("maria", "py_with", 2) == 0
    # The sessions are usable again.
    with cli.transaction() as tx:
        write_both(tx, db, "py_with", 3, pg, my)
    tx.rollback()  # after commit: nothing
    assert db.count("pg", "py_with", 3) == 1 and db.count("maria", "py_with", 3) == 1
    cli.close()


@pytest.mark.parametrize("decide_at", ["auto", "coordinator"])
def test_failed_statement_dooms_the_transaction(db, coordinator, decide_at):
    db.table("py_fail")
    with db.my.cursor() as c:
        c.execute("INSERT INTO py_fail VALUES (7, 'there')")
    cli = make_client(db, coordinator, decide_at=decide_at)
    tx = cli.begin()
    pg, my = write_both(tx, db, "py_fail", 1)
    with pytest.raises(pymysql.err.IntegrityError):
        tx.branch("maria", my).execute("INSERT INTO py_fail VALUES (7, 'dup')")
    with pytest.raises(tandem.BranchFailed):
        tx.branch("maria", my).execute("INSERT INTO py_fail VALUES (8, 'x')")
    with pytest.raises(tandem.Aborted) as e:
        tx.commit()
    assert e.value.stage == "statement" and e.value.gtrid == tx.gtrid
    assert db.count("pg", "py_fail", 1) == 0 and db.count("maria", "py_fail", 1) == 0
    assert db.prepared_for(tx.gtrid) == []
    cli.close()


def test_failed_prepare_rolls_back_everything(db, coordinator):
    """A deferred foreign key fails PostgreSQL's PREPARE: nothing commits."""
    db.pg.execute("DROP TABLE IF EXISTS py_prep_child")
    db.table("py_prep")
    db.pg.execute("CREATE TABLE py_prep_child (id int PRIMARY KEY, parent int REFERENCES py_prep (id) DEFERRABLE INITIALLY DEFERRED)")
    cli = make_client(db, coordinator)
    tx = cli.begin()
    tx.branch("pg", db.pg_conn()).execute("INSERT INTO py_prep_child VALUES (1, 999)")
    tx.branch("maria", db.my_conn()).execute("INSERT INTO py_prep VALUES (1, 'm')")
    with pytest.raises(tandem.Aborted) as e:
        tx.commit()
    assert e.value.stage == "prepare"
    assert db.count("maria", "py_prep", 1) == 0 and db.prepared_for(tx.gtrid) == []
    cli.close()


def test_abort_recorded_first_refuses_the_commit_point(db, coordinator):
    db.table("py_refuse")
    cli = make_client(db, coordinator)
    tx = cli.begin()
    write_both(tx, db, "py_refuse", 1)
    with db.my.cursor() as c:  # a recoverer took the key first
        c.execute("INSERT INTO tandem_decision (gtrid, outcome, began_at, participants) VALUES (%s, 'A', UTC_TIMESTAMP(6), '')", (tx.gtrid,))
    with pytest.raises(tandem.Aborted) as e:
        tx.commit()
    assert e.value.stage == "commit" and "recoverer recorded abort" in str(e.value)
    assert db.count("pg", "py_refuse", 1) == 0 and db.count("maria", "py_refuse", 1) == 0
    assert db.prepared_for(tx.gtrid) == []
    cli.close()


def test_too_old_transaction_is_refused_by_the_commit_point(db, coordinator):
    db.table("py_old")
    cli = make_client(db, coordinator, max_txn_age=0.2)
    tx = cli.begin()
    write_both(tx, db, "py_old", 1)
    time.sleep(0.3)
    with pytest.raises(tandem.Aborted) as e:
        tx.commit()
    assert "maximum transaction age" in str(e.value)
    assert db.count("pg", "py_old", 1) == 0 and db.count("maria", "py_old", 1) == 0 and db.prepared_for(tx.gtrid) == []
    cli.close()


def test_a_session_without_foreign_key_checks_is_refused(db, coordinator):
    # MariaDB's decision table references its own id (the coordinator added
    # the foreign key), so the client decides without the id table's
    # subquery; a session that turned foreign-key checks off would skip the
    # check: refused, nothing commits.
    db.table("py_nock")
    cli = make_client(db, coordinator)
    tx = cli.begin()
    write_both(tx, db, "py_nock", 1)
    tx.commit()
    assert cli.rms["maria"].self_checked
    tx = cli.begin()
    my = db.my_conn()
    with my.cursor() as c:
        c.execute("SET SESSION foreign_key_checks = 0")
    write_both(tx, db, "py_nock", 2, my=my)
    with pytest.raises(tandem.Aborted) as e:
        tx.commit()
    assert "foreign_key_checks" in str(e.value)
    assert db.count("pg", "py_nock", 2) == 0 and db.count("maria", "py_nock", 2) == 0 and db.prepared_for(tx.gtrid) == []
    cli.close()


def test_the_tables_own_check_is_read_again(db, coordinator):
    # Whether MariaDB's table checks its id itself is read again once the
    # reading is SELF_CHECK_TTL old (on a branch's connection before its
    # begin): a table that lost its foreign key gets the subquery form, which
    # the database checks, and the checked form again once the key is back.
    from tandem import client as client_mod

    db.table("py_reread")
    cli = make_client(db, coordinator)
    info = cli.rms["maria"]

    def age():
        with info.id_mu:
            info.flag_at -= client_mod.SELF_CHECK_TTL
            info.reread_at -= client_mod.SELF_CHECK_TTL

    tx = cli.begin()
    write_both(tx, db, "py_reread", 1)
    tx.commit()
    assert info.self_checked
    with db.my.cursor() as c:
        c.execute("ALTER TABLE tandem_decision DROP FOREIGN KEY tandem_decision_table")
    try:
        age()
        tx = cli.begin()
        write_both(tx, db, "py_reread", 2)
        assert not info.self_checked, "read again past the TTL: the table has no foreign key now"
        tx.commit()
        assert db.count("pg", "py_reread", 2) == 1 and db.count("maria", "py_reread", 2) == 1
    finally:
        with db.my.cursor() as c:
            c.execute("ALTER TABLE tandem_decision ADD CONSTRAINT tandem_decision_table FOREIGN KEY (table_id) REFERENCES tandem_decision_id (id)")
    age()
    tx = cli.begin()
    write_both(tx, db, "py_reread", 3)
    assert info.self_checked, "the key is back: the checked form again"
    tx.commit()
    # A refusal of the checked form (a session with foreign-key checks off)
    # is never undone by a reading again: the catalog still lists the key.
    with info.id_mu:
        info.self_checked, info.refused = False, True
    age()
    tx = cli.begin()
    write_both(tx, db, "py_reread", 4)
    assert not info.self_checked, "a refusal stands after a reading again"
    tx.commit()
    cli.close()


def test_the_check_is_not_read_again_on_a_session_that_would_open_a_transaction(db, coordinator):
    # The reading again runs only on a session in autocommit mode outside a
    # transaction: under autocommit=0 it would open one, and the branch's XA
    # START on that session would fail. Skipped, it counts as no reference
    # (the subquery form, which the database checks).
    db.table("py_reread_ac")
    cli = make_client(db, coordinator)
    info = cli.rms["maria"]
    tx = cli.begin()
    write_both(tx, db, "py_reread_ac", 1)
    tx.commit()
    assert info.self_checked
    known = info.id
    conn = db.my_conn(autocommit=False)
    cli._reread_self_check(info, conn, known)
    with conn.cursor() as c:
        c.execute("SELECT @@in_transaction")
        assert c.fetchone()[0] == 0, "the reading opened a transaction on a session in autocommit=0"
    assert not info.self_checked, "a reading skipped counts as no reference"
    conn.autocommit(True)
    cli._reread_self_check(info, conn, known)
    assert info.self_checked, "read again on a session in autocommit mode"
    cli.close()


def test_transaction_control_on_postgres_is_refused_before_it_is_sent(db, coordinator):
    db.table("py_txctl")
    cli = make_client(db, coordinator)
    tx = cli.begin()
    pg, _ = write_both(tx, db, "py_txctl", 1)
    with pytest.raises(tandem.StatementRefused):
        tx.branch("pg", pg).execute("INSERT INTO py_txctl VALUES (2, 'x'); COMMIT")
    with pytest.raises(tandem.Aborted):
        tx.commit()
    assert db.count("pg", "py_txctl", 1) == 0 and db.count("pg", "py_txctl", 2) == 0 and db.count("maria", "py_txctl", 1) == 0
    # Savepoints pass.
    tx = cli.begin()
    b = tx.branch("pg", pg)
    b.execute("SAVEPOINT a")
    b.execute("INSERT INTO py_txctl VALUES (3, 'x')")
    b.execute("ROLLBACK TO SAVEPOINT a")
    b.execute("INSERT INTO py_txctl VALUES (4, 'y')")
    tx.commit()
    assert db.count("pg", "py_txctl", 3) == 0 and db.count("pg", "py_txctl", 4) == 1
    cli.close()


def test_one_branch_per_rm_and_wrong_driver(db, coordinator):
    cli = make_client(db, coordinator)
    tx = cli.begin()
    pg = db.pg_conn()
    assert tx.branch("pg", pg) is tx.branch("pg", pg)
    with pytest.raises(tandem.TandemError):
        tx.branch("pg", db.pg_conn())
    with pytest.raises(tandem.TandemError):
        tx.branch("maria", pg)
    with pytest.raises(tandem.UnknownRM):
        tx.branch("nope", pg)
    tx.rollback()
    cli.close()


def test_connection_inside_a_transaction_is_refused(db, coordinator):
    cli = make_client(db, coordinator)
    pg = psycopg.connect(db.pg_dsn)  # autocommit off: psycopg begins a transaction
    pg.execute("SELECT 1")
    with pytest.raises(ValueError):
        cli.begin().branch("pg", pg)
    pg.close()
    cli.close()


def test_mariadb_without_multi_statements_goes_statement_by_statement(db, coordinator):
    """A PyMySQL connection without CLIENT.MULTI_STATEMENTS: the same paths,
    one statement per round trip, stopping at the first error."""
    db.table("py_nomulti")
    cli = make_client(db, coordinator)
    my = db.my_conn(multi=False)
    tx = cli.begin()
    tx.branch("pg", db.pg_conn()).execute("INSERT INTO py_nomulti VALUES (1, 'pg')")
    tx.branch("maria", my).execute("INSERT INTO py_nomulti VALUES (1, 'maria')")
    res = tx.commit()
    # MariaDB: XA START, SET @tandem_began, the insert; INSERT 'C', XA END, XA COMMIT ONE PHASE.
    assert res.path == tandem.COMMIT_POINT and res.round_trips == [("pg", 3), ("maria", 6)]
    tx = cli.begin()
    tx.branch("pg", db.pg_conn()).execute("INSERT INTO py_nomulti VALUES (2, 'pg')")
    tx.branch("maria", my).execute("INSERT INTO py_nomulti VALUES (2, 'maria')")
    with db.my.cursor() as c:
        c.execute("INSERT INTO tandem_decision (gtrid, outcome, began_at, participants) VALUES (%s, 'A', UTC_TIMESTAMP(6), '')", (tx.gtrid,))
    with pytest.raises(tandem.Aborted):
        tx.commit()  # the INSERT of 'C' fails: XA END and XA COMMIT are never sent
    assert db.count("pg", "py_nomulti", 2) == 0 and db.count("maria", "py_nomulti", 2) == 0
    assert db.count("maria", "py_nomulti", 1) == 1 and db.prepared() == []
    cli.close()


def test_commit_point_writing_an_rm_the_coordinator_does_not_know_is_refused(db, coordinator):
    """The coordinator's scan is what settles a dead client's branches: a
    commit point's transaction writing an RM it does not know rolls back
    before anything is prepared, naming the RM."""
    db.table("py_unknown_rm")
    cli = make_client(db, coordinator, extra_rms=[tandem.RM("pg2", "postgres", connect=db.pg_conn)])
    tx = cli.begin()
    tx.branch("pg2", db.pg_conn()).execute("INSERT INTO py_unknown_rm VALUES (1, 'pg2')")
    tx.branch("maria", db.my_conn()).execute("INSERT INTO py_unknown_rm VALUES (1, 'maria')")
    with pytest.raises(tandem.Aborted) as e:
        tx.commit()
    assert "pg2" in str(e.value) and "--rm pg2=" in str(e.value) and e.value.stage == "setup"
    assert db.count("pg", "py_unknown_rm", 1) == 0 and db.count("maria", "py_unknown_rm", 1) == 0 and db.prepared() == []
    cli.close()


def test_a_failed_rollback_without_a_coordinator_is_a_tandem_error(db):
    """Tx.rollback() whose branch cannot be rolled back (its connection was
    closed under it) and no coordinator to hand anything to: the error is
    the client's own RollbackFailed (a TandemError naming the gtrid and the
    RM), never an internal type the application cannot catch by name."""
    db.table("py_rbfail")
    cli = make_client(db, None)
    pg = db.pg_conn()
    tx = cli.begin()
    tx.branch("pg", pg).execute("INSERT INTO py_rbfail VALUES (1, 'x')")
    pg.close()
    with pytest.raises(tandem.RollbackFailed) as e:
        tx.rollback()
    assert isinstance(e.value, tandem.TandemError)
    assert e.value.gtrid == tx.gtrid and "pg" in str(e.value)
    tx.rollback()  # twice: nothing more
    assert db.count("pg", "py_rbfail", 1) == 0
    cli.close()
