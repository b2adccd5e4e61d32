package benchhtml

import (
	"bytes"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/net/html"

	"github.com/tandem-tx/tandem/internal/bench"
	"github.com/tandem-tx/tandem/internal/webassets"
)

// hostile is a label that would run script if it reached the page unescaped.
const hostile = `</script><img src=x onerror="alert(1)">'"&`

// cannedDB is a real `tandem-bench db --compare sql,xa` report (testdata),
// its first workload renamed to name.
func cannedDB(t *testing.T, name string) *bench.DBReport {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "db-report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep bench.DBReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	rep.Results[0].Workload = name
	return &rep
}

// pageParts checks that page is well-formed HTML that loads nothing from
// elsewhere and returns its JSON data block, decoded, and its scripts' count.
func pageParts(t *testing.T, page []byte) (pageData, int) {
	t.Helper()
	z := html.NewTokenizer(bytes.NewReader(page))
	scripts, inData := 0, false
	var raw string
	var open []string
	for {
		tt := z.Next()
		switch tt {
		case html.ErrorToken:
			if z.Err() != io.EOF {
				t.Fatalf("page does not tokenize: %v", z.Err())
			}
			if len(open) != 0 {
				t.Fatalf("elements left open at the end: %v", open)
			}
			if raw == "" {
				t.Fatal("no #tandem-bench-data block")
			}
			var d pageData
			if err := json.Unmarshal([]byte(raw), &d); err != nil {
				t.Fatalf("the data block is not JSON: %v\n%.300s", err, raw)
			}
			return d, scripts
		case html.StartTagToken, html.SelfClosingTagToken:
			tok := z.Token()
			for _, a := range tok.Attr {
				if a.Key == "src" || a.Key == "href" || strings.HasPrefix(a.Key, "on") {
					t.Fatalf("<%s %s=%q>: the page must load nothing and carry no handlers", tok.Data, a.Key, a.Val)
				}
			}
			switch tok.Data {
			case "img", "iframe", "object", "embed", "link":
				t.Fatalf("unexpected <%s> element", tok.Data)
			case "script":
				scripts++
				for _, a := range tok.Attr {
					if a.Key == "id" && a.Val == "tandem-bench-data" {
						inData = true
					}
				}
			}
			if tt == html.StartTagToken && !voidElement(tok.Data) {
				open = append(open, tok.Data)
			}
		case html.EndTagToken:
			tok := z.Token()
			if len(open) == 0 || open[len(open)-1] != tok.Data {
				t.Fatalf("</%s> closes %v", tok.Data, open)
			}
			open = open[:len(open)-1]
			inData = false
		case html.TextToken:
			if inData {
				raw += string(z.Text())
			}
		}
	}
}

func voidElement(tag string) bool {
	switch tag {
	case "meta", "br", "hr", "input", "col", "wbr":
		return true
	}
	return false
}

// pageData is the page's JSON block as a reader of the file sees it.
type pageData struct {
	Kind   string          `json:"kind"`
	Charts []Chart         `json:"charts"`
	Report json.RawMessage `json:"report"`
}

func chartByID(t *testing.T, d pageData, id string) Chart {
	t.Helper()
	for _, c := range d.Charts {
		if c.ID == id {
			return c
		}
	}
	t.Fatalf("no chart %q in %d charts", id, len(d.Charts))
	return Chart{}
}

// TestDBPage renders a real db report and checks the page: well-formed,
// self-contained, its charts' data those of the report, the waits side by
// side, and a hostile workload name and command line escaped everywhere.
func TestDBPage(t *testing.T) {
	rep := cannedDB(t, hostile)
	rep.ActivityEveryS = 0.05
	rep.Results[1].DBActivity = []bench.DBActivity{{RM: "maria", Statement: "XA COMMIT ONE PHASE", Wait: "starting", Samples: 3229, Share: 0.513, PerTxnMs: 8.995},
		{RM: "maria", Statement: hostile, Wait: "InnoDB lock wait", Samples: 2, Share: 0.001, PerTxnMs: 0.004}}
	var buf bytes.Buffer
	if err := WriteDB(&buf, rep, Run{Command: []string{"tandem-bench", "db", "--compare", hostile + ",xa"}}); err != nil {
		t.Fatal(err)
	}
	page := buf.Bytes()
	if bytes.Contains(page, []byte(`<img`)) || bytes.Contains(page, []byte(`onerror="alert`)) {
		t.Fatal("the hostile label reached the page unescaped")
	}
	if bytes.Contains(page, []byte("ZgotmplZ")) {
		t.Fatal("html/template refused a value (ZgotmplZ) somewhere in the page")
	}
	d, scripts := pageParts(t, page)
	if scripts != 3 {
		t.Fatalf("%d <script> elements, want 3 (data, uPlot, the page's)", scripts)
	}
	js, _ := fs.ReadFile(webassets.UPlot, "uplot/uPlot.iife.min.js")
	css, _ := fs.ReadFile(webassets.UPlot, "uplot/uPlot.min.css")
	if !bytes.Contains(page, js) || !bytes.Contains(page, css) {
		t.Fatal("uPlot's script or style is not inlined verbatim")
	}
	if d.Kind != "db" {
		t.Fatalf("kind %q", d.Kind)
	}
	var back bench.DBReport
	if err := json.Unmarshal(d.Report, &back); err != nil {
		t.Fatal(err)
	}
	if back.Results[0].Workload != hostile {
		t.Fatalf("the data block's workload is %q, want the label back intact", back.Results[0].Workload)
	}
	// The command line is shown, escaped, as text.
	if !strings.Contains(html.UnescapeString(string(page)), shellJoin([]string{"tandem-bench", "db", "--compare", hostile + ",xa"})) {
		t.Fatal("the command line is not on the page")
	}

	tps := chartByID(t, d, "tps-slices")
	n := len(rep.Results[0].Slices) + len(rep.Results[1].Slices)
	if n == 0 || len(tps.Data) != 3 || len(tps.Data[0]) != n {
		t.Fatalf("tps-slices: %d series, %d points; want 2 series over %d slices", len(tps.Data)-1, len(tps.Data[0]), n)
	}
	s0 := rep.Results[0].Slices[0]
	if got, want := *tps.Data[1][0], float64(s0.Txns)/s0.Seconds; got < want-0.1 || got > want+0.1 || tps.Data[2][0] != nil {
		t.Fatalf("first slice: %v TPS (other series %v), want %.1f for the first workload alone", got, tps.Data[2][0], want)
	}
	for i := 1; i < n; i++ {
		if *tps.Data[0][i] <= *tps.Data[0][i-1] {
			t.Fatalf("slice times not increasing: %v", tps.Data[0])
		}
		if (tps.Data[1][i] == nil) == (tps.Data[1][i-1] == nil) {
			t.Fatalf("slices %d and %d of the same workload: the interleaving is lost", i-1, i)
		}
	}
	ratio := chartByID(t, d, "ratio-rounds")
	if len(ratio.Data[0]) != min(len(rep.Results[0].Slices), len(rep.Results[1].Slices)) {
		t.Fatalf("ratio per round: %d rounds", len(ratio.Data[0]))
	}
	a, b := rep.Results[0].Slices[0], rep.Results[1].Slices[0]
	if got, want := *ratio.Data[1][0], (float64(b.Txns)/b.Seconds)/(float64(a.Txns)/a.Seconds); got < want-0.001 || got > want+0.001 {
		t.Fatalf("first round's ratio %v, want %.3f", got, want)
	}
	if len(ratio.Dashed) != 2 || !ratio.Dashed[1] || *ratio.Data[2][0] != *rep.Ratio {
		t.Fatalf("ratio chart: series %v dashed %v, want the whole run's %v as a dashed reference", ratio.Series, ratio.Dashed, *rep.Ratio)
	}
	lat := chartByID(t, d, "latency")
	for i := 1; i <= 2; i++ {
		sum := 0.0
		for _, v := range lat.Data[i] {
			sum += *v
		}
		if sum < 99.9 || sum > 100.1 {
			t.Fatalf("latency series %d adds up to %.2f%%", i, sum)
		}
	}
	if lat.XLog != 10 {
		t.Fatalf("latency x axis log base %d, want 10", lat.XLog)
	}
	text := html.UnescapeString(string(page))
	for _, want := range []string{"ratio TPS(xa) / TPS(" + hostile + ") = 0.404", "coordinator commit", "log file sync", "rm prepare", "pg (postgres)", "Binlog_group_commits",
		"sampled every 0.05 s", "XA COMMIT ONE PHASE", "starting", "51.3%", "8.995", "InnoDB lock wait"} {
		if !strings.Contains(text, want) {
			t.Errorf("the page does not show %q", want)
		}
	}
}

// TestLogPage renders a log report: committers on a log-2 axis, one series
// per mode, a missing cell as a gap, the figures in the table.
func TestLogPage(t *testing.T) {
	r := 1.25
	rep := &bench.LogReport{FSInfo: bench.FSInfo{Type: hostile}, RecordSize: 64, RecordBytes: 72, CellSeconds: 1, GOMAXPROCS: 2, OtherCPUPercent: 3,
		SingleLatencyRatio: &r, Rows: []bench.LogRow{
			{Mode: bench.ModeRaw, Committers: 1, DecisionsPerSec: 500, FsyncsPerSec: 500, P99ms: 3},
			{Mode: bench.ModeImmediate, Committers: 1, DecisionsPerSec: 400, FsyncsPerSec: 400, P99ms: 4},
			{Mode: bench.ModeImmediate, Committers: 64, DecisionsPerSec: 12800, FsyncsPerSec: 600, P99ms: 9},
			{Mode: bench.ModeBatch, Committers: 64, DecisionsPerSec: 22000, FsyncsPerSec: 350, P99ms: 5},
		}}
	var buf bytes.Buffer
	if err := WriteLog(&buf, rep, Run{Command: []string{"tandem-bench", "log", "--committers", "1,64"}}); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(buf.Bytes(), []byte(`<img`)) {
		t.Fatal("the hostile file system name reached the page unescaped")
	}
	d, _ := pageParts(t, buf.Bytes())
	c := chartByID(t, d, "decisions")
	if c.XLog != 2 || c.YLog != 10 || len(c.Series) != 3 || len(c.Data[0]) != 2 {
		t.Fatalf("decisions chart: x log %d, y log %d, series %v, x %d points", c.XLog, c.YLog, c.Series, len(c.Data[0]))
	}
	if *c.Data[0][1] != 64 || *c.Data[2][1] != 12800 || c.Data[1][1] != nil || c.Data[3][0] != nil {
		t.Fatalf("decisions chart data wrong: x %v, immediate at 64 %v, raw at 64 %v (want none), batch at 1 %v (want none)",
			*c.Data[0][1], *c.Data[2][1], c.Data[1][1], c.Data[3][0])
	}
	if f := chartByID(t, d, "fsyncs"); *f.Data[3][1] != 350 {
		t.Fatalf("fsyncs/s of batch at 64: %v", *f.Data[3][1])
	}
	if !strings.Contains(html.UnescapeString(buf.String()), "single_latency_ratio 1.25") {
		t.Fatal("the derived figure is not on the page")
	}
}

func TestShellJoin(t *testing.T) {
	got := shellJoin([]string{"tandem bench", "db", "--html", "/tmp/a b.html", "it's", ""})
	if want := `'tandem bench' db --html '/tmp/a b.html' 'it'\''s' ''`; got != want {
		t.Fatalf("shellJoin = %s, want %s", got, want)
	}
}
