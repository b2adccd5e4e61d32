package client

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// OpenTelemetry spans (README, "Traces"). Each transaction is one span,
// SpanTx, from Begin to the end of Commit or Rollback; when it records, its
// phases are child spans:
//
//	tandem.tx        the transaction (tandem.gtrid, tandem.path, tandem.outcome, tandem.commit_point)
//	tandem.prepare   phase 1 of one branch (tandem.rm)
//	tandem.decision  the decision: the commit point's commit, the coordinator's Commit RPC
//	                 (every attempt), or the one writer's one-phase commit (tandem.decided_by, tandem.rm)
//	tandem.take_key  taking the commit point's decision key after its connection broke (tandem.rm)
//	tandem.phase2    committing or rolling back one prepared branch (tandem.rm, tandem.action)
//
// The coordinator's calls carry the context of the span they are made in
// (traceprop), so that a coordinator that exports traces makes its spans
// children of tandem.decision (Commit) or tandem.tx (Abort, Status).
//
// Cost: with no TracerProvider set (Config.TracerProvider nil and none set
// with otel.SetTracerProvider), Begin makes one call to the global no-op
// tracer (an atomic load and three small allocations) and nothing else is
// done per transaction or per phase: every child span is skipped on one
// boolean test. With a provider, the cost is the provider's, for about
// 2 + 2×(branches) spans per transaction.

// Span names and attribute keys.
const (
	SpanTx       = "tandem.tx"
	SpanPrepare  = "tandem.prepare"
	SpanDecision = "tandem.decision"
	SpanTakeKey  = "tandem.take_key"
	SpanPhase2   = "tandem.phase2"

	AttrGTRID       = attribute.Key("tandem.gtrid")
	AttrPath        = attribute.Key("tandem.path")
	AttrOutcome     = attribute.Key("tandem.outcome") // committed, aborted, unknown, rolled-back
	AttrCommitPoint = attribute.Key("tandem.commit_point")
	AttrRM          = attribute.Key("tandem.rm")
	AttrDecidedBy   = attribute.Key("tandem.decided_by") // commit-point, coordinator, one-phase
	AttrAction      = attribute.Key("tandem.action")     // commit, rollback
	AttrCalls       = attribute.Key("tandem.coordinator_calls")
	AttrPending     = attribute.Key("tandem.phase2_pending")
	AttrBackground  = attribute.Key("tandem.background")
)

// tracerName is the instrumentation scope of the SDK's spans.
const tracerName = "github.com/tandem-tx/tandem/client"

// noSpan is the span that does nothing, handed out when the transaction's
// span does not record.
var noSpan = trace.SpanFromContext(context.Background())

// startTxSpan starts the transaction's span, a child of ctx's span.
func (t *Tx) startTxSpan(ctx context.Context) {
	_, t.span = t.c.tracer.Start(ctx, SpanTx)
	if t.span.IsRecording() {
		t.rec = true
		t.span.SetAttributes(AttrGTRID.String(t.gtrid.String()))
	}
}

// spanContext returns ctx with the transaction's span as its current span
// (the parent of the phases' spans and of the coordinator's), when the
// span has a valid context.
func (t *Tx) spanContext(ctx context.Context) context.Context {
	if !t.rec && !t.span.SpanContext().IsValid() {
		return ctx
	}
	return trace.ContextWithSpan(ctx, t.span)
}

// endTxSpan ends the transaction's span with its outcome.
func (t *Tx) endTxSpan(outcome string, res *Result, err error) {
	if t.rec {
		attrs := []attribute.KeyValue{AttrOutcome.String(outcome)}
		if res != nil {
			if res.Path != 0 {
				attrs = append(attrs, AttrPath.String(res.Path.String()))
			}
			if res.CommitPoint != "" {
				attrs = append(attrs, AttrCommitPoint.String(res.CommitPoint))
			}
			if res.CoordinatorCalls > 0 {
				attrs = append(attrs, AttrCalls.Int(res.CoordinatorCalls))
			}
			if res.Phase2Pending {
				attrs = append(attrs, AttrPending.Bool(true))
			}
		}
		t.span.SetAttributes(attrs...)
		setError(t.span, err)
	}
	t.span.End()
}

// startSpan starts a child span of ctx's span for one RM ("" for none)
// when the transaction's span records; otherwise it returns ctx and
// noSpan.
func (t *Tx) startSpan(ctx context.Context, name, rmName string) (context.Context, trace.Span) {
	return t.c.startSpan(ctx, t.rec, name, rmName)
}

func (c *Client) startSpan(ctx context.Context, rec bool, name, rmName string) (context.Context, trace.Span) {
	if !rec {
		return ctx, noSpan
	}
	ctx, sp := c.tracer.Start(ctx, name)
	if rmName != "" {
		sp.SetAttributes(AttrRM.String(rmName))
	}
	return ctx, sp
}

// decisionSpan starts the span of the decision, made by "commit-point",
// "coordinator" (an RPC: a client span) or "one-phase", at rmName ("" for
// the coordinator).
func (t *Tx) decisionSpan(ctx context.Context, by, rmName string) (context.Context, trace.Span) {
	if !t.rec {
		return ctx, noSpan
	}
	kind := trace.SpanKindInternal
	if rmName == "" {
		kind = trace.SpanKindClient
	}
	ctx, sp := t.c.tracer.Start(ctx, SpanDecision, trace.WithSpanKind(kind))
	sp.SetAttributes(AttrDecidedBy.String(by))
	if rmName != "" {
		sp.SetAttributes(AttrRM.String(rmName))
	}
	return ctx, sp
}

// endSpan ends sp, marked as failed with err when err is not nil.
func endSpan(sp trace.Span, err error) {
	setError(sp, err)
	sp.End()
}

func setError(sp trace.Span, err error) {
	if err != nil && sp.IsRecording() {
		sp.SetStatus(codes.Error, err.Error())
	}
}

// outcomeName is the tandem.outcome of a finished Commit.
func outcomeName(s txState) string {
	switch s {
	case txCommitted:
		return "committed"
	case txAborted:
		return "aborted"
	}
	return "unknown"
}
