package io.github.tandemtx.jta;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicInteger;
import javax.sql.DataSource;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * A pooling DataSource (HikariCP, Spring Boot's default) as a
 * TandemDataSource's source: a session whose transaction state is unknown
 * never goes back to that pool, and the two pools' sizes do not starve each
 * other.
 */
class PoolTest {
    static Coordinator coord;

    @BeforeAll
    static void start() throws Exception {
        TestEnv.createTables();
        coord = new Coordinator(null);
    }

    @AfterAll
    static void stop() throws Exception {
        if (coord != null) {
            coord.close();
        }
    }

    /** A HikariCP pool over source, as Spring Boot makes one (size: Hikari's default 10 when 0). */
    static HikariDataSource hikari(String name, DataSource source, int size) {
        HikariConfig c = new HikariConfig();
        c.setPoolName(name);
        c.setDataSource(source);
        if (size > 0) {
            c.setMaximumPoolSize(size);
        }
        return new HikariDataSource(c);
    }

    static TandemTransactionManager coordinatorTm(Duration decisionTimeout) {
        return TandemTransactionManager.create(TandemConfig.coordinator(coord.addr).withDecisionTimeout(decisionTimeout)
                .withDecideAt(TandemConfig.DecideAt.COORDINATOR));
    }

    /** One transfer: row id written on both databases, committed. */
    static String transfer(TandemTransactionManager tm, DataSource pg, DataSource maria, String id) throws Exception {
        return CommitPointTest.writeBoth(tm, pg, maria, id);
    }

    /**
     * The scenario: Hikari behind each TandemDataSource, decided at
     * the coordinator, the coordinator stopped for one transfer. The
     * MariaDB session holding that transfer's prepared branch must not go
     * back to Hikari's pool (one connection, so every later borrower would
     * draw it): it is aborted, which detaches the branch for the restarted
     * coordinator. Later transfers succeed, before and after the restart,
     * and the branch is settled the same way on both databases.
     */
    @Test
    void aSessionHoldingAPreparedBranchNeverGoesBackToHikari() throws Exception {
        try (HikariDataSource pgPool = hikari("pg-pool", TestEnv.pgSource(), 0);
                HikariDataSource myPool = hikari("maria-pool", TestEnv.mariaSource(), 1);
                TandemTransactionManager tm = coordinatorTm(Duration.ofSeconds(3));
                TandemDataSource pg = TandemDataSource.postgres(tm, "pg", pgPool);
                TandemDataSource maria = TandemDataSource.mariadb(tm, "maria", myPool).setMaxPoolSize(1)) {
            String before = TandemJtaTest.id();
            transfer(tm, pg, maria, before);
            tm.commit();
            assertTrue(TestEnv.pgHas(before) && TestEnv.mariaHas(before));

            coord.awaitPastBirth(); // the lost transfer's orphans are then presumed aborted
            coord.kill();
            String lost = TandemJtaTest.id();
            String g = transfer(tm, pg, maria, lost);
            OutcomeUnknownException unknown = assertThrows(OutcomeUnknownException.class, tm::commit);
            assertEquals(g, unknown.gtrid());

            // The coordinator is still down: a one-writer transaction (no
            // coordinator call) and a plain query on MariaDB need a clean session.
            String alone = TandemJtaTest.id();
            tm.begin();
            try (Connection b = maria.getConnection()) {
                TandemJtaTest.insert(b, alone);
            }
            tm.commit();
            assertTrue(TestEnv.mariaHas(alone), "the one-phase transaction after the unknown one committed");
            try (Connection c = maria.getConnection(); Statement st = c.createStatement(); ResultSet rs = st.executeQuery("SELECT 1")) {
                assertTrue(rs.next());
            }

            coord.start(null);
            // The manager's channel reconnects (its backoff may outlast the restart):
            // a transfer prepared before it does would wait past the orphan timeout.
            assertTrue(TestEnv.eventually(20_000, () -> {
                try {
                    tm.verify();
                    return true;
                } catch (jakarta.transaction.SystemException e) {
                    return false;
                }
            }), "the manager reaches the restarted coordinator");
            String after = TandemJtaTest.id();
            transfer(tm, pg, maria, after);
            tm.commit();
            assertTrue(TestEnv.pgHas(after) && TestEnv.mariaHas(after), "a transfer after the restart committed on both");
            assertTrue(TestEnv.eventually(30_000, () -> TestEnv.prepared(g).isEmpty()),
                    "the restarted coordinator settled the unknown transfer's branches: " + TestEnv.prepared(g) + "\n" + coord.output());
            assertEquals(TestEnv.pgHas(lost), TestEnv.mariaHas(lost), "the unknown transfer is whole");
            assertTrue(myPool.getHikariPoolMXBean().getTotalConnections() <= 1, "Hikari's pool kept its size");
        }
    }

    /**
     * Sixteen threads over Hikari's default size (10) under a TandemDataSource
     * of the default size (16): a connection given back while another thread
     * waits in Hikari goes back to Hikari, so no thread waits out Hikari's
     * 30 s connection timeout.
     */
    @Test
    void sixteenThreadsOverHikarisDefaultSize() throws Exception {
        int threads = 16;
        int each = 5;
        try (HikariDataSource pgPool = hikari("pg-pool-16", TestEnv.pgSource(), 0);
                HikariDataSource myPool = hikari("maria-pool-16", TestEnv.mariaSource(), 0);
                TandemTransactionManager tm = coordinatorTm(Duration.ofSeconds(30));
                TandemDataSource pg = TandemDataSource.postgres(tm, "pg", pgPool);
                TandemDataSource maria = TandemDataSource.mariadb(tm, "maria", myPool)) {
            assertEquals(10, myPool.getMaximumPoolSize(), "Hikari's default size");
            assertEquals(TandemDataSource.DEFAULT_MAX_POOL_SIZE, 16);
            ExecutorService pool = Executors.newFixedThreadPool(threads);
            try {
                List<Future<List<String>>> done = new ArrayList<>();
                for (int t = 0; t < threads; t++) {
                    done.add(pool.submit(() -> {
                        List<String> ids = new ArrayList<>();
                        for (int i = 0; i < each; i++) {
                            String id = TandemJtaTest.id();
                            transfer(tm, pg, maria, id);
                            tm.commit();
                            ids.add(id);
                        }
                        return ids;
                    }));
                }
                List<String> all = new ArrayList<>();
                for (Future<List<String>> f : done) {
                    all.addAll(f.get());
                }
                assertEquals(threads * each, all.size());
                for (String id : all) {
                    assertTrue(TestEnv.pgHas(id) && TestEnv.mariaHas(id), id);
                }
                assertFalse(myPool.getHikariPoolMXBean().getTotalConnections() > 10);
            } finally {
                pool.shutdownNow();
            }
        }
    }

    /** d, counting its getConnection calls in n: physical connections opened. */
    static DataSource counting(DataSource d, AtomicInteger n) {
        return (DataSource) Proxy.newProxyInstance(DataSource.class.getClassLoader(), new Class<?>[] {DataSource.class}, (proxy, m, args) -> {
            if (m.getName().equals("getConnection")) {
                n.incrementAndGet();
            }
            try {
                return m.invoke(d, args);
            } catch (InvocationTargetException e) {
                throw e.getCause();
            }
        });
    }

    /**
     * Over a source that does not pool (a driver's own DataSource, as the
     * benchmark and the README's plain setup use), 16 threads keep their
     * pool's connections: each TandemDataSource opens at most its
     * pool size of physical connections, not one per transaction. Before,
     * a connection given back while another thread was inside acquire()
     * (even one about to find an idle connection) was closed "to hand it
     * to the source's pool" — with no pool there, a reconnect and a new
     * login per transaction: tandem-jta ran at 0.11 of raw 2PC at 32
     * threads, 2 ms of JVM CPU per transaction.
     */
    @Test
    void aSourceThatDoesNotPoolIsNotReconnectedPerTransaction() throws Exception {
        int threads = 16;
        int each = 20;
        AtomicInteger pgOpened = new AtomicInteger(), myOpened = new AtomicInteger();
        try (TandemTransactionManager tm = TandemTransactionManager.create(TandemConfig.coordinator(coord.addr));
                TandemDataSource pg = TandemDataSource.postgres(tm, "pg", counting(TestEnv.pgSource(), pgOpened));
                TandemDataSource maria = TandemDataSource.mariadb(tm, "maria", counting(TestEnv.mariaSource(), myOpened))) {
            ExecutorService pool = Executors.newFixedThreadPool(threads);
            try {
                List<Future<Integer>> done = new ArrayList<>();
                for (int t = 0; t < threads; t++) {
                    done.add(pool.submit(() -> {
                        for (int i = 0; i < each; i++) {
                            transfer(tm, pg, maria, TandemJtaTest.id());
                            tm.commit();
                        }
                        return each;
                    }));
                }
                int n = 0;
                for (Future<Integer> f : done) {
                    n += f.get();
                }
                assertEquals(threads * each, n);
            } finally {
                pool.shutdownNow();
            }
            int max = TandemDataSource.DEFAULT_MAX_POOL_SIZE;
            assertTrue(pgOpened.get() <= max && myOpened.get() <= max, "physical connections opened for " + threads * each
                    + " transactions on " + threads + " threads: PostgreSQL " + pgOpened.get() + ", MariaDB " + myOpened.get()
                    + "; want at most the pool size, " + max);
        }
    }

    /**
     * Over a pooling source, a connection whose transaction ended is the
     * pool's again at once, not kept idle here as well: the pool checks it
     * before lending it again (Hikari: isValid after 500 ms idle), retires
     * it at its maxLifetime, and counts it idle. Before, a connection kept
     * idle here was lent unchecked (Hikari counted it active): its backend
     * terminated while it was idle, the next transaction failed on it.
     */
    @Test
    void aConnectionIdleOverHikariIsHikarisToCheck() throws Exception {
        try (HikariDataSource pgPool = hikari("pg-pool-idle", TestEnv.pgSource(), 2);
                TandemTransactionManager tm = TandemTransactionManager.create(TandemConfig.coordinator(coord.addr));
                TandemDataSource pg = TandemDataSource.postgres(tm, "pg", pgPool)) {
            int pid;
            tm.begin();
            try (Connection c = pg.getConnection(); Statement st = c.createStatement()) {
                st.executeUpdate("INSERT INTO jta_rows (id, v) VALUES ('" + TandemJtaTest.id() + "', 1)");
                try (ResultSet rs = st.executeQuery("SELECT pg_backend_pid()")) {
                    rs.next();
                    pid = rs.getInt(1);
                }
            }
            tm.commit();
            assertEquals(0, pgPool.getHikariPoolMXBean().getActiveConnections(), "the connection is Hikari's again (idle there)");

            try (Connection admin = TestEnv.pg(); Statement st = admin.createStatement()) {
                st.execute("SELECT pg_terminate_backend(" + pid + ")");
            }
            Thread.sleep(700); // past Hikari's 500 ms without a check

            String id = TandemJtaTest.id();
            tm.begin();
            try (Connection c = pg.getConnection(); Statement st = c.createStatement()) {
                st.executeUpdate("INSERT INTO jta_rows (id, v) VALUES ('" + id + "', 1)");
            }
            tm.commit();
            assertTrue(TestEnv.pgHas(id), "committed on a connection Hikari checked");
        }
    }
}
