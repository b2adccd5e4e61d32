package io.github.tandemtx.jta;

import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Executor;
import java.util.concurrent.RejectedExecutionException;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * What a transaction manager knows of one resource manager beyond its
 * branches: its SQL dialect, whether it can be a commit point (checked on
 * first use and cached), a way to open connections of its own (to take a
 * decision key or forget decided rows, outside any application
 * transaction), and the decision rows waiting to be deleted. One per
 * {@link TandemDataSource}.
 */
final class ResourceManager {
    private static final Logger LOG = Logger.getLogger("io.github.tandemtx.jta");

    /** Opens a new connection to the resource manager's database, in autocommit mode. */
    interface Connections {
        Connection open() throws SQLException;
    }

    /** How long a negative answer of the commit-point check is kept. */
    static final Duration RECHECK = Duration.ofMinutes(1);
    /** How long a failed check (the database not reachable) is kept. */
    static final Duration RETRY = Duration.ofSeconds(5);
    /** Decided rows are deleted once this many are pending. */
    static final int FORGET_BATCH = 32;
    /** At most this many rows per DELETE. */
    static final int FORGET_MAX = 256;
    /** Rows are forgotten this long after DecisionTable.FORGET_MIN_AGE by this process's clock, so that the database's (which decides) agrees. */
    static final Duration FORGET_MARGIN = Duration.ofSeconds(2);
    /**
     * At most this many rows pending: the queue holds the last 35 s of
     * commits (a row waits FORGET_MIN_AGE plus the margin), so the bound is
     * far above that at any rate a process reaches; past it the newest are not
     * queued (the coordinator's sweep deletes those rows). Dropping the oldest
     * instead, as with the old bound of 4096, dropped every row before it was
     * old enough once a process passed about 117 commits a second.
     */
    static final int FORGET_KEEP = 1 << 19;

    final String name;
    final DecisionTable.Dialect dialect;
    /** What the TandemDataSource is over ({@link #describe}), for messages; null when not known. */
    final String source;
    private final Connections connections;

    private long checkedAt; // System.nanoTime of the last check; 0: never
    private String why; // null: qualifies
    private boolean passing; // the answer may pass by itself (a failed connection)
    private String tableId; // the decision table's id, from the last check that read it; null: not known
    private boolean tableChecked; // that table checks the id itself (MariaDB, DecisionTable.readIdChecked)
    private long tableCheckedAt; // System.nanoTime when tableChecked was last read (a completed reading)
    private long rereadAt; // System.nanoTime when a reading again last began (one at a time); 0: never
    private boolean refused; // a table refused the checked form: never again in this process

    /**
     * How long a reading of {@link #tableChecked} stands before {@link
     * #qualifies} reads it again (a table can lose its foreign key: a copy
     * made with CREATE TABLE … LIKE, an online schema change). One query a
     * minute per data source, on a connection before its transaction.
     */
    static final Duration SELF_CHECK_TTL = Duration.ofMinutes(1);

    /** A decided gtrid waiting to be forgotten, and when (System.nanoTime) it was queued. */
    private record Decided(String gtrid, long at) {
    }

    private final ArrayDeque<Decided> forget = new ArrayDeque<>();
    private boolean forgetting;

    ResourceManager(String name, DecisionTable.Dialect dialect, Connections connections) {
        this(name, dialect, null, connections);
    }

    ResourceManager(String name, DecisionTable.Dialect dialect, String source, Connections connections) {
        this.name = name;
        this.dialect = dialect;
        this.source = source;
        this.connections = connections;
    }

    /**
     * A data source for a message: its class and identity (a HikariCP pool
     * also its pool name). Never its URL or user, which a toString may
     * carry.
     */
    static String describe(Object source) {
        if (source == null) {
            return "null";
        }
        String s = source.getClass().getName() + "@" + Integer.toHexString(System.identityHashCode(source));
        if (source.getClass().getName().equals("com.zaxxer.hikari.HikariDataSource")) {
            s += " " + source; // "HikariDataSource (pool name)"
        }
        return s;
    }

    /** Whether the RM was checked and can be a commit point (no check made here). */
    synchronized boolean knownCommitPoint() {
        return checkedAt != 0 && why == null;
    }

    /**
     * The id of this RM's decision table (tandem_decision_id), as the last
     * check read it (cached per data source), or null when not known: the
     * owner of the branches it decides as a commit point, and what a
     * decision row names it by as a participant.
     */
    synchronized String tableId() {
        return tableId;
    }

    /**
     * Whether the decision table checks its id itself, as the last check read
     * it; a reading older than twice {@link #SELF_CHECK_TTL} (nothing read it
     * again) no longer counts.
     */
    synchronized boolean tableChecked() {
        return tableChecked && System.nanoTime() - tableCheckedAt < 2 * SELF_CHECK_TTL.toNanos();
    }

    /** Ages the reading of tableChecked (tests: as if read, and last read again, that long ago). */
    synchronized void ageTableCheckedForTest(Duration d) {
        tableCheckedAt -= d.toNanos();
        if (rereadAt != 0) {
            rereadAt -= d.toNanos();
        }
    }

    /**
     * Makes later decisions check the id through the id table again: the
     * table refused the checked form as another table, and the subquery
     * form says whether it is.
     */
    synchronized void forgetTableChecked() {
        tableChecked = false;
        refused = true; // a reading again does not undo it: the catalog still lists the key while sessions run with foreign_key_checks = 0
    }

    /**
     * Whether the RM can be a commit point, checking through c (a connection
     * of the RM outside any transaction) when it has not been checked yet, or
     * when a negative answer is older than {@link #RECHECK} ({@link #RETRY}
     * for a failed check). The check also reads the decision table's id
     * ({@link #tableId}).
     */
    boolean qualifies(Connection c) {
        boolean reread = false;
        synchronized (this) {
            long age = System.nanoTime() - checkedAt;
            long keep = (passing ? RETRY : RECHECK).toNanos();
            if (checkedAt != 0 && (why == null || age < keep)) {
                long now = System.nanoTime();
                if (why != null || dialect != DecisionTable.Dialect.MARIADB || tableId == null || refused
                        || now - tableCheckedAt < SELF_CHECK_TTL.toNanos() || (rereadAt != 0 && now - rereadAt < SELF_CHECK_TTL.toNanos())) {
                    return why == null;
                }
                rereadAt = now; // this caller reads it again; the others go on
                reread = true;
            }
        }
        if (reread) {
            rereadTableChecked(c);
            return true;
        }
        String w;
        String id = null;
        boolean checked = false;
        boolean p = false;
        try {
            DecisionTable.Check k = DecisionTable.check(c, dialect);
            w = k.why();
            id = k.id();
            checked = k.tableChecked();
        } catch (SQLException e) {
            w = "the check failed: " + e.getMessage();
            p = !DecisionTable.serverAnswered(e);
        }
        synchronized (this) {
            checkedAt = System.nanoTime();
            why = w;
            passing = p;
            if (id != null) {
                tableId = id;
                tableChecked = checked;
                tableCheckedAt = System.nanoTime();
            }
        }
        if (w != null) {
            LOG.warning("tandem: resource manager \"" + name + "\" cannot be a commit point; its branches are prepared and"
                    + " the coordinator decides (checked again later): " + w);
        }
        return w == null;
    }

    /**
     * Reads again, through c, whether the decision table checks its own id.
     * The known id is never replaced: a table answering another one is
     * another table, which the subquery form refuses. A failed reading counts
     * as no reference until the next: the subquery form is checked by the
     * database whatever the table has.
     */
    private void rereadTableChecked(Connection c) {
        boolean checked = false;
        String known;
        synchronized (this) {
            known = tableId;
        }
        try {
            // Only on a connection in autocommit mode outside a transaction
            // (a table-less SELECT first, which opens none): the reading would
            // otherwise open one, and the branch's XA START would fail.
            boolean idle;
            try (Statement st = c.createStatement(); ResultSet rs = st.executeQuery("SELECT @@autocommit, @@in_transaction")) {
                idle = rs.next() && rs.getLong(1) == 1 && rs.getLong(2) == 0;
            }
            if (idle) {
                DecisionTable.IdChecked ic = DecisionTable.readIdChecked(c, dialect);
                checked = ic.checked() && ic.id().equals(known);
            }
        } catch (SQLException e) {
            checked = false;
        }
        synchronized (this) {
            tableChecked = checked && !refused;
            tableCheckedAt = System.nanoTime();
        }
    }

    /** Replaces the cached table id (tests: a data source believed to reach another table). */
    synchronized void tableIdForTest(String id) {
        tableId = id;
    }

    /**
     * Whether c reaches the decision table this RM's id names (read on c
     * itself): a "no such branch" answer is believed only from such a
     * connection; one that reaches another database says nothing of the
     * branch.
     */
    boolean reachesOwnTable(Connection c) {
        String want = tableId();
        if (want == null) {
            return false;
        }
        try {
            return want.equals(DecisionTable.readId(c));
        } catch (SQLException e) {
            return false;
        }
    }

    /**
     * Learns the outcome of gtrid from this commit point's decision table by
     * taking the key ({@link DecisionTable#resolve}, checked against this
     * RM's table id) on connections of its own, retrying while the commit
     * point's transaction is still open, for at most timeout and never
     * longer than {@link DecisionTable#KEY_TAKING} (a key taken after the
     * row was forgotten would record 'A' for a transaction committed
     * everywhere). An interrupt of the calling thread does not cut the
     * retries short (giving up would leave the outcome unknown); the
     * thread's interrupt status is kept.
     */
    DecisionTable.Outcome resolve(String gtrid, Duration timeout) throws SQLException {
        String table = tableId();
        if (table == null) {
            throw new SQLException("rm \"" + name + "\": its decision table's id is not known, so no key can be taken", "22000");
        }
        Duration bound = timeout.compareTo(DecisionTable.KEY_TAKING) < 0 ? timeout : DecisionTable.KEY_TAKING;
        long deadline = System.nanoTime() + bound.toNanos();
        boolean interrupted = false;
        try {
            while (true) {
                Connection c = null;
                try {
                    c = connections.open();
                    if (!c.getAutoCommit()) {
                        c.setAutoCommit(true);
                    }
                    DecisionTable.Outcome o = DecisionTable.resolve(c, dialect, gtrid, table, Duration.ofSeconds(2));
                    try {
                        c.close();
                    } catch (SQLException ignored) {
                        // the outcome is known
                    }
                    return o;
                } catch (SQLException e) {
                    if (c != null) {
                        Sessions.abort(c); // its session state (the lock wait) is not known: never back to a pool
                    }
                    long left = deadline - System.nanoTime();
                    if (left <= 0 || !(e instanceof DecisionTable.PendingException) && DecisionTable.serverAnswered(e)) {
                        throw e; // out of time, or the database's answer: trying again would get the same
                    }
                    try {
                        Thread.sleep(Math.min(100, left / 1_000_000 + 1));
                    } catch (InterruptedException ie) {
                        interrupted = true; // cleared: the next try and sleep run normally
                    }
                }
            }
        } finally {
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }

    /**
     * Queues gtrid's decision row for deletion (all its branches are
     * committed). Once FORGET_BATCH rows queued more than
     * {@link DecisionTable#FORGET_MIN_AGE} ago are waiting, they are deleted
     * in the background on a connection of its own, in its own autocommit
     * statement that deletes only rows that old by the database's clock: off
     * the commit path, and holding no lock inside an application's
     * transaction. A failed delete gives the batch back; the coordinator's
     * sweep is the backstop.
     */
    void forgetLater(String gtrid, Executor executor) {
        boolean start;
        synchronized (this) {
            if (forget.size() < FORGET_KEEP) {
                forget.addLast(new Decided(gtrid, System.nanoTime()));
            }
            start = !forgetting && ripe() >= FORGET_BATCH;
            forgetting |= start;
        }
        if (start) {
            try {
                executor.execute(this::forgetRows);
            } catch (RejectedExecutionException e) {
                synchronized (this) {
                    forgetting = false; // the manager is closing: the coordinator's sweep deletes them
                }
            }
        }
    }

    /** Rows queued for deletion (tests). */
    synchronized int pendingForget() {
        return forget.size();
    }

    /** How many queued rows (at the head: the oldest) are past the horizon, up to FORGET_MAX. */
    private int ripe() {
        long horizon = System.nanoTime() - DecisionTable.FORGET_MIN_AGE.toNanos() - FORGET_MARGIN.toNanos();
        int n = 0;
        for (Decided d : forget) {
            if (d.at() - horizon > 0 || n >= FORGET_MAX) {
                break;
            }
            n++;
        }
        return n;
    }

    private void forgetRows() {
        Connection c = null;
        try {
            c = connections.open();
            if (!c.getAutoCommit()) {
                c.setAutoCommit(true);
            }
            while (true) {
                List<Decided> batch = takeForget();
                if (batch == null) {
                    c.close();
                    return;
                }
                List<String> gs = new ArrayList<>(batch.size());
                for (Decided d : batch) {
                    gs.add(d.gtrid());
                }
                try {
                    DecisionTable.forget(c, dialect, gs);
                } catch (SQLException e) {
                    giveBack(batch);
                    throw e;
                }
            }
        } catch (SQLException | RuntimeException e) {
            if (c != null) {
                Sessions.abort(c);
            }
            LOG.log(Level.WARNING, "tandem: deleting decided rows from " + DecisionTable.NAME + " on \"" + name
                    + "\" failed; will try again with the next batch: " + e.getMessage(), e);
        } finally {
            synchronized (this) {
                forgetting = false;
            }
        }
    }

    private synchronized List<Decided> takeForget() {
        int n = ripe();
        if (n < FORGET_BATCH) {
            return null;
        }
        List<Decided> out = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            out.add(forget.pollFirst());
        }
        return out;
    }

    private synchronized void giveBack(List<Decided> gs) {
        for (int i = gs.size() - 1; i >= 0; i--) {
            forget.addFirst(gs.get(i));
        }
    }
}
