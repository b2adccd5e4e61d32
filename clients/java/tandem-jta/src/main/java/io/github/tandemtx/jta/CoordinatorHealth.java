package io.github.tandemtx.jta;

import io.grpc.StatusRuntimeException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import tandem.v1.Tandem.HealthResponse;
import tandem.v1.Tandem.RMHealth;

/**
 * What a transaction manager's coordinator says of itself, for a health
 * check (Spring Boot Actuator's "tandem" indicator): whether it answered, whether
 * it serves (can decide: a primary), its role, and the resource managers it
 * recovers. {@link #check} asks the coordinator in use, or, with several
 * addresses, the one that serves (as {@link TandemTransactionManager#verify()}
 * does); it never throws. Immutable.
 */
public final class CoordinatorHealth {
    /** A resource manager as the coordinator sees it: whether it reaches it, and why not. */
    public record Rm(String name, String driver, boolean reachable, String error) {
    }

    private final String address;
    private final String error;
    private final boolean serving;
    private final String role;
    private final String version;
    private final String message;
    private final long unfinished;
    private final List<Rm> rms;

    private CoordinatorHealth(String address, String error, boolean serving, String role, String version, String message, long unfinished,
            List<Rm> rms) {
        this.address = address;
        this.error = error;
        this.serving = serving;
        this.role = role;
        this.version = version;
        this.message = message;
        this.unfinished = unfinished;
        this.rms = List.copyOf(rms);
    }

    /**
     * Asks tm's coordinator for its Health within timeout: the one in use,
     * or, when it cannot be reached or does not serve and others are
     * configured, the one that serves (the manager then sends its calls
     * there). One call when the coordinator in use serves.
     */
    public static CoordinatorHealth check(TandemTransactionManager tm, Duration timeout) {
        CoordinatorClient c = tm.coordinator();
        HealthResponse h;
        try {
            h = c.healthOfPrimary(timeout);
        } catch (StatusRuntimeException e) {
            String others = tm.config().coordinators().size() > 1 ? " (nor did another of " + c.targets() + " serve)" : "";
            return new CoordinatorHealth(c.target(), "did not answer Health: " + CoordinatorClient.describe(e) + others, false, null, null, null, 0,
                    List.of());
        }
        List<Rm> rms = new ArrayList<>();
        for (RMHealth r : h.getRmsList()) {
            rms.add(new Rm(r.getName(), r.getDriver(), r.getReachable(), r.getError().isEmpty() ? null : r.getError()));
        }
        return new CoordinatorHealth(c.target(), null, h.getServing(), role(h.getMessage()), h.getVersion(), h.getMessage(), h.getUnfinished(), rms);
    }

    /** The role from Health's "role=…" line ("primary", "standby", "DEMOTED", "FENCED"), or null when it has none. */
    static String role(String message) {
        for (String l : message.split("\n")) {
            if (l.startsWith("role=")) {
                String r = l.substring(5);
                int sp = r.indexOf(' ');
                return sp < 0 ? r : r.substring(0, sp);
            }
        }
        return null;
    }

    /** The coordinator asked: the one in use after the check. */
    public String address() {
        return address;
    }

    /** Whether it answered Health. */
    public boolean reachable() {
        return error == null;
    }

    /** Why it did not answer (the address, the gRPC status), or null when it did. */
    public String error() {
        return error;
    }

    /** Whether it can decide transactions (a primary whose log is writable). */
    public boolean serving() {
        return serving;
    }

    /** Its role ("primary", "standby", …), or null when it did not say (or did not answer). */
    public String role() {
        return role;
    }

    /** Its version, or null when it did not answer. */
    public String version() {
        return version;
    }

    /** Health's message (role, cluster, epoch, standby state), or null when it did not answer. */
    public String message() {
        return message;
    }

    /** Decided transactions whose phase 2 is not done. */
    public long unfinished() {
        return unfinished;
    }

    /** The resource managers it recovers, as it sees them (empty when it did not answer). */
    public List<Rm> rms() {
        return rms;
    }

    /** Of names, the ones the coordinator does not recover (all of them when it did not answer), sorted. */
    public Set<String> missing(Collection<String> names) {
        Set<String> out = new TreeSet<>(names);
        for (Rm r : rms) {
            out.remove(r.name());
        }
        return out;
    }

    /** Whether it answered, serves, and recovers every one of names. */
    public boolean isUp(Collection<String> names) {
        return reachable() && serving && missing(names).isEmpty();
    }

    @Override
    public String toString() {
        if (error != null) {
            return "CoordinatorHealth{" + address + " " + error + "}";
        }
        return "CoordinatorHealth{" + address + (serving ? " serving" : " NOT serving") + ", role=" + role + ", rms=" + rms + "}";
    }
}
