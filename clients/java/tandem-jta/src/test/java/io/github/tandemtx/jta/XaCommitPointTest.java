package io.github.tandemtx.jta;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import jakarta.transaction.RollbackException;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The MariaDB commit point is an XA branch named with its decision table
 * (TAC2), decided by INSERT; XA END; XA COMMIT … ONE PHASE: the server
 * itself refuses what would end it, the decision row names its
 * participants, and a data source that reaches another decision table
 * than the one it names is refused by the database inside the INSERT.
 */
class XaCommitPointTest {
    static Coordinator coord;

    @BeforeAll
    static void start() throws Exception {
        TestEnv.createTables();
        coord = new Coordinator(null); // makes the decision tables and their ids
        try (Connection c = TestEnv.maria(); Statement st = c.createStatement()) {
            st.execute("DROP TABLE IF EXISTS x"); // the corpus' names, from a failed run
            st.execute("DROP TABLE IF EXISTS t");
        }
    }

    static TandemTransactionManager tm() {
        return TandemTransactionManager.create(TandemConfig.coordinator(coord.addr).withDecisionTimeout(java.time.Duration.ofSeconds(5)));
    }

    @AfterAll
    static void stop() throws Exception {
        if (coord != null) {
            coord.close();
        }
    }

    /**
     * Every "ends" statement of the shared corpus, sent on the MariaDB commit
     * point through the driver's own connection (so the SDK's classifier
     * never sees it), then PostgreSQL written and the transaction
     * committed: both databases agree, each time. The server refused what
     * would have ended the transaction (XAER_RMFAIL, error 1399, for a bare
     * COMMIT), where a plain transaction would have committed MariaDB's
     * writes ahead of the decision.
     */
    @Test
    void theServerKeepsTheCommitPointWholeWithTheClassifierBypassed() throws Exception {
        List<ImplicitCommitTest.Case> ends = new ArrayList<>();
        for (ImplicitCommitTest.Case c : ImplicitCommitTest.corpus()) {
            if (c.ends()) {
                ends.add(c);
            }
        }
        assertTrue(ends.size() >= 30, "the corpus' ends cases: " + ends.size());
        List<String> split = new ArrayList<>();
        String commitAnswer = null;
        try (TandemTransactionManager tm = tm();
                TandemDataSource pg = TandemDataSource.postgres(tm, "pg", TestEnv.pgSource());
                TandemDataSource maria = TandemDataSource.mariadb(tm, "maria", TestEnv.mariaSource())) {
            for (ImplicitCommitTest.Case c : ends) {
                String id = TandemJtaTest.id();
                tm.begin();
                String answer;
                try (Connection b = maria.getConnection(); Connection a = pg.getConnection()) {
                    assertEquals("maria", ((TandemTransaction) tm.getTransaction()).commitPoint());
                    CommitPointTest.insert(b, id);
                    try (Statement raw = b.unwrap(org.mariadb.jdbc.Connection.class).createStatement()) {
                        raw.execute(c.sql());
                        answer = "ran";
                    } catch (SQLException e) {
                        answer = e.getErrorCode() + " " + e.getMessage();
                    }
                    if (c.sql().equals("COMMIT/* c */")) {
                        commitAnswer = answer;
                    }
                    CommitPointTest.insert(a, id);
                }
                try {
                    tm.commit();
                } catch (RollbackException e) {
                    // refused is fine; split is not
                }
                boolean p = TestEnv.pgHas(id);
                boolean m = TestEnv.mariaHas(id);
                if (p != m) {
                    split.add(c.sql() + " (the server: " + answer + "): postgres " + p + ", mariadb " + m);
                }
            }
        }
        assertTrue(split.isEmpty(), split.size() + " of " + ends.size() + " SPLIT:\n" + String.join("\n", split));
        assertTrue(commitAnswer != null && commitAnswer.startsWith("1399 "), "a COMMIT inside the XA branch: " + commitAnswer);
        try (Connection c = TestEnv.maria(); ResultSet rs = c.getMetaData().getTables(null, null, "x", null)) {
            assertFalse(rs.next(), "a CREATE TABLE of the corpus ran inside the commit point");
        }
    }

    /** The 'C' row names the prepared branch's RM by its decision table's id. */
    @Test
    void theDecisionRowNamesItsParticipants() throws Exception {
        try (TandemTransactionManager tm = tm();
                TandemDataSource pg = TandemDataSource.postgres(tm, "pg", TestEnv.pgSource());
                TandemDataSource maria = TandemDataSource.mariadb(tm, "maria", TestEnv.mariaSource())) {
            String id = TandemJtaTest.id();
            String g = CommitPointTest.writeBoth(tm, maria, pg, id);
            tm.commit();
            assertTrue(TestEnv.pgHas(id) && TestEnv.mariaHas(id));
            try (Connection c = TestEnv.maria(); Statement st = c.createStatement();
                    ResultSet rs = st.executeQuery("SELECT outcome, participants FROM tandem_decision WHERE gtrid = '" + g + "'")) {
                assertTrue(rs.next(), "the decision row");
                assertEquals("C", rs.getString(1));
                assertEquals("pg=" + CommitPointTest.pgTableId(), rs.getString(2));
            }
        }
    }

    /**
     * The data source believes it reaches a decision table whose id is not
     * the one its database has (another schema or database would look like
     * this): the database refuses the INSERT of the decision, nothing
     * commits, the prepared branch rolls back.
     */
    @Test
    void anotherDecisionTableRefusesTheDecision() throws Exception {
        try (TandemTransactionManager tm = tm();
                TandemDataSource pg = TandemDataSource.postgres(tm, "pg", TestEnv.pgSource());
                TandemDataSource maria = TandemDataSource.mariadb(tm, "maria", TestEnv.mariaSource())) {
            String warmup = TandemJtaTest.id();
            CommitPointTest.writeBoth(tm, maria, pg, warmup);
            tm.commit(); // the check ran and cached the real id
            maria.resourceManager().tableIdForTest("0123456789abcdef0123456789abcdef");
            String id = TandemJtaTest.id();
            String g = CommitPointTest.writeBoth(tm, maria, pg, id);
            RollbackException e = assertThrows(RollbackException.class, tm::commit);
            assertTrue(e.getMessage().contains(DecisionTable.REFUSED_WRONG_TABLE), e.getMessage());
            assertFalse(TestEnv.pgHas(id) || TestEnv.mariaHas(id), "nothing committed");
            assertTrue(TestEnv.prepared(g).isEmpty(), "nothing left prepared: " + TestEnv.prepared(g));
            assertEquals("", CommitPointTest.decisionRow(TestEnv.maria(), g));
        }
    }

    /**
     * MariaDB's decision table references its own id (the coordinator gave
     * it a foreign key at start): the data source reads that with the id and
     * decides without the id table's subquery, so a session that turned
     * foreign-key checks off (which would skip the check) is refused, and
     * nothing commits.
     */
    @Test
    void aSessionWithoutForeignKeyChecksIsRefused() throws Exception {
        try (TandemTransactionManager tm = tm();
                TandemDataSource pg = TandemDataSource.postgres(tm, "pg", TestEnv.pgSource());
                TandemDataSource maria = TandemDataSource.mariadb(tm, "maria", TestEnv.mariaSource())) {
            CommitPointTest.writeBoth(tm, maria, pg, TandemJtaTest.id());
            tm.commit(); // the check ran and read the table's own id check
            assertTrue(maria.resourceManager().tableChecked(), "MariaDB's decision table checks its id itself");
            String id = TandemJtaTest.id();
            tm.begin();
            String g = CommitPointTest.gtrid(tm);
            try (Connection b = maria.getConnection(); Connection a = pg.getConnection()) {
                try (Statement st = b.createStatement()) {
                    st.execute("SET SESSION foreign_key_checks = 0");
                }
                CommitPointTest.insert(b, id);
                CommitPointTest.insert(a, id);
            }
            RollbackException e = assertThrows(RollbackException.class, tm::commit);
            assertTrue(e.getMessage().contains(DecisionTable.REFUSED_UNCHECKED), e.getMessage());
            assertFalse(TestEnv.pgHas(id) || TestEnv.mariaHas(id), "nothing committed");
            assertTrue(TestEnv.prepared(g).isEmpty(), "nothing left prepared: " + TestEnv.prepared(g));
            assertEquals("", CommitPointTest.decisionRow(TestEnv.maria(), g));
        }
    }

    /**
     * Whether the table checks its id itself is read again once the reading
     * is a minute old: a table that lost its foreign key since gets the
     * subquery form (which the database checks) from then on, and the
     * checked form again once the key is back. Restores the key in any case.
     */
    @Test
    void theTablesOwnCheckIsReadAgain() throws Exception {
        try (TandemTransactionManager tm = tm();
                TandemDataSource pg = TandemDataSource.postgres(tm, "pg", TestEnv.pgSource());
                TandemDataSource maria = TandemDataSource.mariadb(tm, "maria", TestEnv.mariaSource());
                Connection admin = TestEnv.maria()) {
            ResourceManager rm = maria.resourceManager();
            CommitPointTest.writeBoth(tm, pg, maria, TandemJtaTest.id());
            tm.commit();
            assertTrue(rm.tableChecked(), "MariaDB's decision table checks its id itself");
            try (Statement st = admin.createStatement()) {
                st.execute("ALTER TABLE " + DecisionTable.NAME + " DROP FOREIGN KEY " + DecisionTable.NAME + "_table");
            }
            try {
                CommitPointTest.writeBoth(tm, pg, maria, TandemJtaTest.id());
                tm.commit();
                assertTrue(rm.tableChecked(), "within the minute, the reading stands");
                rm.ageTableCheckedForTest(ResourceManager.SELF_CHECK_TTL);
                String id = TandemJtaTest.id();
                CommitPointTest.writeBoth(tm, pg, maria, id);
                assertFalse(rm.tableChecked(), "read again past the minute: the table has no foreign key now");
                tm.commit();
                assertTrue(TestEnv.pgHas(id) && TestEnv.mariaHas(id), "committed through the subquery form");
            } finally {
                try (Statement st = admin.createStatement()) {
                    st.execute("ALTER TABLE " + DecisionTable.NAME + " ADD CONSTRAINT " + DecisionTable.NAME + "_table FOREIGN KEY ("
                            + DecisionTable.TABLE_ID_COLUMN + ") REFERENCES " + DecisionTable.ID_NAME + " (id)");
                }
            }
            rm.ageTableCheckedForTest(ResourceManager.SELF_CHECK_TTL);
            CommitPointTest.writeBoth(tm, pg, maria, TandemJtaTest.id());
            assertTrue(rm.tableChecked(), "the key is back: the checked form again");
            tm.commit();
            // A refusal of the checked form (a session with foreign-key checks
            // off, say) is never undone by a reading again: the catalog still
            // lists the key, and each such session would be refused again.
            rm.forgetTableChecked();
            rm.ageTableCheckedForTest(ResourceManager.SELF_CHECK_TTL);
            CommitPointTest.writeBoth(tm, pg, maria, TandemJtaTest.id());
            assertFalse(rm.tableChecked(), "a refusal stands after a reading again");
            tm.commit();
        }
    }

    /**
     * The check is read again only on a session in autocommit mode outside
     * a transaction: under autocommit=0 the reading would open one, and the
     * branch's XA START on that session would then fail. Skipped, it counts
     * as no reference (the subquery form, which the database checks).
     */
    @Test
    void theCheckIsNotReadAgainOnASessionThatWouldOpenATransaction() throws Exception {
        try (TandemTransactionManager tm = tm();
                TandemDataSource pg = TandemDataSource.postgres(tm, "pg", TestEnv.pgSource());
                TandemDataSource maria = TandemDataSource.mariadb(tm, "maria", TestEnv.mariaSource());
                Connection c = TestEnv.maria()) {
            ResourceManager rm = maria.resourceManager();
            CommitPointTest.writeBoth(tm, pg, maria, TandemJtaTest.id());
            tm.commit();
            assertTrue(rm.tableChecked(), "MariaDB's decision table checks its id itself");
            c.setAutoCommit(false);
            rm.ageTableCheckedForTest(ResourceManager.SELF_CHECK_TTL);
            assertTrue(rm.qualifies(c));
            assertEquals(0, inTransaction(c), "the reading opened a transaction on a session in autocommit=0");
            assertFalse(rm.tableChecked(), "a reading skipped counts as no reference");
            c.setAutoCommit(true);
            rm.ageTableCheckedForTest(ResourceManager.SELF_CHECK_TTL);
            assertTrue(rm.qualifies(c));
            assertTrue(rm.tableChecked(), "read again on a session in autocommit mode");
        }
    }

    private static long inTransaction(Connection c) throws SQLException {
        try (Statement st = c.createStatement(); ResultSet rs = st.executeQuery("SELECT @@in_transaction")) {
            rs.next();
            return rs.getLong(1);
        }
    }
}
