package io.github.tandemtx.jta;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import jakarta.transaction.RollbackException;
import jakarta.transaction.Status;
import jakarta.transaction.Synchronization;
import jakarta.transaction.SystemException;
import jakarta.transaction.TransactionSynchronizationRegistry;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.postgresql.xa.PGXADataSource;
import tandem.v1.Tandem.Outcome;

/**
 * The transaction manager against the real databases and a real coordinator.
 * Each test writes rows with its own ids into jta_rows on both databases.
 */
class TandemJtaTest {
    static Coordinator coord;
    TandemTransactionManager tm;
    TandemDataSource pg;
    TandemDataSource maria;

    @BeforeAll
    static void startCoordinator() throws Exception {
        TestEnv.createTables();
        coord = new Coordinator(null);
    }

    @AfterAll
    static void stopCoordinator() throws Exception {
        if (coord != null) {
            coord.close();
        }
    }

    @BeforeEach
    void setUp() {
        // These tests are about the coordinator's path (CommitPointTest has the databases deciding).
        tm = TandemTransactionManager.create(TandemConfig.coordinator(coord.addr).withDecideAt(TandemConfig.DecideAt.COORDINATOR));
        pg = TandemDataSource.postgres(tm, "pg", TestEnv.pgSource());
        maria = TandemDataSource.mariadb(tm, "maria", TestEnv.mariaSource());
    }

    @AfterEach
    void tearDown() {
        if (tm.getTransaction() != null) {
            try {
                tm.rollback();
            } catch (Exception ignored) {
                // the test failed mid-transaction
            }
        }
        pg.close();
        maria.close();
        tm.close();
    }

    static String id() {
        return "jta-" + UUID.randomUUID();
    }

    static void insert(Connection c, String id) throws SQLException {
        try (PreparedStatement ps = c.prepareStatement("INSERT INTO jta_rows (id, v) VALUES (?, 1)")) {
            ps.setString(1, id);
            assertEquals(1, ps.executeUpdate());
        }
    }

    static int count(Connection c) throws SQLException {
        try (Statement st = c.createStatement(); ResultSet rs = st.executeQuery("SELECT count(*) FROM jta_rows")) {
            rs.next();
            return rs.getInt(1);
        }
    }

    String gtrid() {
        return ((TandemTransaction) tm.getTransaction()).gtrid();
    }

    @Test
    void commitWritesBothDatabasesThroughTheCoordinator() throws Exception {
        String id = id();
        tm.begin();
        String g = gtrid();
        try (Connection a = pg.getConnection(); Connection b = maria.getConnection()) {
            insert(a, id);
            insert(b, id);
        }
        tm.commit();
        assertEquals(Status.STATUS_NO_TRANSACTION, tm.getStatus());
        assertTrue(TestEnv.pgHas(id), "pg row committed");
        assertTrue(TestEnv.mariaHas(id), "maria row committed");
        assertEquals(Outcome.COMMITTED, coord.status(g), "the coordinator decided it");
        assertTrue(TestEnv.eventually(10_000, () -> TestEnv.prepared(g).isEmpty()), "no branch left prepared: " + TestEnv.prepared(g));
    }

    /** A write through Statement.execute (not executeUpdate) is found by the read-only check: still two-phase. */
    @Test
    void writeThroughExecuteIsFoundByTheReadOnlyCheck() throws Exception {
        String id = id();
        tm.begin();
        String g = gtrid();
        try (Connection a = pg.getConnection(); Connection b = maria.getConnection()) {
            try (Statement st = a.createStatement()) {
                assertSame(a, st.getConnection(), "the statement's connection is the handle");
                st.execute("INSERT INTO jta_rows (id, v) VALUES ('" + id + "', 1)");
            }
            insert(b, id);
        }
        tm.commit();
        assertTrue(TestEnv.pgHas(id) && TestEnv.mariaHas(id));
        assertEquals(Outcome.COMMITTED, coord.status(g), "decided by the coordinator: both were writers");
    }

    @Test
    void sameConnectionForTheSameRmInOneTransaction() throws Exception {
        String id = id();
        tm.begin();
        try (Connection a = pg.getConnection(); Connection b = pg.getConnection()) {
            insert(a, id);
            try (PreparedStatement ps = b.prepareStatement("SELECT count(*) FROM jta_rows WHERE id = ?")) {
                ps.setString(1, id);
                try (ResultSet rs = ps.executeQuery()) {
                    rs.next();
                    assertEquals(1, rs.getInt(1), "the second handle sees the first one's uncommitted row: one branch");
                }
            }
            SQLException e = assertThrows(SQLException.class, a::commit);
            assertTrue(e.getMessage().contains("global transaction"), e.getMessage());
        }
        tm.commit();
        assertTrue(TestEnv.pgHas(id));
    }

    @Test
    void rollbackLeavesNothing() throws Exception {
        String id = id();
        tm.begin();
        try (Connection a = pg.getConnection(); Connection b = maria.getConnection()) {
            insert(a, id);
            insert(b, id);
        }
        tm.rollback();
        assertFalse(TestEnv.pgHas(id));
        assertFalse(TestEnv.mariaHas(id));
    }

    /** One writer commits in one phase: no coordinator is needed, so an unreachable one does not matter. */
    @Test
    void oneWriterCommitsOnePhaseWithoutTheCoordinator() throws Exception {
        try (TandemTransactionManager off = TandemTransactionManager.create(
                TandemConfig.coordinator("127.0.0.1:" + TestEnv.freePort()).withDecisionTimeout(Duration.ofMillis(300)))) {
            TandemDataSource mds = TandemDataSource.mariadb(off, "maria", TestEnv.mariaSource());
            String id = id();
            off.begin();
            try (Connection b = mds.getConnection()) {
                insert(b, id);
            }
            off.commit();
            assertTrue(TestEnv.mariaHas(id));
            mds.close();
        }
    }

    /** A PostgreSQL branch that only read commits locally: with one writer left, still no coordinator call. */
    @Test
    void readOnlyBranchSkipsTwoPhaseCommit() throws Exception {
        try (TandemTransactionManager off = TandemTransactionManager.create(
                TandemConfig.coordinator("127.0.0.1:" + TestEnv.freePort()).withDecisionTimeout(Duration.ofMillis(300)))) {
            TandemDataSource pds = TandemDataSource.postgres(off, "pg", TestEnv.pgSource());
            TandemDataSource mds = TandemDataSource.mariadb(off, "maria", TestEnv.mariaSource());
            String id = id();
            off.begin();
            try (Connection a = pds.getConnection(); Connection b = mds.getConnection()) {
                count(a); // reads only
                insert(b, id);
            }
            off.commit();
            assertTrue(TestEnv.mariaHas(id));
            // Both read only: each commits locally.
            off.begin();
            try (Connection a = pds.getConnection()) {
                count(a);
            }
            off.commit();
            pds.close();
            mds.close();
        }
    }

    /** A deferred foreign key fails at PREPARE TRANSACTION: the whole transaction rolls back, the MariaDB branch too. */
    @Test
    void prepareFailureRollsBackEverything() throws Exception {
        String id = id();
        tm.begin();
        String g = gtrid();
        try (Connection a = pg.getConnection(); Connection b = maria.getConnection()) {
            try (PreparedStatement ps = a.prepareStatement("INSERT INTO jta_child (id, parent) VALUES (?, -1)")) {
                ps.setString(1, id);
                ps.executeUpdate(); // the check is deferred to the prepare
            }
            insert(b, id);
        }
        RollbackException e = assertThrows(RollbackException.class, tm::commit);
        assertTrue(e.getMessage().contains(g) && e.getMessage().contains("phase 1 failed"), e.getMessage());
        assertFalse(TestEnv.mariaHas(id), "maria branch rolled back");
        assertTrue(TestEnv.prepared(g).isEmpty(), "nothing left prepared: " + TestEnv.prepared(g));
        assertEquals(Status.STATUS_NO_TRANSACTION, tm.getStatus());
    }

    /** A statement that failed leaves the PostgreSQL transaction unable to prepare: refused, not silently rolled back. */
    @Test
    void failedStatementRollsBackInsteadOfPreparing() throws Exception {
        String id = id();
        tm.begin();
        try (Connection a = pg.getConnection(); Connection b = maria.getConnection()) {
            insert(b, id);
            insert(a, id);
            assertThrows(SQLException.class, () -> insert(a, id)); // duplicate key; the application ignores it
        }
        RollbackException e = assertThrows(RollbackException.class, tm::commit);
        assertTrue(e.getMessage().contains("can only roll it back"), e.getMessage());
        assertFalse(TestEnv.pgHas(id));
        assertFalse(TestEnv.mariaHas(id));
    }

    @Test
    void setRollbackOnlyMakesCommitRollBack() throws Exception {
        String id = id();
        tm.begin();
        try (Connection a = pg.getConnection(); Connection b = maria.getConnection()) {
            insert(a, id);
            insert(b, id);
        }
        tm.setRollbackOnly();
        assertEquals(Status.STATUS_MARKED_ROLLBACK, tm.getStatus());
        RollbackException e = assertThrows(RollbackException.class, tm::commit);
        assertTrue(e.getMessage().contains("rollback-only"), e.getMessage());
        assertFalse(TestEnv.pgHas(id));
        assertFalse(TestEnv.mariaHas(id));
    }

    @Test
    void timeoutMarksTheTransactionRollbackOnly() throws Exception {
        String id = id();
        tm.setTransactionTimeout(1);
        tm.begin();
        try (Connection a = pg.getConnection()) {
            insert(a, id);
        }
        assertTrue(TestEnv.eventually(10_000, () -> tm.getStatus() == Status.STATUS_MARKED_ROLLBACK), "timed out");
        RollbackException e = assertThrows(RollbackException.class, tm::commit);
        assertTrue(e.getMessage().contains("timed out after 1s"), e.getMessage());
        assertFalse(TestEnv.pgHas(id));
    }

    @Test
    void synchronizationsAndRegistry() throws Exception {
        List<String> calls = new ArrayList<>();
        TransactionSynchronizationRegistry reg = tm.synchronizationRegistry();
        assertNull(reg.getTransactionKey());
        String id = id();
        tm.begin();
        Object key = reg.getTransactionKey();
        assertSame(tm.getTransaction(), key);
        reg.putResource("k", "v");
        assertEquals("v", reg.getResource("k"));
        tm.getTransaction().registerSynchronization(new Synchronization() {
            @Override
            public void beforeCompletion() {
                calls.add("before");
            }

            @Override
            public void afterCompletion(int status) {
                calls.add("after:" + status);
            }
        });
        reg.registerInterposedSynchronization(new Synchronization() {
            @Override
            public void beforeCompletion() {
                calls.add("interposed-before");
            }

            @Override
            public void afterCompletion(int status) {
                calls.add("interposed-after:" + status);
            }
        });
        try (Connection a = pg.getConnection(); Connection b = maria.getConnection()) {
            insert(a, id);
            insert(b, id);
        }
        tm.commit();
        assertEquals(List.of("before", "interposed-before", "interposed-after:" + Status.STATUS_COMMITTED,
                "after:" + Status.STATUS_COMMITTED), calls);
    }

    @Test
    void beforeCompletionFailureRollsBack() throws Exception {
        String id = id();
        tm.begin();
        tm.getTransaction().registerSynchronization(new Synchronization() {
            @Override
            public void beforeCompletion() {
                throw new IllegalStateException("flush failed");
            }

            @Override
            public void afterCompletion(int status) {
            }
        });
        try (Connection a = pg.getConnection(); Connection b = maria.getConnection()) {
            insert(a, id);
            insert(b, id);
        }
        RollbackException e = assertThrows(RollbackException.class, tm::commit);
        assertTrue(e.getMessage().contains("flush failed"), e.getMessage());
        assertFalse(TestEnv.pgHas(id));
        assertFalse(TestEnv.mariaHas(id));
    }

    @Test
    void suspendAndResume() throws Exception {
        String id = id();
        tm.begin();
        try (Connection a = pg.getConnection()) {
            insert(a, id);
        }
        var tx = tm.suspend();
        assertEquals(Status.STATUS_NO_TRANSACTION, tm.getStatus());
        try (Connection a = pg.getConnection()) { // outside: autocommit, not the branch
            assertTrue(a.getAutoCommit());
            assertFalse(TestEnv.pgHas(id), "not committed yet");
        }
        tm.resume(tx);
        tm.commit();
        assertTrue(TestEnv.pgHas(id));
    }

    /** pgjdbc's PGXADataSource works as the source: Tandem uses its plain connections with its own XIDs. */
    @Test
    void xaDataSourceAsSource() throws Exception {
        PGXADataSource xads = new PGXADataSource();
        xads.setURL(TestEnv.PG_URL);
        xads.setUser(TestEnv.PG_USER);
        xads.setPassword(TestEnv.PG_PASSWORD);
        try (TandemTransactionManager m = TandemTransactionManager.create(TandemConfig.coordinator(coord.addr).withDecideAt(TandemConfig.DecideAt.COORDINATOR))) {
            TandemDataSource p = TandemDataSource.postgres(m, "pg", xads);
            TandemDataSource q = TandemDataSource.mariadb(m, "maria", TestEnv.mariaSource());
            String id = id();
            m.begin();
            try (Connection a = p.getConnection(); Connection b = q.getConnection()) {
                insert(a, id);
                insert(b, id);
            }
            m.commit();
            assertTrue(TestEnv.pgHas(id));
            assertTrue(TestEnv.mariaHas(id));
            p.close();
            q.close();
        }
    }

    @Test
    void unknownResourceManagerIsAClearError() throws Exception {
        try (TandemTransactionManager m = TandemTransactionManager.create(TandemConfig.coordinator(coord.addr).withDecideAt(TandemConfig.DecideAt.COORDINATOR))) {
            TandemDataSource p = TandemDataSource.postgres(m, "nope", TestEnv.pgSource());
            TandemDataSource q = TandemDataSource.mariadb(m, "maria", TestEnv.mariaSource());
            SystemException v = assertThrows(SystemException.class, m::verify);
            assertTrue(v.getMessage().contains("knows no resource manager named [nope]"), v.getMessage());
            // Without verify, the coordinator refuses the Commit: nothing decided, rolled back.
            String id = id();
            m.begin();
            String g = ((TandemTransaction) m.getTransaction()).gtrid();
            try (Connection a = p.getConnection(); Connection b = q.getConnection()) {
                insert(a, id);
                insert(b, id);
            }
            RollbackException e = assertThrows(RollbackException.class, m::commit);
            assertTrue(e.getMessage().contains("refused the commit") && e.getMessage().contains("nope"), e.getMessage());
            assertFalse(TestEnv.pgHas(id));
            assertFalse(TestEnv.mariaHas(id));
            assertTrue(TestEnv.prepared(g).isEmpty(), "nothing left prepared: " + TestEnv.prepared(g));
            p.close();
            q.close();
        }
    }

    /**
     * An unreachable coordinator: verify says so; a two-phase commit ends in an
     * unknown outcome naming the gtrid (never a rollback: the Commit may have
     * arrived), and the branches are left for the coordinator, whose orphan
     * scan (here the test's real one, which knows pg and maria) rolls them back.
     */
    @Test
    void unreachableCoordinatorIsAClearError() throws Exception {
        String addr = "127.0.0.1:" + TestEnv.freePort();
        try (TandemTransactionManager m = TandemTransactionManager.create(
                TandemConfig.coordinator(addr).withDecideAt(TandemConfig.DecideAt.COORDINATOR).withDecisionTimeout(Duration.ofSeconds(1)))) {
            TandemDataSource p = TandemDataSource.postgres(m, "pg", TestEnv.pgSource());
            TandemDataSource q = TandemDataSource.mariadb(m, "maria", TestEnv.mariaSource());
            SystemException v = assertThrows(SystemException.class, m::verify);
            assertTrue(v.getMessage().contains(addr) && v.getMessage().contains("did not answer"), v.getMessage());
            String id = id();
            m.begin();
            String g = ((TandemTransaction) m.getTransaction()).gtrid();
            try (Connection a = p.getConnection(); Connection b = q.getConnection()) {
                insert(a, id);
                insert(b, id);
            }
            // Never reached, so its cluster (which names the branches it decides) is
            // not known: refused before anything is prepared. (PoolTest has a
            // coordinator lost after the cluster was learnt: an unknown outcome.)
            RollbackException e = assertThrows(RollbackException.class, m::commit);
            assertTrue(e.getMessage().contains(g) && e.getMessage().contains("cluster's identity")
                    && e.getMessage().contains(addr) && e.getMessage().contains("nothing was prepared"), e.getMessage());
            assertEquals(Status.STATUS_NO_TRANSACTION, m.getStatus());
            assertEquals(List.of(), TestEnv.prepared(g), "nothing prepared");
            assertFalse(TestEnv.pgHas(id));
            assertFalse(TestEnv.mariaHas(id));
            p.close();
            q.close();
        }
    }

    @Test
    void plainXaResourceIsRefused() throws Exception {
        tm.begin();
        javax.transaction.xa.XAResource foreign = TestEnv.mariaSource().getXAConnection().getXAResource();
        SystemException e = assertThrows(SystemException.class, () -> tm.getTransaction().enlistResource(foreign));
        assertTrue(e.getMessage().contains("TandemDataSource"), e.getMessage());
        tm.rollback();
    }
}
