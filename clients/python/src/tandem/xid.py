"""How Tandem names global transactions and their branches on each database:
the wire contract (api/README.md; the Go package xid is the reference).
A client that names its branches otherwise strands them: the coordinator's
recovery finds a dead client's prepared branches only by these names.

gtrid: 16 bytes as 32 lowercase hex digits: 2 bytes shard prefix (0), 6
bytes milliseconds since the epoch (big endian), 8 random bytes.

bqual: the resource manager's configured name (1-32 of a-z 0-9 _ -, not
starting with _ or -).

owner: 32 lowercase hex digits: the coordinator cluster's id for a branch the
coordinator decides, the commit point's decision-table id for a branch a
commit point decides.
"""

from __future__ import annotations

import re
import secrets
import time
from dataclasses import dataclass
from typing import Optional

# XA format IDs on MySQL/MariaDB.
OWNED_FORMAT_ID = 0x54414E32  # "TAN2": decided by the coordinator, owned by its cluster
OWNED_COMMIT_POINT_FORMAT_ID = 0x54414332  # "TAC2": decided by a commit point
FORMAT_ID = 0x54414E44  # "TAND": legacy, unowned
COMMIT_POINT_FORMAT_ID = 0x54414E43  # "TANC": legacy, unowned, commit point

OWNED_PREFIX = "tandem2:"
OWNED_COMMIT_POINT_PREFIX = "tandemcp2:"
POSTGRES_PREFIX = "tandem:"
POSTGRES_COMMIT_POINT_PREFIX = "tandemcp:"

#: The SQL condition on pg_prepared_xacts.gid that keeps every Tandem branch.
POSTGRES_SCAN_PREDICATE = (
    "(gid LIKE 'tandem:%' OR gid LIKE 'tandemcp:%' OR gid LIKE 'tandem2:%' OR gid LIKE 'tandemcp2:%')"
)

MAX_RM_NAME_LEN = 32

_HEX32 = re.compile(r"[0-9a-f]{32}\Z")
_ZERO = "0" * 32


class MalformedError(ValueError):
    """A gtrid, owner or resource-manager name that breaks the format."""


def new_gtrid(now: Optional[float] = None, shard: int = 0) -> str:
    """A fresh gtrid stamped with now (seconds since the epoch; default the
    clock) and shard prefix shard, as 32 lowercase hex digits. No round
    trip, no shared sequence."""
    ms = int((time.time() if now is None else now) * 1000)
    b = shard.to_bytes(2, "big") + (ms & 0xFFFFFFFFFFFF).to_bytes(6, "big") + secrets.token_bytes(8)
    return b.hex()


def check_gtrid(g: str) -> str:
    """Returns g if it is a gtrid (32 lowercase hex digits, not all zero)."""
    if not isinstance(g, str) or not _HEX32.match(g):
        raise MalformedError("xid: malformed gtrid %r: want 32 lowercase hex digits" % (g,))
    if g == _ZERO:
        raise MalformedError("xid: malformed gtrid: the all-zero gtrid is reserved")
    return g


def check_owner(o: str) -> str:
    """Returns o if it is an owner (32 lowercase hex digits, not all zero)."""
    if not isinstance(o, str) or not _HEX32.match(o):
        raise MalformedError("xid: malformed owner %r: want 32 lowercase hex digits" % (o,))
    if o == _ZERO:
        raise MalformedError("xid: malformed owner: the all-zero owner is reserved for unowned (legacy) names")
    return o


def gtrid_time(g: str) -> float:
    """The start time stamped into g, in seconds since the epoch (to the ms)."""
    return int(check_gtrid(g)[4:16], 16) / 1000.0


def validate_rm_name(name: str) -> str:
    """Returns name if it can name a resource manager (and so be a bqual)."""
    if not isinstance(name, str) or not name or len(name) > MAX_RM_NAME_LEN:
        raise MalformedError(
            "xid: malformed resource manager name %r: want 1 to %d characters of a-z, 0-9, '_' or '-'" % (name, MAX_RM_NAME_LEN)
        )
    for i, c in enumerate(name):
        ok = "a" <= c <= "z" or "0" <= c <= "9" or (i > 0 and c in "_-")
        if not ok:
            raise MalformedError(
                "xid: malformed resource manager name %r: character %d is %r; use a-z, 0-9, '_' or '-' (not first)" % (name, i, c)
            )
    return name


@dataclass
class BranchName:
    """One branch: a gtrid on one resource manager. commit_point is "" for a
    branch decided by the coordinator's log, else the RM whose decision
    table holds the outcome. owner is "" for a legacy (unowned) name."""

    gtrid: str
    rm: str
    commit_point: str = ""
    owner: str = ""

    def owned(self) -> bool:
        return bool(self.owner)

    def postgres_gid(self) -> str:
        """The prepared transaction's GID on PostgreSQL."""
        g = self.gtrid
        if self.commit_point and self.owner:
            return OWNED_COMMIT_POINT_PREFIX + g + ":" + self.rm + ":" + self.commit_point + ":" + self.owner
        if self.commit_point:
            return POSTGRES_COMMIT_POINT_PREFIX + g + ":" + self.rm + ":" + self.commit_point
        if self.owner:
            return OWNED_PREFIX + g + ":" + self.rm + ":" + self.owner
        return POSTGRES_PREFIX + g + ":" + self.rm

    def mysql_xid(self) -> str:
        """The XID as written in XA statements: 'gtrid','bqual',formatID.
        Every part is plain ASCII needing no escaping (validated hex and
        resource-manager names)."""
        g = self.gtrid
        if self.commit_point and self.owner:
            return "'%s%s','%s%s',%d" % (g, self.commit_point, self.owner, self.rm, OWNED_COMMIT_POINT_FORMAT_ID)
        if self.commit_point:
            return "'%s%s','%s',%d" % (g, self.commit_point, self.rm, COMMIT_POINT_FORMAT_ID)
        if self.owner:
            return "'%s','%s%s',%d" % (g, self.owner, self.rm, OWNED_FORMAT_ID)
        return "'%s','%s',%d" % (g, self.rm, FORMAT_ID)


def commit_point_self(gtrid: str, cp: str, table: str) -> BranchName:
    """The name of the commit point's own branch on MariaDB/MySQL: the branch
    of gtrid on cp decided by cp, owned by cp's decision table. Never
    prepared."""
    return BranchName(gtrid, cp, cp, table)


def parse_postgres_gid(gid: str) -> Optional[BranchName]:
    """Reads a GID written by postgres_gid, of any kind; None for a GID that
    is not Tandem's or is malformed."""
    for prefix, cp, owned in (
        (OWNED_COMMIT_POINT_PREFIX, True, True),
        (OWNED_PREFIX, False, True),
        (POSTGRES_COMMIT_POINT_PREFIX, True, False),
        (POSTGRES_PREFIX, False, False),
    ):
        if gid.startswith(prefix):
            parts = gid[len(prefix):].split(":")
            break
    else:
        return None
    want = 2 + cp + owned
    if len(parts) != want:
        return None
    try:
        b = BranchName(check_gtrid(parts[0]), validate_rm_name(parts[1]))
        if cp:
            b.commit_point = validate_rm_name(parts[2])
        if owned:
            b.owner = check_owner(parts[want - 1])
    except MalformedError:
        return None
    return b


def parse_mysql_xid(format_id: int, gtrid_len: int, bqual_len: int, data: bytes) -> Optional[BranchName]:
    """Reads one row of XA RECOVER, of any Tandem format; None otherwise."""
    if bqual_len < 1 or gtrid_len < 32 or gtrid_len + bqual_len != len(data):
        return None
    cp = format_id in (COMMIT_POINT_FORMAT_ID, OWNED_COMMIT_POINT_FORMAT_ID)
    owned = format_id in (OWNED_FORMAT_ID, OWNED_COMMIT_POINT_FORMAT_ID)
    if format_id not in (FORMAT_ID, COMMIT_POINT_FORMAT_ID, OWNED_FORMAT_ID, OWNED_COMMIT_POINT_FORMAT_ID):
        return None
    if not cp and gtrid_len != 32:
        return None
    try:
        text = data.decode("ascii")
        b = BranchName(check_gtrid(text[:32]), "")
        if cp:
            b.commit_point = validate_rm_name(text[32:gtrid_len])
        bq = text[gtrid_len:]
        if owned:
            if len(bq) < 33:
                return None
            b.owner, bq = check_owner(bq[:32]), bq[32:]
        b.rm = validate_rm_name(bq)
    except (MalformedError, UnicodeDecodeError):
        return None
    return b
