package io.github.tandemtx.spring.boot;

import io.github.tandemtx.jta.CoordinatorHealth;
import io.github.tandemtx.jta.TandemDataSource;
import io.github.tandemtx.jta.TandemTransactionManager;
import java.time.Duration;
import java.time.Instant;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.ReentrantLock;
import java.util.logging.Level;
import java.util.logging.Logger;
import org.springframework.beans.factory.ObjectProvider;
import org.springframework.boot.actuate.health.Health;
import org.springframework.boot.actuate.health.HealthIndicator;
import org.springframework.boot.actuate.health.Status;

/**
 * Actuator's "tandem" health: the coordinator's state, as details, with a
 * status that does not take the application out of service by default.
 *
 * <p>Status: UP when the coordinator answers, serves (a primary that can
 * decide) and knows the resource manager of every TandemDataSource bean;
 * otherwise {@code management.health.tandem.unavailable-status}, UP by
 * default: a transaction decided at a commit point needs no coordinator,
 * so a coordinator outage or a promotion window should not mark every
 * instance DOWN (set DOWN or OUT_OF_SERVICE to have it do so).
 *
 * <p>Details: {@code state} (serving, unreachable, not-serving,
 * missing-rms), {@code serving}, {@code role}, {@code unfinished} phase 2s,
 * {@code rms} (each RM the coordinator recovers: reachable or unreachable),
 * {@code dataSources} (the application's RMs), {@code missing},
 * {@code checkedAt}. With {@code sensitive}, also the coordinator's
 * address ({@code coordinator}), {@code version}, the {@code error} it
 * failed with, and each unreachable RM's error (which may name the
 * database's host and user): the auto-configuration sets it unless
 * Spring's show-details lets anyone see details (ALWAYS, for the endpoint
 * or a group).
 *
 * <p>Cost: one check is one Health call (more with standbys when the one in
 * use does not serve), bounded by the timeout; its answer is reused for
 * the cache time to live, and probes arriving while a check is under way
 * do not call again: they report the last answer, or, before the first,
 * wait for it (no longer than the timeout and a second).
 */
public class TandemHealthIndicator implements HealthIndicator {
    private static final Logger LOG = Logger.getLogger(TandemHealthIndicator.class.getName());

    /** How long one check waits for the coordinator, by default. */
    public static final Duration TIMEOUT = Duration.ofSeconds(3);
    /** How long a check's answer is reused, by default. */
    public static final Duration CACHE_TIME_TO_LIVE = Duration.ofSeconds(5);

    private final TandemTransactionManager tandem;
    private final ObjectProvider<TandemDataSource> dataSources;
    private final Status unavailable;
    private final Duration timeout;
    private final long ttlNanos;
    private final boolean sensitive;

    private final ReentrantLock checking = new ReentrantLock();
    /** The last check's answer; null before the first. */
    private volatile Checked last;

    /** A check's answer: the coordinator's health, or why it could not be asked; when (System.nanoTime, and the instant). */
    private record Checked(CoordinatorHealth health, String failure, long at, Instant when) {
    }

    /**
     * @param unavailable the status when the coordinator is not answering,
     *     not serving, or lacks an RM
     * @param timeout how long one check waits for the coordinator
     * @param cacheTimeToLive how long an answer is reused (0: not)
     * @param sensitive whether details name the coordinator's address,
     *     version and error texts
     */
    public TandemHealthIndicator(TandemTransactionManager tandem, ObjectProvider<TandemDataSource> dataSources, Status unavailable, Duration timeout,
            Duration cacheTimeToLive, boolean sensitive) {
        this.tandem = tandem;
        this.dataSources = dataSources;
        this.unavailable = unavailable;
        this.timeout = timeout;
        this.ttlNanos = cacheTimeToLive.toNanos();
        this.sensitive = sensitive;
    }

    @Override
    public Health health() {
        Set<String> rms = new TreeSet<>();
        dataSources.orderedStream().forEach(d -> rms.add(d.rmName()));
        Checked c = answer();
        Health.Builder b = new Health.Builder();
        CoordinatorHealth h = c.health();
        if (h == null || !h.reachable()) {
            b.status(unavailable).withDetail("state", h == null ? "unknown" : "unreachable").withDetail("serving", false);
            if (sensitive) {
                b.withDetail("coordinator", h == null ? tandem.config().coordinators().toString() : h.address())
                        .withDetail("error", h == null ? c.failure() : h.error());
            }
            return b.withDetail("dataSources", rms).withDetail("checkedAt", c.when().toString()).build();
        }
        Set<String> missing = h.missing(rms);
        String state = !h.serving() ? "not-serving" : !missing.isEmpty() ? "missing-rms" : "serving";
        b.status(h.isUp(rms) ? Status.UP : unavailable).withDetail("state", state).withDetail("serving", h.serving())
                .withDetail("role", h.role() == null ? "unknown" : h.role()).withDetail("unfinished", h.unfinished());
        if (sensitive) {
            b.withDetail("coordinator", h.address()).withDetail("version", h.version());
        }
        Map<String, Object> known = new LinkedHashMap<>();
        for (CoordinatorHealth.Rm r : h.rms()) {
            known.put(r.name(), r.reachable() ? "reachable" : sensitive && r.error() != null ? "unreachable: " + r.error() : "unreachable");
        }
        b.withDetail("rms", known).withDetail("dataSources", rms);
        if (!missing.isEmpty()) {
            b.withDetail("missing", missing);
        }
        return b.withDetail("checkedAt", c.when().toString()).build();
    }

    /** The last answer while it is fresh, else a new check's (one at a time). */
    private Checked answer() {
        Checked c = last;
        if (fresh(c)) {
            return c;
        }
        if (c != null) {
            if (!checking.tryLock()) {
                return c; // another probe is asking: no second call
            }
        } else {
            boolean locked;
            try {
                locked = checking.tryLock(timeout.toMillis() + 1000, TimeUnit.MILLISECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                locked = false;
            }
            if (!locked) {
                c = last;
                return c != null ? c : new Checked(null, "the first check, under way, did not end within " + (timeout.toMillis() + 1000) + "ms",
                        System.nanoTime(), Instant.now());
            }
        }
        try {
            c = last;
            if (fresh(c)) {
                return c;
            }
            try {
                c = new Checked(CoordinatorHealth.check(tandem, timeout), null, System.nanoTime(), Instant.now());
            } catch (RuntimeException e) {
                LOG.log(Level.FINE, "tandem: the health check failed", e);
                c = new Checked(null, e.toString(), System.nanoTime(), Instant.now());
            }
            last = c;
            return c;
        } finally {
            checking.unlock();
        }
    }

    private boolean fresh(Checked c) {
        return c != null && System.nanoTime() - c.at() < ttlNanos;
    }
}
