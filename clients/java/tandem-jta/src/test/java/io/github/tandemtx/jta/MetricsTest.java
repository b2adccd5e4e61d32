package io.github.tandemtx.jta;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tandemtx.jta.metrics.TandemMetrics;
import io.micrometer.prometheusmetrics.PrometheusConfig;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;
import jakarta.transaction.RollbackException;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.util.Map;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The metrics count what ran, on the real databases and a real coordinator:
 * known numbers of transactions of each path, rollbacks, and aborts at known
 * stages, scraped from a PrometheusMeterRegistry and parsed (the Go side's
 * e2e TestClientMetricsCountWhatRan).
 */
class MetricsTest {
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

    /** Begins on tm, inserts id through each source, and commits. */
    static void write(TandemTransactionManager tm, String id, javax.sql.DataSource... sources) throws Exception {
        tm.begin();
        for (javax.sql.DataSource ds : sources) {
            try (Connection c = ds.getConnection()) {
                TandemJtaTest.insert(c, id);
            }
        }
        tm.commit();
    }

    @Test
    void scrapedCountsEqualWhatRan() throws Exception {
        PrometheusMeterRegistry reg = new PrometheusMeterRegistry(PrometheusConfig.DEFAULT);
        try (TandemTransactionManager auto = TandemTransactionManager.create(TandemConfig.coordinator(coord.addr));
                TandemTransactionManager coordinated = TandemTransactionManager.create(
                        TandemConfig.coordinator(coord.addr).withDecideAt(TandemConfig.DecideAt.COORDINATOR));
                TandemDataSource pg = TandemDataSource.postgres(auto, "pg", TestEnv.pgSource());
                TandemDataSource maria = TandemDataSource.mariadb(auto, "maria", TestEnv.mariaSource());
                TandemDataSource pg2 = TandemDataSource.postgres(coordinated, "pg", TestEnv.pgSource());
                TandemDataSource maria2 = TandemDataSource.mariadb(coordinated, "maria", TestEnv.mariaSource())) {
            new TandemMetrics(auto, coordinated).bindTo(reg);
            auto.verify();
            coordinated.verify();

            // 7 decided at MariaDB's commit point. The first may ask the
            // coordinator whether it recovers "pg" and "maria"; the others never call it.
            write(auto, TandemJtaTest.id(), pg, maria);
            long calls = auto.metrics().coordinatorCalls();
            for (int i = 1; i < 7; i++) {
                String id = TandemJtaTest.id();
                write(auto, id, pg, maria);
                assertTrue(TestEnv.pgHas(id) && TestEnv.mariaHas(id));
            }
            // 4 one-phase (one writer), 2 local (nothing written): no coordinator call.
            for (int i = 0; i < 4; i++) {
                write(auto, TandemJtaTest.id(), i % 2 == 0 ? pg : maria);
            }
            for (int i = 0; i < 2; i++) {
                auto.begin();
                try (Connection c = pg.getConnection()) {
                    TandemJtaTest.count(c);
                }
                auto.commit();
            }
            assertEquals(calls, auto.metrics().coordinatorCalls(), "commit-point, one-phase and local commits make no coordinator call");

            // 3 two-phase: one Commit call each (verify() learnt the cluster).
            long before = coordinated.metrics().coordinatorCalls();
            for (int i = 0; i < 3; i++) {
                write(coordinated, TandemJtaTest.id(), pg2, maria2);
            }
            assertEquals(before + 3, coordinated.metrics().coordinatorCalls(), "one Commit per two-phase transaction");

            // 5 rollbacks.
            for (int i = 0; i < 5; i++) {
                auto.begin();
                try (Connection c = pg.getConnection(); Connection d = maria.getConnection()) {
                    TandemJtaTest.insert(c, TandemJtaTest.id());
                    TandemJtaTest.insert(d, TandemJtaTest.id());
                }
                auto.rollback();
            }

            // 3 aborts at "statement": a duplicate key the application ignored, on
            // PostgreSQL (alone, and beside MariaDB) and on MariaDB.
            String dup = TandemJtaTest.id();
            write(auto, dup, pg, maria);
            for (javax.sql.DataSource[] failing : new javax.sql.DataSource[][] {{pg}, {pg, maria}, {maria}}) {
                auto.begin();
                for (javax.sql.DataSource ds : failing) {
                    try (Connection c = ds.getConnection()) {
                        assertThrows(SQLException.class, () -> TandemJtaTest.insert(c, dup));
                    }
                }
                assertThrows(RollbackException.class, auto::commit);
            }
            // 1 at "prepare": a deferred foreign key fails PostgreSQL's PREPARE.
            auto.begin();
            try (Connection a = pg.getConnection(); Connection b = maria.getConnection()) {
                try (PreparedStatement ps = a.prepareStatement("INSERT INTO jta_child (id, parent) VALUES (?, -1)")) {
                    ps.setString(1, TandemJtaTest.id());
                    ps.executeUpdate();
                }
                TandemJtaTest.insert(b, TandemJtaTest.id());
            }
            RollbackException e = assertThrows(RollbackException.class, auto::commit);
            assertTrue(e.getMessage().contains("phase 1 failed"), e.getMessage());
            // 1 at "other": setRollbackOnly.
            auto.begin();
            try (Connection a = pg.getConnection()) {
                TandemJtaTest.insert(a, TandemJtaTest.id());
            }
            auto.setRollbackOnly();
            assertThrows(RollbackException.class, auto::commit);

            TandemMetricsTest.Scrape s = TandemMetricsTest.Scrape.parse(reg.scrape());
            int commitPoint = 7 + 1; // with the duplicate's first insert
            Map<String, Integer> commits = Map.of("commit-point", commitPoint, "two-phase", 3, "one-phase", 4, "local", 2);
            commits.forEach((path, n) -> {
                assertEquals((double) n, s.get("tandem_client_commits_total", "path", path), path + "\n" + s.text());
                assertEquals((double) n, s.get("tandem_client_commit_seconds_count", "path", path), path);
                assertEquals((double) n, s.get("tandem_client_commit_seconds_bucket", "path", path, "le", "+Inf"), path);
            });
            Map<String, Integer> aborts = Map.of("statement", 3, "prepare", 1, "other", 1);
            for (String st : new String[] {"statement", "setup", "prepare", "commit", "decided-abort", "refused", "no-coordinator", "other"}) {
                assertEquals((double) aborts.getOrDefault(st, 0), s.get("tandem_client_aborts_total", "stage", st), st + "\n" + s.text());
            }
            assertEquals(5, s.get("tandem_client_failed_commit_seconds_count", "outcome", "aborted"));
            assertEquals(0, s.get("tandem_client_outcome_unknown_total"));
            assertEquals(0, s.get("tandem_client_failed_commit_seconds_count", "outcome", "unknown"));
            assertEquals(5, s.get("tandem_client_rollbacks_total"));
            assertEquals(auto.metrics().coordinatorCalls() + coordinated.metrics().coordinatorCalls(),
                    s.get("tandem_client_coordinator_calls_total"), "both managers' calls, summed");
            assertTrue(s.get("tandem_client_coordinator_calls_total") >= 2 + 3, "at least the two verify() Health calls and three Commits");
            if (Boolean.getBoolean("tandem.printScrape")) {
                System.out.println(s.text());
            }
        }
    }
}
