"""A benchmark of the Python client beside the databases' own two-phase
commit driven from Python: the unit of work of `tandem bench db` (one
insert into py_bench on PostgreSQL and one on MariaDB), committed several
ways, in slices interleaved so that drift and other load hit all alike.

  sql           two independent local commits (not atomic): the baseline
  raw2pc        the databases' own 2PC in SQL, as the Go bench's raw2pc
                (names "bench:" and format BENC, prepares and commits in
                parallel, no coordinator, no log): the floor of any XA
                transaction manager in Python
  tandem        tandem.Client, decided at MariaDB's commit point
  tandem-coord  the same with decide_at="coordinator": one Commit RPC

    eval "$(scripts/db env)"
    python clients/python/bench/bench.py --coordinator 127.0.0.1:7070 --threads 4 --duration 10

It prints per workload TPS, latency p50/p95/p99, this process's CPU per
transaction (all threads; the GIL included) and TPS against raw2pc. At the
end it checks that nothing is left prepared (its own branches and Tandem's)
and that both databases hold as many rows as transactions committed; a
failed check exits 3, a workload whose every transaction failed exits 1.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, List

import psycopg
import pymysql

import tandem
from tandem.dsn import mysql_kwargs
from tandem.xid import POSTGRES_SCAN_PREDICATE, new_gtrid

RAW_FORMAT_ID = 0x42454E43  # "BENC": never Tandem's, so a coordinator's scan leaves it alone
TANDEM_FORMATS = (0x54414E44, 0x54414E43, 0x54414E32, 0x54414332)
WORKLOADS = ("sql", "raw2pc", "tandem", "tandem-coord")
TABLE = "py_bench"


class Bench:
    def __init__(self, a):
        self.a = a
        self.ids = itertools.count(1)
        self.ids_mu = threading.Lock()
        self.pg = lambda: psycopg.connect(a.pg, autocommit=True)
        self.my = lambda: pymysql.connect(**mysql_kwargs(a.mysql))
        rms = [tandem.RM("pg", "postgres", connect=self.pg), tandem.RM("maria", "mysql", connect=self.my)]
        coords = [c.strip() for c in (a.coordinator or "").split(",") if c.strip()]
        self.clients = {
            "tandem": tandem.Client(rms=rms, coordinators=coords),
            "tandem-coord": tandem.Client(rms=rms, coordinators=coords, defaults=tandem.CommitOptions(decide_at="coordinator")),
        }

    def next_id(self) -> int:
        with self.ids_mu:
            return next(self.ids)

    def reset(self) -> None:
        pg, my = self.pg(), self.my()
        for g, in pg.execute("SELECT gid FROM pg_prepared_xacts WHERE database = current_database() AND gid LIKE 'bench:%'").fetchall():
            pg.execute("ROLLBACK PREPARED '%s'" % g)
        pg.execute("DROP TABLE IF EXISTS " + TABLE)
        pg.execute("CREATE TABLE %s (id bigint PRIMARY KEY, v varchar(64))" % TABLE)
        with my.cursor() as c:
            c.execute("XA RECOVER")
            for f, gl, bl, data in c.fetchall():
                if f == RAW_FORMAT_ID:
                    d = data.decode()
                    c.execute("XA ROLLBACK '%s','%s',%d" % (d[:gl], d[gl : gl + bl], f))
            c.execute("DROP TABLE IF EXISTS " + TABLE)
            c.execute("CREATE TABLE %s (id bigint PRIMARY KEY, v varchar(64)) ENGINE=InnoDB" % TABLE)
        pg.close()
        my.close()

    def counts(self):
        pg, my = self.pg(), self.my()
        try:
            p = pg.execute("SELECT count(*) FROM " + TABLE).fetchone()[0]
            with my.cursor() as c:
                c.execute("SELECT count(*) FROM " + TABLE)
                m = c.fetchone()[0]
            left = [r[0] for r in pg.execute("SELECT gid FROM pg_prepared_xacts WHERE database = current_database() AND (gid LIKE 'bench:%' OR " + POSTGRES_SCAN_PREDICATE + ")")]
            with my.cursor() as c:
                c.execute("XA RECOVER")
                left += [r[3] for r in c.fetchall() if r[0] == RAW_FORMAT_ID or r[0] in TANDEM_FORMATS]
            return p, m, left
        finally:
            pg.close()
            my.close()


class Worker:
    """One thread's connections, kept for the whole run, and a helper
    thread for raw2pc's parallel prepare and commit."""

    def __init__(self, b: Bench):
        self.b = b
        self.pgc, self.myc = b.pg(), b.my()
        self.helper = ThreadPoolExecutor(max_workers=1)

    def close(self):
        self.helper.shutdown()
        self.pgc.close()
        self.myc.close()

    def run(self, workload: str) -> None:
        getattr(self, "txn_" + workload.replace("-", "_"))()

    def txn_sql(self):
        i = self.b.next_id()
        self.pgc.execute("BEGIN; INSERT INTO %s (id, v) VALUES (%d, 'row')" % (TABLE, i))
        with self.myc.cursor() as c:
            c.execute("START TRANSACTION; INSERT INTO " + TABLE + " (id, v) VALUES (%s, 'row')", (i,))
            while c.nextset():
                pass
        f = self.helper.submit(self.pgc.execute, "COMMIT")
        self.myc.commit()
        f.result()

    def txn_raw2pc(self):
        i, g = self.b.next_id(), new_gtrid()
        gid = "'bench:%s:pg'" % g
        x = "'%s','maria',%d" % (g, RAW_FORMAT_ID)
        self.pgc.execute("BEGIN; INSERT INTO %s (id, v) VALUES (%d, 'row')" % (TABLE, i))
        with self.myc.cursor() as c:
            c.execute("XA START " + x + "; INSERT INTO " + TABLE + " (id, v) VALUES (%s, 'row')", (i,))
            while c.nextset():
                pass

        def my(stmt):
            with self.myc.cursor() as c:
                c.execute(stmt)
                while c.nextset():
                    pass

        f = self.helper.submit(self.pgc.execute, "PREPARE TRANSACTION " + gid)
        my("XA END " + x + "; XA PREPARE " + x)
        f.result()
        f = self.helper.submit(self.pgc.execute, "COMMIT PREPARED " + gid)
        my("XA COMMIT " + x)
        f.result()

    def _tandem(self, cli):
        i = self.b.next_id()
        tx = cli.begin()
        tx.branch("pg", self.pgc).execute("INSERT INTO " + TABLE + " (id, v) VALUES (%s, 'row')", (i,))
        tx.branch("maria", self.myc).execute("INSERT INTO " + TABLE + " (id, v) VALUES (%s, 'row')", (i,))
        tx.commit()

    def txn_tandem(self):
        self._tandem(self.b.clients["tandem"])

    def txn_tandem_coord(self):
        self._tandem(self.b.clients["tandem-coord"])


def pct(xs: List[float], p: float) -> float:
    if not xs:
        return 0.0
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="The Python client beside raw 2PC from Python.")
    p.add_argument("--workloads", default=",".join(WORKLOADS), help="any of " + ", ".join(WORKLOADS))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--duration", type=float, default=10.0, help="measured seconds per workload")
    p.add_argument("--slice", type=float, default=1.0, help="seconds per slice (workloads interleaved)")
    p.add_argument("--warmup", type=float, default=1.0, help="seconds per workload before measuring")
    p.add_argument("--coordinator", default=os.environ.get("TANDEM_COORDINATOR", "127.0.0.1:7070"))
    p.add_argument("--pg", default=os.environ.get("TANDEM_PG_DSN"))
    p.add_argument("--mysql", default=os.environ.get("TANDEM_MYSQL_DSN"))
    a = p.parse_args(argv)
    wls = [w.strip() for w in a.workloads.split(",") if w.strip()]
    bad = [w for w in wls if w not in WORKLOADS]
    if bad or not wls:
        p.error("unknown workload %s: use %s" % (", ".join(bad) or "(none)", ", ".join(WORKLOADS)))
    if not a.pg or not a.mysql:
        p.error('set TANDEM_PG_DSN and TANDEM_MYSQL_DSN (eval "$(scripts/db env)"), or pass --pg and --mysql')
    if a.threads < 1 or a.duration <= 0 or a.slice <= 0:
        p.error("--threads, --duration and --slice must be positive")
    b = Bench(a)
    b.reset()
    workers = [Worker(b) for _ in range(a.threads)]
    lat: Dict[str, List[float]] = {w: [] for w in wls}
    done = {w: 0 for w in wls}  # measured
    total = {w: 0 for w in wls}  # committed, warm-up included
    failed = {w: 0 for w in wls}
    wall = {w: 0.0 for w in wls}
    cpu = {w: 0.0 for w in wls}
    last_err = {w: "" for w in wls}
    mu = threading.Lock()

    def slice_(w: str, seconds: float, measure: bool):
        stop = time.monotonic() + seconds

        def loop(wk: Worker):
            while time.monotonic() < stop:
                t = time.perf_counter()
                try:
                    wk.run(w)
                except Exception as e:
                    with mu:
                        failed[w] += 1
                        last_err[w] = "%s: %s" % (type(e).__name__, e)
                    continue
                d = time.perf_counter() - t
                with mu:
                    total[w] += 1
                    if measure:
                        done[w] += 1
                        lat[w].append(d)

        c0, t0 = time.process_time(), time.monotonic()
        ts = [threading.Thread(target=loop, args=(wk,)) for wk in workers]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        if measure:
            wall[w] += time.monotonic() - t0
            cpu[w] += time.process_time() - c0

    for w in wls:
        slice_(w, a.warmup, False)
    n = max(1, int(round(a.duration / a.slice)))
    rc = 0
    for k in range(n):
        for w in wls:
            slice_(w, a.slice, True)
    p_rows, m_rows, left = b.counts()
    committed = sum(total.values())
    ok = not left and p_rows == committed and m_rows == committed
    print("check: nothing left prepared%s; rows pg %d, maria %d, committed %d: %s"
          % ("" if not left else " FAILED (%d left: %s)" % (len(left), left[:3]), p_rows, m_rows, committed, "ok" if ok else "FAILED"))
    if not ok:
        rc = 3
    base = done.get("raw2pc", 0) / wall["raw2pc"] if "raw2pc" in wls and wall["raw2pc"] else 0
    print("%-13s %8s %9s %9s %9s %12s %9s" % ("workload", "TPS", "p50 ms", "p95 ms", "p99 ms", "CPU/txn µs", "÷raw2pc"))
    for w in wls:
        tps = done[w] / wall[w] if wall[w] else 0
        print("%-13s %8.0f %9.2f %9.2f %9.2f %12.0f %9s" % (
            w, tps, pct(lat[w], .5) * 1e3, pct(lat[w], .95) * 1e3, pct(lat[w], .99) * 1e3,
            cpu[w] / done[w] * 1e6 if done[w] else 0, "%.2f" % (tps / base) if base else "-"))
        if failed[w]:
            print("  %s: %d failed; the last: %s" % (w, failed[w], last_err[w]), file=sys.stderr)
            if done[w] == 0:
                rc = rc or 1
    for wk in workers:
        wk.close()
    for c in b.clients.values():
        c.close()
    return rc


if __name__ == "__main__":
    sys.exit(main())
