"""The Python client sends internal/decision's SQL and names branches as
package xid does, text for text: tests/golden (Go) prints them for fixed
inputs, and each is compared with what the Python code makes."""

import json
import os
import subprocess

import pytest

from tandem import decision, xid
from tandem.xid import BranchName

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
G = "000001a2193110aa0123456789abcdef"
OTHER = "000001a2193110bb00000000000000ff"
TABLE = "6f1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e"
PART = "00112233445566778899aabbccddeeff"


@pytest.fixture(scope="module")
def golden():
    out = subprocess.run(["go", "run", "./clients/python/tests/golden"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, "go run ./clients/python/tests/golden failed (Go is needed for this test):\n" + out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("d", ["postgres", "mysql"])
def test_decision_statements_are_gos(golden, d):
    g = golden[d]
    x = xid.commit_point_self(G, "maria", TABLE).mysql_xid() if d == "mysql" else ""
    assert decision.begin_statements(d, x) == g["begin"]
    assert decision.begin_statements(d, "") == g["begin_nx"]
    parts = [("pg2", PART), ("maria", TABLE), ("x", "")]
    assert decision.commit_statements(d, G, TABLE, parts, 3600.0, [G, OTHER], x) == g["commit"]
    assert decision.commit_statements(d, G, TABLE, (), 0.2) == g["commit_young"]
    assert decision.commit_statements(d, G, TABLE, [("pg2", PART)], 3600.0, (), x, table_checked=True) == g["commit_checked"]
    assert decision.id_checked_query(d) == g["id_checked"]
    assert decision.commit_statements(d, G, "", (), 7200.0) == g["commit_zero"]
    assert decision.ddl(d) == g["ddl"]
    before, body, after = decision.resolve_statements(d, G, TABLE, 2.0)
    # Go's transaction begin/rollback are the driver's: <begin>, <rollback> here.
    assert before + ["<begin>"] + body + ["<rollback>"] + after + [decision.lookup_query(d, G, TABLE)] == g["resolve"]
    before, body, after = decision.forget_statements(d, [G, OTHER])
    assert before + ["<begin>"] + body + ["<commit>"] + after == g["forget"]
    assert [decision.read_id_query(d)] == g["read_id"]
    assert [decision.durability_query(d)] == g["durable"]


def test_participants_are_gos(golden):
    assert decision.format_participants([("pg2", PART), ("maria", TABLE), ("x", "")]) == golden["participants"]


def test_branch_names_are_gos(golden):
    for n in golden["names"]:
        b = BranchName(G, n["rm"], n["cp"], n["owner"])
        assert b.postgres_gid() == n["pg"]
        assert b.mysql_xid() == n["my"]
        assert xid.parse_postgres_gid(n["pg"]) == b


def test_gtrids_are_time_ordered_and_well_formed():
    import time

    a = xid.new_gtrid()
    b = xid.new_gtrid(time.time() + 1)
    assert xid.check_gtrid(a) == a and a[:4] == "0000" and a < b
    assert abs(xid.gtrid_time(a) - time.time()) < 5
    for bad in ("", "0" * 32, "A" * 32, "g" * 32, "0" * 31):
        with pytest.raises(ValueError):
            xid.check_gtrid(bad)


def test_mysql_xid_parses_back():
    b = BranchName(G, "pg", "maria", TABLE)
    raw = (G + "maria" + TABLE + "pg").encode()
    assert xid.parse_mysql_xid(xid.OWNED_COMMIT_POINT_FORMAT_ID, 37, len(TABLE) + 2, raw) == b
    assert xid.parse_mysql_xid(1, 32, 2, (G + "pg").encode()) is None
