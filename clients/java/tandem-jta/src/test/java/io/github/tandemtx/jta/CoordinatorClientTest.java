package io.github.tandemtx.jta;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Contexts;
import io.grpc.Metadata;
import io.grpc.Server;
import io.grpc.ServerBuilder;
import io.grpc.ServerCall;
import io.grpc.ServerCallHandler;
import io.grpc.ServerInterceptor;
import io.grpc.ServerInterceptors;
import io.grpc.Status;
import io.grpc.stub.StreamObserver;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import tandem.v1.CoordinatorGrpc;
import tandem.v1.Tandem.CommitRequest;
import tandem.v1.Tandem.CommitResponse;
import tandem.v1.Tandem.Outcome;

/**
 * The Commit call's rules on a fake coordinator that answers a scripted
 * sequence: which failures leave the outcome unknown (never roll back) and
 * which are refusals (nothing decided: roll back), as in the Go SDK's
 * client/ambiguous_test.go.
 */
class CoordinatorClientTest {
    /** A fake coordinator answering call i with answers[i] (the last one repeats); null is COMMITTED. */
    static final class Fake extends CoordinatorGrpc.CoordinatorImplBase {
        final List<Status> answers;
        final AtomicInteger calls = new AtomicInteger();
        final List<String> auth = new ArrayList<>();
        final List<String> owners = new ArrayList<>();
        boolean headerThenFail;

        Fake(Status... answers) {
            this.answers = List.of(answers);
        }

        @Override
        public void commit(CommitRequest req, StreamObserver<CommitResponse> out) {
            int i = calls.getAndIncrement();
            Status s = answers.get(Math.min(i, answers.size() - 1));
            if (s == Status.OK) {
                out.onNext(CommitResponse.newBuilder().setOutcome(Outcome.COMMITTED).build());
                out.onCompleted();
                return;
            }
            out.onError(s.asRuntimeException());
        }
    }

    static Server serve(Fake f) throws Exception {
        ServerInterceptor capture = new ServerInterceptor() {
            @Override
            public <Q, R> ServerCall.Listener<Q> interceptCall(ServerCall<Q, R> call, Metadata h, ServerCallHandler<Q, R> next) {
                synchronized (f.auth) {
                    f.auth.add(h.get(CoordinatorClient.AUTHORIZATION));
                    f.owners.add(h.get(CoordinatorClient.OWNER_HEADER));
                }
                if (f.headerThenFail) {
                    Metadata hd = new Metadata();
                    hd.put(CoordinatorClient.DECISION, "COMMITTED");
                    call.sendHeaders(hd);
                }
                return Contexts.interceptCall(io.grpc.Context.current(), call, h, next);
            }
        };
        return ServerBuilder.forPort(0).addService(ServerInterceptors.intercept(f, capture)).build().start();
    }

    static CoordinatorClient.CommitResult commit(Server s, String token, Runnable onCommitted) {
        try (CoordinatorClient c = new CoordinatorClient("127.0.0.1:" + s.getPort(), token)) {
            return c.commit(CommitRequest.newBuilder().setGtrid(TandemXid.newGtrid()).build(), Duration.ofSeconds(3), onCommitted);
        }
    }

    @Test
    void unavailableThenRefusedIsUnknownNotARefusal() throws Exception {
        for (Status.Code refusal : new Status.Code[] {Status.Code.FAILED_PRECONDITION, Status.Code.UNAUTHENTICATED,
                Status.Code.PERMISSION_DENIED, Status.Code.NOT_FOUND, Status.Code.INVALID_ARGUMENT, Status.Code.UNIMPLEMENTED}) {
            Fake f = new Fake(Status.UNAVAILABLE.withDescription("coordinator going down"), Status.fromCode(refusal));
            Server s = serve(f);
            try {
                CoordinatorClient.CommitResult r = commit(s, null, null);
                assertNull(r.refused, refusal + ": a refusal after an unanswered attempt must not allow a rollback");
                assertNotNull(r.unknown, refusal.toString());
                assertTrue(r.unknown.contains("coordinator going down"), r.unknown);
                assertEquals(2, r.calls);
            } finally {
                s.shutdownNow();
            }
        }
    }

    @Test
    void refusedFirstIsARefusal() throws Exception {
        Fake f = new Fake(Status.INVALID_ARGUMENT.withDescription("unknown resource manager \"nope\""));
        Server s = serve(f);
        try {
            CoordinatorClient.CommitResult r = commit(s, null, null);
            assertNotNull(r.refused);
            assertNull(r.unknown);
            assertEquals(1, f.calls.get());
        } finally {
            s.shutdownNow();
        }
    }

    @Test
    void logFullThenRefusedIsStillARefusal() throws Exception {
        Fake f = new Fake(Status.RESOURCE_EXHAUSTED.withDescription("decision log full"), Status.FAILED_PRECONDITION);
        Server s = serve(f);
        try {
            CoordinatorClient.CommitResult r = commit(s, null, null);
            assertNotNull(r.refused, "RESOURCE_EXHAUSTED wrote nothing, so the refusal stands");
            assertNull(r.unknown);
        } finally {
            s.shutdownNow();
        }
    }

    @Test
    void logFullUntilTheTimeoutIsNothingDecided() throws Exception {
        Fake f = new Fake(Status.RESOURCE_EXHAUSTED.withDescription("decision log full"));
        Server s = serve(f);
        try {
            CoordinatorClient.CommitResult r = commit(s, null, null);
            assertNotNull(r.logFull);
            assertNull(r.unknown);
            assertTrue(f.calls.get() > 1, "retried: " + f.calls.get());
        } finally {
            s.shutdownNow();
        }
    }

    @Test
    void unavailableThenCommittedIsCommittedAndTheTokenIsSent() throws Exception {
        Fake f = new Fake(Status.UNAVAILABLE, Status.OK);
        Server s = serve(f);
        try {
            CoordinatorClient.CommitResult r = commit(s, "tok", null);
            assertNotNull(r.response);
            assertEquals(Outcome.COMMITTED, r.response.getOutcome());
            assertEquals(2, r.calls);
            assertEquals(List.of("Bearer tok", "Bearer tok"), f.auth);
        } finally {
            s.shutdownNow();
        }
    }

    /** The early decision header makes the outcome known: a failure of the rest of the call is COMMITTED with phase 2 pending. */
    @Test
    void earlyDecisionThenFailureIsCommitted() throws Exception {
        Fake f = new Fake(Status.UNAVAILABLE.withDescription("cut after the header"));
        f.headerThenFail = true;
        Server s = serve(f);
        try {
            AtomicInteger ran = new AtomicInteger();
            CoordinatorClient.CommitResult r = commit(s, null, ran::incrementAndGet);
            assertNotNull(r.response);
            assertEquals(Outcome.COMMITTED, r.response.getOutcome());
            assertTrue(r.response.getPhase2Pending());
            assertEquals(1, ran.get(), "onCommitted ran once");
            assertEquals(1, f.calls.get(), "no retry once the decision is known");
        } finally {
            s.shutdownNow();
        }
    }

    /**
     * A Commit names the owner its branches are named after (tandem-owner),
     * so that a coordinator of another cluster at the same address refuses
     * it before deciding; without an owner, no header.
     */
    @Test
    void commitNamesTheOwner() throws Exception {
        Fake f = new Fake(Status.OK);
        Server s = serve(f);
        try (CoordinatorClient c = new CoordinatorClient("127.0.0.1:" + s.getPort(), null)) {
            String owner = "c1057e00000000000000000000000000";
            c.commit(CommitRequest.newBuilder().setGtrid(TandemXid.newGtrid()).build(), Duration.ofSeconds(3), null, owner);
            c.commit(CommitRequest.newBuilder().setGtrid(TandemXid.newGtrid()).build(), Duration.ofSeconds(3), null, null);
            synchronized (f.auth) {
                assertEquals(java.util.Arrays.asList(owner, null), f.owners);
            }
        } finally {
            s.shutdownNow();
        }
    }
}
