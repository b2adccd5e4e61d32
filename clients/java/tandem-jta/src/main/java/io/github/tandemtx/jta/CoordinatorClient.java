package io.github.tandemtx.jta;

import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.ForwardingClientCall;
import io.grpc.ForwardingClientCallListener;
import io.grpc.Grpc;
import io.grpc.TlsChannelCredentials;
import java.io.IOException;
import java.nio.file.Path;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import tandem.v1.CoordinatorGrpc;
import tandem.v1.Tandem.AbortRequest;
import tandem.v1.Tandem.CommitRequest;
import tandem.v1.Tandem.CommitResponse;
import tandem.v1.Tandem.HealthRequest;
import tandem.v1.Tandem.HealthResponse;
import tandem.v1.Tandem.Outcome;

/**
 * The gRPC calls to the coordinator, with the Go SDK's rules on which failure
 * leaves the outcome unknown (client/tx.go, commitRPC).
 */
final class CoordinatorClient implements AutoCloseable {
    static final Metadata.Key<String> AUTHORIZATION = Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);
    static final Metadata.Key<String> EARLY_DECISION = Metadata.Key.of("tandem-early-decision", Metadata.ASCII_STRING_MARSHALLER);
    static final Metadata.Key<String> DECISION = Metadata.Key.of("tandem-decision", Metadata.ASCII_STRING_MARSHALLER);

    final String target;
    private final ManagedChannel channel;
    private final CoordinatorGrpc.CoordinatorBlockingStub stub;

    CoordinatorClient(String target, String authToken) {
        this(target, authToken, null, null, null);
    }

    CoordinatorClient(String target, String authToken, Path tlsCa, Path tlsCert, Path tlsKey) {
        this.target = target;
        ManagedChannelBuilder<?> b;
        if (tlsCa == null) {
            b = ManagedChannelBuilder.forTarget(target).usePlaintext();
        } else {
            TlsChannelCredentials.Builder tls = TlsChannelCredentials.newBuilder();
            try {
                tls.trustManager(tlsCa.toFile());
                if (tlsCert != null) {
                    tls.keyManager(tlsCert.toFile(), tlsKey.toFile());
                }
            } catch (IOException e) {
                throw new IllegalArgumentException("tandem: reading the TLS files for the coordinator at " + target + " (CA " + tlsCa
                        + (tlsCert != null ? ", certificate " + tlsCert + ", key " + tlsKey : "") + "): " + e.getMessage(), e);
            }
            b = Grpc.newChannelBuilder(target, tls.build());
        }
        if (authToken != null && !authToken.isEmpty()) {
            b.intercept(headers(AUTHORIZATION, "Bearer " + authToken));
        }
        channel = b.build();
        stub = CoordinatorGrpc.newBlockingStub(channel);
    }

    /** What a Commit call came to. Exactly one of the fields says it. */
    static final class CommitResult {
        CommitResponse response; // an answer
        StatusRuntimeException refused; // refused as a whole before any ambiguous attempt: nothing decided
        StatusRuntimeException logFull; // RESOURCE_EXHAUSTED until the time ran out: nothing decided
        String unknown; // no decision learnt; it may exist
        int calls;
    }

    /**
     * Sends Commit, retrying while the coordinator is unreachable or its log
     * is full, until timeout. A repeated Commit answers the first one's
     * outcome. With onCommitted, asks for the early decision and runs it once
     * when the response headers say COMMITTED (sent only once the decision is
     * durable): from then on the outcome is known.
     */
    CommitResult commit(CommitRequest req, Duration timeout, Runnable onCommitted) {
        CommitResult r = new CommitResult();
        AtomicBoolean committed = new AtomicBoolean();
        CoordinatorGrpc.CoordinatorBlockingStub s = stub;
        if (onCommitted != null) {
            s = s.withInterceptors(earlyDecision(() -> {
                if (committed.compareAndSet(false, true)) {
                    onCommitted.run();
                }
            }));
        }
        long deadline = System.nanoTime() + timeout.toNanos();
        long backoffMs = 10;
        StatusRuntimeException ambiguous = null;
        StatusRuntimeException last = null;
        for (r.calls = 1; ; r.calls++) {
            long left = deadline - System.nanoTime();
            if (left <= 0 && last != null) {
                // The time ran out between attempts: no call is in flight.
                r.calls--;
                if (ambiguous == null) {
                    r.logFull = last; // refused (log full) every time: nothing was written
                } else {
                    r.unknown = unknown(ambiguous, last, r.calls, timeout);
                }
                return r;
            }
            try {
                r.response = s.withDeadlineAfter(Math.max(left, 1), TimeUnit.NANOSECONDS).commit(req);
                return r;
            } catch (StatusRuntimeException e) {
                if (committed.get()) {
                    r.response = CommitResponse.newBuilder().setOutcome(Outcome.COMMITTED).setPhase2Pending(true)
                            .setMessage("the coordinator decided COMMIT (durable); its reply after phase 2 was lost: " + e.getMessage()).build();
                    return r;
                }
                last = e;
                Status.Code code = e.getStatus().getCode();
                boolean rejection = isRejection(code);
                if (ambiguous == null && !rejection && code != Status.Code.RESOURCE_EXHAUSTED) {
                    ambiguous = e;
                }
                boolean expired = System.nanoTime() - deadline >= 0;
                if (!retryable(code) || expired) {
                    if (ambiguous == null && rejection) {
                        r.refused = e;
                    } else if (ambiguous == null) {
                        r.logFull = e;
                    } else {
                        r.unknown = unknown(ambiguous, e, r.calls, timeout);
                    }
                    return r;
                }
            }
            try {
                // Sleep the backoff, or past the deadline if it comes first
                // (as the Go SDK's select on ctx.Done): then no new attempt
                // starts with a sliver of time that would end unanswered.
                long leftMs = (deadline - System.nanoTime()) / 1_000_000 + 1;
                Thread.sleep(Math.max(1, Math.min(backoffMs, leftMs)));
            } catch (InterruptedException ie) {
                Thread.currentThread().interrupt();
                r.unknown = "interrupted while retrying the Commit call to " + target + ": " + (ambiguous != null ? describe(ambiguous) : "");
                return r;
            }
            backoffMs = Math.min(2 * backoffMs, 1000);
        }
    }

    private String unknown(StatusRuntimeException ambiguous, StatusRuntimeException last, int calls, Duration timeout) {
        return "no decision from the coordinator at " + target + " after " + calls + " attempts within the decision timeout ("
                + timeout.toMillis() + "ms): " + describe(ambiguous) + (ambiguous != last ? " (last attempt: " + describe(last) + ")" : "");
    }

    /** Abort decides ABORT for gtrid and rolls back the listed prepared branches from the coordinator. */
    void abort(AbortRequest req, Duration timeout) {
        stub.withDeadlineAfter(timeout.toMillis(), TimeUnit.MILLISECONDS).abort(req);
    }

    HealthResponse health(Duration timeout) {
        return stub.withDeadlineAfter(timeout.toMillis(), TimeUnit.MILLISECONDS).health(HealthRequest.getDefaultInstance());
    }

    static String describe(StatusRuntimeException e) {
        Status st = e.getStatus();
        String s = st.getCode() + (st.getDescription() != null ? ": " + st.getDescription() : "");
        if (st.getCause() != null) {
            s += " (" + st.getCause() + ")";
        }
        return s;
    }

    static boolean retryable(Status.Code c) {
        return c == Status.Code.UNAVAILABLE || c == Status.Code.RESOURCE_EXHAUSTED;
    }

    /** A refusal of the request as a whole: the coordinator wrote nothing for it. */
    static boolean isRejection(Status.Code c) {
        return switch (c) {
            case INVALID_ARGUMENT, FAILED_PRECONDITION, NOT_FOUND, PERMISSION_DENIED, UNAUTHENTICATED, UNIMPLEMENTED -> true;
            default -> false;
        };
    }

    private static ClientInterceptor headers(Metadata.Key<String> key, String value) {
        return new ClientInterceptor() {
            @Override
            public <Q, R> ClientCall<Q, R> interceptCall(MethodDescriptor<Q, R> m, CallOptions o, Channel next) {
                return new ForwardingClientCall.SimpleForwardingClientCall<>(next.newCall(m, o)) {
                    @Override
                    public void start(Listener<R> l, Metadata h) {
                        h.put(key, value);
                        super.start(l, h);
                    }
                };
            }
        };
    }

    private static ClientInterceptor earlyDecision(Runnable onCommitted) {
        return new ClientInterceptor() {
            @Override
            public <Q, R> ClientCall<Q, R> interceptCall(MethodDescriptor<Q, R> m, CallOptions o, Channel next) {
                return new ForwardingClientCall.SimpleForwardingClientCall<>(next.newCall(m, o)) {
                    @Override
                    public void start(Listener<R> l, Metadata h) {
                        h.put(EARLY_DECISION, "1");
                        super.start(new ForwardingClientCallListener.SimpleForwardingClientCallListener<>(l) {
                            @Override
                            public void onHeaders(Metadata hd) {
                                if (Outcome.COMMITTED.name().equals(hd.get(DECISION))) {
                                    onCommitted.run();
                                }
                                super.onHeaders(hd);
                            }
                        }, h);
                    }
                };
            }
        };
    }

    @Override
    public void close() {
        channel.shutdownNow();
        try {
            channel.awaitTermination(5, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
