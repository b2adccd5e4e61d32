package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Trace export of tandem serve (README, "Traces"): OTLP over gRPC, to
// --otlp-endpoint or to the standard OTEL_EXPORTER_OTLP_TRACES_ENDPOINT /
// OTEL_EXPORTER_OTLP_ENDPOINT; off when none is set. gRPC rather than
// HTTP: the coordinator already links gRPC for its API, so the exporter
// adds no second transport stack, and OTLP/gRPC (port 4317) is what the
// OpenTelemetry Collector, Jaeger and Tempo accept by default.

// otlpEnv are the environment variables that turn exporting on without the
// flag (the exporter reads them, and the other OTEL_EXPORTER_OTLP_* ones:
// headers, certificates, timeout).
var otlpEnv = []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"}

// otlpOptions returns the exporter's options for --otlp-endpoint (flag),
// and whether to export at all. HOST:PORT and http://HOST:PORT are
// plaintext; https://HOST:PORT is TLS with the system's roots. With no
// flag, exporting is on when an otlpEnv variable is set, and the exporter
// reads the environment itself.
func otlpOptions(flag string) ([]otlptracegrpc.Option, bool, error) {
	if flag == "" {
		for _, v := range otlpEnv {
			if os.Getenv(v) != "" {
				return nil, true, nil
			}
		}
		return nil, false, nil
	}
	if strings.Contains(flag, "://") {
		u, err := url.Parse(flag)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, false, fmt.Errorf("--otlp-endpoint %q: use HOST:PORT, http://HOST:PORT (plaintext) or https://HOST:PORT (TLS), e.g. localhost:4317", flag)
		}
		return []otlptracegrpc.Option{otlptracegrpc.WithEndpointURL(flag)}, true, nil
	}
	if _, _, err := net.SplitHostPort(flag); err != nil {
		return nil, false, fmt.Errorf("--otlp-endpoint %q: %v: use HOST:PORT, http://HOST:PORT (plaintext) or https://HOST:PORT (TLS), e.g. localhost:4317", flag, err)
	}
	return []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(flag), otlptracegrpc.WithInsecure()}, true, nil
}

// otlpTracing starts the tracer provider that exports the coordinator's
// spans (nil when exporting is off). Its resource's service.name is
// "tandem-coordinator" unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES
// say otherwise; sampling follows the client's traceparent (the SDK's
// default, or OTEL_TRACES_SAMPLER). Export errors are logged as warnings.
// The caller shuts it down, which sends the spans still batched.
func otlpTracing(flag string, logger *slog.Logger) (*sdktrace.TracerProvider, error) {
	opts, on, err := otlpOptions(flag)
	if err != nil || !on {
		return nil, err
	}
	exp, err := otlptracegrpc.New(context.Background(), opts...) // connects lazily
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res, err := resource.New(context.Background(), resource.WithTelemetrySDK(),
		resource.WithAttributes(attribute.String("service.name", "tandem-coordinator")), resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("OTLP trace resource: %w", err)
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { logger.Warn("exporting traces failed", "error", err) }))
	endpoint := flag
	if endpoint == "" {
		endpoint = "from " + strings.Join(otlpEnv, " or ")
	}
	logger.Info("exporting the spans of traced calls over OTLP/gRPC", "endpoint", endpoint)
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}
