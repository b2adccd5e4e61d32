package io.github.tandemtx.jta;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.time.Duration;

/**
 * The child JVM of CrashTest: asks the coordinator at args[0] (a proxy) for
 * its Health (learning its cluster, which names the branches), prints
 * "GTRID <gtrid>", waits for a line on stdin (the test makes the proxy drop
 * everything meanwhile), then writes row args[1] on both databases in one
 * transaction and commits: the Commit never gets through, so the JVM sits
 * with both branches prepared until it is killed.
 */
public final class PrepareAndHang {
    public static void main(String[] args) throws Exception {
        TandemTransactionManager tm = TandemTransactionManager.create(
                TandemConfig.coordinator(args[0]).withDecisionTimeout(Duration.ofMinutes(5)).withDecideAt(TandemConfig.DecideAt.COORDINATOR));
        TandemDataSource pg = TandemDataSource.postgres(tm, "pg", TestEnv.pgSource());
        TandemDataSource maria = TandemDataSource.mariadb(tm, "maria", TestEnv.mariaSource());
        tm.verify();
        tm.begin();
        System.out.println("GTRID " + ((TandemTransaction) tm.getTransaction()).gtrid());
        System.out.flush();
        new java.io.BufferedReader(new java.io.InputStreamReader(System.in, java.nio.charset.StandardCharsets.UTF_8)).readLine();
        for (TandemDataSource ds : new TandemDataSource[] {pg, maria}) {
            try (Connection c = ds.getConnection(); PreparedStatement ps = c.prepareStatement("INSERT INTO jta_rows (id, v) VALUES (?, 1)")) {
                ps.setString(1, args[1]);
                ps.executeUpdate();
            }
        }
        tm.commit(); // prepares both, then retries the Commit call until killed
        System.out.println("UNEXPECTED: commit returned");
    }
}
