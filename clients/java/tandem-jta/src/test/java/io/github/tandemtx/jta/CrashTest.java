package io.github.tandemtx.jta;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.BufferedReader;
import java.io.File;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import tandem.v1.Tandem.Outcome;

/** Crashes: a JVM killed with its branches prepared; a coordinator killed right after its decision. */
class CrashTest {
    @BeforeAll
    static void tables() throws Exception {
        TestEnv.createTables();
    }

    /**
     * A child JVM prepares both branches and is killed (SIGKILL) before any
     * decision. The JVM kept no log: the coordinator finds the branches by
     * their Tandem names in pg_prepared_xacts and XA RECOVER, sees no
     * decision, and after its orphan timeout decides ABORT and rolls both
     * back. Its Status then answers ABORTED for the gtrid.
     */
    @Test
    void jvmKilledAfterPrepareIsSettledByTheCoordinator() throws Exception {
        try (Coordinator coord = new Coordinator(null);
                TcpProxy proxy = new TcpProxy("127.0.0.1", Integer.parseInt(coord.addr.substring(coord.addr.lastIndexOf(':') + 1)))) {
            coord.awaitPastBirth();
            String id = TandemJtaTest.id();
            // The child reaches the coordinator through the proxy: it learns the
            // cluster (Health), then the proxy drops everything, so its Commit
            // call never gets through.
            String java = System.getProperty("java.home") + File.separator + "bin" + File.separator + "java";
            Process child = new ProcessBuilder(java, "-cp", System.getProperty("java.class.path"),
                    PrepareAndHang.class.getName(), "127.0.0.1:" + proxy.port(), id).redirectErrorStream(true).start();
            try {
                BufferedReader out = new BufferedReader(new InputStreamReader(child.getInputStream(), StandardCharsets.UTF_8));
                StringBuilder seen = new StringBuilder();
                String line;
                while ((line = out.readLine()) != null && !line.startsWith("GTRID ")) {
                    seen.append(line).append('\n'); // the drivers' logging
                }
                assertTrue(line != null, "the child printed no gtrid:\n" + seen);
                String g = line.substring(6);
                proxy.dropToServer = true;
                proxy.dropToClient = true;
                child.getOutputStream().write('\n');
                child.getOutputStream().flush();
                Matcher cm = Pattern.compile("cluster=([0-9a-f]{32})").matcher(coord.healthMessage());
                assertTrue(cm.find(), "the coordinator names its cluster: " + coord.healthMessage());
                String cluster = cm.group(1);
                List<String> want = List.of("pg tandem2:" + g + ":pg:" + cluster, "maria " + g + "," + cluster + "maria," + TandemXid.OWNED_FORMAT_ID);
                assertTrue(TestEnv.eventually(20_000, () -> TestEnv.prepared(g).containsAll(want)),
                        "both branches prepared under Tandem's names, owned by the coordinator's cluster: " + TestEnv.prepared(g));
                child.destroyForcibly();
                assertTrue(child.waitFor(10, TimeUnit.SECONDS), "child killed");
                assertTrue(TestEnv.eventually(30_000, () -> TestEnv.prepared(g).isEmpty()),
                        "the coordinator settled the dead JVM's branches: " + TestEnv.prepared(g) + "\n" + coord.output());
                assertEquals(Outcome.ABORTED, coord.status(g), "settled by the coordinator's decision");
                assertFalse(TestEnv.pgHas(id));
                assertFalse(TestEnv.mariaHas(id));
            } finally {
                child.destroyForcibly();
            }
        }
    }

    /**
     * A child JVM is killed while the coordinator holds its Commit (the
     * decision record written, the reply held back 3 s by a failpoint), so
     * the JVM dies with its MariaDB branch prepared on its own session and
     * never settles it. The coordinator settles both branches by itself —
     * committed, as it decided; the assertion is only that the outcome is
     * whole and matches the coordinator's Status, since the instant of the
     * kill is not synchronised with the decision.
     */
    @Test
    void jvmKilledDuringTheDecisionIsSettledWhole() throws Exception {
        try (Coordinator coord = new Coordinator("after-commit-record=sleep(3s)")) {
            String id = TandemJtaTest.id();
            String java = System.getProperty("java.home") + File.separator + "bin" + File.separator + "java";
            Process child = new ProcessBuilder(java, "-cp", System.getProperty("java.class.path"),
                    PrepareAndHang.class.getName(), coord.addr, id).redirectErrorStream(true).start();
            try {
                BufferedReader out = new BufferedReader(new InputStreamReader(child.getInputStream(), StandardCharsets.UTF_8));
                String line;
                while ((line = out.readLine()) != null && !line.startsWith("GTRID ")) {
                    // the drivers' logging
                }
                assertTrue(line != null, "the child printed no gtrid");
                String g = line.substring(6);
                child.getOutputStream().write('\n'); // go on: prepare and commit
                child.getOutputStream().flush();
                assertTrue(TestEnv.eventually(20_000, () -> TestEnv.prepared(g).size() == 2), "both prepared: " + TestEnv.prepared(g));
                Thread.sleep(1000); // the Commit call is in the coordinator's hands now (nearly always)
                child.destroyForcibly();
                assertTrue(child.waitFor(10, TimeUnit.SECONDS), "child killed");
                assertTrue(TestEnv.eventually(30_000, () -> TestEnv.prepared(g).isEmpty()),
                        "the coordinator settled the dead JVM's branches: " + TestEnv.prepared(g) + "\n" + coord.output());
                Outcome o = coord.status(g);
                boolean pgRow = TestEnv.pgHas(id);
                boolean myRow = TestEnv.mariaHas(id);
                System.out.println("jvmKilledDuringTheDecisionIsSettledWhole: outcome " + o + ", pg row " + pgRow + ", maria row " + myRow);
                assertEquals(pgRow, myRow, "never split");
                assertEquals(o == Outcome.COMMITTED, pgRow, "the rows match the coordinator's decision " + o);
            } finally {
                child.destroyForcibly();
            }
        }
    }

    /**
     * The coordinator dies right after its COMMIT record is durable, before
     * it answers. The client reports an unknown outcome naming the gtrid and
     * lets go of its MariaDB session; the restarted coordinator replays its
     * log and commits both branches.
     */
    @Test
    void coordinatorKilledAfterTheDecisionCommitsOnRestart() throws Exception {
        try (Coordinator coord = new Coordinator("after-commit-record=kill");
                TandemTransactionManager tm = TandemTransactionManager.create(
                        TandemConfig.coordinator(coord.addr).withDecisionTimeout(java.time.Duration.ofSeconds(2)).withDecideAt(TandemConfig.DecideAt.COORDINATOR))) {
            TandemDataSource pg = TandemDataSource.postgres(tm, "pg", TestEnv.pgSource());
            TandemDataSource maria = TandemDataSource.mariadb(tm, "maria", TestEnv.mariaSource());
            String id = TandemJtaTest.id();
            tm.begin();
            String g = ((TandemTransaction) tm.getTransaction()).gtrid();
            try (Connection a = pg.getConnection(); Connection b = maria.getConnection()) {
                TandemJtaTest.insert(a, id);
                TandemJtaTest.insert(b, id);
            }
            OutcomeUnknownException e = org.junit.jupiter.api.Assertions.assertThrows(OutcomeUnknownException.class, tm::commit);
            assertEquals(g, e.gtrid());
            assertTrue(e.getMessage().contains("the coordinator will settle it"), e.getMessage());
            assertTrue(coord.waitExit(10_000), "the failpoint killed the coordinator");
            assertFalse(TestEnv.pgHas(id), "not committed before the restart");
            coord.start(null);
            assertTrue(TestEnv.eventually(30_000, () -> TestEnv.pgHas(id) && TestEnv.mariaHas(id)),
                    "the restarted coordinator committed both branches: " + TestEnv.prepared(g) + "\n" + coord.output());
            assertEquals(Outcome.COMMITTED, coord.status(g));
            assertTrue(TestEnv.eventually(10_000, () -> TestEnv.prepared(g).isEmpty()), "nothing left prepared: " + TestEnv.prepared(g));
            pg.close();
            maria.close();
        }
    }
}
