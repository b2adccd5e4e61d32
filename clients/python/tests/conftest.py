"""The tests' harness: the real databases (scripts/db test-env's
TANDEM_PG_DSN and TANDEM_MYSQL_DSN; a test that needs them FAILS without
them, saying how to start them) and real coordinators: `tandem serve` built
with failpoints (go build -tags failpoints ./cmd/tandem, or TANDEM_BIN),
started as the Go e2e tests start it (test/e2e/harness_test.go): a fresh
data directory, --scan-interval 200ms, --orphan-timeout 2s, the RMs pg and
maria from the same DSNs, no admin listener."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import List, Optional

import psycopg
import pymysql
import pytest

import tandem
from tandem.dsn import mysql_kwargs
from tandem.xid import POSTGRES_SCAN_PREDICATE

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
HOW = (
    'the tests need the databases: from the repository root run `scripts/db up && eval "$(scripts/db test-env)"` '
    "(TANDEM_PG_DSN and TANDEM_MYSQL_DSN)"
)

TANDEM_FORMATS = (0x54414E44, 0x54414E43, 0x54414E32, 0x54414332)


def _dsns():
    pg, my = os.environ.get("TANDEM_PG_DSN"), os.environ.get("TANDEM_MYSQL_DSN")
    if not pg or not my:
        pytest.fail(HOW, pytrace=False)
    return pg, my


@pytest.fixture(scope="session")
def dsns():
    return _dsns()


class DB:
    """Connections to both test databases, and what the tests look at."""

    def __init__(self, pg_dsn: str, my_dsn: str):
        self.pg_dsn, self.my_dsn = pg_dsn, my_dsn
        self._open: List = []
        try:
            self.pg = self.pg_conn()
            self.my = self.my_conn()
        except Exception as e:
            pytest.fail("cannot reach the test databases (%s): %s" % (e, HOW), pytrace=False)

    def pg_conn(self):
        c = psycopg.connect(self.pg_dsn, autocommit=True)
        self._open.append(c)
        return c

    def my_conn(self, multi: bool = True, **extra):
        kw = mysql_kwargs(self.my_dsn, multi_statements=multi)
        kw.update(extra)
        c = pymysql.connect(**kw)
        self._open.append(c)
        return c

    def close(self):
        for c in self._open:
            try:
                c.close()
            except Exception:
                pass

    def table(self, name: str) -> None:
        """A fresh table name (id int primary key, v varchar(64)) on both."""
        self.pg.execute("DROP TABLE IF EXISTS " + name)
        self.pg.execute("CREATE TABLE " + name + " (id int PRIMARY KEY, v varchar(64))")
        with self.my.cursor() as c:
            c.execute("DROP TABLE IF EXISTS " + name)
            c.execute("CREATE TABLE " + name + " (id int PRIMARY KEY, v varchar(64)) ENGINE=InnoDB")

    def count(self, side: str, table: str, id_: int) -> int:
        if side == "pg":
            return self.pg.execute("SELECT count(*) FROM " + table + " WHERE id = %s", (id_,)).fetchone()[0]
        with self.my.cursor() as c:
            c.execute("SELECT count(*) FROM " + table + " WHERE id = %s", (id_,))
            return c.fetchone()[0]

    def prepared(self) -> List[str]:
        """Tandem-format branches left prepared on both databases."""
        out = ["pg " + r[0] for r in self.pg.execute("SELECT gid FROM pg_prepared_xacts WHERE " + POSTGRES_SCAN_PREDICATE).fetchall()]
        with self.my.cursor() as c:
            c.execute("XA RECOVER")
            for f, _, _, data in c.fetchall():
                if f in TANDEM_FORMATS:
                    out.append("maria " + (data.decode() if isinstance(data, bytes) else data))
        return out

    def prepared_for(self, gtrid: str) -> List[str]:
        return [p for p in self.prepared() if gtrid in p]

    def decision_row(self, side: str, gtrid: str) -> Optional[str]:
        if side == "pg":
            r = self.pg.execute("SELECT outcome FROM tandem_decision WHERE gtrid = %s", (gtrid,)).fetchone()
        else:
            with self.my.cursor() as c:
                c.execute("SELECT outcome FROM tandem_decision WHERE gtrid = %s", (gtrid,))
                r = c.fetchone()
        return r[0] if r else None

    def rollback_leftovers(self) -> None:
        """Rolls back every Tandem branch still prepared (an earlier test's,
        whose coordinators are gone): it would hold row locks."""
        for (g,) in self.pg.execute("SELECT gid FROM pg_prepared_xacts WHERE " + POSTGRES_SCAN_PREDICATE).fetchall():
            try:
                self.pg.execute("ROLLBACK PREPARED '" + g + "'")
            except Exception:
                pass
        with self.my.cursor() as c:
            c.execute("XA RECOVER")
            for f, a, b, data in c.fetchall():
                if f in TANDEM_FORMATS:
                    data = data.decode() if isinstance(data, bytes) else data
                    try:
                        c.execute("XA ROLLBACK '%s','%s',%d" % (data[:a], data[a : a + b], f))
                    except Exception:
                        pass


@pytest.fixture
def db(dsns):
    d = DB(*dsns)
    d.rollback_leftovers()
    yield d
    d.close()


def eventually(timeout: float, what: str, cond) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail("timed out after %ss waiting for: %s" % (timeout, what), pytrace=False)
        time.sleep(0.05)


# --- coordinators -------------------------------------------------------------------

_next_port = [20000 + (os.getpid() * 613) % 12000]


def free_addr() -> str:
    """A loopback address below the kernel's ephemeral range (as the Go
    tests' internal/testport), nothing listening there now."""
    for _ in range(12000):
        _next_port[0] = 20000 + (_next_port[0] - 20000 + 1) % 12000
        addr = ("127.0.0.1", _next_port[0])
        s = socket.socket()
        try:
            s.bind(addr)
        except OSError:
            continue
        finally:
            s.close()
        return "%s:%d" % addr
    raise RuntimeError("no free port")


@pytest.fixture(scope="session")
def tandem_bin():
    b = os.environ.get("TANDEM_BIN")
    if b:
        yield b
        return
    d = tempfile.mkdtemp(prefix="tandem-py-bin")
    out = os.path.join(d, "tandem")
    r = subprocess.run(["go", "build", "-tags", "failpoints", "-o", out, "./cmd/tandem"], cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        shutil.rmtree(d, ignore_errors=True)
        pytest.fail("go build -tags failpoints ./cmd/tandem failed (set TANDEM_BIN to a tandem built with -tags failpoints):\n" + r.stderr, pytrace=False)
    yield out
    shutil.rmtree(d, ignore_errors=True)


class Coordinator:
    """A real `tandem serve` process."""

    def __init__(self, binary: str, dsns, rms=None, failpoints: str = "", extra=()):
        self.binary = binary
        self.addr = free_addr()
        self.data_dir = tempfile.mkdtemp(prefix="tandem-py-coord")
        pg, my = dsns
        self.env = dict(os.environ, TANDEM_PG_DSN=pg, TANDEM_MYSQL_DSN=my)
        rms = rms or ["pg=postgres:${TANDEM_PG_DSN}", "maria=mysql:${TANDEM_MYSQL_DSN}"]
        self.args = [binary, "serve", "--listen", self.addr, "--admin", "", "--data-dir", self.data_dir, "--scan-interval", "200ms", "--orphan-timeout", "2s"]
        for r in rms:
            self.args += ["--rm", r]
        self.args += list(extra)
        self.proc: Optional[subprocess.Popen] = None
        self.log = os.path.join(self.data_dir, "serve.log")
        self.start(failpoints)

    def start(self, failpoints: str = "") -> None:
        env = dict(self.env)
        if failpoints:
            env["TANDEM_FAILPOINTS"] = failpoints
        self.proc = subprocess.Popen(self.args, env=env, stdout=open(self.log, "ab"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        import grpc
        from tandem._pb import tandem_pb2, tandem_pb2_grpc

        with grpc.insecure_channel(self.addr) as ch:
            stub = tandem_pb2_grpc.CoordinatorStub(ch)
            while True:
                if self.proc.poll() is not None:
                    pytest.fail("coordinator exited at start:\n" + self.output(), pytrace=False)
                try:
                    stub.Health(tandem_pb2.HealthRequest(), timeout=0.5)
                    return
                except grpc.RpcError:
                    if time.monotonic() > deadline:
                        pytest.fail("coordinator did not become healthy:\n" + self.output(), pytrace=False)
                    time.sleep(0.05)

    def output(self) -> str:
        with open(self.log, errors="replace") as f:
            return f.read()

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()

    def remove(self) -> None:
        """Stops the coordinator and removes its data directory (its log
        takes several MB)."""
        self.stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)


@pytest.fixture
def coordinator_factory(tandem_bin, dsns):
    made = []

    def make(**kw):
        c = Coordinator(tandem_bin, dsns, **kw)
        made.append(c)
        return c

    yield make
    for c in made:
        c.remove()


@pytest.fixture(scope="session")
def shared_coordinator(tandem_bin, dsns):
    """One coordinator for the tests that do not stop, kill or restart it
    (a coordinator takes about a second to start)."""
    c = Coordinator(tandem_bin, dsns)
    yield c
    c.remove()


@pytest.fixture
def coordinator(shared_coordinator):
    if shared_coordinator.proc.poll() is not None:
        pytest.fail("the shared coordinator exited:\n" + shared_coordinator.output(), pytrace=False)
    return shared_coordinator


def make_client(db: DB, coord: Optional[Coordinator], decide_at: str = "auto", extra_rms=(), **kw) -> tandem.Client:
    rms = [tandem.RM("pg", "postgres", connect=db.pg_conn), tandem.RM("maria", "mysql", connect=db.my_conn)] + list(extra_rms)
    return tandem.Client(
        rms=rms,
        coordinator=coord.addr if coord else None,
        defaults=tandem.CommitOptions(decide_at=decide_at),
        **kw,
    )


@pytest.fixture
def child_env(dsns):
    """The environment of a child Python process that runs a transaction."""
    return dict(os.environ, PYTHONPATH=os.path.dirname(__file__) + os.pathsep + os.environ.get("PYTHONPATH", ""))


PYTHON = sys.executable
