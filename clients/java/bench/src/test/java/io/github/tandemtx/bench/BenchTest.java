package io.github.tandemtx.bench;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import org.junit.jupiter.api.Test;

/**
 * The benchmark's flags and DSN conversion, and a short run of sql, raw2pc,
 * raw2pc-xa, narayana and atomikos against the real databases
 * ($TANDEM_PG_DSN, $TANDEM_MYSQL_DSN): every workload commits, none fails,
 * every check after a workload passes (nothing left prepared, the same rows
 * on both databases), and the transaction managers' log directories are gone.
 */
class BenchTest {
    @Test
    void goDsnsBecomeJdbcUrls() {
        assertEquals("jdbc:postgresql://127.0.0.1:55432/tandem?user=tandem&password=secret&sslmode=disable",
                Dsn.postgres("postgres://tandem:secret@127.0.0.1:55432/tandem?sslmode=disable"));
        assertEquals("jdbc:mariadb://127.0.0.1:53306/tandem?user=tandem&password=secret",
                Dsn.mariadb("tandem:secret@tcp(127.0.0.1:53306)/tandem?multiStatements=true&interpolateParams=true"));
        assertEquals("jdbc:mariadb://h:1/d?user=u", Dsn.mariadb("jdbc:mariadb://h:1/d?user=u"));
        assertEquals("jdbc:postgresql://h:1/d?user=u&password=***", Dsn.redact("jdbc:postgresql://h:1/d?user=u&password=secret"));
        Exception e = assertThrows(IllegalArgumentException.class, () -> Dsn.mariadb("tandem:secret@127.0.0.1/tandem"));
        assertTrue(!e.getMessage().contains("secret"), e.getMessage());
    }

    @Test
    void badFlagsSayWhatIsWrong() throws Exception {
        String[] db = {"--pg", "postgres://u@h/d", "--maria", "u@tcp(h:1)/d"};
        assertEquals("--workloads: unknown workload xa (sql, raw2pc, raw2pc-xa, tandem, tandem-coord, narayana, narayana-journal, atomikos)",
                bad("--workloads", "sql,xa"));
        assertTrue(bad("--workloads", "narayana,narayana-journal").startsWith("--workloads: narayana and narayana-journal cannot be in one run"));
        assertEquals("--dir /nonexistent/dir: not a directory", bad("--dir", "/nonexistent/dir"));
        assertEquals("--threads 0: give 1 to 1024", bad("--threads", "0"));
        assertEquals("--duration 10: not a duration (e.g. 500ms, 20s, 1m30s)", bad("--duration", "10"));
        assertEquals("unknown flag --thread (see --help)", bad("--thread", "2"));
        assertTrue(bad(concat(db, "--workloads", "sql,tandem")).startsWith("the tandem workloads need a coordinator"));
        Flags f = Flags.parse(concat(db, "--duration", "1m30s", "--workloads", "raw2pc,sql"));
        assertEquals(Duration.ofSeconds(90), f.duration);
        assertEquals(Duration.ofSeconds(1), f.slice);
        assertEquals(java.util.List.of("raw2pc", "sql"), f.workloads);
        assertEquals(Duration.ofMillis(500), Flags.parse(concat(db, "--duration", "2s", "--workloads", "sql")).slice);
    }

    @Test
    void shortRunAgainstTheDatabases() throws Exception {
        String pg = System.getenv("TANDEM_PG_DSN"), maria = System.getenv("TANDEM_MYSQL_DSN");
        if (pg == null || pg.isEmpty() || maria == null || maria.isEmpty()) {
            throw new IllegalStateException("the bench's test needs the real databases: TANDEM_PG_DSN and TANDEM_MYSQL_DSN are unset;"
                    + " run eval \"$(scripts/db env)\" (scripts/test does)");
        }
        java.nio.file.Path dir = java.nio.file.Files.createTempDirectory("bench-test-");
        Flags f = Flags.parse(new String[] {"--pg", pg, "--maria", maria, "--workloads", "sql,raw2pc,raw2pc-xa,narayana,atomikos",
            "--threads", "2", "--duration", "600ms", "--slice", "200ms", "--warmup", "100ms", "--progress", "0", "--dir", dir.toString()});
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        Main.Result r = new Main().run(f, new PrintStream(out, true, StandardCharsets.UTF_8), System.err);
        String report = out.toString(StandardCharsets.UTF_8);
        for (Main.Stats s : r.workloads()) {
            assertTrue(s.txns > 0, s.wl.name() + " committed nothing:\n" + report);
            assertEquals(0, s.errs, s.wl.name() + " had failures:\n" + report);
            assertTrue(s.quantileMs(0.5) > 0 && s.quantileMs(0.99) >= s.quantileMs(0.5), report);
            assertTrue(s.procCpuNanos > 0, report);
        }
        long committed = r.workloads().stream().mapToLong(s -> s.txns).sum();
        assertEquals(r.rows()[0], r.rows()[1], "pg and maria rows differ:\n" + report);
        assertTrue(r.rows()[0] >= committed, report); // the warm-up's rows too
        assertTrue(report.contains("TPS÷sql"), report);
        assertTrue(r.checksPassed(), report);
        for (String w : f.workloads) {
            assertTrue(report.contains("check after " + w + ": nothing left prepared"), report);
        }
        try (var left = java.nio.file.Files.list(dir)) {
            assertEquals(java.util.List.of(), left.toList(), "the TMs' log directories are left");
        }
        java.nio.file.Files.delete(dir);
    }

    /**
     * A run that exits with branches still prepared (a coordinator's phase 2
     * cut short) leaves their rows locked; whoever resolves them later makes
     * them appear after the next run's setup emptied the table. Here an
     * earlier run's transaction holds ids 1 to 100, prepared, and is
     * committed after this run (or after 5 s, if this run is stuck behind
     * it): the run must meet none of them, neither waiting for their locks
     * nor failing on their keys.
     */
    @Test
    void anEarlierRunsPreparedRowsAreNeverMet() throws Exception {
        String pg = env("TANDEM_PG_DSN"), maria = env("TANDEM_MYSQL_DSN");
        String gid = "bench-test-earlier-run:" + System.nanoTime();
        String url = Dsn.postgres(pg);
        try (java.sql.Connection c = java.sql.DriverManager.getConnection(url); java.sql.Statement s = c.createStatement()) {
            s.execute("CREATE TABLE IF NOT EXISTS tandem_bench (id bigint PRIMARY KEY, v varchar(64) NOT NULL)");
            s.execute("BEGIN; DELETE FROM tandem_bench WHERE id BETWEEN 1 AND 100; INSERT INTO tandem_bench (id, v) SELECT g, 'an earlier run' FROM generate_series(1, 100) g; PREPARE TRANSACTION '" + gid + "'");
        }
        java.util.concurrent.CountDownLatch ran = new java.util.concurrent.CountDownLatch(1);
        java.util.concurrent.atomic.AtomicReference<Exception> resolveFailed = new java.util.concurrent.atomic.AtomicReference<>();
        Thread resolver = new Thread(() -> {
            try {
                ran.await(5, java.util.concurrent.TimeUnit.SECONDS);
                try (java.sql.Connection c = java.sql.DriverManager.getConnection(url); java.sql.Statement s = c.createStatement()) {
                    s.execute("COMMIT PREPARED '" + gid + "'");
                }
            } catch (Exception e) {
                resolveFailed.set(e);
            }
        });
        resolver.start();
        Main.Result r;
        String report;
        try {
            Flags f = Flags.parse(new String[] {"--pg", pg, "--maria", maria, "--workloads", "sql", "--threads", "2", "--duration", "600ms",
                "--slice", "200ms", "--warmup", "100ms", "--progress", "0"});
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            r = new Main().run(f, new PrintStream(out, true, StandardCharsets.UTF_8), System.err);
            report = out.toString(StandardCharsets.UTF_8);
        } finally {
            ran.countDown();
            resolver.join();
            try (java.sql.Connection c = java.sql.DriverManager.getConnection(url); java.sql.Statement s = c.createStatement()) {
                s.execute("DELETE FROM tandem_bench WHERE v = 'an earlier run'");
            }
        }
        assertEquals(null, resolveFailed.get(), "committing the earlier run's prepared transaction " + gid + " failed");
        assertEquals(0, r.failed(), "transactions failed (warm-up included):\n" + report);
        assertTrue(r.workloads().get(0).txns > 0, report);
        assertTrue(r.checksPassed(), report);
    }

    private static String env(String name) {
        String v = System.getenv(name);
        if (v == null || v.isEmpty()) {
            throw new IllegalStateException("the bench's test needs the real databases: " + name + " is unset; run eval \"$(scripts/db env)\" (scripts/test does)");
        }
        return v;
    }

    @Test
    void anUnreachableDatabaseIsNamed() throws Exception {
        Flags f = Flags.parse(new String[] {"--pg", "postgres://u:secret@127.0.0.1:1/d", "--maria", "u@tcp(127.0.0.1:1)/d", "--workloads", "sql"});
        Main.Fatal e = assertThrows(Main.Fatal.class, () -> new Main().run(f, System.out, System.err));
        assertTrue(e.getMessage().startsWith("rm pg (jdbc:postgresql://127.0.0.1:1/d?user=u&password=***"), e.getMessage());
        assertTrue(e.getMessage().contains("is the database running"), e.getMessage());
    }

    private static String bad(String... args) {
        return assertThrows(Flags.BadFlag.class, () -> Flags.parse(args)).getMessage();
    }

    private static String[] concat(String[] a, String... b) {
        String[] r = java.util.Arrays.copyOf(a, a.length + b.length);
        System.arraycopy(b, 0, r, a.length, b.length);
        return r;
    }
}
