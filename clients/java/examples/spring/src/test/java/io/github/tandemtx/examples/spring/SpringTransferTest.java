package io.github.tandemtx.examples.spring;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tandemtx.testsupport.TestCoordinator;
import com.zaxxer.hikari.HikariDataSource;
import io.github.tandemtx.jta.TandemDataSource;
import io.github.tandemtx.jta.TandemTracing;
import io.github.tandemtx.jta.TandemTransactionManager;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Timer;
import io.micrometer.core.instrument.distribution.HistogramSnapshot;
import io.opentelemetry.api.OpenTelemetry;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.context.Scope;
import io.opentelemetry.sdk.OpenTelemetrySdk;
import io.opentelemetry.sdk.testing.exporter.InMemorySpanExporter;
import io.opentelemetry.sdk.trace.SdkTracerProvider;
import io.opentelemetry.sdk.trace.data.SpanData;
import io.opentelemetry.sdk.trace.export.SimpleSpanProcessor;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import javax.sql.DataSource;
import org.junit.jupiter.api.Test;
import org.springframework.boot.WebApplicationType;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.context.support.GenericApplicationContext;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.transaction.TransactionSystemException;

/**
 * The Spring example against the real databases ($TANDEM_PG_DSN,
 * $TANDEM_MYSQL_DSN) and a real coordinator: @Transactional transfers through
 * Spring's JtaTransactionManager over tandem-jta commit on both databases or
 * on neither.
 */
class SpringTransferTest {
    @Test
    void transfersThroughSpringKeepTheInvariants() throws Exception {
        try (TestCoordinator c = new TestCoordinator()) {
            Bank.Report r = SpringTransferApplication.run("--tandem.coordinators=" + c.addr, "--example.transfers=40", "--example.threads=4");
            assertTrue(r.ok(), () -> r + "\ncoordinator:\n" + c.output());
            assertEquals(32, r.committed(), r::toString);
            assertEquals(8, r.failedOnPurpose(), () -> "every fifth transfer fails on purpose after writing both databases: " + r);
            assertEquals(1, r.insufficient(), () -> "the overdraft at the end is refused: " + r);
        }
    }

    /**
     * Sixteen threads on Spring Boot's default pool (HikariCP, 10
     * connections) under each TandemDataSource (the starter's 9): none waits
     * out Hikari's 30 s connection timeout (it did, under a TandemDataSource
     * of 16: "Connection is not available, request timed out after 30006ms").
     */
    @Test
    void sixteenThreadsOnBootsDefaultPool() throws Exception {
        try (TestCoordinator c = new TestCoordinator()) {
            Bank.Report r = SpringTransferApplication.run("--tandem.coordinators=" + c.addr, "--example.transfers=80", "--example.threads=16");
            assertTrue(r.ok(), () -> r + "\ncoordinator:\n" + c.output());
            assertEquals(64, r.committed(), r::toString);
            assertEquals(16, r.failedOnPurpose(), r::toString);
        }
    }

    /**
     * Sixty-four threads on Spring Boot's default pool sizes: HikariCP's 10
     * connections per database, the starter's TandemDataSource of 9 over
     * each. 640 transfers: every one commits or fails as it should, none
     * waits out a timeout (Tandem's acquire timeout is Hikari's 30 s, and
     * Hikari counts no connection timeout). The threads beyond the pool
     * wait for a TandemDataSource permit, holding no connection, rather than
     * inside Hikari: Hikari's own acquire time (its Micrometer timer) stays
     * short. Prints the time taken and Hikari's acquire times.
     */
    @Test
    void sixtyFourThreadsOnBootsDefaultPoolSizes() throws Exception {
        int transfers = 640, threads = 64;
        List<String> args = new java.util.ArrayList<>(List.of("--tandem.coordinators=PLACEHOLDER",
                "--management.metrics.distribution.percentiles.hikaricp.connections.acquire=0.5,0.99"));
        args.addAll(List.of(System.getProperty("tandem.example.args", "").split(" ")).stream().filter(a -> !a.isEmpty()).toList());
        try (TestCoordinator c = new TestCoordinator();
                ConfigurableApplicationContext ctx = new SpringApplicationBuilder(SpringTransferApplication.class).web(WebApplicationType.NONE)
                        .run(args.stream().map(a -> a.replace("PLACEHOLDER", c.addr)).toArray(String[]::new))) {
            TandemDataSource pg = ctx.getBean("pg", TandemDataSource.class), maria = ctx.getBean("maria", TandemDataSource.class);
            HikariDataSource pgPool = pg.unwrap(HikariDataSource.class), mariaPool = maria.unwrap(HikariDataSource.class);
            Bank bank = ctx.getBean(Bank.class);
            bank.setup(); // starts Hikari's pools, which then fill to their minimum idle (10) in the background
            long end = System.currentTimeMillis() + 10_000;
            while ((pgPool.getHikariPoolMXBean().getTotalConnections() < 10 || mariaPool.getHikariPoolMXBean().getTotalConnections() < 10)
                    && System.currentTimeMillis() < end) {
                Thread.sleep(20); // so that the acquire times below are not the pools' first logins
            }
            long t0 = System.nanoTime();
            Bank.Report r = bank.run(transfers, threads);
            long ms = (System.nanoTime() - t0) / 1_000_000;
            MeterRegistry registry = ctx.getBean(MeterRegistry.class);
            StringBuilder hikari = new StringBuilder();
            double timeouts = 0;
            for (HikariDataSource h : List.of(pgPool, mariaPool)) {
                Timer acquire = registry.find("hikaricp.connections.acquire").tag("pool", h.getPoolName()).timer();
                assertNotNull(acquire, "Boot binds Hikari's metrics");
                HistogramSnapshot snap = acquire.takeSnapshot();
                hikari.append(String.format(" %s: %d acquisitions, p50 %.2f ms, p99 %.2f ms, max %.1f ms;", h.getPoolName(), snap.count(),
                        snap.percentileValues()[0].value(TimeUnit.MILLISECONDS), snap.percentileValues()[1].value(TimeUnit.MILLISECONDS),
                        snap.max(TimeUnit.MILLISECONDS)));
                timeouts += registry.find("hikaricp.connections.timeout").tag("pool", h.getPoolName()).counter().count();
            }
            System.out.printf("sixtyFourThreadsOnBootsDefaultPoolSizes: %d transfers on %d threads in %d ms (%.0f/s): %s; "
                    + "Hikari %d and %d connections, TandemDataSources %d and %d; Hikari's acquire times:%s connection timeouts %.0f%n",
                    transfers, threads, ms, transfers * 1000.0 / ms, r, pgPool.getMaximumPoolSize(), mariaPool.getMaximumPoolSize(),
                    pg.maxPoolSize(), maria.maxPoolSize(), hikari, timeouts);
            assertTrue(r.ok(), () -> r + "\ncoordinator:\n" + c.output());
            assertEquals(transfers * 4 / 5, r.committed(), r::toString);
            assertEquals(transfers / 5, r.failedOnPurpose(), r::toString);
            assertEquals(0, timeouts, "no thread waited out Hikari's connection timeout");
            assertTrue(ms < 60_000, "no stall: " + ms + " ms");
            if (args.size() == 2) { // the defaults (not a comparison run with tandem.example.args)
                assertEquals(10, pgPool.getMaximumPoolSize(), "Boot's default pool");
                assertEquals(9, pg.maxPoolSize(), "Hikari's size less the manager's own connection");
                assertEquals(9, maria.maxPoolSize());
            }
        }
    }

    /**
     * The scenario, as a Spring Boot user runs it: Boot's default
     * pool (HikariCP) behind each TandemDataSource, decided at the
     * coordinator, the coordinator killed for one transfer (an unknown
     * outcome: the MariaDB session held a prepared branch). That session is
     * aborted, not pooled: after the restart every transfer commits (before,
     * every one drawing it failed with XAER_RMFAIL … PREPARED state), the
     * unknown transfer's branches are settled by the coordinator, and the
     * journals match on both databases.
     */
    @Test
    void aCoordinatorStoppedForOneTransferLeavesBootsPoolHealthy() throws Exception {
        try (TestCoordinator c = new TestCoordinator();
                ConfigurableApplicationContext ctx = new SpringApplicationBuilder(SpringTransferApplication.class).web(WebApplicationType.NONE)
                        .run("--tandem.coordinators=" + c.addr, "--tandem.decide-at=COORDINATOR", "--tandem.decision-timeout=3s")) {
            Bank bank = ctx.getBean(Bank.class);
            TransferService transfers = ctx.getBean(TransferService.class);
            JdbcTemplate pg = new JdbcTemplate(ctx.getBean("pg", DataSource.class));
            JdbcTemplate maria = new JdbcTemplate(ctx.getBean("maria", DataSource.class));
            TandemTransactionManager tandem = ctx.getBean(TandemTransactionManager.class);
            bank.setup();
            Set<String> committed = new HashSet<>();
            String first = UUID.randomUUID().toString();
            transfers.transfer(first, 1, 2, 10, false);
            committed.add(first);

            c.awaitPastBirth(); // the lost transfer's orphans are then presumed aborted
            c.kill();
            String lost = UUID.randomUUID().toString();
            TransactionSystemException unknown = assertThrows(TransactionSystemException.class, () -> transfers.transfer(lost, 1, 2, 10, false));
            Matcher m = Pattern.compile("transaction ([0-9a-f]{32})").matcher(chain(unknown));
            assertTrue(m.find() && chain(unknown).contains("OutcomeUnknownException"), chain(unknown));
            String g = m.group(1);

            c.start();
            long end = System.currentTimeMillis() + 20_000;
            while (true) { // the manager's channel reconnects (its backoff may outlast the restart)
                try {
                    tandem.verify();
                    break;
                } catch (jakarta.transaction.SystemException e) {
                    assertTrue(System.currentTimeMillis() < end, "the manager never reached the restarted coordinator: " + e.getMessage());
                    Thread.sleep(100);
                }
            }
            for (int i = 0; i < 5; i++) {
                String ref = UUID.randomUUID().toString();
                transfers.transfer(ref, 3, 4, 10, false);
                committed.add(ref);
            }
            end = System.currentTimeMillis() + 30_000;
            while (prepared(pg, maria, g) > 0) {
                assertTrue(System.currentTimeMillis() < end, "the unknown transfer's branches stay prepared\n" + c.output());
                Thread.sleep(100);
            }
            boolean onPg = pg.queryForObject("SELECT count(*) FROM " + Bank.JOURNAL + " WHERE ref = ?", Integer.class, lost) == 1;
            if (onPg) {
                committed.add(lost);
            }
            List<String> v = bank.check(committed, onPg ? Set.of() : Set.of(lost));
            assertTrue(v.isEmpty(), v + "\ncoordinator:\n" + c.output());
        }
    }

    /** Branches of gtrid g still prepared on either database. */
    private static int prepared(JdbcTemplate pg, JdbcTemplate maria, String g) {
        Integer p = pg.queryForObject("SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE ?", Integer.class, "%" + g + "%");
        int n = p == null ? 0 : p;
        for (Map<String, Object> row : maria.queryForList("XA RECOVER")) {
            if (String.valueOf(row.get("data")).startsWith(g)) {
                n++;
            }
        }
        return n;
    }

    /**
     * The application served as a web server: Actuator's
     * /actuator/prometheus has tandem-jta's metrics under the Go SDK's names
     * (the TandemMetrics bean, bound by Actuator): after two transfers
     * decided at MariaDB's commit point and one that threw (Spring rolled it
     * back), the commit-point counter and histogram say 2, rollbacks 1.
     */
    @Test
    void prometheusEndpointServesTandemMetrics() throws Exception {
        try (TestCoordinator c = new TestCoordinator();
                ConfigurableApplicationContext ctx = SpringTransferApplication.serve("--tandem.coordinators=" + c.addr, "--server.port=0")) {
            ctx.getBean(Bank.class).setup();
            TransferService transfers = ctx.getBean(TransferService.class);
            transfers.transfer(UUID.randomUUID().toString(), 1, 2, 10, false);
            transfers.transfer(UUID.randomUUID().toString(), 3, 4, 10, false);
            assertThrows(TransferService.FailedOnPurpose.class, () -> transfers.transfer(UUID.randomUUID().toString(), 5, 6, 10, true));

            int port = ctx.getEnvironment().getProperty("local.server.port", Integer.class);
            HttpResponse<String> r = HttpClient.newHttpClient().send(
                    HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + "/actuator/prometheus")).build(), HttpResponse.BodyHandlers.ofString());
            assertEquals(200, r.statusCode(), r::body);
            String body = r.body();
            if (Boolean.getBoolean("tandem.printScrape")) {
                body.lines().filter(l -> l.contains("tandem_client") && !l.contains("_bucket")).forEach(System.out::println);
            }
            assertTrue(body.contains("# TYPE tandem_client_commits_total counter"), body);
            assertTrue(body.contains("# TYPE tandem_client_commit_seconds histogram"), body);
            assertEquals(2, sample(body, "tandem_client_commits_total", "path=\"commit-point\""), body);
            assertEquals(0, sample(body, "tandem_client_commits_total", "path=\"two-phase\""), body);
            assertEquals(2, sample(body, "tandem_client_commit_seconds_count", "path=\"commit-point\""), body);
            assertEquals(1, sample(body, "tandem_client_rollbacks_total", null), body);
            assertEquals(0, sample(body, "tandem_client_aborts_total", "stage=\"statement\""), body);

            // The starter's health indicator, among Boot's (show-details=always in application.properties).
            HttpResponse<String> health = HttpClient.newHttpClient().send(
                    HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + "/actuator/health")).build(), HttpResponse.BodyHandlers.ofString());
            assertEquals(200, health.statusCode(), health::body);
            assertTrue(health.body().contains("\"tandem\":{\"status\":\"UP\""), health.body());
            assertTrue(health.body().contains("\"role\":\"primary\""), health.body());
            // Details shown to anyone (always): the coordinator's state, not its address (nor any error text).
            assertTrue(health.body().contains("\"state\":\"serving\""), health.body());
            assertFalse(health.body().contains(c.addr), health.body());
            assertFalse(health.body().contains("\"coordinator\""), health.body());
            if (Boolean.getBoolean("tandem.printScrape")) {
                System.out.println(health.body());
            }
        }
    }

    /** The value of the first sample of metric name whose labels contain label (null: no labels), or fails. */
    private static double sample(String body, String name, String label) {
        for (String line : body.split("\n")) {
            if (line.startsWith(name + (label == null ? " " : "{")) && (label == null || line.contains(label))) {
                return Double.parseDouble(line.substring(line.lastIndexOf(' ') + 1));
            }
        }
        throw new AssertionError("no sample " + name + (label == null ? "" : "{" + label + "}") + " in:\n" + body);
    }

    /**
     * With an OpenTelemetry bean in the application (here the SDK with an
     * in-memory exporter), the transaction manager's spans go to it: a
     * transfer under the application's span is one tandem.tx span, its
     * child, decided at MariaDB's commit point, with its phases under it.
     */
    @Test
    @SuppressWarnings("try")
    void transfersAreTracedWithTheApplicationsOpenTelemetry() throws Exception {
        InMemorySpanExporter exported = InMemorySpanExporter.create();
        SdkTracerProvider tp = SdkTracerProvider.builder().addSpanProcessor(SimpleSpanProcessor.create(exported)).build();
        OpenTelemetry otel = OpenTelemetrySdk.builder().setTracerProvider(tp).build();
        try (TestCoordinator c = new TestCoordinator();
                ConfigurableApplicationContext ctx = new SpringApplicationBuilder(SpringTransferApplication.class).web(WebApplicationType.NONE)
                        .initializers(ac -> ((GenericApplicationContext) ac).registerBean("openTelemetry", OpenTelemetry.class, () -> otel))
                        .run("--tandem.coordinators=" + c.addr)) {
            ctx.getBean(Bank.class).setup();
            TransferService transfers = ctx.getBean(TransferService.class);
            Span request = tp.get("app").spanBuilder("request").startSpan();
            try (Scope ignored = request.makeCurrent()) {
                transfers.transfer(UUID.randomUUID().toString(), 1, 2, 10, false);
            } finally {
                request.end();
            }
            List<SpanData> trace = exported.getFinishedSpanItems().stream()
                    .filter(sd -> sd.getTraceId().equals(request.getSpanContext().getTraceId())).toList();
            List<SpanData> txs = trace.stream().filter(sd -> sd.getName().equals(TandemTracing.SPAN_TX)).toList();
            assertEquals(1, txs.size(), trace::toString);
            SpanData tx = txs.get(0);
            assertEquals(request.getSpanContext().getSpanId(), tx.getParentSpanId(), "tandem.tx is a child of the application's span");
            assertEquals("committed", tx.getAttributes().get(TandemTracing.OUTCOME));
            assertEquals("commit-point", tx.getAttributes().get(TandemTracing.PATH));
            assertEquals("maria", tx.getAttributes().get(TandemTracing.COMMIT_POINT));
            List<String> phases = trace.stream().filter(sd -> sd.getParentSpanId().equals(tx.getSpanId()))
                    .map(sd -> sd.getName() + " " + sd.getAttributes().get(TandemTracing.RM)).sorted().toList();
            assertEquals(List.of("tandem.decision maria", "tandem.phase2 pg", "tandem.prepare pg"), phases);
        } finally {
            tp.close();
        }
    }

    @Test
    void anUnreachableCoordinatorStopsTheApplicationAtStart() throws Exception {
        String addr = "127.0.0.1:" + TestCoordinator.freePort();
        Exception e = assertThrows(Exception.class, () -> SpringTransferApplication.run("--tandem.coordinators=" + addr));
        String all = chain(e);
        assertTrue(all.contains("the coordinator at " + addr + " did not answer Health"), all);
    }

    private static String chain(Throwable e) {
        StringBuilder s = new StringBuilder();
        for (Throwable c = e; c != null; c = c.getCause()) {
            s.append(c).append('\n');
        }
        return s.toString();
    }
}
