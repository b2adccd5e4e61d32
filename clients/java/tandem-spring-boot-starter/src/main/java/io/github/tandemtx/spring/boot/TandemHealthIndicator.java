package io.github.tandemtx.spring.boot;

import io.github.tandemtx.jta.CoordinatorHealth;
import io.github.tandemtx.jta.TandemDataSource;
import io.github.tandemtx.jta.TandemTransactionManager;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import org.springframework.beans.factory.ObjectProvider;
import org.springframework.boot.actuate.health.AbstractHealthIndicator;
import org.springframework.boot.actuate.health.Health;

/**
 * Actuator's "tandem" health: UP when the coordinator answers, serves (a
 * primary that can decide) and knows the resource manager of every
 * TandemDataSource bean; DOWN otherwise, saying which. Details: the
 * coordinator's address, role, version, unfinished phase 2s, the resource
 * managers it recovers (and whether it reaches each), the application's.
 * Each check is one Health call (more when the coordinator in use does
 * not serve and others are configured), bounded by the timeout.
 */
public class TandemHealthIndicator extends AbstractHealthIndicator {
    /** How long one check waits for the coordinator. */
    public static final Duration TIMEOUT = Duration.ofSeconds(3);

    private final TandemTransactionManager tandem;
    private final ObjectProvider<TandemDataSource> dataSources;

    public TandemHealthIndicator(TandemTransactionManager tandem, ObjectProvider<TandemDataSource> dataSources) {
        super("tandem: coordinator health check failed");
        this.tandem = tandem;
        this.dataSources = dataSources;
    }

    @Override
    protected void doHealthCheck(Health.Builder b) {
        Set<String> rms = new TreeSet<>();
        dataSources.orderedStream().forEach(d -> rms.add(d.rmName()));
        CoordinatorHealth h = CoordinatorHealth.check(tandem, TIMEOUT);
        b.withDetail("coordinator", h.address()).withDetail("dataSources", rms);
        if (!h.reachable()) {
            b.down().withDetail("error", h.error());
            return;
        }
        Map<String, Object> known = new LinkedHashMap<>();
        for (CoordinatorHealth.Rm r : h.rms()) {
            known.put(r.name(), r.reachable() ? "reachable" : "unreachable: " + r.error());
        }
        b.withDetail("serving", h.serving()).withDetail("role", h.role() == null ? "unknown" : h.role()).withDetail("version", h.version())
                .withDetail("unfinished", h.unfinished()).withDetail("rms", known);
        Set<String> missing = h.missing(rms);
        if (!missing.isEmpty()) {
            b.withDetail("missing", missing);
        }
        if (h.isUp(rms)) {
            b.up();
        } else {
            b.down();
        }
    }
}
