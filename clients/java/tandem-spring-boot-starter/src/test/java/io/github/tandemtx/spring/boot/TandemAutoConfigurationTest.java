package io.github.tandemtx.spring.boot;

import static org.assertj.core.api.Assertions.assertThat;

import com.zaxxer.hikari.HikariDataSource;
import io.github.tandemtx.jta.TandemConfig;
import io.github.tandemtx.jta.TandemDataSource;
import io.github.tandemtx.jta.TandemTransactionManager;
import io.github.tandemtx.jta.metrics.TandemMetrics;
import java.io.IOException;
import java.io.PrintWriter;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.SQLException;
import java.time.Duration;
import java.util.logging.Logger;
import javax.sql.DataSource;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.mariadb.jdbc.MariaDbDataSource;
import org.postgresql.ds.PGSimpleDataSource;
import org.springframework.boot.actuate.autoconfigure.health.HealthContributorAutoConfiguration;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.autoconfigure.transaction.TransactionAutoConfiguration;
import org.springframework.boot.diagnostics.FailureAnalysis;
import org.springframework.boot.test.context.FilteredClassLoader;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.transaction.PlatformTransactionManager;
import org.springframework.transaction.jta.JtaTransactionManager;
import org.springframework.transaction.support.AbstractPlatformTransactionManager;
import org.springframework.transaction.support.DefaultTransactionStatus;

/**
 * The starter's conditions and property checks, with no database and no
 * coordinator (the start-up check off, or pointed at a port nobody
 * listens on): which beans exist, what the DataSource beans become, and the
 * message a wrong property stops the application with.
 */
class TandemAutoConfigurationTest {
    private final ApplicationContextRunner runner = new ApplicationContextRunner()
            .withConfiguration(AutoConfigurations.of(TandemAutoConfiguration.class, TandemHealthContributorAutoConfiguration.class,
                    TandemMetricsAutoConfiguration.class, TransactionAutoConfiguration.class, HealthContributorAutoConfiguration.class))
            .withPropertyValues("tandem.coordinators=127.0.0.1:7070", "tandem.verify-on-startup=false");

    /** The start-up failure's whole cause chain, as text. */
    private static String failure(org.springframework.boot.test.context.assertj.AssertableApplicationContext ctx) {
        StringBuilder s = new StringBuilder();
        for (Throwable t = ctx.getStartupFailure(); t != null; t = t.getCause()) {
            s.append(t).append('\n');
        }
        return s.toString();
    }

    @Test
    void theBeansOfAnApplicationWithNoneOfItsOwn() {
        runner.run(ctx -> {
            assertThat(ctx).hasNotFailed();
            assertThat(ctx).hasSingleBean(TandemTransactionManager.class);
            assertThat(ctx).hasSingleBean(TandemProperties.class);
            assertThat(ctx.getBean(PlatformTransactionManager.class)).isInstanceOf(JtaTransactionManager.class);
            JtaTransactionManager jta = ctx.getBean(JtaTransactionManager.class);
            TandemTransactionManager tm = ctx.getBean(TandemTransactionManager.class);
            assertThat(jta.getTransactionManager()).isSameAs(tm);
            assertThat(jta.getUserTransaction()).isSameAs(tm);
            assertThat(jta.getTransactionSynchronizationRegistry()).isSameAs(tm.synchronizationRegistry());
            assertThat(ctx).hasSingleBean(TandemDataSourcePostProcessor.class);
            assertThat(ctx).hasSingleBean(TandemMetrics.class);
            assertThat(ctx).hasSingleBean(TandemHealthIndicator.class);
            assertThat(ctx).doesNotHaveBean("tandemStartupVerifier");
            assertThat(tm.config()).isEqualTo(TandemConfig.coordinator("127.0.0.1:7070"));
        });
    }

    @Test
    void everyPropertyReachesTheConfiguration(@TempDir Path dir) throws IOException {
        Path token = Files.writeString(dir.resolve("token"), "s3cret\n");
        // A self-signed certificate: the CA, and the client's (the manager reads them when it is made).
        Path cert = dir.resolve("client.pem"), key = dir.resolve("client.key");
        try {
            Process p = new ProcessBuilder("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key.toString(), "-out", cert.toString(),
                    "-subj", "/CN=tandem-test", "-days", "1").redirectErrorStream(true).start();
            String out = new String(p.getInputStream().readAllBytes());
            assertThat(p.waitFor()).as(out).isZero();
        } catch (InterruptedException e) {
            throw new IOException(e);
        }
        Path ca = cert;
        runner.withPropertyValues("tandem.coordinators=10.0.0.1:7070,10.0.0.2:7070", "tandem.auth-token-file=" + token, "tandem.tls.ca=" + ca,
                "tandem.tls.client-cert=" + cert, "tandem.tls.client-key=" + key, "tandem.decide-at=coordinator", "tandem.decision-timeout=5s",
                "tandem.default-transaction-timeout=20", "tandem.max-transaction-age=10m").run(ctx -> {
                    assertThat(ctx).hasNotFailed();
                    TandemConfig want = TandemConfig.coordinators("10.0.0.1:7070", "10.0.0.2:7070").withAuthToken("s3cret").withTls(ca)
                            .withClientCertificate(cert, key).withDecideAt(TandemConfig.DecideAt.COORDINATOR)
                            .withDecisionTimeout(Duration.ofSeconds(5)).withDefaultTransactionTimeout(20).withMaxTransactionAge(Duration.ofMinutes(10));
                    assertThat(ctx.getBean(TandemTransactionManager.class).config()).isEqualTo(want);
                });
    }

    @Test
    void bootsTransactionCustomizationsApply() {
        runner.withConfiguration(AutoConfigurations.of(
                org.springframework.boot.autoconfigure.transaction.TransactionManagerCustomizationAutoConfiguration.class))
                .withPropertyValues("spring.transaction.default-timeout=7s", "spring.transaction.rollback-on-commit-failure=true").run(ctx -> {
                    assertThat(ctx).hasNotFailed();
                    JtaTransactionManager jta = ctx.getBean(JtaTransactionManager.class);
                    assertThat(jta.getDefaultTimeout()).isEqualTo(7);
                    assertThat(jta.isRollbackOnCommitFailure()).isTrue();
                });
    }

    @Test
    void aTransactionManagerOfTheApplicationsOwnIsKept() {
        runner.withUserConfiguration(OwnTransactionManager.class).run(ctx -> {
            assertThat(ctx).hasNotFailed();
            assertThat(ctx).doesNotHaveBean(JtaTransactionManager.class);
            assertThat(ctx.getBean(PlatformTransactionManager.class)).isInstanceOf(OwnTransactionManager.Mine.class);
            assertThat(ctx).hasSingleBean(TandemTransactionManager.class);
        });
        runner.withUserConfiguration(OwnTandem.class).run(ctx -> {
            assertThat(ctx).hasNotFailed();
            assertThat(ctx.getBean(TandemTransactionManager.class)).isSameAs(ctx.getBean(OwnTandem.class).tm);
            assertThat(ctx.getBean(JtaTransactionManager.class).getTransactionManager()).isSameAs(ctx.getBean(OwnTandem.class).tm);
        });
    }

    @Test
    void offWithTandemEnabledFalse() {
        new ApplicationContextRunner().withConfiguration(AutoConfigurations.of(TandemAutoConfiguration.class, TandemHealthContributorAutoConfiguration.class,
                TandemMetricsAutoConfiguration.class)).withUserConfiguration(TwoPools.class).withPropertyValues("tandem.enabled=false").run(ctx -> {
                    assertThat(ctx).hasNotFailed();
                    assertThat(ctx).doesNotHaveBean(TandemTransactionManager.class);
                    assertThat(ctx).doesNotHaveBean(JtaTransactionManager.class);
                    assertThat(ctx).doesNotHaveBean(TandemMetrics.class);
                    assertThat(ctx).doesNotHaveBean(TandemHealthIndicator.class);
                    assertThat(ctx.getBean("pg")).isInstanceOf(HikariDataSource.class);
                });
    }

    @Test
    void healthAndMetricsOnlyWithActuatorAndMicrometer() {
        runner.withClassLoader(new FilteredClassLoader("org.springframework.boot.actuate.health")).run(ctx -> {
            assertThat(ctx).hasNotFailed();
            assertThat(ctx).doesNotHaveBean(TandemHealthIndicator.class);
            assertThat(ctx).hasSingleBean(TandemMetrics.class);
        });
        runner.withClassLoader(new FilteredClassLoader("io.micrometer.core")).run(ctx -> {
            assertThat(ctx).hasNotFailed();
            assertThat(ctx).doesNotHaveBean(TandemMetrics.class);
        });
        runner.withPropertyValues("management.health.tandem.enabled=false").run(ctx -> {
            assertThat(ctx).hasNotFailed();
            assertThat(ctx).doesNotHaveBean(TandemHealthIndicator.class);
        });
    }

    /**
     * Each DataSource bean becomes a TandemDataSource named as its bean (or
     * tandem.datasources.BEAN.rm), over the pool the application declared;
     * a HikariCP pool sizes it (one less than Hikari's maximum, Hikari's
     * connection timeout); closing the application closes the pool.
     */
    @Test
    void dataSourceBeansBecomeTandemDataSourcesSizedWithTheirPool() {
        runner.withUserConfiguration(TwoPools.class, Reporting.class)
                .withPropertyValues("tandem.datasources.maria.rm=my-maria", "tandem.datasources.reporting.enabled=false").run(ctx -> {
            assertThat(ctx).hasNotFailed();
            TandemDataSource pg = ctx.getBean("pg", TandemDataSource.class);
            assertThat(pg.rmName()).isEqualTo("pg");
            HikariDataSource pool = pg.unwrap(HikariDataSource.class);
            assertThat(pool.getPoolName()).isEqualTo("pg-pool");
            assertThat(pg.maxPoolSize()).isEqualTo(6);
            assertThat(pg.acquireTimeout()).isEqualTo(Duration.ofSeconds(4));
            assertThat(pg.sourcePools()).isTrue();

            TandemDataSource maria = ctx.getBean("maria", TandemDataSource.class);
            assertThat(maria.rmName()).isEqualTo("my-maria");
            assertThat(maria.maxPoolSize()).as("Hikari's default 10, less one").isEqualTo(9);
            assertThat(maria.acquireTimeout()).as("Hikari's default").isEqualTo(Duration.ofSeconds(30));

            TandemDataSource plain = ctx.getBean("plain", TandemDataSource.class);
            assertThat(plain.maxPoolSize()).isEqualTo(TandemDataSource.DEFAULT_MAX_POOL_SIZE);
            assertThat(plain.sourcePools()).isFalse();

            assertThat(ctx.getBean("own")).isSameAs(ctx.getBean(TwoPools.class).own);
            assertThat(ctx.getBean("reporting")).isInstanceOf(PGSimpleDataSource.class);
            ctx.close();
            assertThat(pool.isClosed()).as("the pool under pg closed with the application").isTrue();
        });
    }

    /**
     * Closing the application closes each TandemDataSource the starter
     * made: it refuses new connections, and the idle sessions it keeps over
     * a source that does not pool are closed. The pool under a wrapper is
     * closed as Spring closes any bean (Hikari's close()), once; one the
     * application keeps open (destroyMethod = "") stays open.
     */
    @Test
    void closingTheApplicationClosesTheTandemDataSources() {
        runner.withUserConfiguration(PlainAndKept.class).withPropertyValues("tandem.datasources.plain.kind=postgres").run(ctx -> {
            assertThat(ctx).hasNotFailed();
            TandemDataSource plain = ctx.getBean("plain", TandemDataSource.class);
            TandemDataSource kept = ctx.getBean("kept", TandemDataSource.class);
            Sessions sessions = ctx.getBean(PlainAndKept.class).sessions;
            try (Connection a = plain.getConnection(); Connection b = plain.getConnection()) {
                assertThat(a.isClosed()).isFalse();
                assertThat(b.isClosed()).isFalse();
            }
            assertThat(sessions.opened()).isEqualTo(2);
            assertThat(sessions.open()).as("kept idle by the TandemDataSource: the source does not pool").isEqualTo(2);
            HikariDataSource keptPool = kept.unwrap(HikariDataSource.class);

            ctx.close();
            assertThat(sessions.open()).as("the idle sessions closed with the application").isZero();
            SQLException e = org.junit.jupiter.api.Assertions.assertThrows(SQLException.class, plain::getConnection);
            assertThat(e.getMessage()).contains("TandemDataSource \"plain\" is closed");
            assertThat(org.junit.jupiter.api.Assertions.assertThrows(SQLException.class, kept::getConnection).getMessage()).contains("closed");
            assertThat(keptPool.isClosed()).as("a pool the application keeps open (destroyMethod = \"\")").isFalse();
            keptPool.close();
        });
    }

    @Test
    void poolSettingsOverrideTheSizing() {
        runner.withUserConfiguration(TwoPools.class).withPropertyValues("tandem.datasources.pg.max-pool-size=3", "tandem.datasources.pg.acquire-timeout=2s",
                "tandem.datasources.plain.max-pool-size=40").run(ctx -> {
                    assertThat(ctx).hasNotFailed();
                    assertThat(ctx.getBean("pg", TandemDataSource.class).maxPoolSize()).isEqualTo(3);
                    assertThat(ctx.getBean("pg", TandemDataSource.class).acquireTimeout()).isEqualTo(Duration.ofSeconds(2));
                    assertThat(ctx.getBean("plain", TandemDataSource.class).maxPoolSize()).isEqualTo(40);
                });
    }

    @Test
    void theDatabaseIsToldFromTheDataSource() {
        HikariDataSource h = new HikariDataSource();
        h.setJdbcUrl("jdbc:mariadb://127.0.0.1:1/x");
        assertThat(TandemDataSourcePostProcessor.kind("a", h)).isEqualTo(TandemProperties.Kind.MARIADB);
        h.setJdbcUrl("jdbc:postgresql://127.0.0.1:1/x");
        assertThat(TandemDataSourcePostProcessor.kind("a", h)).isEqualTo(TandemProperties.Kind.POSTGRES);
        HikariDataSource over = new HikariDataSource();
        over.setDataSource(new MariaDbDataSource());
        assertThat(TandemDataSourcePostProcessor.kind("a", over)).isEqualTo(TandemProperties.Kind.MARIADB);
        assertThat(TandemDataSourcePostProcessor.kind("a", new PGSimpleDataSource())).isEqualTo(TandemProperties.Kind.POSTGRES);
        assertThat(TandemDataSourcePostProcessor.kind("a", new MariaDbDataSource())).isEqualTo(TandemProperties.Kind.MARIADB);
    }

    /**
     * Two DataSource beans under one resource manager name would share a
     * transaction's branch: the second one's connections would write to the
     * first one's database. The application does not start; the message
     * names both beans and the property to set.
     */
    @Test
    void twoDataSourcesUnderOneRmNameStopTheStart() {
        runner.withUserConfiguration(OrdersAndAudit.class).withPropertyValues("tandem.datasources.orders.rm=pg", "tandem.datasources.audit.rm=pg")
                .run(ctx -> {
                    assertThat(ctx).hasFailed();
                    assertThat(failure(ctx)).contains("'orders'").contains("'audit'").contains("resource manager \"pg\"")
                            .contains("tandem.datasources.audit.rm");
                    FailureAnalysis a = new TandemFailureAnalyzer().analyze(ctx.getStartupFailure());
                    assertThat(a).isNotNull();
                    assertThat(a.getDescription()).contains("'orders'").contains("'audit'");
                    assertThat(a.getAction()).contains("tandem.datasources.audit.rm");
                });
        // A bean's name colliding with another bean's explicit rm.
        runner.withUserConfiguration(OrdersAndAudit.class).withPropertyValues("tandem.datasources.audit.rm=orders").run(ctx -> {
            assertThat(ctx).hasFailed();
            assertThat(failure(ctx)).contains("'orders'").contains("'audit'").contains("resource manager \"orders\"")
                    .contains("tandem.datasources.audit.rm");
        });
        // Each its own name: both enlist, each under its own.
        runner.withUserConfiguration(OrdersAndAudit.class).withPropertyValues("tandem.datasources.orders.rm=pg", "tandem.datasources.audit.rm=pg-audit")
                .run(ctx -> {
                    assertThat(ctx).hasNotFailed();
                    assertThat(ctx.getBean("orders", TandemDataSource.class).rmName()).isEqualTo("pg");
                    assertThat(ctx.getBean("audit", TandemDataSource.class).rmName()).isEqualTo("pg-audit");
                });
    }

    // ---- Property errors: the application does not start, and the message names the property.

    @Test
    void noCoordinatorIsNamed() {
        new ApplicationContextRunner().withConfiguration(AutoConfigurations.of(TandemAutoConfiguration.class)).run(ctx -> {
            assertThat(ctx).hasFailed();
            assertThat(failure(ctx)).contains("tandem.coordinators").contains("no coordinator address");
        });
    }

    @Test
    void aWrongValueNamesItsProperty(@TempDir Path dir) throws IOException {
        Path token = Files.writeString(dir.resolve("token"), "t");
        String[][] cases = {
            {"tandem.coordinators=tandem.internal", "tandem.coordinators", "has no port"},
            {"tandem.coordinators=127.0.0.1:99999", "tandem.coordinators", "is not 1-65535"},
            {"tandem.decision-timeout=0s", "tandem.decision-timeout", "must be positive"},
            {"tandem.default-transaction-timeout=1500ms", "tandem.default-transaction-timeout", "whole seconds"},
            {"tandem.default-transaction-timeout=-1", "tandem.default-transaction-timeout", "must be 0 (none) or positive"},
            {"tandem.max-transaction-age=2h", "tandem.max-transaction-age", "at most 60m"},
            {"tandem.decide-at=somewhere", "tandem.decide-at", "DecideAt"},
            {"tandem.auth-token-file=" + dir.resolve("nothing-here"), "tandem.auth-token-file", "no readable file"},
            {"tandem.tls.ca=" + dir.resolve("no-ca.pem"), "tandem.tls.ca", "no readable file"},
            {"tandem.datasources.pg.rm=Not A Name", "tandem.datasources[pg].rm", "malformed resource manager name"},
            {"tandem.datasources.pg.max-pool-size=0", "tandem.datasources[pg].max-pool-size", "at least 1"},
        };
        for (String[] c : cases) {
            runner.withPropertyValues(c[0]).run(ctx -> {
                assertThat(ctx).as(c[0]).hasFailed();
                assertThat(failure(ctx)).as(c[0]).contains(c[1]).contains(c[2]);
            });
        }
        runner.withPropertyValues("tandem.auth-token=t", "tandem.auth-token-file=" + token).run(ctx -> {
            assertThat(failure(ctx)).contains("tandem.auth-token-file").contains("not both");
        });
        runner.withPropertyValues("tandem.tls.ca=" + token, "tandem.tls.client-cert=" + token).run(ctx -> {
            assertThat(failure(ctx)).contains("tandem.tls.client-key").contains("needs both");
        });
        runner.withPropertyValues("tandem.tls.client-cert=" + token, "tandem.tls.client-key=" + token).run(ctx -> {
            assertThat(failure(ctx)).contains("tandem.tls.ca").contains("a client certificate is for TLS");
        });
    }

    /** One of Spring Boot's own failure analyzers (package-private classes). */
    private static org.springframework.boot.diagnostics.FailureAnalyzer bootsAnalyzer(String name) throws ReflectiveOperationException {
        java.lang.reflect.Constructor<?> c = Class.forName(name).getDeclaredConstructor();
        c.setAccessible(true);
        return (org.springframework.boot.diagnostics.FailureAnalyzer) c.newInstance();
    }

    /** Boot's own report of a validation error: the property's name, its value, the reason. */
    @Test
    void bootsFailureReportNamesThePropertyAndItsValue() {
        runner.withPropertyValues("tandem.decision-timeout=-5s").run(ctx -> {
            FailureAnalysis a = bootsAnalyzer("org.springframework.boot.diagnostics.analyzer.BindValidationFailureAnalyzer")
                    .analyze(ctx.getStartupFailure());
            assertThat(a).isNotNull();
            assertThat(a.getDescription()).contains("Property: tandem.decision-timeout").contains("Reason: must be positive");
        });
    }

    @Test
    void aBeanNameThatIsNoRmNameAsksForTheProperty() {
        runner.withUserConfiguration(BootsDefaultName.class).run(ctx -> {
            assertThat(ctx).hasFailed();
            assertThat(failure(ctx)).contains("tandem.datasources.dataSource.rm").contains("'dataSource' is not a resource manager name");
            FailureAnalysis a = new TandemFailureAnalyzer().analyze(ctx.getStartupFailure());
            assertThat(a.getAction()).isEqualTo("Set or change tandem.datasources.dataSource.rm.");
        });
        runner.withUserConfiguration(BootsDefaultName.class).withPropertyValues("tandem.datasources.dataSource.rm=pg").run(ctx -> {
            assertThat(ctx).hasNotFailed();
            assertThat(ctx.getBean("dataSource", TandemDataSource.class).rmName()).isEqualTo("pg");
        });
    }

    @Test
    void aDatabaseThatCannotBeToldAsksForItsKind() {
        runner.withUserConfiguration(Opaque.class).run(ctx -> {
            assertThat(ctx).hasFailed();
            assertThat(failure(ctx)).contains("tandem.datasources.opaque.kind=POSTGRES or MARIADB");
        });
        runner.withUserConfiguration(Opaque.class).withPropertyValues("tandem.datasources.opaque.kind=postgres").run(ctx -> {
            assertThat(ctx).hasNotFailed();
            assertThat(ctx.getBean("opaque")).isInstanceOf(TandemDataSource.class);
        });
    }

    /** With the start-up check on, a coordinator nobody runs stops the application, with the reason and what to do. */
    @Test
    void anUnreachableCoordinatorStopsTheStart() throws IOException {
        int port;
        try (ServerSocket s = new ServerSocket(0)) {
            port = s.getLocalPort();
        }
        String addr = "127.0.0.1:" + port;
        runner.withPropertyValues("tandem.coordinators=" + addr, "tandem.verify-on-startup=true").run(ctx -> {
            assertThat(ctx).hasFailed();
            assertThat(failure(ctx)).contains("TandemStartupException").contains("the coordinator at " + addr + " did not answer Health");
            FailureAnalysis a = new TandemFailureAnalyzer().analyze(ctx.getStartupFailure());
            assertThat(a.getDescription()).contains(addr);
            assertThat(a.getAction()).contains("tandem.verify-on-startup=false");
        });
    }

    // ---- The applications.

    @Configuration(proxyBeanMethods = false)
    static class TwoPools implements org.springframework.beans.factory.DisposableBean {
        final TandemDataSource own;
        private final TandemTransactionManager elsewhere = TandemTransactionManager.create(TandemConfig.coordinator("127.0.0.1:7070"));

        TwoPools() {
            own = TandemDataSource.postgres(elsewhere, "own", new PGSimpleDataSource());
        }

        @Bean
        DataSource pg() {
            HikariDataSource h = new HikariDataSource();
            h.setPoolName("pg-pool");
            h.setJdbcUrl("jdbc:postgresql://127.0.0.1:1/nothing");
            h.setMaximumPoolSize(7);
            h.setConnectionTimeout(4000);
            return h;
        }

        @Bean
        DataSource maria() {
            HikariDataSource h = new HikariDataSource();
            h.setJdbcUrl("jdbc:mariadb://127.0.0.1:1/nothing");
            return h;
        }

        @Bean
        DataSource plain() {
            return new PGSimpleDataSource();
        }

        @Bean
        DataSource own() {
            return own;
        }

        @Override
        public void destroy() {
            elsewhere.close();
        }
    }

    /** Two pools on two PostgreSQL databases. */
    @Configuration(proxyBeanMethods = false)
    static class OrdersAndAudit {
        @Bean
        DataSource orders() {
            HikariDataSource h = new HikariDataSource();
            h.setJdbcUrl("jdbc:postgresql://127.0.0.1:1/orders");
            return h;
        }

        @Bean
        DataSource audit() {
            HikariDataSource h = new HikariDataSource();
            h.setJdbcUrl("jdbc:postgresql://127.0.0.1:2/audit");
            return h;
        }
    }

    /** A source that does not pool (its sessions counted), and a pool the application closes itself. */
    @Configuration(proxyBeanMethods = false)
    static class PlainAndKept {
        final Sessions sessions = new Sessions();

        @Bean
        DataSource plain() {
            return sessions;
        }

        @Bean(destroyMethod = "")
        DataSource kept() {
            HikariDataSource h = new HikariDataSource();
            h.setJdbcUrl("jdbc:postgresql://127.0.0.1:1/kept");
            return h;
        }
    }

    @Configuration(proxyBeanMethods = false)
    static class Reporting {
        @Bean
        DataSource reporting() {
            return new PGSimpleDataSource();
        }
    }

    @Configuration(proxyBeanMethods = false)
    static class BootsDefaultName {
        @Bean
        DataSource dataSource() {
            return new PGSimpleDataSource();
        }
    }

    @Configuration(proxyBeanMethods = false)
    static class Opaque {
        @Bean
        DataSource opaque() {
            return new NoDatabase();
        }
    }

    @Configuration(proxyBeanMethods = false)
    static class OwnTransactionManager {
        static final class Mine extends AbstractPlatformTransactionManager {
            @Override
            protected Object doGetTransaction() {
                return new Object();
            }

            @Override
            protected void doBegin(Object transaction, org.springframework.transaction.TransactionDefinition definition) {
            }

            @Override
            protected void doCommit(DefaultTransactionStatus status) {
            }

            @Override
            protected void doRollback(DefaultTransactionStatus status) {
            }
        }

        @Bean
        PlatformTransactionManager myTransactionManager() {
            return new Mine();
        }
    }

    @Configuration(proxyBeanMethods = false)
    static class OwnTandem {
        final TandemTransactionManager tm = TandemTransactionManager.create(TandemConfig.coordinator("127.0.0.1:7171"));

        @Bean
        TandemTransactionManager myTandem() {
            return tm;
        }
    }

    /** A DataSource that does not pool: each getConnection opens a session (no database: a stand-in that counts). */
    static final class Sessions extends NoDatabase {
        private final java.util.concurrent.atomic.AtomicInteger opened = new java.util.concurrent.atomic.AtomicInteger();
        private final java.util.concurrent.atomic.AtomicInteger open = new java.util.concurrent.atomic.AtomicInteger();

        int opened() {
            return opened.get();
        }

        int open() {
            return open.get();
        }

        @Override
        public Connection getConnection() {
            opened.incrementAndGet();
            open.incrementAndGet();
            boolean[] closed = {false};
            return (Connection) java.lang.reflect.Proxy.newProxyInstance(Connection.class.getClassLoader(), new Class<?>[] {Connection.class},
                    (proxy, m, args) -> switch (m.getName()) {
                        case "close" -> {
                            if (!closed[0]) {
                                closed[0] = true;
                                open.decrementAndGet();
                            }
                            yield null;
                        }
                        case "isClosed" -> closed[0];
                        case "getAutoCommit" -> true;
                        case "isValid" -> !closed[0];
                        case "equals" -> proxy == args[0];
                        case "hashCode" -> System.identityHashCode(proxy);
                        case "toString" -> "Sessions.Connection";
                        default -> throw new SQLException("no database here: " + m.getName());
                    });
        }
    }

    /** A DataSource that says nothing of its database, and whose connections fail. */
    static class NoDatabase implements DataSource {
        @Override
        public Connection getConnection() throws SQLException {
            throw new SQLException("no database here");
        }

        @Override
        public Connection getConnection(String u, String p) throws SQLException {
            throw new SQLException("no database here");
        }

        @Override
        public PrintWriter getLogWriter() {
            return null;
        }

        @Override
        public void setLogWriter(PrintWriter out) {
        }

        @Override
        public void setLoginTimeout(int seconds) {
        }

        @Override
        public int getLoginTimeout() {
            return 0;
        }

        @Override
        public Logger getParentLogger() {
            return Logger.getGlobal();
        }

        @Override
        public <T> T unwrap(Class<T> iface) throws SQLException {
            throw new SQLException("not a wrapper");
        }

        @Override
        public boolean isWrapperFor(Class<?> iface) {
            return false;
        }
    }
}
