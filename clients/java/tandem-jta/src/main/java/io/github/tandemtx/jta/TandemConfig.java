package io.github.tandemtx.jta;

import java.nio.file.Path;
import java.time.Duration;
import java.util.Objects;

/**
 * How a {@link TandemTransactionManager} reaches its coordinator. Build one
 * with {@link #coordinator(String)} and the {@code with…} methods; it is
 * immutable.
 *
 * <pre>{@code
 * TandemConfig cfg = TandemConfig.coordinator("127.0.0.1:7070")
 *         .withAuthToken(System.getenv("TANDEM_TOKEN"))
 *         .withDecisionTimeout(Duration.ofSeconds(30));
 * }</pre>
 */
public final class TandemConfig {
    /** {@link #decisionTimeout()}'s default, as the Go SDK's. */
    public static final Duration DEFAULT_DECISION_TIMEOUT = Duration.ofSeconds(30);

    private final String coordinator;
    private final String authToken;
    private final Duration decisionTimeout;
    private final int defaultTimeoutSeconds;
    private final Path tlsCa;
    private final Path tlsCert;
    private final Path tlsKey;

    private TandemConfig(String coordinator, String authToken, Duration decisionTimeout, int defaultTimeoutSeconds,
            Path tlsCa, Path tlsCert, Path tlsKey) {
        this.coordinator = coordinator;
        this.authToken = authToken;
        this.decisionTimeout = decisionTimeout;
        this.defaultTimeoutSeconds = defaultTimeoutSeconds;
        this.tlsCa = tlsCa;
        this.tlsCert = tlsCert;
        this.tlsKey = tlsKey;
    }

    /**
     * A configuration for the coordinator at target, a gRPC target such as
     * {@code "127.0.0.1:7070"} or {@code "dns:///tandem.internal:7070"}
     * (plaintext; put TLS in front of the coordinator's port if the network is
     * not trusted).
     */
    public static TandemConfig coordinator(String target) {
        if (target == null || target.isBlank()) {
            throw new IllegalArgumentException("TandemConfig: the coordinator address is empty; want host:port of `tandem serve --listen`");
        }
        return new TandemConfig(target, null, DEFAULT_DECISION_TIMEOUT, 0, null, null, null);
    }

    /** Sends the coordinator's shared token ({@code --auth-token-file}) on every call as "authorization: Bearer …". */
    public TandemConfig withAuthToken(String token) {
        return new TandemConfig(coordinator, token, decisionTimeout, defaultTimeoutSeconds, tlsCa, tlsCert, tlsKey);
    }

    /**
     * Bounds how long a two-phase commit keeps asking the coordinator for its
     * decision (retrying while it is unreachable). Past it, commit throws
     * {@link OutcomeUnknownException}.
     */
    public TandemConfig withDecisionTimeout(Duration d) {
        if (d == null || d.isNegative() || d.isZero()) {
            throw new IllegalArgumentException("TandemConfig: decision timeout must be positive, got " + d);
        }
        return new TandemConfig(coordinator, authToken, d, defaultTimeoutSeconds, tlsCa, tlsCert, tlsKey);
    }

    /** The transaction timeout of transactions begun after no setTransactionTimeout (0: none). */
    public TandemConfig withDefaultTransactionTimeout(int seconds) {
        if (seconds < 0) {
            throw new IllegalArgumentException("TandemConfig: transaction timeout must not be negative, got " + seconds);
        }
        return new TandemConfig(coordinator, authToken, decisionTimeout, seconds, tlsCa, tlsCert, tlsKey);
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
        return new TandemConfig(coordinator, authToken, decisionTimeout, defaultTimeoutSeconds, caPem, tlsCert, tlsKey);
    }

    /**
     * Presents a client certificate (mutual TLS, {@code tandem serve
     * --tls-client-ca}); the key must be PEM, PKCS#8. Needs {@link #withTls}.
     */
    public TandemConfig withClientCertificate(Path certPem, Path keyPem) {
        if (certPem == null || keyPem == null) {
            throw new IllegalArgumentException("TandemConfig: a client certificate needs both the certificate and its key (PEM)");
        }
        return new TandemConfig(coordinator, authToken, decisionTimeout, defaultTimeoutSeconds, tlsCa, certPem, keyPem);
    }

    public String coordinator() {
        return coordinator;
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
        return "TandemConfig{coordinator=" + coordinator + ", authToken=" + (authToken == null ? "none" : "set")
                + ", decisionTimeout=" + decisionTimeout + ", defaultTransactionTimeout=" + defaultTimeoutSeconds + "s"
                + ", tls=" + (tlsCa == null ? "off" : tlsCa + (tlsCert != null ? ", client certificate " + tlsCert : "")) + "}";
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof TandemConfig c && c.coordinator.equals(coordinator) && Objects.equals(c.authToken, authToken)
                && c.decisionTimeout.equals(decisionTimeout) && c.defaultTimeoutSeconds == defaultTimeoutSeconds
                && Objects.equals(c.tlsCa, tlsCa) && Objects.equals(c.tlsCert, tlsCert) && Objects.equals(c.tlsKey, tlsKey);
    }

    @Override
    public int hashCode() {
        return Objects.hash(coordinator, decisionTimeout, defaultTimeoutSeconds);
    }
}
