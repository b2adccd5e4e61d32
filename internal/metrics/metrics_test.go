package metrics

import (
	"math"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tandem-tx/tandem/waits"
)

// parse reads the exposition with Prometheus's own text parser.
func parse(t *testing.T, text string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("the Prometheus text parser refused the exposition: %v\n%s", err, text)
	}
	return fams
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func TestExpositionParsesAndHasEveryEvent(t *testing.T) {
	coordReg, clientReg := waits.NewRegistry(waits.SideCoordinator), waits.NewRegistry(waits.SideClient)
	coordReg.Record(waits.LogFileSync, 700*time.Microsecond)
	coordReg.Record(waits.LogFileSync, 3*time.Millisecond)
	clientReg.Record(waits.RMPrepare, time.Hour) // the +Inf bucket
	c := Counter("tandem_test_outcomes_total", "Test \"outcomes\".", "outcome", `we"ird\value`)
	c.Add(3)
	unreg := Gauge("tandem_test_backlog", "A test gauge\nwith two lines.", func() float64 { return 42 })
	defer unreg()
	unNaN := Gauge("tandem_test_unknown", "Not reported.", func() float64 { return math.NaN() })
	defer unNaN()

	var b strings.Builder
	if err := WritePrometheus(&b, coordReg, clientReg); err != nil {
		t.Fatal(err)
	}
	fams := parse(t, b.String())

	h := fams[WaitSeconds]
	if h == nil || h.GetType() != dto.MetricType_HISTOGRAM {
		t.Fatalf("no histogram %s", WaitSeconds)
	}
	seen := map[string]map[string]*dto.Histogram{waits.SideCoordinator: {}, waits.SideClient: {}}
	for _, m := range h.GetMetric() {
		seen[label(m, "side")][label(m, "event")] = m.GetHistogram()
	}
	for _, e := range waits.Events() {
		for side := range seen {
			if seen[side][e.String()] == nil {
				t.Errorf("no histogram for side %s, event %q", side, e)
			}
		}
	}
	sync := seen[waits.SideCoordinator]["log file sync"]
	if sync.GetSampleCount() != 2 || math.Abs(sync.GetSampleSum()-0.0037) > 1e-12 {
		t.Errorf("log file sync: count %d sum %v", sync.GetSampleCount(), sync.GetSampleSum())
	}
	for _, bk := range sync.GetBucket() {
		var want uint64
		switch {
		case bk.GetUpperBound() >= 0.004096:
			want = 2
		case bk.GetUpperBound() >= 0.001024:
			want = 1
		}
		if bk.GetCumulativeCount() != want {
			t.Errorf("log file sync bucket le=%v: %d, want %d", bk.GetUpperBound(), bk.GetCumulativeCount(), want)
		}
	}
	if p := seen[waits.SideClient]["rm prepare"]; p.GetSampleCount() != 1 {
		t.Errorf("rm prepare count %d", p.GetSampleCount())
	} else {
		for _, bk := range p.GetBucket() {
			if !math.IsInf(bk.GetUpperBound(), 1) && bk.GetCumulativeCount() != 0 {
				t.Errorf("an hour-long wait counted below le=%v", bk.GetUpperBound())
			}
		}
	}
	if mx := fams[WaitMaxSeconds]; mx == nil || len(mx.GetMetric()) != 2*len(waits.Events()) {
		t.Errorf("%s: %v", WaitMaxSeconds, mx)
	}
	ctr := fams["tandem_test_outcomes_total"]
	if ctr == nil || ctr.GetType() != dto.MetricType_COUNTER || ctr.GetMetric()[0].GetCounter().GetValue() != 3 ||
		label(ctr.GetMetric()[0], "outcome") != `we"ird\value` {
		t.Errorf("counter: %v", ctr)
	}
	if g := fams["tandem_test_backlog"]; g == nil || g.GetType() != dto.MetricType_GAUGE || g.GetMetric()[0].GetGauge().GetValue() != 42 {
		t.Errorf("gauge: %v", g)
	}
	if g := fams["tandem_test_unknown"]; g == nil || !math.IsNaN(g.GetMetric()[0].GetGauge().GetValue()) {
		t.Errorf("NaN gauge: %v", g)
	}
}

func TestGaugeUnregisterAndReplace(t *testing.T) {
	un1 := Gauge("tandem_test_replace", "x", func() float64 { return 1 })
	un2 := Gauge("tandem_test_replace", "x", func() float64 { return 2 })
	un1() // the first was replaced already: removing it must not remove the second
	var b strings.Builder
	_ = WritePrometheus(&b)
	if g := parse(t, b.String())["tandem_test_replace"]; g == nil || g.GetMetric()[0].GetGauge().GetValue() != 2 {
		t.Fatalf("after replace: %v", g)
	}
	un2()
	b.Reset()
	_ = WritePrometheus(&b)
	if g := parse(t, b.String())["tandem_test_replace"]; g != nil {
		t.Fatalf("after unregister: %v", g)
	}
}

func TestCounterValue(t *testing.T) {
	if _, ok := CounterValue("test_countervalue_total", "k", "v"); ok {
		t.Fatal("CounterValue found a counter never made")
	}
	Counter("test_countervalue_total", "a test counter", "k", "v").Add(3)
	if v, ok := CounterValue("test_countervalue_total", "k", "v"); !ok || v != 3 {
		t.Errorf("CounterValue = %d, %v; want 3, true", v, ok)
	}
	if _, ok := CounterValue("test_countervalue_total", "k", "other"); ok {
		t.Error("CounterValue found a counter of other labels")
	}
}
