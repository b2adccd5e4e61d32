package io.github.tandemtx.jta;

import java.util.Arrays;
import java.util.concurrent.atomic.LongAdder;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * A transaction manager's transaction outcomes since it was created, as the
 * Go SDK's {@code client.Metrics} counts them: commits by path, aborts by
 * stage, unknown outcomes, rollbacks, and the RPCs sent to the coordinators.
 * Each {@code commit()} adds to exactly one of commits, aborts and unknown
 * outcomes (a {@code commit()} refused outright, as on a transaction already
 * being completed, to none); each {@code rollback()} that rolls a
 * transaction back adds one rollback.
 *
 * <p>Counting is a few {@link LongAdder} increments per transaction; the
 * counters are read without locks, at any time (a metrics scrape). Commit
 * latencies are not kept here: a {@link Listener} is told of each
 * {@code commit()}'s outcome and duration (the Micrometer binder
 * {@code io.github.tandemtx.jta.metrics.TandemMetrics} records them into
 * histograms). Commits decided at a commit point never reach a coordinator:
 * these counters are where they are counted.
 */
public final class ClientMetrics {
    /** How a transaction committed (the Go SDK's {@code client.Path}). */
    public enum Path {
        /** No branch wrote: each committed locally. No coordinator call. */
        LOCAL("local"),
        /** One branch wrote and committed in one phase; the others committed locally. No coordinator call. */
        ONE_PHASE("one-phase"),
        /** Two or more wrote: all but one prepared, then that one's local commit decided. No coordinator call. */
        COMMIT_POINT("commit-point"),
        /** Two or more wrote and were prepared, then the coordinator decided. */
        TWO_PHASE("two-phase");

        private final String label;

        Path(String label) {
            this.label = label;
        }

        /** The value of the metrics' {@code path} label, as the Go SDK prints it. */
        public String label() {
            return label;
        }
    }

    /** Where a {@code commit()} that rolled back ended (the Go SDK's {@code AbortedError.Stage()}). */
    public enum AbortStage {
        /**
         * A statement of a branch failed before the commit (a MariaDB error
         * dooms the transaction; a PostgreSQL transaction with a failed
         * statement cannot prepare), or a resource was delisted with TMFAIL.
         */
        STATEMENT("statement"),
        /**
         * The commit could not start: classifying the branches, naming them
         * after the coordinator's cluster, an RM the coordinator does not
         * know for a commit point. Nothing was prepared.
         */
        SETUP("setup"),
        /** A branch's PREPARE failed. */
        PREPARE("prepare"),
        /** A local or one-phase commit failed, or the commit point refused the decision. */
        COMMIT("commit"),
        /** The decision was ABORT: the coordinator's, or a recoverer's found by taking the commit point's key. */
        DECIDED_ABORT("decided-abort"),
        /** The coordinator refused the Commit, or its log stayed full: nothing was decided. */
        REFUSED("refused"),
        /** The decision needed a coordinator and none served as the primary within the decision timeout. */
        NO_COORDINATOR("no-coordinator"),
        /**
         * Anything else: {@code setRollbackOnly()}, a timeout, a
         * {@code Synchronization}'s failing {@code beforeCompletion}, an
         * unexpected exception.
         */
        OTHER("other");

        private final String label;

        AbortStage(String label) {
            this.label = label;
        }

        /** The value of the metrics' {@code stage} label, as the Go SDK prints it. */
        public String label() {
            return label;
        }
    }

    /**
     * Told of every {@code commit()}'s outcome on the committing thread, after
     * the outcome is settled and the synchronizations ran, just before
     * {@code commit()} returns or throws. Must be quick and must not throw (an
     * exception is logged and ignored: it never changes the outcome).
     * Durations are from {@code commit()}'s call to that point, in
     * nanoseconds, synchronizations included.
     */
    public interface Listener {
        /** The transaction committed by path. */
        void committed(Path path, long nanos);

        /** The transaction rolled back at stage ({@code RollbackException}). */
        void aborted(AbortStage stage, long nanos);

        /** The outcome could not be learnt ({@code OutcomeUnknownException}). */
        void outcomeUnknown(long nanos);
    }

    private static final Logger LOG = Logger.getLogger("io.github.tandemtx.jta");
    private static final Listener[] NONE = new Listener[0];

    private final LongAdder[] committed = adders(Path.values().length);
    private final LongAdder[] aborted = adders(AbortStage.values().length);
    private final LongAdder unknown = new LongAdder();
    private final LongAdder rollbacks = new LongAdder();
    /** Incremented by the coordinator channels' interceptor at every call started. */
    final LongAdder coordinatorCalls = new LongAdder();
    private volatile Listener[] listeners = NONE;

    ClientMetrics() {
    }

    private static LongAdder[] adders(int n) {
        LongAdder[] a = new LongAdder[n];
        for (int i = 0; i < n; i++) {
            a[i] = new LongAdder();
        }
        return a;
    }

    /** Transactions committed by path. */
    public long committed(Path path) {
        return committed[path.ordinal()].sum();
    }

    /** {@code commit()} calls that rolled back ({@code RollbackException}), by stage. */
    public long aborted(AbortStage stage) {
        return aborted[stage.ordinal()].sum();
    }

    /** {@code commit()} calls whose outcome could not be learnt ({@code OutcomeUnknownException}). */
    public long outcomeUnknown() {
        return unknown.sum();
    }

    /** {@code rollback()} calls that rolled a transaction back. */
    public long rollbacks() {
        return rollbacks.sum();
    }

    /** RPCs sent to the coordinators: Commit, Abort, Status, and the Health calls of {@code verify()} and of following the primary, retries included. */
    public long coordinatorCalls() {
        return coordinatorCalls.sum();
    }

    /**
     * Adds a listener, told of every {@code commit()} from now on; the
     * returned handle removes it. Listeners are few (one per metrics
     * registry); adding one copies the list.
     */
    public synchronized AutoCloseable addListener(Listener l) {
        Listener[] next = Arrays.copyOf(listeners, listeners.length + 1);
        next[next.length - 1] = l;
        listeners = next;
        return () -> removeListener(l);
    }

    private synchronized void removeListener(Listener l) {
        Listener[] cur = listeners;
        for (int i = 0; i < cur.length; i++) {
            if (cur[i] == l) {
                Listener[] next = new Listener[cur.length - 1];
                System.arraycopy(cur, 0, next, 0, i);
                System.arraycopy(cur, i + 1, next, i, cur.length - i - 1);
                listeners = next;
                return;
            }
        }
    }

    void committed(Path path, long nanos) {
        committed[path.ordinal()].increment();
        for (Listener l : listeners) {
            try {
                l.committed(path, nanos);
            } catch (RuntimeException e) {
                LOG.log(Level.WARNING, "tandem: a metrics listener failed (ignored)", e);
            }
        }
    }

    void aborted(AbortStage stage, long nanos) {
        aborted[stage.ordinal()].increment();
        for (Listener l : listeners) {
            try {
                l.aborted(stage, nanos);
            } catch (RuntimeException e) {
                LOG.log(Level.WARNING, "tandem: a metrics listener failed (ignored)", e);
            }
        }
    }

    void outcomeUnknown(long nanos) {
        unknown.increment();
        for (Listener l : listeners) {
            try {
                l.outcomeUnknown(nanos);
            } catch (RuntimeException e) {
                LOG.log(Level.WARNING, "tandem: a metrics listener failed (ignored)", e);
            }
        }
    }

    void rolledBack() {
        rollbacks.increment();
    }
}
