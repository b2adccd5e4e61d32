package io.github.tandemtx.jta;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Metadata;
import io.grpc.Server;
import io.grpc.ServerBuilder;
import io.grpc.Status;
import io.grpc.stub.StreamObserver;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Function;
import java.util.logging.Handler;
import java.util.logging.LogRecord;
import java.util.logging.Logger;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import tandem.v1.CoordinatorGrpc;
import tandem.v1.Tandem.AbortRequest;
import tandem.v1.Tandem.AbortResponse;
import tandem.v1.Tandem.Branch;
import tandem.v1.Tandem.CommitRequest;
import tandem.v1.Tandem.CommitResponse;
import tandem.v1.Tandem.HealthRequest;
import tandem.v1.Tandem.HealthResponse;
import tandem.v1.Tandem.Outcome;
import tandem.v1.Tandem.StatusRequest;
import tandem.v1.Tandem.StatusResponse;

/**
 * Following the primary (the Go SDK's client/follow_test.go) on fake
 * coordinators with a role: serving (the primary) or not (a standby, demoted
 * or fenced one, which refuses Commit, Abort and Status with
 * FAILED_PRECONDITION, with the tandem-not-primary trailer when hint).
 */
class FollowTest {
    static final class RoleFake extends CoordinatorGrpc.CoordinatorImplBase {
        final AtomicBoolean serving = new AtomicBoolean();
        final boolean hint;
        final long epoch;
        final String cluster;
        /** Answers a serving fake's Commit; null: COMMITTED. */
        volatile Function<CommitRequest, Object> commit;
        volatile Outcome status = Outcome.UNDECIDED;
        volatile Status statusError;
        /** Refuses every call as a non-primary although Health says serving (a buggy or hostile coordinator). */
        volatile boolean refuseAll;
        /** When set, Health waits for it (a slow coordinator). */
        volatile java.util.concurrent.CountDownLatch healthGate;
        final AtomicInteger commits = new AtomicInteger();
        final AtomicInteger aborts = new AtomicInteger();
        final AtomicInteger health = new AtomicInteger();
        final AtomicInteger statuses = new AtomicInteger();
        final AtomicInteger resolves = new AtomicInteger();
        Server server;

        RoleFake(boolean hint, long epoch, boolean serving) {
            this(hint, epoch, serving, CLUSTER);
        }

        /** The cluster of the fakes made without one: an identity, which names the branches they decide. */
        static final String CLUSTER = "c".repeat(32);

        /** A coordinator of cluster (Health's "cluster=" as the server says it). */
        RoleFake(boolean hint, long epoch, boolean serving, String cluster) {
            this.hint = hint;
            this.epoch = epoch;
            this.cluster = cluster;
            this.serving.set(serving);
        }

        String addr() {
            return "127.0.0.1:" + server.getPort();
        }

        private void refuse(StreamObserver<?> out) {
            Metadata t = new Metadata();
            if (hint) {
                t.put(CoordinatorClient.NOT_PRIMARY, "standby");
            }
            out.onError(Status.FAILED_PRECONDITION.withDescription("this coordinator is a standby of the primary at 127.0.0.1:7072 (epoch 1): it decides nothing")
                    .asRuntimeException(t));
        }

        @Override
        public void commit(CommitRequest req, StreamObserver<CommitResponse> out) {
            commits.incrementAndGet();
            if (!serving.get() || refuseAll) {
                refuse(out);
                return;
            }
            Object a = commit == null ? Outcome.COMMITTED : commit.apply(req);
            if (a instanceof Status s) {
                out.onError(s.asRuntimeException());
                return;
            }
            out.onNext(CommitResponse.newBuilder().setOutcome((Outcome) a).build());
            out.onCompleted();
        }

        @Override
        public void abort(AbortRequest req, StreamObserver<AbortResponse> out) {
            aborts.incrementAndGet();
            if (!serving.get() || refuseAll) {
                refuse(out);
                return;
            }
            out.onNext(AbortResponse.newBuilder().setOutcome(Outcome.ABORTED).build());
            out.onCompleted();
        }

        @Override
        public void status(StatusRequest req, StreamObserver<StatusResponse> out) {
            statuses.incrementAndGet();
            if (req.getResolve()) {
                resolves.incrementAndGet();
            }
            if (!serving.get() || refuseAll) {
                refuse(out);
                return;
            }
            if (statusError != null) {
                out.onError(statusError.asRuntimeException());
                return;
            }
            out.onNext(StatusResponse.newBuilder().setOutcome(status).build());
            out.onCompleted();
        }

        @Override
        public void health(HealthRequest req, StreamObserver<HealthResponse> out) {
            health.incrementAndGet();
            if (healthGate != null) {
                try {
                    healthGate.await();
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
            boolean s = serving.get();
            out.onNext(HealthResponse.newBuilder().setServing(s).setMessage(cluster == null ? "" : s ? "role=primary cluster=" + cluster + " epoch=" + epoch
                    : "role=standby of x (following) synchronized=yes cluster=" + cluster + " epoch=" + epoch)
                    .build());
            out.onCompleted();
        }
    }

    /** Held: java.util.logging keeps loggers weakly, and a handler on a collected one would see nothing. */
    private static final Logger LOG = Logger.getLogger("io.github.tandemtx.jta");
    private final List<Server> servers = new ArrayList<>();
    private final List<String> logged = new ArrayList<>();
    private final Handler capture = new Handler() {
        @Override
        public void publish(LogRecord r) {
            synchronized (logged) {
                logged.add(r.getMessage());
            }
        }

        @Override
        public void flush() {
        }

        @Override
        public void close() {
        }
    };

    @BeforeEach
    void captureLog() {
        LOG.addHandler(capture);
    }

    @AfterEach
    void stop() {
        LOG.removeHandler(capture);
        servers.forEach(Server::shutdownNow);
    }

    RoleFake serve(RoleFake f) throws Exception {
        f.server = ServerBuilder.forPort(0).addService(f).build().start();
        servers.add(f.server);
        return f;
    }

    int moves(String from, String to) {
        synchronized (logged) {
            return (int) logged.stream().filter(m -> m.contains("coordinator moved from " + from + " to " + to)).count();
        }
    }

    int moves() {
        synchronized (logged) {
            return (int) logged.stream().filter(m -> m.contains("coordinator moved")).count();
        }
    }

    static CommitRequest req() {
        return CommitRequest.newBuilder().setGtrid(TandemXid.newGtrid()).addBranches(Branch.newBuilder().setRm("pg")).build();
    }

    /** The old primary takes the Commit and goes away before answering (UNAVAILABLE; it is no longer serving). */
    static void dropsTheCommitAndStepsDown(RoleFake old) {
        old.commit = r -> {
            old.serving.set(false);
            return Status.UNAVAILABLE.withDescription("connection reset");
        };
    }

    /**
     * A standby's refusal moves the client to the primary: the Commit is sent
     * there and commits; the move is logged once; later commits go straight to
     * the primary with no probe and no call to the standby. With and without
     * the not-primary trailer (FAILED_PRECONDITION alone, as an older server).
     */
    @Test
    void commitFollowsThePrimaryWithAndWithoutTheTrailer() throws Exception {
        for (boolean hint : new boolean[] {true, false}) {
            RoleFake sb = serve(new RoleFake(hint, 1, false));
            RoleFake pr = serve(new RoleFake(hint, 2, true));
            try (CoordinatorClient c = new CoordinatorClient(List.of(sb.addr(), pr.addr()), null)) {
                assertEquals(sb.addr(), c.target(), "before any call, the first configured");
                CoordinatorClient.CommitResult r = c.commit(req(), Duration.ofSeconds(2), null);
                assertNotNull(r.response, "hint=" + hint + ": " + r.refusal + r.unknown);
                assertEquals(Outcome.COMMITTED, r.response.getOutcome());
                assertEquals(2, r.calls, "the refused Commit and the one that committed");
                assertEquals(pr.addr(), c.target());
                assertEquals(1, sb.commits.get());
                assertEquals(1, pr.commits.get());
                assertEquals(0, pr.statuses.get(), "the refusal wrote nothing: no need to ask Status");
                assertEquals(1, moves(sb.addr(), pr.addr()), "hint=" + hint + ": " + logged);
                int sbCalls = sb.commits.get() + sb.health.get();
                int prHealth = pr.health.get();
                for (int i = 0; i < 3; i++) {
                    assertNotNull(c.commit(req(), Duration.ofSeconds(2), null).response);
                }
                assertEquals(sbCalls, sb.commits.get() + sb.health.get(), "the standby was called again after the move");
                assertEquals(4, pr.commits.get());
                assertEquals(prHealth, pr.health.get(), "no probe once the primary is known");
            }
        }
    }

    /**
     * The old primary took the Commit and went away before answering (the
     * decision may be in its log, shipped). The promoted standby is asked
     * Status without resolve, and its answer is the outcome: COMMITTED (no
     * Commit sent when no branch is the client's own; with one, the Commit
     * there, idempotent, settles it); ABORTED (no Commit); UNDECIDED sends
     * the Commit there. Nothing asks Status with resolve, nothing aborts.
     */
    @Test
    void outcomeCaughtInARoleChangeIsSettledByTheNewPrimarysStatus() throws Exception {
        record Case(String name, Outcome status, Outcome commit, boolean own, int wantCommits, Outcome want) {
        }
        for (Case tc : new Case[] {
            new Case("committed", Outcome.COMMITTED, Outcome.COMMITTED, false, 0, Outcome.COMMITTED),
            new Case("committed_own_branches", Outcome.COMMITTED, Outcome.COMMITTED, true, 1, Outcome.COMMITTED),
            new Case("aborted", Outcome.ABORTED, Outcome.ABORTED, true, 0, Outcome.ABORTED),
            new Case("undecided", Outcome.UNDECIDED, Outcome.COMMITTED, false, 1, Outcome.COMMITTED),
            new Case("undecided_then_abort_won", Outcome.UNDECIDED, Outcome.ABORTED, false, 1, Outcome.ABORTED),
        }) {
            RoleFake old = serve(new RoleFake(true, 1, true));
            dropsTheCommitAndStepsDown(old);
            RoleFake nu = serve(new RoleFake(true, 2, true));
            nu.status = tc.status;
            nu.commit = r -> tc.commit;
            try (CoordinatorClient c = new CoordinatorClient(List.of(old.addr(), nu.addr()), null)) {
                CoordinatorClient.CommitResult r = c.commit(req(), Duration.ofSeconds(2), tc.own ? () -> { } : null);
                assertNotNull(r.response, tc.name + ": " + r.refusal + r.unknown);
                assertEquals(tc.want, r.response.getOutcome(), tc.name);
                assertEquals(1, nu.statuses.get(), tc.name + ": one Status on the new primary");
                assertEquals(0, nu.resolves.get(), tc.name + ": Status never resolves");
                assertEquals(tc.wantCommits, nu.commits.get(), tc.name + ": Commits on the new primary");
                assertEquals(0, nu.aborts.get() + old.aborts.get() + old.resolves.get(), tc.name + ": nothing may abort");
                assertEquals(1, moves(old.addr(), nu.addr()), tc.name + ": " + logged);
                assertEquals(tc.wantCommits == 0 ? 2 : 3, r.calls, tc.name + ": Commit, Status" + (tc.wantCommits == 0 ? "" : ", Commit"));
            }
        }
    }

    /**
     * While no coordinator serves, a Commit whose first attempt went
     * unanswered keeps probing with backoff; once the standby is promoted it
     * asks it and commits there, within the decision timeout.
     */
    @Test
    void commitWaitsForThePromotion() throws Exception {
        RoleFake old = serve(new RoleFake(true, 1, true));
        dropsTheCommitAndStepsDown(old);
        RoleFake nu = serve(new RoleFake(true, 2, false));
        try (CoordinatorClient c = new CoordinatorClient(List.of(old.addr(), nu.addr()), null)) {
            new Thread(() -> {
                try {
                    Thread.sleep(500);
                } catch (InterruptedException e) {
                    return;
                }
                nu.serving.set(true);
            }).start();
            CoordinatorClient.CommitResult r = c.commit(req(), Duration.ofSeconds(3), null);
            assertNotNull(r.response, r.unknown);
            assertEquals(Outcome.COMMITTED, r.response.getOutcome());
            assertEquals(1, nu.statuses.get(), "a Status (no resolve) then the Commit");
            assertEquals(0, nu.resolves.get());
            assertEquals(1, nu.commits.get());
            assertTrue(nu.health.get() <= 40, nu.health.get() + " Health probes of the standby in 0.5 s of waiting");
        }
    }

    /**
     * Past the decision timeout with no coordinator serving, a Commit whose
     * first attempt went unanswered is unknown (the later not-primary
     * refusals never make it a rollback); the transaction manager throws
     * OutcomeUnknownException naming the gtrid from it.
     */
    @Test
    void noPrimaryUntilTheTimeoutIsUnknown() throws Exception {
        RoleFake old = serve(new RoleFake(true, 1, true));
        dropsTheCommitAndStepsDown(old);
        RoleFake sb = serve(new RoleFake(true, 2, false));
        try (CoordinatorClient c = new CoordinatorClient(List.of(old.addr(), sb.addr()), null)) {
            CoordinatorClient.CommitResult r = c.commit(req(), Duration.ofMillis(400), null);
            assertNull(r.refused, "refusals after an unanswered attempt must not allow a rollback: " + r.refusal);
            assertNull(r.response);
            assertNotNull(r.unknown);
            assertTrue(r.unknown.contains("connection reset"), r.unknown);
            assertTrue(r.calls > 2, "kept trying: " + r.calls);
            assertEquals(0, old.aborts.get() + sb.aborts.get() + old.resolves.get() + sb.resolves.get(), "nothing may abort");
        }
    }

    /**
     * After an unanswered attempt, the new primary's refusal of Status (a
     * credential no longer accepted, say) says nothing about that attempt: unknown.
     */
    @Test
    void refusalByTheNewPrimaryAfterAnUnansweredAttemptIsUnknown() throws Exception {
        RoleFake old = serve(new RoleFake(true, 1, true));
        dropsTheCommitAndStepsDown(old);
        RoleFake nu = serve(new RoleFake(true, 2, true));
        nu.statusError = Status.PERMISSION_DENIED.withDescription("token not accepted");
        try (CoordinatorClient c = new CoordinatorClient(List.of(old.addr(), nu.addr()), null)) {
            CoordinatorClient.CommitResult r = c.commit(req(), Duration.ofSeconds(2), null);
            assertNull(r.refused, "a refusal after an unanswered attempt must not allow a rollback: " + r.refusal);
            assertNotNull(r.unknown);
            assertTrue(r.unknown.contains("connection reset") && r.unknown.contains("token not accepted"), r.unknown);
            assertEquals(0, nu.commits.get());
        }
    }

    /**
     * Every attempt refused by coordinators that are not the primary (nothing
     * written anywhere) until the decision timeout: no decision exists, so it
     * is a refusal (the transaction rolls back) saying no coordinator served.
     */
    @Test
    void onlyStandbysIsNothingDecided() throws Exception {
        RoleFake a = serve(new RoleFake(true, 1, false));
        RoleFake b = serve(new RoleFake(true, 1, false));
        try (CoordinatorClient c = new CoordinatorClient(List.of(a.addr(), b.addr()), null)) {
            CoordinatorClient.CommitResult r = c.commit(req(), Duration.ofMillis(300), null);
            assertNull(r.unknown, r.unknown);
            assertNotNull(r.refused);
            assertTrue(r.refusal.contains("no coordinator of " + a.addr() + ", " + b.addr() + " served as the primary"), r.refusal);
            assertTrue(a.commits.get() >= 2, "retried while waiting for a primary: " + a.commits.get());
        }
    }

    /** Many commits refused at once by a standby move the client once: one "moved" line, a bounded number of probes. */
    @Test
    void concurrentRefusalsMoveOnce() throws Exception {
        RoleFake sb = serve(new RoleFake(true, 1, false));
        RoleFake pr = serve(new RoleFake(true, 2, true));
        ExecutorService pool = Executors.newFixedThreadPool(16);
        try (CoordinatorClient c = new CoordinatorClient(List.of(sb.addr(), pr.addr()), null)) {
            List<Future<CoordinatorClient.CommitResult>> fs = new ArrayList<>();
            for (int i = 0; i < 16; i++) {
                fs.add(pool.submit(() -> c.commit(req(), Duration.ofSeconds(3), null)));
            }
            for (Future<CoordinatorClient.CommitResult> f : fs) {
                CoordinatorClient.CommitResult r = f.get();
                assertNotNull(r.response, r.refusal + r.unknown);
                assertEquals(Outcome.COMMITTED, r.response.getOutcome());
            }
            assertEquals(1, moves(), "moves logged: " + logged);
            assertTrue(pr.health.get() <= 2, "the primary's Health was probed " + pr.health.get() + " times for one move");
            assertEquals(16, pr.commits.get());
        } finally {
            pool.shutdownNow();
        }
    }

    /** Two coordinators say serving (a superseded primary not fenced yet, and the promoted one): the client moves to the higher epoch. */
    @Test
    void moveToTheHighestEpoch() throws Exception {
        RoleFake sb = serve(new RoleFake(true, 0, false));
        RoleFake stale = serve(new RoleFake(true, 1, true));
        RoleFake promoted = serve(new RoleFake(true, 2, true));
        try (CoordinatorClient c = new CoordinatorClient(List.of(sb.addr(), stale.addr(), promoted.addr()), null)) {
            CoordinatorClient.CommitResult r = c.commit(req(), Duration.ofSeconds(2), null);
            assertNotNull(r.response);
            assertEquals(promoted.addr(), c.target());
            assertEquals(0, stale.commits.get());
            assertEquals(1, promoted.commits.get());
        }
    }

    /**
     * A coordinator of another cluster in the list (a misconfigured address:
     * another group's coordinator, a staging one) that says serving with a
     * higher epoch is never followed: its Commit would decide with its own
     * RMs (the real prepared branches rolled back later by this cluster's
     * in-doubt scan while MariaDB's committed on the client's session), and
     * its Status could say ABORTED of what this cluster committed. Without
     * an unanswered attempt the Commit goes to this cluster's primary; after
     * one, its Status (COMMITTED) is the outcome, never the other's ABORTED.
     */
    @Test
    void anotherClustersCoordinatorIsNeverFollowed() throws Exception {
        RoleFake sb = serve(new RoleFake(true, 1, false));
        RoleFake foreign = serve(new RoleFake(true, 99, true, "z"));
        foreign.status = Outcome.ABORTED;
        RoleFake pr = serve(new RoleFake(true, 2, true));
        try (CoordinatorClient c = new CoordinatorClient(List.of(sb.addr(), foreign.addr(), pr.addr()), null)) {
            CoordinatorClient.CommitResult r = c.commit(req(), Duration.ofSeconds(2), null);
            assertNotNull(r.response, r.refusal + r.unknown);
            assertEquals(0, foreign.commits.get() + foreign.statuses.get(), "a Commit or Status went to the coordinator of cluster z");
            assertEquals(pr.addr(), c.target());
            assertEquals(1, pr.commits.get());
        }
        RoleFake old = serve(new RoleFake(true, 1, true));
        dropsTheCommitAndStepsDown(old);
        RoleFake nu = serve(new RoleFake(true, 2, true));
        nu.status = Outcome.COMMITTED;
        try (CoordinatorClient c = new CoordinatorClient(List.of(old.addr(), foreign.addr(), nu.addr()), null)) {
            c.healthOfPrimary(Duration.ofSeconds(2)); // verify(): the client learns its cluster from the first coordinator
            CoordinatorClient.CommitResult r = c.commit(req(), Duration.ofSeconds(2), null);
            assertNotNull(r.response, r.refusal + r.unknown);
            assertEquals(Outcome.COMMITTED, r.response.getOutcome(), "the other cluster's Status decided the outcome: " + r.response.getMessage());
            assertEquals(nu.addr(), c.target());
        }
        synchronized (logged) {
            assertTrue(logged.stream().anyMatch(m -> m.contains(foreign.addr()) && m.contains("cluster z")), "the foreign address named: " + logged);
        }
    }

    /**
     * Once the client follows the primary of epoch 2, a coordinator of an
     * older epoch that still says serving (the superseded primary, before it
     * learns it is fenced) is never followed back when the new one cannot be
     * reached: its UNDECIDED and its Commit would decide apart from the
     * promoted primary. The Commit stays unknown instead (nothing aborted).
     */
    @Test
    void neverBackToASupersededEpoch() throws Exception {
        RoleFake old = serve(new RoleFake(true, 1, false));
        RoleFake nu = serve(new RoleFake(true, 2, true));
        try (CoordinatorClient c = new CoordinatorClient(List.of(old.addr(), nu.addr()), null)) {
            assertNotNull(c.commit(req(), Duration.ofSeconds(2), null).response);
            assertEquals(nu.addr(), c.target());
            old.serving.set(true); // not fenced yet: says serving, epoch 1
            String nuAddr = nu.addr();
            nu.server.shutdownNow().awaitTermination(); // the new primary cannot be reached
            int oldCommits = old.commits.get();
            CoordinatorClient.CommitResult r = c.commit(req(), Duration.ofMillis(500), null);
            assertEquals(oldCommits, old.commits.get(), "a Commit went back to the superseded primary (epoch 1)");
            assertEquals(0, old.statuses.get(), "a Status went back to the superseded primary (epoch 1)");
            assertNull(r.refused, r.refusal);
            assertNotNull(r.unknown);
            assertEquals(nuAddr, c.target());
        }
    }

    /**
     * Health's place is read from its "role=" line, after any notes about the
     * RMs (whose text could hold "epoch=" or "cluster="); an older server's
     * message without that line is read whole; no epoch is 0, no cluster null.
     */
    @Test
    void placeIsReadFromTheRoleLine() {
        Function<String, CoordinatorClient.Place> at = m -> CoordinatorClient.place(HealthResponse.newBuilder().setMessage(m).build());
        assertEquals(new CoordinatorClient.Place("c", 3), at.apply("rm pg: dial: epoch=999 cluster=q\nrole=primary cluster=c epoch=3 transport=sync"));
        assertEquals(new CoordinatorClient.Place("c", 2), at.apply("role=standby of 127.0.0.1:7072 (following) synchronized=yes cluster=c epoch=2 at=5"));
        assertEquals(new CoordinatorClient.Place(null, 4), at.apply("epoch=4"));
        assertEquals(new CoordinatorClient.Place(null, 0), at.apply("epoch=99999999999999999999999"));
        assertEquals(new CoordinatorClient.Place(null, 0), at.apply(""));
    }

    /** Before the client knows its cluster, serving coordinators of two clusters: it moves to neither, and says so. */
    @Test
    void twoClustersServingAndNoneKnownMovesNowhere() throws Exception {
        RoleFake first = serve(new RoleFake(true, 1, true));
        String firstAddr = first.addr();
        RoleFake x = serve(new RoleFake(true, 2, true, "x"));
        RoleFake y = serve(new RoleFake(true, 3, true, "y"));
        try (CoordinatorClient c = new CoordinatorClient(List.of(firstAddr, x.addr(), y.addr()), null)) {
            first.server.shutdownNow().awaitTermination(); // the first cannot be reached before any Health named a cluster
            CoordinatorClient.CommitResult r = c.commit(req(), Duration.ofMillis(300), null);
            assertNull(r.response);
            assertEquals(0, x.commits.get() + y.commits.get() + x.statuses.get() + y.statuses.get());
            assertEquals(firstAddr, c.target());
        }
        synchronized (logged) {
            assertTrue(logged.stream().anyMatch(m -> m.contains("several clusters [x, y]")), logged.toString());
        }
    }

    /**
     * The primary's machine goes silent (powered off, or a partition that
     * drops packets: no RST, the TCP connection stays "open") while a Commit
     * waits for its answer, and the standby is promoted. Without keepalive the
     * call would wait for the whole decision timeout (and the next ones too,
     * on the same dead connection, for the kernel's retransmission timeout:
     * about 15 minutes) and end unknown; with it the connection is found dead
     * within CoordinatorClient.KEEPALIVE_TIME + KEEPALIVE_TIMEOUT, the client
     * moves to the promoted standby and settles the Commit there (Status,
     * then the Commit). The bound asserted is the decision timeout: a
     * liveness bound, not a timing.
     */
    @Test
    void aSilentPrimaryIsLeftWithinTheKeepalive() throws Exception {
        RoleFake old = serve(new RoleFake(true, 1, true));
        RoleFake nu = serve(new RoleFake(true, 2, false));
        try (TcpProxy proxy = new TcpProxy("127.0.0.1", old.server.getPort());
                CoordinatorClient c = new CoordinatorClient(List.of("127.0.0.1:" + proxy.port(), nu.addr()), null)) {
            assertNotNull(c.commit(req(), Duration.ofSeconds(5), null).response, "through the proxy before it goes silent");
            proxy.dropToServer = true;
            proxy.dropToClient = true;
            old.serving.set(false);
            nu.serving.set(true);
            long t0 = System.nanoTime();
            CoordinatorClient.CommitResult r = c.commit(req(), Duration.ofSeconds(45), null);
            System.out.println("aSilentPrimaryIsLeftWithinTheKeepalive: settled on the promoted standby after "
                    + (System.nanoTime() - t0) / 1_000_000 + " ms");
            assertNotNull(r.response, "the silent primary held the Commit for the whole decision timeout: " + r.unknown);
            assertEquals(Outcome.COMMITTED, r.response.getOutcome());
            assertEquals(nu.addr(), c.target());
            assertEquals(1, nu.statuses.get(), "the unanswered attempt is asked of the new primary first");
            assertEquals(0, nu.resolves.get() + nu.aborts.get() + old.aborts.get());
        }
    }

    /**
     * A standby promoted with --accept-data-loss may lack the old primary's
     * decision: it answers Status UNDECIDED for a gtrid from before the
     * promotion and refuses its Commit (INTERNAL, "outcome unknown"). After
     * an unanswered attempt on the old primary that is unknown, never a
     * rollback, and nothing aborts or resolves; the session-bound branches
     * are not committed (no early decision came).
     */
    @Test
    void acceptDataLossPrimaryRefusingAnOldGtridIsUnknown() throws Exception {
        RoleFake old = serve(new RoleFake(true, 1, true));
        dropsTheCommitAndStepsDown(old);
        RoleFake nu = serve(new RoleFake(true, 2, true));
        nu.status = Outcome.UNDECIDED;
        nu.commit = r -> Status.INTERNAL.withDescription("coord: decision outcome unknown: gtrid began before this coordinator was promoted with --accept-data-loss");
        AtomicInteger settled = new AtomicInteger();
        try (CoordinatorClient c = new CoordinatorClient(List.of(old.addr(), nu.addr()), null)) {
            CoordinatorClient.CommitResult r = c.commit(req(), Duration.ofSeconds(2), settled::incrementAndGet);
            assertNull(r.refused, "a rollback after an unanswered attempt: " + r.refusal);
            assertNull(r.response);
            assertNotNull(r.unknown);
            assertTrue(r.unknown.contains("connection reset") && r.unknown.contains("accept-data-loss"), r.unknown);
            assertEquals(0, settled.get(), "the session-bound branches were committed without a decision");
            assertEquals(1, nu.statuses.get());
            assertEquals(0, nu.resolves.get() + nu.aborts.get() + old.aborts.get());
        }
    }

    /**
     * A caller interrupted while its probe waits for the answers moves
     * nowhere on the answers it has: the one it has not heard may be the
     * primary of a newer epoch (here the stale epoch-1 primary answered
     * first, the promoted epoch-2 one is slow), and a Commit sent to the
     * stale one could be decided apart from the promoted one.
     */
    @Test
    void anInterruptedProbeMovesNowhere() throws Exception {
        RoleFake sb = serve(new RoleFake(true, 0, false));
        RoleFake stale = serve(new RoleFake(true, 1, true));
        RoleFake promoted = serve(new RoleFake(true, 2, true));
        promoted.healthGate = new java.util.concurrent.CountDownLatch(1);
        try (CoordinatorClient c = new CoordinatorClient(List.of(sb.addr(), stale.addr(), promoted.addr()), null)) {
            AtomicBoolean done = new AtomicBoolean();
            Thread t = new Thread(() -> {
                c.commit(req(), Duration.ofSeconds(5), null);
                done.set(true);
            });
            t.start();
            while (promoted.health.get() == 0 || stale.health.get() == 0) {
                Thread.sleep(5);
            }
            Thread.sleep(50); // the stale one's answer is in; the promoted one's is held
            t.interrupt();
            t.join(10_000);
            promoted.healthGate.countDown();
            assertTrue(done.get(), "the interrupted commit returned");
            assertEquals(0, moves(sb.addr(), stale.addr()), "moved to the stale primary on a partial probe: " + logged);
            assertEquals(0, stale.commits.get(), "a Commit went to the stale primary");
            assertNotEquals(stale.addr(), c.target());
        }
    }

    /**
     * Two coordinators that both say serving in Health but refuse every call
     * as non-primaries (a bug, or a hostile address) do not make the client
     * spin calls and probes at both until the timeout: of equal epochs the
     * one in use is kept (and a lower one is never moved back to), so the
     * calls back off.
     */
    @Test
    void movingBackAndForthBacksOff() throws Exception {
        RoleFake a = serve(new RoleFake(true, 1, true));
        RoleFake b = serve(new RoleFake(true, 1, true));
        a.refuseAll = true;
        b.refuseAll = true;
        try (CoordinatorClient c = new CoordinatorClient(List.of(a.addr(), b.addr()), null)) {
            assertThrows(io.grpc.StatusRuntimeException.class, () -> c.status(TandemXid.newGtrid(), false, Duration.ofMillis(500)));
            int calls = a.statuses.get() + b.statuses.get();
            int probes = a.health.get() + b.health.get();
            assertTrue(calls <= 30 && probes <= 60, calls + " Status calls and " + probes + " Health probes in 0.5 s");
        }
    }

    /**
     * A primary started without --standby-listen (README's failover recipe:
     * "tandem promote --data-dir /b; tandem serve --data-dir /b --rm …")
     * names no cluster and no epoch in Health. It is still followed, after
     * the client learnt its cluster and an epoch floor from the old primary:
     * the Commit caught in the failover is settled there by Status. A named
     * coordinator of the client's cluster is preferred to it.
     */
    @Test
    void aPrimaryNamingNoClusterIsFollowed() throws Exception {
        RoleFake sb = serve(new RoleFake(true, 1, false));
        RoleFake old = serve(new RoleFake(true, 2, true));
        RoleFake plain = serve(new RoleFake(true, 0, false, null));
        plain.status = Outcome.COMMITTED;
        try (CoordinatorClient c = new CoordinatorClient(List.of(sb.addr(), old.addr(), plain.addr()), null)) {
            assertNotNull(c.commit(req(), Duration.ofSeconds(2), null).response);
            assertEquals(old.addr(), c.target(), "moved to the named primary of epoch 2");
            dropsTheCommitAndStepsDown(old);
            plain.serving.set(true);
            CoordinatorClient.CommitResult r = c.commit(req(), Duration.ofSeconds(2), null);
            assertNotNull(r.response, "the primary naming no cluster was not followed: " + r.unknown);
            assertEquals(Outcome.COMMITTED, r.response.getOutcome());
            assertEquals(plain.addr(), c.target());
            assertEquals(1, plain.statuses.get());
        }
        RoleFake named = serve(new RoleFake(true, 1, true));
        RoleFake plain2 = serve(new RoleFake(true, 0, true, null));
        RoleFake sb2 = serve(new RoleFake(true, 1, false));
        try (CoordinatorClient c = new CoordinatorClient(List.of(sb2.addr(), plain2.addr(), named.addr()), null)) {
            assertNotNull(c.commit(req(), Duration.ofSeconds(2), null).response);
            assertEquals(named.addr(), c.target(), "the named coordinator of the cluster is preferred");
        }
    }

    /**
     * When Abort or Status ends without a primary, or a coordinator refuses
     * it, the error names the coordinator that answered last and every
     * configured address (what the operator has to look at).
     */
    @Test
    void abortAndStatusErrorsNameTheAddresses() throws Exception {
        RoleFake a = serve(new RoleFake(true, 1, false));
        RoleFake b = serve(new RoleFake(true, 1, false));
        try (CoordinatorClient c = new CoordinatorClient(List.of(a.addr(), b.addr()), null)) {
            io.grpc.StatusRuntimeException e = assertThrows(io.grpc.StatusRuntimeException.class,
                    () -> c.abort(AbortRequest.newBuilder().setGtrid(TandemXid.newGtrid()).build(), Duration.ofMillis(300)));
            assertTrue(e.getMessage().contains("no coordinator of " + a.addr() + ", " + b.addr() + " served as the primary")
                    && e.getMessage().contains("the last answer, from " + a.addr()), e.getMessage());
            assertEquals(Status.Code.FAILED_PRECONDITION, e.getStatus().getCode(), "the code is the coordinator's");
            assertTrue(CoordinatorClient.notPrimary(e), "the trailers are kept");
        }
        RoleFake p = serve(new RoleFake(true, 1, true));
        p.statusError = Status.PERMISSION_DENIED.withDescription("token not accepted");
        try (CoordinatorClient c = new CoordinatorClient(List.of(p.addr()), null)) {
            io.grpc.StatusRuntimeException e = assertThrows(io.grpc.StatusRuntimeException.class, () -> c.status(TandemXid.newGtrid(), false, Duration.ofSeconds(1)));
            assertTrue(e.getMessage().contains("the coordinator at " + p.addr()) && e.getMessage().contains("token not accepted"), e.getMessage());
        }
    }

    /** Abort (a branch the client could not roll back) and Status follow the primary too; Status never resolves unless asked. */
    @Test
    void abortAndStatusFollowThePrimary() throws Exception {
        RoleFake sb = serve(new RoleFake(true, 1, false));
        RoleFake pr = serve(new RoleFake(true, 2, true));
        pr.status = Outcome.COMMITTED;
        try (CoordinatorClient c = new CoordinatorClient(List.of(sb.addr(), pr.addr()), null)) {
            c.abort(AbortRequest.newBuilder().setGtrid(TandemXid.newGtrid()).build(), Duration.ofSeconds(2));
            assertEquals(1, pr.aborts.get());
            assertEquals(Outcome.COMMITTED, c.status(TandemXid.newGtrid(), false, Duration.ofSeconds(2)).getOutcome());
            assertEquals(0, pr.resolves.get());
            assertEquals(1, moves(sb.addr(), pr.addr()));
        }
    }

    /** verify() at start-up with the standby listed first checks the primary, and the manager then uses it. */
    @Test
    void verifyFindsThePrimary() throws Exception {
        RoleFake sb = serve(new RoleFake(true, 1, false));
        RoleFake pr = serve(new RoleFake(true, 2, true));
        try (TandemTransactionManager tm = TandemTransactionManager.create(TandemConfig.coordinators(sb.addr(), pr.addr()))) {
            tm.verify();
            assertEquals(pr.addr(), tm.coordinator().target());
        }
        RoleFake a = serve(new RoleFake(true, 1, false));
        RoleFake b = serve(new RoleFake(true, 1, false));
        try (TandemTransactionManager tm = TandemTransactionManager.create(TandemConfig.coordinators(a.addr(), b.addr()))) {
            Exception e = assertThrows(jakarta.transaction.SystemException.class, tm::verify);
            assertTrue(e.getMessage().contains("cannot decide transactions") && e.getMessage().contains("no other of " + a.addr() + ", " + b.addr()),
                    e.getMessage());
        }
    }

    /** Rolls back whatever of gtrid is left prepared (the fakes settle nothing). */
    static void cleanUp(String g) throws Exception {
        for (String b : TestEnv.prepared(g)) {
            if (b.startsWith("pg ")) {
                try (java.sql.Connection c = TestEnv.pg(); java.sql.Statement st = c.createStatement()) {
                    st.execute("ROLLBACK PREPARED '" + b.substring(3) + "'");
                }
            } else {
                String[] x = b.substring(6).split(",");
                try (java.sql.Connection c = TestEnv.maria(); java.sql.Statement st = c.createStatement()) {
                    st.execute("XA ROLLBACK '" + x[0] + "','" + x[1] + "'," + x[2]);
                }
            }
        }
    }

    /**
     * Through the transaction manager, with the real databases: a commit
     * caught in a role change settles its session-bound MariaDB branch by the
     * new primary's answer (committed here, or rolled back with a
     * RollbackException); with no primary until the decision timeout it is an
     * OutcomeUnknownException naming the gtrid, and nothing is rolled back
     * (both branches stay prepared for the coordinator).
     */
    @Test
    void theManagerSettlesByTheNewPrimarysAnswer() throws Exception {
        TestEnv.createTables();
        for (String tc : new String[] {"committed", "aborted", "no_primary"}) {
            RoleFake old = serve(new RoleFake(true, 1, true));
            dropsTheCommitAndStepsDown(old);
            RoleFake nu = serve(new RoleFake(true, 2, !tc.equals("no_primary")));
            nu.status = tc.equals("aborted") ? Outcome.ABORTED : Outcome.COMMITTED;
            nu.commit = r -> Outcome.COMMITTED;
            TandemTransactionManager tm = TandemTransactionManager.create(TandemConfig.coordinators(old.addr(), nu.addr())
                    .withDecideAt(TandemConfig.DecideAt.COORDINATOR).withDecisionTimeout(Duration.ofMillis(tc.equals("no_primary") ? 500 : 5000)));
            TandemDataSource pg = TandemDataSource.postgres(tm, "pg", TestEnv.pgSource());
            TandemDataSource maria = TandemDataSource.mariadb(tm, "maria", TestEnv.mariaSource());
            String id = TandemJtaTest.id();
            tm.begin();
            String g = ((TandemTransaction) tm.getTransaction()).gtrid();
            try {
                try (java.sql.Connection a = pg.getConnection(); java.sql.Connection b = maria.getConnection()) {
                    TandemJtaTest.insert(a, id);
                    TandemJtaTest.insert(b, id);
                }
                switch (tc) {
                    case "committed" -> {
                        tm.commit();
                        assertTrue(TestEnv.mariaHas(id), "committed: MariaDB's branch committed on its session");
                        assertEquals(1, nu.commits.get(), "the Commit sent again (a session-bound branch), after Status");
                    }
                    case "aborted" -> {
                        Exception e = assertThrows(jakarta.transaction.RollbackException.class, tm::commit);
                        assertTrue(e.getMessage().contains("ABORT"), e.getMessage());
                        assertFalse(TestEnv.mariaHas(id), "aborted: MariaDB's branch rolled back");
                        assertFalse(TestEnv.prepared(g).stream().anyMatch(b -> b.startsWith("maria")), TestEnv.prepared(g).toString());
                        assertEquals(0, nu.commits.get());
                    }
                    default -> {
                        OutcomeUnknownException e = assertThrows(OutcomeUnknownException.class, tm::commit);
                        assertEquals(g, e.gtrid());
                        assertTrue(e.getMessage().contains(g), e.getMessage());
                        assertEquals(2, TestEnv.prepared(g).size(), "nothing rolled back: " + TestEnv.prepared(g));
                    }
                }
                assertEquals(tc.equals("no_primary") ? 0 : 1, nu.statuses.get(), tc);
                assertEquals(0, nu.resolves.get() + nu.aborts.get() + old.aborts.get(), tc + ": nothing may abort or resolve");
            } finally {
                pg.close();
                maria.close();
                tm.close();
                cleanUp(g);
            }
        }
    }

    /**
     * An address the gRPC channel would take and never reach is refused when
     * the configuration is built, naming it and what to write instead (as the
     * Go SDK's addrhint): no port (gRPC would dial 443), whitespace, several
     * addresses in one string; and a list longer than MAX_COORDINATORS (every
     * probe asks each address's Health at once).
     */
    @Test
    void coordinatorAddressesAreChecked() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> TandemConfig.coordinators("127.0.0.1:1", "10.0.0.2"));
        assertTrue(e.getMessage().contains("\"10.0.0.2\" has no port") && e.getMessage().contains("10.0.0.2:7070"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> TandemConfig.coordinator(" 127.0.0.1:7070"));
        assertTrue(e.getMessage().contains("whitespace"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> TandemConfig.coordinator("10.0.0.1:7070,10.0.0.2:7070"));
        assertTrue(e.getMessage().contains("TandemConfig.coordinators(\"10.0.0.1:7070\", \"10.0.0.2:7070\")"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> TandemConfig.coordinator("127.0.0.1:99999"));
        assertTrue(e.getMessage().contains("port"), e.getMessage());
        String[] many = new String[TandemConfig.MAX_COORDINATORS + 1];
        for (int i = 0; i < many.length; i++) {
            many[i] = "127.0.0.1:" + (7000 + i);
        }
        e = assertThrows(IllegalArgumentException.class, () -> TandemConfig.coordinators(many));
        assertTrue(e.getMessage().contains(many.length + " coordinator addresses"), e.getMessage());
        for (String ok : new String[] {"127.0.0.1:7070", "[::1]:7070", "tandem.internal:7070", "dns:///tandem.internal:7070", "unix:///tmp/t.sock"}) {
            assertEquals(ok, TandemConfig.coordinator(ok).coordinator());
        }
        assertEquals(TandemConfig.MAX_COORDINATORS, TandemConfig.coordinators(java.util.Arrays.copyOf(many, many.length - 1)).coordinators().size());
    }

    @Test
    void coordinatorsConfig() {
        TandemConfig c = TandemConfig.coordinators("127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:1", "127.0.0.1:3");
        assertEquals(List.of("127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"), c.coordinators(), "each address once, in order");
        assertEquals("127.0.0.1:1", c.coordinator());
        assertTrue(c.toString().contains("coordinators=[127.0.0.1:1, 127.0.0.1:2, 127.0.0.1:3]"), c.toString());
        assertTrue(TandemConfig.coordinator("127.0.0.1:1").toString().contains("coordinator=127.0.0.1:1,"));
        assertEquals(c, TandemConfig.coordinators("127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"));
        assertEquals(c.hashCode(), TandemConfig.coordinators("127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3").hashCode());
        assertNotEquals(c, TandemConfig.coordinators("127.0.0.1:2", "127.0.0.1:1", "127.0.0.1:3"), "the order is which is tried first");
        assertEquals(TandemConfig.coordinator("127.0.0.1:1"), TandemConfig.coordinators("127.0.0.1:1"));
        assertFalse(c.equals(c.withAuthToken("t")));
        assertEquals(c.coordinators(), c.withAuthToken("t").coordinators());
        assertThrows(UnsupportedOperationException.class, () -> c.coordinators().add("x"));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> TandemConfig.coordinators(new String[0]));
        assertTrue(e.getMessage().contains("no coordinator address"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> TandemConfig.coordinators("127.0.0.1:1", " "));
        assertTrue(e.getMessage().contains("coordinator address 2 of 2 is empty"), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> TandemConfig.coordinators("127.0.0.1:1", null));
        assertThrows(IllegalArgumentException.class, () -> TandemConfig.coordinators((String[]) null));
        e = assertThrows(IllegalArgumentException.class, () -> TandemConfig.coordinator(""));
        assertTrue(e.getMessage().contains("the coordinator address is empty"), e.getMessage());
    }
}
