package server

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/tandem-tx/tandem/api"
	"github.com/tandem-tx/tandem/internal/traceprop"
)

// The coordinator's OpenTelemetry spans (README, "Traces"), made with
// Options.TracerProvider. A Commit, Abort or Status call that carries a W3C
// traceparent (the SDK sends the context of its span: tandem.decision for
// Commit, tandem.tx for the others) gets a server span, a child of the
// client's, named "tandem.coordinator." and the method; under it,
// internal/coord makes the decision log's span and phase 2's. A call that
// carries no trace context gets no span, nor does anything it causes: a
// root span per call would make a trace of one span for every untraced
// client, and the decisions the coordinator makes on its own (orphans,
// in-doubt scans) belong to no client's transaction. A traceparent whose
// sampled flag is off makes spans that record nothing (with the SDK's
// default, parent-based sampler).
//
// Attributes: rpc.system, rpc.service, rpc.method; tandem.gtrid; the
// reply's tandem.outcome (committed, aborted, undecided) and
// tandem.phase2_pending; rpc.grpc.status_code, and an error status, when
// the call failed.

// SpanPrefix begins the name of a call's server span.
const SpanPrefix = "tandem.coordinator."

// tracedMethods are the calls that get a span: those about one transaction.
var tracedMethods = map[string]string{
	api.Coordinator_Commit_FullMethodName: "Commit",
	api.Coordinator_Abort_FullMethodName:  "Abort",
	api.Coordinator_Status_FullMethodName: "Status",
}

// traceInterceptor makes the server span of each traced call carrying a
// trace context.
func traceInterceptor(tp trace.TracerProvider) grpc.UnaryServerInterceptor {
	tracer := tp.Tracer("github.com/tandem-tx/tandem/coordinator")
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		method, ok := tracedMethods[info.FullMethod]
		if !ok {
			return handler(ctx, req)
		}
		parent := traceprop.Extract(ctx)
		if !parent.IsValid() {
			return handler(ctx, req)
		}
		ctx, sp := tracer.Start(trace.ContextWithRemoteSpanContext(ctx, parent), SpanPrefix+method, trace.WithSpanKind(trace.SpanKindServer))
		defer sp.End()
		if !sp.IsRecording() {
			return handler(ctx, req)
		}
		sp.SetAttributes(attribute.String("rpc.system", "grpc"), attribute.String("rpc.service", api.Coordinator_ServiceDesc.ServiceName),
			attribute.String("rpc.method", method))
		if r, ok := req.(interface{ GetGtrid() string }); ok {
			sp.SetAttributes(attribute.String("tandem.gtrid", r.GetGtrid()))
		}
		resp, err := handler(ctx, req)
		if err != nil {
			st, _ := status.FromError(err)
			sp.SetAttributes(attribute.Int("rpc.grpc.status_code", int(st.Code())))
			sp.SetStatus(codes.Error, st.Message())
			return resp, err
		}
		if r, ok := resp.(interface {
			GetOutcome() api.Outcome
			GetPhase2Pending() bool
		}); ok {
			sp.SetAttributes(attribute.String("tandem.outcome", strings.ToLower(r.GetOutcome().String())), attribute.Bool("tandem.phase2_pending", r.GetPhase2Pending()))
		}
		return resp, err
	}
}
