package io.github.tandemtx.jta;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import org.junit.jupiter.api.Test;

/**
 * Forgetting decided rows never waits for an open commit point's
 * transaction. Left to itself, InnoDB's optimizer reads "DELETE … WHERE
 * gtrid IN (most of a small table)" as a full scan, which locks every row it
 * reads: it waited for the open commit point's uncommitted 'C' (up to the
 * lock wait timeout, and on after the client gave up) while its own locks
 * blocked every commit point's INSERT. It still did for a list of 1000
 * gtrids or more: MariaDB then makes the IN list a subquery (CI saw this
 * test fail with "Lock wait timeout exceeded" on a table of several
 * thousand rows).
 */
class DecisionForgetTest {
    @Test
    void forgetDoesNotWaitForAnOpenCommitPoint() throws SQLException {
        try (Connection setup = TestEnv.maria(); Statement st = setup.createStatement()) {
            st.execute("CREATE TABLE IF NOT EXISTS " + DecisionTable.NAME + " (gtrid char(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,"
                    + " outcome char(1) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, began_at datetime(6) NOT NULL,"
                    + " decided_at datetime(6) NOT NULL DEFAULT UTC_TIMESTAMP(6),"
                    + " participants text CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '') ENGINE=InnoDB");
            int others = count(st, "SELECT COUNT(*) FROM " + DecisionTable.NAME);
            // More rows to forget than the table holds besides (the IN list
            // covers most of it, the case where a scan looks cheaper), and
            // at least 1000: MariaDB's in_predicate_conversion_threshold,
            // at which one IN list becomes a subquery and the DELETE scans
            // the table whatever the index hint (forget splits the list).
            List<String> old = new ArrayList<>();
            for (int i = 0; i < Math.max(1000, 2 * others); i++) {
                String g = gtrid();
                old.add(g);
                st.execute("INSERT INTO " + DecisionTable.NAME + " (gtrid, outcome, began_at, decided_at) VALUES ('" + g
                        + "', 'C', UTC_TIMESTAMP(6) - INTERVAL 2 HOUR, UTC_TIMESTAMP(6) - INTERVAL 2 HOUR)");
            }
            String openGtrid = gtrid();
            try (Connection open = TestEnv.maria(); Statement os = open.createStatement();
                    Connection forgetter = TestEnv.maria(); Statement fs = forgetter.createStatement()) {
                open.setAutoCommit(false);
                os.execute("INSERT INTO " + DecisionTable.NAME + " (gtrid, outcome, began_at) VALUES ('" + openGtrid + "', 'C', UTC_TIMESTAMP(6))");
                fs.execute("SET SESSION innodb_lock_wait_timeout = 3");
                // Before: "Lock wait timeout exceeded; try restarting transaction".
                assertEquals(old.size(), DecisionTable.forget(forgetter, DecisionTable.Dialect.MARIADB, old),
                        "rows forgotten while a commit point's transaction is open");
                open.rollback();
            }
            assertEquals(0, count(st, "SELECT COUNT(*) FROM " + DecisionTable.NAME + " WHERE gtrid IN ('" + String.join("','", old) + "')"),
                    "forgotten rows left");
        }
    }

    private static String gtrid() {
        return UUID.randomUUID().toString().replace("-", "");
    }

    private static int count(Statement st, String q) throws SQLException {
        try (ResultSet rs = st.executeQuery(q)) {
            rs.next();
            return rs.getInt(1);
        }
    }
}
