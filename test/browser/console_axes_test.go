//go:build browser

package browser

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/tandem-tx/tandem/internal/console"
	"github.com/tandem-tx/tandem/internal/coord"
	"github.com/tandem-tx/tandem/internal/server"
	"github.com/tandem-tx/tandem/waits"
)

// consoleCatchPlots, run in the page before its scripts, keeps every uPlot
// chart the page makes in window.__plots (the console keeps its own out of
// reach): the global the uPlot script assigns goes through a setter that
// wraps the constructor.
const consoleCatchPlots = `(() => {
  let wrapped;
  window.__plots = [];
  Object.defineProperty(window, "uPlot", { configurable: true, get: () => wrapped, set: real => {
    wrapped = function (opts, data, target) { const u = new real(opts, data, target); window.__plots.push(u); return u; };
    Object.assign(wrapped, real);
    wrapped.prototype = real.prototype;
  } });
})()`

// consoleAxisFit measures, for each vertical axis of each chart the page
// drew, the widest tick label in the axis's own font (as uPlot draws it,
// beside its tick and gap) against the room the axis has.
const consoleAxisFit = `(() => {
  const ctx = document.createElement("canvas").getContext("2d");
  const out = [];
  for (const u of window.__plots) {
    if (!u.root.isConnected) continue; // destroyed and redrawn
    u.axes.forEach((a, i) => {
      if (!a.show || (a.side !== 1 && a.side !== 3) || !a._values) return;
      ctx.font = a.font[0];
      let widest = "", w = 0;
      for (const v of a._values) {
        const m = ctx.measureText(String(v)).width / devicePixelRatio;
        if (m > w) { w = m; widest = String(v); }
      }
      out.push({ chart: u.root.parentNode.id, axis: i, label: widest, need: Math.ceil(w + (a.ticks.show ? a.ticks.size : 0) + a.gap), size: a._size });
    });
  }
  return out;
})()`

type consoleAxis struct {
	Chart string  `json:"chart"`
	Axis  int     `json:"axis"`
	Label string  `json:"label"`
	Need  float64 `json:"need"`
	Size  float64 `json:"size"`
}

// Every chart of the console, fed figures whose tick labels are wide
// ("140.0 ms" of waits a second, "12,000" commits a second, "976.6 KiB")
// after narrow ones, leaves each vertical axis room for its widest label:
// none is cut at the chart's edge. Before, the "Top wait events" axis was 60 px wide and showed
// "00.0 ms" for "100.0 ms". No database: the page's endpoints are canned.
func TestConsoleAxisLabelsFit(t *testing.T) {
	chromium := consoleChromium(t)
	f := func(v float64) *float64 { return &v }
	i := func(v int64) *int64 { return &v }
	// The first poll gets half a minute of small figures (narrow labels),
	// the next ones the wide figures: the axes must grow as the data does,
	// not only fit the figures a chart was made with.
	now := time.Now()
	var small, wide []console.Sample
	for k := 60; k > 0; k-- {
		s := console.Sample{T: now.Add(-time.Duration(k) * time.Second).UnixMilli(), Interval: 1,
			Commits: 50, Aborts: 1, LocalCommits: 5, CommitP50: f(0.0012), CommitP99: f(0.002),
			LogUsed: i(1 << 20), LogLimit: i(4 << 30), Fsyncs: 10, RecordsPerFsync: f(1.5),
			LagBytes: i(100), LagSeconds: f(0.001), Exposure: i(1),
			Waits: []console.Wait{{Side: "coordinator", Event: "rm commit prepared", Seconds: 0.001, Count: 50},
				{Side: "coordinator", Event: "log file sync", Seconds: 0.0002, Count: 10}}}
		if k > 30 {
			small = append(small, s)
			continue
		}
		s.Commits, s.Aborts, s.LocalCommits, s.CommitP99 = 12000, 40, 3000, f(0.15)
		s.LogUsed, s.Fsyncs, s.RecordsPerFsync = i(1536<<20), 2400, f(12.5)
		s.LagBytes, s.LagSeconds, s.Exposure = i(1536<<10), f(0.123), i(7)
		s.Waits = []console.Wait{{Side: "coordinator", Event: "rm commit prepared", Seconds: 0.14, Count: 9000},
			{Side: "coordinator", Event: "log file sync", Seconds: 0.002, Count: 2400}}
		wide = append(wide, s)
	}
	hist := waits.NewRegistry(waits.SideCoordinator)
	for range 12000 {
		hist.Record(waits.RMCommitPrepared, 300*time.Microsecond)
	}
	mux := http.NewServeMux()
	console.Register(mux)
	answer := func(path string, body any) {
		mux.HandleFunc("GET "+path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(body)
		})
	}
	mux.HandleFunc("GET /console/data", func(w http.ResponseWriter, r *http.Request) {
		d := server.ConsoleData{IntervalS: 1, Capacity: console.DefaultCapacity, Role: "primary", Standby: true, Samples: small}
		if r.URL.Query().Get("since") != "" {
			d.Samples = wide
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(d)
	})
	answer("/standby", map[string]any{"role": "primary", "epoch": 3, "transport": "sync", "protection": "max-protection", "connected": true,
		"protected": true, "standby": "127.0.0.1:7100", "lag_bytes": 1536 << 10, "lag_seconds": 0.123, "lag_records": 7, "cluster": "test"})
	answer("/unfinished", server.UnfinishedResponse{Role: "primary", Unfinished: []server.UnfinishedJSON{}, InDoubt: []coord.InDoubtBranch{}})
	answer("/waits", server.WaitsResponse{Coordinator: hist.Snapshot().JSON(true, false), Client: waits.NewRegistry(waits.SideClient).Snapshot().JSON(true, false)})
	srv := httptest.NewServer(console.Secure(mux))
	defer srv.Close()

	ctx, messages := consoleBrowser(t, chromium)
	if err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: consoleCatchPlots})
		return err
	}), chromedp.Navigate(srv.URL+"/")); err != nil {
		t.Fatal(err)
	}
	charts := []string{"c-throughput", "c-latency", "c-waits", "c-logspace", "c-fsync", "c-lag"}
	drawn := func() int {
		p, err := chromedp.Run(ctx, chromedp.Evaluate[consolePage](consoleReadPage))
		if err != nil {
			t.Fatal(err)
		}
		return len(p.Drawn)
	}
	consoleWait(t, "the six charts drawn with all 60 samples", 30*time.Second, func() bool {
		p, err := chromedp.Run(ctx, chromedp.Evaluate[consolePage](consoleReadPage))
		if err != nil {
			t.Fatal(err)
		}
		return len(p.Drawn) >= len(charts) && strings.HasSuffix(p.Updated, " 60 samples")
	})
	// The histogram of a wait event, drawn on a click of its row.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#t-waits tbody tr")), chromedp.WaitVisible(chromedp.CSS("#c-histo canvas"))); err != nil {
		t.Fatal(err)
	}
	consoleWait(t, "the histogram drawn", 30*time.Second, func() bool { return drawn() >= len(charts)+1 })
	axes, err := chromedp.Run(ctx, chromedp.Evaluate[[]consoleAxis](consoleAxisFit))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, a := range axes {
		seen[a.Chart] = true
		t.Logf("%s axis %d: widest label %q needs %.0f px, has %.0f", a.Chart, a.Axis, a.Label, a.Need, a.Size)
		if a.Need > a.Size {
			t.Errorf("%s: y axis %d is %.0f px wide, its label %q needs %.0f: it is cut", a.Chart, a.Axis, a.Size, a.Label, a.Need)
		}
	}
	for _, c := range append(charts, "c-histo") {
		if !seen[c] {
			t.Errorf("chart %s: no vertical axis measured", c)
		}
	}
	if e, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#error"))); err != nil || e != "" {
		t.Errorf("the page shows an error: %q %v", e, err)
	}
	consoleScreenshot(t, ctx, "console-axes.png")
	for _, m := range messages() {
		if m.IsException() || m.Type == chromedp.ConsoleError {
			t.Errorf("the page logged: %s", m.Text)
		}
	}
}
