package coord

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// OpenTelemetry spans of the coordinator (README, "Traces"). They are made
// only under a call's span that records — the server's span of a Commit,
// Abort or Status that carried the client's trace context
// (internal/server/tracing.go) — and with that span's provider, so that a
// coordinator without tracing, or a call without a trace context, costs one
// context lookup per decision and one nil test per phase-2 attempt. The
// decisions the coordinator makes on its own (orphans, in-doubt scans,
// recovery) have no span.
//
//	tandem.coordinator.decision_log  writing the decision record (tandem.outcome,
//	                                 tandem.durable: with the fdatasync, the wait "log file sync")
//	tandem.coordinator.phase2        one phase-2 attempt at one branch (tandem.rm, tandem.action
//	                                 commit, rollback or check — a client-settled branch's
//	                                 confirmation —, tandem.attempt: 1 for the first, tandem.result:
//	                                 settled, held — by the client's session — or failed); the
//	                                 first maxSpannedAttempts attempts at each branch
const (
	SpanDecisionLog = "tandem.coordinator.decision_log"
	SpanPhase2      = "tandem.coordinator.phase2"

	attrOutcome = attribute.Key("tandem.outcome")
	attrDurable = attribute.Key("tandem.durable")
	attrRM      = attribute.Key("tandem.rm")
	attrAction  = attribute.Key("tandem.action")
	attrAttempt = attribute.Key("tandem.attempt")
	attrResult  = attribute.Key("tandem.result")
)

// maxSpannedAttempts bounds the phase-2 spans of one branch: an RM down
// for an hour is retried thousands of times, each one a span otherwise.
const maxSpannedAttempts = 10

// tracerName is the instrumentation scope of the coordinator's spans.
const tracerName = "github.com/tandem-tx/tandem/coordinator"

// tracedSpan returns ctx's span if it records, else nil.
func tracedSpan(ctx context.Context) trace.Span {
	if sp := trace.SpanFromContext(ctx); sp.IsRecording() {
		return sp
	}
	return nil
}

// startSpan starts a child span of parent with parent's provider; nil when
// parent is nil.
func startSpan(parent trace.Span, name string) trace.Span {
	if parent == nil {
		return nil
	}
	_, sp := parent.TracerProvider().Tracer(tracerName).Start(trace.ContextWithSpan(context.Background(), parent), name)
	return sp
}

// endSpan ends sp, marked as failed with err when err is not nil.
func endSpan(sp trace.Span, err error) {
	if err != nil {
		sp.SetStatus(codes.Error, err.Error())
	}
	sp.End()
}

// outcomeName is an outcome as a span attribute: committed, aborted, undecided.
func outcomeName(o Outcome) string { return strings.ToLower(o.String()) }
