package io.github.tandemtx.jta;

import io.opentelemetry.api.OpenTelemetry;
import io.opentelemetry.api.trace.TracerProvider;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;

/**
 * How a {@link TandemTransactionManager} reaches its coordinator. Build one
 * with {@link #coordinator(String)} (one coordinator) or
 * {@link #coordinators(String...)} (a primary and its standbys: the manager
 * follows the primary) and the {@code with…} methods; it is immutable.
 *
 * <pre>{@code
 * TandemConfig cfg = TandemConfig.coordinators("10.0.0.1:7070", "10.0.0.2:7070")
 *         .withAuthToken(System.getenv("TANDEM_TOKEN"))
 *         .withDecisionTimeout(Duration.ofSeconds(30));
 * }</pre>
 */
public final class TandemConfig {
    /** {@link #decisionTimeout()}'s default, as the Go SDK's. */
    public static final Duration DEFAULT_DECISION_TIMEOUT = Duration.ofSeconds(30);

    /** {@link #maxTransactionAge()}'s default and largest value, as the Go SDK's and the coordinator's. */
    public static final Duration MAX_TRANSACTION_AGE = Duration.ofHours(1);

    /** Where a transaction with two or more writers is decided. */
    public enum DecideAt {
        /**
         * In the databases when one can be the commit point (the default): a
         * MariaDB branch that begins first (an XA branch of its own), else a
         * PostgreSQL writer; its local COMMIT, with the decision row in its
         * {@code tandem_decision} table, is the decision. No coordinator call.
         * Otherwise the coordinator decides.
         */
        AUTO,
        /** Always by the coordinator: every writer prepares, then one Commit call. */
        COORDINATOR
    }

    /** The most coordinator addresses a configuration takes (every probe asks each one's Health at once). */
    public static final int MAX_COORDINATORS = 16;

    private List<String> coordinators;
    private String authToken;
    private Duration decisionTimeout = DEFAULT_DECISION_TIMEOUT;
    private int defaultTimeoutSeconds;
    private Path tlsCa;
    private Path tlsCert;
    private Path tlsKey;
    private DecideAt decideAt = DecideAt.AUTO;
    private Duration maxTransactionAge = MAX_TRANSACTION_AGE;
    private TracerProvider tracerProvider;

    private TandemConfig() {
    }

    private TandemConfig copy() {
        TandemConfig c = new TandemConfig();
        c.coordinators = coordinators;
        c.authToken = authToken;
        c.decisionTimeout = decisionTimeout;
        c.defaultTimeoutSeconds = defaultTimeoutSeconds;
        c.tlsCa = tlsCa;
        c.tlsCert = tlsCert;
        c.tlsKey = tlsKey;
        c.decideAt = decideAt;
        c.maxTransactionAge = maxTransactionAge;
        c.tracerProvider = tracerProvider;
        return c;
    }

    /**
     * A configuration for the coordinator at target, a gRPC target such as
     * {@code "127.0.0.1:7070"} or {@code "dns:///tandem.internal:7070"}
     * (plaintext unless {@link #withTls}).
     */
    public static TandemConfig coordinator(String target) {
        return coordinators(target);
    }

    /** host:port, [v6]:port; anything with "://" or "unix:" is a gRPC target name resolved as such. */
    private static final java.util.regex.Pattern HOST_PORT = java.util.regex.Pattern.compile("(\\[[^\\]]+\\]|[^:\\[\\]]+):(\\d{1,5})");

    /** Refuses an address the gRPC channel would take and never reach (the Go SDK's addrhint.CheckAPIAddr). */
    private static void checkAddress(String t) {
        if (t.chars().anyMatch(Character::isWhitespace)) {
            throw new IllegalArgumentException("TandemConfig: coordinator address \"" + t + "\" has whitespace; want host:port of `tandem serve --listen`");
        }
        if (t.contains(",")) {
            throw new IllegalArgumentException("TandemConfig: coordinator address \"" + t + "\" holds several; give each on its own: TandemConfig.coordinators(\""
                    + String.join("\", \"", t.split(",")) + "\")");
        }
        if (t.contains("://") || t.startsWith("unix:")) {
            return;
        }
        java.util.regex.Matcher m = HOST_PORT.matcher(t);
        if (!m.matches()) {
            if (!t.contains(":") || (t.startsWith("[") && t.endsWith("]"))) {
                throw new IllegalArgumentException("TandemConfig: coordinator address \"" + t + "\" has no port (gRPC would dial port 443): did you mean \""
                        + t + ":7070\"?");
            }
            throw new IllegalArgumentException("TandemConfig: coordinator address \"" + t + "\": want host:port, e.g. 127.0.0.1:7070, or a gRPC target such as dns:///host:7070");
        }
        int port = Integer.parseInt(m.group(2));
        if (port < 1 || port > 65535) {
            throw new IllegalArgumentException("TandemConfig: coordinator address \"" + t + "\": port " + port + " is not 1-65535");
        }
    }

    /**
     * A configuration for a cluster of coordinators: a primary and its
     * standbys ({@code tandem serve --standby-of}), each a gRPC target as in
     * {@link #coordinator(String)}, with the same TLS settings and token. The
     * manager sends every call to the one it last found serving, the first
     * until then; when that one refuses as a non-primary or cannot be reached,
     * it asks every address's Health and moves to the one that serves
     * (README, "Following the primary"). An address listed twice counts once.
     * List only one cluster's coordinators: the manager never follows one of
     * another cluster (Health's {@code cluster=}).
     *
     * @throws IllegalArgumentException when no address is given, one is empty,
     *     has whitespace or a comma, is host without :port (gRPC would dial port
     *     443), or more than {@link #MAX_COORDINATORS} are given
     */
    public static TandemConfig coordinators(String... targets) {
        if (targets == null || targets.length == 0) {
            throw new IllegalArgumentException("TandemConfig: no coordinator address; want host:port of `tandem serve --listen` (one per coordinator of the cluster)");
        }
        List<String> out = new ArrayList<>();
        for (int i = 0; i < targets.length; i++) {
            String t = targets[i];
            if (t == null || t.isBlank()) {
                throw new IllegalArgumentException("TandemConfig: " + (targets.length == 1 ? "the coordinator address"
                        : "coordinator address " + (i + 1) + " of " + targets.length) + " is empty; want host:port of `tandem serve --listen`");
            }
            checkAddress(t);
            if (!out.contains(t)) {
                out.add(t);
            }
        }
        if (out.size() > MAX_COORDINATORS) {
            throw new IllegalArgumentException("TandemConfig: " + out.size() + " coordinator addresses, more than " + MAX_COORDINATORS
                    + ": list a cluster's primary and its standbys (every probe asks each one's Health at once)");
        }
        TandemConfig c = new TandemConfig();
        c.coordinators = List.copyOf(out);
        return c;
    }

    /** Sends the coordinator's shared token ({@code --auth-token-file}) on every call as "authorization: Bearer …". */
    public TandemConfig withAuthToken(String token) {
        TandemConfig c = copy();
        c.authToken = token;
        return c;
    }

    /**
     * Bounds how long a two-phase commit keeps asking the coordinator for its
     * decision (retrying while it is unreachable), or, after a commit point's
     * connection broke, how long it tries to learn the outcome from the commit
     * point's decision table. Past it, commit throws
     * {@link OutcomeUnknownException}.
     */
    public TandemConfig withDecisionTimeout(Duration d) {
        if (d == null || d.isNegative() || d.isZero()) {
            throw new IllegalArgumentException("TandemConfig: decision timeout must be positive, got " + d);
        }
        TandemConfig c = copy();
        c.decisionTimeout = d;
        return c;
    }

    /** The transaction timeout of transactions begun after no setTransactionTimeout (0: none). */
    public TandemConfig withDefaultTransactionTimeout(int seconds) {
        if (seconds < 0) {
            throw new IllegalArgumentException("TandemConfig: transaction timeout must not be negative, got " + seconds);
        }
        TandemConfig c = copy();
        c.defaultTimeoutSeconds = seconds;
        return c;
    }

    /**
     * Speaks TLS to the coordinator ({@code tandem serve --tls-cert}),
     * trusting the CA certificates in caPem (PEM). Off loopback the
     * coordinator serves TLS only.
     */
    public TandemConfig withTls(Path caPem) {
        if (caPem == null) {
            throw new IllegalArgumentException("TandemConfig: withTls needs the CA file (PEM) that signed the coordinator's certificate");
        }
        TandemConfig c = copy();
        c.tlsCa = caPem;
        return c;
    }

    /**
     * Presents a client certificate (mutual TLS, {@code tandem serve
     * --tls-client-ca}); the key must be PEM, PKCS#8. Needs {@link #withTls}.
     */
    public TandemConfig withClientCertificate(Path certPem, Path keyPem) {
        if (certPem == null || keyPem == null) {
            throw new IllegalArgumentException("TandemConfig: a client certificate needs both the certificate and its key (PEM)");
        }
        TandemConfig c = copy();
        c.tlsCert = certPem;
        c.tlsKey = keyPem;
        return c;
    }

    /** Where transactions with two or more writers are decided ({@link DecideAt#AUTO} by default). */
    public TandemConfig withDecideAt(DecideAt where) {
        if (where == null) {
            throw new IllegalArgumentException("TandemConfig: decideAt must be AUTO or COORDINATOR, got null");
        }
        TandemConfig c = copy();
        c.decideAt = where;
        return c;
    }

    /**
     * A commit point refuses to record COMMIT for a transaction that began
     * longer ago than this by its database's clock (the transaction then rolls
     * back everywhere): a recoverer may take the decision after that long.
     * At most {@link #MAX_TRANSACTION_AGE}, which is also the default.
     */
    public TandemConfig withMaxTransactionAge(Duration d) {
        if (d == null || d.isNegative() || d.isZero() || d.compareTo(MAX_TRANSACTION_AGE) > 0) {
            throw new IllegalArgumentException("TandemConfig: max transaction age must be positive and at most " + MAX_TRANSACTION_AGE
                    + " (the longest coordinators keep the abort decisions that refuse a late commit point), got " + d);
        }
        TandemConfig c = copy();
        c.maxTransactionAge = d;
        return c;
    }

    /**
     * Makes the transactions' OpenTelemetry spans with otel's tracer
     * provider (README, "Traces"). Without it, the global OpenTelemetry's
     * once the application (or the OpenTelemetry Java agent) installed one,
     * and no span at all until then: the manager never installs the global
     * itself. Its propagators are not used: the coordinator's calls always
     * carry the W3C trace context.
     */
    public TandemConfig withOpenTelemetry(OpenTelemetry otel) {
        if (otel == null) {
            throw new IllegalArgumentException("TandemConfig: withOpenTelemetry needs an OpenTelemetry (OpenTelemetry.noop() for no spans)");
        }
        return withTracerProvider(otel.getTracerProvider());
    }

    /** As {@link #withOpenTelemetry}, with the tracer provider alone. */
    public TandemConfig withTracerProvider(TracerProvider tp) {
        if (tp == null) {
            throw new IllegalArgumentException("TandemConfig: withTracerProvider needs a TracerProvider (TracerProvider.noop() for no spans)");
        }
        TandemConfig c = copy();
        c.tracerProvider = tp;
        return c;
    }

    /** The tracer provider of the transactions' spans; null: the global OpenTelemetry's, once installed. */
    public TracerProvider tracerProvider() {
        return tracerProvider;
    }

    public DecideAt decideAt() {
        return decideAt;
    }

    public Duration maxTransactionAge() {
        return maxTransactionAge;
    }

    /** The first configured coordinator address (the one tried first). */
    public String coordinator() {
        return coordinators.get(0);
    }

    /** Every configured coordinator address, each once, in the order given (unmodifiable). */
    public List<String> coordinators() {
        return coordinators;
    }

    String authToken() {
        return authToken;
    }

    Path tlsCa() {
        return tlsCa;
    }

    Path tlsCert() {
        return tlsCert;
    }

    Path tlsKey() {
        return tlsKey;
    }

    public Duration decisionTimeout() {
        return decisionTimeout;
    }

    public int defaultTransactionTimeout() {
        return defaultTimeoutSeconds;
    }

    @Override
    public String toString() {
        return "TandemConfig{" + (coordinators.size() == 1 ? "coordinator=" + coordinators.get(0) : "coordinators=" + coordinators) + ", authToken=" + (authToken == null ? "none" : "set")
                + ", decisionTimeout=" + decisionTimeout + ", defaultTransactionTimeout=" + defaultTimeoutSeconds + "s"
                + ", tls=" + (tlsCa == null ? "off" : tlsCa + (tlsCert != null ? ", client certificate " + tlsCert : ""))
                + ", decideAt=" + decideAt + ", maxTransactionAge=" + maxTransactionAge
                + ", traces=" + (tracerProvider == null ? "global OpenTelemetry" : tracerProvider.getClass().getSimpleName()) + "}";
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof TandemConfig c && c.coordinators.equals(coordinators) && Objects.equals(c.authToken, authToken)
                && c.decisionTimeout.equals(decisionTimeout) && c.defaultTimeoutSeconds == defaultTimeoutSeconds
                && Objects.equals(c.tlsCa, tlsCa) && Objects.equals(c.tlsCert, tlsCert) && Objects.equals(c.tlsKey, tlsKey)
                && c.decideAt == decideAt && c.maxTransactionAge.equals(maxTransactionAge) && c.tracerProvider == tracerProvider;
    }

    @Override
    public int hashCode() {
        return Objects.hash(coordinators, decisionTimeout, defaultTimeoutSeconds);
    }
}
