"""The exceptions of the Tandem client. Every one is a TandemError.

- Aborted: the global transaction rolled back everywhere; nothing of it is
  committed. Safe to retry the whole unit of work.
- OutcomeUnknown: it may have committed or not, and the client could not
  find out in time. It is never half-committed: ask the coordinator
  (Client.status(gtrid), or `tandem status GTRID`) later; do not redo the
  work blindly. Its gtrid names the transaction.
"""

from __future__ import annotations

from typing import Optional


class TandemError(Exception):
    """Base class of the client's exceptions."""


class Aborted(TandemError):
    """The transaction rolled back everywhere (the Go SDK's ErrAborted).

    stage says where, in one word: "statement", "setup", "prepare",
    "commit", "decided-abort", "refused", "no-coordinator", "closed" (the
    client was closed before the decision was sent), or "other"."""

    def __init__(self, gtrid: str, reason: str, cause: Optional[BaseException] = None, stage: str = "other"):
        self.gtrid = gtrid
        self.reason = reason
        self.cause = cause
        self.stage = stage
        msg = "tandem: transaction %s aborted: %s" % (gtrid, reason)
        if cause is not None:
            msg += ": " + _text(cause)
        super().__init__(msg)


class OutcomeUnknown(TandemError):
    """The outcome could not be learnt (the Go SDK's ErrOutcomeUnknown).
    Nothing was rolled back after the ambiguous answer: the transaction is
    committed everywhere or nowhere, and the coordinator (or the commit
    point's decision table) knows which."""

    def __init__(self, gtrid: str, cause: object):
        self.gtrid = gtrid
        self.cause = cause
        super().__init__(
            "tandem: outcome of transaction %s unknown (ask the coordinator: tandem status %s): %s" % (gtrid, gtrid, _text(cause))
        )


class BranchEndedOutside(TandemError):
    """A branch's transaction was ended outside the client before commit:
    the application (or its library) committed it, rolled it back or closed
    its connection -- psycopg's `with conn:` commits and closes at the end
    of its block, psycopg_pool's `with pool.connection():` commits and gives
    the connection back -- or another transaction runs on its session now.
    Not Aborted, not OutcomeUnknown: what that branch wrote may have been
    committed on its own. Everything else was rolled back (nothing was
    prepared, decided or committed on the session's other transaction);
    the global transaction may therefore be SPLIT. A programming error:
    keep a branch's connection open and its transaction untouched until
    tx.commit() or tx.rollback() returns. rms names the branches."""

    def __init__(self, gtrid: str, rms, reason: str):
        self.gtrid = gtrid
        self.rms = list(rms)
        self.reason = reason
        super().__init__(
            "tandem: transaction %s: the transaction of its branch on %s ended outside the client before commit (%s); "
            "the other branches were rolled back, and what that branch wrote may have been committed on its own: "
            "the transaction may be split" % (gtrid, ", ".join(repr(r) for r in self.rms), reason)
        )


class RollbackFailed(TandemError):
    """Tx.rollback() could not roll every branch back (the Go SDK's
    Rollback error). Nothing of the transaction commits: a branch that was
    still active is rolled back by its database when its session ends (the
    client ended it); a prepared one was handed to the coordinator's Abort,
    or, when that failed too or there is no coordinator, is rolled back by
    the coordinator's orphan scan. cause is the first error."""

    def __init__(self, gtrid: str, cause: BaseException):
        self.gtrid = gtrid
        self.cause = cause
        super().__init__("tandem: transaction %s: rollback: %s" % (gtrid, _text(cause)))


class TxDone(TandemError):
    """A statement, commit or branch on a transaction that is finishing or finished."""


class BranchFailed(TandemError):
    """A statement of the branch failed earlier: the transaction can only roll back."""


class SessionChanged(BranchFailed):
    """The branch's connection is no longer on the session (or inside the
    transaction) where the branch began -- a MySQL/MariaDB driver that
    reconnected, say: the branch's work is gone with the old session and
    a statement sent now would commit on its own. Raised before anything is
    sent; the transaction can only roll back."""


class StatementRefused(BranchFailed):
    """A statement refused before it was sent: it would end the branch's
    transaction (transaction control on PostgreSQL, an implicit commit on a
    MariaDB/MySQL commit point). The transaction can only roll back."""


class UnknownRM(TandemError):
    """The resource manager's name is not among the client's RMs."""


class NoCoordinator(TandemError):
    """Two or more branches wrote, none can be the commit point, and the
    client names no coordinator to decide them."""


class ConfigError(TandemError):
    """The client's configuration is wrong (raised by Client())."""


def _text(e: object) -> str:
    if isinstance(e, BaseException):
        s = str(e).strip()
        return s if s else type(e).__name__
    return str(e)
