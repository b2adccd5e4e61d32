package io.github.tandemtx.jta;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;
import org.mariadb.jdbc.MariaDbDataSource;
import org.postgresql.ds.PGSimpleDataSource;

/**
 * One TandemDataSource per resource manager name and transaction manager
 * (no database, no coordinator: nothing is opened). A second one under a
 * name already registered would get the first one's branch from a
 * transaction (Tandem has one branch per RM per transaction, found by
 * name): its connections would write to the first one's database.
 */
class RegistrationTest {
    private static PGSimpleDataSource pg(String db) {
        PGSimpleDataSource s = new PGSimpleDataSource();
        s.setServerNames(new String[] {"127.0.0.1"});
        s.setPortNumbers(new int[] {1});
        s.setDatabaseName(db);
        return s;
    }

    @Test
    void aSecondDataSourceUnderARegisteredNameIsRefused() throws Exception {
        try (TandemTransactionManager tm = TandemTransactionManager.create(TandemConfig.coordinator("127.0.0.1:1"));
                TandemDataSource orders = TandemDataSource.postgres(tm, "pg", pg("orders"))) {
            IllegalStateException e = assertThrows(IllegalStateException.class, () -> TandemDataSource.postgres(tm, "pg", pg("audit")));
            assertTrue(e.getMessage().contains("resource manager \"pg\" already has a TandemDataSource"), e.getMessage());
            assertTrue(e.getMessage().contains("own resource manager name"), e.getMessage());
            // Another kind of database under the name: refused as well.
            assertThrows(IllegalStateException.class, () -> TandemDataSource.mariadb(tm, "pg", new MariaDbDataSource()));
            // The first one keeps the name: a transaction's "pg" branch is its own.
            assertEquals("pg", orders.rmName());
            assertTrue(tm.knowsRm("pg"));
            assertEquals(orders.resourceManager(), tm.registeredRm("pg"));

            // Other names, and the same name on another manager, are free.
            try (TandemDataSource audit = TandemDataSource.postgres(tm, "audit", pg("audit"));
                    TandemTransactionManager other = TandemTransactionManager.create(TandemConfig.coordinator("127.0.0.1:1"));
                    TandemDataSource elsewhere = TandemDataSource.postgres(other, "pg", pg("audit"))) {
                assertEquals("audit", audit.rmName());
                assertEquals(elsewhere.resourceManager(), other.registeredRm("pg"));
            }
        }
    }

    /** Closing a TandemDataSource gives its name back: a new one may take it (a restart of the application's data source). */
    @Test
    void aClosedDataSourceGivesItsNameBack() {
        try (TandemTransactionManager tm = TandemTransactionManager.create(TandemConfig.coordinator("127.0.0.1:1"))) {
            TandemDataSource first = TandemDataSource.postgres(tm, "pg", pg("a"));
            first.close();
            try (TandemDataSource second = TandemDataSource.postgres(tm, "pg", pg("b"))) {
                assertEquals(second.resourceManager(), tm.registeredRm("pg"));
                first.close(); // closing the old one again takes nothing from the new one
                assertEquals(second.resourceManager(), tm.registeredRm("pg"));
            }
            assertEquals(null, tm.registeredRm("pg"));
        }
    }
}
