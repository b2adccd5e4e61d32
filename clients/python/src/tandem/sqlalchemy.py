"""A SQLAlchemy unit of work over several engines, committed through
Tandem: the replacement for Session(twophase=True).

    from sqlalchemy import create_engine
    from tandem.sqlalchemy import UnitOfWork

    pg = create_engine("postgresql+psycopg://user:pw@host/db")
    maria = create_engine("mysql+pymysql://user:pw@host/db", connect_args={"client_flag": CLIENT.MULTI_STATEMENTS})
    uow = UnitOfWork(client, {"pg": pg, "maria": maria})    # keys: the RMs' names (the coordinator's --rm)

    with uow.begin() as s:                 # one Session per database
        s.pg.add(Debit(account=1, amount=10))
        s.maria.add(Credit(account=2, amount=10))
    # both flushed, then committed through Tandem (tandem.Aborted /
    # tandem.OutcomeUnknown otherwise); s.result says how

Session(twophase=True) prepares each database and commits them one after
the other with no log: a crash between the commits leaves them split, and
nothing settles the prepared branches of a process that died. Here the
decision is Tandem's (a commit point in one of the databases, or the
coordinator's log), the branches are named as the coordinator's recovery
scans them, and a dead process's prepared branches are settled.

How: UnitOfWork hooks each engine (SQLAlchemy's public do_connect event) so
that its pool holds thin proxies of the DBAPI connections (psycopg 3,
PyMySQL). Outside a unit of work a proxy is the plain connection. Inside
one, the connection is the transaction's branch on that RM: every statement
SQLAlchemy sends goes through the tandem Branch (the branch begins with its
first statement; statements ending the transaction are refused; any error
dooms the unit of work), the DBAPI commit() SQLAlchemy sends at the end is
Tandem's commit, and a rollback() dooms the unit of work. Engines hooked
after they made connections are disposed (their pooled connections closed)
once, so that every connection is a proxy.

Rules: use the sessions only inside the with block and commit the unit of
work by leaving it (a session.commit() inside is refused: it would not be
atomic with the other database); no server-side cursors (yield_per /
stream_results) inside a unit of work; the connection's autocommit setting
is restored when the unit of work ends (one round trip on MySQL each way).
"""

from __future__ import annotations

import contextlib
from typing import Any, Dict, Iterator, Optional

from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from . import _db
from .client import Client, CommitOptions
from .errors import TandemError
from .tx import Result, Tx

_HOOKED = "_tandem_hooked"
_READS = ("SELECT", "SHOW", "VALUES", "TABLE", "WITH", "EXPLAIN")


def install(engine: Engine) -> Engine:
    """Hooks engine so that its connections can join a unit of work (once;
    an engine that already made connections is disposed)."""
    if getattr(engine, _HOOKED, False):
        return engine
    if engine.dialect.driver not in ("psycopg", "pymysql"):
        raise TandemError(
            "tandem.sqlalchemy: engine %s uses the %s driver: use postgresql+psycopg:// or mysql+pymysql://" % (engine.url.render_as_string(), engine.dialect.driver)
        )

    @event.listens_for(engine, "do_connect")
    def _connect(dialect, conn_rec, cargs, cparams):
        return _Conn(dialect.loaded_dbapi.connect(*cargs, **cparams))

    # What SQLAlchemy hands the driver itself (driver_connection: psycopg's
    # TypeInfo.fetch checks its class) is the real connection.
    plain = engine.dialect.get_driver_connection

    def _driver_connection(connection):
        return plain(connection._t_raw if isinstance(connection, _Conn) else connection)

    engine.dialect.get_driver_connection = _driver_connection
    setattr(engine, _HOOKED, True)
    engine.dispose()  # connections made before the hook are not proxies
    return engine


class _UoWState:
    def __init__(self):
        self.committing = False
        self.doomed: Optional[str] = None


class _Conn:
    """A DBAPI connection as SQLAlchemy sees it: the real one, except inside a
    unit of work (see the module's doc)."""

    def __init__(self, raw: Any):
        object.__setattr__(self, "_t_raw", raw)
        object.__setattr__(self, "_t_branch", None)
        object.__setattr__(self, "_t_uow", None)

    def __getattr__(self, key):
        return getattr(self._t_raw, key)

    def __setattr__(self, key, value):
        if key.startswith("_t_"):
            object.__setattr__(self, key, value)
        else:
            setattr(self._t_raw, key, value)

    def cursor(self, *args, **kwargs):
        if self._t_branch is None:
            return self._t_raw.cursor(*args, **kwargs)
        if args or kwargs:
            raise TandemError("tandem.sqlalchemy: server-side cursors (stream_results, yield_per) are not supported inside a unit of work")
        return _Cursor(self._t_branch)

    def commit(self):
        if self._t_branch is None:
            return self._t_raw.commit()
        if self._t_uow.committing:
            return None  # Tandem committed already
        raise TandemError(
            "tandem.sqlalchemy: commit the unit of work by leaving its with block; a session's own commit inside it "
            "would not be atomic with the other databases"
        )

    def rollback(self):
        if self._t_branch is None:
            return self._t_raw.rollback()
        if not self._t_uow.committing and self._t_uow.doomed is None:
            self._t_uow.doomed = "a session rolled back (session.rollback(), or a failed flush)"
        return None

    def close(self):
        return self._t_raw.close()


class _Cursor:
    """A cursor inside a unit of work: each execute goes through the branch;
    the rows and counts are the driver cursor's."""

    arraysize = 1

    def __init__(self, branch):
        self._b = branch
        self._cur = None

    def execute(self, sql, params=None):
        word = sql.lstrip(" \t\r\n(").split(None, 1)[0].upper() if sql.strip() else ""
        if word in _READS:
            self._cur = self._b.query(sql, params)  # a PostgreSQL reader is checked at commit
        else:
            self._cur = self._b.execute(sql, params)
        return self

    def executemany(self, sql, seq_of_params):
        self._cur = self._b.executemany(sql, seq_of_params)
        return self

    @property
    def description(self):
        return None if self._cur is None else self._cur.description

    @property
    def rowcount(self):
        return -1 if self._cur is None else self._cur.rowcount

    @property
    def lastrowid(self):
        return None if self._cur is None else getattr(self._cur, "lastrowid", None)

    def fetchone(self):
        return self._cur.fetchone()

    def fetchmany(self, size=None):
        return self._cur.fetchmany(size if size is not None else self.arraysize)

    def fetchall(self):
        return self._cur.fetchall()

    def nextset(self):
        return self._cur.nextset()

    def __iter__(self):
        return iter(self._cur)

    def close(self):
        if self._cur is not None:
            try:
                self._cur.close()
            except Exception:
                pass

    def setinputsizes(self, *a):
        pass

    def setoutputsize(self, *a):
        pass

    def __getattr__(self, key):
        if self._cur is None:
            raise AttributeError(key)
        return getattr(self._cur, key)


class Sessions:
    """The sessions of one unit of work, by RM name: s.pg or s["pg"]. After
    the with block, result is the commit's tandem.Result."""

    def __init__(self, tx: Tx, sessions: Dict[str, Session]):
        self.tx = tx
        self._s = sessions
        self.result: Optional[Result] = None

    @property
    def gtrid(self) -> str:
        return self.tx.gtrid

    def __getitem__(self, rm: str) -> Session:
        return self._s[rm]

    def __getattr__(self, rm: str) -> Session:
        try:
            return self._s[rm]
        except KeyError:
            raise AttributeError(rm) from None

    def __iter__(self):
        return iter(self._s.items())


class UnitOfWork:
    """Sessions on several engines committed as one global transaction.
    engines maps each RM's name (the client's RM, the coordinator's --rm)
    to a SQLAlchemy engine on that database (postgresql+psycopg,
    mysql+pymysql). session_kw are passed to every Session. Safe to share
    between threads: each begin() is its own unit of work."""

    def __init__(self, client: Client, engines: Dict[str, Engine], **session_kw: Any):
        self.client = client
        self.engines = dict(engines)
        self.session_kw = session_kw
        for rm, engine in self.engines.items():
            client._rm(rm)  # raises UnknownRM
            install(engine)

    @contextlib.contextmanager
    def begin(self, options: Optional[CommitOptions] = None) -> Iterator[Sessions]:
        """One unit of work: yields a Sessions; when the block ends normally
        every session is flushed and the transaction committed through
        Tandem (raising tandem.Aborted or tandem.OutcomeUnknown when it does
        not commit), when it raises everything is rolled back."""
        tx = self.client.begin(options)
        state = _UoWState()
        opened = []  # (rm, sqlalchemy Connection, proxy, autocommit before)
        sessions: Dict[str, Session] = {}
        try:
            for rm, engine in self.engines.items():
                sa_conn = engine.connect()
                proxy = sa_conn.connection.dbapi_connection
                if not isinstance(proxy, _Conn):
                    sa_conn.close()
                    raise TandemError("tandem.sqlalchemy: the engine for %r hands out connections that are not hooked: call tandem.sqlalchemy.install(engine) before it connects" % rm)
                raw = proxy._t_raw
                before = _autocommit(raw)
                opened.append((rm, sa_conn, proxy, before))
                proxy._t_uow = state
                proxy._t_branch = tx.branch(rm, raw)  # puts raw in autocommit: the client begins the branch
                sessions[rm] = Session(bind=sa_conn, **self.session_kw)
            s = Sessions(tx, sessions)
            yield s
            for sess in sessions.values():
                sess.flush()
            if state.doomed is not None:
                raise TandemError("tandem.sqlalchemy: the unit of work cannot commit: " + state.doomed)
            s.result = tx.commit()
            state.committing = True
            for sess in sessions.values():
                sess.commit()  # SQLAlchemy's bookkeeping; the DBAPI commit is a no-op now
        except BaseException:
            state.committing = True
            try:
                tx.rollback()  # does nothing once commit() ran
            finally:
                for sess in sessions.values():
                    try:
                        sess.rollback()
                    except Exception:
                        pass
            raise
        finally:
            for sess in sessions.values():
                sess.close()
            for rm, sa_conn, proxy, before in opened:
                proxy._t_branch = None
                proxy._t_uow = None
                if not _restore(proxy._t_raw, before):
                    sa_conn.invalidate()  # closed by Tandem (a session whose state is unknown): never pooled again
                sa_conn.close()


def _autocommit(raw: Any) -> bool:
    if _is_pymysql(raw):
        return bool(raw.get_autocommit())
    return bool(raw.autocommit)


def _restore(raw: Any, before: bool) -> bool:
    """Puts the connection's autocommit back; False when the connection is
    not usable (closed by Tandem)."""
    try:
        if _is_pymysql(raw):
            if not raw.open:
                return False
            if raw.get_autocommit() != before:
                raw.autocommit(before)
            return True
        if raw.closed:
            return False
        if _db.pg_tx_status(raw) != "I":
            return False
        if raw.autocommit != before:
            raw.autocommit = before
        return True
    except Exception:
        return False


def _is_pymysql(raw: Any) -> bool:
    return type(raw).__module__.startswith("pymysql")
