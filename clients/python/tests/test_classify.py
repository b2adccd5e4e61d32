"""The statements refused before they are sent: the MariaDB corpus shared
with the Go and Java clients (api/testdata/implicit-commit.txt), and the
PostgreSQL cases of the Go SDK's TestPgTransactionControl."""

import os

import pytest

from tandem import _classify

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "..")


def corpus():
    out = []
    with open(os.path.join(ROOT, "api", "testdata", "implicit-commit.txt"), encoding="utf-8") as f:
        for i, line in enumerate(f.read().split("\n")):
            if not line or line.startswith("#"):
                continue
            verb, _, stmt = line.partition(" ")
            assert verb in ("ends", "keeps"), "implicit-commit.txt:%d: %r" % (i + 1, line)
            stmt = stmt.replace("\\\\", "\0").replace("\\n", "\n").replace("\\t", "\t").replace("\0", "\\")
            out.append((stmt, verb == "ends"))
    return out


CORPUS = corpus()


def test_corpus_is_read():
    assert len(CORPUS) >= 40


@pytest.mark.parametrize("stmt,ends", CORPUS)
def test_implicit_commit_corpus(stmt, ends):
    assert (_classify.ends_transaction(stmt) != "") == ends


def test_the_statement_found_is_returned_as_written():
    assert _classify.ends_transaction("INSERT INTO t VALUES (1); /*! DROP TABLE x */; SELECT 1") == " /*! DROP TABLE x */"


def test_refusal_quotes_the_statement_clipped():
    msg = _classify.implicit_refusal("maria", "CREATE TABLE t (" + "é" * 80 + ")")
    assert '"CREATE TABLE t (' + "é" * 64 + '…"' in msg and "implicit commit" in msg


PG_CASES = [
    ("COMMIT", True),
    ("  end ;", True),
    ("end transaction", True),
    ("ABORT", True),
    ("INSERT INTO t VALUES (1); COMMIT", True),
    ("SELECT 1; commit work", True),
    ("ROLLBACK", True),
    ("ROLLBACK; INSERT INTO t VALUES (1)", True),
    ("ROLLBACK PREPARED 'x'", True),
    ("COMMIT PREPARED 'x'", True),
    ("COMMIT AND CHAIN", True),
    ("/* x */ BEGIN", True),
    ("/* a /* nested */ still a comment */ BEGIN", True),
    ("START TRANSACTION", True),
    ("PREPARE TRANSACTION 'x'", True),
    ("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE", True),
    ("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY", True),
    ("SELECT 'it''s'; COMMIT", True),
    ("SELECT E'a\\'; COMMIT; SELECT '", True),
    ("SELECT $$ a $$; END", True),
    ("SELECT 1 -- x\n; COMMIT", True),
    ("ROLLBACK TO SAVEPOINT a", False),
    ("rollback work to a", False),
    ("ROLLBACK TRANSACTION TO SAVEPOINT a", False),
    ("SAVEPOINT a", False),
    ("RELEASE SAVEPOINT a", False),
    ("PREPARE s AS SELECT 1", False),
    ("SET LOCAL lock_timeout = 1", False),
    ("SELECT 'COMMIT; END'", False),
    ('SELECT "commit"', False),
    ("SELECT $$ ; COMMIT $$", False),
    ("SELECT $tag$ ; COMMIT $x$ ; $tag$", False),
    ("DO $body$ BEGIN PERFORM 1; END $body$", False),
    ("SELECT 1 /* ; COMMIT */", False),
    ("SELECT 1 -- ; COMMIT", False),
    ("SELECT $1::int", False),
    ("UPDATE t SET v = 1 WHERE id = $1", False),
    ("INSERT INTO t (begin_at) VALUES (now())", False),
]


@pytest.mark.parametrize("stmt,ends", PG_CASES)
def test_pg_transaction_control(stmt, ends):
    assert (_classify.pg_transaction_control(stmt) != "") == ends


def test_mysql_dsn_forms():
    from tandem.dsn import mysql_kwargs

    kw = mysql_kwargs("tandem:s3:cr@t@tcp(127.0.0.1:53306)/tandem_test?multiStatements=true&interpolateParams=true&readTimeout=5s")
    assert (kw["user"], kw["password"], kw["host"], kw["port"], kw["database"], kw["read_timeout"]) == ("tandem", "s3:cr@t", "127.0.0.1", 53306, "tandem_test", 5.0)
    kw = mysql_kwargs("mysql://u:p%40ss@db.example:3307/app")
    assert (kw["user"], kw["password"], kw["host"], kw["port"], kw["database"]) == ("u", "p@ss", "db.example", 3307, "app")


def test_fast_splitters_match_the_reference_port():
    """tandem._classify jumps between special characters; tests/ref_classify
    is the character-by-character port of the Go code. On the corpora and on
    random texts made of the characters that matter, both split alike."""
    import random

    import ref_classify as ref

    alphabet = list("'\"`#;/*-!M$\\\n\t ;") + ["COMMIT", "BEGIN", "x", "1", "é", "$a$", "/*!", "*/", "--", "$$", "''", "rollback to a"]
    rng = random.Random(20261126)
    texts = [s for s, _ in CORPUS] + [s for s, _ in PG_CASES]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 24))) for _ in range(5000)]
    for t in texts:
        for bs in (True, False):
            assert _classify._split_mysql(t, bs) == ref._split_mysql(t, bs), (t, bs)
            assert _classify._split_postgres(t, bs) == ref._split_postgres(t, bs), (t, bs)
        assert _classify._words(t, "_$@.") == ref._words(t, "_$@.")
        assert _classify.ends_transaction(t) == ref.ends_transaction(t)
        assert _classify.pg_transaction_control(t) == ref.pg_transaction_control(t)
