package main

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Traces (--otlp-endpoint): how an application hands the SDK a tracer
// provider that exports over OTLP. The SDK itself only uses the
// OpenTelemetry API (client.Config.TracerProvider); the provider, its
// exporter and its sampler are the application's.
//
// With --otlp-endpoint HOST:PORT each transfer is a span "transfer" of
// service "transfer", the parent of the transaction's span (tandem.tx,
// client.Client.BeginContext) and its phases; the in-process coordinator
// (no --coordinator) exports its own spans, as service
// "tandem-coordinator", into the same traces. A coordinator of its own
// exports with tandem serve --otlp-endpoint.

// otlpProvider returns a tracer provider that batches spans and sends them
// over OTLP/gRPC, in plaintext, to endpoint (HOST:PORT, an OpenTelemetry
// Collector or Jaeger on 4317, say), as service. Shut it down to send what
// it still holds.
func otlpProvider(ctx context.Context, endpoint, service string) (*sdktrace.TracerProvider, error) {
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(endpoint), otlptracegrpc.WithInsecure())
	if err != nil {
		return nil, fmt.Errorf("--otlp-endpoint %s: %w", endpoint, err)
	}
	return sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", service))),
	), nil
}

// shutdown sends the spans tp still holds, for at most 5 seconds.
func shutdown(tp *sdktrace.TracerProvider) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = tp.Shutdown(ctx)
}
