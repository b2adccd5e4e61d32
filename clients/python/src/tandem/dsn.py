"""Connection settings from the DSNs the rest of Tandem uses, so that one
environment (scripts/db env: TANDEM_PG_DSN, TANDEM_MYSQL_DSN) serves the
Go tools and Python programs alike.

- PostgreSQL: a libpq URL or key=value string is psycopg's own: pass it
  to psycopg.connect as it is.
- MySQL/MariaDB: go-sql-driver/mysql's form, user:password@tcp(host:port)/db?params,
  or a URL, mysql://user:password@host:port/db, becomes PyMySQL's keyword
  arguments (mysql_kwargs), with CLIENT.MULTI_STATEMENTS set so that the
  client sends a commit point's decision and commit in one round trip.
"""

from __future__ import annotations

import re
from typing import Any, Dict
from urllib.parse import parse_qs, unquote, urlsplit

_GO = re.compile(r"^(?:(?P<user>[^:@]*)(?::(?P<password>.*))?@)?(?:(?P<net>\w+)\((?P<addr>[^)]*)\))?/(?P<db>[^?]*)(?:\?(?P<params>.*))?$")


def mysql_kwargs(dsn: str, multi_statements: bool = True) -> Dict[str, Any]:
    """PyMySQL keyword arguments for dsn (see the module's doc). autocommit
    is on: the client begins its branches itself (XA START)."""
    from pymysql.constants import CLIENT

    kw: Dict[str, Any] = {"autocommit": True}
    if dsn.startswith(("mysql://", "mariadb://")):
        u = urlsplit(dsn)
        kw.update(host=u.hostname or "127.0.0.1", port=u.port or 3306, user=unquote(u.username or ""), password=unquote(u.password or ""))
        kw["database"] = u.path.lstrip("/") or None
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
        params = parse_qs(m.group("params") or "")
        if "timeout" in params:
            kw["connect_timeout"] = _seconds(params["timeout"][0])
        if "readTimeout" in params:
            kw["read_timeout"] = _seconds(params["readTimeout"][0])
        if "writeTimeout" in params:
            kw["write_timeout"] = _seconds(params["writeTimeout"][0])
    if multi_statements:
        kw["client_flag"] = CLIENT.MULTI_STATEMENTS
    return kw


def _seconds(v: str) -> float:
    m = re.fullmatch(r"([0-9.]+)(ms|s|m)?", v)
    if not m:
        raise ValueError("tandem: duration %r in the MySQL DSN: want e.g. 5s or 500ms" % v)
    n = float(m.group(1))
    return n / 1000 if m.group(2) == "ms" else n * 60 if m.group(2) == "m" else n
