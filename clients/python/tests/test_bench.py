"""bench/bench.py runs every workload against the real databases and
coordinator, and its check passes (nothing left prepared, as many rows on
both as transactions committed)."""

import os
import subprocess

from conftest import PYTHON

BENCH = os.path.join(os.path.dirname(__file__), "..", "bench", "bench.py")


def test_bench_runs_every_workload_and_its_check_passes(db, coordinator, child_env):
    r = subprocess.run([PYTHON, BENCH, "--coordinator", coordinator.addr, "--threads", "2", "--duration", "0.6", "--slice", "0.3", "--warmup", "0.2"],
                       env=child_env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "nothing left prepared" in r.stdout and ": ok" in r.stdout
    for w in ("sql", "raw2pc", "tandem", "tandem-coord"):
        assert "\n" + w + " " in r.stdout, r.stdout
    r = subprocess.run([PYTHON, BENCH, "--workloads", "nope"], env=child_env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "unknown workload nope" in r.stderr
