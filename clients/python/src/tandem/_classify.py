"""Statements that would end a branch's transaction before the decision,
refused before they are sent (the Go SDK's client/implicit.go and
client/pgcontrol.go, ported rule for rule; the MariaDB cases are the corpus
api/testdata/implicit-commit.txt shared with the Go and Java clients).

- On a MariaDB/MySQL commit point (an XA branch: the server refuses such
  statements too, with XAER_RMFAIL, which dooms the transaction) the early
  check gives a clearer error naming the statement.
- On PostgreSQL, a branch is a plain transaction until PREPARE: COMMIT,
  ROLLBACK, BEGIN, … sent as text would end it (its writes committed or
  rolled back apart from the others). The check errs on the side of refusing.
"""

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


_WORDS = {
    "_$@.": re.compile(r"(?:[A-Z0-9_$@.]|[^\x00-\x7f])+"),
    "_$": re.compile(r"(?:[A-Z0-9_$]|[^\x00-\x7f])+"),
}


def _words(code: str, extra: str) -> List[str]:
    """Upper-case words: runs of letters, digits, the extra characters and
    non-ASCII characters."""
    return _WORDS[extra].findall(code.upper())


# The characters where MariaDB/MySQL text may start a quote, a comment, a
# comment's end or a statement's end; everything between them is code.
_MY_SPECIAL = re.compile(r"['\"`#;/*-]")


def _split_mysql(query: str, backslash: bool) -> List[_Statement]:
    """Splits query at the semicolons outside quotes and comments, as
    MariaDB/MySQL do; the content of executable comments is code. A
    statement's code is its text with comments, quote characters and the
    content of '…' strings blanked out (implicit.go's splitStatements,
    jumping from one special character to the next)."""
    out: List[_Statement] = []
    code: List[str] = []
    start = 0
    n = len(query)
    i = 0
    while i < n:
        m = _MY_SPECIAL.search(query, i)
        if m is None:
            code.append(query[i:])
            break
        j = m.start()
        if j > i:
            code.append(query[i:j])
            i = j
        c = query[i]
        if c in "'\"`":
            q = c
            code.append(" ")
            i += 1
            esc = backslash and q != "`"
            while i < n:
                k = query.find(q, i)
                b = query.find("\\", i) if esc else -1
                if b >= 0 and (k < 0 or b < k):
                    code.append(" " * (b - i + 1) if q == "'" else query[i : b + 1])
                    i = b + 2  # the escaped character is skipped
                    continue
                if k < 0:
                    code.append(" " * (n - i) if q == "'" else query[i:])
                    i = n
                    break
                code.append(" " * (k - i) if q == "'" else query[i:k])
                code.append(" ")
                i = k + 1
                break
            continue
        if c == "#" or (c == "-" and query.startswith("--", i) and (i + 2 == n or query[i + 2] <= " ")):
            k = query.find("\n", i)
            i = n if k < 0 else k
            code.append(" ")
            continue
        if c == "/" and (query.startswith("/*!", i) or query.startswith("/*M!", i)):
            i = query.index("!", i)
            while i + 1 < n and "0" <= query[i + 1] <= "9":
                i += 1
            code.append(" ")
            i += 1
            continue
        if c == "/" and query.startswith("/*", i):
            end = query.find("*/", i + 2)
            i = n if end < 0 else end + 2
            code.append(" ")
            continue
        if c == "*" and query.startswith("*/", i):
            code.append(" ")
            i += 2
            continue
        if c == ";":
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


_PG_SPECIAL = re.compile(r"['\";$/-]")


def _split_postgres(query: str, backslash: bool) -> List[_Statement]:
    """Splits query at the semicolons outside quotes, dollar quotes and
    (nested) comments, as PostgreSQL's simple query protocol does; a quote,
    comment or dollar quote becomes one blank in the statement's code
    (pgcontrol.go's splitPostgres, jumping from one special character to
    the next)."""
    out: List[_Statement] = []
    code: List[str] = []
    start = 0
    n = len(query)
    i = 0
    while i < n:
        m = _PG_SPECIAL.search(query, i)
        if m is None:
            code.append(query[i:])
            break
        j = m.start()
        if j > i:
            code.append(query[i:j])
            i = j
        c = query[i]
        if c in "'\"":
            q = c
            i += 1
            esc = backslash and q == "'"
            while i < n:
                k = query.find(q, i)
                b = query.find("\\", i) if esc else -1
                if b >= 0 and (k < 0 or b < k):
                    i = b + 2
                    continue
                if k < 0:
                    i = n
                    break
                if k + 1 < n and query[k + 1] == q:
                    i = k + 2  # a doubled quote
                    continue
                i = k
                break
            code.append(" ")
            i += 1
            continue
        if c == "-" and query.startswith("--", i):
            k = query.find("\n", i)
            i = n if k < 0 else k
            code.append(" ")
            continue
        if c == "/" and query.startswith("/*", i):
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
            code.append(" ")
            i += 1
            continue
        if c == "$" and (i == 0 or (not _is_ident(query[i - 1]) and query[i - 1] != "$")):
            end = query.find("$", i + 1)
            if end >= 0 and _valid_dollar_tag(query[i + 1 : end]):
                tag = query[i : end + 1]
                close = query.find(tag, end + 1)
                i = n if close < 0 else close + len(tag)
                code.append(" ")
                continue
        if c == ";":
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
