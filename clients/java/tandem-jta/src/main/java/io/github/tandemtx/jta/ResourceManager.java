package io.github.tandemtx.jta;

import java.sql.Connection;
import java.sql.SQLException;
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
    /** Past this many pending, the oldest are dropped from memory (the coordinator's sweep deletes them). */
    static final int FORGET_KEEP = 4096;

    final String name;
    final DecisionTable.Dialect dialect;
    private final Connections connections;

    private long checkedAt; // System.nanoTime of the last check; 0: never
    private String why; // null: qualifies
    private boolean passing; // the answer may pass by itself (a failed connection)

    private final ArrayDeque<String> forget = new ArrayDeque<>();
    private boolean forgetting;

    ResourceManager(String name, DecisionTable.Dialect dialect, Connections connections) {
        this.name = name;
        this.dialect = dialect;
        this.connections = connections;
    }

    /** Whether the RM was checked and can be a commit point (no check made here). */
    synchronized boolean knownCommitPoint() {
        return checkedAt != 0 && why == null;
    }

    /**
     * Whether the RM can be a commit point, checking through c (a connection
     * of the RM outside any transaction) when it has not been checked yet, or
     * when a negative answer is older than {@link #RECHECK} ({@link #RETRY}
     * for a failed check).
     */
    boolean qualifies(Connection c) {
        synchronized (this) {
            long age = System.nanoTime() - checkedAt;
            long keep = (passing ? RETRY : RECHECK).toNanos();
            if (checkedAt != 0 && (why == null || age < keep)) {
                return why == null;
            }
        }
        String w;
        boolean p = false;
        try {
            w = DecisionTable.whyNot(c, dialect);
        } catch (SQLException e) {
            w = "the check failed: " + e.getMessage();
            p = !DecisionTable.serverAnswered(e);
        }
        synchronized (this) {
            checkedAt = System.nanoTime();
            why = w;
            passing = p;
        }
        if (w != null) {
            LOG.warning("tandem: resource manager \"" + name + "\" cannot be a commit point; its branches are prepared and"
                    + " the coordinator decides (checked again later): " + w);
        }
        return w == null;
    }

    /**
     * Learns the outcome of gtrid from this commit point's decision table by
     * taking the key ({@link DecisionTable#resolve}) on connections of its
     * own, retrying while the commit point's transaction is still open, for
     * at most timeout. An interrupt of the calling thread does not cut the
     * retries short (giving up would leave the outcome unknown); the
     * thread's interrupt status is kept.
     */
    DecisionTable.Outcome resolve(String gtrid, Duration timeout) throws SQLException {
        long deadline = System.nanoTime() + timeout.toNanos();
        boolean interrupted = false;
        try {
            while (true) {
                try (Connection c = connections.open()) {
                    if (!c.getAutoCommit()) {
                        c.setAutoCommit(true);
                    }
                    return DecisionTable.resolve(c, dialect, gtrid, Duration.ofSeconds(2));
                } catch (SQLException e) {
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
     * committed). A full batch is deleted in the background on a connection
     * of its own, in its own autocommit statement: off the commit path, and
     * holding no lock inside an application's transaction. A failed delete
     * gives the batch back; the coordinator's sweep is the backstop.
     */
    void forgetLater(String gtrid, Executor executor) {
        boolean start;
        synchronized (this) {
            if (forget.size() >= FORGET_KEEP) {
                forget.pollFirst();
            }
            forget.addLast(gtrid);
            start = !forgetting && forget.size() >= FORGET_BATCH;
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

    private void forgetRows() {
        try (Connection c = connections.open()) {
            if (!c.getAutoCommit()) {
                c.setAutoCommit(true);
            }
            while (true) {
                List<String> batch = takeForget();
                if (batch == null) {
                    return;
                }
                try {
                    DecisionTable.forget(c, batch);
                } catch (SQLException e) {
                    giveBack(batch);
                    throw e;
                }
            }
        } catch (SQLException | RuntimeException e) {
            LOG.log(Level.WARNING, "tandem: deleting decided rows from " + DecisionTable.NAME + " on \"" + name
                    + "\" failed; will try again with the next batch: " + e.getMessage(), e);
        } finally {
            synchronized (this) {
                forgetting = false;
            }
        }
    }

    private synchronized List<String> takeForget() {
        if (forget.size() < FORGET_BATCH) {
            return null;
        }
        List<String> out = new ArrayList<>();
        while (out.size() < FORGET_MAX && !forget.isEmpty()) {
            out.add(forget.pollFirst());
        }
        return out;
    }

    private synchronized void giveBack(List<String> gs) {
        for (int i = gs.size() - 1; i >= 0; i--) {
            forget.addFirst(gs.get(i));
        }
    }
}
