"""A child process that runs one global transaction (a row into TABLE on
both databases) and SIGKILLs itself at the step named on its command line
(tandem._failpoint), as the Go e2e tests' clients die at their failpoints.

    python child_tx.py STEP DECIDE_AT TABLE ID COORDINATOR

It prints the gtrid on its first line before the transaction's first
statement. The databases come from TANDEM_PG_DSN and TANDEM_MYSQL_DSN."""

import os
import signal
import sys

import psycopg
import pymysql

import tandem
from tandem import _failpoint
from tandem.dsn import mysql_kwargs


def main():
    step, decide_at, table, id_, coord = sys.argv[1:6]
    pg_dsn, my_dsn = os.environ["TANDEM_PG_DSN"], os.environ["TANDEM_MYSQL_DSN"]

    def kill(name):
        if name == step:
            os.kill(os.getpid(), signal.SIGKILL)

    _failpoint.hook = kill
    cli = tandem.Client(
        rms=[
            tandem.RM("pg", "postgres", connect=lambda: psycopg.connect(pg_dsn, autocommit=True)),
            tandem.RM("maria", "mysql", connect=lambda: pymysql.connect(**mysql_kwargs(my_dsn))),
        ],
        coordinator=coord,
        defaults=tandem.CommitOptions(decide_at=decide_at),
    )
    pg = psycopg.connect(pg_dsn, autocommit=True)
    my = pymysql.connect(**mysql_kwargs(my_dsn))
    tx = cli.begin()
    print(tx.gtrid, flush=True)
    tx.branch("pg", pg).execute("INSERT INTO " + table + " (id, v) VALUES (%s, 'pg')", (int(id_),))
    tx.branch("maria", my).execute("INSERT INTO " + table + " (id, v) VALUES (%s, 'maria')", (int(id_),))
    res = tx.commit()
    print("committed", res.path, flush=True)


if __name__ == "__main__":
    main()
