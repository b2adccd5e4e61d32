package io.github.tandemtx.jta;

import java.sql.Connection;
import java.sql.SQLException;

/**
 * Ends database sessions whose transaction state is not known to be clean.
 *
 * <p>Such a session may hold a commit point's uncommitted writes (with its
 * decision row), a MariaDB branch still ACTIVE, or a prepared MariaDB branch
 * bound to it. Closing it is not enough when the connection came from a
 * pool (HikariCP, Spring Boot's default): {@code close()} on a pooled
 * connection lends the same session to the pool's next borrower, whose
 * statements then run inside the abandoned transaction (its next COMMIT
 * commits the abandoned writes) or fail on the prepared branch
 * ({@code XAER_RMFAIL … PREPARED state}) for as long as the session lives.
 */
final class Sessions {
    private Sessions() {
    }

    /**
     * Aborts c ({@link Connection#abort}, run on the calling thread): the
     * driver drops the session, so the database rolls back its open
     * transaction and detaches a prepared XA branch for a recoverer. Then
     * touches it once through c, so that a pool wrapping it sees the
     * driver's "connection closed" error (SQLSTATE 08…) and evicts it
     * (HikariCP does on any such error; MariaDB Connector/J's own
     * {@code clearWarnings}, which Hikari calls on close, does not throw
     * after an abort), and closes it, which gives a pool its slot back.
     * Best effort and never throws: the database ends the session when its
     * socket goes.
     */
    static void abort(Connection c) {
        try {
            c.abort(Runnable::run);
        } catch (SQLException | RuntimeException ignored) {
            // the socket may be gone already; close below
        }
        try {
            c.getWarnings(); // throws on an aborted connection: the pool's cue to evict it
        } catch (SQLException | RuntimeException ignored) {
            // expected
        }
        try {
            c.close();
        } catch (SQLException | RuntimeException ignored) {
            // a pool may rethrow the driver's error while it evicts the connection
        }
    }
}
