package io.github.tandemtx.spring.boot;

import static org.assertj.core.api.Assertions.assertThat;

import io.github.tandemtx.jta.TandemTransactionManager;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.ServerSocket;
import java.net.Socket;
import java.security.Principal;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import javax.sql.DataSource;
import org.junit.jupiter.api.Test;
import org.postgresql.ds.PGSimpleDataSource;
import org.springframework.boot.actuate.autoconfigure.endpoint.EndpointAutoConfiguration;
import org.springframework.boot.actuate.autoconfigure.health.HealthContributorAutoConfiguration;
import org.springframework.boot.actuate.autoconfigure.health.HealthEndpointAutoConfiguration;
import org.springframework.boot.actuate.endpoint.ApiVersion;
import org.springframework.boot.actuate.endpoint.SecurityContext;
import org.springframework.boot.actuate.endpoint.web.WebServerNamespace;
import org.springframework.boot.actuate.health.CompositeHealth;
import org.springframework.boot.actuate.health.Health;
import org.springframework.boot.actuate.health.HealthComponent;
import org.springframework.boot.actuate.health.HealthContributorRegistry;
import org.springframework.boot.actuate.health.HealthEndpointGroups;
import org.springframework.boot.actuate.health.HealthEndpointWebExtension;
import org.springframework.boot.actuate.health.Status;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.test.context.assertj.AssertableApplicationContext;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;

/**
 * The "tandem" health indicator with no coordinator: one nobody runs (its
 * port closed: refused at once), or one that accepts connections and never
 * answers. What status it reports, what its details expose under each of
 * Spring's show-details settings (through Actuator's own health endpoint),
 * how long a probe takes, and how many coordinator calls probes make.
 */
class TandemHealthIndicatorTest {
    /** An address nobody listens on. */
    private static String closedAddress() throws IOException {
        try (ServerSocket s = new ServerSocket(0)) {
            return "127.0.0.1:" + s.getLocalPort();
        }
    }

    private static ApplicationContextRunner app(String coordinator) {
        return new ApplicationContextRunner()
                .withConfiguration(AutoConfigurations.of(TandemAutoConfiguration.class, TandemHealthContributorAutoConfiguration.class,
                        HealthContributorAutoConfiguration.class, HealthEndpointAutoConfiguration.class, EndpointAutoConfiguration.class))
                .withUserConfiguration(OneDatabase.class)
                .withPropertyValues("tandem.coordinators=" + coordinator, "tandem.verify-on-startup=false");
    }

    /** The application's data source "pg": nothing is opened. */
    @Configuration(proxyBeanMethods = false)
    static class OneDatabase {
        @Bean
        DataSource pg() {
            return new PGSimpleDataSource();
        }
    }

    /**
     * A commit point needs no coordinator: its outage does not take the
     * application out of service. By default the indicator is UP, the
     * coordinator's state in its details.
     */
    @Test
    void anUnreachableCoordinatorIsUpByDefaultWithItsStateInTheDetails() throws IOException {
        app(closedAddress()).run(ctx -> {
            assertThat(ctx).hasNotFailed();
            Health h = ctx.getBean(TandemHealthIndicator.class).health();
            assertThat(h.getStatus()).as(h.toString()).isEqualTo(Status.UP);
            assertThat(h.getDetails()).containsEntry("state", "unreachable").containsEntry("serving", false);
            assertThat(h.getDetails().get("dataSources").toString()).isEqualTo("[pg]");
        });
    }

    /** management.health.tandem.unavailable-status: DOWN, OUT_OF_SERVICE, or an application's own status. */
    @Test
    void theStatusOfAnUnavailableCoordinatorIsConfigurable() throws IOException {
        String addr = closedAddress();
        String[][] cases = {{"DOWN", "DOWN"}, {"out_of_service", "OUT_OF_SERVICE"}, {"DEGRADED", "DEGRADED"}};
        for (String[] c : cases) {
            app(addr).withPropertyValues("management.health.tandem.unavailable-status=" + c[0]).run(ctx -> {
                assertThat(ctx).hasNotFailed();
                Health h = ctx.getBean(TandemHealthIndicator.class).health();
                assertThat(h.getStatus().getCode()).as(c[0]).isEqualTo(c[1]);
                assertThat(h.getDetails()).containsEntry("state", "unreachable");
            });
        }
        app(addr).withPropertyValues("management.health.tandem.unavailable-status= ").run(ctx -> {
            assertThat(ctx).hasFailed();
            assertThat(ctx.getStartupFailure()).rootCause().hasMessageContaining("management.health.tandem.unavailable-status");
        });
        // Off: no indicator, nothing in Actuator's health.
        app(addr).withPropertyValues("management.health.tandem.enabled=false", "management.endpoint.health.show-components=always").run(ctx -> {
            assertThat(ctx).hasNotFailed();
            assertThat(ctx).doesNotHaveBean(TandemHealthIndicator.class);
            assertThat(((CompositeHealth) endpoint(ctx, SecurityContext.NONE)).getComponents()).doesNotContainKey("tandem");
        });
    }

    /** The health endpoint's answer to a caller (web: what /actuator/health returns). */
    private static HealthComponent endpoint(AssertableApplicationContext ctx, SecurityContext caller) {
        HealthEndpointWebExtension web = new HealthEndpointWebExtension(ctx.getBean(HealthContributorRegistry.class),
                ctx.getBean(HealthEndpointGroups.class), null);
        return web.health(ApiVersion.V3, WebServerNamespace.SERVER, caller).getBody();
    }

    /** The tandem component of the endpoint's answer. */
    private static Health tandemOf(HealthComponent all) {
        return (Health) ((CompositeHealth) all).getComponents().get("tandem");
    }

    /** An authenticated user in every role. */
    private static final SecurityContext OPERATOR = new SecurityContext() {
        @Override
        public Principal getPrincipal() {
            return () -> "operator";
        }

        @Override
        public boolean isUserInRole(String role) {
            return true;
        }
    };

    /**
     * show-details=always shows details to anyone: the coordinator's state,
     * role and the RMs' reachability, but no address, version or error text
     * (a coordinator's error names the database's host and user). Shown
     * only to authorized users (when-authorized), the details include them.
     */
    @Test
    void detailsShownToAnyoneNameNoHostNorError() throws IOException {
        String addr = closedAddress();
        app(addr).withPropertyValues("management.endpoint.health.show-details=always").run(ctx -> {
            assertThat(ctx).hasNotFailed();
            Health t = tandemOf(endpoint(ctx, SecurityContext.NONE));
            assertThat(t.getStatus()).isEqualTo(Status.UP);
            assertThat(t.getDetails()).containsEntry("state", "unreachable").doesNotContainKeys("coordinator", "error", "version");
            assertThat(t.getDetails().toString()).doesNotContain("127.0.0.1").doesNotContain("UNAVAILABLE").doesNotContain("refused");
        });
        // A group that shows details to anyone makes them public as well.
        app(addr).withPropertyValues("management.endpoint.health.show-details=when-authorized",
                "management.endpoint.health.group.public.include=tandem", "management.endpoint.health.group.public.show-details=always").run(ctx -> {
                    assertThat(ctx).hasNotFailed();
                    assertThat(ctx.getBean(TandemHealthIndicator.class).health().getDetails()).doesNotContainKeys("coordinator", "error");
                });
        app(addr).withPropertyValues("management.endpoint.health.show-details=when-authorized").run(ctx -> {
            assertThat(ctx).hasNotFailed();
            Health t = tandemOf(endpoint(ctx, OPERATOR));
            assertThat(t.getDetails()).containsEntry("coordinator", addr).containsEntry("state", "unreachable");
            assertThat((String) t.getDetails().get("error")).contains("did not answer Health").contains("UNAVAILABLE");
            // Anyone else: the status, no components, no details (Spring's doing).
            HealthComponent anonymous = endpoint(ctx, SecurityContext.NONE);
            assertThat(anonymous.getStatus()).isEqualTo(Status.UP);
            assertThat(((CompositeHealth) anonymous).getComponents()).isNull();
        });
    }

    /**
     * Probes within management.health.tandem.cache-time-to-live share one
     * Health call; the next after it calls again.
     */
    @Test
    void probesWithinTheTimeToLiveMakeOneCoordinatorCall() throws IOException {
        app(closedAddress()).withPropertyValues("management.health.tandem.cache-time-to-live=1500ms").run(ctx -> {
            assertThat(ctx).hasNotFailed();
            TandemHealthIndicator ind = ctx.getBean(TandemHealthIndicator.class);
            TandemTransactionManager tm = ctx.getBean(TandemTransactionManager.class);
            long before = tm.metrics().coordinatorCalls();
            for (int i = 0; i < 10; i++) {
                assertThat(ind.health().getDetails()).containsEntry("state", "unreachable");
            }
            assertThat(tm.metrics().coordinatorCalls() - before).as("ten probes").isEqualTo(1);
            Thread.sleep(1700);
            ind.health();
            assertThat(tm.metrics().coordinatorCalls() - before).as("a probe after the time to live").isEqualTo(2);
        });
    }

    /** Accepts connections and never answers (a coordinator hung, or a black-holed route). */
    static final class Silent implements AutoCloseable {
        final ServerSocket server = new ServerSocket(0);
        final List<Socket> held = new ArrayList<>();
        final Thread acceptor = new Thread(() -> {
            while (!server.isClosed()) {
                try {
                    Socket s = server.accept();
                    synchronized (held) {
                        held.add(s);
                    }
                } catch (IOException e) {
                    return;
                }
            }
        });

        Silent() throws IOException {
            acceptor.setDaemon(true);
            acceptor.start();
        }

        String addr() {
            return "127.0.0.1:" + server.getLocalPort();
        }

        @Override
        public void close() throws IOException {
            server.close();
            synchronized (held) {
                for (Socket s : held) {
                    s.close();
                }
            }
        }
    }

    /**
     * A coordinator that never answers: a probe returns within
     * management.health.tandem.timeout, and probes arriving together make
     * one call (the others wait for its answer, no longer).
     */
    @Test
    void aSilentCoordinatorIsBoundedByTheTimeoutAndAskedOnce() throws Exception {
        try (Silent coord = new Silent()) {
            app(coord.addr()).withPropertyValues("management.health.tandem.timeout=500ms", "management.health.tandem.cache-time-to-live=10s")
                    .run(ctx -> {
                        assertThat(ctx).hasNotFailed();
                        TandemHealthIndicator ind = ctx.getBean(TandemHealthIndicator.class);
                        TandemTransactionManager tm = ctx.getBean(TandemTransactionManager.class);
                        long before = tm.metrics().coordinatorCalls();
                        ExecutorService pool = Executors.newFixedThreadPool(8);
                        try {
                            long start = System.nanoTime();
                            List<Future<Health>> fs = new ArrayList<>();
                            for (int i = 0; i < 8; i++) {
                                fs.add(pool.submit(ind::health));
                            }
                            for (Future<Health> f : fs) {
                                Map<String, Object> d = f.get().getDetails();
                                assertThat(d).containsEntry("state", "unreachable");
                                assertThat((String) d.get("error")).contains("DEADLINE_EXCEEDED");
                            }
                            long ms = (System.nanoTime() - start) / 1_000_000;
                            assertThat(ms).as("eight probes together, timeout 500ms").isLessThan(2000);
                            assertThat(tm.metrics().coordinatorCalls() - before).as("coordinator calls of eight probes").isEqualTo(1);
                        } finally {
                            pool.shutdownNow();
                        }
                    });
        } catch (UncheckedIOException e) {
            throw e.getCause();
        }
    }
}
