package io.github.tandemtx.spring.boot;

import io.github.tandemtx.jta.TandemConfig;
import io.github.tandemtx.jta.TandemXid;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.temporal.ChronoUnit;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import org.springframework.boot.context.properties.ConfigurationProperties;
import org.springframework.boot.convert.DurationUnit;
import org.springframework.validation.Errors;
import org.springframework.validation.Validator;

/**
 * The {@code tandem.*} properties: how the application reaches its Tandem
 * coordinators, and which resource manager each of its DataSource beans is.
 * They validate themselves when bound: a wrong value stops the application
 * at start-up, the message naming the property ({@link #validate}).
 */
@ConfigurationProperties(prefix = "tandem")
public class TandemProperties implements Validator {
    /**
     * Whether the starter configures Tandem at all: its transaction manager,
     * Spring's JtaTransactionManager, and enlisting DataSources.
     */
    private boolean enabled = true;

    /**
     * The coordinators' addresses, host:port of `tandem serve --listen`: one,
     * or a primary and its standbys (the manager follows the primary), as a
     * comma-separated list or tandem.coordinators[0]=…, [1]=….
     */
    private List<String> coordinators = new ArrayList<>();

    /** The coordinator's shared token (its --auth-token-file's content), sent on every call. Or tandem.auth-token-file. */
    private String authToken;

    /** A file holding the coordinator's shared token (read once, at start-up; surrounding whitespace ignored). */
    private Path authTokenFile;

    private final Tls tls = new Tls();

    /**
     * Where a transaction with two or more writers is decided: AUTO (at a
     * database commit point when one can be, else by the coordinator) or
     * COORDINATOR (always by the coordinator).
     */
    private TandemConfig.DecideAt decideAt = TandemConfig.DecideAt.AUTO;

    /**
     * How long a commit keeps asking the coordinator for its decision (or,
     * after a commit point's connection broke, its decision table) before it
     * reports an unknown outcome.
     */
    private Duration decisionTimeout = TandemConfig.DEFAULT_DECISION_TIMEOUT;

    /**
     * The timeout of a transaction that sets none (@Transactional(timeout)
     * sets one), in whole seconds; 0: none. Past it the transaction is
     * marked rollback-only.
     */
    @DurationUnit(ChronoUnit.SECONDS)
    private Duration defaultTransactionTimeout = Duration.ZERO;

    /**
     * A commit point refuses to commit a transaction older than this by its
     * database's clock; at most 1h (the default).
     */
    private Duration maxTransactionAge = TandemConfig.MAX_TRANSACTION_AGE;

    /**
     * Whether the application checks at start-up that the coordinator
     * answers, serves, and knows every data source's resource manager, and
     * does not start otherwise.
     */
    private boolean verifyOnStartup = true;

    /**
     * Per DataSource bean, by bean name: its resource manager's name, and
     * whether and how it is wrapped in an enlisting TandemDataSource.
     */
    private Map<String, DataSourceProperties> datasources = new LinkedHashMap<>();

    /** TLS to the coordinator (tandem serve --tls-cert; mutual with --tls-client-ca). */
    public static class Tls {
        /** The CA certificate(s), PEM, that signed the coordinator's certificate; set, the client speaks TLS. */
        private Path ca;

        /** The client's certificate, PEM, for mutual TLS (with tandem.tls.client-key). */
        private Path clientCert;

        /** The client certificate's key, PEM, PKCS#8. */
        private Path clientKey;

        public Path getCa() {
            return ca;
        }

        public void setCa(Path ca) {
            this.ca = ca;
        }

        public Path getClientCert() {
            return clientCert;
        }

        public void setClientCert(Path clientCert) {
            this.clientCert = clientCert;
        }

        public Path getClientKey() {
            return clientKey;
        }

        public void setClientKey(Path clientKey) {
            this.clientKey = clientKey;
        }
    }

    /** The database behind a DataSource, when the starter cannot tell it from the DataSource's class or URL. */
    public enum Kind {
        POSTGRES,
        /** MariaDB, or MySQL through MariaDB Connector/J. */
        MARIADB
    }

    /** One DataSource bean's settings (tandem.datasources.BEAN.*). */
    public static class DataSourceProperties {
        /**
         * The resource manager's name, as the coordinator's --rm NAME=…
         * names it. Default: the DataSource bean's name.
         */
        private String rm;

        /** Whether this DataSource bean is wrapped in an enlisting TandemDataSource. */
        private boolean enabled = true;

        /** POSTGRES or MARIADB, when the starter cannot tell it from the DataSource (its class, or HikariCP's URL or driver). */
        private Kind kind;

        /**
         * The TandemDataSource's pool size. Default: HikariCP's
         * maximum-pool-size less one for a HikariCP source (README, "Pools"),
         * else 16.
         */
        private Integer maxPoolSize;

        /**
         * How long getConnection waits for a free connection. Default:
         * HikariCP's connection-timeout for a HikariCP source, else 30s.
         */
        private Duration acquireTimeout;

        public String getRm() {
            return rm;
        }

        public void setRm(String rm) {
            this.rm = rm;
        }

        public boolean isEnabled() {
            return enabled;
        }

        public void setEnabled(boolean enabled) {
            this.enabled = enabled;
        }

        public Kind getKind() {
            return kind;
        }

        public void setKind(Kind kind) {
            this.kind = kind;
        }

        public Integer getMaxPoolSize() {
            return maxPoolSize;
        }

        public void setMaxPoolSize(Integer maxPoolSize) {
            this.maxPoolSize = maxPoolSize;
        }

        public Duration getAcquireTimeout() {
            return acquireTimeout;
        }

        public void setAcquireTimeout(Duration acquireTimeout) {
            this.acquireTimeout = acquireTimeout;
        }
    }

    public boolean isEnabled() {
        return enabled;
    }

    public void setEnabled(boolean enabled) {
        this.enabled = enabled;
    }

    public List<String> getCoordinators() {
        return coordinators;
    }

    public void setCoordinators(List<String> coordinators) {
        this.coordinators = coordinators;
    }

    public String getAuthToken() {
        return authToken;
    }

    public void setAuthToken(String authToken) {
        this.authToken = authToken;
    }

    public Path getAuthTokenFile() {
        return authTokenFile;
    }

    public void setAuthTokenFile(Path authTokenFile) {
        this.authTokenFile = authTokenFile;
    }

    public Tls getTls() {
        return tls;
    }

    public TandemConfig.DecideAt getDecideAt() {
        return decideAt;
    }

    public void setDecideAt(TandemConfig.DecideAt decideAt) {
        this.decideAt = decideAt;
    }

    public Duration getDecisionTimeout() {
        return decisionTimeout;
    }

    public void setDecisionTimeout(Duration decisionTimeout) {
        this.decisionTimeout = decisionTimeout;
    }

    public Duration getDefaultTransactionTimeout() {
        return defaultTransactionTimeout;
    }

    public void setDefaultTransactionTimeout(Duration defaultTransactionTimeout) {
        this.defaultTransactionTimeout = defaultTransactionTimeout;
    }

    public Duration getMaxTransactionAge() {
        return maxTransactionAge;
    }

    public void setMaxTransactionAge(Duration maxTransactionAge) {
        this.maxTransactionAge = maxTransactionAge;
    }

    public boolean isVerifyOnStartup() {
        return verifyOnStartup;
    }

    public void setVerifyOnStartup(boolean verifyOnStartup) {
        this.verifyOnStartup = verifyOnStartup;
    }

    public Map<String, DataSourceProperties> getDatasources() {
        return datasources;
    }

    public void setDatasources(Map<String, DataSourceProperties> datasources) {
        this.datasources = datasources;
    }

    /**
     * The settings of DataSource bean name: tandem.datasources.NAME.*, the
     * key matched as written, then ignoring case and dashes (a properties
     * file's keys may be lower-cased or dashed by Spring's relaxed binding:
     * dataSource, datasource, data-source); defaults when there are none.
     */
    public DataSourceProperties dataSource(String name) {
        DataSourceProperties p = datasources.get(name);
        if (p != null) {
            return p;
        }
        String want = canonical(name);
        for (Map.Entry<String, DataSourceProperties> e : datasources.entrySet()) {
            if (canonical(e.getKey()).equals(want)) {
                return e.getValue();
            }
        }
        return new DataSourceProperties();
    }

    private static String canonical(String key) {
        return key.replace("-", "").toLowerCase(Locale.ROOT);
    }

    /** The token: tandem.auth-token, or tandem.auth-token-file's content (null: none). */
    String token() {
        if (authToken != null && !authToken.isEmpty()) {
            return authToken;
        }
        if (authTokenFile == null) {
            return null;
        }
        try {
            return Files.readString(authTokenFile, StandardCharsets.UTF_8).strip();
        } catch (IOException e) {
            throw new IllegalStateException("tandem.auth-token-file=" + authTokenFile + " cannot be read: " + e, e);
        }
    }

    /** The tandem-jta configuration these properties make; call once they validated. */
    public TandemConfig toConfig() {
        TandemConfig c = TandemConfig.coordinators(coordinators.toArray(String[]::new))
                .withDecideAt(decideAt)
                .withDecisionTimeout(decisionTimeout)
                .withDefaultTransactionTimeout((int) defaultTransactionTimeout.toSeconds())
                .withMaxTransactionAge(maxTransactionAge);
        String t = token();
        if (t != null) {
            c = c.withAuthToken(t);
        }
        if (tls.ca != null) {
            c = c.withTls(tls.ca);
            if (tls.clientCert != null) {
                c = c.withClientCertificate(tls.clientCert, tls.clientKey);
            }
        }
        return c;
    }

    @Override
    public boolean supports(Class<?> clazz) {
        return TandemProperties.class.isAssignableFrom(clazz);
    }

    /**
     * Checks the properties when Spring Boot binds them. Each error is on
     * the property's own name (tandem.decision-timeout, …), so that Boot's
     * start-up failure report says "Property: tandem.… Value: … Reason: …".
     * Nothing is checked when tandem.enabled=false.
     */
    @Override
    public void validate(Object target, Errors errors) {
        TandemProperties p = (TandemProperties) target;
        if (!p.enabled) {
            return;
        }
        if (p.coordinators == null || p.coordinators.isEmpty()) {
            errors.rejectValue("coordinators", "tandem.coordinators.missing",
                    "no coordinator address: set tandem.coordinators to host:port of `tandem serve --listen` (a primary and its standbys: a comma-separated list)");
        } else {
            try {
                TandemConfig.coordinators(p.coordinators.toArray(String[]::new));
            } catch (IllegalArgumentException e) {
                errors.rejectValue("coordinators", "tandem.coordinators.invalid", e.getMessage());
            }
        }
        boolean token = p.authToken != null && !p.authToken.isEmpty();
        if (token && p.authTokenFile != null) {
            errors.rejectValue("auth-token-file", "tandem.auth-token.both", "set tandem.auth-token or tandem.auth-token-file, not both");
        } else if (p.authTokenFile != null) {
            if (!Files.isReadable(p.authTokenFile)) {
                errors.rejectValue("auth-token-file", "tandem.auth-token-file.unreadable", "no readable file " + p.authTokenFile.toAbsolutePath());
            } else {
                try {
                    if (Files.readString(p.authTokenFile, StandardCharsets.UTF_8).isBlank()) {
                        errors.rejectValue("auth-token-file", "tandem.auth-token-file.empty", "the file " + p.authTokenFile + " is empty");
                    }
                } catch (IOException e) {
                    errors.rejectValue("auth-token-file", "tandem.auth-token-file.unreadable", "cannot read " + p.authTokenFile + ": " + e);
                }
            }
        }
        Tls t = p.tls;
        checkFile(errors, "tls.ca", t.ca);
        checkFile(errors, "tls.client-cert", t.clientCert);
        checkFile(errors, "tls.client-key", t.clientKey);
        if ((t.clientCert == null) != (t.clientKey == null)) {
            errors.rejectValue(t.clientCert == null ? "tls.client-cert" : "tls.client-key", "tandem.tls.client.half",
                    "a client certificate needs both tandem.tls.client-cert and tandem.tls.client-key");
        } else if (t.clientCert != null && t.ca == null) {
            errors.rejectValue("tls.ca", "tandem.tls.ca.missing",
                    "a client certificate is for TLS: set tandem.tls.ca to the CA file (PEM) that signed the coordinator's certificate");
        }
        if (p.decideAt == null) {
            errors.rejectValue("decide-at", "tandem.decide-at.missing", "want AUTO or COORDINATOR");
        }
        if (p.decisionTimeout == null || p.decisionTimeout.isNegative() || p.decisionTimeout.isZero()) {
            errors.rejectValue("decision-timeout", "tandem.decision-timeout.invalid", "must be positive, e.g. 30s");
        }
        Duration d = p.defaultTransactionTimeout;
        if (d == null || d.isNegative()) {
            errors.rejectValue("default-transaction-timeout", "tandem.default-transaction-timeout.invalid", "must be 0 (none) or positive");
        } else if (d.toNanos() % 1_000_000_000L != 0 || d.toSeconds() > Integer.MAX_VALUE) {
            errors.rejectValue("default-transaction-timeout", "tandem.default-transaction-timeout.invalid",
                    "JTA timeouts are whole seconds: want e.g. 30s, got " + d);
        }
        Duration age = p.maxTransactionAge;
        if (age == null || age.isNegative() || age.isZero() || age.compareTo(TandemConfig.MAX_TRANSACTION_AGE) > 0) {
            errors.rejectValue("max-transaction-age", "tandem.max-transaction-age.invalid",
                    "must be positive and at most " + TandemConfig.MAX_TRANSACTION_AGE.toMinutes() + "m");
        }
        for (Map.Entry<String, DataSourceProperties> e : p.datasources.entrySet()) {
            DataSourceProperties ds = e.getValue();
            String at = "datasources[" + e.getKey() + "].";
            if (ds.rm != null) {
                try {
                    TandemXid.validateRmName(ds.rm);
                } catch (IllegalArgumentException ex) {
                    errors.rejectValue(at + "rm", "tandem.datasources.rm.invalid", ex.getMessage());
                }
            }
            if (ds.maxPoolSize != null && ds.maxPoolSize < 1) {
                errors.rejectValue(at + "max-pool-size", "tandem.datasources.max-pool-size.invalid", "must be at least 1");
            }
            if (ds.acquireTimeout != null && (ds.acquireTimeout.isNegative() || ds.acquireTimeout.isZero())) {
                errors.rejectValue(at + "acquire-timeout", "tandem.datasources.acquire-timeout.invalid", "must be positive, e.g. 30s");
            }
        }
    }

    private static void checkFile(Errors errors, String property, Path f) {
        if (f != null && !Files.isReadable(f)) {
            errors.rejectValue(property, "tandem." + property + ".unreadable", "no readable file " + f.toAbsolutePath());
        }
    }
}
