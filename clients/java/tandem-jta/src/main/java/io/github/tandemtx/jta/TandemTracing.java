package io.github.tandemtx.jta;

import io.opentelemetry.api.GlobalOpenTelemetry;
import io.opentelemetry.api.common.AttributeKey;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.SpanKind;
import io.opentelemetry.api.trace.StatusCode;
import io.opentelemetry.api.trace.Tracer;
import io.opentelemetry.api.trace.TracerProvider;
import io.opentelemetry.context.Context;
import io.opentelemetry.context.Scope;
import java.util.concurrent.TimeUnit;
import java.util.logging.Logger;

/**
 * The OpenTelemetry spans of a manager's transactions (README, "Traces"):
 * the Go SDK's (client/tracing.go), with the same names and attributes.
 * Each transaction is one span, {@link #SPAN_TX}, from {@code begin()} to
 * the end of {@code commit()} or {@code rollback()}, a child of the span
 * current ({@link Context#current()}) at {@code begin()}; when it records,
 * its phases are child spans:
 *
 * <pre>
 * tandem.tx        the transaction (tandem.gtrid, tandem.path, tandem.outcome, tandem.commit_point, ...)
 * tandem.prepare   phase 1 of one branch (tandem.rm)
 * tandem.decision  the decision: the commit point's commit, the coordinator's Commit RPC
 *                  (every attempt; a client span), or the one writer's one-phase commit
 *                  (tandem.decided_by, tandem.rm)
 * tandem.take_key  taking the commit point's decision key after its connection broke (tandem.rm)
 * tandem.phase2    committing or rolling back one prepared branch (tandem.rm, tandem.action)
 * </pre>
 *
 * <p>The coordinator's calls carry the context of the span current when
 * they are made as a W3C {@code traceparent} (CoordinatorClient), so that a
 * coordinator that exports traces makes its spans children of
 * {@code tandem.decision} (Commit) or {@code tandem.tx} (Abort).
 *
 * <p>Only the OpenTelemetry API is used: the SDK, its sampler and its
 * exporter are the application's ({@link TandemConfig#withOpenTelemetry},
 * else the global one once the application or the Java agent installed it).
 *
 * <p>Cost: with no tracer provider configured and no global OpenTelemetry
 * installed, {@code begin()} makes no OpenTelemetry call at all (one
 * volatile read and a clock read; the global is looked for again at most
 * once a second) and allocates nothing for tracing, and every phase is
 * skipped on one test; the coordinator's calls look up the current context
 * (a thread-local read) and add nothing. With a provider, about 2 + 2 ×
 * branches spans per transaction, at the provider's price.
 */
public final class TandemTracing {
    /** The instrumentation scope of the spans. */
    public static final String SCOPE = "io.github.tandemtx.jta";

    public static final String SPAN_TX = "tandem.tx";
    public static final String SPAN_PREPARE = "tandem.prepare";
    public static final String SPAN_DECISION = "tandem.decision";
    public static final String SPAN_TAKE_KEY = "tandem.take_key";
    public static final String SPAN_PHASE2 = "tandem.phase2";

    public static final AttributeKey<String> GTRID = AttributeKey.stringKey("tandem.gtrid");
    /** local, one-phase, commit-point, two-phase. */
    public static final AttributeKey<String> PATH = AttributeKey.stringKey("tandem.path");
    /** committed, aborted, unknown, rolled-back (tandem.tx); committed, aborted (tandem.decision by the coordinator, tandem.take_key). */
    public static final AttributeKey<String> OUTCOME = AttributeKey.stringKey("tandem.outcome");
    public static final AttributeKey<String> COMMIT_POINT = AttributeKey.stringKey("tandem.commit_point");
    public static final AttributeKey<String> RM = AttributeKey.stringKey("tandem.rm");
    /** commit-point, coordinator, one-phase. */
    public static final AttributeKey<String> DECIDED_BY = AttributeKey.stringKey("tandem.decided_by");
    /** commit, rollback. */
    public static final AttributeKey<String> ACTION = AttributeKey.stringKey("tandem.action");
    public static final AttributeKey<Long> COORDINATOR_CALLS = AttributeKey.longKey("tandem.coordinator_calls");
    public static final AttributeKey<Boolean> PHASE2_PENDING = AttributeKey.booleanKey("tandem.phase2_pending");

    /** How often the global OpenTelemetry is looked for while none is installed. */
    static final long LOOK_AGAIN_NANOS = TimeUnit.SECONDS.toNanos(1);

    private static final Logger LOG = Logger.getLogger("io.github.tandemtx.jta");
    /** The OpenTelemetry API on the class path is older than 1.57 (no GlobalOpenTelemetry.isSet): the global is never used. */
    private static volatile boolean oldApi;

    /** The configured provider's tracer; null: the global one. */
    private final Tracer configured;
    /** The global OpenTelemetry's tracer, once it was found installed. */
    private volatile Tracer global;
    /** When (System.nanoTime) the global may be looked for again. */
    private volatile long nextLook;

    /** Spans from tp's tracer, or from the global OpenTelemetry's when tp is null. */
    TandemTracing(TracerProvider tp) {
        this.configured = tp == null ? null : tp.get(SCOPE);
        this.nextLook = System.nanoTime();
    }

    /**
     * The tracer of this manager's spans, or null when there is none: no
     * provider configured and no global OpenTelemetry installed (looked for
     * at most once a second, without installing one: GlobalOpenTelemetry.get
     * would install the no-op one for good, and the application's own set
     * would then fail).
     */
    Tracer tracer() {
        if (configured != null) {
            return configured;
        }
        Tracer t = global;
        if (t != null) {
            return t;
        }
        long now = System.nanoTime();
        if (now - nextLook < 0 || oldApi) {
            return null;
        }
        nextLook = now + LOOK_AGAIN_NANOS;
        try {
            if (GlobalOpenTelemetry.isSet()) {
                global = t = GlobalOpenTelemetry.get().getTracerProvider().get(SCOPE);
            }
        } catch (NoSuchMethodError e) {
            oldApi = true;
            LOG.warning("tandem: the OpenTelemetry API on the class path is older than 1.57 (no GlobalOpenTelemetry.isSet), so the global"
                    + " OpenTelemetry is not used for traces: give it with TandemConfig.withOpenTelemetry, or use opentelemetry-api 1.57 or later");
        }
        return t;
    }

    /**
     * Starts the span of transaction gtrid, a child of the current context's
     * span. {@link TxSpans#NONE} (nothing to end, nothing allocated) when
     * there is no tracer, or when the span neither records nor has a valid
     * context to pass on.
     */
    TxSpans begin(String gtrid) {
        Tracer t = tracer();
        if (t == null) {
            return TxSpans.NONE;
        }
        Context parent = Context.current();
        Span s = t.spanBuilder(SPAN_TX).setParent(parent).startSpan();
        boolean rec = s.isRecording();
        if (!rec && !s.getSpanContext().isValid()) {
            return TxSpans.NONE;
        }
        if (rec) {
            s.setAttribute(GTRID, gtrid);
        }
        return new TxSpans(t, s, parent.with(s), rec);
    }

    /** Ends sp (null: no span) with an error status saying err when err is not null. */
    static void end(Span sp, Throwable err) {
        if (sp == null) {
            return;
        }
        if (err != null) {
            sp.setStatus(StatusCode.ERROR, String.valueOf(err.getMessage() != null ? err.getMessage() : err));
        }
        sp.end();
    }

    /** Ends sp (null: no span) with an error status saying why when why is not null. */
    static void end(Span sp, String why) {
        if (sp == null) {
            return;
        }
        if (why != null) {
            sp.setStatus(StatusCode.ERROR, why);
        }
        sp.end();
    }

    /**
     * One transaction's span and its context (the parent of its phases'
     * spans and of the coordinator's). A phase's span is made only when the
     * transaction's records; otherwise its methods return null, which
     * {@link TandemTracing#end} takes as no span.
     */
    static final class TxSpans {
        /** No span: nothing records. */
        static final TxSpans NONE = new TxSpans(null, null, null, false);

        private final Tracer tracer;
        private final Span span;
        private final Context ctx;
        final boolean rec;

        private TxSpans(Tracer tracer, Span span, Context ctx, boolean rec) {
            this.tracer = tracer;
            this.span = span;
            this.ctx = ctx;
            this.rec = rec;
        }

        /** Makes the transaction's span current on this thread until the scope closes (nothing for NONE). */
        Scope enter() {
            return ctx == null ? Scope.noop() : ctx.makeCurrent();
        }

        /** A child span name of the transaction's, for resource manager rm (null for none); null when nothing records. */
        Span start(String name, String rm) {
            if (!rec) {
                return null;
            }
            Span s = tracer.spanBuilder(name).setParent(ctx).startSpan();
            if (rm != null) {
                s.setAttribute(RM, rm);
            }
            return s;
        }

        /** A tandem.phase2 span of rm, committing or rolling back. */
        Span phase2(String rm, boolean commit) {
            Span s = start(SPAN_PHASE2, rm);
            if (s != null) {
                s.setAttribute(ACTION, commit ? "commit" : "rollback");
            }
            return s;
        }

        /**
         * The decision's span, made by "commit-point", "coordinator" (an RPC:
         * a client span) or "one-phase", at rm (null for the coordinator).
         */
        Span decision(String by, String rm) {
            if (!rec) {
                return null;
            }
            Span s = tracer.spanBuilder(SPAN_DECISION).setParent(ctx).setSpanKind(rm == null ? SpanKind.CLIENT : SpanKind.INTERNAL).startSpan();
            s.setAttribute(DECIDED_BY, by);
            if (rm != null) {
                s.setAttribute(RM, rm);
            }
            return s;
        }

        /**
         * Ends the transaction's span with its outcome ("committed",
         * "aborted", "unknown", "rolled-back"), the path it took (null: none
         * chosen), its commit point (null: none), the coordinator calls of
         * its decision (0: none), whether phase 2 was left to others, and an
         * error status when err is not null.
         */
        void end(String outcome, ClientMetrics.Path path, String commitPoint, int calls, boolean phase2Pending, Throwable err) {
            if (span == null) {
                return;
            }
            if (rec) {
                span.setAttribute(OUTCOME, outcome);
                if (path != null) {
                    span.setAttribute(PATH, path.label());
                }
                if (commitPoint != null) {
                    span.setAttribute(COMMIT_POINT, commitPoint);
                }
                if (calls > 0) {
                    span.setAttribute(COORDINATOR_CALLS, (long) calls);
                }
                if (phase2Pending) {
                    span.setAttribute(PHASE2_PENDING, true);
                }
            }
            TandemTracing.end(span, err);
        }
    }
}
