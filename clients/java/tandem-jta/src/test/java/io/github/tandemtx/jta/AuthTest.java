package io.github.tandemtx.jta;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import jakarta.transaction.RollbackException;
import jakarta.transaction.SystemException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.sql.Connection;
import org.junit.jupiter.api.Test;

/** A coordinator with --auth-token-file: the token is sent on every call; without it, nothing is decided. */
class AuthTest {
    @Test
    void tokenIsSentAndItsAbsenceRefused() throws Exception {
        TestEnv.createTables();
        Path dir = Files.createTempDirectory("tandem-jta-token");
        Path file = dir.resolve("token");
        Files.writeString(file, "s3cret-token-for-the-java-test\n");
        Files.setPosixFilePermissions(file, PosixFilePermissions.fromString("rw-------"));
        try (Coordinator coord = new Coordinator(null, "--auth-token-file", file.toString())) {
            try (TandemTransactionManager tm = TandemTransactionManager.create(
                    TandemConfig.coordinator(coord.addr).withDecideAt(TandemConfig.DecideAt.COORDINATOR).withAuthToken("s3cret-token-for-the-java-test"))) {
                TandemDataSource pg = TandemDataSource.postgres(tm, "pg", TestEnv.pgSource());
                TandemDataSource maria = TandemDataSource.mariadb(tm, "maria", TestEnv.mariaSource());
                tm.verify();
                String id = TandemJtaTest.id();
                tm.begin();
                try (Connection a = pg.getConnection(); Connection b = maria.getConnection()) {
                    TandemJtaTest.insert(a, id);
                    TandemJtaTest.insert(b, id);
                }
                tm.commit();
                assertTrue(TestEnv.pgHas(id) && TestEnv.mariaHas(id));
                pg.close();
                maria.close();
            }
            try (TandemTransactionManager tm = TandemTransactionManager.create(TandemConfig.coordinator(coord.addr).withDecideAt(TandemConfig.DecideAt.COORDINATOR))) {
                TandemDataSource pg = TandemDataSource.postgres(tm, "pg", TestEnv.pgSource());
                TandemDataSource maria = TandemDataSource.mariadb(tm, "maria", TestEnv.mariaSource());
                SystemException v = assertThrows(SystemException.class, tm::verify);
                assertTrue(v.getMessage().contains("UNAUTHENTICATED") && v.getMessage().contains("auth token"), v.getMessage());
                String id = TandemJtaTest.id();
                tm.begin();
                String g = ((TandemTransaction) tm.getTransaction()).gtrid();
                try (Connection a = pg.getConnection(); Connection b = maria.getConnection()) {
                    TandemJtaTest.insert(a, id);
                    TandemJtaTest.insert(b, id);
                }
                RollbackException e = assertThrows(RollbackException.class, tm::commit);
                // Refused at the first call: Health, asked for the cluster that names the branches.
                assertTrue(e.getMessage().contains("UNAUTHENTICATED") && e.getMessage().contains("auth token"), e.getMessage());
                assertFalse(TestEnv.pgHas(id) || TestEnv.mariaHas(id));
                assertTrue(TestEnv.prepared(g).isEmpty(), "nothing left prepared: " + TestEnv.prepared(g));
                pg.close();
                maria.close();
            }
        } finally {
            Files.deleteIfExists(file);
            Files.deleteIfExists(dir);
        }
    }
}
