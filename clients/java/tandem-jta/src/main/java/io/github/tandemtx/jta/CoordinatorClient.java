package io.github.tandemtx.jta;

import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.ForwardingClientCall;
import io.grpc.ForwardingClientCallListener;
import io.grpc.Grpc;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.TlsChannelCredentials;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.propagation.W3CTraceContextPropagator;
import io.opentelemetry.context.Context;
import io.opentelemetry.context.propagation.TextMapSetter;
import java.io.IOException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.atomic.LongAdder;
import java.util.function.Function;
import java.util.logging.Logger;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import tandem.v1.CoordinatorGrpc;
import tandem.v1.Tandem.AbortRequest;
import tandem.v1.Tandem.CommitRequest;
import tandem.v1.Tandem.CommitResponse;
import tandem.v1.Tandem.HealthRequest;
import tandem.v1.Tandem.HealthResponse;
import tandem.v1.Tandem.Outcome;
import tandem.v1.Tandem.StatusRequest;
import tandem.v1.Tandem.StatusResponse;

/**
 * The gRPC calls to the coordinators, with the Go SDK's rules on which
 * failure leaves the outcome unknown (client/tx.go, commitRPC) and on
 * following the primary (client/follow.go).
 *
 * <p>Following the primary: the client may know several coordinators of one
 * cluster (a primary and its standbys, {@link TandemConfig#coordinators}). It
 * sends every call to the one it last found serving, and looks for another
 * only when that one refuses a call because it is not the primary (the
 * {@code tandem-not-primary} trailer, or FAILED_PRECONDITION from an older
 * server) or cannot be reached (UNAVAILABLE): it then asks every address's
 * Health, in parallel within {@link #PROBE_TIMEOUT}, and moves to the one that
 * says serving (the highest {@code epoch=N} of Health's message if several
 * do), logging "coordinator moved from A to B". One probe runs at a time (the
 * other callers wait for its answer), and a probe that found nobody is not
 * repeated within {@link #PROBE_QUIET_NANOS}: the callers back off and try
 * again.
 *
 * <p>It follows one cluster, and forward only. The cluster is the one the
 * first Health answer of the coordinator in use names ({@code cluster=ID}):
 * a coordinator of another cluster in the list (a misconfigured address) is
 * never moved to, whatever its epoch, since its Commit would decide apart from
 * this cluster's log and its Status knows nothing of this cluster's decisions
 * (it is logged once, naming it). Once the client moved to the primary of an
 * epoch, a coordinator of an older epoch that still says serving (a
 * superseded primary before it learns it is fenced) is not moved to either.
 * Until a cluster is known, a probe whose serving answers name two clusters
 * moves nowhere. A primary started without --standby-listen names neither
 * cluster nor epoch: it is moved to only when no coordinator naming the
 * cluster serves (so a standalone coordinator of another group in the list
 * is still a risk there: the client cannot tell it from this cluster's).
 */
final class CoordinatorClient implements AutoCloseable {
    static final Metadata.Key<String> AUTHORIZATION = Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);
    static final Metadata.Key<String> EARLY_DECISION = Metadata.Key.of("tandem-early-decision", Metadata.ASCII_STRING_MARSHALLER);
    static final Metadata.Key<String> DECISION = Metadata.Key.of("tandem-decision", Metadata.ASCII_STRING_MARSHALLER);
    /** The trailer of a call refused, before anything was written, by a coordinator that is not the primary now (api/metadata.go). */
    /**
     * The owner (cluster id) the branches of a Commit or Abort are named
     * after: a coordinator of another cluster refuses the call with
     * FAILED_PRECONDITION before writing anything (api/metadata.go,
     * MetadataOwner).
     */
    static final Metadata.Key<String> OWNER_HEADER = Metadata.Key.of("tandem-owner", Metadata.ASCII_STRING_MARSHALLER);
    static final Metadata.Key<String> NOT_PRIMARY = Metadata.Key.of("tandem-not-primary", Metadata.ASCII_STRING_MARSHALLER);
    /** Health's header: "1" when the coordinator accepts client_settles on any resource manager (api/metadata.go). */
    static final Metadata.Key<String> CLIENT_SETTLES_ANY = Metadata.Key.of("tandem-client-settles-any", Metadata.ASCII_STRING_MARSHALLER);

    /** Bounds one probe of the coordinators' Health. */
    static final Duration PROBE_TIMEOUT = Duration.ofSeconds(1);
    /**
     * The channels ping a coordinator after this long without a byte from it,
     * calls or none, and close the connection when no answer comes within
     * {@link #KEEPALIVE_TIMEOUT}: a primary whose machine went silent (powered
     * off, a partition that drops packets: no RST) fails the call in flight
     * with UNAVAILABLE, so the client probes and moves, instead of waiting on
     * a dead connection for the whole decision timeout and the kernel's
     * retransmission timeout (about 15 minutes). Not below the server's
     * ping allowance (internal/server/limits.go, PingMinTime 10 s: more often
     * draws GOAWAY too_many_pings).
     */
    static final Duration KEEPALIVE_TIME = Duration.ofSeconds(15);
    static final Duration KEEPALIVE_TIMEOUT = Duration.ofSeconds(5);
    /** How long a probe that found no other serving coordinator is trusted before the next. */
    static final long PROBE_QUIET_NANOS = TimeUnit.MILLISECONDS.toNanos(50);

    private static final Logger LOG = Logger.getLogger("io.github.tandemtx.jta");
    private static final Pattern EPOCH = Pattern.compile("\\bepoch=(\\d+)");
    private static final Pattern CLUSTER = Pattern.compile("\\bcluster=(\\S+)");

    /** One configured coordinator address and its channel. */
    static final class Endpoint {
        final String target;
        final ManagedChannel channel;
        final CoordinatorGrpc.CoordinatorBlockingStub stub;
        final CoordinatorGrpc.CoordinatorFutureStub future;
        /** The stubs Health is asked through: they note what its headers say the coordinator accepts. */
        final CoordinatorGrpc.CoordinatorBlockingStub healthStub;
        final CoordinatorGrpc.CoordinatorFutureStub healthFuture;
        /**
         * Its last Health said it accepts client_settles on any resource
         * manager ({@link #CLIENT_SETTLES_ANY}); false until a Health answered.
         */
        volatile boolean settlesAny;

        Endpoint(String target, ManagedChannel channel) {
            this.target = target;
            this.channel = channel;
            this.stub = CoordinatorGrpc.newBlockingStub(channel);
            this.future = CoordinatorGrpc.newFutureStub(channel);
            ClientInterceptor watch = new ClientInterceptor() {
                @Override
                public <Q, R> ClientCall<Q, R> interceptCall(MethodDescriptor<Q, R> method, CallOptions options, Channel next) {
                    return new ForwardingClientCall.SimpleForwardingClientCall<>(next.newCall(method, options)) {
                        @Override
                        public void start(Listener<R> listener, Metadata headers) {
                            super.start(new ForwardingClientCallListener.SimpleForwardingClientCallListener<>(listener) {
                                @Override
                                public void onHeaders(Metadata md) {
                                    settlesAny = "1".equals(md.get(CLIENT_SETTLES_ANY));
                                    super.onHeaders(md);
                                }
                            }, headers);
                        }
                    };
                }
            };
            this.healthStub = stub.withInterceptors(watch);
            this.healthFuture = future.withInterceptors(watch);
        }
    }

    /**
     * Whether the coordinator in use accepts client_settles on a branch that
     * is not session-bound (PostgreSQL), as its last Health said: the
     * transaction then commits every branch itself after the early decision.
     */
    boolean settlesAny() {
        return cur.get().settlesAny;
    }

    /** Forgets that the coordinator in use accepts it: one refused a Commit that asked it (an older one at the same address). */
    void settlesAnyRefused() {
        cur.get().settlesAny = false;
    }

    private final List<Endpoint> eps = new ArrayList<>();
    private final AtomicReference<Endpoint> cur = new AtomicReference<>();
    private final Object mu = new Object();
    /** Completed when the probe in flight ends; null: none. Guarded by mu. */
    private CompletableFuture<Void> probing;
    /** When (System.nanoTime) a probe last found nobody better. Guarded by mu. */
    private long lastProbe;
    private boolean probedFruitlessly;
    /** The cluster followed (Health's cluster=); null until a Health answer of the one in use named it. Guarded by mu. */
    private String cluster;
    /** The highest epoch of a coordinator moved to: an older one is never moved to. Guarded by mu. */
    private long epochFloor;
    /** Addresses of another cluster already logged (at most one per address). */
    private final java.util.Set<String> warnedForeign = java.util.concurrent.ConcurrentHashMap.newKeySet();
    /** Whether serving coordinators of several clusters were logged. */
    private final AtomicBoolean warnedClusters = new AtomicBoolean();

    CoordinatorClient(String target, String authToken) {
        this(List.of(target), authToken, null, null, null);
    }

    CoordinatorClient(List<String> targets, String authToken) {
        this(targets, authToken, null, null, null);
    }

    CoordinatorClient(List<String> targets, String authToken, Path tlsCa, Path tlsCert, Path tlsKey) {
        this(targets, authToken, tlsCa, tlsCert, tlsKey, new LongAdder());
    }

    /** As above, counting every call started on any coordinator's channel in calls. */
    CoordinatorClient(List<String> targets, String authToken, Path tlsCa, Path tlsCert, Path tlsKey, LongAdder calls) {
        if (targets.isEmpty()) {
            throw new IllegalArgumentException("tandem: no coordinator address");
        }
        try {
            for (String t : targets) {
                eps.add(new Endpoint(t, channel(t, authToken, tlsCa, tlsCert, tlsKey, calls)));
            }
        } catch (RuntimeException e) {
            close();
            throw e;
        }
        cur.set(eps.get(0));
    }

    private static ManagedChannel channel(String target, String authToken, Path tlsCa, Path tlsCert, Path tlsKey, LongAdder calls) {
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
        b.intercept(TRACE_CONTEXT);
        b.intercept(new ClientInterceptor() { // ClientMetrics.coordinatorCalls: every RPC, retries and probes included
            @Override
            public <Q, R> ClientCall<Q, R> interceptCall(MethodDescriptor<Q, R> m, CallOptions o, Channel next) {
                calls.increment();
                return next.newCall(m, o);
            }
        });
        b.keepAliveTime(KEEPALIVE_TIME.toNanos(), TimeUnit.NANOSECONDS).keepAliveTimeout(KEEPALIVE_TIMEOUT.toNanos(), TimeUnit.NANOSECONDS)
                .keepAliveWithoutCalls(true);
        return b.build();
    }

    /** The address of the coordinator calls go to now: the first configured until one was found serving elsewhere. */
    String target() {
        return cur.get().target;
    }

    /** Every configured address, comma-separated. */
    String targets() {
        StringBuilder sb = new StringBuilder();
        for (Endpoint ep : eps) {
            sb.append(sb.length() > 0 ? ", " : "").append(ep.target);
        }
        return sb.toString();
    }

    /** Whether e is a refusal by a coordinator that is not the primary now: the call wrote nothing. */
    static boolean notPrimary(StatusRuntimeException e) {
        Metadata t = e.getTrailers();
        return t != null && t.get(NOT_PRIMARY) != null;
    }

    /**
     * Whether e, from the coordinator in use, is a reason to look for
     * another: it refused as a non-primary, could not be reached, or refused
     * with FAILED_PRECONDITION (a standby, demoted or fenced coordinator of a
     * version without the trailer) while others are configured.
     */
    boolean mayHaveMoved(StatusRuntimeException e) {
        if (notPrimary(e)) {
            return true;
        }
        Status.Code c = e.getStatus().getCode();
        return c == Status.Code.UNAVAILABLE || (c == Status.Code.FAILED_PRECONDITION && eps.size() > 1);
    }

    /**
     * Looks for the coordinator that serves after from refused a call or
     * could not be reached (why), waiting at most until deadline (nanoTime).
     * Returns the endpoint to use next: from itself when nobody else serves,
     * when a probe found nobody less than {@link #PROBE_QUIET_NANOS} ago, or
     * when another caller's probe did not end in time. Another caller's move
     * since from was chosen is taken as it is, without a probe.
     */
    Endpoint moveFrom(Endpoint from, String why, long deadline) {
        CompletableFuture<Void> wait;
        CompletableFuture<Void> mine = null;
        synchronized (mu) {
            Endpoint c = cur.get();
            if (c != from) {
                return c;
            }
            wait = probing;
            if (wait == null) {
                if (eps.size() == 1 || (probedFruitlessly && System.nanoTime() - lastProbe < PROBE_QUIET_NANOS)) {
                    return from;
                }
                probing = mine = new CompletableFuture<>();
            }
        }
        if (mine == null) {
            // Another caller probes: take its answer.
            try {
                wait.get(Math.max(1, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            } catch (ExecutionException | TimeoutException e) {
                // its answer is whatever cur says
            }
            return cur.get();
        }
        Place[] place = new Place[1];
        Endpoint to = from;
        try {
            to = probe(from, Math.min(deadline, System.nanoTime() + PROBE_TIMEOUT.toNanos()), place);
        } finally {
            synchronized (mu) {
                probing = null;
                if (to == from) {
                    probedFruitlessly = true;
                    lastProbe = System.nanoTime();
                } else {
                    cur.set(to);
                    probedFruitlessly = false;
                    if (cluster == null) {
                        cluster = place[0].cluster();
                    }
                    epochFloor = Math.max(epochFloor, place[0].epoch());
                }
            }
            mine.complete(null);
        }
        if (to != from) {
            LOG.warning("tandem: coordinator moved from " + from.target + " to " + to.target + " (it serves, epoch " + place[0].epoch()
                    + (place[0].cluster() != null ? " of cluster " + place[0].cluster() : "") + "; because " + from.target + " " + why + ")");
        }
        return to;
    }

    /** What one Health answer says of its coordinator: its cluster (null: not said) and epoch (0: not said). */
    record Place(String cluster, long epoch) {
    }

    /**
     * The place Health's message gives: from its "role=… cluster=ID epoch=N"
     * line (internal/server/standby.go, describe), which follows any notes
     * about the RMs (whose text could hold anything); from the whole message
     * when it has no such line (an older server).
     */
    static Place place(HealthResponse h) {
        String line = h.getMessage();
        for (String l : h.getMessage().split("\n")) {
            if (l.startsWith("role=")) {
                line = l;
                break;
            }
        }
        long epoch = 0;
        Matcher m = EPOCH.matcher(line);
        if (m.find()) {
            try {
                epoch = Long.parseUnsignedLong(m.group(1));
            } catch (NumberFormatException ignored) {
                // not a number we can compare: epoch 0
            }
        }
        Matcher c = CLUSTER.matcher(line);
        return new Place(c.find() ? c.group(1) : null, epoch);
    }

    /**
     * Whether serving answer p beats q: one naming its cluster beats one that
     * names none (a primary without --standby-listen, or an older server,
     * says neither cluster nor epoch: followed only when no named one
     * serves); then the higher epoch; then the one in use.
     */
    private static boolean better(Place p, boolean pIsFrom, Place q, boolean qIsFrom) {
        if ((p.cluster() != null) != (q.cluster() != null)) {
            return p.cluster() != null;
        }
        int c = Long.compareUnsigned(p.epoch(), q.epoch());
        return c > 0 || (c == 0 && pIsFrom && !qIsFrom);
    }

    /** Takes the cluster named by a Health answer of the coordinator in use, if none is known yet. */
    private void learn(HealthResponse h) {
        String c = place(h).cluster();
        if (c != null) {
            synchronized (mu) {
                if (cluster == null) {
                    cluster = c;
                }
            }
        }
    }

    /**
     * Asks every configured coordinator's Health in parallel (until deadline)
     * and returns the one that serves with the highest epoch (a superseded
     * primary not fenced yet may still say serving), preferring from, then the
     * configured order; from when none serves. A coordinator naming another
     * cluster than the one followed (the one known, else the one from's
     * answer names) never counts, nor one naming an epoch older than one
     * moved to before; one naming no cluster (a primary without
     * --standby-listen: no cluster, no epoch) counts only when no named one
     * serves; an interrupted probe moves nowhere. Its place goes to placeOut[0].
     */
    private Endpoint probe(Endpoint from, long deadline, Place[] placeOut) {
        List<Future<HealthResponse>> asks = new ArrayList<>();
        long left = Math.max(1, deadline - System.nanoTime());
        for (Endpoint ep : eps) {
            asks.add(ep.healthFuture.withDeadlineAfter(left, TimeUnit.NANOSECONDS).health(HealthRequest.getDefaultInstance()));
        }
        HealthResponse[] answers = new HealthResponse[eps.size()];
        for (int i = 0; i < eps.size(); i++) {
            try {
                answers[i] = asks.get(i).get(Math.max(1, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
            } catch (InterruptedException e) {
                // Not on the answers heard so far: the one not heard may be
                // the primary of a newer epoch.
                Thread.currentThread().interrupt();
                asks.forEach(f -> f.cancel(true));
                return from;
            } catch (ExecutionException | TimeoutException | RuntimeException e) {
                asks.get(i).cancel(true); // unreachable or slow: not the one
            }
        }
        String known;
        long floor;
        synchronized (mu) {
            int f = eps.indexOf(from);
            if (cluster == null && answers[f] != null) {
                cluster = place(answers[f]).cluster();
            }
            known = cluster;
            floor = epochFloor;
        }
        int best = -1;
        Place bestPlace = null;
        java.util.Set<String> clusters = new java.util.TreeSet<>();
        for (int i = 0; i < eps.size(); i++) {
            if (answers[i] == null || !answers[i].getServing()) {
                continue;
            }
            Place p = place(answers[i]);
            if (known != null && p.cluster() != null && !known.equals(p.cluster())) {
                if (warnedForeign.add(eps.get(i).target)) {
                    LOG.warning("tandem: the coordinator at " + eps.get(i).target + " serves cluster " + p.cluster() + ", not cluster " + known
                            + " (the one this client follows): never used; list only one cluster's coordinators in TandemConfig.coordinators");
                }
                continue;
            }
            if (p.cluster() != null && Long.compareUnsigned(p.epoch(), floor) < 0) {
                continue; // superseded: a primary of a newer epoch was moved to
            }
            if (p.cluster() != null) {
                clusters.add(p.cluster());
            }
            if (best < 0 || better(p, eps.get(i) == from, bestPlace, eps.get(best) == from)) {
                best = i;
                bestPlace = p;
            }
        }
        if (clusters.size() > 1) {
            if (warnedClusters.compareAndSet(false, true)) { // once, not once per probe
                LOG.warning("tandem: coordinators of several clusters " + clusters + " serve among " + targets()
                        + ", and this client does not know which it follows yet: it moves to none; list only one cluster's coordinators");
            }
            return from;
        }
        if (best < 0) {
            return from;
        }
        placeOut[0] = bestPlace;
        return eps.get(best);
    }

    /** What a Commit call came to. Exactly one of response, refused, logFull and unknown says it. */
    static final class CommitResult {
        CommitResponse response; // an answer (after a role change, possibly the new primary's Status)
        StatusRuntimeException refused; // refused as a whole before any ambiguous attempt: nothing decided
        String refusal; // with refused: what refused it, in words
        boolean noPrimary; // with refused: no coordinator served as the primary within the decision timeout (nothing written)
        StatusRuntimeException logFull; // RESOURCE_EXHAUSTED until the time ran out: nothing decided
        String unknown; // no decision learnt; it may exist
        int calls;
    }

    /**
     * Sends Commit to the coordinator in use, retrying while it is unreachable
     * or its log is full, until timeout, and following the primary: on a
     * refusal as a non-primary, or when it cannot be reached, it moves to the
     * coordinator that serves and sends the Commit there. A repeated Commit
     * answers the first one's outcome. Once an attempt went unanswered (it may
     * have written the decision), the new primary is first asked Status
     * without resolve: ABORTED, or COMMITTED when no branch is the caller's to
     * settle, is the outcome; otherwise the same Commit is sent there. From
     * that attempt on, a refusal never says "nothing decided": past the
     * timeout the outcome is unknown. With onCommitted, asks for the early
     * decision and runs it once when the response headers say COMMITTED (sent
     * only once the decision is durable): from then on the outcome is known.
     */
    CommitResult commit(CommitRequest req, Duration timeout, Runnable onCommitted) {
        return commit(req, timeout, onCommitted, null);
    }

    /**
     * As {@link #commit(CommitRequest, Duration, Runnable)}, naming owner
     * (the cluster id the branches are named after; null for none) in the
     * call's headers, so that a coordinator of another cluster refuses it
     * before deciding.
     */
    CommitResult commit(CommitRequest req, Duration timeout, Runnable onCommitted, String owner) {
        CommitResult r = new CommitResult();
        AtomicBoolean committed = new AtomicBoolean();
        ClientInterceptor early = onCommitted == null ? null : earlyDecision(() -> {
            if (committed.compareAndSet(false, true)) {
                onCommitted.run();
            }
        });
        long deadline = System.nanoTime() + timeout.toNanos();
        long backoffMs = 10;
        // ambiguous is the first attempt that ended without a definite answer
        // (not a reply, not RESOURCE_EXHAUSTED, not a refusal before anything
        // was written): the decision may exist from then on.
        StatusRuntimeException ambiguous = null;
        StatusRuntimeException last = null;
        boolean lastRefusedHere = false;
        Endpoint ep = cur.get();
        boolean askStatus = false; // ambiguous, then moved: ask the new primary first
        int moves = 0;
        long warned = System.nanoTime() - TimeUnit.SECONDS.toNanos(2);
        for (r.calls = 1; ; r.calls++) {
            long left = deadline - System.nanoTime();
            if (left <= 0 && last != null) {
                // The time ran out between attempts: no call is in flight.
                r.calls--;
                return gaveUp(r, ep, ambiguous, last, lastRefusedHere, timeout);
            }
            StatusRuntimeException err = null;
            if (askStatus) {
                try {
                    StatusResponse st = ep.stub.withDeadlineAfter(Math.max(left, 1), TimeUnit.NANOSECONDS)
                            .status(StatusRequest.newBuilder().setGtrid(req.getGtrid()).build());
                    if (st.getOutcome() == Outcome.ABORTED || (st.getOutcome() == Outcome.COMMITTED && onCommitted == null)) {
                        r.response = CommitResponse.newBuilder().setOutcome(st.getOutcome()).setPhase2Pending(st.getPhase2Pending())
                                .addAllBranches(st.getBranchesList())
                                .setMessage("after a role change, the primary at " + ep.target + " answers: " + st.getMessage()).build();
                        return r;
                    }
                    // UNDECIDED: decide there. COMMITTED with branches of
                    // the caller's own: the Commit there (idempotent) answers
                    // once the new primary's own standby has the decision.
                    askStatus = false;
                    r.calls++;
                    left = deadline - System.nanoTime();
                } catch (StatusRuntimeException e) {
                    err = e;
                }
            }
            if (!askStatus) {
                try {
                    CoordinatorGrpc.CoordinatorBlockingStub s = early == null ? ep.stub : ep.stub.withInterceptors(early);
                    if (owner != null) {
                        s = s.withInterceptors(headers(OWNER_HEADER, owner));
                    }
                    r.response = s.withDeadlineAfter(Math.max(left, 1), TimeUnit.NANOSECONDS).commit(req);
                    return r;
                } catch (StatusRuntimeException e) {
                    if (committed.get()) {
                        r.response = CommitResponse.newBuilder().setOutcome(Outcome.COMMITTED).setPhase2Pending(true)
                                .setMessage("the coordinator decided COMMIT (durable); its reply after phase 2 was lost: " + e.getMessage()).build();
                        return r;
                    }
                    err = e;
                }
            }
            last = err;
            Status.Code code = err.getStatus().getCode();
            boolean refusedHere = notPrimary(err); // this attempt wrote nothing
            lastRefusedHere = refusedHere;
            boolean definite = refusedHere || isRejection(code) || code == Status.Code.RESOURCE_EXHAUSTED;
            if (ambiguous == null && !definite && !askStatus) {
                ambiguous = err;
            }
            boolean retry = refusedHere || retryable(code);
            if (mayHaveMoved(err)) {
                Endpoint next = moveFrom(ep, "answered " + describe(err), deadline);
                if (next != ep) {
                    ep = next;
                    retry = true;
                    askStatus = ambiguous != null;
                    if (++moves == 1) {
                        continue; // straight to the new primary
                    }
                }
                // Not moved: keep trying the same one (a standby may be
                // promoted, the primary may come back), unless it refused
                // with FAILED_PRECONDITION and no trailer while nobody else
                // serves: a refusal of its own.
            }
            if (!retry) {
                if (ambiguous == null) {
                    r.refused = err;
                    r.refusal = "the coordinator at " + ep.target + " refused the commit: " + describe(err);
                } else {
                    r.unknown = unknown(ep, ambiguous, err, r.calls, timeout);
                }
                return r;
            }
            if (System.nanoTime() - deadline >= 0) {
                return gaveUp(r, ep, ambiguous, last, refusedHere, timeout);
            }
            if (code == Status.Code.UNAVAILABLE && System.nanoTime() - warned >= TimeUnit.SECONDS.toNanos(1)) {
                warned = System.nanoTime();
                LOG.warning("tandem: coordinator unreachable at " + ep.target + ", retrying the Commit of " + req.getGtrid() + " (attempt "
                        + r.calls + "): " + describe(err));
            }
            try {
                // Sleep the backoff, or past the deadline if it comes first
                // (as the Go SDK's select on ctx.Done): then no new attempt
                // starts with a sliver of time that would end unanswered.
                long leftMs = (deadline - System.nanoTime()) / 1_000_000 + 1;
                Thread.sleep(Math.max(1, Math.min(backoffMs, leftMs)));
            } catch (InterruptedException ie) {
                Thread.currentThread().interrupt();
                r.unknown = "interrupted while retrying the Commit call to " + ep.target + ": " + (ambiguous != null
                        ? "an earlier attempt went unanswered (" + describe(ambiguous) + "), so the decision may exist"
                        : "the attempts so far were refused (the last: " + describe(err) + ")");
                return r;
            }
            backoffMs = Math.min(2 * backoffMs, 1000);
        }
    }

    /**
     * The result when the decision timeout ended while the Commit was still
     * being tried: after an attempt that went unanswered, the outcome is
     * unknown; if every attempt was refused before anything was written, no
     * decision exists (a full log, or no coordinator serving as the primary).
     */
    private CommitResult gaveUp(CommitResult r, Endpoint ep, StatusRuntimeException ambiguous, StatusRuntimeException last,
            boolean refusedHere, Duration timeout) {
        if (ambiguous != null) {
            r.unknown = unknown(ep, ambiguous, last, r.calls, timeout);
        } else if (last.getStatus().getCode() == Status.Code.RESOURCE_EXHAUSTED) {
            r.logFull = last; // refused (log full) every time: nothing was written
        } else {
            r.refused = last;
            r.noPrimary = true;
            r.refusal = "no coordinator of " + targets() + " served as the primary within the decision timeout (" + timeout.toMillis()
                    + "ms; each refused before writing anything; the last, " + ep.target + (refusedHere ? ", as a non-primary" : "")
                    + "): nothing was decided: " + describe(last);
        }
        return r;
    }

    private String unknown(Endpoint ep, StatusRuntimeException ambiguous, StatusRuntimeException last, int calls, Duration timeout) {
        return "no decision from the coordinator" + (eps.size() > 1 ? "s " + targets() + " (the last tried: " + ep.target + ")" : " at " + ep.target)
                + " after " + calls + " attempts within the decision timeout (" + timeout.toMillis() + "ms): " + describe(ambiguous)
                + (ambiguous != last ? " (last attempt: " + describe(last) + ")" : "");
    }

    /**
     * Runs one call that is safe to repeat (Abort, Status) on the coordinator
     * in use, following the primary: on a refusal as a non-primary, or when it
     * cannot be reached, it moves to the one that serves and tries again,
     * backing off while none does, until timeout.
     */
    <T> T call(Duration timeout, Function<CoordinatorGrpc.CoordinatorBlockingStub, T> fn) {
        long deadline = System.nanoTime() + timeout.toNanos();
        Endpoint ep = cur.get();
        long backoffMs = 10;
        StatusRuntimeException last = null;
        for (;;) {
            long left = deadline - System.nanoTime();
            if (left <= 0 && last != null) {
                // The time ran out between attempts: the last answer says why,
                // not an attempt started with nothing left.
                throw noPrimary(ep, last, timeout);
            }
            try {
                return fn.apply(ep.stub.withDeadlineAfter(Math.max(left, 1), TimeUnit.NANOSECONDS));
            } catch (StatusRuntimeException e) {
                last = e;
                if (!mayHaveMoved(e)) {
                    throw at(ep, e);
                }
                if (System.nanoTime() - deadline >= 0) {
                    throw noPrimary(ep, e, timeout);
                }
                Endpoint next = moveFrom(ep, "answered " + describe(e), deadline);
                if (next != ep) {
                    ep = next;
                    continue;
                }
                if (!notPrimary(e) && e.getStatus().getCode() != Status.Code.UNAVAILABLE) {
                    throw at(ep, e); // FAILED_PRECONDITION with nobody else serving: a refusal
                }
                try {
                    long leftMs = (deadline - System.nanoTime()) / 1_000_000 + 1;
                    Thread.sleep(Math.max(1, Math.min(backoffMs, leftMs)));
                } catch (InterruptedException ie) {
                    Thread.currentThread().interrupt();
                    throw at(ep, e);
                }
                backoffMs = Math.min(2 * backoffMs, 1000);
            }
        }
    }

    /** e, from the coordinator at ep, saying so (its code, cause and trailers kept). */
    private static StatusRuntimeException at(Endpoint ep, StatusRuntimeException e) {
        return e.getStatus().withDescription("the coordinator at " + ep.target + ": " + describe(e)).asRuntimeException(e.getTrailers());
    }

    /** e, the last answer (from ep) when timeout ended with no coordinator serving: naming every address. */
    private StatusRuntimeException noPrimary(Endpoint ep, StatusRuntimeException e, Duration timeout) {
        return e.getStatus().withDescription("no coordinator of " + targets() + " served as the primary within " + timeout.toMillis()
                + "ms (the last answer, from " + ep.target + ": " + describe(e) + ")").asRuntimeException(e.getTrailers());
    }

    /** Abort decides ABORT for gtrid and rolls back the listed prepared branches from the coordinator (the primary). */
    void abort(AbortRequest req, Duration timeout) {
        abort(req, timeout, null);
    }

    /** As {@link #abort(AbortRequest, Duration)}, naming the branches' owner (null for none) in the call's headers. */
    void abort(AbortRequest req, Duration timeout, String owner) {
        call(timeout, s -> (owner == null ? s : s.withInterceptors(headers(OWNER_HEADER, owner))).abort(req));
    }

    /** Status of gtrid from the primary; never resolves unless asked. */
    StatusResponse status(String gtrid, boolean resolve, Duration timeout) {
        return call(timeout, s -> s.status(StatusRequest.newBuilder().setGtrid(gtrid).setResolve(resolve).build()));
    }

    private static final Pattern OWNER = Pattern.compile("[0-9a-f]{32}");

    /** The cluster's identity as an owner (id), or why it is not known (why). */
    record OwnerAnswer(String id, String why) {
    }

    /**
     * The followed cluster's identity, the owner of every branch the
     * coordinator decides: learnt once from Health's cluster= (the cluster
     * followed, else the serving coordinator's answer, asked within
     * timeout) and kept; a failure is kept {@link #OWNER_REASK}. A
     * coordinator whose Health names no cluster is older than this client:
     * the answer says to upgrade it.
     */
    OwnerAnswer owner(Duration timeout) {
        synchronized (mu) {
            if (cluster != null) {
                return asOwner(cur.get().target, cluster);
            }
            if (ownerWhy != null && System.nanoTime() - ownerAskedAt < OWNER_REASK.toNanos()) {
                return new OwnerAnswer(null, ownerWhy);
            }
        }
        String why;
        try {
            healthOfPrimary(timeout);
            why = "the coordinator at " + cur.get().target + " names no cluster in its Health (no cluster=…): it is older than this client,"
                    + " which names every branch a coordinator decides after the coordinator's cluster; upgrade the coordinator, or decide at a"
                    + " commit point (DecideAt.AUTO)";
        } catch (RuntimeException e) {
            why = "could not ask the coordinator at " + cur.get().target + " for its cluster's identity (Health), which names the branches it"
                    + " decides: " + (e instanceof StatusRuntimeException se ? describe(se) : e.toString());
        }
        synchronized (mu) {
            if (cluster != null) {
                return asOwner(cur.get().target, cluster);
            }
            ownerAskedAt = System.nanoTime();
            ownerWhy = why;
            return new OwnerAnswer(null, why);
        }
    }

    private static OwnerAnswer asOwner(String at, String c) {
        if (OWNER.matcher(c).matches() && !c.equals("0".repeat(32))) {
            return new OwnerAnswer(c, null);
        }
        return new OwnerAnswer(null, "the coordinator at " + at + " names its cluster \"" + c + "\", which is not an identity (32 lowercase hex digits)");
    }

    /** How long a failure to learn the cluster's identity is kept (the Go SDK's clusterRetry). */
    static final Duration OWNER_REASK = Duration.ofSeconds(1);
    /** When (System.nanoTime) {@link #owner} last failed, and why; null: never. Guarded by mu. */
    private long ownerAskedAt;
    private String ownerWhy;

    /** Health of the coordinator in use now (no probe, no move). */
    HealthResponse health(Duration timeout) {
        HealthResponse h = cur.get().healthStub.withDeadlineAfter(timeout.toMillis(), TimeUnit.MILLISECONDS).health(HealthRequest.getDefaultInstance());
        learn(h);
        return h;
    }

    /**
     * Health of the coordinator that serves: the one in use, or, when it
     * cannot be reached or does not serve and others are configured, the one
     * a probe moves to (what {@code verify()} asks at start-up, when the first
     * address may be a standby). Throws the first one's error when nobody else
     * serves either.
     */
    HealthResponse healthOfPrimary(Duration timeout) {
        long deadline = System.nanoTime() + timeout.toNanos();
        Endpoint ep = cur.get();
        HealthResponse h;
        try {
            h = ep.healthStub.withDeadlineAfter(timeout.toMillis(), TimeUnit.MILLISECONDS).health(HealthRequest.getDefaultInstance());
            learn(h);
            if (h.getServing() || eps.size() == 1) {
                return h;
            }
        } catch (StatusRuntimeException e) {
            if (eps.size() == 1 || !mayHaveMoved(e)) {
                throw e;
            }
            Endpoint next = moveFrom(ep, "answered Health " + describe(e), deadline);
            if (next == ep) {
                throw e;
            }
            return next.healthStub.withDeadlineAfter(Math.max(1, deadline - System.nanoTime()), TimeUnit.NANOSECONDS).health(HealthRequest.getDefaultInstance());
        }
        Endpoint next = moveFrom(ep, "does not serve (" + h.getMessage() + ")", deadline);
        if (next == ep) {
            return h;
        }
        return next.healthStub.withDeadlineAfter(Math.max(1, deadline - System.nanoTime()), TimeUnit.NANOSECONDS).health(HealthRequest.getDefaultInstance());
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

    /** Sets a W3C header in gRPC metadata, replacing any value already there (one traceparent per call). */
    private static final TextMapSetter<Metadata> METADATA_SETTER = (md, key, value) -> {
        if (md != null) {
            Metadata.Key<String> k = Metadata.Key.of(key, Metadata.ASCII_STRING_MARSHALLER);
            md.discardAll(k);
            md.put(k, value);
        }
    };

    /**
     * Carries the trace context of the span current when a call is made
     * ({@link Context#current()}: the transaction's, or its
     * {@code tandem.decision} during the Commit) as a W3C
     * {@code traceparent} and {@code tracestate} in the call's metadata
     * (the Go SDK's internal/traceprop), whatever propagators the
     * application configured: a coordinator that exports traces makes its
     * spans children of it. A call made with no valid span context current
     * carries nothing; the cost is then one thread-local lookup.
     */
    static final ClientInterceptor TRACE_CONTEXT = new ClientInterceptor() {
        @Override
        public <Q, R> ClientCall<Q, R> interceptCall(MethodDescriptor<Q, R> m, CallOptions o, Channel next) {
            Context ctx = Context.current();
            if (!Span.fromContext(ctx).getSpanContext().isValid()) {
                return next.newCall(m, o);
            }
            return new ForwardingClientCall.SimpleForwardingClientCall<>(next.newCall(m, o)) {
                @Override
                public void start(Listener<R> l, Metadata h) {
                    W3CTraceContextPropagator.getInstance().inject(ctx, h, METADATA_SETTER);
                    super.start(l, h);
                }
            };
        }
    };

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
        for (Endpoint ep : eps) {
            ep.channel.shutdownNow();
        }
        try {
            for (Endpoint ep : eps) {
                ep.channel.awaitTermination(5, TimeUnit.SECONDS);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
