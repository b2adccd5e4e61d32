"""Moves money between accounts kept in two databases — half in PostgreSQL,
half in MariaDB/MySQL — one global transaction per transfer through Tandem
and SQLAlchemy (tandem.sqlalchemy.UnitOfWork), then proves none was lost:
the Python twin of examples/transfer.

Each transfer debits an account on one database, credits one on the other,
and writes the transfer's gtrid into a journal on both sides. At the end:

  - the total of all balances is unchanged (atomicity);
  - the journals on both sides hold the same gtrids, and every transfer
    acknowledged as committed is in both (nothing acknowledged was lost);
  - no branch in Tandem's format is left prepared on either database.

It exits 1 when a check fails, 2 on bad flags.

    eval "$(scripts/db env)"          # TANDEM_PG_DSN, TANDEM_MYSQL_DSN
    python clients/python/examples/transfer.py --coordinator 127.0.0.1:7070 --transfers 500
    python clients/python/examples/transfer.py --coordinator 127.0.0.1:7070 --check-only

The coordinator must know the RMs pg and maria (--rm pg=… --rm maria=…,
or --rm-pg / --rm-maria here). Tables: PREFIXaccounts and PREFIXjournal on
both databases (--prefix, default py_demo_), marked with a comment; a reset
drops only tables that carry it.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import sys
import threading
import time
from typing import Dict, List, Optional

import psycopg
import pymysql
from pymysql.constants import CLIENT
from sqlalchemy import URL, Engine, create_engine, make_url, text

import tandem
from tandem.dsn import mysql_kwargs
from tandem.sqlalchemy import UnitOfWork
from tandem.xid import POSTGRES_SCAN_PREDICATE

MARK = "tandem python transfer demo"
TANDEM_FORMATS = (0x54414E44, 0x54414E43, 0x54414E32, 0x54414332)


class InsufficientFunds(Exception):
    pass


def parse(argv: List[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Moves money between PostgreSQL and MariaDB accounts in global transactions and checks that none is lost.")
    p.add_argument("--coordinator", default=os.environ.get("TANDEM_COORDINATOR", "127.0.0.1:7070"),
                   help="the coordinator's address, or a primary's and its standbys' separated by commas")
    p.add_argument("--pg", default=os.environ.get("TANDEM_PG_DSN"), help="PostgreSQL DSN (default $TANDEM_PG_DSN)")
    p.add_argument("--mysql", default=os.environ.get("TANDEM_MYSQL_DSN"), help="MariaDB/MySQL DSN, Go or mysql:// form (default $TANDEM_MYSQL_DSN)")
    p.add_argument("--rm-pg", default="pg", help="the PostgreSQL RM's name (the coordinator's --rm name)")
    p.add_argument("--rm-maria", default="maria", help="the MariaDB RM's name")
    p.add_argument("--workers", type=int, default=4, help="concurrent workers")
    p.add_argument("--transfers", type=int, default=0, help="stop after this many committed transfers (0: run for --duration)")
    p.add_argument("--duration", type=float, default=10.0, help="seconds to run without --transfers")
    p.add_argument("--accounts", type=int, default=100, help="accounts on each database")
    p.add_argument("--initial-balance", type=int, default=1000, help="balance of every account at reset")
    p.add_argument("--prefix", default="py_demo_", help="prefix of the table names")
    p.add_argument("--decide-at", default="auto", choices=["auto", "coordinator", "rm"], help="where transfers are decided")
    p.add_argument("--check-only", action="store_true", help="run no transfers and never recreate the tables: check the invariants")
    p.add_argument("--no-reset", action="store_true", help="keep the tables and balances as they are")
    p.add_argument("--acked", help="append the gtrid of every acknowledged transfer to this file (with --check-only: those must be present)")
    a = p.parse_args(argv)
    if not a.pg or not a.mysql:
        p.error('set TANDEM_PG_DSN and TANDEM_MYSQL_DSN (eval "$(scripts/db env)"), or pass --pg and --mysql')
    if a.workers < 1 or a.accounts < 2:
        p.error("--workers must be at least 1 and --accounts at least 2")
    if not all(c.isalnum() or c == "_" for c in a.prefix):
        p.error("--prefix: letters, digits and _ only")
    return a


def engines(a) -> Dict[str, Engine]:
    pg = create_engine(make_url(a.pg.replace("postgres://", "postgresql://", 1)).set(drivername="postgresql+psycopg"), pool_size=a.workers + 1)
    kw = mysql_kwargs(a.mysql)
    url = URL.create("mysql+pymysql", username=kw["user"], password=kw["password"], host=kw.get("host"), port=kw.get("port"), database=kw["database"])
    my = create_engine(url, connect_args={"client_flag": CLIENT.MULTI_STATEMENTS}, pool_size=a.workers + 1)
    return {"pg": pg, "maria": my}


def reset(a, e: Dict[str, Engine]) -> None:
    acc, jr = a.prefix + "accounts", a.prefix + "journal"
    with e["pg"].begin() as c:
        for t in (acc, jr):
            marked = c.execute(text("SELECT obj_description(to_regclass(:t), 'pg_class')"), {"t": t}).scalar()
            exists = c.execute(text("SELECT to_regclass(:t) IS NOT NULL"), {"t": t}).scalar()
            if exists and marked != MARK:
                raise SystemExit("transfer: PostgreSQL table %s exists and is not this demo's: not dropped (use --prefix)" % t)
            c.execute(text("DROP TABLE IF EXISTS " + t))
        c.execute(text("CREATE TABLE %s (id int PRIMARY KEY, balance bigint NOT NULL)" % acc))
        c.execute(text("CREATE TABLE %s (gtrid char(32) PRIMARY KEY, amount bigint NOT NULL)" % jr))
        for t in (acc, jr):
            c.execute(text("COMMENT ON TABLE %s IS '%s'" % (t, MARK)))
        c.execute(text("INSERT INTO %s SELECT g, :b FROM generate_series(1, :n) g" % acc), {"b": a.initial_balance, "n": a.accounts})
    with e["maria"].begin() as c:
        for t in (acc, jr):
            marked = c.execute(text("SELECT table_comment FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = :t"), {"t": t}).scalar()
            if marked is not None and marked != MARK:
                raise SystemExit("transfer: MariaDB table %s exists and is not this demo's: not dropped (use --prefix)" % t)
            c.execute(text("DROP TABLE IF EXISTS " + t))
        c.execute(text("CREATE TABLE %s (id int PRIMARY KEY, balance bigint NOT NULL) ENGINE=InnoDB COMMENT='%s'" % (acc, MARK)))
        c.execute(text("CREATE TABLE %s (gtrid char(32) PRIMARY KEY, amount bigint NOT NULL) ENGINE=InnoDB COMMENT='%s'" % (jr, MARK)))
        c.execute(text("INSERT INTO %s (id, balance) VALUES %s" % (acc, ",".join("(%d, %d)" % (i, a.initial_balance) for i in range(1, a.accounts + 1)))))


class Stats:
    def __init__(self):
        self.mu = threading.Lock()
        self.committed = 0
        self.paths: Dict[str, int] = {}
        self.refused = 0  # insufficient funds: rolled back on purpose
        self.aborted = 0
        self.unknown: List[str] = []
        self.acked: List[str] = []
        self.crashed = ""  # a worker's unexpected exception ends the run


def transfer(a, uow: UnitOfWork, rng: random.Random, st: Stats) -> None:
    """Moves amount from a PostgreSQL account to a MariaDB one or back.
    PostgreSQL is always written first, then MariaDB: one lock order, so
    two transfers never wait for each other across the databases (a
    deadlock neither database could see)."""
    acc, jr = a.prefix + "accounts", a.prefix + "journal"
    amount = rng.randint(1, 50)
    delta = amount if rng.random() < 0.5 else -amount  # what the PostgreSQL account gains
    try:
        with uow.begin() as s:
            upd = "UPDATE %s SET balance = balance + :d WHERE id = :id AND balance + :d >= 0" % acc
            if s[a.rm_pg].execute(text(upd), {"d": delta, "id": rng.randint(1, a.accounts)}).rowcount != 1:
                raise InsufficientFunds()
            if s[a.rm_maria].execute(text(upd), {"d": -delta, "id": rng.randint(1, a.accounts)}).rowcount != 1:
                raise InsufficientFunds()
            for side, sign in ((a.rm_pg, 1), (a.rm_maria, -1)):
                s[side].execute(text("INSERT INTO %s (gtrid, amount) VALUES (:g, :a)" % jr), {"g": s.gtrid, "a": sign * delta})
    except InsufficientFunds:
        with st.mu:
            st.refused += 1
        return
    except tandem.Aborted:
        with st.mu:
            st.aborted += 1
        return
    except tandem.OutcomeUnknown as e:
        with st.mu:
            st.unknown.append(e.gtrid)
        return
    except Exception as e:  # a deadlock, a lock wait: the unit of work rolled back
        if isinstance(e, tandem.TandemError) or getattr(e, "orig", None) is not None:
            with st.mu:
                st.aborted += 1
            return
        raise
    with st.mu:
        st.committed += 1
        st.paths[s.result.path] = st.paths.get(s.result.path, 0) + 1
        st.acked.append(s.gtrid)


def run(a, e: Dict[str, Engine]) -> Stats:
    client = tandem.Client(
        rms=[
            tandem.RM(a.rm_pg, "postgres", connect=lambda: psycopg.connect(a.pg)),
            tandem.RM(a.rm_maria, "mysql", connect=lambda: pymysql.connect(**mysql_kwargs(a.mysql))),
        ],
        coordinators=[c.strip() for c in a.coordinator.split(",") if c.strip()],
        defaults=tandem.CommitOptions(decide_at=a.decide_at),
    )
    uow = UnitOfWork(client, {a.rm_pg: e["pg"], a.rm_maria: e["maria"]})  # sessions by RM name
    st = Stats()
    stop = time.monotonic() + a.duration

    def worker(i: int):
        rng = random.Random(i * 7919 + int(time.time()))
        try:
            while True:
                with st.mu:
                    if st.crashed or (a.transfers and st.committed >= a.transfers) or (not a.transfers and time.monotonic() >= stop):
                        return
                transfer(a, uow, rng, st)
        except BaseException as e:
            with st.mu:
                st.crashed = "worker %d: %s: %s" % (i, type(e).__name__, e)

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(a.workers)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    client.close()
    return st


def check(a, e: Dict[str, Engine], acked: List[str]) -> List[str]:
    """The invariants; returns what failed."""
    acc, jr = a.prefix + "accounts", a.prefix + "journal"
    failed = []
    deadline = time.monotonic() + 15
    while True:  # a phase 2 may still be running (the coordinator settles late branches)
        left = prepared(a)
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    if left:
        failed.append("left prepared: %s" % ", ".join(left))
    with e["pg"].connect() as p, e["maria"].connect() as m:
        total = sum(c.execute(text("SELECT COALESCE(SUM(balance), 0) FROM " + acc)).scalar() for c in (p, m))
        want = 2 * a.accounts * a.initial_balance
        if total != want:
            failed.append("total balance %d, want %d" % (total, want))
        pj = {r[0] for r in p.execute(text("SELECT gtrid FROM " + jr))}
        mj = {r[0] for r in m.execute(text("SELECT gtrid FROM " + jr))}
    if pj != mj:
        failed.append("journals differ: %d only in PostgreSQL, %d only in MariaDB" % (len(pj - mj), len(mj - pj)))
    missing = [g for g in acked if g not in pj or g not in mj]
    if missing:
        failed.append("%d acknowledged transfers missing, e.g. %s" % (len(missing), missing[0]))
    print("check: total %d, journal %d rows each side, %d acknowledged checked, nothing prepared: %s"
          % (total, len(pj), len(acked), "FAILED" if failed else "ok"))
    return failed


def prepared(a) -> List[str]:
    out = []
    with psycopg.connect(a.pg, autocommit=True) as c:
        out += ["pg " + r[0] for r in c.execute("SELECT gid FROM pg_prepared_xacts WHERE database = current_database() AND " + POSTGRES_SCAN_PREDICATE)]
    c = pymysql.connect(**mysql_kwargs(a.mysql))
    try:
        with c.cursor() as cur:
            cur.execute("XA RECOVER")
            out += ["maria %r" % (r[3],) for r in cur.fetchall() if r[0] in TANDEM_FORMATS]
    finally:
        c.close()
    return out


def main(argv: Optional[List[str]] = None) -> int:
    a = parse(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    e = engines(a)
    acked: List[str] = []
    if a.acked and a.check_only and os.path.exists(a.acked):
        with open(a.acked) as f:
            acked = [l.strip() for l in f if l.strip()]
    if not a.check_only:
        if not a.no_reset:
            reset(a, e)
        t0 = time.monotonic()
        st = run(a, e)
        dt = time.monotonic() - t0
        acked = st.acked
        if a.acked:
            with open(a.acked, "a") as f:
                f.writelines(g + "\n" for g in st.acked)
        if st.crashed:
            print("FAILED: " + st.crashed, file=sys.stderr)
            return 1
        print("transfers: %d committed in %.1fs (%.0f/s; %s), %d refused for insufficient funds, %d aborted, %d unknown%s"
              % (st.committed, dt, st.committed / dt if dt else 0, ", ".join("%s %d" % kv for kv in sorted(st.paths.items())),
                 st.refused, st.aborted, len(st.unknown), (" (" + ", ".join(st.unknown) + ")") if st.unknown else ""))
    failed = check(a, e, acked)
    for f in failed:
        print("FAILED: " + f, file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
