package io.github.tandemtx.examples.spring;

import io.github.tandemtx.jta.TandemConfig;
import io.github.tandemtx.jta.TandemDataSource;
import io.github.tandemtx.jta.TandemTransactionManager;
import io.github.tandemtx.jta.metrics.TandemMetrics;
import io.opentelemetry.api.OpenTelemetry;
import jakarta.transaction.SystemException;
import java.time.Duration;
import javax.sql.DataSource;
import org.springframework.beans.factory.ObjectProvider;
import org.springframework.beans.factory.SmartInitializingSingleton;
import org.springframework.beans.factory.annotation.Qualifier;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.boot.jdbc.DataSourceBuilder;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.transaction.jta.JtaTransactionManager;

/**
 * What a Spring user configures to run on Tandem: the transaction manager
 * (connected to the coordinator), Spring's {@link JtaTransactionManager} over
 * it, and one {@link TandemDataSource} per database, named as the
 * coordinator's {@code --rm} names them. Everything else is plain Spring:
 * {@code @Transactional} methods, JdbcTemplate. Spring Boot's own DataSource,
 * JdbcTemplate and transaction manager auto-configuration back off, since
 * these beans exist.
 */
@Configuration(proxyBeanMethods = false)
public class TandemJtaConfiguration {
    /**
     * The JTA transaction manager; its log is the coordinator's, none is kept
     * here. Its OpenTelemetry spans (tandem.tx, …) go to the application's
     * OpenTelemetry bean when there is one (Boot makes one with the
     * OpenTelemetry SDK on the class path), else to the global OpenTelemetry
     * once installed (the Java agent's); with neither, none is made.
     */
    @Bean(destroyMethod = "close")
    TandemTransactionManager tandemTransactionManager(@Value("${tandem.coordinator}") String coordinator,
            @Value("${tandem.decide-at:AUTO}") TandemConfig.DecideAt decideAt, @Value("${tandem.decision-timeout:30s}") Duration decisionTimeout,
            ObjectProvider<OpenTelemetry> otel) {
        TandemConfig cfg = TandemConfig.coordinator(coordinator).withDecideAt(decideAt).withDecisionTimeout(decisionTimeout);
        OpenTelemetry o = otel.getIfAvailable();
        return TandemTransactionManager.create(o != null ? cfg.withOpenTelemetry(o) : cfg);
    }

    /** Spring's transaction manager for @Transactional, over Tandem's UserTransaction and TransactionManager. */
    @Bean
    JtaTransactionManager transactionManager(TandemTransactionManager tandem) {
        JtaTransactionManager jta = new JtaTransactionManager(tandem.userTransaction(), tandem);
        jta.setTransactionSynchronizationRegistry(tandem.synchronizationRegistry());
        return jta;
    }

    /**
     * PostgreSQL's pool: what Spring Boot makes of a JDBC URL, a HikariCP
     * pool (Boot's default) of Hikari's default size (10). Only the
     * TandemDataSource below uses it.
     */
    @Bean
    DataSource pgPool(@Value("${example.pg.url}") String url) {
        return DataSourceBuilder.create().url(JdbcUrls.postgres(url)).build();
    }

    /** MariaDB's pool, likewise. */
    @Bean
    DataSource mariaPool(@Value("${example.maria.url}") String url) {
        return DataSourceBuilder.create().url(JdbcUrls.mariadb(url)).build();
    }

    /**
     * PostgreSQL, resource manager "pg": connections taken inside a
     * transaction join it. Over Hikari's pool, with the default sizes
     * (16 here, 10 in Hikari): a connection given back while another thread
     * waits in Hikari goes back to Hikari, and a session whose transaction
     * state is unknown is aborted, never given back (README: pools).
     */
    @Bean(destroyMethod = "close")
    TandemDataSource pgDataSource(TandemTransactionManager tandem, @Qualifier("pgPool") DataSource pool) {
        return TandemDataSource.postgres(tandem, "pg", pool);
    }

    /** MariaDB, resource manager "maria", over its pool likewise. */
    @Bean(destroyMethod = "close")
    TandemDataSource mariaDataSource(TandemTransactionManager tandem, @Qualifier("mariaPool") DataSource pool) {
        return TandemDataSource.mariadb(tandem, "maria", pool);
    }

    @Bean
    JdbcTemplate pgJdbc(@Qualifier("pgDataSource") DataSource pg) {
        return new JdbcTemplate(pg);
    }

    @Bean
    JdbcTemplate mariaJdbc(@Qualifier("mariaDataSource") DataSource maria) {
        return new JdbcTemplate(maria);
    }

    /**
     * tandem-jta's metrics (commits by path, aborts by stage, rollbacks, …):
     * Spring Boot Actuator binds every MeterBinder bean to its registry, so
     * they are served at /actuator/prometheus as the Go SDK names them
     * ({@code tandem_client_commits_total{path="commit-point"}}, …).
     */
    @Bean
    TandemMetrics tandemMetrics(TandemTransactionManager tandem) {
        return new TandemMetrics(tandem);
    }

    /**
     * Once every bean exists: the coordinator answers and knows "pg" and
     * "maria", or the application does not start (with the reason), rather
     * than failing at its first two-phase commit.
     */
    @Bean
    SmartInitializingSingleton tandemVerify(TandemTransactionManager tandem) {
        return () -> {
            try {
                tandem.verify();
            } catch (SystemException e) {
                throw new IllegalStateException(e.getMessage(), e);
            }
        };
    }
}
