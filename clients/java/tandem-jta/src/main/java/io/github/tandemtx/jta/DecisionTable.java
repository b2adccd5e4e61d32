package io.github.tandemtx.jta;

import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.SQLNonTransientConnectionException;
import java.sql.SQLTimeoutException;
import java.sql.SQLTransientConnectionException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Pattern;
import org.postgresql.util.PSQLException;
import org.postgresql.util.ServerErrorMessage;

/**
 * The {@code tandem_decision} table of a commit-point database, as the Go
 * package {@code internal/decision} writes and reads it: the same statements,
 * so that a coordinator's recovery settles a Java transaction's branches
 * exactly like a Go one's.
 *
 * <p>A commit point's transaction inserts {@code (gtrid, 'C')} and commits,
 * in one round trip ({@link #commitStatements}); its local COMMIT is the
 * global decision. Whoever finds a branch named with the commit point and
 * cannot learn the outcome otherwise takes the key ({@link #resolve}):
 * inserting {@code (gtrid, 'A')} succeeds only when no COMMIT was recorded,
 * and then none ever can be (the late commit point's INSERT meets the key
 * and its transaction fails).
 */
final class DecisionTable {
    /** The table's name in every commit-point database. */
    static final String NAME = "tandem_decision";

    /** The reason {@link #refused} gives for a duplicate key. */
    static final String REFUSED_DUPLICATE = "a decision row for the gtrid exists (a recoverer recorded abort)";
    /** The reason {@link #refused} gives for the age or durability check. */
    static final String REFUSED_TOO_OLD = "the transaction began longer ago than the maximum transaction age by the database's clock,"
            + " was ended implicitly, or the database no longer flushes every commit";

    private static final Pattern GTRID = Pattern.compile("[0-9a-f]{32}");

    private DecisionTable() {
    }

    /** The SQL dialects a decision table lives in. */
    enum Dialect { POSTGRES, MARIADB }

    /**
     * The statements that begin a commit point's transaction on MariaDB,
     * noting the database's own clock for the age check: UTC, and the
     * server's real clock (SYSDATE ignores a session's SET timestamp, which
     * freezes UTC_TIMESTAMP). A PostgreSQL transaction's now() is its start.
     */
    static List<String> mariadbBegin() {
        return List.of("START TRANSACTION", "SET @tandem_began = UTC_TIMESTAMP(6), @tandem_began_s = UNIX_TIMESTAMP(SYSDATE(6))");
    }

    /**
     * Records COMMIT for gtrid and commits the commit point's transaction.
     * Send them in ONE round trip, in order: the INSERT fails, and so the
     * COMMIT after it never runs, when a row for the gtrid exists or when
     * the transaction began more than maxAge ago by the database's clock
     * (began_at, NOT NULL, receives NULL). On MariaDB it is refused the same
     * way outside a transaction (something ended it implicitly) and when the
     * server no longer flushes every commit.
     */
    static List<String> commitStatements(Dialect d, String gtrid, Duration maxAge) {
        checkGtrid(gtrid);
        String us = Long.toString(maxAge.toNanos() / 1000);
        if (d == Dialect.MARIADB) {
            return List.of("INSERT INTO " + NAME + " (gtrid, outcome, began_at) VALUES ('" + gtrid + "', 'C', "
                    + "IF(@@in_transaction = 1 AND @@GLOBAL.innodb_flush_log_at_trx_commit = 1 AND (@@GLOBAL.log_bin = 0 OR @@GLOBAL.sync_binlog = 1) AND "
                    + "TIMESTAMPDIFF(MICROSECOND, @tandem_began, UTC_TIMESTAMP(6)) < " + us + " AND "
                    + "(UNIX_TIMESTAMP(SYSDATE(6)) - @tandem_began_s) * 1000000 < " + us + ", @tandem_began, NULL))",
                    "COMMIT");
        }
        return List.of("SET LOCAL synchronous_commit = on",
                "INSERT INTO " + NAME + " (gtrid, outcome, began_at) VALUES ('" + gtrid + "', 'C', "
                        + "CASE WHEN clock_timestamp() - now() < interval '" + us + " microseconds' AND current_setting('fsync') = 'on' THEN now() END)",
                "COMMIT");
    }

    /**
     * Why the database refused to record the decision (its INSERT failed, so
     * its COMMIT did not run: the commit point did NOT commit), or null when
     * e is something else, which leaves the outcome unknown.
     */
    static String refused(SQLException e) {
        for (SQLException x = e; x != null; x = x.getNextException()) {
            if ("23505".equals(x.getSQLState()) || x.getErrorCode() == 1062) {
                return REFUSED_DUPLICATE;
            }
            if (x.getErrorCode() == 1048 && x.getMessage() != null && x.getMessage().contains("'began_at'")) {
                return REFUSED_TOO_OLD;
            }
            if ("23502".equals(x.getSQLState()) && x instanceof PSQLException p) {
                ServerErrorMessage m = p.getServerErrorMessage();
                if (m != null && "began_at".equals(m.getColumn())) {
                    return REFUSED_TOO_OLD;
                }
            }
            if (x.getNextException() == x) {
                break;
            }
        }
        return null;
    }

    /**
     * True when e is the database's answer, false when the connection broke
     * or timed out (the statement may or may not have run).
     */
    static boolean serverAnswered(SQLException e) {
        String st = e.getSQLState();
        return !(e instanceof SQLNonTransientConnectionException || e instanceof SQLTransientConnectionException
                || e instanceof SQLTimeoutException || st == null || st.startsWith("08"));
    }

    /**
     * Says why the database behind c cannot be a commit point, or returns
     * null when it can: the decision table must be usable, and a committed
     * decision must survive a crash of the database (MariaDB:
     * innodb_flush_log_at_trx_commit=1, and sync_binlog=1 when the binary
     * log is on; PostgreSQL: fsync=on — synchronous_commit is forced on for
     * the decision's own transaction). c is outside any transaction.
     */
    static String whyNot(Connection c, Dialect d) throws SQLException {
        try (Statement st = c.createStatement()) {
            if (d == Dialect.MARIADB) {
                try (ResultSet rs = st.executeQuery("SELECT @@GLOBAL.innodb_flush_log_at_trx_commit, @@GLOBAL.sync_binlog, @@GLOBAL.log_bin")) {
                    rs.next();
                    long flush = rs.getLong(1);
                    long syncBinlog = rs.getLong(2);
                    long logBin = rs.getLong(3);
                    if (flush != 1) {
                        return "innodb_flush_log_at_trx_commit is " + flush + ", so a committed decision can be lost in a crash:"
                                + " set innodb_flush_log_at_trx_commit=1, or decide at the coordinator";
                    }
                    if (logBin == 1 && syncBinlog != 1) {
                        return "the binary log is on and sync_binlog is " + syncBinlog + ", so a committed decision can be lost in a crash:"
                                + " set sync_binlog=1, or decide at the coordinator";
                    }
                }
            } else {
                try (ResultSet rs = st.executeQuery("SHOW fsync")) {
                    rs.next();
                    if (!"on".equals(rs.getString(1))) {
                        return "fsync is " + rs.getString(1) + ", so a committed decision can be lost in a crash:"
                                + " set fsync = on in postgresql.conf, or decide at the coordinator";
                    }
                }
            }
            try (ResultSet rs = st.executeQuery("SELECT gtrid FROM " + NAME + " WHERE 1 = 0")) {
                return null;
            } catch (SQLException e) {
                if (!serverAnswered(e)) {
                    throw e;
                }
                return "the decision table " + NAME + " is not usable (" + e.getMessage() + "): start the coordinator with this resource"
                        + " manager (it creates the table) or run tandem init-rm";
            }
        }
    }

    /** The outcome in the decision table: COMMIT or ABORT. */
    enum Outcome { COMMIT, ABORT }

    /** The commit point's transaction still holds the gtrid's key uncommitted: try again later. */
    static final class PendingException extends SQLException {
        private static final long serialVersionUID = 1L;

        PendingException(String gtrid, SQLException cause) {
            super("the commit point's transaction for gtrid " + gtrid + " is still open (its decision row is not committed yet)", "55P03", cause);
        }
    }

    private static final int RESOLVE_ATTEMPTS = 5;

    /**
     * Takes the key for gtrid on c (autocommit, outside any transaction): it
     * inserts (gtrid, 'A') and commits, durably, its lock wait bounded by
     * lockTimeout. ABORT when the insert succeeded (no COMMIT can be recorded
     * any more); the recorded outcome when a row exists; PendingException
     * when the lock wait timed out (the commit point's transaction is open).
     * Concurrent resolves of one gtrid, from any process, agree.
     */
    static Outcome resolve(Connection c, Dialect d, String gtrid, Duration lockTimeout) throws SQLException {
        checkGtrid(gtrid);
        SQLException last = null;
        for (int i = 0; i < RESOLVE_ATTEMPTS; i++) {
            try {
                insertAbort(c, d, gtrid, lockTimeout);
                return Outcome.ABORT;
            } catch (SQLException e) {
                last = e;
                if (isLockTimeout(e)) {
                    throw new PendingException(gtrid, e);
                }
                if (isDeadlock(e)) {
                    continue; // InnoDB: recoverers racing on the key of a commit point that rolled back
                }
                if (!REFUSED_DUPLICATE.equals(refused(e))) {
                    throw e;
                }
            }
            Outcome o = lookup(c, gtrid);
            if (o != null) {
                return o;
            }
            // Deleted between the key and the read (a forgotten 'C' or a swept 'A'): take the key again.
        }
        throw new SQLException("record abort for gtrid " + gtrid + ": no outcome after " + RESOLVE_ATTEMPTS + " attempts; try again", last);
    }

    private static void insertAbort(Connection c, Dialect d, String gtrid, Duration lockTimeout) throws SQLException {
        String ins = "INSERT INTO " + NAME + " (gtrid, outcome, began_at) VALUES ('" + gtrid + "', 'A', ";
        try (Statement st = c.createStatement()) {
            if (d == Dialect.MARIADB) {
                long secs = Math.max((lockTimeout.toMillis() + 999) / 1000, 1);
                // A fresh session of its own: its lock wait setting goes with it.
                st.execute("SET SESSION innodb_lock_wait_timeout = " + secs);
                st.execute(ins + "UTC_TIMESTAMP(6))"); // autocommit: inserted and committed
                return;
            }
            c.setAutoCommit(false);
            try {
                st.execute("SET LOCAL lock_timeout = " + Math.max(lockTimeout.toMillis(), 1));
                st.execute("SET LOCAL synchronous_commit = on");
                st.execute(ins + "clock_timestamp())");
                c.commit();
            } catch (SQLException e) {
                try {
                    c.rollback();
                } catch (SQLException ignored) {
                    // the connection is thrown away by the caller on error
                }
                throw e;
            } finally {
                c.setAutoCommit(true);
            }
        }
    }

    /** The recorded outcome of gtrid, or null when there is no row. Decides nothing. */
    static Outcome lookup(Connection c, String gtrid) throws SQLException {
        checkGtrid(gtrid);
        try (Statement st = c.createStatement(); ResultSet rs = st.executeQuery("SELECT outcome FROM " + NAME + " WHERE gtrid = '" + gtrid + "'")) {
            if (!rs.next()) {
                return null;
            }
            String s = rs.getString(1);
            return switch (s == null ? "" : s) {
                case "C" -> Outcome.COMMIT;
                case "A" -> Outcome.ABORT;
                default -> throw new SQLException("gtrid " + gtrid + " has outcome \"" + s + "\" in " + NAME
                        + ", want C or A: the table was written by something else; inspect it");
            };
        }
    }

    /**
     * Deletes the 'C' rows of gtrids whose every other branch is committed
     * (never an 'A' row), in one autocommit statement on c.
     */
    static int forget(Connection c, List<String> gtrids) throws SQLException {
        if (gtrids.isEmpty()) {
            return 0;
        }
        List<String> quoted = new ArrayList<>(gtrids.size());
        for (String g : gtrids) {
            checkGtrid(g);
            quoted.add("'" + g + "'");
        }
        try (Statement st = c.createStatement()) {
            return st.executeUpdate("DELETE FROM " + NAME + " WHERE outcome = 'C' AND gtrid IN (" + String.join(", ", quoted) + ")");
        }
    }

    private static boolean isLockTimeout(SQLException e) {
        return "55P03".equals(e.getSQLState()) || e.getErrorCode() == 1205;
    }

    private static boolean isDeadlock(SQLException e) {
        return "40P01".equals(e.getSQLState()) || e.getErrorCode() == 1213;
    }

    /** Every gtrid reaches SQL as a literal: 32 lowercase hex digits, nothing else. */
    private static void checkGtrid(String g) {
        if (g == null || !GTRID.matcher(g).matches()) {
            throw new IllegalArgumentException("malformed gtrid \"" + g + "\": want 32 lowercase hex digits");
        }
    }
}
