// Package benchhtml writes a benchmark report of tandem-bench as one
// self-contained HTML page: the uPlot charting library (internal/webassets),
// the page's own script and style and the run's figures are all inlined, so
// the file opens from disk with no network and can be mailed or attached to
// an issue as it is.
//
// A database run (WriteDB) shows TPS per slice for each workload, in the
// order the slices ran (so drift and interleaving are visible), the ratio
// per round of slices, the latency distributions, and each workload's
// client and coordinator waits side by side; a log run (WriteLog) shows
// decisions/s, fdatasyncs/s and latency against the number of committers on
// log scales. Both start with the run's conditions: the command line, the
// machine and its CPU use during the run, and the bench's warnings.
//
// Everything that comes from the command line or the run (labels, paths,
// error texts) goes through html/template: it is escaped in the page's text
// and JSON-encoded in its data block, never interpreted as markup or script.
// The figures are in a <script type="application/json" id="tandem-bench-data">
// block; the charts are drawn from it when the page loads.
package benchhtml

import (
	"bytes"
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"runtime"
	"strings"
	"time"

	"github.com/tandem-tx/tandem/internal/webassets"
)

//go:embed page.html.tmpl
var pageSource string

//go:embed page.js
var pageScript string

//go:embed page.css
var pageStyle string

var page = template.Must(template.New("page").Parse(pageSource))

// Run is how a report was made, for the page's conditions.
type Run struct {
	// Command is the command line, program name first.
	Command []string
	// At is when the run ended (default: now).
	At time.Time
}

// Chart is one chart of the page, ready for uPlot: Data[0] holds the x
// values, Data[i] the values of Series[i-1] at those x (nil where the
// series has no point; the line spans the gap).
type Chart struct {
	ID     string `json:"id"`
	Title  string `json:"title"`
	XLabel string `json:"x_label"`
	YLabel string `json:"y_label"`
	// XLog and YLog: the base of a log-scale axis (2 or 10); 0 for linear.
	XLog   int      `json:"x_log,omitempty"`
	YLog   int      `json:"y_log,omitempty"`
	Series []string `json:"series"`
	// Dashed marks the series drawn as a dashed line without points (a
	// reference, such as the whole run's figure); nil for none.
	Dashed []bool       `json:"dashed,omitempty"`
	Data   [][]*float64 `json:"data"`
	// Note is a line under the chart saying how to read it.
	Note string `json:"note,omitempty"`
}

// data is the page's JSON block.
type data struct {
	Kind   string  `json:"kind"` // "db" or "log"
	Charts []Chart `json:"charts"`
	// Report is the bench's own JSON report, for whoever wants more than
	// the charts (the db report's traces are left out).
	Report any `json:"report"`
}

// view is what the template renders.
type view struct {
	Title      string
	Conditions [][2]string
	Warnings   []string
	Summary    *table
	Headline   string // e.g. the ratio
	Charts     []Chart
	Waits      []waitPanel
	Extra      []*table
	Data       data
	UPlotCSS   template.CSS
	UPlotJS    template.JS
	Style      template.CSS
	Script     template.JS
	Version    string
}

// table is a plain table of text cells.
type table struct {
	Caption string
	Head    []string
	Rows    [][]string
}

func conditions(run Run) [][2]string {
	at := run.At
	if at.IsZero() {
		at = time.Now()
	}
	return [][2]string{
		{"command", shellJoin(run.Command)},
		{"ended", at.UTC().Format("2006-01-02 15:04:05 UTC")},
		{"built with", runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH},
	}
}

// render executes the page template into a buffer.
func render(w io.Writer, v *view) error {
	css, err := fs.ReadFile(webassets.UPlot, "uplot/uPlot.min.css")
	if err != nil {
		return fmt.Errorf("benchhtml: the embedded uPlot style: %w", err)
	}
	js, err := fs.ReadFile(webassets.UPlot, "uplot/uPlot.iife.min.js")
	if err != nil {
		return fmt.Errorf("benchhtml: the embedded uPlot script: %w", err)
	}
	v.UPlotCSS, v.UPlotJS = template.CSS(css), template.JS(js)
	v.Style, v.Script = template.CSS(pageStyle), template.JS(pageScript)
	v.Version = webassets.UPlotVersion
	v.Data.Charts = v.Charts
	var buf bytes.Buffer
	if err := page.Execute(&buf, v); err != nil {
		return fmt.Errorf("benchhtml: render the page: %w", err)
	}
	_, err = w.Write(buf.Bytes())
	return err
}

// shellJoin quotes args as a POSIX shell would need them.
func shellJoin(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=,@%+", r))
		}) < 0 {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}

// num returns a pointer to v, for a chart's data.
func num(v float64) *float64 { return &v }
