package io.github.tandemtx.spring.boot;

import static org.assertj.core.api.Assertions.assertThat;

import io.github.tandemtx.testsupport.TestCoordinator;
import com.zaxxer.hikari.HikariDataSource;
import io.github.tandemtx.jta.TandemDataSource;
import java.util.Map;
import java.util.UUID;
import javax.sql.DataSource;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.springframework.boot.actuate.health.Health;
import org.springframework.boot.actuate.health.Status;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.autoconfigure.transaction.TransactionAutoConfiguration;
import org.springframework.boot.context.properties.ConfigurationProperties;
import org.springframework.boot.jdbc.DataSourceBuilder;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.transaction.support.TransactionTemplate;

/**
 * The starter against the real databases ($TANDEM_PG_DSN, $TANDEM_MYSQL_DSN)
 * and a real coordinator: an application that declares only its two
 * HikariCP pools and the tandem.* properties starts (the coordinator knows
 * "pg" and "maria"), and a transaction through Spring writes both databases
 * or neither.
 */
class StarterDatabaseTest {
    static final String TABLE = "tandem_starter_rows";

    @BeforeAll
    static void tables() {
        for (String url : new String[] {JdbcUrls.pg(), JdbcUrls.maria()}) {
            try (HikariDataSource ds = DataSourceBuilder.create().type(HikariDataSource.class).url(url).build()) {
                JdbcTemplate j = new JdbcTemplate(ds);
                j.execute("DROP TABLE IF EXISTS " + TABLE);
                j.execute("CREATE TABLE " + TABLE + " (id varchar(36) PRIMARY KEY)");
            }
        }
    }

    /** What an application declares: its two pools, as Spring Boot makes them (Hikari, default size). */
    @Configuration(proxyBeanMethods = false)
    static class TwoDatabases {
        @Bean
        DataSource pg() {
            return DataSourceBuilder.create().url(JdbcUrls.pg()).build();
        }

        @Bean
        DataSource maria() {
            return DataSourceBuilder.create().url(JdbcUrls.maria()).build();
        }
    }

    /** The README's configuration: Hikari pools bound from app.datasource.* as Boot binds one. */
    @Configuration(proxyBeanMethods = false)
    static class ReadmeApplication {
        @Bean
        @ConfigurationProperties("app.datasource.pg")
        DataSource pg() {
            return DataSourceBuilder.create().type(HikariDataSource.class).build();
        }

        @Bean
        @ConfigurationProperties("app.datasource.maria")
        DataSource maria() {
            return DataSourceBuilder.create().type(HikariDataSource.class).build();
        }
    }

    /**
     * The README's configuration as written: the pools' settings bound from
     * properties before the starter sizes them (maximum-pool-size 5: a
     * TandemDataSource of 4), a transaction writing both.
     */
    @Test
    void theReadmesConfiguration() throws Exception {
        try (TestCoordinator c = new TestCoordinator()) {
            new ApplicationContextRunner()
                    .withConfiguration(AutoConfigurations.of(TandemAutoConfiguration.class, TransactionAutoConfiguration.class))
                    .withUserConfiguration(ReadmeApplication.class)
                    .withPropertyValues("app.datasource.pg.jdbc-url=" + JdbcUrls.pg(), "app.datasource.pg.maximum-pool-size=5",
                            "app.datasource.maria.jdbc-url=" + JdbcUrls.maria(), "tandem.coordinators=" + c.addr)
                    .run(ctx -> {
                        assertThat(ctx).hasNotFailed();
                        TandemDataSource pg = ctx.getBean("pg", TandemDataSource.class), maria = ctx.getBean("maria", TandemDataSource.class);
                        assertThat(pg.maxPoolSize()).isEqualTo(4);
                        assertThat(maria.maxPoolSize()).isEqualTo(9);
                        String id = UUID.randomUUID().toString();
                        ctx.getBean(TransactionTemplate.class).executeWithoutResult(s -> {
                            new JdbcTemplate(pg).update("INSERT INTO " + TABLE + " (id) VALUES (?)", id);
                            new JdbcTemplate(maria).update("INSERT INTO " + TABLE + " (id) VALUES (?)", id);
                        });
                        assertThat(count(pg, id)).isEqualTo(1);
                        assertThat(count(maria, id)).isEqualTo(1);
                    });
        }
    }

    private static ApplicationContextRunner app(TestCoordinator c) {
        return new ApplicationContextRunner()
                .withConfiguration(AutoConfigurations.of(TandemAutoConfiguration.class, TandemHealthContributorAutoConfiguration.class,
                        TransactionAutoConfiguration.class))
                .withUserConfiguration(TwoDatabases.class).withPropertyValues("tandem.coordinators=" + c.addr);
    }

    private static int count(DataSource ds, String id) {
        Integer n = new JdbcTemplate(ds).queryForObject("SELECT count(*) FROM " + TABLE + " WHERE id = ?", Integer.class, id);
        return n == null ? 0 : n;
    }

    @Test
    void aTransactionThroughSpringWritesBothOrNeither() throws Exception {
        try (TestCoordinator c = new TestCoordinator()) {
            app(c).withPropertyValues("management.health.tandem.cache-time-to-live=0").run(ctx -> {
                assertThat(ctx).hasNotFailed();
                DataSource pg = ctx.getBean("pg", DataSource.class), maria = ctx.getBean("maria", DataSource.class);
                assertThat(pg).isInstanceOf(TandemDataSource.class);
                TransactionTemplate tx = ctx.getBean(TransactionTemplate.class);
                String committed = UUID.randomUUID().toString(), rolledBack = UUID.randomUUID().toString();
                tx.executeWithoutResult(s -> {
                    new JdbcTemplate(pg).update("INSERT INTO " + TABLE + " (id) VALUES (?)", committed);
                    new JdbcTemplate(maria).update("INSERT INTO " + TABLE + " (id) VALUES (?)", committed);
                });
                tx.executeWithoutResult(s -> {
                    new JdbcTemplate(pg).update("INSERT INTO " + TABLE + " (id) VALUES (?)", rolledBack);
                    new JdbcTemplate(maria).update("INSERT INTO " + TABLE + " (id) VALUES (?)", rolledBack);
                    s.setRollbackOnly();
                });
                assertThat(count(pg, committed)).isEqualTo(1);
                assertThat(count(maria, committed)).isEqualTo(1);
                assertThat(count(pg, rolledBack)).isZero();
                assertThat(count(maria, rolledBack)).isZero();
                for (DataSource ds : new DataSource[] {pg, maria}) {
                    HikariDataSource h = ds.unwrap(HikariDataSource.class);
                    assertThat(((TandemDataSource) ds).maxPoolSize()).isEqualTo(9);
                    assertThat(h.getHikariPoolMXBean().getActiveConnections()).as("every connection back in Hikari").isZero();
                }

                Health h = ctx.getBean(TandemHealthIndicator.class).health();
                assertThat(h.getStatus()).as(h.toString()).isEqualTo(Status.UP);
                assertThat(h.getDetails()).containsEntry("state", "serving").containsEntry("coordinator", c.addr).containsEntry("serving", true)
                        .containsEntry("role", "primary");
                @SuppressWarnings("unchecked")
                Map<String, Object> rms = (Map<String, Object>) h.getDetails().get("rms");
                assertThat(rms).containsEntry("pg", "reachable").containsEntry("maria", "reachable");

                // The coordinator gone: still UP (commit points need none), the state in the details.
                c.kill();
                h = ctx.getBean(TandemHealthIndicator.class).health();
                assertThat(h.getStatus()).as(h.toString()).isEqualTo(Status.UP);
                assertThat(h.getDetails()).containsEntry("state", "unreachable");
                assertThat((String) h.getDetails().get("error")).contains("did not answer Health");
            });
        }
    }

    /** The start-up check: a data source named as no resource manager of the coordinator stops the application, naming it. */
    @Test
    void anRmTheCoordinatorDoesNotKnowStopsTheStart() throws Exception {
        try (TestCoordinator c = new TestCoordinator()) {
            app(c).withPropertyValues("tandem.datasources.maria.rm=nope").run(ctx -> {
                assertThat(ctx).hasFailed();
                assertThat(ctx.getStartupFailure()).isInstanceOf(TandemStartupException.class)
                        .hasMessageContaining("knows no resource manager named [nope]");
            });
            app(c).withPropertyValues("tandem.datasources.maria.rm=nope", "tandem.verify-on-startup=false").run(ctx -> {
                assertThat(ctx).hasNotFailed();
                Health h = ctx.getBean(TandemHealthIndicator.class).health();
                assertThat(h.getStatus()).isEqualTo(Status.UP);
                assertThat(h.getDetails()).containsEntry("state", "missing-rms");
                assertThat(h.getDetails().get("missing").toString()).isEqualTo("[nope]");
            });
            app(c).withPropertyValues("tandem.datasources.maria.rm=nope", "tandem.verify-on-startup=false",
                    "management.health.tandem.unavailable-status=DOWN").run(ctx -> {
                        assertThat(ctx).hasNotFailed();
                        Health h = ctx.getBean(TandemHealthIndicator.class).health();
                        assertThat(h.getStatus()).isEqualTo(Status.DOWN);
                        assertThat(h.getDetails().get("missing").toString()).isEqualTo("[nope]");
                    });
        }
    }
}
