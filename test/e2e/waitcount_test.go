package e2e

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tandem-tx/tandem/waits"
)

// coordinatorWaits reads how many waits of event the coordinator whose
// admin listener is admin has recorded (its /metrics histogram
// tandem_wait_seconds, side coordinator): a count, which a busy machine
// does not change, where a duration would.
func coordinatorWaits(t *testing.T, admin string, event waits.Event) uint64 {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(b)))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	for _, m := range fams["tandem_wait_seconds"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["side"] == waits.SideCoordinator && labels["event"] == event.String() {
			return m.GetHistogram().GetSampleCount()
		}
	}
	t.Fatalf("/metrics has no histogram for event %q", event)
	return 0
}
