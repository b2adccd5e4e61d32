package io.github.tandemtx.jta;

import io.grpc.ManagedChannel;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import tandem.v1.CoordinatorGrpc;
import tandem.v1.Tandem.HealthRequest;
import tandem.v1.Tandem.Outcome;
import tandem.v1.Tandem.StatusRequest;

/** A real `tandem serve` process on a free port and a fresh data directory, as test/e2e/harness_test.go starts it. */
final class Coordinator implements AutoCloseable {
    final String addr;
    final Path dataDir;
    private final List<String> extra;
    private final java.util.Map<String, String> env;
    private Process proc;
    private final ByteArrayOutputStream out = new ByteArrayOutputStream();
    private final ManagedChannel channel;

    Coordinator(String failpoints, String... extra) throws Exception {
        this(failpoints, io.grpc.InsecureChannelCredentials.create(), extra);
    }

    /** creds: how the test itself reaches the coordinator (its Health and Status calls). */
    Coordinator(String failpoints, io.grpc.ChannelCredentials creds, String... extra) throws Exception {
        this(java.util.Map.of(), failpoints, creds, extra);
    }

    /** A coordinator with env added to its process's environment (e.g. OTEL_BSP_SCHEDULE_DELAY), no failpoints. */
    static Coordinator withEnv(java.util.Map<String, String> env, String... extra) throws Exception {
        return new Coordinator(env, null, io.grpc.InsecureChannelCredentials.create(), extra);
    }

    private Coordinator(java.util.Map<String, String> env, String failpoints, io.grpc.ChannelCredentials creds, String... extra) throws Exception {
        this.addr = "127.0.0.1:" + TestEnv.freePort();
        this.dataDir = Files.createTempDirectory("tandem-jta-coord");
        this.extra = List.of(extra);
        this.env = java.util.Map.copyOf(env);
        this.channel = io.grpc.Grpc.newChannelBuilder(addr, creds).build();
        start(failpoints);
    }

    void start(String failpoints) throws Exception {
        List<String> cmd = new ArrayList<>(List.of(TestEnv.tandemBin(), "serve", "--listen", addr, "--data-dir", dataDir.toString(),
                "--scan-interval", "200ms", "--orphan-timeout", "2s",
                // A gtrid that began before the log was born (plus this skew) is never
                // presumed aborted: short, so that tests' orphans are settled (awaitPastBirth).
                "--max-clock-skew", "1s",
                // Expanded by tandem from its environment: the passwords stay off the command line.
                "--rm", "pg=postgres:${TANDEM_PG_DSN}", "--rm", "maria=mysql:${TANDEM_MYSQL_DSN}"));
        cmd.addAll(extra);
        ProcessBuilder pb = new ProcessBuilder(cmd).redirectErrorStream(true);
        pb.environment().remove("TANDEM_FAILPOINTS");
        pb.environment().putAll(env);
        if (failpoints != null) {
            pb.environment().put("TANDEM_FAILPOINTS", failpoints);
        }
        proc = pb.start();
        Process p = proc;
        Thread t = new Thread(() -> {
            try (InputStream in = p.getInputStream()) {
                in.transferTo(new java.io.OutputStream() {
                    @Override
                    public void write(int b) {
                        synchronized (out) {
                            out.write(b);
                        }
                    }

                    @Override
                    public void write(byte[] b, int off, int len) {
                        synchronized (out) {
                            out.write(b, off, len);
                        }
                    }
                });
            } catch (IOException ignored) {
                // the process ended
            }
        });
        t.setDaemon(true);
        t.start();
        waitHealthy();
    }

    private void waitHealthy() throws Exception {
        long end = System.currentTimeMillis() + 20_000;
        while (System.currentTimeMillis() < end) {
            try {
                CoordinatorGrpc.newBlockingStub(channel).withDeadlineAfter(500, TimeUnit.MILLISECONDS).health(HealthRequest.getDefaultInstance());
                return;
            } catch (io.grpc.StatusRuntimeException e) {
                if (e.getStatus().getCode() == io.grpc.Status.Code.UNAUTHENTICATED) {
                    return; // up, and wants its token
                }
                if (!proc.isAlive()) {
                    throw new IllegalStateException("coordinator exited at start:\n" + output());
                }
                Thread.sleep(50);
            }
        }
        throw new IllegalStateException("coordinator did not become healthy:\n" + output());
    }

    /**
     * Returns once gtrids begun from now on are past this coordinator's birth
     * boundary (the data directory's born line plus --max-clock-skew, 1 s):
     * only their prepared orphans does it presume aborted. At once when the
     * identity has no born line (a coordinator older than owners).
     */
    void awaitPastBirth() throws IOException, InterruptedException {
        Path f = dataDir.resolve("cluster");
        if (!Files.exists(f)) {
            return;
        }
        for (String line : Files.readAllLines(f)) {
            if (line.startsWith("born ")) {
                long until = java.time.Instant.parse(line.substring(5).trim()).toEpochMilli() + 1_100;
                long left = until - System.currentTimeMillis();
                if (left > 0) {
                    Thread.sleep(left); // until a known instant, not a guess
                }
            }
        }
    }

    String output() {
        synchronized (out) {
            return out.toString(StandardCharsets.UTF_8);
        }
    }

    /** The coordinator's decision for gtrid (Status without resolve). */
    Outcome status(String gtrid) {
        return CoordinatorGrpc.newBlockingStub(channel).withDeadlineAfter(5, TimeUnit.SECONDS)
                .status(StatusRequest.newBuilder().setGtrid(gtrid).build()).getOutcome();
    }

    /** Health's message (role, epoch, standby state), "" when it does not answer. */
    String healthMessage() {
        try {
            return CoordinatorGrpc.newBlockingStub(channel).withDeadlineAfter(2, TimeUnit.SECONDS).health(HealthRequest.getDefaultInstance()).getMessage();
        } catch (io.grpc.StatusRuntimeException e) {
            return "";
        }
    }

    /** SIGKILL, and wait until the process is gone. */
    void kill() throws InterruptedException {
        proc.destroyForcibly();
        proc.waitFor(10, TimeUnit.SECONDS);
    }

    /** Waits for the process to end by itself (a failpoint's kill). */
    boolean waitExit(long ms) throws InterruptedException {
        return proc.waitFor(ms, TimeUnit.MILLISECONDS);
    }

    @Override
    public void close() throws IOException {
        if (proc.isAlive()) {
            proc.destroy();
            try {
                if (!proc.waitFor(15, TimeUnit.SECONDS)) {
                    kill();
                }
            } catch (InterruptedException e) {
                proc.destroyForcibly();
                Thread.currentThread().interrupt();
            }
        }
        channel.shutdownNow();
        try (var s = Files.walk(dataDir)) {
            s.sorted(java.util.Comparator.reverseOrder()).forEach(f -> f.toFile().delete());
        }
    }
}
