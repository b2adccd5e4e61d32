// Package traceprop carries an OpenTelemetry trace context across the
// coordinator's gRPC API as a W3C traceparent (and tracestate) in the
// call's metadata: the SDK's calls inject the context of the span in their
// context (UnaryClientInterceptor, StreamClientInterceptor), and the
// coordinator reads it back (Extract) to make its spans children of the
// client's. It uses the W3C propagator whatever the application's global
// propagator is (otel.SetTextMapPropagator), so that the link between the
// two sides never depends on the application's setup.
//
// Only the OpenTelemetry API is used here: no SDK, no exporter.
package traceprop

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// w3c is the propagator of both sides: traceparent and tracestate.
var w3c propagation.TraceContext

// Inject adds the trace context of ctx's span to ctx's outgoing metadata.
// A context without a valid span context is returned as it is: the cost is
// one context lookup.
func Inject(ctx context.Context) context.Context {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	c := propagation.MapCarrier{}
	w3c.Inject(ctx, c)
	kv := make([]string, 0, 2*len(c))
	for k, v := range c {
		kv = append(kv, k, v)
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

// UnaryClientInterceptor injects the trace context of each call's context
// (Inject).
func UnaryClientInterceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return invoker(Inject(ctx), method, req, reply, cc, opts...)
}

// StreamClientInterceptor injects the trace context of each stream's
// context (Inject): the SDK's Commit with the early decision is made
// through the stream API.
func StreamClientInterceptor(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return streamer(Inject(ctx), desc, cc, method, opts...)
}

// Extract returns the remote span context an incoming call carries in its
// metadata; it is not valid when the call carries none (or a malformed
// one).
func Extract(ctx context.Context) trace.SpanContext {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(w3c.Extract(ctx, mdCarrier(md)))
}

// mdCarrier reads gRPC metadata as a propagation.TextMapCarrier.
type mdCarrier metadata.MD

func (c mdCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c mdCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

func (c mdCarrier) Keys() []string {
	out := make([]string, 0, len(c))
	for k := range c {
		out = append(out, k)
	}
	return out
}
