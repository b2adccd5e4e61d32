"""examples/transfer.py, the Python twin of examples/transfer, against the
real databases and coordinator: transfers through tandem.sqlalchemy keep
every invariant, --check-only checks without touching the tables, and a
lost unit of money is found."""

import os
import subprocess

from conftest import PYTHON

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "examples", "transfer.py")


def run(env, *args):
    return subprocess.run([PYTHON, EXAMPLE, "--prefix", "py_demo_t_", "--accounts", "20", *args], env=env, capture_output=True, text=True, timeout=120)


def test_transfer_example_keeps_the_money_and_its_check_finds_a_loss(db, coordinator, child_env):
    r = run(child_env, "--coordinator", coordinator.addr, "--transfers", "60", "--workers", "4")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "commit-point" in r.stdout and "nothing prepared: ok" in r.stdout
    r = run(child_env, "--coordinator", coordinator.addr, "--transfers", "20", "--workers", "2", "--decide-at", "coordinator", "--no-reset")
    assert r.returncode == 0 and "two-phase" in r.stdout, r.stdout + r.stderr
    r = run(child_env, "--check-only")
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr
    db.pg.execute("UPDATE py_demo_t_accounts SET balance = balance - 1 WHERE id = 1")
    r = run(child_env, "--check-only")
    assert r.returncode == 1 and "total balance" in r.stderr, r.stdout + r.stderr
