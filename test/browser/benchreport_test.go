//go:build browser

package browser

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tandem-tx/tandem/internal/bench"
	"github.com/tandem-tx/tandem/internal/benchhtml"
)

// TestBenchReportInBrowser renders `tandem-bench --html` pages and opens
// them in headless Chromium: a db report (a real `--compare sql,xa` run's
// figures, internal/benchhtml/testdata, so no database is needed) and the
// report of a tiny `tandem-bench log` run made here. For each it waits for
// every chart to be drawn (a uPlot canvas of non-zero size with coloured
// pixels on it, the legend naming each series), checks the page said
// nothing on its console (no error, no uncaught exception) and saves a
// full-page screenshot in the test's temporary directory.
func TestBenchReportInBrowser(t *testing.T) {
	dir := t.TempDir()
	ctx := reportBrowser(t)

	t.Run("db", func(t *testing.T) {
		rep := reportCannedDB(t)
		page := filepath.Join(dir, "db.html")
		reportWrite(t, page, func(w io.Writer) error {
			return benchhtml.WriteDB(w, rep, benchhtml.Run{Command: []string{"tandem-bench", "db", "--compare", "sql,xa"}})
		})
		charts := reportOpen(t, ctx, page, filepath.Join(dir, "db.png"))
		if len(charts) != 3 {
			t.Fatalf("%d charts drawn, want 3 (TPS per slice, ratio per round, latency)", len(charts))
		}
		for _, want := range [][]string{{"sql", "xa"}, {"xa / sql", "whole run 0.404"}, {"sql (p50", "xa (p50"}} {
			if !slices.ContainsFunc(charts, func(c reportChart) bool { return reportLegendHas(c.Legend, want) }) {
				t.Errorf("no chart's legend names %q: %+v", want, charts)
			}
		}
		// The figures beside the charts: each workload's TPS in the summary.
		summary, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("summary").innerText`))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rep.Results {
			if tps := fmt.Sprintf("%.1f", r.TPS); r.TPS <= 0 || !strings.Contains(summary, tps) {
				t.Errorf("the summary does not show %s's %s TPS:\n%s", r.Workload, tps, summary)
			}
		}
		// The waits are tables beside each other, not charts: both sides there.
		sides, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#waits .side table.waits").length`))
		if err != nil || sides != 4 {
			t.Fatalf("%d wait tables (err %v), want 4: client and coordinator of sql and of xa", sides, err)
		}
	})

	// A workload name and a command line made to run script: shown as text,
	// never run, in the page, the legends and the charts.
	t.Run("hostile", func(t *testing.T) {
		const label = `</script><img src=x onerror="window.pwned=1"><script>window.pwned=2</script>`
		rep := reportCannedDB(t)
		rep.Results[0].Workload = label
		page := filepath.Join(dir, "hostile.html")
		reportWrite(t, page, func(w io.Writer) error {
			return benchhtml.WriteDB(w, rep, benchhtml.Run{Command: []string{"tandem-bench", "db", "--compare", label + ",xa"}})
		})
		charts := reportOpen(t, ctx, page, filepath.Join(dir, "hostile.png"))
		if !reportLegendHas(charts[0].Legend, []string{label}) {
			t.Errorf("the TPS chart's legend %q does not show the label as text", charts[0].Legend)
		}
		ran, err := chromedp.Run(ctx, chromedp.Evaluate[string](`String(window.pwned) + " " + document.querySelectorAll("img").length + " " + document.body.innerText.includes('onerror="window.pwned=1"')`))
		if err != nil || ran != "undefined 0 true" {
			t.Fatalf("window.pwned, <img> elements, label shown as text: %q (err %v), want \"undefined 0 true\"", ran, err)
		}
	})

	t.Run("log", func(t *testing.T) {
		cfg := bench.DefaultLogConfig()
		cfg.Dir, cfg.Duration, cfg.Committers = t.TempDir(), 0, []int{1, 4, 16}
		cfg.Records = 200
		rep, err := bench.Log(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		page := filepath.Join(dir, "log.html")
		reportWrite(t, page, func(w io.Writer) error {
			return benchhtml.WriteLog(w, rep, benchhtml.Run{Command: []string{"tandem-bench", "log", "--records", "200", "--committers", "1,4,16"}})
		})
		charts := reportOpen(t, ctx, page, filepath.Join(dir, "log.png"))
		if len(charts) != 3 {
			t.Fatalf("%d charts drawn, want 3 (decisions/s, fsyncs/s, p99)", len(charts))
		}
		for _, c := range charts {
			if !reportLegendHas(c.Legend, []string{"raw", "immediate", "batch"}) {
				t.Errorf("chart %s: legend %q, want raw, immediate and batch", c.ID, c.Legend)
			}
		}
	})
}

// reportChart is what the browser shows of one chart.
type reportChart struct {
	ID     string   `json:"id"`
	Width  int      `json:"width"`  // of its canvas, pixels
	Height int      `json:"height"` //
	Inked  int      `json:"inked"`  // canvas pixels that are not transparent
	Legend []string `json:"legend"` // the series' labels
}

// reportCannedDB is a real `tandem-bench db --compare sql,xa` run's report
// (internal/benchhtml/testdata).
func reportCannedDB(t *testing.T) *bench.DBReport {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "internal", "benchhtml", "testdata", "db-report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep bench.DBReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	return &rep
}

// reportBrowser starts headless Chromium for the test (TANDEM_CHROMIUM, or
// chromium, chromium-browser or google-chrome on PATH).
func reportBrowser(t *testing.T) context.Context {
	t.Helper()
	path := os.Getenv("TANDEM_CHROMIUM")
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if path != "" {
			break
		}
		path, _ = exec.LookPath(name)
	}
	if path == "" {
		t.Fatal("no Chromium: install Debian's chromium package (scripts/test does when it runs the browser tests) or set TANDEM_CHROMIUM to the browser's path")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(1280, 1000), chromedp.UserDataDir(t.TempDir()))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // start the browser, with no timeout (it would stop it)
		t.Fatalf("start %s: %v", path, err)
	}
	return ctx
}

// reportWrite writes a page to path.
func reportWrite(t *testing.T, path string, write func(io.Writer) error) {
	t.Helper()
	var buf bytes.Buffer
	if err := write(&buf); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d KB", filepath.Base(path), (buf.Len()+1023)/1024)
}

// reportOpen opens the page from its file, waits until every chart of its
// data block is drawn, fails on anything the page said on its console, saves
// a full-page screenshot to shot and returns the charts as drawn.
func reportOpen(t *testing.T, ctx context.Context, page, shot string) []reportChart {
	t.Helper()
	var mu sync.Mutex
	var said []chromedp.ConsoleMessage
	lctx, stopListening := context.WithCancel(ctx)
	msgs := chromedp.Console(lctx) // subscribed from here on
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range msgs {
			if err != nil {
				return
			}
			mu.Lock()
			said = append(said, m)
			mu.Unlock()
		}
	}()

	tctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	u := url.URL{Scheme: "file", Path: page}
	if err := chromedp.Do(tctx, chromedp.Navigate(u.String())); err != nil {
		t.Fatalf("open %s: %v", u.String(), err)
	}
	// The page's script sets data-charts-drawn once it has made every chart.
	want, err := chromedp.Run(tctx, chromedp.Evaluate[int](`JSON.parse(document.getElementById("tandem-bench-data").textContent).charts.length`))
	if err != nil {
		t.Fatalf("read the page's data block: %v", err)
	}
	if _, err := chromedp.Run(tctx, chromedp.Poll[string](fmt.Sprintf(`document.body.dataset.chartsDrawn === "%d" && "drawn"`, want),
		chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		drawn, _ := chromedp.Run(tctx, chromedp.Evaluate[string](`document.body.dataset.chartsDrawn || "none"`))
		t.Fatalf("the charts were not all drawn: %v (drawn: %s of %d; console: %q)", err, drawn, want, said)
	}
	// uPlot draws on the next animation frame: wait until every canvas has ink.
	const measure = `Array.from(document.querySelectorAll("[data-chart]")).map(el => {
		const c = el.querySelector(".uplot canvas");
		let inked = 0;
		if (c && c.width > 0 && c.height > 0) {
			const px = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
			for (let i = 3; i < px.length; i += 4) { if (px[i] !== 0) inked++; }
		}
		return {id: el.dataset.chart, width: c ? c.width : 0, height: c ? c.height : 0, inked: inked,
			legend: Array.from(el.querySelectorAll(".u-legend .u-series .u-label")).map(l => l.textContent)};
	})`
	if _, err := chromedp.Run(tctx, chromedp.Poll[bool](measure+`.every(c => c.inked > 1000)`, chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		charts, _ := chromedp.Run(tctx, chromedp.Evaluate[[]reportChart](measure))
		t.Fatalf("not every chart has been drawn on its canvas: %v: %+v", err, charts)
	}
	charts, err := chromedp.Run(tctx, chromedp.Evaluate[[]reportChart](measure))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range charts {
		if c.Width < 300 || c.Height < 200 || len(c.Legend) == 0 {
			t.Errorf("chart %s: canvas %dx%d, legend %q: want a real chart with its series named", c.ID, c.Width, c.Height, c.Legend)
		}
	}
	png, err := chromedp.Run(tctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s (%d KB); charts %+v", shot, len(png)/1024, charts)

	// Whatever the page said while loading and drawing has arrived by now:
	// the page's own evaluations above went through the same connection.
	stopListening()
	<-done
	mu.Lock()
	defer mu.Unlock()
	for _, m := range said {
		if m.Type == chromedp.ConsoleError || m.IsException() {
			t.Errorf("the page's console: %s", m.String())
		} else {
			t.Logf("the page's console (not an error): %s", m.String()) // e.g. the readback of the check above
		}
	}
	return charts
}

// reportLegendHas reports whether every label of want starts one of legend's.
func reportLegendHas(legend, want []string) bool {
	for _, w := range want {
		if !slices.ContainsFunc(legend, func(l string) bool { return strings.HasPrefix(l, w) }) {
			return false
		}
	}
	return true
}
