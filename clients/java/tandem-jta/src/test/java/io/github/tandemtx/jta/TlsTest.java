package io.github.tandemtx.jta;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.TlsChannelCredentials;
import jakarta.transaction.SystemException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.util.List;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import tandem.v1.Tandem.Outcome;

/** A coordinator serving TLS (--tls-cert), and mutual TLS (--tls-client-ca): certificates made by openssl at run time. */
class TlsTest {
    static Path dir;

    static void openssl(String... args) throws Exception {
        List<String> cmd = new java.util.ArrayList<>(List.of("openssl"));
        cmd.addAll(List.of(args));
        Process p = new ProcessBuilder(cmd).directory(dir.toFile()).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes());
        assertEquals(0, p.waitFor(), "openssl " + String.join(" ", args) + ":\n" + out);
    }

    /** A CA, a server certificate for 127.0.0.1 and a client certificate, EC P-256, keys in PKCS#8. */
    @BeforeAll
    static void certificates() throws Exception {
        TestEnv.createTables();
        dir = Files.createTempDirectory("tandem-jta-tls");
        String ec = "ec_paramgen_curve:prime256v1";
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", ec, "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-subj", "/CN=tandem-test-ca", "-days", "1");
        Files.writeString(dir.resolve("server.ext"), "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n");
        Files.writeString(dir.resolve("client.ext"), "extendedKeyUsage=clientAuth\n");
        for (String who : List.of("server", "client")) {
            openssl("req", "-newkey", "ec", "-pkeyopt", ec, "-nodes", "-keyout", who + ".key", "-out", who + ".csr", "-subj", "/CN=" + who);
            openssl("x509", "-req", "-in", who + ".csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out", who + ".pem",
                    "-days", "1", "-extfile", who + ".ext");
        }
    }

    static void commitBoth(TandemTransactionManager tm, Coordinator coord) throws Exception {
        TandemDataSource pg = TandemDataSource.postgres(tm, "pg", TestEnv.pgSource());
        TandemDataSource maria = TandemDataSource.mariadb(tm, "maria", TestEnv.mariaSource());
        tm.verify();
        String id = TandemJtaTest.id();
        tm.begin();
        String g = ((TandemTransaction) tm.getTransaction()).gtrid();
        try (Connection a = pg.getConnection(); Connection b = maria.getConnection()) {
            TandemJtaTest.insert(a, id);
            TandemJtaTest.insert(b, id);
        }
        tm.commit();
        assertTrue(TestEnv.pgHas(id) && TestEnv.mariaHas(id));
        assertEquals(Outcome.COMMITTED, coord.status(g));
        pg.close();
        maria.close();
    }

    @Test
    void tlsCoordinator() throws Exception {
        var creds = TlsChannelCredentials.newBuilder().trustManager(dir.resolve("ca.pem").toFile()).build();
        try (Coordinator coord = new Coordinator(null, creds, "--tls-cert", dir.resolve("server.pem").toString(),
                "--tls-key", dir.resolve("server.key").toString())) {
            try (TandemTransactionManager tm = TandemTransactionManager.create(
                    TandemConfig.coordinator(coord.addr).withDecideAt(TandemConfig.DecideAt.COORDINATOR).withTls(dir.resolve("ca.pem")))) {
                commitBoth(tm, coord);
            }
            try (TandemTransactionManager plain = TandemTransactionManager.create(TandemConfig.coordinator(coord.addr).withDecideAt(TandemConfig.DecideAt.COORDINATOR))) {
                TandemDataSource.postgres(plain, "pg", TestEnv.pgSource());
                SystemException e = assertThrows(SystemException.class, plain::verify);
                assertTrue(e.getMessage().contains(coord.addr) && e.getMessage().contains("did not answer"), e.getMessage());
            }
        }
    }

    @Test
    void mutualTlsCoordinator() throws Exception {
        var creds = TlsChannelCredentials.newBuilder().trustManager(dir.resolve("ca.pem").toFile())
                .keyManager(dir.resolve("client.pem").toFile(), dir.resolve("client.key").toFile()).build();
        try (Coordinator coord = new Coordinator(null, creds, "--tls-cert", dir.resolve("server.pem").toString(),
                "--tls-key", dir.resolve("server.key").toString(), "--tls-client-ca", dir.resolve("ca.pem").toString())) {
            try (TandemTransactionManager tm = TandemTransactionManager.create(TandemConfig.coordinator(coord.addr).withDecideAt(TandemConfig.DecideAt.COORDINATOR)
                    .withTls(dir.resolve("ca.pem")).withClientCertificate(dir.resolve("client.pem"), dir.resolve("client.key")))) {
                commitBoth(tm, coord);
            }
            try (TandemTransactionManager noCert = TandemTransactionManager.create(
                    TandemConfig.coordinator(coord.addr).withDecideAt(TandemConfig.DecideAt.COORDINATOR).withTls(dir.resolve("ca.pem")))) {
                TandemDataSource.postgres(noCert, "pg", TestEnv.pgSource());
                assertThrows(SystemException.class, noCert::verify, "no client certificate: refused");
            }
        }
    }

    @Test
    void missingTlsFileIsNamed() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> TandemTransactionManager.create(
                TandemConfig.coordinator("127.0.0.1:1").withTls(Path.of("/nonexistent/ca.pem"))));
        assertTrue(e.getMessage().contains("/nonexistent/ca.pem"), e.getMessage());
    }
}
