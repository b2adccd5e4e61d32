package io.github.tandemtx.examples.jpa;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tandemtx.testsupport.TestCoordinator;
import java.io.BufferedReader;
import java.io.File;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import javax.sql.DataSource;
import org.junit.jupiter.api.Test;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.jdbc.core.JdbcTemplate;
import tandem.v1.Tandem.Outcome;

/**
 * A JVM running the JPA example dies in the middle of a commit, after the
 * decision and before phase 2 ends; the coordinator settles its branches and
 * both databases agree (the debit on PostgreSQL and the payment on MariaDB,
 * both there). The child JVM is PayAndDie; the parent runs the example too,
 * to set up and read the two databases.
 */
class JpaCrashTest {
    /**
     * Decided by the coordinator: the coordinator holds its phase 2 for 8 s
     * (failpoint before-phase2); the child halts once the decision is durable,
     * before it settles any branch (tandem-jta's failpoint
     * before-client-settles: it commits both itself otherwise), and is
     * SIGKILLed once the coordinator's Status says COMMITTED, with the
     * PostgreSQL branch still prepared. After the failpoint the coordinator
     * commits both.
     */
    @Test
    void jvmKilledAfterTheCoordinatorsDecisionIsSettledWhole() throws Exception {
        try (TestCoordinator c = new TestCoordinator("before-phase2=sleep(8s)")) {
            run(c, "coordinator");
        }
    }

    /**
     * Decided at a database commit point (the default, DecideAt.AUTO): the
     * child halts right after the commit point committed the decision, the
     * other branch still prepared; the coordinator finds it and settles it
     * from the commit point's decision table.
     */
    @Test
    void jvmHaltedAfterTheCommitPointIsSettledWhole() throws Exception {
        try (TestCoordinator c = new TestCoordinator()) {
            run(c, "commit-point");
        }
    }

    private static void run(TestCoordinator c, String mode) throws Exception {
        try (ConfigurableApplicationContext ctx = JpaApplication.start("--tandem.coordinators=" + c.addr)) {
            JpaApplication.clear(ctx);
            PaymentService payments = ctx.getBean(PaymentService.class);
            payments.open(1, "eve", 100);
            c.awaitPastBirth(); // the child's gtrid is then past the coordinator's birth: its orphans are settled
            String ref = UUID.randomUUID().toString();
            String java = System.getProperty("java.home") + File.separator + "bin" + File.separator + "java";
            Process child = new ProcessBuilder(java, "-cp", System.getProperty("java.class.path"), PayAndDie.class.getName(), c.addr, ref, mode)
                    .redirectErrorStream(true).start();
            StringBuilder out = new StringBuilder();
            try {
                BufferedReader r = new BufferedReader(new InputStreamReader(child.getInputStream(), StandardCharsets.UTF_8));
                String line;
                while ((line = r.readLine()) != null && !line.startsWith("GTRID ")) {
                    out.append(line).append('\n');
                }
                assertTrue(line != null, "the child printed no gtrid:\n" + out);
                String g = line.substring(6);
                JdbcTemplate pg = new JdbcTemplate(ctx.getBean("pg", DataSource.class)), maria = new JdbcTemplate(ctx.getBean("maria", DataSource.class));
                if (mode.equals("coordinator")) {
                    long end = System.currentTimeMillis() + 30_000;
                    while (c.status(g) != Outcome.COMMITTED) {
                        assertTrue(System.currentTimeMillis() < end, "the coordinator never decided " + g + "\n" + c.output());
                        Thread.sleep(20);
                    }
                    int pgPrepared = preparedOnPg(pg, g), all = prepared(pg, maria, g);
                    child.destroyForcibly(); // SIGKILL
                    assertTrue(child.waitFor(10, TimeUnit.SECONDS), "child killed");
                    System.out.println("JpaCrashTest coordinator: decided COMMITTED, child SIGKILLed with " + all + " branch(es) prepared ("
                            + pgPrepared + " on PostgreSQL)");
                    assertEquals(1, pgPrepared, "killed after the decision and before phase 2 ended: PostgreSQL's branch still prepared");
                } else {
                    while ((line = r.readLine()) != null) {
                        out.append(line).append('\n');
                    }
                    assertTrue(child.waitFor(60, TimeUnit.SECONDS), "the child halted");
                    assertEquals(137, child.exitValue(), out::toString);
                    assertTrue(out.toString().contains("HALT after-commit-point"), out::toString);
                    System.out.println("JpaCrashTest commit-point: child halted after the commit point with " + prepared(pg, maria, g)
                            + " branch(es) prepared (" + preparedOnPg(pg, g) + " on PostgreSQL)");
                }
                long end = System.currentTimeMillis() + 30_000;
                while (prepared(pg, maria, g) > 0) {
                    assertTrue(System.currentTimeMillis() < end, "the dead JVM's branches stay prepared\n" + c.output());
                    Thread.sleep(100);
                }
                long balance = payments.balance(1);
                boolean recorded = payments.recorded(ref);
                System.out.println("JpaCrashTest " + mode + ": outcome " + c.status(g) + ", wallet balance " + balance + ", payment recorded " + recorded);
                assertEquals(Outcome.COMMITTED, c.status(g));
                assertEquals(70, balance, "the debit committed on PostgreSQL");
                assertTrue(recorded, "the payment committed on MariaDB");
            } finally {
                child.destroyForcibly();
            }
        }
    }

    /** Branches of gtrid g still prepared on PostgreSQL. */
    private static int preparedOnPg(JdbcTemplate pg, String g) {
        Integer p = pg.queryForObject("SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE ?", Integer.class, "%" + g + "%");
        return p == null ? 0 : p;
    }

    /** Branches of gtrid g still prepared on either database. */
    private static int prepared(JdbcTemplate pg, JdbcTemplate maria, String g) {
        int n = preparedOnPg(pg, g);
        for (Map<String, Object> row : maria.queryForList("XA RECOVER")) {
            if (String.valueOf(row.get("data")).startsWith(g)) {
                n++;
            }
        }
        return n;
    }
}
