package io.github.tandemtx.jta;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import jakarta.transaction.RollbackException;
import jakarta.transaction.Status;
import java.sql.Connection;
import java.sql.SQLException;
import java.time.Duration;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * A branch whose state is not what the transaction needs dooms it at once.
 * Any error on a MariaDB branch dooms the global
 * transaction, whether the application catches it or not: after an error
 * MariaDB may have rolled back the whole transaction (a deadlock's victim,
 * a lock wait timeout under innodb_rollback_on_timeout) or only the
 * statement, and a commit would keep an unknown part of the work.
 */
class BranchErrorTest {
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

    @ParameterizedTest
    @EnumSource(TandemConfig.DecideAt.class)
    void aCaughtErrorOnMariaDbDoomsTheTransaction(TandemConfig.DecideAt where) throws Exception {
        try (TandemTransactionManager tm = TandemTransactionManager.create(TandemConfig.coordinator(coord.addr)
                        .withDecisionTimeout(Duration.ofSeconds(5)).withDecideAt(where));
                TandemDataSource pg = TandemDataSource.postgres(tm, "pg", TestEnv.pgSource());
                TandemDataSource maria = TandemDataSource.mariadb(tm, "maria", TestEnv.mariaSource())) {
            String id = TandemJtaTest.id();
            String later = TandemJtaTest.id();
            tm.begin();
            try (Connection a = pg.getConnection(); Connection b = maria.getConnection()) {
                TandemJtaTest.insert(a, id);
                TandemJtaTest.insert(b, id);
                assertThrows(SQLException.class, () -> TandemJtaTest.insert(b, id)); // duplicate key; the application ignores it
                assertEquals(Status.STATUS_MARKED_ROLLBACK, tm.getStatus(), "the error doomed the transaction at once");
                TandemJtaTest.insert(b, later);
            }
            RollbackException e = assertThrows(RollbackException.class, tm::commit);
            assertTrue(e.getMessage().contains("rm \"maria\"") && e.getMessage().contains("Duplicate entry"), e.getMessage());
            assertFalse(TestEnv.pgHas(id), "PostgreSQL rolled back");
            assertFalse(TestEnv.mariaHas(id) || TestEnv.mariaHas(later), "MariaDB rolled back");
        }
    }

    /**
     * Transaction control sent as text on a PostgreSQL branch is refused
     * before it is sent (the transaction unchanged, and it commits whole);
     * with the early check off, the backend's status after the statement
     * dooms the transaction at once.
     */
    @org.junit.jupiter.api.Test
    void transactionControlTextOnPostgres() throws Exception {
        try (TandemTransactionManager tm = TandemTransactionManager.create(TandemConfig.coordinator(coord.addr)
                        .withDecideAt(TandemConfig.DecideAt.COORDINATOR));
                TandemDataSource pg = TandemDataSource.postgres(tm, "pg", TestEnv.pgSource());
                TandemDataSource maria = TandemDataSource.mariadb(tm, "maria", TestEnv.mariaSource())) {
            String id = TandemJtaTest.id();
            tm.begin();
            try (Connection a = pg.getConnection(); Connection b = maria.getConnection(); java.sql.Statement st = a.createStatement()) {
                TandemJtaTest.insert(b, id);
                TandemJtaTest.insert(a, id);
                for (String sql : java.util.List.of("COMMIT", "end", "SELECT 1; ROLLBACK", "/* x */ BEGIN", "ABORT", "PREPARE TRANSACTION 'x'")) {
                    SQLException e = assertThrows(SQLException.class, () -> st.execute(sql), sql);
                    assertTrue(e.getMessage().contains("is transaction control"), e.getMessage());
                    assertThrows(SQLException.class, () -> a.prepareStatement(sql), sql);
                }
                st.execute("SAVEPOINT s; ROLLBACK TO SAVEPOINT s");
                assertEquals(Status.STATUS_ACTIVE, tm.getStatus(), "refused before it was sent: the transaction is unchanged");
            }
            tm.commit();
            assertTrue(TestEnv.pgHas(id) && TestEnv.mariaHas(id));

            TandemDataSource.earlyChecks = false;
            try {
                String id2 = TandemJtaTest.id();
                tm.begin();
                try (Connection a = pg.getConnection(); Connection b = maria.getConnection(); java.sql.Statement st = a.createStatement()) {
                    TandemJtaTest.insert(b, id2);
                    st.execute("SELECT 1");
                    assertEquals(Status.STATUS_ACTIVE, tm.getStatus());
                    st.execute("COMMIT");
                    assertEquals(Status.STATUS_MARKED_ROLLBACK, tm.getStatus(), "outside its transaction block: doomed");
                }
                RollbackException e = assertThrows(RollbackException.class, tm::commit);
                assertTrue(e.getMessage().contains("outside its transaction"), e.getMessage());
                assertFalse(TestEnv.mariaHas(id2), "MariaDB rolled back");
            } finally {
                TandemDataSource.earlyChecks = true;
            }
        }
    }
}
