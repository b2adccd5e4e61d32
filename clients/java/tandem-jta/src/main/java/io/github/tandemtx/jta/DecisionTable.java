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
import java.util.Map;
import java.util.regex.Pattern;
import org.postgresql.util.PSQLException;
import org.postgresql.util.ServerErrorMessage;

/**
 * The {@code tandem_decision} table of a commit-point database and its
 * identity ({@code tandem_decision_id}), as the Go package
 * {@code internal/decision} writes and reads them: the same statements, so
 * that a coordinator's recovery settles a Java transaction's branches
 * exactly like a Go one's.
 *
 * <p>A commit point's transaction inserts {@code (gtrid, 'C', participants)}
 * and commits, in one round trip ({@link #commitStatements}); its local
 * COMMIT is the global decision. The participants value comes from
 * {@code (SELECT … FROM tandem_decision_id WHERE id = '<expected id>')}:
 * on a table with another id it is NULL, the NOT NULL column refuses the
 * INSERT, and the COMMIT never runs ({@link #REFUSED_WRONG_TABLE}).
 * Whoever finds a branch named with the commit point and cannot learn the
 * outcome otherwise takes the key ({@link #resolve}, checked the same way):
 * inserting {@code (gtrid, 'A')} succeeds only when no COMMIT was recorded,
 * and then none ever can be.
 */
final class DecisionTable {
    /** The table's name in every commit-point database. */
    static final String NAME = "tandem_decision";
    /** The table holding the decision table's identity: exactly one row (id, created_at). */
    static final String ID_NAME = "tandem_decision_id";
    /**
     * How old, by the database's clock, a 'C' row must be before anyone
     * deletes it (the Go package's {@code decision.ForgetMinAge}): a key
     * taken after the row is gone would record 'A' for a transaction
     * committed everywhere, so every key-taker stops well before it
     * ({@link #KEY_TAKING}).
     */
    static final Duration FORGET_MIN_AGE = Duration.ofSeconds(30);
    /**
     * The longest this client takes keys after a broken decision before it
     * answers outcome unknown: well within {@link #FORGET_MIN_AGE}.
     */
    static final Duration KEY_TAKING = Duration.ofSeconds(10);
    /** The owner id written for a participant whose table id is not known: no sweeper matches it, so the row is kept. */
    static final String UNKNOWN_ID = "0".repeat(32);

    /** The MariaDB decision table's reference to its id (the Go package's idcheck.go). */
    static final String TABLE_ID_COLUMN = "table_id";
    /** The session turned foreign-key checks off, which the table's reference to its id needs. */
    static final String REFUSED_UNCHECKED = "the session has foreign-key checks turned off (foreign_key_checks = 0),"
            + " which the decision table's id check needs: turn them back on";
    /** The reason {@link #refused} gives for a duplicate key. */
    static final String REFUSED_DUPLICATE = "a decision row for the gtrid exists (a recoverer recorded abort)";
    /** The reason {@link #refused} gives for the age or durability check. */
    static final String REFUSED_TOO_OLD = "the transaction began longer ago than the maximum transaction age by the database's clock,"
            + " was ended implicitly, or the database no longer flushes every commit";
    /** The reason {@link #refused} gives for the table's id check. */
    static final String REFUSED_WRONG_TABLE = "the connection reaches another decision table than the commit point's (its id differs):"
            + " wrong schema, database or server";

    private static final Pattern GTRID = Pattern.compile("[0-9a-f]{32}");

    private DecisionTable() {
    }

    /** The SQL dialects a decision table lives in. */
    enum Dialect { POSTGRES, MARIADB }

    /**
     * The statements that begin a commit point's branch on MariaDB: {@code
     * XA START} with its own name ({@link TandemXid#commitPointSelf}),
     * noting the database's own clock for the age check (UTC, and the
     * server's real clock: SYSDATE ignores a session's SET timestamp, which
     * freezes UTC_TIMESTAMP). Inside an XA branch MariaDB itself refuses
     * every statement that would end the transaction (XAER_RMFAIL), and a
     * deadlock leaves it rollback-only. A PostgreSQL transaction's now() is
     * its start.
     */
    static List<String> mariadbBegin(String xa) {
        return List.of("XA START " + xa, "SET @tandem_began = UTC_TIMESTAMP(6), @tandem_began_s = UNIX_TIMESTAMP(SYSDATE(6))");
    }

    /**
     * Records COMMIT for gtrid and commits the commit point's branch
     * ({@code XA END; XA COMMIT … ONE PHASE} on MariaDB, where xa is its
     * name; COMMIT on PostgreSQL). Send them in ONE round trip, in order: the
     * INSERT fails, and so nothing after it runs, when a row for the gtrid
     * exists, when the transaction began more than maxAge ago by the
     * database's clock (began_at, NOT NULL, receives NULL), or when the
     * database's decision table has another id than table (participants,
     * NOT NULL, receives NULL). On MariaDB it is refused the same way outside
     * a transaction and when the server no longer flushes every commit.
     * participants: "rm=id" of every prepared branch ({@link #participants}).
     */
    static List<String> commitStatements(Dialect d, String gtrid, Duration maxAge, String table, String participants, String xa) {
        return commitStatements(d, gtrid, maxAge, table, false, participants, xa);
    }

    /**
     * As {@link #commitStatements(Dialect, String, Duration, String, String, String)};
     * tableChecked: the MariaDB table references its own id ({@link #readIdChecked}),
     * so the INSERT writes the expected id into its table_id column, whose
     * foreign key to the id table refuses another, instead of reading the id
     * table in a subquery (the Go package's Commit.TableChecked; a session with
     * foreign_key_checks = 0 writes NULL there: {@link #REFUSED_UNCHECKED}).
     */
    static List<String> commitStatements(Dialect d, String gtrid, Duration maxAge, String table, boolean tableChecked, String participants, String xa) {
        checkGtrid(gtrid);
        String us = Long.toString(maxAge.toNanos() / 1000);
        String parts = checkedValue(stringLiteral(d, participants), table);
        String cols = "gtrid, outcome, began_at, participants";
        if (d == Dialect.MARIADB && tableChecked && table != null) {
            cols += ", " + TABLE_ID_COLUMN;
            parts = stringLiteral(d, participants) + ", IF(@@foreign_key_checks = 1, '" + TandemXid.checkOwner(table) + "', NULL)";
        }
        if (d == Dialect.MARIADB) {
            return List.of("INSERT INTO " + NAME + " (" + cols + ") VALUES ('" + gtrid + "', 'C', "
                    + "IF(@@in_transaction = 1 AND @@GLOBAL.innodb_flush_log_at_trx_commit = 1 AND (@@GLOBAL.log_bin = 0 OR @@GLOBAL.sync_binlog = 1) AND "
                    + "TIMESTAMPDIFF(MICROSECOND, @tandem_began, UTC_TIMESTAMP(6)) < " + us + " AND "
                    + "(UNIX_TIMESTAMP(SYSDATE(6)) - @tandem_began_s) * 1000000 < " + us + ", @tandem_began, NULL), " + parts + ")",
                    "XA END " + xa, "XA COMMIT " + xa + " ONE PHASE");
        }
        return List.of("SET LOCAL synchronous_commit = on",
                "INSERT INTO " + NAME + " (gtrid, outcome, began_at, participants) VALUES ('" + gtrid + "', 'C', "
                        + "CASE WHEN clock_timestamp() - now() < interval '" + us + " microseconds' AND current_setting('fsync') = 'on' THEN now() END, "
                        + parts + ")",
                "COMMIT");
    }

    /**
     * The participants column for these prepared branches: "rm=id" each
     * (id: that RM's decision-table id, {@link #UNKNOWN_ID} when not known),
     * sorted, comma-separated (the Go package's FormatParticipants).
     */
    static String participants(Map<String, String> rmToTable) {
        List<String> out = new ArrayList<>();
        for (Map.Entry<String, String> e : rmToTable.entrySet()) {
            out.add(e.getKey() + "=" + (e.getValue() == null ? UNKNOWN_ID : e.getValue()));
        }
        java.util.Collections.sort(out);
        return String.join(",", out);
    }

    /**
     * The SQL for value if the id table holds the id want, else NULL (a
     * scalar subquery with no row): written into a NOT NULL column, it makes
     * the database refuse a statement that reached another table.
     */
    private static String checkedValue(String value, String want) {
        return "(SELECT " + value + " FROM " + ID_NAME + " WHERE id = '" + TandemXid.checkOwner(want) + "')";
    }

    /** s as a literal safe on both databases whatever the session's modes (quotes doubled; MariaDB: backslashes too). */
    private static String stringLiteral(Dialect d, String s) {
        s = s.replace("'", "''");
        if (d == Dialect.MARIADB) {
            s = s.replace("\\", "\\\\");
        }
        return "'" + s + "'";
    }

    /**
     * Why the database refused to record the decision (its INSERT failed, so
     * nothing after it ran: the commit point did NOT commit), or null when
     * e is something else, which leaves the outcome unknown.
     */
    static String refused(SQLException e) {
        for (SQLException x = e; x != null; x = x.getNextException()) {
            if ("23505".equals(x.getSQLState()) || x.getErrorCode() == 1062) {
                return REFUSED_DUPLICATE;
            }
            if (isBadNull(x, "began_at")) {
                return REFUSED_TOO_OLD;
            }
            if (isBadNull(x, "participants") || isIdCheckFailed(x)) {
                return REFUSED_WRONG_TABLE;
            }
            if (isBadNull(x, TABLE_ID_COLUMN)) {
                return REFUSED_UNCHECKED;
            }
            if (x.getNextException() == x) {
                break;
            }
        }
        return null;
    }

    /**
     * Whether x is a MariaDB decision table's reference to its id refusing a
     * row (its foreign key, &lt;table&gt;_table: the id table holds another
     * id), or a table without that column (older than the reference):
     * another table than the one read.
     */
    private static boolean isIdCheckFailed(SQLException x) {
        String m = x.getMessage() == null ? "" : x.getMessage();
        return x.getErrorCode() == 1452 && m.contains("_table` FOREIGN KEY (`" + TABLE_ID_COLUMN + "`) REFERENCES")
                || x.getErrorCode() == 1054 && m.contains("'" + TABLE_ID_COLUMN + "'");
    }

    /** Whether e is NULL refused by the NOT NULL column col of the decision table. */
    private static boolean isBadNull(SQLException x, String col) {
        if (x.getErrorCode() == 1048 && x.getMessage() != null && x.getMessage().contains("'" + col + "'")) {
            return true;
        }
        if ("23502".equals(x.getSQLState()) && x instanceof PSQLException p) {
            ServerErrorMessage m = p.getServerErrorMessage();
            return m != null && col.equals(m.getColumn());
        }
        return false;
    }

    /**
     * True when e is the database's answer, false when the connection broke
     * or timed out, or the server ended the session (sessionEnded): the
     * statement may or may not have run.
     */
    static boolean serverAnswered(SQLException e) {
        String st = e.getSQLState();
        return !(e instanceof SQLNonTransientConnectionException || e instanceof SQLTransientConnectionException
                || e instanceof SQLTimeoutException || st == null || st.startsWith("08") || sessionEnded(e));
    }

    /**
     * Whether e is the server ending the session or interrupting the
     * statement, not refusing it: PostgreSQL's operator intervention (class
     * 57P: a backend told to terminate sends 57P01 once its commit is done),
     * MariaDB/MySQL's "server shutdown in progress" (1053), "query execution
     * was interrupted" (1317), "connection was killed" (1927) and MySQL's
     * "session was killed" (3169). A COMMIT answered so may have run.
     */
    static boolean sessionEnded(SQLException e) {
        String st = e.getSQLState();
        if (st != null && st.startsWith("57P")) {
            return true;
        }
        int code = e.getErrorCode();
        return code == 1053 || code == 1317 || code == 1927 || code == 3169;
    }

    /**
     * What {@link #check} found: why the database cannot be a commit point
     * (null: it can), and its decision table's id (null: not readable).
     */
    record Check(String why, String id, boolean tableChecked) {
        Check(String why, String id) {
            this(why, id, false);
        }
    }

    /** An id and whether its table checks it itself. */
    record IdChecked(String id, boolean checked) {
    }

    /**
     * The id of the decision table c reaches ({@link #readId}) and, on
     * MariaDB, whether that table references the id itself: a foreign key
     * &lt;table&gt;_table from its table_id to the id table's id (the Go
     * package's ReadIDChecked, the same query). A server without that
     * catalog answers false.
     */
    static IdChecked readIdChecked(Connection c, Dialect d) throws SQLException {
        String id = readId(c);
        if (d != Dialect.MARIADB) {
            return new IdChecked(id, false);
        }
        String q = "SELECT i.id, (SELECT count(*) FROM information_schema.KEY_COLUMN_USAGE k WHERE k.CONSTRAINT_SCHEMA = DATABASE() AND k.TABLE_SCHEMA = DATABASE() AND k.TABLE_NAME = '"
                + NAME + "' AND k.CONSTRAINT_NAME = '" + NAME + "_table' AND k.COLUMN_NAME = '" + TABLE_ID_COLUMN
                + "' AND k.REFERENCED_TABLE_SCHEMA = DATABASE() AND k.REFERENCED_TABLE_NAME = '" + ID_NAME + "' AND k.REFERENCED_COLUMN_NAME = 'id') FROM " + ID_NAME + " i";
        try (Statement st = c.createStatement(); ResultSet rs = st.executeQuery(q)) {
            if (!rs.next() || !id.equals(rs.getString(1))) {
                return new IdChecked(id, false);
            }
            return new IdChecked(id, rs.getLong(2) == 1);
        } catch (SQLException e) {
            if (!serverAnswered(e)) {
                throw e;
            }
            return new IdChecked(id, false);
        }
    }

    /**
     * Checks whether the database behind c can be a commit point, and reads
     * its decision table's id: the decision tables must be usable, with an
     * id, and a committed decision must survive a crash of the database
     * (MariaDB: innodb_flush_log_at_trx_commit=1, and sync_binlog=1 when the
     * binary log is on; PostgreSQL: fsync=on — synchronous_commit is forced
     * on for the decision's own transaction). c is outside any transaction.
     */
    static Check check(Connection c, Dialect d) throws SQLException {
        String id = null;
        boolean tableChecked = false;
        String idWhy = null;
        try {
            IdChecked ic = readIdChecked(c, d);
            id = ic.id();
            tableChecked = ic.checked();
        } catch (SQLException e) {
            if (!serverAnswered(e)) {
                throw e;
            }
            idWhy = "the decision tables " + NAME + " and " + ID_NAME + " are not usable or have no id (" + e.getMessage()
                    + "): start the coordinator with this resource manager (it creates them) or run tandem init-rm";
        }
        try (Statement st = c.createStatement()) {
            if (d == Dialect.MARIADB) {
                try (ResultSet rs = st.executeQuery("SELECT @@GLOBAL.innodb_flush_log_at_trx_commit, @@GLOBAL.sync_binlog, @@GLOBAL.log_bin")) {
                    rs.next();
                    long flush = rs.getLong(1);
                    long syncBinlog = rs.getLong(2);
                    long logBin = rs.getLong(3);
                    if (flush != 1) {
                        return new Check("innodb_flush_log_at_trx_commit is " + flush + ", so a committed decision can be lost in a crash:"
                                + " set innodb_flush_log_at_trx_commit=1, or decide at the coordinator", id);
                    }
                    if (logBin == 1 && syncBinlog != 1) {
                        return new Check("the binary log is on and sync_binlog is " + syncBinlog + ", so a committed decision can be lost in a crash:"
                                + " set sync_binlog=1, or decide at the coordinator", id);
                    }
                }
            } else {
                try (ResultSet rs = st.executeQuery("SHOW fsync")) {
                    rs.next();
                    if (!"on".equals(rs.getString(1))) {
                        return new Check("fsync is " + rs.getString(1) + ", so a committed decision can be lost in a crash:"
                                + " set fsync = on in postgresql.conf, or decide at the coordinator", id);
                    }
                }
            }
            if (idWhy != null) {
                return new Check(idWhy, null);
            }
            try (ResultSet rs = st.executeQuery("SELECT gtrid, participants FROM " + NAME + " WHERE 1 = 0")) {
                return new Check(null, id, tableChecked);
            } catch (SQLException e) {
                if (!serverAnswered(e)) {
                    throw e;
                }
                return new Check("the decision table " + NAME + " is not usable (" + e.getMessage() + "): start the coordinator with this resource"
                        + " manager (it creates the table) or run tandem init-rm", id);
            }
        }
    }

    /**
     * The id of the decision table c reaches: the one row of
     * tandem_decision_id. Throws (an answer of the server) when the table is
     * missing, empty, or holds something else than an id.
     */
    static String readId(Connection c) throws SQLException {
        try (Statement st = c.createStatement(); ResultSet rs = st.executeQuery("SELECT id FROM " + ID_NAME)) {
            if (!rs.next()) {
                throw new SQLException(ID_NAME + " has no row: run tandem init-rm (or start a coordinator that has this database in --rm)", "22000");
            }
            String id = rs.getString(1);
            try {
                return TandemXid.checkOwner(id);
            } catch (IllegalArgumentException e) {
                throw new SQLException("the id in " + ID_NAME + " is \"" + id + "\", not an id: the table was written by something else; inspect it", "22000");
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

    /**
     * The gtrid's key was taken (the insert met a row) but the row was gone
     * when read back: a forgotten 'C' (every branch committed) or a swept
     * 'A'. The outcome is NOT known and is never taken for an abort.
     */
    static final class VanishedException extends SQLException {
        private static final long serialVersionUID = 1L;

        VanishedException(String gtrid) {
            super("the decision row of gtrid " + gtrid + " was deleted while it was read (forgotten or swept): the outcome is unknown here,"
                    + " and is NOT abort; a transaction whose 'C' row was forgotten was committed everywhere: look at its databases", "22000");
        }
    }

    /**
     * The decision table reached has another id than the one expected
     * (another schema, default database or server): nothing was decided or
     * read as a decision.
     */
    static final class WrongTableException extends SQLException {
        private static final long serialVersionUID = 1L;

        WrongTableException(String what, String want, String got) {
            super("wrong decision table: " + what + ": expected decision table " + want + ", this database's is " + got
                    + " — the data source reaches another schema, database or server than the commit point's; fix it so that every party"
                    + " reaches the same table", "22000");
        }
    }

    private static final int RESOLVE_ATTEMPTS = 5;

    /** When set (tests), runs in {@link #resolve} between the duplicate key and the read of the row. */
    static volatile Runnable betweenKeyAndRead;

    /**
     * Takes the key for gtrid on c (autocommit, outside any transaction): it
     * inserts (gtrid, 'A') and commits, durably, its lock wait bounded by
     * lockTimeout. ABORT when the insert succeeded (no COMMIT can be recorded
     * any more); the recorded outcome when a row exists;
     * {@link PendingException} when the lock wait timed out (the commit
     * point's transaction is open); {@link VanishedException} when the row
     * was gone by the time it was read (unknown, never retried into an 'A');
     * {@link WrongTableException} when c's decision table has another id
     * than table (checked by the database in the insert itself). Concurrent
     * resolves of one gtrid, from any process, agree.
     */
    static Outcome resolve(Connection c, Dialect d, String gtrid, String table, Duration lockTimeout) throws SQLException {
        checkGtrid(gtrid);
        SQLException last = null;
        for (int i = 0; i < RESOLVE_ATTEMPTS; i++) {
            try {
                insertAbort(c, d, gtrid, table, lockTimeout);
                return Outcome.ABORT;
            } catch (SQLException e) {
                last = e;
                if (isLockTimeout(e)) {
                    throw new PendingException(gtrid, e);
                }
                if (isDeadlock(e)) {
                    continue; // InnoDB: recoverers racing on the key of a commit point that rolled back
                }
                if (REFUSED_WRONG_TABLE.equals(refused(e))) {
                    String got;
                    try {
                        got = readId(c);
                    } catch (SQLException re) {
                        got = "not readable (" + re.getMessage() + ")";
                    }
                    throw new WrongTableException("record abort for gtrid " + gtrid, table, got);
                }
                if (!REFUSED_DUPLICATE.equals(refused(e))) {
                    throw e;
                }
            }
            Runnable hook = betweenKeyAndRead;
            if (hook != null) {
                hook.run();
            }
            Outcome o = lookup(c, gtrid, table);
            if (o != null) {
                return o;
            }
            throw new VanishedException(gtrid);
        }
        throw new SQLException("record abort for gtrid " + gtrid + ": no outcome after " + RESOLVE_ATTEMPTS + " attempts (deadlocks); try again", last);
    }

    private static void insertAbort(Connection c, Dialect d, String gtrid, String table, Duration lockTimeout) throws SQLException {
        String ins = "INSERT INTO " + NAME + " (gtrid, outcome, participants, began_at) VALUES ('" + gtrid + "', 'A', " + checkedValue("''", table) + ", ";
        try (Statement st = c.createStatement()) {
            if (d == Dialect.MARIADB) {
                long secs = Math.max((lockTimeout.toMillis() + 999) / 1000, 1);
                // The session's own value is restored after: c may be a pool's.
                st.execute("SET @tandem_lwt = @@SESSION.innodb_lock_wait_timeout, SESSION innodb_lock_wait_timeout = " + secs);
                try {
                    st.execute(ins + "UTC_TIMESTAMP(6))"); // autocommit: inserted and committed
                } finally {
                    st.execute("SET SESSION innodb_lock_wait_timeout = @tandem_lwt");
                }
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

    /**
     * The recorded outcome of gtrid, or null when there is no row. Decides
     * nothing. The id of the decision table is read in the same statement
     * as the row: a table with another id than table is
     * {@link WrongTableException} (an absent row there says nothing).
     */
    static Outcome lookup(Connection c, String gtrid, String table) throws SQLException {
        checkGtrid(gtrid);
        try (Statement st = c.createStatement(); ResultSet rs = st.executeQuery("SELECT i.id, d.outcome FROM " + ID_NAME + " i LEFT JOIN " + NAME
                + " d ON d.gtrid = '" + gtrid + "'")) {
            if (!rs.next()) {
                throw new SQLException(ID_NAME + " has no row: run tandem init-rm (or start a coordinator that has this database in --rm)", "22000");
            }
            String id = rs.getString(1);
            if (!table.equals(id)) {
                throw new WrongTableException("read the decision of gtrid " + gtrid, table, id);
            }
            String s = rs.getString(2);
            if (s == null) {
                return null;
            }
            return switch (s) {
                case "C" -> Outcome.COMMIT;
                case "A" -> Outcome.ABORT;
                default -> throw new SQLException("gtrid " + gtrid + " has outcome \"" + s + "\" in " + NAME
                        + ", want C or A: the table was written by something else; inspect it");
            };
        }
    }

    /**
     * Deletes the 'C' rows of gtrids whose every other branch is committed
     * (never an 'A' row) that are at least {@link #FORGET_MIN_AGE} old by
     * the database's clock (younger ones stay: the coordinator's sweep
     * forgets them), in autocommit statements on c naming at most
     * {@link #FORGET_STATEMENT_MAX} gtrids each.
     */
    static int forget(Connection c, Dialect d, List<String> gtrids) throws SQLException {
        int n = 0;
        for (int i = 0; i < gtrids.size(); i += FORGET_STATEMENT_MAX) {
            n += forgetBatch(c, d, gtrids.subList(i, Math.min(gtrids.size(), i + FORGET_STATEMENT_MAX)));
        }
        return n;
    }

    /**
     * The most gtrids one forget statement names: well under MariaDB's
     * in_predicate_conversion_threshold (1000 by default), at which an IN
     * list becomes a subquery and the DELETE scans and locks the whole
     * table, waiting for any open commit point's uncommitted row.
     */
    static final int FORGET_STATEMENT_MAX = 256;

    private static int forgetBatch(Connection c, Dialect d, List<String> gtrids) throws SQLException {
        if (gtrids.isEmpty()) {
            return 0;
        }
        List<String> quoted = new ArrayList<>(gtrids.size());
        for (String g : gtrids) {
            checkGtrid(g);
            quoted.add("'" + g + "'");
        }
        String us = Long.toString(FORGET_MIN_AGE.toNanos() / 1000);
        String older = d == Dialect.MARIADB
                ? "decided_at < UTC_TIMESTAMP(6) - INTERVAL " + us + " MICROSECOND AND "
                        + "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', decided_at) < UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 - " + us
                : "decided_at < clock_timestamp() - interval '" + us + " microseconds'";
        try (Statement st = c.createStatement()) {
            // On MariaDB the rows are read by the primary key: left to
            // itself, InnoDB reads "gtrid IN (most of a small table)" as a
            // full scan, which locks every row it reads, so it waited for
            // any open commit point's uncommitted 'C' while its own locks
            // blocked every commit point's INSERT. Only the multi-table
            // DELETE syntax takes an index hint.
            String from = d == Dialect.MARIADB ? "DELETE x FROM " + NAME + " x FORCE INDEX (PRIMARY)" : "DELETE FROM " + NAME;
            return st.executeUpdate(from + " WHERE outcome = 'C' AND gtrid IN (" + String.join(",", quoted) + ") AND " + older);
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
