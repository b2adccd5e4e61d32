package io.github.tandemtx.jta;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import io.github.tandemtx.jta.OtlpCollector.SpanRec;
import io.opentelemetry.api.GlobalOpenTelemetry;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.SpanKind;
import io.opentelemetry.api.trace.StatusCode;
import io.opentelemetry.api.trace.Tracer;
import io.opentelemetry.context.Scope;
import io.opentelemetry.sdk.OpenTelemetrySdk;
import io.opentelemetry.sdk.testing.exporter.InMemorySpanExporter;
import io.opentelemetry.sdk.trace.SdkTracerProvider;
import io.opentelemetry.sdk.trace.data.SpanData;
import io.opentelemetry.sdk.trace.export.SimpleSpanProcessor;
import jakarta.transaction.RollbackException;
import java.lang.management.ManagementFactory;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.function.Function;
import javax.sql.DataSource;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The OpenTelemetry spans of tandem-jta (README, "Traces"), on the real
 * databases and a real coordinator started with {@code --otlp-endpoint}
 * pointing at an OTLP receiver in the test (the Go side's
 * test/e2e/tracing_test.go): the client's span trees read back from an
 * in-memory exporter, and one trace across client and coordinator.
 */
class TracingTest {
    static OtlpCollector collector;
    static Coordinator coord;
    InMemorySpanExporter exported;
    SdkTracerProvider tp;
    Tracer app;

    @BeforeAll
    static void start() throws Exception {
        TestEnv.createTables();
        collector = new OtlpCollector();
        // OTEL_BSP_SCHEDULE_DELAY: the coordinator exports its spans every 50 ms, not every 5 s.
        coord = Coordinator.withEnv(Map.of("OTEL_BSP_SCHEDULE_DELAY", "50"), "--otlp-endpoint", collector.addr());
    }

    @AfterAll
    static void stop() throws Exception {
        if (coord != null) {
            coord.close();
        }
        if (collector != null) {
            collector.close();
        }
    }

    @BeforeEach
    void tracer() {
        exported = InMemorySpanExporter.create();
        tp = SdkTracerProvider.builder().addSpanProcessor(SimpleSpanProcessor.create(exported)).build();
        app = tp.get("app");
    }

    @AfterEach
    void closeTracer() {
        TandemTransaction.failpoint = s -> { };
        tp.close();
    }

    TandemTransactionManager manager(TandemConfig.DecideAt at) {
        return TandemTransactionManager.create(TandemConfig.coordinator(coord.addr).withDecideAt(at).withTracerProvider(tp));
    }

    /** The attributes the trees compare (not the gtrid, which changes, nor the rpc.* ones): the Go test's. */
    static final List<String> SHOWN = List.of("tandem.path", "tandem.outcome", "tandem.commit_point", "tandem.rm", "tandem.decided_by",
            "tandem.action", "tandem.coordinator_calls", "tandem.durable", "tandem.result", "tandem.phase2_pending");

    static SpanRec rec(SpanData s) {
        Map<String, String> a = new TreeMap<>();
        s.getAttributes().forEach((k, v) -> a.put(k.getKey(), String.valueOf(v)));
        String parent = s.getParentSpanContext().isValid() ? s.getParentSpanId() : "";
        return new SpanRec("client", s.getName(), s.getTraceId(), s.getSpanId(), parent, a);
    }

    /** The client's ended spans of trace traceId. */
    List<SpanRec> client(String traceId) {
        List<SpanRec> out = new ArrayList<>();
        for (SpanData s : exported.getFinishedSpanItems()) {
            if (s.getTraceId().equals(traceId)) {
                out.add(rec(s));
            }
        }
        return out;
    }

    SpanData named(String traceId, String name) {
        SpanData found = null;
        for (SpanData s : exported.getFinishedSpanItems()) {
            if (s.getTraceId().equals(traceId) && s.getName().equals(name)) {
                assertTrue(found == null, "two " + name + " spans in trace " + traceId);
                found = s;
            }
        }
        assertTrue(found != null, "no " + name + " span in trace " + traceId + ": " + exported.getFinishedSpanItems());
        return found;
    }

    /**
     * The spans of one trace, each under its parent, siblings sorted, as
     * "side name{attrs}" (the Go test's tree); with all, every attribute and
     * the ids.
     */
    static String tree(List<SpanRec> spans, boolean all) {
        Set<String> ids = new HashSet<>();
        spans.forEach(s -> ids.add(s.spanId()));
        Map<String, List<SpanRec>> children = new HashMap<>();
        List<SpanRec> roots = new ArrayList<>();
        for (SpanRec s : spans) {
            if (ids.contains(s.parentId())) {
                children.computeIfAbsent(s.parentId(), k -> new ArrayList<>()).add(s);
            } else {
                roots.add(s);
            }
        }
        Function<SpanRec, String> line = s -> {
            List<String> attrs = new ArrayList<>();
            s.attrs().forEach((k, v) -> {
                if (all || SHOWN.contains(k)) {
                    attrs.add(k + "=" + v);
                }
            });
            attrs.sort(null);
            String l = s.side() + " " + s.name() + "{" + String.join(" ", attrs) + "}";
            return all ? l + " span=" + s.spanId() + " parent=" + s.parentId() : l;
        };
        StringBuilder b = new StringBuilder();
        walk(roots, 0, children, line, b);
        return b.toString();
    }

    private static void walk(List<SpanRec> ss, int depth, Map<String, List<SpanRec>> children, Function<SpanRec, String> line, StringBuilder b) {
        List<SpanRec> sorted = new ArrayList<>(ss);
        sorted.sort(Comparator.comparing(line));
        for (SpanRec s : sorted) {
            b.append("  ".repeat(depth)).append(line.apply(s)).append('\n');
            walk(children.getOrDefault(s.spanId(), List.of()), depth + 1, children, line, b);
        }
    }

    interface Work {
        void run() throws Exception;
    }

    /** Runs work under a new application span "request", and returns that span's trace id. */
    @SuppressWarnings("try")
    String underRequest(Work work) throws Exception {
        Span req = app.spanBuilder("request").startSpan();
        try (Scope ignored = req.makeCurrent()) {
            work.run();
        } finally {
            req.end();
        }
        return req.getSpanContext().getTraceId();
    }

    /** Begins on tm, inserts a new id through each source, commits; returns the gtrid. */
    static String write(TandemTransactionManager tm, DataSource... sources) throws Exception {
        tm.begin();
        String g = ((TandemTransaction) tm.getTransaction()).gtrid();
        String id = TandemJtaTest.id();
        for (DataSource ds : sources) {
            try (Connection c = ds.getConnection()) {
                TandemJtaTest.insert(c, id);
            }
        }
        tm.commit();
        return g;
    }

    // A commit-point transaction is one span with a child per phase:
    // pg's prepare, the decision at maria (its commit), pg's phase 2; a
    // child of the application's span, naming the gtrid.
    @Test
    void commitPointTransaction() throws Exception {
        try (TandemTransactionManager tm = manager(TandemConfig.DecideAt.AUTO);
                TandemDataSource pg = TandemDataSource.postgres(tm, "pg", TestEnv.pgSource());
                TandemDataSource maria = TandemDataSource.mariadb(tm, "maria", TestEnv.mariaSource())) {
            String[] g = new String[1];
            String trace = underRequest(() -> g[0] = write(tm, maria, pg));
            assertEquals("""
                    client request{}
                      client tandem.tx{tandem.commit_point=maria tandem.outcome=committed tandem.path=commit-point}
                        client tandem.decision{tandem.decided_by=commit-point tandem.rm=maria}
                        client tandem.phase2{tandem.action=commit tandem.rm=pg}
                        client tandem.prepare{tandem.rm=pg}
                    """, tree(client(trace), false), tree(client(trace), true));
            assertEquals(g[0], named(trace, TandemTracing.SPAN_TX).getAttributes().get(TandemTracing.GTRID));
            assertEquals(SpanKind.INTERNAL, named(trace, TandemTracing.SPAN_DECISION).getKind());
            for (SpanData s : exported.getFinishedSpanItems()) {
                assertEquals(StatusCode.UNSET, s.getStatus().getStatusCode(), s.getName() + " " + s.getStatus());
            }
        }
    }

    // One writer: its one-phase commit is the decision; none: the
    // transaction's span alone.
    @Test
    void onePhaseAndLocalTransactions() throws Exception {
        try (TandemTransactionManager tm = manager(TandemConfig.DecideAt.AUTO);
                TandemDataSource pg = TandemDataSource.postgres(tm, "pg", TestEnv.pgSource())) {
            String one = underRequest(() -> write(tm, pg));
            assertEquals("""
                    client request{}
                      client tandem.tx{tandem.outcome=committed tandem.path=one-phase}
                        client tandem.decision{tandem.decided_by=one-phase tandem.rm=pg}
                    """, tree(client(one), false));
            String local = underRequest(() -> {
                tm.begin();
                try (Connection c = pg.getConnection()) { // PostgreSQL tells a branch that wrote nothing
                    TandemJtaTest.count(c);
                }
                tm.commit();
            });
            assertEquals("""
                    client request{}
                      client tandem.tx{tandem.outcome=committed tandem.path=local}
                    """, tree(client(local), false));
        }
    }

    // The connection to the commit point breaks after its decision reached
    // MariaDB (the reply is dropped): the decision's span is an error, and
    // taking the key, which finds COMMIT, is a span of its own (the Go SDK's
    // TestSpanOfTakingTheKey, there with fakes).
    @Test
    void takingTheKey() throws Exception {
        java.util.concurrent.ScheduledExecutorService timer = java.util.concurrent.Executors.newSingleThreadScheduledExecutor();
        String[] hp = TestEnv.MY_HOST_PORT.split(":");
        try (TcpProxy px = new TcpProxy(hp[0], Integer.parseInt(hp[1]));
                TandemTransactionManager tm = manager(TandemConfig.DecideAt.AUTO);
                TandemDataSource pg = TandemDataSource.postgres(tm, "pg", TestEnv.pgSource());
                TandemDataSource maria = TandemDataSource.mariadb(tm, "maria", TestEnv.mariaSourceVia(px.port()))) {
            TandemTransaction.failpoint = step -> {
                if (step.equals("before-commit-point")) {
                    px.dropToClient = true;
                    timer.schedule(px::cut, 1, java.util.concurrent.TimeUnit.SECONDS);
                }
            };
            String trace = underRequest(() -> write(tm, maria, pg));
            assertEquals("""
                    client request{}
                      client tandem.tx{tandem.commit_point=maria tandem.outcome=committed tandem.path=commit-point}
                        client tandem.decision{tandem.decided_by=commit-point tandem.rm=maria}
                        client tandem.phase2{tandem.action=commit tandem.rm=pg}
                        client tandem.prepare{tandem.rm=pg}
                        client tandem.take_key{tandem.outcome=committed tandem.rm=maria}
                    """, tree(client(trace), false));
            assertEquals(StatusCode.ERROR, named(trace, TandemTracing.SPAN_DECISION).getStatus().getStatusCode());
            for (String name : List.of(TandemTracing.SPAN_TX, TandemTracing.SPAN_TAKE_KEY, TandemTracing.SPAN_PHASE2)) {
                assertEquals(StatusCode.UNSET, named(trace, name).getStatus().getStatusCode(), name);
            }
        } finally {
            timer.shutdownNow();
        }
    }

    // A rollback is the transaction's span alone, rolled-back; without an
    // application span current at begin, a trace of its own.
    @Test
    void rollback() throws Exception {
        try (TandemTransactionManager tm = manager(TandemConfig.DecideAt.AUTO);
                TandemDataSource pg = TandemDataSource.postgres(tm, "pg", TestEnv.pgSource());
                TandemDataSource maria = TandemDataSource.mariadb(tm, "maria", TestEnv.mariaSource())) {
            tm.begin();
            String g = ((TandemTransaction) tm.getTransaction()).gtrid();
            try (Connection a = pg.getConnection(); Connection b = maria.getConnection()) {
                TandemJtaTest.insert(a, TandemJtaTest.id());
                TandemJtaTest.insert(b, TandemJtaTest.id());
            }
            tm.rollback();
            List<SpanData> all = exported.getFinishedSpanItems();
            assertEquals(1, all.size(), all.toString());
            SpanData tx = all.get(0);
            assertFalse(tx.getParentSpanContext().isValid(), "a root span: no span was current at begin");
            assertEquals("client tandem.tx{tandem.outcome=rolled-back}\n", tree(List.of(rec(tx)), false));
            assertEquals(g, tx.getAttributes().get(TandemTracing.GTRID));
            assertEquals(StatusCode.UNSET, tx.getStatus().getStatusCode());
        }
    }

    // A commit that rolls back (pg's PREPARE fails on a deferred foreign
    // key): the transaction's span and the failed phase's say so with an
    // error status.
    @Test
    void abortedCommitIsAnError() throws Exception {
        try (TandemTransactionManager tm = manager(TandemConfig.DecideAt.AUTO);
                TandemDataSource pg = TandemDataSource.postgres(tm, "pg", TestEnv.pgSource());
                TandemDataSource maria = TandemDataSource.mariadb(tm, "maria", TestEnv.mariaSource())) {
            String trace = underRequest(() -> {
                tm.begin();
                try (Connection a = pg.getConnection(); Connection b = maria.getConnection()) {
                    TandemJtaTest.insert(b, TandemJtaTest.id());
                    try (PreparedStatement ps = a.prepareStatement("INSERT INTO jta_child (id, parent) VALUES (?, -1)")) {
                        ps.setString(1, TandemJtaTest.id());
                        ps.executeUpdate();
                    }
                }
                assertThrows(RollbackException.class, tm::commit);
            });
            assertEquals("""
                    client request{}
                      client tandem.tx{tandem.commit_point=maria tandem.outcome=aborted tandem.path=commit-point}
                        client tandem.prepare{tandem.rm=pg}
                    """, tree(client(trace), false));
            for (String name : List.of(TandemTracing.SPAN_TX, TandemTracing.SPAN_PREPARE)) {
                SpanData s = named(trace, name);
                assertEquals(StatusCode.ERROR, s.getStatus().getStatusCode(), name + " " + s.getStatus());
            }
            assertTrue(named(trace, TandemTracing.SPAN_TX).getStatus().getDescription().contains("phase 1 failed"),
                    named(trace, TandemTracing.SPAN_TX).getStatus().getDescription());
        }
    }

    // Decided by the coordinator: one trace across both processes. The
    // Commit RPC is tandem.decision, a client span; the coordinator's Commit
    // span is its child (the call carried its traceparent), with the
    // decision log write and phase 2 per RM under it; maria's branch, bound
    // to the session, is committed by the client after the decision. A
    // commit-point transaction and an untraced client make no coordinator
    // span.
    @Test
    void coordinatorDecidedTransactionIsOneTraceWithTheCoordinator() throws Exception {
        try (TandemTransactionManager auto = manager(TandemConfig.DecideAt.AUTO);
                TandemDataSource pg1 = TandemDataSource.postgres(auto, "pg", TestEnv.pgSource());
                TandemDataSource maria1 = TandemDataSource.mariadb(auto, "maria", TestEnv.mariaSource());
                TandemTransactionManager untraced = TandemTransactionManager.create(TandemConfig.coordinator(coord.addr)
                        .withDecideAt(TandemConfig.DecideAt.COORDINATOR));
                TandemDataSource pg2 = TandemDataSource.postgres(untraced, "pg", TestEnv.pgSource());
                TandemDataSource maria2 = TandemDataSource.mariadb(untraced, "maria", TestEnv.mariaSource());
                TandemTransactionManager tm = manager(TandemConfig.DecideAt.COORDINATOR);
                TandemDataSource pg = TandemDataSource.postgres(tm, "pg", TestEnv.pgSource());
                TandemDataSource maria = TandemDataSource.mariadb(tm, "maria", TestEnv.mariaSource())) {
            String cpTrace = underRequest(() -> write(auto, maria1, pg1));
            String plain = write(untraced, pg2, maria2); // no span current, no provider: no traceparent
            String[] g = new String[1];
            String trace = underRequest(() -> g[0] = write(tm, pg, maria));

            String want = """
                    client request{}
                      client tandem.tx{tandem.coordinator_calls=1 tandem.outcome=committed tandem.path=two-phase}
                        client tandem.decision{tandem.coordinator_calls=1 tandem.decided_by=coordinator tandem.outcome=committed}
                          coordinator tandem.coordinator.Commit{tandem.outcome=committed tandem.phase2_pending=false}
                            coordinator tandem.coordinator.decision_log{tandem.durable=true tandem.outcome=committed}
                            coordinator tandem.coordinator.phase2{tandem.action=check tandem.result=settled tandem.rm=maria}
                            coordinator tandem.coordinator.phase2{tandem.action=check tandem.result=settled tandem.rm=pg}
                        client tandem.phase2{tandem.action=commit tandem.rm=maria}
                        client tandem.phase2{tandem.action=commit tandem.rm=pg}
                        client tandem.prepare{tandem.rm=maria}
                        client tandem.prepare{tandem.rm=pg}
                    """;
            List<SpanRec> all = List.of();
            long deadline = System.currentTimeMillis() + 10_000;
            while (true) {
                all = new ArrayList<>(client(trace));
                all.addAll(collector.of(trace));
                // The coordinator's first check of maria's branch, which the
                // client commits, may find it still prepared (held): a span of
                // its own, and another attempt follows.
                all.removeIf(s -> "held".equals(s.attrs().get("tandem.result")));
                String got = tree(all, false);
                if (got.equals(want)) {
                    break;
                }
                if (System.currentTimeMillis() > deadline) {
                    fail("coordinator-decided transaction's trace (client and coordinator):\n" + tree(all, true) + "\nwant:\n" + want
                            + "\nthe coordinator received:\n" + tree(collector.all(), true) + "\ncoordinator output:\n" + coord.output());
                }
                Thread.sleep(50);
            }
            SpanData decision = named(trace, TandemTracing.SPAN_DECISION);
            assertEquals(SpanKind.CLIENT, decision.getKind());
            for (SpanRec s : all) {
                if (s.side().equals("coordinator")) {
                    assertEquals("tandem-coordinator", s.attrs().get("service.name"), s.toString());
                    if (s.name().equals("tandem.coordinator.Commit")) {
                        assertEquals(decision.getSpanId(), s.parentId(), "the coordinator's Commit span's parent is the client's tandem.decision");
                        assertEquals(g[0], s.attrs().get("tandem.gtrid"));
                    }
                }
            }
            assertEquals(List.of(), collector.of(cpTrace), "the coordinator made spans in the commit-point transaction's trace (it made no decision there)");
            for (SpanRec s : collector.all()) {
                assertFalse(plain.equals(s.attrs().get("tandem.gtrid")), "the coordinator made a span for a client that traces nothing: " + s);
            }
        }
    }

    // With no tracer provider and no global OpenTelemetry, a transaction
    // makes no span and tracing allocates nothing: begin returns the shared
    // NONE after one volatile read and a clock read (the Go SDK's
    // TestNoProviderCostsThreeAllocations).
    @Test
    void noProviderCostsNothing() {
        assertFalse(GlobalOpenTelemetry.isSet(), "a test left a global OpenTelemetry installed");
        TandemTracing t = new TandemTracing(null);
        com.sun.management.ThreadMXBean mx = (com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean();
        int n = 200_000;
        for (int i = 0; i < n; i++) {
            assertSame(TandemTracing.TxSpans.NONE, t.begin("0123456789abcdef0123456789abcdef"));
        }
        long before = mx.getCurrentThreadAllocatedBytes();
        for (int i = 0; i < n; i++) {
            if (t.begin("0123456789abcdef0123456789abcdef") != TandemTracing.TxSpans.NONE) {
                fail("a span with no provider");
            }
        }
        long bytes = mx.getCurrentThreadAllocatedBytes() - before;
        assertTrue(bytes < n / 10, bytes + " bytes allocated by " + n + " begins with no provider");
        assertFalse(GlobalOpenTelemetry.isSet(), "looking for the global OpenTelemetry installed one");
    }

    // Without a provider of its own, a manager uses the global OpenTelemetry
    // once the application installed it (looked for at most once a second),
    // and never installs one itself.
    @Test
    void globalOpenTelemetryOnceInstalled() throws Exception {
        assertFalse(GlobalOpenTelemetry.isSet(), "a test left a global OpenTelemetry installed");
        try (TandemTransactionManager tm = TandemTransactionManager.create(TandemConfig.coordinator(coord.addr));
                TandemDataSource pg = TandemDataSource.postgres(tm, "pg", TestEnv.pgSource())) {
            write(tm, pg);
            assertEquals(List.of(), exported.getFinishedSpanItems());
            assertFalse(GlobalOpenTelemetry.isSet(), "the manager installed a global OpenTelemetry");
            GlobalOpenTelemetry.set(OpenTelemetrySdk.builder().setTracerProvider(tp).build());
            try {
                Thread.sleep(TandemTracing.LOOK_AGAIN_NANOS / 1_000_000 + 100);
                String trace = underRequest(() -> write(tm, pg));
                assertEquals("""
                        client request{}
                          client tandem.tx{tandem.outcome=committed tandem.path=one-phase}
                            client tandem.decision{tandem.decided_by=one-phase tandem.rm=pg}
                        """, tree(client(trace), false));
            } finally {
                GlobalOpenTelemetry.resetForTest();
            }
        }
    }
}
