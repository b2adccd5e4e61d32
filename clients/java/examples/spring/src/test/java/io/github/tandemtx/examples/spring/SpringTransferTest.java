package io.github.tandemtx.examples.spring;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

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
            Bank.Report r = SpringTransferApplication.run("--tandem.coordinator=" + c.addr, "--example.transfers=40", "--example.threads=4");
            assertTrue(r.ok(), () -> r + "\ncoordinator:\n" + c.output());
            assertEquals(32, r.committed(), r::toString);
            assertEquals(8, r.failedOnPurpose(), () -> "every fifth transfer fails on purpose after writing both databases: " + r);
            assertEquals(1, r.insufficient(), () -> "the overdraft at the end is refused: " + r);
        }
    }

    /**
     * Sixteen threads on Spring Boot's default pool (HikariCP, 10
     * connections) under each TandemDataSource (16): none waits out
     * Hikari's 30 s connection timeout (it did: "Connection is not
     * available, request timed out after 30006ms").
     */
    @Test
    void sixteenThreadsOnBootsDefaultPool() throws Exception {
        try (TestCoordinator c = new TestCoordinator()) {
            Bank.Report r = SpringTransferApplication.run("--tandem.coordinator=" + c.addr, "--example.transfers=80", "--example.threads=16");
            assertTrue(r.ok(), () -> r + "\ncoordinator:\n" + c.output());
            assertEquals(64, r.committed(), r::toString);
            assertEquals(16, r.failedOnPurpose(), r::toString);
        }
    }

    @Test
    void anUnreachableCoordinatorStopsTheApplicationAtStart() throws Exception {
        String addr = "127.0.0.1:" + TestCoordinator.freePort();
        Exception e = assertThrows(Exception.class, () -> SpringTransferApplication.run("--tandem.coordinator=" + addr));
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
