package io.github.tandemtx.jta;

import jakarta.transaction.SystemException;

/**
 * Commit could not learn the outcome: the transaction may have committed or
 * not. It is never half-committed: the coordinator settles every prepared
 * branch (committed if it decided COMMIT, rolled back after its orphan
 * timeout if the Commit never reached it). Ask it with
 * {@code tandem status <gtrid>}; do not redo the work blindly.
 */
public final class OutcomeUnknownException extends SystemException {
    private static final long serialVersionUID = 1L;
    private final String gtrid;

    /** An unknown outcome of a two-phase commit: the coordinator settles the branches. */
    OutcomeUnknownException(String gtrid, String detail, Throwable cause) {
        this(gtrid, detail + "; nothing was rolled back: the coordinator will settle it"
                + " (committed if it decided COMMIT, rolled back after its orphan timeout if it never received the Commit;"
                + " ask it: tandem status " + gtrid + ")", cause, true);
    }

    OutcomeUnknownException(String gtrid, String detail, Throwable cause, boolean full) {
        super("tandem: outcome of transaction " + gtrid + " unknown: " + detail);
        this.gtrid = gtrid;
        if (cause != null) {
            initCause(cause);
        }
    }

    /** The global transaction id to ask the coordinator about. */
    public String gtrid() {
        return gtrid;
    }
}
