package server

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tandem-tx/tandem/internal/config"
	"github.com/tandem-tx/tandem/internal/waits"
)

// A coordinator whose databases are unreachable still starts and serves its
// admin endpoints.
func TestAdminListener(t *testing.T) {
	s, err := Start(config.Config{
		Listen: "127.0.0.1:0", DataDir: t.TempDir(),
		RMs: map[string]config.RM{"pg": {Driver: "postgres", DSN: "postgres://u:p@127.0.0.1:1/db"}},
	}, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), NoSync: true, Admin: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop(time.Second)
	waits.Coordinator.Record(waits.RMCommitPrepared, 2*time.Millisecond)

	get := func(path string) string {
		resp, err := http.Get("http://" + s.AdminAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %s\n%s", path, resp.Status, b)
		}
		return string(b)
	}
	var w WaitsResponse
	if err := json.Unmarshal([]byte(get("/waits?buckets=1")), &w); err != nil {
		t.Fatal(err)
	}
	if w.Coordinator.Side != waits.SideCoordinator || len(w.Coordinator.BucketsLeS) != waits.NumBuckets {
		t.Fatalf("/waits: %+v", w.Coordinator)
	}
	found := false
	for _, e := range w.Coordinator.Events {
		found = found || (e.Event == "rm commit prepared" && e.Count >= 1 && len(e.Buckets) == waits.NumBuckets)
	}
	if !found {
		t.Fatalf("/waits has no rm commit prepared: %+v", w.Coordinator.Events)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(get("/metrics")))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"tandem_wait_seconds", "tandem_commit_outcomes_total", MetricPhase2Backlog, MetricLogSpaceUsed} {
		if fams[name] == nil {
			t.Errorf("/metrics has no %s", name)
		}
	}
}

// A busy admin address stops the start, unless best effort.
func TestAdminAddressTaken(t *testing.T) {
	cfg := config.Config{Listen: "127.0.0.1:0", RMs: map[string]config.RM{"pg": {Driver: "postgres", DSN: "postgres://u:p@127.0.0.1:1/db"}}}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.DataDir = t.TempDir()
	first, err := Start(cfg, Options{Logger: quiet, NoSync: true, Admin: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Stop(time.Second)
	cfg.DataDir = t.TempDir()
	if _, err := Start(cfg, Options{Logger: quiet, NoSync: true, Admin: first.AdminAddr()}); err == nil || !strings.Contains(err.Error(), "admin listener") {
		t.Fatalf("second start on a taken admin address: %v", err)
	}
	second, err := Start(cfg, Options{Logger: quiet, NoSync: true, Admin: first.AdminAddr(), AdminBestEffort: true})
	if err != nil {
		t.Fatalf("best effort: %v", err)
	}
	defer second.Stop(time.Second)
	if second.AdminAddr() != "" {
		t.Fatalf("best effort got an admin address %s", second.AdminAddr())
	}
}

func TestRequireToken(t *testing.T) {
	h := RequireToken(AdminHandler(), "s3cret")
	for _, c := range []struct {
		auth string
		want int
	}{{"", 401}, {"Bearer nope", 401}, {"s3cret", 401}, {"Bearer s3cret", 200}} {
		req := httptest.NewRequest("GET", "/waits", nil)
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != c.want {
			t.Errorf("Authorization %q: %d, want %d", c.auth, rec.Code, c.want)
		}
	}
	if RequireToken(AdminHandler(), "") == nil {
		t.Fatal("no token: nil handler")
	}
}
