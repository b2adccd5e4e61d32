package io.github.tandemtx.jta;

import static org.junit.jupiter.api.Assertions.assertEquals;

import org.junit.jupiter.api.Test;

/**
 * Every decided row queued stays queued until it is old enough to delete,
 * however many commits a process makes meanwhile. Before, the queue kept
 * the newest 4096 and dropped the oldest: past about 117 commits a second
 * no row ever reached the age to be deleted (the Go SDK had the same bound;
 * its table grew by every commit over a 10-minute run at 32 threads).
 */
class ForgetQueueTest {
    @Test
    void twentyThousandRowsStayQueued() {
        ResourceManager rm = new ResourceManager("maria", DecisionTable.Dialect.MARIADB, null);
        int n = 20_000; // 35 s of commits at 571 a second
        for (int i = 0; i < n; i++) {
            rm.forgetLater(String.format("%032x", i), r -> { }); // nothing is old enough to start a delete
        }
        assertEquals(n, rm.pendingForget(), "rows queued for deletion");
    }
}
