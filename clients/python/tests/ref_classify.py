"""The char-by-char port of the Go SDK's classifiers (client/implicit.go,
client/pgcontrol.go), kept as the reference that tandem._classify's faster
splitters are fuzzed against (test_classify.py)."""

from __future__ import annotations

import re
from typing import List, NamedTuple

_IMPLICIT_COMMIT = frozenset(
    """ALTER CREATE DROP RENAME TRUNCATE LOCK UNLOCK BEGIN START COMMIT GRANT REVOKE FLUSH ANALYZE OPTIMIZE
    REPAIR CACHE CHECK INSTALL UNINSTALL RESET PURGE CHANGE XA LOAD PREPARE EXECUTE CALL
    IF CASE WHILE LOOP REPEAT FOR DECLARE""".split()
)

# The label before a compound statement ("l: LOOP …"); Go's \s is [\t\n\f\r ].
_LABEL = re.compile(r"^[\t\n\f\r ]*[A-Za-z0-9_$]+[\t\n\f\r ]*:")


class _Statement(NamedTuple):
    text: str
    code: str


def ends_transaction(query: str) -> str:
    """The first statement of query that would end or control a MySQL/MariaDB
    transaction, or "" when none does (implicit.go's endsTransaction)."""
    for backslash in (True, False):
        for st in _split_mysql(query, backslash):
            if _ends_tx(_words(_LABEL.sub("", st.code, count=1), "_$@.")):
                return st.text
    return ""


def _ends_tx(w: List[str]) -> bool:
    if not w:
        return False
    if w[0] == "ROLLBACK":
        w = w[1:]
        if w and w[0] == "WORK":
            w = w[1:]
        return len(w) == 0 or w[0] != "TO"
    if w[0] == "SET":
        for i, x in enumerate(w):
            if x == "FOR" and w[1] == "STATEMENT":
                return _ends_tx(w[i + 1 :])
            if x == "TRANSACTION" or "AUTOCOMMIT" in x:
                return True
        return False
    return w[0] in _IMPLICIT_COMMIT


def _words(code: str, extra: str) -> List[str]:
    """Upper-case words: runs of letters, digits, the extra characters and
    non-ASCII characters."""
    out, cur = [], []
    for r in code.upper():
        if ord(r) >= 0x80 or "A" <= r <= "Z" or "0" <= r <= "9" or r in extra:
            cur.append(r)
        elif cur:
            out.append("".join(cur))
            cur = []
    if cur:
        out.append("".join(cur))
    return out


def _split_mysql(query: str, backslash: bool) -> List[_Statement]:
    """Splits query at the semicolons outside quotes and comments, as
    MariaDB/MySQL do; the content of executable comments is code."""
    out: List[_Statement] = []
    code: List[str] = []
    start = 0
    quote = ""
    n = len(query)
    i = 0
    while i < n:
        c = query[i]
        rest = query[i:]
        if quote:
            if c == quote:
                quote, c = "", " "
            elif c == "\\" and backslash and quote != "`":
                i += 1
            if quote == "'":
                c = " "
        elif c in "'\"`":
            quote = c
            c = " "
        elif c == "#" or (rest.startswith("--") and (len(rest) == 2 or rest[2] <= " ")):
            while i + 1 < n and query[i + 1] != "\n":
                i += 1
            c = " "
        elif rest.startswith("/*!") or rest.startswith("/*M!"):
            i += rest.index("!")
            while i + 1 < n and "0" <= query[i + 1] <= "9":
                i += 1
            c = " "
        elif rest.startswith("/*"):
            end = rest.find("*/", 2)
            i = n if end < 0 else i + end + 1
            c = " "
        elif rest.startswith("*/"):
            i += 1
            c = " "
        elif c == ";":
            out.append(_Statement(query[start:i], "".join(code)))
            code = []
            start = i + 1
            i += 1
            continue
        code.append(c)
        i += 1
    out.append(_Statement(query[start:], "".join(code)))
    return out


def pg_transaction_control(query: str) -> str:
    """The first statement of query that would end or control a PostgreSQL
    transaction, or "" (pgcontrol.go's pgTransactionControl). ROLLBACK [WORK
    | TRANSACTION] TO [SAVEPOINT] is allowed."""
    for backslash in (False, True):
        for st in _split_postgres(query, backslash):
            if _pg_ends_tx(_words(st.code, "_$")):
                return st.text
    return ""


def _pg_ends_tx(w: List[str]) -> bool:
    if not w:
        return False

    def nxt(i: int) -> str:
        return w[i] if i < len(w) else ""

    if w[0] in ("COMMIT", "END", "ABORT", "BEGIN", "START"):
        return True
    if w[0] == "ROLLBACK":
        i = 1
        if nxt(i) in ("WORK", "TRANSACTION"):
            i += 1
        return nxt(i) != "TO"
    if w[0] == "PREPARE":
        return nxt(1) == "TRANSACTION"
    if w[0] == "SET":
        i = 1
        if nxt(i) in ("SESSION", "LOCAL"):
            i += 1
        return nxt(i) in ("TRANSACTION", "CHARACTERISTICS")
    return False


def _is_ident(c: str) -> bool:
    return "a" <= c <= "z" or "A" <= c <= "Z" or "0" <= c <= "9" or c == "_" or ord(c) >= 0x80


def _valid_dollar_tag(tag: str) -> bool:
    for i, c in enumerate(tag):
        if not ("a" <= c <= "z" or "A" <= c <= "Z" or c == "_" or ord(c) >= 0x80 or (i > 0 and "0" <= c <= "9")):
            return False
    return True


def _split_postgres(query: str, backslash: bool) -> List[_Statement]:
    """Splits query at the semicolons outside quotes, dollar quotes and
    (nested) comments, as PostgreSQL's simple query protocol does."""
    out: List[_Statement] = []
    code: List[str] = []
    start = 0
    n = len(query)
    i = 0
    while i < n:
        c = query[i]
        rest = query[i:]
        if c in "'\"":
            q = c
            i += 1
            while i < n:
                if query[i] == "\\" and backslash and q == "'":
                    i += 2
                    continue
                if query[i] == q:
                    if i + 1 < n and query[i + 1] == q:
                        i += 2
                        continue
                    break
                i += 1
            c = " "
        elif rest.startswith("--"):
            while i + 1 < n and query[i + 1] != "\n":
                i += 1
            c = " "
        elif rest.startswith("/*"):
            depth = 0
            while i < n:
                if query.startswith("/*", i):
                    depth += 1
                    i += 1
                elif query.startswith("*/", i):
                    depth -= 1
                    i += 1
                if depth == 0:
                    break
                i += 1
            c = " "
        elif c == "$" and (i == 0 or (not _is_ident(query[i - 1]) and query[i - 1] != "$")):
            end = rest.find("$", 1)
            tag = rest[: end + 1] if end >= 0 else ""
            if end >= 0 and _valid_dollar_tag(tag[1:-1]):
                close = rest.find(tag, len(tag))
                i = n if close < 0 else i + close + len(tag) - 1
                c = " "
        elif c == ";":
            out.append(_Statement(query[start:i], "".join(code)))
            code = []
            start = i + 1
            i += 1
            continue
        code.append(c)
        i += 1
    out.append(_Statement(query[start:], "".join(code)))
    return out


def clip(stmt: str) -> str:
    """stmt without its surrounding blanks, cut after 80 characters with "…"."""
    stmt = stmt.strip()
    if len(stmt) > 80:
        stmt = stmt[:80] + "…"
    return stmt


def quote(s: str) -> str:
    """s in double quotes, escaped as Go's %q does for the common cases."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r") + '"'


def implicit_refusal(rm: str, stmt: str) -> str:
    return (
        "tandem: rm %s: %s would end the transaction (an implicit commit): not allowed inside a global transaction, "
        "whose MariaDB/MySQL branch is its commit point; run DDL, LOCK TABLES, transaction control and stored procedures "
        "(CALL: one may COMMIT) outside it, or decide at the coordinator (an XA branch refuses them too)" % (quote(rm), quote(clip(stmt)))
    )


def pg_refusal(rm: str, stmt: str) -> str:
    return (
        "tandem: rm %s: %s is transaction control: not allowed inside a global transaction, which the client begins, "
        "prepares and ends; commit or roll back the global transaction (Tx.commit, Tx.rollback), or use SAVEPOINT / "
        "ROLLBACK TO SAVEPOINT inside it" % (quote(rm), quote(clip(stmt)))
    )
