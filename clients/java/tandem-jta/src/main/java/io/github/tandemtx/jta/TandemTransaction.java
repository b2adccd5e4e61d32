package io.github.tandemtx.jta;

import io.opentelemetry.api.trace.Span;
import io.opentelemetry.context.Scope;
import jakarta.transaction.RollbackException;
import jakarta.transaction.Status;
import jakarta.transaction.Synchronization;
import jakarta.transaction.SystemException;
import jakarta.transaction.Transaction;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.atomic.AtomicReference;
import javax.transaction.xa.XAException;
import javax.transaction.xa.XAResource;
import tandem.v1.Tandem.AbortRequest;
import tandem.v1.Tandem.Branch;
import tandem.v1.Tandem.CommitRequest;
import tandem.v1.Tandem.Outcome;

/**
 * One global transaction, with at most one branch per resource manager. Its
 * commit follows the Go SDK's path:
 *
 * <ul>
 *   <li>no branch wrote: each commits locally;
 *   <li>one wrote: it commits in one phase, the others locally; no coordinator call;
 *   <li>two or more: all prepare in parallel (a PostgreSQL branch that wrote
 *       nothing commits locally instead; an {@code XA_RDONLY} vote leaves
 *       phase 2), then one Commit call to the coordinator decides. MariaDB
 *       branches are committed on their own sessions as soon as the coordinator
 *       says the decision is durable; the coordinator commits the others.
 * </ul>
 *
 * <p>Errors: {@link RollbackException} when nothing committed (safe to
 * retry the unit of work); {@link OutcomeUnknownException} (a
 * {@link SystemException} naming the gtrid) when the outcome could not be
 * learnt. {@code HeuristicMixedException} is never thrown: Tandem never
 * splits a transaction.
 */
public final class TandemTransaction implements Transaction {
    private enum Phase { ACTIVE, PREPARED, IN_DOUBT }

    private static final class Enlisted {
        final TandemResource res;
        TandemXid xid; // named with the commit point before a PostgreSQL branch prepares
        boolean suspended;
        /** The coordinator's Commit named it client_settles: this transaction commits or rolls it back itself after the decision. */
        boolean clientSettles;
        Phase phase = Phase.ACTIVE;

        Enlisted(TandemResource res, TandemXid xid) {
            this.res = res;
            this.xid = xid;
        }
    }

    private final TandemTransactionManager tm;
    private final String gtrid;
    /** The transaction's span (README, "Traces"); {@link TandemTracing.TxSpans#NONE} when nothing records. */
    private final TandemTracing.TxSpans trace;
    /** For the transaction's span: the commit point chosen at commit, the decision's coordinator calls, phase 2 left to others. */
    private String tracedCommitPoint;
    private int coordinatorCalls;
    private volatile boolean phase2Pending;
    private final List<Enlisted> branches = new ArrayList<>();
    private final List<Synchronization> syncs = new ArrayList<>();
    private final List<Synchronization> interposed = new ArrayList<>();
    private final Map<Object, Object> resources = new ConcurrentHashMap<>();
    private int status = Status.STATUS_ACTIVE;
    /** The commit point chosen at a MariaDB branch's begin (an XA branch of its own, never prepared), or null. */
    private Enlisted cp;
    /** A MariaDB branch began as an XA branch named with no commit point: the coordinator decides. */
    private boolean unnamedXA;

    /**
     * Called at each step of the commit path with its name
     * ("before-commit-point", "after-commit-point"; on the coordinator's
     * path "before-client-settles": COMMIT durable, no branch settled yet):
     * tests kill the JVM there.
     */
    static volatile java.util.function.Consumer<String> failpoint = step -> { };
    private String rollbackReason;
    /** Where the rollback-only mark came from: a branch's failed statement, or something else. */
    private ClientMetrics.AbortStage rollbackStage = ClientMetrics.AbortStage.OTHER;
    /** How the transaction committed; set with STATUS_COMMITTED by the committing thread. */
    private ClientMetrics.Path committedPath;
    /** Where the commit rolled back; set by {@link #rollback(ClientMetrics.AbortStage, String, Throwable)}. */
    private ClientMetrics.AbortStage abortStage;
    private ScheduledFuture<?> timer;
    /** commit() or rollback() has begun: the other is refused. */
    private boolean finishing;

    TandemTransaction(TandemTransactionManager tm, String gtrid, TandemTracing.TxSpans trace) {
        this.tm = tm;
        this.gtrid = gtrid;
        this.trace = trace;
    }

    /** The global transaction id: 32 lowercase hex digits, the name to give `tandem status`. */
    public String gtrid() {
        return gtrid;
    }

    synchronized void setTimer(ScheduledFuture<?> t) {
        timer = t;
    }

    synchronized void timedOut(int seconds) {
        if (status == Status.STATUS_ACTIVE) {
            status = Status.STATUS_MARKED_ROLLBACK;
            rollbackReason = "the transaction timed out after " + seconds + "s";
            rollbackStage = ClientMetrics.AbortStage.OTHER;
        }
    }

    @Override
    public synchronized boolean enlistResource(XAResource xa) throws RollbackException, IllegalStateException, SystemException {
        if (status == Status.STATUS_MARKED_ROLLBACK) {
            throw new RollbackException("tandem: transaction " + gtrid + " is marked rollback-only (" + rollbackReason + "): cannot enlist");
        }
        if (status != Status.STATUS_ACTIVE) {
            throw new IllegalStateException("tandem: transaction " + gtrid + " is " + statusName(status) + ": cannot enlist");
        }
        if (!(xa instanceof SqlBranch r)) {
            throw new SystemException("tandem: transaction " + gtrid + ": cannot enlist " + xa.getClass().getName()
                    + ": Tandem needs to know each branch's resource manager name; get connections from a TandemDataSource");
        }
        for (Enlisted e : branches) {
            if (e.res == r) {
                e.suspended = false;
                return true;
            }
            if (e.res.rmName().equals(r.rmName())) {
                throw new SystemException("tandem: transaction " + gtrid + " already has a branch on resource manager \"" + r.rmName()
                        + "\": Tandem allows one branch per resource manager per transaction (a TandemDataSource hands out the same connection)");
            }
        }
        if (!tm.knowsRm(r.rmName())) {
            throw new SystemException("tandem: transaction " + gtrid + ": resource manager \"" + r.rmName() + "\" was not registered with this transaction manager");
        }
        TandemXid x = TandemXid.of(gtrid, r.rmName());
        boolean point = false;
        boolean mariadb = r.info.dialect == DecisionTable.Dialect.MARIADB;
        if (tm.config().decideAt() != TandemConfig.DecideAt.COORDINATOR) {
            // Before the begin: the connection is outside any transaction, so the
            // commit-point check (first use of the RM, then cached; it reads the
            // decision table's id too) may run on it.
            boolean ok = r.info.qualifies(r.connection());
            if (mariadb) {
                if (cp != null) {
                    x = x.withCommitPoint(cp.res.rmName(), ((SqlBranch) cp.res).info.tableId());
                } else if (!unnamedXA && ok) {
                    point = true;
                    x = TandemXid.commitPointSelf(gtrid, r.rmName(), r.info.tableId());
                } else {
                    unnamedXA = true;
                }
            }
        }
        if (mariadb && !point && x.commitPoint() == null) {
            // Named at XA START, decided by the coordinator: owned by its cluster. When
            // that is not known now, the legacy name: a one-phase commit needs no
            // owner, and the coordinator path refuses the branch (commitTwoPhase).
            x = x.ownedBy(tm.coordinatorOwner().id());
        }
        r.point = point;
        r.doom = reason -> markRollback(ClientMetrics.AbortStage.STATEMENT, reason);
        try {
            r.start(x, XAResource.TMNOFLAGS);
        } catch (XAException e) {
            r.point = false;
            throw systemException("begin the branch on \"" + r.rmName() + "\" failed", e);
        }
        Enlisted e = new Enlisted(r, x);
        branches.add(e);
        if (point) {
            cp = e;
        }
        return true;
    }

    /** The resource manager deciding this transaction at its commit point, or null (so far) when the coordinator decides. */
    public synchronized String commitPoint() {
        return cp == null ? null : cp.res.rmName();
    }

    @Override
    public synchronized boolean delistResource(XAResource xa, int flag) throws IllegalStateException, SystemException {
        for (Enlisted e : branches) {
            if (e.res == xa) {
                switch (flag) {
                    case XAResource.TMSUSPEND -> e.suspended = true;
                    case XAResource.TMFAIL -> markRollback(ClientMetrics.AbortStage.STATEMENT, "a resource on \"" + e.res.rmName() + "\" was delisted with TMFAIL");
                    default -> {
                        try {
                            e.res.end(e.xid, flag);
                        } catch (XAException ex) {
                            markRollback(ClientMetrics.AbortStage.STATEMENT, "ending the branch on \"" + e.res.rmName() + "\" failed: " + ex.getMessage());
                        }
                    }
                }
                return true;
            }
        }
        throw new IllegalStateException("tandem: transaction " + gtrid + ": delist of a resource that is not enlisted");
    }

    /** The enlisted resource on resource manager rm, or null. */
    synchronized TandemResource resourceFor(String rm) {
        for (Enlisted e : branches) {
            if (e.res.rmName().equals(rm)) {
                return e.res;
            }
        }
        return null;
    }

    @Override
    public synchronized void registerSynchronization(Synchronization s) throws RollbackException, IllegalStateException {
        checkRegister();
        syncs.add(s);
    }

    synchronized void registerInterposed(Synchronization s) {
        if (status != Status.STATUS_ACTIVE && status != Status.STATUS_MARKED_ROLLBACK) {
            throw new IllegalStateException("tandem: transaction " + gtrid + " is " + statusName(status) + ": cannot register a synchronization");
        }
        interposed.add(s);
    }

    private void checkRegister() throws RollbackException {
        if (status == Status.STATUS_MARKED_ROLLBACK) {
            throw new RollbackException("tandem: transaction " + gtrid + " is marked rollback-only (" + rollbackReason + ")");
        }
        if (status != Status.STATUS_ACTIVE) {
            throw new IllegalStateException("tandem: transaction " + gtrid + " is " + statusName(status) + ": cannot register a synchronization");
        }
    }

    Map<Object, Object> resources() {
        return resources;
    }

    @Override
    public synchronized int getStatus() {
        return status;
    }

    @Override
    public synchronized void setRollbackOnly() throws IllegalStateException {
        if (status != Status.STATUS_ACTIVE && status != Status.STATUS_MARKED_ROLLBACK && status != Status.STATUS_PREPARING) {
            throw new IllegalStateException("tandem: transaction " + gtrid + " is " + statusName(status) + ": cannot mark it rollback-only");
        }
        markRollback(ClientMetrics.AbortStage.OTHER, "setRollbackOnly was called");
    }

    private synchronized void markRollback(ClientMetrics.AbortStage stage, String reason) {
        if (status == Status.STATUS_ACTIVE || status == Status.STATUS_PREPARING) {
            status = Status.STATUS_MARKED_ROLLBACK;
            rollbackReason = reason;
            rollbackStage = stage;
        }
    }

    synchronized boolean rollbackOnly() {
        return status == Status.STATUS_MARKED_ROLLBACK;
    }

    private synchronized void setStatus(int s) {
        status = s;
    }

    /**
     * Starts finishing: only once, from ACTIVE or MARKED_ROLLBACK. A commit
     * or rollback from another thread while one runs (its synchronizations
     * run with the status still ACTIVE) is refused: two of them would drive
     * the same branches at once, one rolling back what the other commits.
     */
    private synchronized void startFinishing(String what) {
        if (finishing) {
            throw new IllegalStateException("tandem: transaction " + gtrid + " is being completed by another commit or rollback: cannot " + what);
        }
        if (status != Status.STATUS_ACTIVE && status != Status.STATUS_MARKED_ROLLBACK) {
            throw new IllegalStateException("tandem: transaction " + gtrid + " is " + statusName(status) + ": cannot " + what);
        }
        finishing = true;
        if (timer != null) {
            timer.cancel(false);
        }
    }

    @Override
    @SuppressWarnings("try") // the scope is never referenced: it makes the span current
    public void commit() throws RollbackException, SecurityException, IllegalStateException, SystemException {
        startFinishing("commit");
        long start = System.nanoTime();
        Throwable err = null;
        // The transaction's span is current meanwhile: the coordinator's calls carry it.
        try (Scope ignored = trace.enter()) {
            finishCommit();
        } catch (Throwable e) {
            err = e;
            throw e;
        } finally {
            count(System.nanoTime() - start);
            String outcome = switch (getStatus()) {
                case Status.STATUS_COMMITTED -> "committed";
                case Status.STATUS_ROLLEDBACK -> "aborted";
                default -> "unknown";
            };
            trace.end(outcome, committedPath, tracedCommitPoint, coordinatorCalls, phase2Pending, err);
        }
    }

    /**
     * Counts the finished commit in the manager's metrics by the status it
     * left: committed (by path), rolled back (by stage), or unknown.
     */
    private void count(long nanos) {
        ClientMetrics m = tm.metrics();
        switch (getStatus()) {
            case Status.STATUS_COMMITTED -> m.committed(committedPath != null ? committedPath : ClientMetrics.Path.TWO_PHASE, nanos);
            case Status.STATUS_ROLLEDBACK -> m.aborted(abortStage != null ? abortStage : ClientMetrics.AbortStage.OTHER, nanos);
            default -> m.outcomeUnknown(nanos); // STATUS_UNKNOWN; no other status is left by a commit
        }
    }

    private void finishCommit() throws RollbackException, SystemException {
        try {
            beforeCompletion();
            if (rollbackOnly()) {
                abort(snapshot());
                throw rollback(rollbackStage(), "it was marked rollback-only: " + rollbackReason, null);
            }
            setStatus(Status.STATUS_PREPARING);
            doCommit();
        } catch (RollbackException | RuntimeException | OutcomeUnknownException e) {
            synchronized (this) {
                if (status != Status.STATUS_COMMITTED && status != Status.STATUS_UNKNOWN && status != Status.STATUS_ROLLEDBACK) {
                    status = Status.STATUS_ROLLEDBACK; // every path that rolls back sets it first; this is for a RuntimeException
                }
            }
            throw e;
        } finally {
            afterCompletion();
        }
    }

    @Override
    @SuppressWarnings("try") // the scope is never referenced: it makes the span current
    public void rollback() throws IllegalStateException, SystemException {
        startFinishing("roll back");
        tm.metrics().rolledBack();
        setStatus(Status.STATUS_ROLLING_BACK);
        Throwable err = null;
        try (Scope ignored = trace.enter()) {
            rollbackAll(snapshot());
        } catch (Throwable e) {
            err = e;
            throw e;
        } finally {
            setStatus(Status.STATUS_ROLLEDBACK);
            afterCompletion();
            trace.end("rolled-back", null, null, 0, false, err);
        }
    }

    private synchronized ClientMetrics.AbortStage rollbackStage() {
        return rollbackStage;
    }

    /** Whether a branch's earlier statement failed, so that its transaction can only roll back (PostgreSQL; MariaDB dooms at once). */
    private static boolean anyStatementFailed(List<Enlisted> all) {
        for (Enlisted e : all) {
            if (e.res instanceof SqlBranch b && b.statementFailedEarlier()) {
                return true;
            }
        }
        return false;
    }

    private synchronized List<Enlisted> snapshot() {
        return new ArrayList<>(branches);
    }

    private void beforeCompletion() {
        // Synchronizations may register more (interposed ones run last).
        for (int i = 0; ; i++) {
            Synchronization s;
            synchronized (this) {
                if (rollbackOnly()) {
                    return;
                }
                if (i < syncs.size()) {
                    s = syncs.get(i);
                } else if (i - syncs.size() < interposed.size()) {
                    s = interposed.get(i - syncs.size());
                } else {
                    return;
                }
            }
            try {
                s.beforeCompletion();
            } catch (RuntimeException e) {
                markRollback(ClientMetrics.AbortStage.OTHER, "a Synchronization's beforeCompletion failed: " + e);
                return;
            }
        }
    }

    private void afterCompletion() {
        List<Synchronization> all;
        int st;
        synchronized (this) {
            all = new ArrayList<>(interposed);
            all.addAll(syncs);
            st = status;
        }
        for (Enlisted e : snapshot()) {
            e.res.completed();
        }
        tm.finished(this);
        for (Synchronization s : all) {
            try {
                s.afterCompletion(st);
            } catch (RuntimeException ignored) {
                // JTA: afterCompletion cannot change the outcome
            }
        }
    }

    private void doCommit() throws RollbackException, SystemException {
        List<Enlisted> all = snapshot();
        boolean[] readOnly = new boolean[all.size()];
        List<Callable<Void>> checks = new ArrayList<>();
        for (int i = 0; i < all.size(); i++) {
            int k = i;
            checks.add(() -> {
                readOnly[k] = all.get(k).res.readOnly();
                return null;
            });
        }
        Throwable err = tm.parallel(checks);
        if (err != null) {
            // A PostgreSQL branch whose statement failed is found here (its
            // transaction can only roll back): the Go SDK's "statement" stage.
            ClientMetrics.AbortStage stage = anyStatementFailed(all) ? ClientMetrics.AbortStage.STATEMENT : ClientMetrics.AbortStage.SETUP;
            abort(all);
            throw rollback(stage, "could not classify branches", err);
        }
        List<Enlisted> writers = new ArrayList<>();
        List<Enlisted> readers = new ArrayList<>();
        for (int i = 0; i < all.size(); i++) {
            (readOnly[i] ? readers : writers).add(all.get(i));
        }
        List<Callable<Void>> commitReaders = new ArrayList<>();
        for (Enlisted r : readers) {
            commitReaders.add(() -> {
                r.res.commit(r.xid, true);
                return null;
            });
        }
        if (writers.size() <= 1) {
            err = tm.parallel(commitReaders);
            if (err != null) {
                abort(all);
                throw rollback(ClientMetrics.AbortStage.COMMIT, "local commit of a read-only branch failed", err);
            }
            if (writers.isEmpty()) {
                committedPath = ClientMetrics.Path.LOCAL;
                setStatus(Status.STATUS_COMMITTED);
                return;
            }
            commitOnePhase(writers.get(0));
            return;
        }
        commitTwoPhase(all, writers, commitReaders);
    }

    private void commitOnePhase(Enlisted w) throws RollbackException, SystemException {
        setStatus(Status.STATUS_COMMITTING);
        committedPath = ClientMetrics.Path.ONE_PHASE; // if it commits
        Span dspan = trace.decision("one-phase", w.res.rmName());
        try {
            w.res.commit(w.xid, true);
            TandemTracing.end(dspan, (Throwable) null);
            setStatus(Status.STATUS_COMMITTED);
        } catch (RuntimeException e) {
            TandemTracing.end(dspan, e);
            throw e;
        } catch (XAException e) {
            TandemTracing.end(dspan, e);
            if (isRollback(e)) {
                abort(List.of(w));
                throw rollback(ClientMetrics.AbortStage.COMMIT, "one-phase commit on \"" + w.res.rmName() + "\" failed", e);
            }
            setStatus(Status.STATUS_UNKNOWN);
            w.res.releaseSession();
            throw new OutcomeUnknownException(gtrid, "the one-phase commit on \"" + w.res.rmName()
                    + "\" got no answer: it committed if the database received the COMMIT (no other branch wrote,"
                    + " so the transaction is whole either way; the coordinator was not involved)", e, false);
        }
    }

    @SuppressWarnings("try") // the decision's scope is never referenced: it makes the span current
    private void commitTwoPhase(List<Enlisted> all, List<Enlisted> writers, List<Callable<Void>> commitReaders)
            throws RollbackException, SystemException {
        Enlisted point = commitPoint(writers);
        if (point != null) {
            commitAtRM(all, writers, point, commitReaders);
            return;
        }
        committedPath = ClientMetrics.Path.TWO_PHASE; // if it commits (every writer voting read-only included)
        // Every branch named with the coordinator's cluster (PostgreSQL: at PREPARE;
        // MariaDB: at XA START already), or nothing is prepared: a branch without
        // an owner is one the coordinator never settles as its own.
        CoordinatorClient.OwnerAnswer owner = null;
        for (Enlisted w : writers) {
            if (w.xid.owner() != null || w.xid.commitPoint() != null) {
                continue;
            }
            if (owner == null) {
                owner = tm.coordinatorOwner();
            }
            if (w.res.sessionBound()) {
                abort(all);
                throw rollback(ClientMetrics.AbortStage.SETUP, "the MariaDB branch on \"" + w.res.rmName() + "\" began before the coordinator's cluster was known, so its name"
                        + " carries no owner and the coordinator would not settle it as its own; nothing was prepared"
                        + (owner.why() != null ? ": " + owner.why() : "; try again"), null);
            }
            if (owner.id() == null) {
                abort(all);
                throw rollback(ClientMetrics.AbortStage.SETUP, owner.why() + "; nothing was prepared", null);
            }
            w.xid = ((SqlBranch) w.res).nameOwner(owner.id());
        }
        // Phase 1: every writer prepares in parallel; read-only branches commit meanwhile.
        int[] votes = prepareAll(all, writers, commitReaders);
        List<Enlisted> prepared = new ArrayList<>();
        for (int i = 0; i < writers.size(); i++) {
            if (votes[i] != XAResource.XA_RDONLY) {
                prepared.add(writers.get(i));
            }
        }
        if (prepared.isEmpty()) {
            setStatus(Status.STATUS_COMMITTED);
            return;
        }
        setStatus(Status.STATUS_PREPARED);
        // The decision: one call.
        // A MariaDB branch is bound to its session: only this transaction can
        // commit it. With a coordinator that allows it, every other branch
        // too, in parallel, as raw 2PC would: the reply then waits for no
        // phase 2 of the coordinator's, which only checks, after a head
        // start, that each is gone (README, "How a commit works").
        CommitRequest.Builder req = CommitRequest.newBuilder().setGtrid(gtrid);
        boolean settleAll = tm.coordinator().settlesAny();
        boolean bound = false;
        for (Enlisted w : prepared) {
            w.clientSettles = settleAll || w.res.sessionBound();
            req.addBranches(Branch.newBuilder().setRm(w.res.rmName()).setClientSettles(w.clientSettles));
            bound |= w.clientSettles;
        }
        AtomicReference<CompletableFuture<Boolean>> settled = new AtomicReference<>();
        // The early decision is read on this thread, inside the blocking call
        // (grpc runs a blocking call's callbacks on its caller): the branches
        // commit here while the coordinator finishes its reply, which waits
        // in the call until they are done. No hand-off to another thread.
        Runnable onCommitted = bound
                ? () -> {
                    failpoint.accept("before-client-settles"); // COMMIT durable; nothing settled yet
                    CompletableFuture<Boolean> own;
                    try {
                        own = CompletableFuture.completedFuture(settleOwn(prepared, true));
                    } catch (RuntimeException e) {
                        own = CompletableFuture.failedFuture(e);
                    }
                    settled.set(own);
                }
                : null;
        setStatus(Status.STATUS_COMMITTING);
        // The decision's span is current during the call: the coordinator's spans are its children.
        Span dspan = trace.decision("coordinator", null);
        CoordinatorClient.CommitResult r;
        try (Scope ignored = dspan != null ? dspan.makeCurrent() : Scope.noop()) {
            r = tm.coordinator().commit(req.build(), tm.config().decisionTimeout(), onCommitted, ownerOf(prepared));
            if (settleAll && refusedClientSettles(r)) {
                // A coordinator older than the Health that allowed it refused
                // the request as a whole, before writing anything: ask again
                // the old way, and keep asking so until a Health says otherwise.
                tm.coordinator().settlesAnyRefused();
                req.clearBranches();
                for (Enlisted w : prepared) {
                    w.clientSettles = w.res.sessionBound();
                    req.addBranches(Branch.newBuilder().setRm(w.res.rmName()).setClientSettles(w.clientSettles));
                }
                int first = r.calls;
                r = tm.coordinator().commit(req.build(), tm.config().decisionTimeout(), bound(prepared) ? onCommitted : null, ownerOf(prepared));
                r.calls += first;
            }
        } catch (RuntimeException e) {
            TandemTracing.end(dspan, e);
            throw e;
        }
        coordinatorCalls = r.calls;
        if (dspan != null) {
            dspan.setAttribute(TandemTracing.COORDINATOR_CALLS, (long) r.calls);
            if (r.response != null) {
                dspan.setAttribute(TandemTracing.OUTCOME, r.response.getOutcome().name().toLowerCase(java.util.Locale.ROOT));
            }
        }
        TandemTracing.end(dspan, r.response != null ? null : r.refusal != null ? r.refusal : r.unknown != null ? r.unknown
                : r.logFull != null ? "the coordinator's decision log stayed full: " + CoordinatorClient.describe(r.logFull) : "no decision");
        if (settled.get() != null) {
            // The durable decision was COMMIT: the outcome is known whatever the rest of the call did.
            boolean own = settled.get().join();
            phase2Pending = !own || (r.response != null && r.response.getPhase2Pending());
            setStatus(Status.STATUS_COMMITTED);
            return;
        }
        if (r.response != null && r.response.getOutcome() == Outcome.COMMITTED) {
            phase2Pending = !settleOwn(prepared, true) || r.response.getPhase2Pending();
            setStatus(Status.STATUS_COMMITTED);
            return;
        }
        if (r.response != null && r.response.getOutcome() == Outcome.ABORTED) {
            settleOwn(prepared, false);
            setStatus(Status.STATUS_ROLLEDBACK);
            throw rollback(ClientMetrics.AbortStage.DECIDED_ABORT, "the coordinator decided ABORT: " + r.response.getMessage(), null);
        }
        if (r.response != null) {
            releaseOwn(prepared);
            setStatus(Status.STATUS_UNKNOWN);
            throw new OutcomeUnknownException(gtrid, "the coordinator answered outcome " + r.response.getOutcome(), null);
        }
        if (r.refused != null) {
            // Every attempt was answered and this one refused the request as a
            // whole: no decision was written anywhere, so rolling back is safe.
            abort(all);
            throw rollback(r.noPrimary ? ClientMetrics.AbortStage.NO_COORDINATOR : ClientMetrics.AbortStage.REFUSED, r.refusal, r.refused);
        }
        if (r.logFull != null) {
            abort(all);
            throw rollback(ClientMetrics.AbortStage.REFUSED, "the coordinator's decision log stayed full for the whole decision timeout (" + r.calls
                    + " tries); nothing was decided and the branches were rolled back: " + CoordinatorClient.describe(r.logFull), r.logFull);
        }
        // Unknown: let go of the session-bound branches so that the
        // coordinator, which may know the outcome, can settle them.
        releaseOwn(prepared);
        setStatus(Status.STATUS_UNKNOWN);
        throw new OutcomeUnknownException(gtrid, r.unknown, null);
    }

    /**
     * Phase 1: prepares every branch of ws in parallel, with commitReaders
     * beside it, and returns the votes. On any failure everything in all is
     * rolled back and the RollbackException thrown; a branch whose prepare
     * failed without the database's answer is marked in doubt.
     */
    private int[] prepareAll(List<Enlisted> all, List<Enlisted> ws, List<Callable<Void>> commitReaders) throws RollbackException {
        int[] votes = new int[ws.size()];
        List<Callable<Void>> phase1 = new ArrayList<>(commitReaders);
        for (int i = 0; i < ws.size(); i++) {
            Enlisted w = ws.get(i);
            int k = i;
            phase1.add(() -> {
                Span sp = trace.start(TandemTracing.SPAN_PREPARE, w.res.rmName());
                try {
                    votes[k] = w.res.prepare(w.xid);
                    w.phase = Phase.PREPARED;
                } catch (XAException | RuntimeException e) {
                    TandemTracing.end(sp, e);
                    if (e instanceof XAException xe && !isRollback(xe)) {
                        w.phase = Phase.IN_DOUBT;
                    }
                    throw e;
                }
                TandemTracing.end(sp, (Throwable) null);
                return null;
            });
        }
        Throwable err = tm.parallel(phase1);
        if (err != null) {
            abort(all);
            throw rollback(ClientMetrics.AbortStage.PREPARE, "phase 1 failed", err);
        }
        return votes;
    }

    /**
     * The commit point among the writers, or null when the coordinator
     * decides: the MariaDB branch chosen at its begin, else, when every
     * writer is on PostgreSQL, the first whose RM qualifies.
     */
    private Enlisted commitPoint(List<Enlisted> writers) {
        synchronized (this) {
            if (cp != null) {
                return cp;
            }
            if (unnamedXA || tm.config().decideAt() == TandemConfig.DecideAt.COORDINATOR) {
                return null;
            }
        }
        Enlisted best = null;
        for (Enlisted w : writers) {
            SqlBranch b = (SqlBranch) w.res;
            if (b.info.dialect != DecisionTable.Dialect.POSTGRES) {
                return null; // an XA branch named with no commit point
            }
            if (best == null && b.info.knownCommitPoint()) {
                best = w;
            }
        }
        return best;
    }

    /**
     * Decides at the commit point: the other writers prepare (in parallel,
     * named with it), then the commit point records COMMIT in its decision
     * table and commits, in one round trip; that local commit is the
     * decision. Then the prepared branches commit on their own connections;
     * one that cannot is left to the coordinator's scan, which reads the
     * commit point's decision table. No coordinator call.
     */
    private void commitAtRM(List<Enlisted> all, List<Enlisted> writers, Enlisted cpe, List<Callable<Void>> commitReaders)
            throws RollbackException, SystemException {
        SqlBranch point = (SqlBranch) cpe.res;
        committedPath = ClientMetrics.Path.COMMIT_POINT; // if it commits
        tracedCommitPoint = point.rm;
        // Whoever settles these branches if this JVM dies is the coordinator's
        // scan, reading the commit point's decision table: it must know every
        // RM by these names, or a branch prepared there would wait for an
        // operator (and its decision row could be swept as an orphan's).
        for (Enlisted w : writers) {
            if (Boolean.FALSE.equals(tm.coordinatorKnows(w.res.rmName()))) {
                abort(all);
                throw rollback(ClientMetrics.AbortStage.SETUP, "the coordinator at " + tm.coordinator().target() + " does not know resource manager \"" + w.res.rmName()
                        + "\", so it could not recover this transaction's branches if this process died; nothing was prepared."
                        + " Give the coordinator --rm " + w.res.rmName() + "=DRIVER:DSN (the same name as the TandemDataSource),"
                        + " and call TandemTransactionManager.verify() at start-up", null);
            }
        }
        String table = point.info.tableId();
        List<Enlisted> prepared = new ArrayList<>();
        java.util.Map<String, String> participants = new java.util.TreeMap<>();
        for (Enlisted w : writers) {
            if (w == cpe) {
                continue;
            }
            SqlBranch b = (SqlBranch) w.res;
            if (b.xid.commitPoint() == null) {
                w.xid = b.nameCommitPoint(point.rm, table); // PostgreSQL: named at PREPARE; MariaDB: named at XA START already
            }
            prepared.add(w);
            participants.put(b.rm, b.info.tableId());
        }
        prepareAll(all, prepared, commitReaders);
        failpoint.accept("before-commit-point"); // every other branch prepared, no decision anywhere
        setStatus(Status.STATUS_COMMITTING);
        Span dspan = trace.decision("commit-point", point.rm);
        boolean checked = point.info.tableChecked();
        try {
            point.commitDecision(DecisionTable.commitStatements(point.info.dialect, gtrid, tm.config().maxTransactionAge(), table, checked,
                    DecisionTable.participants(participants), point.xid.mysqlXid()));
            TandemTracing.end(dspan, (Throwable) null);
        } catch (RuntimeException e) {
            TandemTracing.end(dspan, e);
            throw e;
        } catch (SQLException e) {
            TandemTracing.end(dspan, e);
            String why = DecisionTable.refused(e);
            if ((DecisionTable.REFUSED_WRONG_TABLE.equals(why) || DecisionTable.REFUSED_UNCHECKED.equals(why)) && checked) {
                point.info.forgetTableChecked(); // the next decision asks the id table, which says whether it is
            }
            if (DecisionTable.REFUSED_WRONG_TABLE.equals(why)) {
                java.util.logging.Logger.getLogger("io.github.tandemtx.jta").severe("tandem: ALARM: the data source of resource manager \""
                        + point.rm + "\" reaches a decision table whose id is not " + point.info.tableId() + " (the one it read at its check):"
                        + " another schema, database or server; transaction " + gtrid + " was refused and rolls back; fix the data source");
            }
            if (why != null) {
                // The database refused the INSERT, so the COMMIT after it never
                // ran: the commit point did not commit and never will.
                abort(all);
                throw rollback(ClientMetrics.AbortStage.COMMIT, "the commit point \"" + point.rm + "\" refused the decision: " + why, e);
            }
            // The call broke, or the database answered an error other than a
            // refusal: which statement failed is not known, and even on
            // PostgreSQL an answer can follow a COMMIT that ran (a backend's
            // FATAL 57P01 after its commit, before the round trip's Sync), so
            // the COMMIT may or may not have happened. End the session (an
            // uncommitted decision row goes with it), then take the key.
            point.releaseSession();
            DecisionTable.Outcome o;
            Span kspan = trace.start(TandemTracing.SPAN_TAKE_KEY, point.rm);
            try {
                o = point.info.resolve(gtrid, tm.config().decisionTimeout());
                if (kspan != null) {
                    kspan.setAttribute(TandemTracing.OUTCOME, o == DecisionTable.Outcome.COMMIT ? "committed" : "aborted");
                }
                TandemTracing.end(kspan, (Throwable) null);
            } catch (SQLException re) {
                TandemTracing.end(kspan, re);
                // Out of time (the key-taking stops well before the decision rows'
                // forget horizon), the row vanished, or another table answered:
                // never an abort.
                if (re instanceof DecisionTable.WrongTableException) {
                    java.util.logging.Logger.getLogger("io.github.tandemtx.jta").severe("tandem: ALARM: rm \"" + point.rm + "\": " + re.getMessage());
                }
                releaseOwn(prepared);
                setStatus(Status.STATUS_UNKNOWN);
                throw new OutcomeUnknownException(gtrid, "the commit point \"" + point.rm + "\"'s commit got no answer (" + e.getMessage()
                        + ") and learning the outcome by taking the decision key failed too (" + re.getMessage() + "); nothing was rolled back:"
                        + " the prepared branches are settled by the coordinator's scan from " + point.rm + "'s decision table"
                        + " (ask it: tandem status " + gtrid + ")", e, true);
            }
            if (o == DecisionTable.Outcome.ABORT) {
                settlePrepared(prepared, false);
                setStatus(Status.STATUS_ROLLEDBACK);
                throw rollback(ClientMetrics.AbortStage.DECIDED_ABORT, "the commit point's commit failed or its connection broke, and taking the decision key found no decision"
                        + " (its COMMIT never happened; now none can)", e);
            }
        }
        failpoint.accept("after-commit-point"); // decided COMMIT; the prepared branches wait for a recoverer
        if (settlePrepared(prepared, true)) {
            point.info.forgetLater(gtrid, tm.executor());
        } else {
            phase2Pending = true;
        }
        setStatus(Status.STATUS_COMMITTED);
    }

    /**
     * Commits (or rolls back) prepared branches on their own connections, in
     * parallel, after the decision; true when every one was settled. One that
     * cannot be is left to a recoverer (a session-bound one has its session
     * closed so that others can).
     */
    private boolean settlePrepared(List<Enlisted> prepared, boolean commit) {
        List<Callable<Void>> tasks = new ArrayList<>();
        for (Enlisted w : prepared) {
            tasks.add(() -> {
                Span sp = trace.phase2(w.res.rmName(), commit);
                try {
                    if (commit) {
                        w.res.commit(w.xid, false);
                    } else {
                        w.res.rollback(w.xid);
                    }
                } catch (XAException e) {
                    if (e.errorCode == XAException.XAER_NOTA) {
                        TandemTracing.end(sp, (Throwable) null);
                        return null; // a recoverer settled it already
                    }
                    TandemTracing.end(sp, e);
                    w.res.releaseSession();
                    throw e;
                } catch (RuntimeException e) {
                    TandemTracing.end(sp, e);
                    throw e;
                }
                TandemTracing.end(sp, (Throwable) null);
                return null;
            });
        }
        return tm.parallel(tasks) == null;
    }

    /**
     * Commits (or rolls back) the prepared branches this transaction settles
     * (session-bound ones, and any its Commit named client_settles) on their
     * own connections, in parallel; true if every one was settled here.
     */
    private boolean settleOwn(List<Enlisted> prepared, boolean commit) {
        List<Callable<Void>> own = new ArrayList<>();
        for (Enlisted w : prepared) {
            if (!w.clientSettles && !w.res.sessionBound()) {
                continue; // the coordinator's to settle
            }
            own.add(() -> {
                Span sp = trace.phase2(w.res.rmName(), commit);
                try {
                    if (commit) {
                        w.res.commit(w.xid, false);
                    } else {
                        w.res.rollback(w.xid);
                    }
                } catch (XAException e) {
                    if (e.errorCode == XAException.XAER_NOTA && !w.res.sessionBound()) {
                        TandemTracing.end(sp, (Throwable) null);
                        return null; // the coordinator, after its head start, settled it already
                    }
                    TandemTracing.end(sp, e);
                    w.res.releaseSession(); // hands the branch to the coordinator
                    throw e;
                } catch (RuntimeException e) {
                    TandemTracing.end(sp, e);
                    throw e;
                }
                TandemTracing.end(sp, (Throwable) null);
                return null;
            });
        }
        return tm.parallel(own) == null;
    }

    /** Whether r is a refusal of client_settles on a branch that is not session-bound (a coordinator older than that). */
    private static boolean refusedClientSettles(CoordinatorClient.CommitResult r) {
        return r.refused != null && r.refused.getStatus().getCode() == io.grpc.Status.Code.INVALID_ARGUMENT
                && String.valueOf(r.refused.getStatus().getDescription()).contains("client_settles");
    }

    /** Whether one of ws is session-bound (its branch only this transaction can settle). */
    private static boolean bound(List<Enlisted> ws) {
        for (Enlisted w : ws) {
            if (w.res.sessionBound()) {
                return true;
            }
        }
        return false;
    }

    private void releaseOwn(List<Enlisted> prepared) {
        for (Enlisted w : prepared) {
            if (w.res.sessionBound()) {
                w.res.releaseSession();
            }
        }
    }

    /** Rolls back after an abort decision or a failure before any decision: the outcome is abort whatever this does. */
    private void abort(List<Enlisted> bs) {
        setStatus(Status.STATUS_ROLLING_BACK);
        try {
            rollbackAll(bs);
        } catch (SystemException ignored) {
            // the branches left are the coordinator's (Abort) or its orphan scan's
        }
        setStatus(Status.STATUS_ROLLEDBACK);
    }

    /**
     * Rolls every branch back on its own connection, in parallel. A prepared
     * branch that cannot be rolled back here is handed to the coordinator's
     * Abort; failing that, its orphan scan rolls it back.
     */
    private void rollbackAll(List<Enlisted> bs) throws SystemException {
        List<Enlisted> stuck = new ArrayList<>();
        List<Callable<Void>> tasks = new ArrayList<>();
        for (Enlisted e : bs) {
            tasks.add(() -> {
                try {
                    e.res.rollback(e.xid);
                } catch (XAException ex) {
                    if (e.res.sessionBound() || e.phase == Phase.ACTIVE) {
                        e.res.releaseSession(); // an active branch rolls back when its session ends
                    }
                    synchronized (stuck) {
                        stuck.add(e);
                    }
                    throw ex;
                }
                return null;
            });
        }
        Throwable err = tm.parallel(tasks);
        if (err == null) {
            return;
        }
        AbortRequest.Builder req = AbortRequest.newBuilder().setGtrid(gtrid);
        for (Enlisted e : stuck) {
            if (e.phase != Phase.ACTIVE) {
                req.addBranches(Branch.newBuilder().setRm(e.res.rmName()));
            }
        }
        if (req.getBranchesCount() == 0) {
            return; // only active branches: their sessions' end rolled them back
        }
        try {
            tm.coordinator().abort(req.build(), java.time.Duration.ofSeconds(10), ownerOf(stuck));
        } catch (RuntimeException ae) {
            throw systemException("rollback failed and handing the prepared branches to the coordinator failed too"
                    + " (its orphan scan will roll them back): " + ae.getMessage(), err);
        }
    }

    static boolean isRollback(XAException e) {
        return e.errorCode >= XAException.XA_RBBASE && e.errorCode <= XAException.XA_RBEND;
    }

    /** The RollbackException to throw, the commit having rolled back at stage (counted in the manager's metrics). */
    private RollbackException rollback(ClientMetrics.AbortStage stage, String reason, Throwable cause) {
        abortStage = stage;
        RollbackException e = new RollbackException("tandem: transaction " + gtrid + " rolled back: " + reason
                + (cause != null && cause.getMessage() != null ? ": " + cause.getMessage() : ""));
        if (cause != null) {
            e.initCause(cause);
        }
        return e;
    }

    private SystemException systemException(String what, Throwable cause) {
        SystemException e = new SystemException("tandem: transaction " + gtrid + ": " + what
                + (cause != null && cause.getMessage() != null ? ": " + cause.getMessage() : ""));
        if (cause != null) {
            e.initCause(cause);
        }
        return e;
    }

    static String statusName(int s) {
        return switch (s) {
            case Status.STATUS_ACTIVE -> "active";
            case Status.STATUS_MARKED_ROLLBACK -> "marked rollback-only";
            case Status.STATUS_PREPARED -> "prepared";
            case Status.STATUS_COMMITTED -> "committed";
            case Status.STATUS_ROLLEDBACK -> "rolled back";
            case Status.STATUS_UNKNOWN -> "of unknown outcome";
            case Status.STATUS_NO_TRANSACTION -> "no transaction";
            case Status.STATUS_PREPARING -> "preparing";
            case Status.STATUS_COMMITTING -> "committing";
            case Status.STATUS_ROLLING_BACK -> "rolling back";
            default -> "in status " + s;
        };
    }

    @Override
    public String toString() {
        return "TandemTransaction{" + gtrid + ", " + statusName(getStatus()) + "}";
    }

    /** The owner the coordinator-decided branches among ws are named after, or null. */
    private static String ownerOf(java.util.Collection<Enlisted> ws) {
        for (Enlisted w : ws) {
            if (w.xid != null && w.xid.commitPoint() == null && w.xid.owner() != null) {
                return w.xid.owner();
            }
        }
        return null;
    }
}
