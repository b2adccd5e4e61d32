"""tandem.sqlalchemy: one Session per database, committed through Tandem,
against the real databases and coordinator."""

import pytest
from pymysql.constants import CLIENT
from sqlalchemy import URL, Integer, String, create_engine, make_url, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

import tandem
from conftest import make_client
from tandem.dsn import mysql_kwargs
from tandem.sqlalchemy import UnitOfWork


class Base(DeclarativeBase):
    pass


class Account(Base):
    __tablename__ = "py_sa_accounts"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    owner: Mapped[str] = mapped_column(String(40))
    balance: Mapped[int] = mapped_column(Integer)


def engines(db):
    pg = create_engine(make_url(db.pg_dsn).set(drivername="postgresql+psycopg"))
    kw = mysql_kwargs(db.my_dsn)
    url = URL.create("mysql+pymysql", username=kw["user"], password=kw["password"], host=kw["host"], port=kw["port"], database=kw["database"])
    my = create_engine(url, connect_args={"client_flag": CLIENT.MULTI_STATEMENTS})
    return pg, my


@pytest.fixture
def uow(db, coordinator):
    setup = engines(db)
    for e in setup:
        Base.metadata.drop_all(e)
        Base.metadata.create_all(e)
    with Session(setup[0]) as s:
        s.add(Account(id=1, owner="alice", balance=100))
        s.commit()
    with Session(setup[1]) as s:
        s.add(Account(id=2, owner="bob", balance=100))
        s.commit()
    for e in setup:
        e.dispose()
    # Engines that never connected: their first connection (the dialect's
    # initialization included) is made through the hook.
    pg, my = engines(db)
    cli = make_client(db, coordinator)
    yield UnitOfWork(cli, {"pg": pg, "maria": my}), pg, my
    cli.close()
    pg.dispose()
    my.dispose()


def balances(pg, my):
    with Session(pg) as a, Session(my) as b:
        return a.get(Account, 1).balance, b.get(Account, 2).balance


def test_a_transfer_commits_on_both_databases(uow):
    u, pg, my = uow
    with u.begin() as s:
        s.pg.get(Account, 1).balance -= 10
        s["maria"].get(Account, 2).balance += 10
        s.maria.add(Account(id=3, owner="carol", balance=0))
    assert s.result.path == tandem.COMMIT_POINT and s.result.commit_point == "maria"
    assert balances(pg, my) == (90, 110)
    with Session(my) as b:
        assert b.get(Account, 3).owner == "carol"


def test_an_exception_rolls_both_back(uow):
    u, pg, my = uow
    with pytest.raises(RuntimeError):
        with u.begin() as s:
            s.pg.get(Account, 1).balance -= 10
            s.maria.get(Account, 2).balance += 10
            s.pg.flush()
            s.maria.flush()
            raise RuntimeError("no")
    assert balances(pg, my) == (100, 100)


def test_a_failed_flush_rolls_both_back(uow):
    u, pg, my = uow
    with pytest.raises(IntegrityError):
        with u.begin() as s:
            s.pg.get(Account, 1).balance -= 10
            s.maria.add(Account(id=2, owner="dup", balance=1))  # duplicate key at flush
    assert balances(pg, my) == (100, 100)


def test_a_sessions_own_commit_is_refused(uow):
    u, pg, my = uow
    with pytest.raises(tandem.TandemError):
        with u.begin() as s:
            s.pg.get(Account, 1).balance -= 10
            s.pg.commit()
    assert balances(pg, my) == (100, 100)


def test_decided_by_the_coordinator_and_engines_usable_after(uow):
    u, pg, my = uow
    with u.begin(tandem.CommitOptions(decide_at="coordinator")) as s:
        s.pg.execute(text("UPDATE py_sa_accounts SET balance = balance - 5 WHERE id = 1"))
        s.maria.execute(text("UPDATE py_sa_accounts SET balance = balance + 5 WHERE id = 2"))
        assert s.pg.scalar(select(Account.balance).where(Account.id == 1)) == 95
    assert s.result.path == tandem.TWO_PHASE
    assert balances(pg, my) == (95, 105)
    # Outside a unit of work the engines are plain SQLAlchemy again: a
    # rolled-back session leaves nothing (not autocommit), a committed one commits.
    for e, id_ in ((pg, 1), (my, 2)):
        with Session(e) as x:
            x.get(Account, id_).balance = 0
            x.rollback()
        with Session(e) as x:
            assert x.get(Account, id_).balance != 0
            x.get(Account, id_).balance += 1
            x.commit()
    assert balances(pg, my) == (96, 106)
