"""Connection settings from the DSNs the rest of Tandem uses, so that one
environment (scripts/db env: TANDEM_PG_DSN, TANDEM_MYSQL_DSN) serves the
Go tools and Python programs alike.

- PostgreSQL: a libpq URL or key=value string is psycopg's own: pass it
  to psycopg.connect as it is.
- MySQL/MariaDB: go-sql-driver/mysql's form, user:password@tcp(host:port)/db?params,
  or a URL, mysql://user:password@host:port/db?params, becomes PyMySQL's
  keyword arguments (mysql_kwargs), with CLIENT.MULTI_STATEMENTS set so that
  the client sends a commit point's decision and commit in one round trip.

Parameters (the Go driver's names, in either form): every one is honoured
or refused with ValueError, never dropped. tls=true (verified against the
system's roots, host name checked), tls=skip-verify and tls=preferred (TLS,
not verified) become an ssl.SSLContext, and TLS is then required: with no
TLS from the server the connection fails (PyMySQL >= 1.2; PyMySQL 1.1
would fall back to cleartext silently, so a DSN asking for TLS is refused
with it); tls=false turns TLS off. timeout, readTimeout, writeTimeout,
charset (the first of a list), collation, clientFoundRows and
maxAllowedPacket are mapped; multiStatements, interpolateParams, parseTime,
loc, checkConnLiveness, columnsWithAlias, rejectReadOnly, timeTruncate and
allowNativePasswords act on the Go side only and are accepted. Anything
else -- a tls.Config registered by name, allowFallbackToPlaintext, a
session variable (which the Go driver SETs) -- is refused: pass PyMySQL's
arguments yourself (ssl=, init_command=).
"""

from __future__ import annotations

import re
import ssl
from typing import Any, Dict, List
from urllib.parse import parse_qs, unquote, urlsplit

_GO = re.compile(r"^(?:(?P<user>[^:@]*)(?::(?P<password>.*))?@)?(?:(?P<net>\w+)\((?P<addr>[^)]*)\))?/(?P<db>[^?]*)(?:\?(?P<params>.*))?$")

#: Go driver parameters that change nothing for a PyMySQL connection used
#: through Tandem (Go-side value conversion, statement interpolation, pool
#: checks): accepted and ignored.
GO_ONLY = frozenset(
    [
        "multiStatements",
        "interpolateParams",
        "parseTime",
        "loc",
        "checkConnLiveness",
        "columnsWithAlias",
        "rejectReadOnly",
        "timeTruncate",
        "allowNativePasswords",
    ]
)


def mysql_kwargs(dsn: str, multi_statements: bool = True) -> Dict[str, Any]:
    """PyMySQL keyword arguments for dsn (see the module's doc). autocommit
    is on: the client begins its branches itself (XA START). Raises
    ValueError for a DSN it cannot read or a parameter it cannot honour."""
    from pymysql.constants import CLIENT

    kw: Dict[str, Any] = {"autocommit": True}
    if dsn.startswith(("mysql://", "mariadb://")):
        u = urlsplit(dsn)
        kw.update(host=u.hostname or "127.0.0.1", port=u.port or 3306, user=unquote(u.username or ""), password=unquote(u.password or ""))
        kw["database"] = unquote(u.path.lstrip("/")) or None
        query = u.query
    else:
        m = _GO.match(dsn)
        if m is None:
            raise ValueError("tandem: MySQL DSN not understood: want user:password@tcp(host:port)/db or mysql://user:password@host:port/db")
        kw.update(user=m.group("user") or "", password=m.group("password") or "")
        net, addr = m.group("net") or "tcp", m.group("addr") or "127.0.0.1:3306"
        if net == "unix":
            kw["unix_socket"] = addr
        else:
            host, _, port = addr.rpartition(":")
            kw.update(host=host or "127.0.0.1", port=int(port or 3306))
        kw["database"] = m.group("db") or None
        query = m.group("params") or ""
    flags = CLIENT.MULTI_STATEMENTS if multi_statements else 0
    flags |= _apply_params(kw, parse_qs(query, keep_blank_values=True))
    if flags:
        kw["client_flag"] = flags
    return kw


def _apply_params(kw: Dict[str, Any], params: Dict[str, List[str]]) -> int:
    """Puts the DSN's parameters into kw; returns client flags to add."""
    from pymysql.constants import CLIENT

    flags = 0
    for name, values in params.items():
        v = values[-1]
        if name in GO_ONLY:
            continue
        if name == "tls":
            _apply_tls(kw, v)
        elif name == "timeout":
            kw["connect_timeout"] = _seconds(v)
        elif name == "readTimeout":
            kw["read_timeout"] = _seconds(v)
        elif name == "writeTimeout":
            kw["write_timeout"] = _seconds(v)
        elif name == "charset":
            kw["charset"] = v.split(",")[0].strip()
        elif name == "collation":
            kw["collation"] = v
        elif name == "clientFoundRows":
            if _bool(name, v):
                flags |= CLIENT.FOUND_ROWS
        elif name == "maxAllowedPacket":
            try:
                n = int(v)
            except ValueError:
                raise ValueError("tandem: maxAllowedPacket=%r in the MySQL DSN: want a number of bytes" % v) from None
            if n > 0:
                kw["max_allowed_packet"] = n
        else:
            raise ValueError(
                "tandem: MySQL DSN parameter %r is not supported by tandem.dsn.mysql_kwargs (the Go driver would %s): remove it, or "
                "pass PyMySQL's arguments yourself (ssl=, init_command=, …)"
                % (name, "allow cleartext when the server offers no TLS" if name == "allowFallbackToPlaintext" else "treat it as a setting or a session variable")
            )
    return flags


def _apply_tls(kw: Dict[str, Any], v: str) -> None:
    """tls=true|skip-verify|preferred: an SSLContext, TLS required; tls=false:
    TLS off. A name (a Go tls.Config registered with RegisterTLSConfig) has
    no meaning here."""
    low = v.lower()
    if low in ("false", "0"):
        kw.pop("ssl", None)
        kw["ssl_disabled"] = True
        return
    if low not in ("true", "1", "skip-verify", "preferred"):
        raise ValueError(
            "tandem: tls=%r in the MySQL DSN: a tls.Config registered by name in Go has no equivalent here; use tls=true, "
            "skip-verify or preferred, or pass PyMySQL's ssl= (an ssl.SSLContext) yourself" % v
        )
    import pymysql

    version = tuple(int(x) for x in re.findall(r"\d+", pymysql.__version__)[:2])
    if version < (1, 2):
        raise ValueError(
            "tandem: tls=%s in the MySQL DSN needs PyMySQL >= 1.2 (installed: %s): PyMySQL 1.1 connects in cleartext, silently, "
            "to a server that offers no TLS; upgrade PyMySQL, or pass ssl= yourself and check the connection" % (v, pymysql.__version__)
        )
    ctx = ssl.create_default_context()
    if low in ("skip-verify", "preferred"):
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    kw["ssl"] = ctx
    kw.pop("ssl_disabled", None)


def _bool(name: str, v: str) -> bool:
    if v in ("1", "true", "TRUE", "True"):
        return True
    if v in ("0", "false", "FALSE", "False"):
        return False
    raise ValueError("tandem: %s=%r in the MySQL DSN: want true or false" % (name, v))


def _seconds(v: str) -> float:
    m = re.fullmatch(r"([0-9.]+)(ms|s|m)?", v)
    if not m:
        raise ValueError("tandem: duration %r in the MySQL DSN: want e.g. 5s or 500ms" % v)
    n = float(m.group(1))
    return n / 1000 if m.group(2) == "ms" else n * 60 if m.group(2) == "m" else n
