package io.github.tandemtx.jta;

import io.grpc.StatusRuntimeException;
import jakarta.transaction.HeuristicMixedException;
import jakarta.transaction.HeuristicRollbackException;
import jakarta.transaction.InvalidTransactionException;
import jakarta.transaction.NotSupportedException;
import jakarta.transaction.RollbackException;
import jakarta.transaction.Status;
import jakarta.transaction.SystemException;
import jakarta.transaction.Transaction;
import jakarta.transaction.TransactionManager;
import jakarta.transaction.TransactionSynchronizationRegistry;
import jakarta.transaction.UserTransaction;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.Callable;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import tandem.v1.Tandem.HealthResponse;
import tandem.v1.Tandem.RMHealth;

/**
 * A Jakarta Transactions transaction manager whose two-phase commits are
 * decided by a Tandem coordinator. It is also the {@link UserTransaction};
 * {@link #synchronizationRegistry()} is its
 * {@link TransactionSynchronizationRegistry}. Transactions are bound to the
 * calling thread. No transaction log is kept in the JVM: the coordinator's
 * log is the only one, and its recovery settles the branches a dead JVM left
 * prepared.
 *
 * <pre>{@code
 * TandemTransactionManager tm = TandemTransactionManager.create(TandemConfig.coordinator("127.0.0.1:7070"));
 * DataSource pg = TandemDataSource.postgres(tm, "pg", pgDataSource);
 * DataSource maria = TandemDataSource.mariadb(tm, "maria", mariaDataSource);
 * tm.verify(); // the coordinator is reachable and knows "pg" and "maria"
 * tm.begin();
 * try (Connection a = pg.getConnection(); Connection b = maria.getConnection()) {
 *     ... plain JDBC on a and b ...
 * }
 * tm.commit();
 * }</pre>
 */
public final class TandemTransactionManager implements TransactionManager, UserTransaction, AutoCloseable {
    private final TandemConfig config;
    private final CoordinatorClient coordinator;
    private final ThreadLocal<TandemTransaction> current = new ThreadLocal<>();
    private final ThreadLocal<Integer> timeout = new ThreadLocal<>();
    private final Map<String, ResourceManager> rms = new ConcurrentHashMap<>();
    private final ExecutorService executor;
    private final ScheduledExecutorService timers;
    private final TandemSynchronizationRegistry registry = new TandemSynchronizationRegistry(this);
    private final ClientMetrics metrics = new ClientMetrics();
    private final TandemTracing tracing;

    private TandemTransactionManager(TandemConfig config) {
        this.config = config;
        this.tracing = new TandemTracing(config.tracerProvider());
        this.coordinator = new CoordinatorClient(config.coordinators(), config.authToken(), config.tlsCa(), config.tlsCert(), config.tlsKey(),
                metrics.coordinatorCalls);
        AtomicInteger n = new AtomicInteger();
        this.executor = Executors.newCachedThreadPool(r -> {
            Thread t = new Thread(r, "tandem-branch-" + n.incrementAndGet());
            t.setDaemon(true);
            return t;
        });
        ScheduledThreadPoolExecutor timers = new ScheduledThreadPoolExecutor(1, r -> {
            Thread t = new Thread(r, "tandem-timeouts");
            t.setDaemon(true);
            return t;
        });
        timers.setRemoveOnCancelPolicy(true); // a finished transaction's timer goes at once, not at its timeout
        this.timers = timers;
    }

    /** Makes a transaction manager for the coordinator in config. No call is made yet: see {@link #verify()}. */
    public static TandemTransactionManager create(TandemConfig config) {
        return new TandemTransactionManager(config);
    }

    public TandemConfig config() {
        return config;
    }

    /**
     * This manager's transaction outcomes since it was created: commits by
     * path, aborts by stage, unknown outcomes, rollbacks, coordinator calls.
     * Reading them does no I/O. {@code io.github.tandemtx.jta.metrics.TandemMetrics}
     * exports them to Micrometer.
     */
    public ClientMetrics metrics() {
        return metrics;
    }

    /** This manager as a {@link UserTransaction} (the same object). */
    public UserTransaction userTransaction() {
        return this;
    }

    /** The {@link TransactionSynchronizationRegistry} of this manager's transactions. */
    public TransactionSynchronizationRegistry synchronizationRegistry() {
        return registry;
    }

    /**
     * Checks the configuration against the coordinator: it answers, can
     * decide, and knows every resource manager a {@link TandemDataSource} of
     * this manager names. With several addresses, the coordinator checked is
     * the one in use, or the one found serving when that one does not. Call it at start-up to fail early with a clear
     * message rather than at the first two-phase commit.
     *
     * @throws SystemException saying what is wrong and what to do
     */
    public void verify() throws SystemException {
        HealthResponse h;
        try {
            h = coordinator.healthOfPrimary(Duration.ofSeconds(5));
        } catch (StatusRuntimeException e) {
            throw new SystemException("tandem: the coordinator at " + coordinator.target() + " did not answer Health: "
                    + CoordinatorClient.describe(e) + (config.coordinators().size() > 1 ? " (nor did another of " + coordinator.targets() + " serve)" : "")
                    + "; check the address (tandem serve --listen), that it runs, and the auth token");
        }
        if (!h.getServing()) {
            throw new SystemException("tandem: the coordinator at " + coordinator.target() + " cannot decide transactions: " + h.getMessage()
                    + (config.coordinators().size() > 1 ? " (and no other of " + coordinator.targets() + " serves)" : ""));
        }
        Set<String> known = new TreeSet<>();
        for (RMHealth r : h.getRmsList()) {
            known.add(r.getName());
        }
        Set<String> missing = new TreeSet<>(rms.keySet());
        missing.removeAll(known);
        if (!missing.isEmpty()) {
            throw new SystemException("tandem: the coordinator at " + coordinator.target() + " knows no resource manager named "
                    + missing + " (it knows " + known + "): give it --rm NAME=driver:DSN for each, with the same names as the TandemDataSources");
        }
    }

    /** The RM names the coordinator said it scans; null until it answered. */
    private volatile Set<String> coordinatorRms;
    /** When (System.nanoTime) a negative or failed answer may be asked again. */
    private volatile long nextRmProbe;
    private final java.util.concurrent.locks.ReentrantLock rmProbe = new java.util.concurrent.locks.ReentrantLock();
    private static final long RM_PROBE_AGAIN_NANOS = TimeUnit.SECONDS.toNanos(5);

    /**
     * Whether the coordinator scans resource manager rm (its recovery is what
     * settles a dead JVM's prepared branches, and it reads a commit point's
     * decision table only for an RM it knows): TRUE when it said so (kept),
     * FALSE when it answered without rm (asked again after 5 s: the operator
     * may add it), null when it could not be asked (unreachable; asked again
     * after 5 s; a thread that finds another asking does not wait for it).
     * The commit point needs no coordinator to commit, so null lets it go on.
     */
    Boolean coordinatorKnows(String rm) {
        Set<String> known = coordinatorRms;
        if (known != null && known.contains(rm)) {
            return Boolean.TRUE;
        }
        if (System.nanoTime() - nextRmProbe < 0 || !rmProbe.tryLock()) {
            return known == null ? null : Boolean.FALSE;
        }
        try {
            HealthResponse h = coordinator.health(Duration.ofSeconds(2));
            Set<String> names = new TreeSet<>();
            for (RMHealth r : h.getRmsList()) {
                names.add(r.getName());
            }
            if (!names.isEmpty()) {
                coordinatorRms = known = names;
            }
        } catch (StatusRuntimeException e) {
            java.util.logging.Logger.getLogger("io.github.tandemtx.jta").warning("tandem: could not ask the coordinator at " + coordinator.target()
                    + " which resource managers it recovers (" + CoordinatorClient.describe(e) + "); commit points go on without it");
        } finally {
            nextRmProbe = System.nanoTime() + RM_PROBE_AGAIN_NANOS;
            rmProbe.unlock();
        }
        if (known == null) {
            return null;
        }
        return known.contains(rm);
    }

    /**
     * Registers the resource manager of a new TandemDataSource (over
     * source, named in the refusal). A name is one TandemDataSource's until
     * it is closed ({@link #unregisterRm}): a transaction finds its branch
     * on an RM by name, so a second data source under the same name would
     * be handed the first one's branch, and its connections would write to
     * the first one's database.
     *
     * @throws IllegalStateException when another open TandemDataSource of
     *     this manager has the name
     */
    void registerRm(ResourceManager rm, Object source) {
        ResourceManager had = rms.putIfAbsent(rm.name, rm);
        if (had != null && had != rm) {
            throw new IllegalStateException("tandem: resource manager \"" + rm.name + "\" already has a TandemDataSource on this transaction manager"
                    + (had.source == null ? "" : " (over " + had.source + ")") + "; refusing another (over " + ResourceManager.describe(source)
                    + "): a transaction's connections of both would share the first one's branch and write to its database. Give each database"
                    + " its own resource manager name (as the coordinator's --rm NAME=… names it), or close the first TandemDataSource before"
                    + " making another under its name");
        }
    }

    /** Gives rm's name back, when rm holds it (a closed TandemDataSource's). */
    void unregisterRm(ResourceManager rm) {
        rms.remove(rm.name, rm);
    }

    boolean knowsRm(String rm) {
        return rms.containsKey(rm);
    }

    /** The resource manager registered under name, or null (tests). */
    ResourceManager registeredRm(String name) {
        return rms.get(name);
    }

    CoordinatorClient coordinator() {
        return coordinator;
    }

    /**
     * The owner of the branches the coordinator decides: its cluster's
     * identity (Health's cluster=, learnt once), or why it is not known (a
     * coordinator older than owners, or none reachable now): the
     * coordinator path is then refused, before anything is prepared.
     */
    CoordinatorClient.OwnerAnswer coordinatorOwner() {
        return coordinator.owner(Duration.ofSeconds(2));
    }

    ExecutorService executor() {
        return executor;
    }

    /** The calling thread's transaction, or null. */
    TandemTransaction current() {
        return current.get();
    }

    void finished(TandemTransaction tx) {
        if (current.get() == tx) {
            current.remove();
        }
    }

    @Override
    public void begin() throws NotSupportedException, SystemException {
        TandemTransaction tx = current.get();
        if (tx != null) {
            throw new NotSupportedException("tandem: this thread is already in transaction " + tx.gtrid() + ": nested transactions are not supported");
        }
        String gtrid = TandemXid.newGtrid();
        // The transaction's span: a child of the caller's current span (README, "Traces").
        tx = new TandemTransaction(this, gtrid, tracing.begin(gtrid));
        Integer t = timeout.get();
        int secs = t != null ? t : config.defaultTransactionTimeout();
        if (secs > 0) {
            TandemTransaction tt = tx;
            tx.setTimer(timers.schedule(() -> tt.timedOut(secs), secs, TimeUnit.SECONDS));
        }
        current.set(tx);
    }

    private TandemTransaction require(String what) {
        TandemTransaction tx = current.get();
        if (tx == null) {
            throw new IllegalStateException("tandem: " + what + ": no transaction on this thread (call begin first)");
        }
        return tx;
    }

    @Override
    public void commit() throws RollbackException, HeuristicMixedException, HeuristicRollbackException, SecurityException,
            IllegalStateException, SystemException {
        TandemTransaction tx = require("commit");
        try {
            tx.commit();
        } finally {
            current.remove();
        }
    }

    @Override
    public void rollback() throws IllegalStateException, SecurityException, SystemException {
        TandemTransaction tx = require("rollback");
        try {
            tx.rollback();
        } finally {
            current.remove();
        }
    }

    @Override
    public void setRollbackOnly() throws IllegalStateException {
        require("setRollbackOnly").setRollbackOnly();
    }

    @Override
    public int getStatus() {
        TandemTransaction tx = current.get();
        return tx == null ? Status.STATUS_NO_TRANSACTION : tx.getStatus();
    }

    @Override
    public Transaction getTransaction() {
        return current.get();
    }

    /** Sets the timeout of transactions this thread begins next; 0 restores the default. Past it, the transaction is marked rollback-only. */
    @Override
    public void setTransactionTimeout(int seconds) throws SystemException {
        if (seconds < 0) {
            throw new SystemException("tandem: transaction timeout must not be negative, got " + seconds);
        }
        if (seconds == 0) {
            timeout.remove();
        } else {
            timeout.set(seconds);
        }
    }

    @Override
    public Transaction suspend() {
        TandemTransaction tx = current.get();
        current.remove();
        return tx;
    }

    @Override
    public void resume(Transaction tobj) throws InvalidTransactionException, IllegalStateException {
        if (!(tobj instanceof TandemTransaction tx)) {
            throw new InvalidTransactionException("tandem: cannot resume " + tobj + ": not a transaction of this manager");
        }
        if (current.get() != null) {
            throw new IllegalStateException("tandem: this thread is already in transaction " + current.get().gtrid());
        }
        int st = tx.getStatus();
        if (st != Status.STATUS_ACTIVE && st != Status.STATUS_MARKED_ROLLBACK) {
            throw new InvalidTransactionException("tandem: cannot resume transaction " + tx.gtrid() + ": it is " + TandemTransaction.statusName(st));
        }
        current.set(tx);
    }

    /**
     * Runs the tasks concurrently (the last on the calling thread) and returns
     * null, or the first failure with the others suppressed, once every task
     * has ended: an interrupt of the calling thread does not stop the wait
     * (a task still running on a branch's connection would race whatever the
     * caller does next with it); the thread's interrupt status is kept.
     */
    Throwable parallel(List<Callable<Void>> tasks) {
        if (tasks.isEmpty()) {
            return null;
        }
        List<Future<Void>> fs = new ArrayList<>();
        for (int i = 0; i < tasks.size() - 1; i++) {
            fs.add(executor.submit(tasks.get(i)));
        }
        Throwable first = null;
        try {
            tasks.get(tasks.size() - 1).call();
        } catch (Exception e) {
            first = e;
        }
        boolean interrupted = false;
        for (Future<Void> f : fs) {
            while (true) {
                try {
                    f.get();
                } catch (ExecutionException e) {
                    first = add(first, e.getCause());
                } catch (InterruptedException e) {
                    interrupted = true;
                    continue;
                }
                break;
            }
        }
        if (interrupted) {
            Thread.currentThread().interrupt();
        }
        return first;
    }

    private static Throwable add(Throwable first, Throwable t) {
        if (first == null) {
            return t;
        }
        first.addSuppressed(t);
        return first;
    }

    /** Closes the connection to the coordinator and the manager's threads. */
    @Override
    public void close() {
        coordinator.close();
        executor.shutdown();
        timers.shutdownNow();
    }
}
