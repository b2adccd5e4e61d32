package io.github.tandemtx.jta.metrics;

import io.github.tandemtx.jta.ClientMetrics;
import io.github.tandemtx.jta.TandemTransactionManager;
import io.micrometer.core.instrument.FunctionCounter;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Tag;
import io.micrometer.core.instrument.Tags;
import io.micrometer.core.instrument.Timer;
import io.micrometer.core.instrument.binder.MeterBinder;
import java.time.Duration;
import java.util.ArrayList;
import java.util.EnumMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.function.ToLongFunction;

/**
 * Exports the {@link ClientMetrics} of one or more transaction managers to a
 * Micrometer registry, under names that Micrometer's Prometheus registry
 * renders exactly as the Go SDK's {@code client/prommetrics} names them:
 *
 * <table>
 *   <caption>Metrics</caption>
 *   <tr><th>Micrometer</th><th>Prometheus</th><th>tags</th></tr>
 *   <tr><td>{@value #COMMITS} (counter)</td><td>{@code tandem_client_commits_total}</td>
 *       <td>{@code path}: local, one-phase, commit-point, two-phase</td></tr>
 *   <tr><td>{@value #COMMIT_TIME} (timer)</td><td>{@code tandem_client_commit_seconds} (histogram)</td><td>{@code path}</td></tr>
 *   <tr><td>{@value #ABORTS} (counter)</td><td>{@code tandem_client_aborts_total}</td>
 *       <td>{@code stage}: statement, setup, prepare, commit, decided-abort, refused, no-coordinator, other</td></tr>
 *   <tr><td>{@value #OUTCOME_UNKNOWN} (counter)</td><td>{@code tandem_client_outcome_unknown_total}</td><td></td></tr>
 *   <tr><td>{@value #FAILED_COMMIT_TIME} (timer)</td><td>{@code tandem_client_failed_commit_seconds} (histogram)</td>
 *       <td>{@code outcome}: aborted, unknown</td></tr>
 *   <tr><td>{@value #ROLLBACKS} (counter)</td><td>{@code tandem_client_rollbacks_total}</td><td></td></tr>
 *   <tr><td>{@value #COORDINATOR_CALLS} (counter)</td><td>{@code tandem_client_coordinator_calls_total}</td><td></td></tr>
 * </table>
 *
 * <p>Every series exists from the binding on, at 0 until something happens.
 * The counters are the managers' own (read at each scrape, summed over the
 * managers, counting from each manager's creation). The histograms are
 * Micrometer timers (Micrometer has no histogram read from counts kept
 * elsewhere) with the Go SDK's buckets, 2^i µs for i = 0…25 (1 µs to
 * 33.6 s), fed by a {@link ClientMetrics.Listener} after each
 * {@code commit()}: they count from the binding on, so bind at start-up. A
 * timer also has Micrometer's {@code _max} gauge. The Java client records no
 * wait events, so there is no {@code tandem_wait_seconds{side="client"}}.
 *
 * <pre>{@code
 * new TandemMetrics(tm).bindTo(registry);        // or, with Spring Boot: @Bean TandemMetrics tandemMetrics(TandemTransactionManager tm)
 * }</pre>
 *
 * <p>Bind it once per registry (a composite counts once). Micrometer is an
 * optional dependency of tandem-jta: only this class needs it.
 */
public final class TandemMetrics implements MeterBinder, AutoCloseable {
    /** Global transactions committed, by path. */
    public static final String COMMITS = "tandem.client.commits";
    /** Time from {@code commit()}'s call to its return, for commits, by path. */
    public static final String COMMIT_TIME = "tandem.client.commit";
    /** {@code commit()} calls that rolled back, by stage. */
    public static final String ABORTS = "tandem.client.aborts";
    /** {@code commit()} calls whose outcome could not be learnt. */
    public static final String OUTCOME_UNKNOWN = "tandem.client.outcome.unknown";
    /** Time from {@code commit()}'s call to its return, for commits that did not commit, by outcome. */
    public static final String FAILED_COMMIT_TIME = "tandem.client.failed.commit";
    /** {@code rollback()} calls that rolled a transaction back. */
    public static final String ROLLBACKS = "tandem.client.rollbacks";
    /** RPCs sent to the coordinators. */
    public static final String COORDINATOR_CALLS = "tandem.client.coordinator.calls";

    /** The Go SDK's histogram buckets (package waits): 2^i µs, i = 0…25; +Inf is added by the registry. */
    static final Duration[] BUCKETS = new Duration[26];

    static {
        for (int i = 0; i < BUCKETS.length; i++) {
            BUCKETS[i] = Duration.ofNanos(1000L << i);
        }
    }

    private final List<ClientMetrics> clients = new ArrayList<>();
    private final Tags tags;
    private final List<AutoCloseable> listeners = new ArrayList<>();

    /** Exports the metrics of these managers, summed. */
    public TandemMetrics(TandemTransactionManager... managers) {
        this(Tags.empty(), managers);
    }

    /** Exports the metrics of these managers, summed, with tags added to every series. */
    public TandemMetrics(Iterable<Tag> tags, TandemTransactionManager... managers) {
        if (managers.length == 0) {
            throw new IllegalArgumentException("tandem: TandemMetrics needs at least one TandemTransactionManager");
        }
        for (TandemTransactionManager tm : managers) {
            clients.add(tm.metrics());
        }
        this.tags = Tags.of(tags);
    }

    @Override
    public synchronized void bindTo(MeterRegistry registry) {
        Map<ClientMetrics.Path, Timer> commitTimers = new EnumMap<>(ClientMetrics.Path.class);
        for (ClientMetrics.Path p : ClientMetrics.Path.values()) {
            counter(registry, COMMITS, "Global transactions committed by this process's Tandem transaction managers, by path:"
                    + " local (nothing written), one-phase (one branch wrote), commit-point (decided by a database's local commit),"
                    + " two-phase (decided by the coordinator).", m -> m.committed(p), "path", p.label());
            commitTimers.put(p, timer(registry, COMMIT_TIME, "Time from commit()'s call to its return, for commits, by path.", "path", p.label()));
        }
        for (ClientMetrics.AbortStage s : ClientMetrics.AbortStage.values()) {
            counter(registry, ABORTS, "Commits that ended in abort (RollbackException), by stage: statement (a statement failed before"
                    + " the commit), setup, prepare, commit, decided-abort, refused, no-coordinator, other.", m -> m.aborted(s), "stage", s.label());
        }
        counter(registry, OUTCOME_UNKNOWN, "Commits whose outcome tandem-jta could not learn (OutcomeUnknownException): the coordinator"
                + " or the commit point's table settles them; ask tandem status GTRID.", ClientMetrics::outcomeUnknown);
        Timer aborted = timer(registry, FAILED_COMMIT_TIME, "Time from commit()'s call to its return, for commits that did not commit,"
                + " by outcome (aborted, unknown).", "outcome", "aborted");
        Timer unknown = timer(registry, FAILED_COMMIT_TIME, "Time from commit()'s call to its return, for commits that did not commit,"
                + " by outcome (aborted, unknown).", "outcome", "unknown");
        counter(registry, ROLLBACKS, "Transactions the application rolled back (rollback()).", ClientMetrics::rollbacks);
        counter(registry, COORDINATOR_CALLS, "RPCs sent to the coordinators (retries and the Health probes that look for the"
                + " primary included).", ClientMetrics::coordinatorCalls);

        // The listener holds this binder, so that the counters' (weakly held)
        // state lives as long as the managers.
        ClientMetrics.Listener l = new ClientMetrics.Listener() {
            final TandemMetrics binder = TandemMetrics.this;

            @Override
            public void committed(ClientMetrics.Path path, long nanos) {
                commitTimers.get(path).record(nanos, TimeUnit.NANOSECONDS);
            }

            @Override
            public void aborted(ClientMetrics.AbortStage stage, long nanos) {
                aborted.record(nanos, TimeUnit.NANOSECONDS);
            }

            @Override
            public void outcomeUnknown(long nanos) {
                unknown.record(nanos, TimeUnit.NANOSECONDS);
            }
        };
        for (ClientMetrics m : clients) {
            listeners.add(m.addListener(l));
        }
    }

    /** Stops feeding the timers of every registry bound so far (the counters stay registered). */
    @Override
    public synchronized void close() {
        for (AutoCloseable c : listeners) {
            try {
                c.close();
            } catch (Exception ignored) {
                // removing a listener does not fail
            }
        }
        listeners.clear();
    }

    private void counter(MeterRegistry registry, String name, String help, ToLongFunction<ClientMetrics> f, String... tagKv) {
        FunctionCounter.builder(name, this, b -> {
            long n = 0;
            for (ClientMetrics m : b.clients) {
                n += f.applyAsLong(m);
            }
            return n;
        }).description(help).tags(tags).tags(tagKv).register(registry);
    }

    private Timer timer(MeterRegistry registry, String name, String help, String... tagKv) {
        return Timer.builder(name).description(help).tags(tags).tags(tagKv).serviceLevelObjectives(BUCKETS).register(registry);
    }
}
