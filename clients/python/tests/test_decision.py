"""tandem.decision's forget on the real databases: only 'C' rows at least
FORGET_MIN_AGE old by the database's clock go, never an 'A'; and a row
locked by an open transaction (a commit point's) makes the batch give up
after GC_LOCK_WAIT instead of waiting — and holding its own locks — for it."""

import time

import pytest

from tandem import decision
from tandem.xid import new_gtrid


def put(db, side, g, outcome, age_s):
    if side == "pg":
        db.pg.execute("INSERT INTO tandem_decision (gtrid, outcome, began_at, decided_at, participants) "
                      "VALUES (%s, %s, clock_timestamp() - make_interval(secs => %s), clock_timestamp() - make_interval(secs => %s), '')",
                      (g, outcome, age_s, age_s))
    else:
        with db.my.cursor() as c:
            c.execute("INSERT INTO tandem_decision (gtrid, outcome, began_at, decided_at, participants) "
                      "VALUES (%s, %s, UTC_TIMESTAMP(6) - INTERVAL %s SECOND, UTC_TIMESTAMP(6) - INTERVAL %s SECOND, '')",
                      (g, outcome, age_s, age_s))


@pytest.mark.parametrize("side", ["pg", "maria"])
def test_forget_deletes_only_old_commit_rows(db, coordinator, side):
    old_c, young_c, old_a = new_gtrid(), new_gtrid(), new_gtrid()
    put(db, side, old_c, "C", 60)
    put(db, side, young_c, "C", 1)
    put(db, side, old_a, "A", 60)
    conn = db.pg_conn() if side == "pg" else db.my_conn()
    d = "postgres" if side == "pg" else "mysql"
    assert decision.forget(d, conn, [old_c, young_c, old_a]) == 1
    assert db.decision_row(side, old_c) is None
    assert db.decision_row(side, young_c) == "C" and db.decision_row(side, old_a) == "A"


@pytest.mark.parametrize("side", ["pg", "maria"])
def test_forget_gives_up_on_a_locked_row_after_its_bound(db, coordinator, side):
    g = new_gtrid()
    put(db, side, g, "C", 60)
    holder = db.pg_conn() if side == "pg" else db.my_conn()
    d = "postgres" if side == "pg" else "mysql"
    cur = holder.cursor()
    cur.execute("BEGIN")
    cur.execute("SELECT outcome FROM tandem_decision WHERE gtrid = %s FOR UPDATE", (g,))
    try:
        t0 = time.monotonic()
        with pytest.raises(decision.DecisionError) as e:
            decision.forget(d, db.pg_conn() if side == "pg" else db.my_conn(), [g])
        took = time.monotonic() - t0
        assert "stayed locked" in str(e.value) and took < 5, (took, e.value)
    finally:
        cur.execute("ROLLBACK")
    assert db.decision_row(side, g) == "C"
