"""Pieces of the client that need no database: the forget queue, Health's
place line, the options, the DSN forms."""

import pytest

import tandem
from tandem import client as tc
from tandem._coord import place_in


def test_forget_queue_takes_full_batches_of_old_enough_rows():
    s = tc._CPState()
    for i in range(tc.FORGET_BATCH - 1):
        s.add_forget("%032x" % (i + 1))
        s.forget_at[-1] = 0.0  # long ago
    assert s.take_forget(1e9) == []  # not a full batch yet
    s.add_forget("%032x" % 999)
    assert s.take_forget(s.forget_at[-1] + 1) == []  # the newest is too young: still not a batch
    got = s.take_forget(s.forget_at[-1] + tc.FORGET_AFTER)
    assert len(got) == tc.FORGET_BATCH and s.forget == []
    s.give_back(got[:3])
    s.add_forget("%032x" % 1000)
    assert s.forget[:3] == got[:3] and s.forget_at[:3] == [0.0] * 3  # given back first, old enough


def test_forget_queue_is_bounded():
    s = tc._CPState()
    s.forget = ["x"] * tc.FORGET_KEEP
    s.forget_at = [0.0] * tc.FORGET_KEEP
    s.add_forget("y")
    assert len(s.forget) == tc.FORGET_KEEP


def test_health_place_is_read_from_its_role_line():
    msg = "rm pg: says cluster=bad epoch=99\nrole=primary cluster=0123456789abcdef0123456789abcdef epoch=3 standby=none"
    assert place_in(msg) == ("0123456789abcdef0123456789abcdef", 3)
    assert place_in("cluster=abc epoch=2") == ("abc", 2)
    assert place_in("") == ("", 0)


def test_options_are_checked():
    rms = [tandem.RM("pg", "postgres")]
    with pytest.raises(tandem.ConfigError):
        tandem.Client(rms=rms, defaults=tandem.CommitOptions(durability="fast"))
    with pytest.raises(tandem.ConfigError):
        tandem.Client(rms=rms, defaults=tandem.CommitOptions(decide_at="somewhere"))
    c = tandem.Client(rms=rms)
    with pytest.raises(tandem.ConfigError):
        c.begin(tandem.CommitOptions(visibility="later"))
    assert c.begin(tandem.CommitOptions(decide_at="")).opts.decide_at == "auto"
    c.close()


def test_configuration_errors():
    with pytest.raises(tandem.ConfigError):
        tandem.Client(rms=[])
    with pytest.raises(tandem.ConfigError):
        tandem.Client(rms=[tandem.RM("Bad", "postgres")])
    with pytest.raises(tandem.ConfigError):
        tandem.Client(rms=[tandem.RM("pg", "postgres"), tandem.RM("pg", "mysql")])
    with pytest.raises(tandem.ConfigError):
        tandem.Client(rms=[tandem.RM("pg", "oracle")])
    with pytest.raises(tandem.ConfigError):
        tandem.Client(rms=[tandem.RM("pg", "postgres")], coordinator="localhost")  # no port
    with pytest.raises(tandem.ConfigError):
        tandem.Client(rms=[tandem.RM("pg", "postgres")], max_txn_age=7200)


# --- tandem.dsn.mysql_kwargs: the Go driver's DSN parameters ---------------------------

_GO_DSN = "u:p@tcp(db.example:3307)/app"


def _pymysql_refuses_cleartext() -> bool:
    import pymysql

    return tuple(int(x) for x in pymysql.__version__.split(".")[:2]) >= (1, 2)


@pytest.mark.parametrize("dsn", [_GO_DSN + "?tls=true", "mysql://u:p@db.example:3307/app?tls=true"])
def test_mysql_dsn_tls_true_verifies_the_server(dsn):
    """tls=true (Go: TLS with the system's roots, the host name checked)
    must reach PyMySQL: dropping it connects in cleartext."""
    import ssl

    from tandem.dsn import mysql_kwargs

    if not _pymysql_refuses_cleartext():
        with pytest.raises(ValueError, match="PyMySQL"):
            mysql_kwargs(dsn)
        return
    kw = mysql_kwargs(dsn)
    ctx = kw.get("ssl")
    assert isinstance(ctx, ssl.SSLContext), "tls=true dropped: %r" % kw
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert not kw.get("ssl_disabled")


@pytest.mark.parametrize("mode", ["skip-verify", "preferred"])
def test_mysql_dsn_tls_without_verification_is_still_tls(mode):
    import ssl

    from tandem.dsn import mysql_kwargs

    if not _pymysql_refuses_cleartext():
        with pytest.raises(ValueError, match="PyMySQL"):
            mysql_kwargs(_GO_DSN + "?tls=" + mode)
        return
    ctx = mysql_kwargs(_GO_DSN + "?tls=" + mode).get("ssl")
    assert isinstance(ctx, ssl.SSLContext), "tls=%s dropped" % mode
    assert ctx.verify_mode == ssl.CERT_NONE and not ctx.check_hostname


def test_mysql_dsn_tls_false_and_custom():
    from tandem.dsn import mysql_kwargs

    kw = mysql_kwargs(_GO_DSN + "?tls=false")
    assert kw.get("ssl_disabled") is True and "ssl" not in kw
    with pytest.raises(ValueError, match="tls"):
        mysql_kwargs(_GO_DSN + "?tls=my-registered-config")  # a Go tls.Config registered by name: nothing to map it to


def test_mysql_dsn_unknown_parameters_are_refused_loudly():
    """A parameter mysql_kwargs cannot honour is an error, never dropped:
    the Go driver sets unknown ones as session variables, and
    allowFallbackToPlaintext asks for what Tandem never does."""
    from tandem.dsn import mysql_kwargs

    for q in ["sql_mode=ANSI", "allowFallbackToPlaintext=true", "tls=true&bogus=1"]:
        with pytest.raises(ValueError, match=q.split("=")[0] if not q.startswith("tls") else "bogus"):
            mysql_kwargs(_GO_DSN + "?" + q)
        with pytest.raises(ValueError):
            mysql_kwargs("mysql://u:p@db.example/app?" + q)


def test_mysql_dsn_known_parameters():
    from pymysql.constants import CLIENT

    from tandem.dsn import mysql_kwargs

    # scripts/db env's DSN: Go-side parameters with nothing to do here.
    kw = mysql_kwargs("tandem:pw@tcp(127.0.0.1:53306)/tandem_test?multiStatements=true&interpolateParams=true&parseTime=true")
    assert kw["host"] == "127.0.0.1" and kw["port"] == 53306 and kw["database"] == "tandem_test"
    assert kw["client_flag"] & CLIENT.MULTI_STATEMENTS and "ssl" not in kw
    kw = mysql_kwargs(_GO_DSN + "?timeout=5s&readTimeout=500ms&charset=utf8mb4,utf8&clientFoundRows=true&maxAllowedPacket=1048576")
    assert kw["connect_timeout"] == 5 and kw["read_timeout"] == 0.5 and kw["charset"] == "utf8mb4"
    assert kw["client_flag"] & CLIENT.FOUND_ROWS and kw["client_flag"] & CLIENT.MULTI_STATEMENTS
    assert kw["max_allowed_packet"] == 1048576
    kw = mysql_kwargs("mysql://u:p%40x@h:3308/d?readTimeout=2s")
    assert kw["password"] == "p@x" and kw["read_timeout"] == 2


def test_mysql_dsn_tls_never_falls_back_to_cleartext(dsns):
    """Against the test server: a DSN asking for TLS gets TLS, or no
    connection at all (the test MariaDB has TLS off: OperationalError 2026)."""
    import ssl

    import pymysql

    from tandem.dsn import mysql_kwargs

    if not _pymysql_refuses_cleartext():
        pytest.skip("PyMySQL < 1.2: mysql_kwargs refuses tls= (tested above)")
    dsn = dsns[1] + ("&" if "?" in dsns[1] else "?") + "tls=skip-verify"
    try:
        c = pymysql.connect(**mysql_kwargs(dsn))
    except pymysql.err.OperationalError as e:
        assert e.args[0] == 2026, e  # SSL is required but the server doesn't support it
        return
    try:
        assert isinstance(c._sock, ssl.SSLSocket), "asked for TLS, connected in cleartext"
    finally:
        c.close()
