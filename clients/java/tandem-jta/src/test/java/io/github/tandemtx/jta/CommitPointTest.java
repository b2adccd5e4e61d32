package io.github.tandemtx.jta;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import jakarta.transaction.RollbackException;
import java.io.BufferedReader;
import java.io.File;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The commit point: a transaction writing PostgreSQL and MariaDB is decided by
 * MariaDB's own COMMIT, with its decision row in tandem_decision, and no
 * coordinator call. The coordinator here only made the decision tables (as
 * any coordinator with these RMs does at start) and recovers what a dead or
 * cut-off client leaves; the transaction managers under test point at an
 * address nobody listens on, so any coordinator call would fail.
 */
class CommitPointTest {
    static Coordinator coord;
    static String nowhere;

    @BeforeAll
    static void start() throws Exception {
        TestEnv.createTables();
        coord = new Coordinator(null);
        nowhere = "127.0.0.1:" + TestEnv.freePort();
    }

    @AfterAll
    static void stop() throws Exception {
        if (coord != null) {
            coord.close();
        }
    }

    @AfterEach
    void cleanUp() {
        TandemTransaction.failpoint = s -> { };
    }

    static TandemTransactionManager tm() {
        return TandemTransactionManager.create(TandemConfig.coordinator(nowhere).withDecisionTimeout(Duration.ofSeconds(5)));
    }

    static String gtrid(TandemTransactionManager tm) {
        return ((TandemTransaction) tm.getTransaction()).gtrid();
    }

    static void insert(Connection c, String id) throws SQLException {
        TandemJtaTest.insert(c, id);
    }

    /** Begins a transaction of tm that inserts row id through pg, then through maria; returns its gtrid. */
    static String writeBoth(TandemTransactionManager tm, javax.sql.DataSource pg, javax.sql.DataSource maria, String id) throws Exception {
        tm.begin();
        String g = gtrid(tm);
        try (Connection a = pg.getConnection(); Connection b = maria.getConnection()) {
            insert(a, id);
            insert(b, id);
        }
        return g;
    }

    /** The id of MariaDB's decision table (tandem_decision_id). */
    static String mariaTableId() throws SQLException {
        try (Connection c = TestEnv.maria()) {
            return DecisionTable.readId(c);
        }
    }

    /** The id of PostgreSQL's decision table. */
    static String pgTableId() throws SQLException {
        try (Connection c = TestEnv.pg()) {
            return DecisionTable.readId(c);
        }
    }

    /** The outcome row of gtrid in the decision table behind c ("" when none). */
    static String decisionRow(Connection conn, String g) throws SQLException {
        try (Connection c = conn; Statement st = c.createStatement();
                ResultSet rs = st.executeQuery("SELECT outcome FROM tandem_decision WHERE gtrid = '" + g + "'")) {
            return rs.next() ? rs.getString(1) : "";
        }
    }

    /**
     * Forty transactions decided at MariaDB: both rows committed, no
     * coordinator call (there is none to call), the first one's decision row
     * written, nothing left prepared, and no decision row deleted before it
     * is FORGET_MIN_AGE old.
     */
    @Test
    void decidedAtMariaDbWithNoCoordinatorCall() throws Exception {
        try (TandemTransactionManager tm = tm();
                TandemDataSource pg = TandemDataSource.postgres(tm, "pg", TestEnv.pgSource());
                TandemDataSource maria = TandemDataSource.mariadb(tm, "maria", TestEnv.mariaSource())) {
            String first = null;
            for (int i = 0; i < 40; i++) {
                String id = TandemJtaTest.id();
                tm.begin();
                String g = gtrid(tm);
                try (Connection a = pg.getConnection(); Connection b = maria.getConnection()) {
                    insert(a, id);
                    insert(b, id);
                }
                assertEquals("maria", ((TandemTransaction) tm.getTransaction()).commitPoint(), "MariaDB began as the commit point");
                tm.commit();
                assertTrue(TestEnv.pgHas(id) && TestEnv.mariaHas(id), "transaction " + i + " is on both databases");
                assertTrue(TestEnv.prepared(g).isEmpty(), "nothing left prepared: " + TestEnv.prepared(g));
                if (first == null) {
                    first = g;
                    assertEquals("C", decisionRow(TestEnv.maria(), g), "MariaDB's decision row");
                }
            }
            // Not forgotten yet, 39 commits later: no 'C' row is deleted before it
            // is DecisionTable.FORGET_MIN_AGE old (a key taken after it was gone
            // would record 'A' for a transaction committed everywhere).
            assertEquals("C", decisionRow(TestEnv.maria(), first), "the first decision row, younger than the forget horizon, is kept");
        }
    }

    /**
     * A recoverer took the key first (the transaction was slow): the commit
     * point's INSERT meets its 'A', MariaDB does not commit, and everything
     * rolls back — nothing of the transaction anywhere, nothing prepared.
     */
    @Test
    void abortRecordedFirstRollsBackEverywhere() throws Exception {
        try (TandemTransactionManager tm = tm();
                TandemDataSource pg = TandemDataSource.postgres(tm, "pg", TestEnv.pgSource());
                TandemDataSource maria = TandemDataSource.mariadb(tm, "maria", TestEnv.mariaSource())) {
            String id = TandemJtaTest.id();
            String g = writeBoth(tm, pg, maria, id);
            try (Connection c = TestEnv.maria()) {
                assertEquals(DecisionTable.Outcome.ABORT, DecisionTable.resolve(c, DecisionTable.Dialect.MARIADB, g, DecisionTable.readId(c),
                        Duration.ofSeconds(1)));
            }
            RollbackException e = assertThrows(RollbackException.class, tm::commit);
            assertTrue(e.getMessage().contains("refused the decision") && e.getMessage().contains(g), e.getMessage());
            assertFalse(TestEnv.pgHas(id), "SPLIT: the PostgreSQL row is committed");
            assertFalse(TestEnv.mariaHas(id), "SPLIT: the MariaDB row is committed");
            assertTrue(TestEnv.prepared(g).isEmpty(), "nothing left prepared: " + TestEnv.prepared(g));
            assertEquals("A", decisionRow(TestEnv.maria(), g));
        }
    }

    /** Older than the maximum transaction age by MariaDB's clock: the commit point refuses, all roll back. */
    @Test
    void tooOldTransactionIsRefusedByTheCommitPoint() throws Exception {
        try (TandemTransactionManager tm = TandemTransactionManager.create(TandemConfig.coordinator(nowhere)
                        .withMaxTransactionAge(Duration.ofMillis(200)));
                TandemDataSource pg = TandemDataSource.postgres(tm, "pg", TestEnv.pgSource());
                TandemDataSource maria = TandemDataSource.mariadb(tm, "maria", TestEnv.mariaSource())) {
            String id = TandemJtaTest.id();
            tm.begin();
            String g = gtrid(tm);
            try (Connection a = pg.getConnection(); Connection b = maria.getConnection()) {
                insert(b, id);
                insert(a, id);
            }
            Thread.sleep(400);
            RollbackException e = assertThrows(RollbackException.class, tm::commit);
            assertTrue(e.getMessage().contains("maximum transaction age"), e.getMessage());
            assertFalse(TestEnv.pgHas(id) || TestEnv.mariaHas(id), "a row of the refused transaction is committed");
            assertTrue(TestEnv.prepared(g).isEmpty(), "nothing left prepared: " + TestEnv.prepared(g));
            assertEquals("", decisionRow(TestEnv.maria(), g), "no decision row");
        }
    }

    /** A PostgreSQL prepare that fails (deferred foreign key) rolls back the commit point too. */
    @Test
    void prepareFailureRollsBackTheCommitPoint() throws Exception {
        try (TandemTransactionManager tm = tm();
                TandemDataSource pg = TandemDataSource.postgres(tm, "pg", TestEnv.pgSource());
                TandemDataSource maria = TandemDataSource.mariadb(tm, "maria", TestEnv.mariaSource())) {
            String id = TandemJtaTest.id();
            tm.begin();
            String g = gtrid(tm);
            try (Connection a = pg.getConnection(); Connection b = maria.getConnection()) {
                insert(b, id);
                try (PreparedStatement ps = a.prepareStatement("INSERT INTO jta_child (id, parent) VALUES (?, -1)")) {
                    ps.setString(1, id);
                    ps.executeUpdate();
                }
            }
            RollbackException e = assertThrows(RollbackException.class, tm::commit);
            assertTrue(e.getMessage().contains("phase 1 failed"), e.getMessage());
            assertFalse(TestEnv.mariaHas(id), "the commit point's row rolled back");
            assertTrue(TestEnv.prepared(g).isEmpty(), "nothing left prepared: " + TestEnv.prepared(g));
            assertEquals("", decisionRow(TestEnv.maria(), g));
        }
    }

    /**
     * Every writer on PostgreSQL (two RMs on one server): the first decides
     * at its own COMMIT, the other prepares named with it
     * (tandemcp:g:pg2:pg) and commits after.
     */
    @Test
    void allWritersOnPostgresDecideAtPostgres() throws Exception {
        try (TandemTransactionManager tm = tm();
                TandemDataSource pg = TandemDataSource.postgres(tm, "pg", TestEnv.pgSource());
                TandemDataSource pg2 = TandemDataSource.postgres(tm, "pg2", TestEnv.pgSource())) {
            String id1 = TandemJtaTest.id();
            String id2 = TandemJtaTest.id();
            tm.begin();
            String g = gtrid(tm);
            try (Connection a = pg.getConnection(); Connection b = pg2.getConnection()) {
                insert(a, id1);
                insert(b, id2);
            }
            tm.commit();
            assertTrue(TestEnv.pgHas(id1) && TestEnv.pgHas(id2), "both rows");
            assertEquals("C", decisionRow(TestEnv.pg(), g), "PostgreSQL's decision row");
            assertTrue(TestEnv.prepared(g).isEmpty(), "nothing left prepared: " + TestEnv.prepared(g));
        }
    }

    /**
     * The connection to the commit point breaks during its commit. Once
     * after the decision reached MariaDB (its reply is dropped): the client
     * learns COMMIT by taking the key on a new connection, and the
     * transaction is on both databases. Once before (the decision's bytes
     * are dropped): taking the key finds no decision, records ABORT, and the
     * transaction is on neither. Never unknown, never split.
     */
    @Test
    void connectionBrokenDuringTheDecisionIsSettledByTheKey() throws Exception {
        ScheduledExecutorService timer = Executors.newSingleThreadScheduledExecutor();
        String[] hp = TestEnv.MY_HOST_PORT.split(":");
        try (TcpProxy px = new TcpProxy(hp[0], Integer.parseInt(hp[1]));
                TandemTransactionManager tm = tm();
                TandemDataSource pg = TandemDataSource.postgres(tm, "pg", TestEnv.pgSource());
                TandemDataSource maria = TandemDataSource.mariadb(tm, "maria", TestEnv.mariaSourceVia(px.port()))) {
            for (boolean reachedMariaDb : new boolean[] {true, false}) {
                String id = TandemJtaTest.id();
                tm.begin();
                String g = gtrid(tm);
                try (Connection a = pg.getConnection(); Connection b = maria.getConnection()) {
                    insert(a, id);
                    insert(b, id);
                }
                TandemTransaction.failpoint = s -> {
                    if (s.equals("before-commit-point")) {
                        if (reachedMariaDb) {
                            px.dropToClient = true;
                        } else {
                            px.dropToServer = true;
                        }
                        timer.schedule(px::cut, 1, TimeUnit.SECONDS);
                    }
                };
                if (reachedMariaDb) {
                    tm.commit();
                } else {
                    RollbackException e = assertThrows(RollbackException.class, tm::commit);
                    assertTrue(e.getMessage().contains("taking the decision key found no decision"), e.getMessage());
                }
                TandemTransaction.failpoint = s -> { };
                boolean p = TestEnv.pgHas(id);
                boolean m = TestEnv.mariaHas(id);
                System.out.println("connectionBrokenDuringTheDecision: decision reached MariaDB " + reachedMariaDb
                        + ": rows postgres " + p + ", mariadb " + m + ", decision row " + decisionRow(TestEnv.maria(), g));
                assertEquals(reachedMariaDb, p, "PostgreSQL's row follows the decision");
                assertEquals(reachedMariaDb, m, "MariaDB's row follows the decision");
                assertTrue(TestEnv.prepared(g).isEmpty(), "nothing left prepared: " + TestEnv.prepared(g));
            }
        } finally {
            timer.shutdownNow();
        }
    }

    /**
     * A JVM halted at each step of the commit-point path, with no log of its
     * own: the coordinator's scan finds the PostgreSQL branch prepared under
     * tandemcp:g:pg:maria and settles it from MariaDB's decision table —
     * rolled back when the JVM died before the decision (taking the key
     * records ABORT; the MariaDB transaction died with its session),
     * committed when it died after.
     */
    @Test
    void jvmHaltedAtEachStepIsSettledFromTheDecisionTable() throws Exception {
        for (String step : List.of("before-commit-point", "after-commit-point")) {
            String id = TandemJtaTest.id();
            String java = System.getProperty("java.home") + File.separator + "bin" + File.separator + "java";
            Process child = new ProcessBuilder(java, "-cp", System.getProperty("java.class.path"),
                    CommitPointAndDie.class.getName(), nowhere, id, step).redirectErrorStream(true).start();
            try {
                BufferedReader out = new BufferedReader(new InputStreamReader(child.getInputStream(), StandardCharsets.UTF_8));
                StringBuilder seen = new StringBuilder();
                String g = null;
                String line;
                while ((line = out.readLine()) != null) {
                    seen.append(line).append('\n');
                    if (line.startsWith("GTRID ")) {
                        g = line.substring(6);
                    }
                }
                assertTrue(child.waitFor(30, TimeUnit.SECONDS), "the child ended");
                assertEquals(137, child.exitValue(), "halted at " + step + ":\n" + seen);
                assertTrue(seen.toString().contains("HALT " + step), seen.toString());
                String gt = g;
                List<String> left = TestEnv.prepared(gt);
                assertEquals(List.of("pg tandemcp2:" + gt + ":pg:maria:" + mariaTableId()), left,
                        step + ": PostgreSQL prepared, named with the commit point and owned by its decision table");
                assertTrue(TestEnv.eventually(30_000, () -> TestEnv.prepared(gt).isEmpty()),
                        step + ": the coordinator settled the prepared branch: " + TestEnv.prepared(gt) + "\n" + coord.output());
                boolean p = TestEnv.pgHas(id);
                boolean m = TestEnv.mariaHas(id);
                System.out.println("jvmHaltedAtEachStep: " + step + ": rows postgres " + p + ", mariadb " + m);
                assertEquals(p, m, step + ": SPLIT");
                assertEquals(step.equals("after-commit-point"), p, step + ": decided " + (p ? "commit" : "abort"));
            } finally {
                child.destroyForcibly();
            }
        }
    }

    /**
     * On the MariaDB commit point (an XA branch, where MariaDB refuses them
     * itself), statements that end the transaction are refused before they
     * are sent, with a clearer error, through every way a handle sends SQL;
     * the transaction is unchanged and rolls back whole. On an XA branch
     * (DecideAt.COORDINATOR) MariaDB refuses them itself.
     */
    @Test
    void implicitCommitsAreRefusedOnTheCommitPoint() throws Exception {
        try (Connection c = TestEnv.maria(); Statement st = c.createStatement()) {
            st.execute("DROP TABLE IF EXISTS jta_implicit"); // a failed run's
        }
        try (TandemTransactionManager tm = tm();
                TandemDataSource pg = TandemDataSource.postgres(tm, "pg", TestEnv.pgSource());
                TandemDataSource maria = TandemDataSource.mariadb(tm, "maria", TestEnv.mariaSource())) {
            String id = TandemJtaTest.id();
            tm.begin();
            String g = gtrid(tm);
            try (Connection a = pg.getConnection(); Connection b = maria.getConnection()) {
                insert(a, id);
                insert(b, id);
                List<String> bad = List.of("CREATE TABLE jta_implicit (a int)", "/*!50000 DROP TABLE jta_rows */", "COMMIT",
                        "SET autocommit = 1", "SELECT 1; LOCK TABLES jta_rows WRITE");
                for (String sql : bad) {
                    try (Statement st = b.createStatement()) {
                        SQLException e = assertThrows(SQLException.class, () -> st.execute(sql), sql);
                        assertTrue(e.getMessage().contains("would end the transaction"), e.getMessage());
                        assertThrows(SQLException.class, () -> st.executeUpdate(sql), sql);
                        assertThrows(SQLException.class, () -> st.addBatch(sql), sql);
                    }
                    assertThrows(SQLException.class, () -> b.prepareStatement(sql), sql);
                }
                try (Statement st = b.createStatement()) {
                    st.execute("SAVEPOINT s1");
                    st.execute("ROLLBACK TO SAVEPOINT s1"); // allowed: the transaction goes on
                }
            }
            tm.rollback();
            assertFalse(TestEnv.pgHas(id) || TestEnv.mariaHas(id), "a row of the rolled back transaction is committed");
            assertTrue(TestEnv.prepared(g).isEmpty());
            try (Connection c = TestEnv.maria(); ResultSet rs = c.getMetaData().getTables(null, null, "jta_implicit", null)) {
                assertFalse(rs.next(), "the refused CREATE TABLE ran");
            }
        }
    }

    /**
     * The ways plain JDBC gives back "the connection" of a handle on the
     * commit point (DatabaseMetaData.getConnection, unwrap(Connection.class))
     * give the handle, not the driver's connection: its commit(), which
     * would commit MariaDB's writes ahead of the decision (and a later
     * refusal would roll PostgreSQL back: a split), is refused too.
     */
    @Test
    void theDriverConnectionIsNotReachableThroughJdbc() throws Exception {
        try (TandemTransactionManager tm = tm();
                TandemDataSource pg = TandemDataSource.postgres(tm, "pg", TestEnv.pgSource());
                TandemDataSource maria = TandemDataSource.mariadb(tm, "maria", TestEnv.mariaSource())) {
            String id = TandemJtaTest.id();
            tm.begin();
            try (Connection a = pg.getConnection(); Connection b = maria.getConnection()) {
                insert(a, id);
                insert(b, id);
                assertThrows(SQLException.class, () -> b.getMetaData().getConnection().commit(), "getMetaData().getConnection().commit()");
                assertThrows(SQLException.class, () -> b.unwrap(Connection.class).commit(), "unwrap(Connection.class).commit()");
                assertThrows(SQLException.class, () -> b.unwrap(java.sql.Wrapper.class).unwrap(Connection.class).setAutoCommit(true),
                        "unwrap(Wrapper.class)…setAutoCommit(true)");
                try (Statement st = b.createStatement()) {
                    assertThrows(SQLException.class, () -> st.getConnection().getMetaData().getConnection().rollback(), "statement's metadata");
                    assertThrows(SQLException.class, () -> st.unwrap(Statement.class).execute("COMMIT"), "unwrap(Statement.class).execute(COMMIT)");
                    assertThrows(SQLException.class, () -> st.executeQuery("SELECT 1").getStatement().execute("COMMIT"),
                            "executeQuery(…).getStatement().execute(COMMIT)");
                    assertThrows(SQLException.class, () -> {
                        st.execute("SELECT 1");
                        st.getResultSet().getStatement().getConnection().unwrap(Connection.class).commit();
                    }, "getResultSet().getStatement()…commit()");
                }
            }
            tm.rollback();
            assertFalse(TestEnv.mariaHas(id), "SPLIT: the MariaDB row was committed behind the transaction manager's back");
            assertFalse(TestEnv.pgHas(id), "the PostgreSQL row is committed");
        }
    }

    /**
     * PostgreSQL answers an error after the commit point's COMMIT ran: the
     * FATAL "terminating connection due to administrator command" (57P01)
     * of a backend told to die once its commit is done, before the Sync of
     * the same round trip. The error is the server's, yet the decision is
     * COMMIT: the client must not roll the other branch back (a split); it
     * learns COMMIT by taking the key, and the transaction is whole.
     */
    @Test
    void postgresErrorAfterTheCommitPointsCommitIsSettledByTheKey() throws Exception {
        javax.sql.DataSource real = TestEnv.pgSource();
        javax.sql.DataSource dying = (javax.sql.DataSource) java.lang.reflect.Proxy.newProxyInstance(getClass().getClassLoader(),
                new Class<?>[] {javax.sql.DataSource.class}, (p, m, args) -> {
                    Object r = invoke(m, real, args);
                    return m.getName().equals("getConnection") ? dieAfterDecision((Connection) r) : r;
                });
        try (TandemTransactionManager tm = tm();
                TandemDataSource pg = TandemDataSource.postgres(tm, "pg", dying);
                TandemDataSource pg2 = TandemDataSource.postgres(tm, "pg2", TestEnv.pgSource())) {
            try (Connection c = pg.getConnection()) {
                c.createStatement().close(); // outside a transaction: the commit-point check runs at the first commit's choice
            }
            String id1 = TandemJtaTest.id();
            String id2 = TandemJtaTest.id();
            tm.begin();
            String g = gtrid(tm);
            try (Connection a = pg.getConnection(); Connection b = pg2.getConnection()) {
                insert(a, id1);
                insert(b, id2);
            }
            try {
                tm.commit();
            } catch (RollbackException e) {
                System.out.println("postgresErrorAfterTheCommitPointsCommit: " + e.getMessage());
            }
            boolean p1 = TestEnv.pgHas(id1);
            boolean p2 = TestEnv.pgHas(id2);
            System.out.println("postgresErrorAfterTheCommitPointsCommit: rows pg " + p1 + ", pg2 " + p2 + ", decision row " + decisionRow(TestEnv.pg(), g));
            assertTrue(p1, "the commit point committed");
            assertEquals(p1, p2, "SPLIT: the commit point committed and the other branch did not");
            assertTrue(TestEnv.prepared(g).isEmpty(), "nothing left prepared: " + TestEnv.prepared(g));
        }
    }

    private static Object invoke(java.lang.reflect.Method m, Object target, Object[] args) throws Throwable {
        try {
            return m.invoke(target, args);
        } catch (java.lang.reflect.InvocationTargetException e) {
            throw e.getCause();
        }
    }

    /** c, whose statement that records COMMIT in tandem_decision runs, then fails as a backend terminated after it would. */
    private static Connection dieAfterDecision(Connection c) {
        return (Connection) java.lang.reflect.Proxy.newProxyInstance(CommitPointTest.class.getClassLoader(), new Class<?>[] {Connection.class},
                (p, m, args) -> {
                    Object r = invoke(m, c, args);
                    if (!(r instanceof Statement st) || m.getReturnType() != Statement.class) {
                        return r;
                    }
                    return java.lang.reflect.Proxy.newProxyInstance(CommitPointTest.class.getClassLoader(), new Class<?>[] {Statement.class},
                            (sp, sm, sargs) -> {
                                Object sr = invoke(sm, st, sargs);
                                if (sm.getName().equals("execute") && sargs[0] instanceof String sql
                                        && sql.contains(DecisionTable.NAME) && sql.contains("'C'")) {
                                    c.close();
                                    throw new SQLException("FATAL: terminating connection due to administrator command", "57P01");
                                }
                                return sr;
                            });
                });
    }

    /**
     * The application's thread is interrupted (a request timeout, a
     * cancelled Future) when it commits: the commit still waits for every
     * branch it started (a phase 1 it stopped waiting for would race its own
     * rollback on the same connections and leave prepared branches to the
     * scan), commits, and leaves the thread's interrupt status set.
     */
    @Test
    void interruptedThreadStillCommitsWhole() throws Exception {
        try (TandemTransactionManager tm = tm();
                TandemDataSource pg = TandemDataSource.postgres(tm, "pg", TestEnv.pgSource());
                TandemDataSource pg2 = TandemDataSource.postgres(tm, "pg2", TestEnv.pgSource());
                TandemDataSource maria = TandemDataSource.mariadb(tm, "maria", TestEnv.mariaSource())) {
            String id = TandemJtaTest.id();
            String id2 = TandemJtaTest.id();
            tm.begin();
            String g = gtrid(tm);
            try (Connection b = maria.getConnection(); Connection a = pg.getConnection(); Connection a2 = pg2.getConnection()) {
                insert(b, id);
                insert(a, id);
                insert(a2, id2);
            }
            Thread.currentThread().interrupt();
            try {
                tm.commit();
            } finally {
                assertTrue(Thread.interrupted(), "the thread's interrupt status is kept");
            }
            assertTrue(TestEnv.pgHas(id) && TestEnv.pgHas(id2) && TestEnv.mariaHas(id), "the transaction is on both databases");
            assertTrue(TestEnv.prepared(g).isEmpty(), "nothing left prepared: " + TestEnv.prepared(g));
        }
    }

    /**
     * The commit point's connection breaks before its decision arrives while
     * the key is held by an open transaction (taking it waits, times out,
     * and is tried again), and the committing thread is interrupted: the
     * retries go on within the decision timeout, the key is taken once the
     * holder rolls back, and the outcome is a known rollback, not "unknown".
     */
    @Test
    void interruptedThreadKeepsTakingTheKey() throws Exception {
        ScheduledExecutorService timer = Executors.newSingleThreadScheduledExecutor();
        String[] hp = TestEnv.MY_HOST_PORT.split(":");
        try (TcpProxy px = new TcpProxy(hp[0], Integer.parseInt(hp[1]));
                TandemTransactionManager tm = TandemTransactionManager.create(
                        TandemConfig.coordinator(nowhere).withDecisionTimeout(Duration.ofSeconds(20)));
                TandemDataSource pg = TandemDataSource.postgres(tm, "pg", TestEnv.pgSource());
                TandemDataSource maria = TandemDataSource.mariadb(tm, "maria", TestEnv.mariaSourceVia(px.port()));
                Connection holder = TestEnv.maria()) {
            String id = TandemJtaTest.id();
            String g = writeBoth(tm, pg, maria, id);
            TandemTransaction.failpoint = s -> {
                if (s.equals("before-commit-point")) {
                    try (Statement st = holder.createStatement()) {
                        holder.setAutoCommit(false);
                        st.execute("INSERT INTO tandem_decision (gtrid, outcome, began_at) VALUES ('" + g + "', 'A', UTC_TIMESTAMP(6))");
                    } catch (SQLException e) {
                        throw new IllegalStateException(e);
                    }
                    timer.schedule(() -> {
                        try {
                            holder.rollback();
                        } catch (SQLException e) {
                            throw new IllegalStateException(e);
                        }
                    }, 4, TimeUnit.SECONDS);
                    px.dropToServer = true;
                    timer.schedule(px::cut, 1, TimeUnit.SECONDS);
                    Thread.currentThread().interrupt();
                }
            };
            try {
                RollbackException e = assertThrows(RollbackException.class, tm::commit);
                assertTrue(e.getMessage().contains("taking the decision key found no decision"), e.getMessage());
            } finally {
                assertTrue(Thread.interrupted(), "the thread's interrupt status is kept");
            }
            assertFalse(TestEnv.pgHas(id) || TestEnv.mariaHas(id), "a row of the rolled back transaction is committed");
            assertTrue(TestEnv.prepared(g).isEmpty(), "nothing left prepared: " + TestEnv.prepared(g));
            assertEquals("A", decisionRow(TestEnv.maria(), g));
        } finally {
            timer.shutdownNow();
        }
    }

    /**
     * MariaDB rolls the commit point's branch back when it is chosen as a
     * deadlock's victim. As a plain transaction the session was then in
     * autocommit, and a retried statement committed at once, ahead of the
     * decision, which then refused and rolled PostgreSQL back — a split. As
     * an XA branch it is rollback-only (MariaDB refuses the retry), and the
     * error doomed the global transaction: it rolls back, whole.
     */
    @Test
    void deadlockVictimCommitPointRefusesFurtherStatements() throws Exception {
        java.util.concurrent.ExecutorService other = Executors.newSingleThreadExecutor();
        try (TandemTransactionManager tm = tm();
                TandemDataSource pg = TandemDataSource.postgres(tm, "pg", TestEnv.pgSource());
                TandemDataSource maria = TandemDataSource.mariadb(tm, "maria", TestEnv.mariaSource());
                Connection o = TestEnv.maria()) {
            String id = TandemJtaTest.id();
            tm.begin();
            String g = gtrid(tm);
            try (Connection a = pg.getConnection(); Connection b = maria.getConnection()) {
                insert(a, id);
                makeDeadlockVictim(b, o, other);
                o.rollback();
                try {
                    insert(b, id); // the application retries the statement
                } catch (SQLException e) {
                    System.out.println("deadlockVictimCommitPoint: the retry was refused: " + e.getMessage());
                }
            }
            assertThrows(RollbackException.class, tm::commit);
            boolean p = TestEnv.pgHas(id);
            boolean m = TestEnv.mariaHas(id);
            System.out.println("deadlockVictimCommitPoint: rows postgres " + p + ", mariadb " + m);
            assertFalse(m, "SPLIT: the MariaDB row is committed, the PostgreSQL one rolled back");
            assertFalse(p, "the PostgreSQL row is committed");
            assertTrue(TestEnv.prepared(g).isEmpty(), "nothing left prepared: " + TestEnv.prepared(g));
        } finally {
            other.shutdownNow();
        }
    }

    /**
     * Another thread calls rollback() on the transaction while its commit
     * runs (here from a Synchronization's beforeCompletion, before the
     * commit prepares anything): only one of commit and rollback finishes
     * the transaction — the late one is refused — so no branch is rolled
     * back under a commit point that then commits.
     */
    @Test
    void rollbackFromAnotherThreadDuringCommitIsRefused() throws Exception {
        java.util.concurrent.ExecutorService other = Executors.newSingleThreadExecutor();
        try (TandemTransactionManager tm = tm();
                TandemDataSource pg = TandemDataSource.postgres(tm, "pg", TestEnv.pgSource());
                TandemDataSource maria = TandemDataSource.mariadb(tm, "maria", TestEnv.mariaSource())) {
            String id = TandemJtaTest.id();
            tm.begin();
            String g = gtrid(tm);
            jakarta.transaction.Transaction tx = tm.getTransaction();
            try (Connection a = pg.getConnection(); Connection b = maria.getConnection()) {
                insert(a, id);
                insert(b, id);
            }
            Throwable[] seen = new Throwable[1];
            tx.registerSynchronization(new jakarta.transaction.Synchronization() {
                @Override
                public void beforeCompletion() {
                    try {
                        other.submit(() -> {
                            tx.rollback();
                            return null;
                        }).get(30, TimeUnit.SECONDS);
                    } catch (java.util.concurrent.ExecutionException e) {
                        seen[0] = e.getCause();
                    } catch (Exception e) {
                        throw new IllegalStateException(e);
                    }
                }

                @Override
                public void afterCompletion(int status) {
                }
            });
            try {
                tm.commit();
            } catch (RollbackException e) {
                System.out.println("rollbackFromAnotherThreadDuringCommit: " + e.getMessage());
            }
            boolean p = TestEnv.pgHas(id);
            boolean m = TestEnv.mariaHas(id);
            System.out.println("rollbackFromAnotherThreadDuringCommit: rows postgres " + p + ", mariadb " + m + "; the other thread's rollback: " + seen[0]);
            assertEquals(p, m, "SPLIT");
            assertTrue(seen[0] instanceof IllegalStateException, "the other thread's rollback during the commit was refused: " + seen[0]);
            assertTrue(TestEnv.prepared(g).isEmpty(), "nothing left prepared: " + TestEnv.prepared(g));
        } finally {
            other.shutdownNow();
        }
    }

    /**
     * Makes b's transaction a deadlock's victim (o, a plain MariaDB
     * connection, weighs more), then rolls o back.
     */
    static void makeDeadlockVictim(Connection b, Connection o, java.util.concurrent.ExecutorService other) throws Exception {
        String rowA = TandemJtaTest.id();
        String rowB = TandemJtaTest.id();
        try (Connection c = TestEnv.maria()) {
            insert(c, rowA);
            insert(c, rowB);
        }
        o.setAutoCommit(false);
        for (int i = 0; i < 20; i++) {
            insert(o, TandemJtaTest.id()); // o weighs more: InnoDB picks b as the victim
        }
        try (Statement st = o.createStatement()) {
            st.executeUpdate("UPDATE jta_rows SET v = v + 1 WHERE id = '" + rowB + "'");
        }
        try (Statement st = b.createStatement()) {
            st.executeUpdate("UPDATE jta_rows SET v = v + 1 WHERE id = '" + rowA + "'");
        }
        java.util.concurrent.Future<?> waits = other.submit(() -> {
            try (Statement st = o.createStatement()) {
                return st.executeUpdate("UPDATE jta_rows SET v = v + 1 WHERE id = '" + rowA + "'");
            }
        });
        SQLException dl = assertThrows(SQLException.class, () -> {
            try (Statement st = b.createStatement()) {
                st.executeUpdate("UPDATE jta_rows SET v = v + 1 WHERE id = '" + rowB + "'");
            }
        });
        assertEquals(1213, dl.getErrorCode(), "b is the deadlock's victim: " + dl);
        waits.get(30, TimeUnit.SECONDS);
        o.rollback();
    }

    /**
     * The commit point, the only writer, was a deadlock's victim (MariaDB
     * rolled its writes back) and the application went on to commit: the
     * commit must not report COMMITTED for writes that are gone.
     */
    @Test
    void deadlockVictimOnlyWriterDoesNotCommit() throws Exception {
        java.util.concurrent.ExecutorService other = Executors.newSingleThreadExecutor();
        try (TandemTransactionManager tm = tm();
                TandemDataSource maria = TandemDataSource.mariadb(tm, "maria", TestEnv.mariaSource());
                Connection o = TestEnv.maria()) {
            String id = TandemJtaTest.id();
            tm.begin();
            try (Connection b = maria.getConnection()) {
                insert(b, id);
                makeDeadlockVictim(b, o, other);
            }
            assertThrows(RollbackException.class, tm::commit, "the commit of a transaction whose writes MariaDB rolled back");
            assertFalse(TestEnv.mariaHas(id));
        } finally {
            other.shutdownNow();
        }
    }

    /**
     * A handle kept past its transaction (not closed) no longer reaches the
     * connection, which went back to the pool and now carries another
     * transaction — here the next one's commit point: a statement through
     * the old handle would join that transaction, checked against the old
     * branch's rules, not the new one's.
     */
    @Test
    void aHandleKeptPastItsTransactionIsRefused() throws Exception {
        try (TandemTransactionManager tm = tm();
                TandemDataSource pg = TandemDataSource.postgres(tm, "pg", TestEnv.pgSource());
                TandemDataSource maria = TandemDataSource.mariadb(tm, "maria", TestEnv.mariaSource())) {
            String id1 = TandemJtaTest.id();
            String id2 = TandemJtaTest.id();
            tm.begin();
            Connection old = maria.getConnection();
            insert(old, id1);
            tm.commit();
            assertTrue(old.isClosed(), "the handle reads as closed once its transaction is over");
            tm.begin();
            try (Connection a = pg.getConnection(); Connection b = maria.getConnection()) {
                insert(a, id2);
                insert(b, id2);
                assertThrows(SQLException.class, () -> insert(old, TandemJtaTest.id()), "a statement through the old handle");
            }
            tm.rollback();
            assertTrue(TestEnv.mariaHas(id1));
            assertFalse(TestEnv.mariaHas(id2) || TestEnv.pgHas(id2));
        }
    }

    /**
     * A writer on a resource manager the coordinator does not know ("pg2"):
     * its branch, prepared under a commit point, would be recovered by nobody
     * if this JVM died. The manager asks the coordinator once which RMs it
     * recovers, and rolls such a transaction back before anything is
     * prepared, naming the RM and the fix. With RMs it knows, the same
     * manager decides at the commit point.
     */
    @Test
    void writerOnAnRmTheCoordinatorDoesNotKnowIsRefused() throws Exception {
        try (TandemTransactionManager tm = TandemTransactionManager.create(TandemConfig.coordinator(coord.addr));
                TandemDataSource pg = TandemDataSource.postgres(tm, "pg", TestEnv.pgSource());
                TandemDataSource pg2 = TandemDataSource.postgres(tm, "pg2", TestEnv.pgSource());
                TandemDataSource maria = TandemDataSource.mariadb(tm, "maria", TestEnv.mariaSource())) {
            String id1 = TandemJtaTest.id();
            String id2 = TandemJtaTest.id();
            tm.begin();
            String g = gtrid(tm);
            try (Connection a = pg2.getConnection(); Connection b = maria.getConnection()) {
                insert(a, id1);
                insert(b, id1);
            }
            RollbackException e = assertThrows(RollbackException.class, tm::commit);
            assertTrue(e.getMessage().contains("does not know resource manager \"pg2\"") && e.getMessage().contains("--rm pg2="), e.getMessage());
            assertFalse(TestEnv.pgHas(id1) || TestEnv.mariaHas(id1), "a row of the refused transaction is committed");
            assertTrue(TestEnv.prepared(g).isEmpty(), "nothing prepared: " + TestEnv.prepared(g));
            tm.begin();
            try (Connection a = pg.getConnection(); Connection b = maria.getConnection()) {
                insert(a, id2);
                insert(b, id2);
            }
            assertEquals("maria", ((TandemTransaction) tm.getTransaction()).commitPoint());
            tm.commit();
            assertTrue(TestEnv.pgHas(id2) && TestEnv.mariaHas(id2));
        }
    }

    /** DecideAt.COORDINATOR keeps every writer prepared and the coordinator deciding: the MariaDB branch is XA. */
    @Test
    void decideAtCoordinatorPreparesEveryWriter() throws Exception {
        try (TandemTransactionManager tm = TandemTransactionManager.create(
                        TandemConfig.coordinator(coord.addr).withDecideAt(TandemConfig.DecideAt.COORDINATOR));
                TandemDataSource pg = TandemDataSource.postgres(tm, "pg", TestEnv.pgSource());
                TandemDataSource maria = TandemDataSource.mariadb(tm, "maria", TestEnv.mariaSource())) {
            String id = TandemJtaTest.id();
            String g = writeBoth(tm, pg, maria, id);
            assertNull(((TandemTransaction) tm.getTransaction()).commitPoint());
            tm.commit();
            assertEquals(tandem.v1.Tandem.Outcome.COMMITTED, coord.status(g), "the coordinator decided");
            assertEquals("", decisionRow(TestEnv.maria(), g), "no decision row");
        }
    }
}
