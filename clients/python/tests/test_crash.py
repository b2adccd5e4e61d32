"""A client process SIGKILLed at each step of a commit: the coordinator
settles its prepared branches as the decision says — rolled back when it
died before the decision, committed after — on both paths (the
coordinator's log, and MariaDB's commit point, where the coordinator's scan
takes the decision key)."""

import subprocess
import time

from conftest import PYTHON, eventually

# (step, decide_at, committed?)
CASES = [
    ("after-prepare", "coordinator", False),
    ("before-commit-rpc", "coordinator", False),
    ("after-commit-rpc", "coordinator", True),
    ("before-commit-point", "auto", False),
    ("after-commit-point", "auto", True),
]


def test_client_killed_at_each_step_is_settled_by_the_coordinator(db, coordinator, child_env):
    db.table("py_crash")
    children = []
    for i, (step, decide_at, _) in enumerate(CASES):
        p = subprocess.Popen(
            [PYTHON, child_env["PYTHONPATH"].split(":")[0] + "/child_tx.py", step, decide_at, "py_crash", str(i), coordinator.addr],
            env=child_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        children.append(p)
    gtrids = []
    for (step, _, _), p in zip(CASES, children):
        out, err = p.communicate(timeout=60)
        assert p.returncode == -9, "the child for %s was not killed at its step (exit %s):\n%s%s" % (step, p.returncode, out, err)
        gtrids.append(out.split()[0])
    # Right after the kills: the branches that were prepared wait for the coordinator.
    for (step, _, _), g in zip(CASES, gtrids):
        if step in ("before-commit-rpc", "before-commit-point"):
            assert db.prepared_for(g), "%s: no branch of %s prepared right after the kill" % (step, g)

    def settled(i):
        step, _, committed = CASES[i]
        want = 1 if committed else 0
        return db.prepared_for(gtrids[i]) == [] and db.count("pg", "py_crash", i) == want and db.count("maria", "py_crash", i) == want

    deadline = time.monotonic() + 30
    for i, (step, decide_at, committed) in enumerate(CASES):
        eventually(max(deadline - time.monotonic(), 1), "%s (%s): settled %s on both databases" % (step, decide_at, "committed" if committed else "rolled back"),
                   lambda i=i: settled(i))
    # The commit point's cases: the decision row says what the coordinator applied.
    assert db.decision_row("maria", gtrids[3]) == "A"
    assert db.decision_row("maria", gtrids[4]) == "C"
