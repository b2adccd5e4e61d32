package io.github.tandemtx.examples.transfer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/** The demo's invariants on a short run against a real coordinator and the real databases. */
class TransferTest {
    @Test
    void invariantsHoldOnAShortRun() throws Exception {
        String bin = System.getenv("TANDEM_BIN");
        Path dir = Files.createTempDirectory("tandem-jtransfer");
        if (bin == null || bin.isEmpty()) {
            // clients/java/examples/transfer is four levels below the repository's root.
            Path root = Path.of("").toAbsolutePath().getParent().getParent().getParent().getParent();
            bin = dir.resolve("tandem").toString();
            Process b = new ProcessBuilder("go", "build", "-o", bin, "./cmd/tandem").directory(root.toFile()).inheritIO().start();
            assertEquals(0, b.waitFor(), "go build ./cmd/tandem (or set TANDEM_BIN)");
        }
        assertTrue(new File(bin).canExecute(), "TANDEM_BIN=" + bin + " is not executable");
        int port;
        try (ServerSocket s = new ServerSocket(0)) {
            port = s.getLocalPort();
        }
        String addr = "127.0.0.1:" + port;
        Process coord = new ProcessBuilder(bin, "serve", "--listen", addr, "--data-dir", dir.resolve("data").toString(),
                "--rm", "pg=postgres:${TANDEM_PG_DSN}", "--rm", "maria=mysql:${TANDEM_MYSQL_DSN}")
                .redirectErrorStream(true).redirectOutput(dir.resolve("coordinator.log").toFile()).start();
        try {
            Transfer.Config cfg = new Transfer.Config();
            cfg.coordinator = addr;
            cfg.workers = 4;
            cfg.transfers = 200;
            cfg.accounts = 100;
            Transfer.Report rep = null;
            Exception last = null;
            for (int i = 0; i < 100 && rep == null; i++) { // the coordinator is starting
                try {
                    rep = Transfer.run(cfg, System.out);
                } catch (jakarta.transaction.SystemException e) {
                    last = e;
                    Thread.sleep(100);
                }
            }
            assertTrue(rep != null, "the coordinator never answered: " + last + "\n" + Files.readString(dir.resolve("coordinator.log")));
            assertEquals(java.util.List.of(), rep.violations);
            assertEquals(200, rep.committed.get());
            assertEquals(rep.journalPg, rep.journalMaria);
            assertTrue(rep.journalPg >= 200);
        } finally {
            coord.destroy();
            coord.waitFor(15, TimeUnit.SECONDS);
        }
    }
}
