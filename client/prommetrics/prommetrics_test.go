package prommetrics_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tandem-tx/tandem/client"
	"github.com/tandem-tx/tandem/client/prommetrics"
	"github.com/tandem-tx/tandem/internal/metrics"
	"github.com/tandem-tx/tandem/waits"
)

func newClient(t *testing.T, reg *waits.Registry) *client.Client {
	t.Helper()
	cli, err := client.New(client.Config{Waits: reg, RMs: []client.RM{{Name: "pg", Driver: "postgres"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// A scrape of clients that share a wait registry parses, has every family,
// counts each shared registry once, and writes the wait events exactly as
// the coordinator's /metrics does (same names, labels, buckets, values).
func TestScrapeParsesAndMatchesTheCoordinatorsWaitFormat(t *testing.T) {
	reg := waits.NewRegistry(waits.SideClient)
	reg.Record(waits.RMPrepare, 700*time.Microsecond)
	reg.Record(waits.RMPrepare, 3*time.Millisecond)
	reg.Record(waits.CoordinatorCommit, 2*time.Second)
	a, b := newClient(t, reg), newClient(t, reg)
	pr := prometheus.NewPedanticRegistry()
	if err := prommetrics.Register(pr, a, b); err != nil {
		t.Fatal(err)
	}
	if err := prommetrics.Register(pr, a); err == nil {
		t.Error("a second collector on the same registry was accepted: its series would collide")
	}
	fams, err := pr.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	var text bytes.Buffer
	for _, f := range fams {
		if _, err := expfmt.MetricFamilyToText(&text, f); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{prommetrics.CommitsTotal, prommetrics.CommitSeconds, prommetrics.AbortsTotal, prommetrics.UnknownTotal,
		prommetrics.FailedCommitSeconds, prommetrics.RollbacksTotal, prommetrics.CoordinatorCallsTotal, prommetrics.UnrecoverableTotal,
		prommetrics.WaitSeconds, prommetrics.WaitMaxSeconds} {
		if !strings.Contains(text.String(), "# TYPE "+name+" ") {
			t.Errorf("the scrape has no %s", name)
		}
	}
	for _, line := range []string{`tandem_client_commits_total{path="commit-point"} 0`, `tandem_client_aborts_total{stage="prepare"} 0`,
		`tandem_wait_seconds_count{event="rm prepare",side="client"} 2`, `tandem_wait_seconds_bucket{event="rm prepare",side="client",le="0.001024"} 1`,
		`tandem_wait_max_seconds{event="coordinator commit",side="client"} 2`} {
		if !strings.Contains(text.String(), line+"\n") {
			t.Errorf("the scrape lacks %q", line)
		}
	}
	// The coordinator's own writer, over the same registry: every wait
	// sample must be in this scrape with the same value (both parsed by
	// the Prometheus parser, which normalises the label order).
	var coord bytes.Buffer
	if err := metrics.WritePrometheus(&coord, reg); err != nil {
		t.Fatal(err)
	}
	theirs, ours := samples(t, coord.String()), samples(t, text.String())
	n := 0
	for k, v := range theirs {
		if !strings.HasPrefix(k, "tandem_wait_") {
			continue
		}
		n++
		if got, ok := ours[k]; !ok || got != v {
			t.Errorf("%s: the coordinator writes %v, the SDK's scrape %v (present %v)", k, v, got, ok)
		}
	}
	if n < 100 {
		t.Fatalf("only %d wait samples compared", n)
	}
}

// samples parses a text exposition into "name{labels}" → value, each
// histogram as its _bucket, _sum and _count samples.
func samples(t *testing.T, text string) map[string]float64 {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("does not parse: %v\n%s", err, text)
	}
	out := map[string]float64{}
	for _, f := range fams {
		vec, err := expfmt.ExtractSamples(&expfmt.DecodeOptions{Timestamp: model.Now()}, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, smp := range vec {
			out[smp.Metric.String()] = float64(smp.Value)
		}
	}
	return out
}
