package io.github.tandemtx.jta;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.logging.Handler;
import java.util.logging.LogRecord;
import java.util.logging.Logger;
import org.junit.jupiter.api.Test;
import tandem.v1.Tandem.Outcome;

/**
 * Following the primary with real coordinators: two `tandem serve` processes
 * as a primary and its standby (max-protection, each naming the other, as
 * test/e2e/roles_test.go starts them), a transaction manager that knows both
 * addresses and has the coordinator decide, and `tandem switchover` while two
 * threads commit.
 */
class PairFollowTest {
    private static final Logger LOG = Logger.getLogger("io.github.tandemtx.jta");

    static String run(long timeoutSec, String... args) throws Exception {
        List<String> cmd = new ArrayList<>(List.of(TestEnv.tandemBin()));
        cmd.addAll(List.of(args));
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        byte[] out = p.getInputStream().readAllBytes();
        if (!p.waitFor(timeoutSec, TimeUnit.SECONDS)) {
            p.destroyForcibly();
        }
        return "exit " + p.exitValue() + ":\n" + new String(out, StandardCharsets.UTF_8);
    }

    /**
     * Transactions keep committing through a switchover with no repointing
     * and no error: each on both databases, the manager now on the new
     * primary (which says COMMITTED for the last one), the move logged.
     */
    @Test
    void commitsThroughASwitchover() throws Exception {
        TestEnv.createTables();
        Path dir = Files.createTempDirectory("tandem-jta-pair");
        Path secret = dir.resolve("standby-secret");
        String made = run(30, "secret", "--out", secret.toString());
        assertTrue(Files.exists(secret), "tandem secret: " + made);
        String adminA = "127.0.0.1:" + TestEnv.freePort(), adminB = "127.0.0.1:" + TestEnv.freePort();
        String listenA = "127.0.0.1:" + TestEnv.freePort(), listenB = "127.0.0.1:" + TestEnv.freePort();
        List<String> common = List.of("--standby-secret-file", secret.toString(), "--protection", "max-protection", "--net-timeout", "1s",
                "--max-clock-skew", "1s");
        List<String> moved = Collections.synchronizedList(new ArrayList<>());
        Handler capture = new Handler() {
            @Override
            public void publish(LogRecord r) {
                if (r.getMessage().contains("coordinator moved")) {
                    moved.add(r.getMessage());
                }
            }

            @Override
            public void flush() {
            }

            @Override
            public void close() {
            }
        };
        LOG.addHandler(capture);
        List<String> aArgs = new ArrayList<>(List.of("--admin", adminA, "--standby-listen", listenA, "--peer", listenB));
        aArgs.addAll(common);
        List<String> bArgs = new ArrayList<>(List.of("--admin", adminB, "--standby-of", listenA, "--standby-listen", listenB, "--peer", listenA));
        bArgs.addAll(common);
        try (Coordinator a = new Coordinator(null, aArgs.toArray(String[]::new));
                Coordinator b = new Coordinator(null, bArgs.toArray(String[]::new))) {
            assertTrue(TestEnv.eventually(15_000, () -> a.healthMessage().contains("standby=127.0.0.1") && b.healthMessage().contains("(following)")),
                    "the standby follows the primary: A says " + a.healthMessage() + "; B says " + b.healthMessage());
            try (TandemTransactionManager tm = TandemTransactionManager.create(
                    TandemConfig.coordinators(a.addr, b.addr).withDecideAt(TandemConfig.DecideAt.COORDINATOR));
                    TandemDataSource pg = TandemDataSource.postgres(tm, "pg", TestEnv.pgSource());
                    TandemDataSource maria = TandemDataSource.mariadb(tm, "maria", TestEnv.mariaSource())) {
                tm.verify();
                List<String> ids = Collections.synchronizedList(new ArrayList<>());
                List<String> gtrids = Collections.synchronizedList(new ArrayList<>());
                List<Throwable> errors = Collections.synchronizedList(new ArrayList<>());
                AtomicBoolean stop = new AtomicBoolean();
                List<Thread> workers = new ArrayList<>();
                for (int w = 0; w < 2; w++) {
                    Thread t = new Thread(() -> {
                        while (!stop.get()) {
                            String id = TandemJtaTest.id();
                            try {
                                tm.begin();
                                String g = ((TandemTransaction) tm.getTransaction()).gtrid();
                                try (Connection c1 = pg.getConnection(); Connection c2 = maria.getConnection()) {
                                    TandemJtaTest.insert(c1, id);
                                    TandemJtaTest.insert(c2, id);
                                }
                                tm.commit();
                                ids.add(id);
                                gtrids.add(g);
                            } catch (Throwable e) {
                                errors.add(e);
                                try {
                                    if (tm.getTransaction() != null) {
                                        tm.rollback();
                                    }
                                } catch (Exception ignored) {
                                    // reported by errors
                                }
                            }
                        }
                    });
                    t.start();
                    workers.add(t);
                }
                try {
                    assertTrue(TestEnv.eventually(60_000, () -> ids.size() >= 20), "transactions through the first primary: " + ids.size() + " " + errors);
                    String out = run(90, "switchover", "--primary-admin", adminA, "--standby-admin", adminB,
                            "--primary-token-file", a.dataDir.resolve("admin.token").toString(), "--standby-token-file", b.dataDir.resolve("admin.token").toString());
                    assertTrue(out.contains("switchover done"), "tandem switchover A→B: " + out + "\nA's log:\n" + a.output() + "\nB's log:\n" + b.output());
                    int before = ids.size();
                    assertTrue(TestEnv.eventually(60_000, () -> ids.size() >= before + 20), "transactions through the new primary: "
                            + (ids.size() - before) + " " + errors);
                } finally {
                    stop.set(true);
                    for (Thread t : workers) {
                        t.join(60_000);
                    }
                }
                assertEquals(List.of(), errors, "no transaction failed across the switchover");
                for (String id : ids) {
                    assertTrue(TestEnv.pgHas(id) && TestEnv.mariaHas(id), id + " on both databases");
                }
                assertEquals(b.addr, tm.coordinator().target(), "the manager uses the new primary");
                assertEquals(Outcome.COMMITTED, b.status(gtrids.get(gtrids.size() - 1)), "the new primary decided the last one");
                assertEquals(1, moved.stream().filter(m -> m.contains("coordinator moved from " + a.addr + " to " + b.addr)).count(), moved.toString());
                System.out.println("PairFollowTest: " + ids.size() + " transactions committed across the switchover; " + moved);
            }
        } finally {
            LOG.removeHandler(capture);
            try (var s = Files.walk(dir)) {
                s.sorted(java.util.Comparator.reverseOrder()).forEach(f -> f.toFile().delete());
            }
        }
    }
}
