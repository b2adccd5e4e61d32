"""Tandem for Python: global transactions across PostgreSQL (psycopg 3) and
MySQL/MariaDB (PyMySQL), decided at a commit point in one of the databases
or by a Tandem coordinator, with the Go SDK's commit paths and names.

    import tandem
    client = tandem.Client(
        rms=[tandem.RM("pg", "postgres"), tandem.RM("maria", "mysql")],
        coordinator="127.0.0.1:7070",
    )
    with client.transaction() as tx:
        tx.branch("pg", pg_conn).execute("UPDATE accounts SET balance = balance - 10 WHERE id = 1")
        tx.branch("maria", my_conn).execute("UPDATE accounts SET balance = balance + 10 WHERE id = 2")
    # committed everywhere; tandem.Aborted: nothing committed;
    # tandem.OutcomeUnknown: ask `tandem status <gtrid>`
"""

from .client import AUTO, COORDINATOR, Client, CommitOptions, RM, Status, parse_decide_at
from .errors import (
    Aborted,
    BranchEndedOutside,
    BranchFailed,
    ConfigError,
    NoCoordinator,
    OutcomeUnknown,
    RollbackFailed,
    SessionChanged,
    StatementRefused,
    TandemError,
    TxDone,
    UnknownRM,
)
from .tx import COMMIT_POINT, LOCAL, ONE_PHASE, TWO_PHASE, Branch, Result, Tx

__all__ = [
    "AUTO",
    "COORDINATOR",
    "COMMIT_POINT",
    "LOCAL",
    "ONE_PHASE",
    "TWO_PHASE",
    "Aborted",
    "Branch",
    "BranchEndedOutside",
    "BranchFailed",
    "Client",
    "CommitOptions",
    "ConfigError",
    "NoCoordinator",
    "OutcomeUnknown",
    "RM",
    "Result",
    "RollbackFailed",
    "SessionChanged",
    "StatementRefused",
    "Status",
    "TandemError",
    "Tx",
    "TxDone",
    "UnknownRM",
    "parse_decide_at",
]
