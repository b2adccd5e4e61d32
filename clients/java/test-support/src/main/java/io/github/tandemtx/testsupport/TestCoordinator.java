package io.github.tandemtx.testsupport;

import io.github.tandemtx.jta.TandemConfig;
import io.github.tandemtx.jta.TandemTransactionManager;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import java.io.File;
import java.io.IOException;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.TimeUnit;
import tandem.v1.CoordinatorGrpc;
import tandem.v1.Tandem;

/**
 * A real `tandem serve` on a free port and a fresh data directory, with the
 * resource managers "pg" and "maria" ($TANDEM_PG_DSN, $TANDEM_MYSQL_DSN), as
 * tandem-jta's tests and test/e2e start one, for the tests of the starter
 * and the examples: start (with failpoints), wait until it serves, ask a
 * gtrid's outcome, kill, start again, stop. The binary: the tandem.bin
 * property or $TANDEM_BIN, else built from this checkout with go build
 * (failpoints need one built with -tags failpoints).
 */
public final class TestCoordinator implements AutoCloseable {
    /** The gRPC address clients call. */
    public final String addr;
    private final Path dataDir;
    private final Path logFile;
    private final String failpoints;
    private Process proc;

    public TestCoordinator() throws Exception {
        this(null);
    }

    /** failpoints: TANDEM_FAILPOINTS, e.g. "before-phase2=sleep(5s)"; null: none. */
    public TestCoordinator(String failpoints) throws Exception {
        this.failpoints = failpoints;
        addr = "127.0.0.1:" + freePort();
        dataDir = Files.createTempDirectory("tandem-test-coord");
        logFile = dataDir.resolveSibling(dataDir.getFileName() + ".log");
        start();
    }

    /** Starts (again: same address and data directory) and waits until it serves. */
    public void start() throws Exception {
        ProcessBuilder pb = new ProcessBuilder(List.of(tandemBin(), "serve", "--listen", addr, "--admin", "", "--data-dir", dataDir.toString(),
                // Orphans settled within seconds, and gtrids past the log's birth after 1 s.
                "--scan-interval", "200ms", "--orphan-timeout", "2s", "--max-clock-skew", "1s",
                // Expanded by tandem from its environment: the passwords stay off the command line.
                "--rm", "pg=postgres:${TANDEM_PG_DSN}", "--rm", "maria=mysql:${TANDEM_MYSQL_DSN}"))
                .redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.appendTo(logFile.toFile()));
        pb.environment().remove("TANDEM_FAILPOINTS");
        if (failpoints != null) {
            pb.environment().put("TANDEM_FAILPOINTS", failpoints);
        }
        proc = pb.start();
        long end = System.currentTimeMillis() + 20_000;
        try (TandemTransactionManager tm = TandemTransactionManager.create(TandemConfig.coordinator(addr))) {
            while (true) {
                try {
                    tm.verify();
                    return;
                } catch (Exception e) {
                    if (!proc.isAlive() || System.currentTimeMillis() > end) {
                        close();
                        throw new IllegalStateException("coordinator at " + addr + " did not start serving: " + e.getMessage() + "\n" + output());
                    }
                    Thread.sleep(50);
                }
            }
        }
    }

    /** SIGKILL, keeping the data directory (start() again later). */
    public void kill() throws InterruptedException {
        proc.destroyForcibly();
        proc.waitFor(10, TimeUnit.SECONDS);
    }

    /** The coordinator's decision for gtrid (Status without resolve). */
    public Tandem.Outcome status(String gtrid) {
        ManagedChannel ch = Grpc.newChannelBuilder(addr, InsecureChannelCredentials.create()).build();
        try {
            return CoordinatorGrpc.newBlockingStub(ch).withDeadlineAfter(5, TimeUnit.SECONDS)
                    .status(Tandem.StatusRequest.newBuilder().setGtrid(gtrid).build()).getOutcome();
        } finally {
            ch.shutdownNow();
        }
    }

    /**
     * Returns once gtrids begun from now on are past the data directory's
     * birth boundary (its born line plus --max-clock-skew): only their
     * orphans does the coordinator presume aborted.
     */
    public void awaitPastBirth() throws IOException, InterruptedException {
        Path f = dataDir.resolve("cluster");
        if (!Files.exists(f)) {
            return;
        }
        for (String line : Files.readAllLines(f)) {
            if (line.startsWith("born ")) {
                long left = Instant.parse(line.substring(5).trim()).toEpochMilli() + 1_100 - System.currentTimeMillis();
                if (left > 0) {
                    Thread.sleep(left); // until a known instant
                }
            }
        }
    }

    /** What the coordinator printed so far. */
    public String output() {
        try {
            return Files.readString(logFile);
        } catch (IOException e) {
            return "(no output: " + e + ")";
        }
    }

    /** A TCP port free on loopback a moment ago. */
    public static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket(0)) {
            return s.getLocalPort();
        }
    }

    private static String tandemBin() throws IOException, InterruptedException {
        String p = System.getProperty("tandem.bin");
        if (p == null || p.isEmpty() || p.startsWith("${")) {
            p = System.getenv("TANDEM_BIN");
        }
        if (p != null && !p.isEmpty()) {
            if (!new File(p).canExecute()) {
                throw new IllegalStateException("TANDEM_BIN=" + p + " is not an executable file; build it with go build -o " + p + " ./cmd/tandem");
            }
            return p;
        }
        Path root = repositoryRoot();
        Path out = Path.of("target", "tandem-bin", "tandem").toAbsolutePath();
        Process b = new ProcessBuilder("go", "build", "-o", out.toString(), "./cmd/tandem").directory(root.toFile()).inheritIO().start();
        if (b.waitFor() != 0) {
            throw new IllegalStateException("go build ./cmd/tandem failed in " + root + "; set TANDEM_BIN to a tandem binary");
        }
        return out.toString();
    }

    /** The checkout's root: the first directory up from here holding go.mod. */
    private static Path repositoryRoot() {
        for (Path d = Path.of("").toAbsolutePath(); d != null; d = d.getParent()) {
            if (Files.exists(d.resolve("go.mod"))) {
                return d;
            }
        }
        throw new IllegalStateException("no go.mod above " + Path.of("").toAbsolutePath() + ": set TANDEM_BIN to a tandem binary");
    }

    @Override
    public void close() throws IOException {
        if (proc.isAlive()) {
            proc.destroy();
            try {
                if (!proc.waitFor(15, TimeUnit.SECONDS)) {
                    proc.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
                }
            } catch (InterruptedException e) {
                proc.destroyForcibly();
                Thread.currentThread().interrupt();
            }
        }
        try (var s = Files.walk(dataDir)) {
            s.sorted(Comparator.reverseOrder()).forEach(f -> f.toFile().delete());
        }
        Files.deleteIfExists(logFile);
    }
}
