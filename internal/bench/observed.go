package bench

import (
	"context"
	"io"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/tandem-tx/tandem/client"
	"github.com/tandem-tx/tandem/client/prommetrics"
)

// The xa-observed workload is xa with everything an observed service turns
// on: every transaction traced (an OpenTelemetry SDK tracer provider,
// always sampling, its spans batched to an exporter that drops them — the
// SDK's whole cost but the network's) and the client's metrics registered
// on a Prometheus registry that is scraped (gathered and written out)
// every second. `--compare xa,xa-observed` is their overhead in one window
// (issue 23's target: at least 0.97). The SDK counts its outcomes and
// waits in every workload: there is no "metrics off" to compare with.

// WorkloadXAObserved is xa observed: traced and scraped, as above.
const WorkloadXAObserved = "xa-observed"

// discardExporter drops every span it is given.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// observer is xa-observed's tracer provider and scraper.
type observer struct {
	tp   *sdktrace.TracerProvider
	stop chan struct{}
	wg   sync.WaitGroup
}

// observe sets cfg up for xa-observed; start it on the client.
func observe(cfg *client.Config) *observer {
	o := &observer{tp: sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithBatcher(discardExporter{})), stop: make(chan struct{})}
	cfg.TracerProvider = o.tp
	return o
}

// start registers cli's metrics and scrapes them every second until close.
func (o *observer) start(cli *client.Client) error {
	reg := prometheus.NewRegistry()
	if err := prommetrics.Register(reg, cli); err != nil {
		return err
	}
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-o.stop:
				return
			case <-t.C:
			}
			fams, err := reg.Gather()
			if err != nil {
				continue
			}
			for _, f := range fams {
				_, _ = expfmt.MetricFamilyToText(io.Discard, f)
			}
		}
	}()
	return nil
}

func (o *observer) close() {
	close(o.stop)
	o.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = o.tp.Shutdown(ctx)
}
