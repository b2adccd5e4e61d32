package io.github.tandemtx.jta;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.time.Duration;

/**
 * The child JVM of CommitPointTest: writes row args[1] on both databases in
 * one transaction decided at MariaDB's commit point, and halts (as a kill
 * would: no shutdown hooks, no cleanup) at the commit path's step args[2]
 * ("before-commit-point": PostgreSQL prepared, no decision anywhere;
 * "after-commit-point": MariaDB committed the decision, PostgreSQL still
 * prepared). args[0] is a coordinator address nobody needs. It prints
 * "GTRID <gtrid>" first.
 */
public final class CommitPointAndDie {
    public static void main(String[] args) throws Exception {
        String step = args[2];
        TandemTransaction.failpoint = s -> {
            if (s.equals(step)) {
                System.out.println("HALT " + s);
                System.out.flush();
                Runtime.getRuntime().halt(137);
            }
        };
        TandemTransactionManager tm = TandemTransactionManager.create(
                TandemConfig.coordinator(args[0]).withDecisionTimeout(Duration.ofSeconds(5)));
        TandemDataSource pg = TandemDataSource.postgres(tm, "pg", TestEnv.pgSource());
        TandemDataSource maria = TandemDataSource.mariadb(tm, "maria", TestEnv.mariaSource());
        tm.begin();
        System.out.println("GTRID " + ((TandemTransaction) tm.getTransaction()).gtrid());
        System.out.flush();
        for (TandemDataSource ds : new TandemDataSource[] {pg, maria}) {
            try (Connection c = ds.getConnection(); PreparedStatement ps = c.prepareStatement("INSERT INTO jta_rows (id, v) VALUES (?, 1)")) {
                ps.setString(1, args[1]);
                ps.executeUpdate();
            }
        }
        tm.commit();
        System.out.println("UNEXPECTED: commit returned");
    }
}
