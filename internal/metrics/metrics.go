// Package metrics exposes Tandem's process-wide metrics in the Prometheus
// text format (version 0.0.4): a histogram per wait event and side
// (tandem_wait_seconds), the largest wait of each (tandem_wait_max_seconds),
// counters such as commit outcomes, and gauges read from functions at scrape
// time (phase-2 backlog, log space used).
//
// A gauge is a function that the owner of the value registers once:
//
//	unregister := metrics.Gauge("tandem_phase2_backlog",
//		"decided transactions whose phase 2 has not finished",
//		func() float64 { return float64(c.Phase2Backlog()) })
//	defer unregister()
//
// A counter is an atomic cell found by name and labels:
//
//	committed := metrics.Counter("tandem_commit_outcomes_total", "…", "outcome", "committed")
//	committed.Inc()
//
// Names follow Prometheus's conventions: tandem_ prefix, base units
// (seconds, bytes), _total for counters.
package metrics

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/tandem-tx/tandem/waits"
)

// CounterCell is one counter with its labels. Safe for concurrent use.
type CounterCell struct {
	v      atomic.Uint64
	labels string // rendered: {k="v",...} or ""
}

// Inc adds one.
func (c *CounterCell) Inc() { c.v.Add(1) }

// Add adds n.
func (c *CounterCell) Add(n uint64) { c.v.Add(n) }

// Value is the count so far.
func (c *CounterCell) Value() uint64 { return c.v.Load() }

type family struct {
	help     string
	counters []*CounterCell
	gauges   []*gaugeFunc
}

type gaugeFunc struct {
	labels string
	fn     func() float64
}

var (
	mu       sync.Mutex
	families = map[string]*family{}
)

func familyLocked(name, help string) *family {
	f, ok := families[name]
	if !ok {
		f = &family{help: help}
		families[name] = f
	}
	return f
}

// Counter returns the counter of that name and labels (pairs: name, value),
// creating it at zero the first time.
func Counter(name, help string, labelPairs ...string) *CounterCell {
	labels := renderLabels(labelPairs)
	mu.Lock()
	defer mu.Unlock()
	f := familyLocked(name, help)
	for _, c := range f.counters {
		if c.labels == labels {
			return c
		}
	}
	c := &CounterCell{labels: labels}
	f.counters = append(f.counters, c)
	return c
}

// Gauge registers fn as the value of the gauge of that name and labels
// (pairs: name, value), read at every scrape; it replaces an earlier
// function of the same name and labels. fn must be fast and safe to call
// from any goroutine. The returned function removes the gauge, if it is
// still this one.
func Gauge(name, help string, fn func() float64, labelPairs ...string) (unregister func()) {
	labels := renderLabels(labelPairs)
	g := &gaugeFunc{labels: labels, fn: fn}
	mu.Lock()
	defer mu.Unlock()
	f := familyLocked(name, help)
	f.help = help
	f.gauges = slices.DeleteFunc(f.gauges, func(o *gaugeFunc) bool { return o.labels == labels })
	f.gauges = append(f.gauges, g)
	return func() {
		mu.Lock()
		defer mu.Unlock()
		if f, ok := families[name]; ok {
			f.gauges = slices.DeleteFunc(f.gauges, func(o *gaugeFunc) bool { return o == g })
		}
	}
}

// Names of the wait-event metrics.
const (
	WaitSeconds    = "tandem_wait_seconds"
	WaitMaxSeconds = "tandem_wait_max_seconds"
)

// WritePrometheus writes every metric: the wait events of each registry
// (labels side and event; every defined event, waited on or not), then the
// counters and gauges, sorted by name.
func WritePrometheus(w io.Writer, regs ...*waits.Registry) error {
	var b strings.Builder
	snaps := make([]waits.Snapshot, len(regs))
	for i, r := range regs {
		snaps[i] = r.Snapshot()
	}
	fmt.Fprintf(&b, "# HELP %s Time spent in each named wait event (see `tandem waits`), by side: client (the SDK) or coordinator.\n# TYPE %s histogram\n", WaitSeconds, WaitSeconds)
	for _, s := range snaps {
		for _, e := range s.Events {
			lbl := `side="` + escape(s.Side) + `",event="` + escape(e.Event.String()) + `"`
			var cum uint64
			for i, n := range e.Buckets {
				cum += n
				le := "+Inf"
				if i < waits.NumBuckets-1 {
					le = formatFloat(waits.BucketUpperBound(i).Seconds())
				}
				fmt.Fprintf(&b, "%s_bucket{%s,le=\"%s\"} %d\n", WaitSeconds, lbl, le, cum)
			}
			fmt.Fprintf(&b, "%s_sum{%s} %s\n%s_count{%s} %d\n", WaitSeconds, lbl, formatFloat(e.Total.Seconds()), WaitSeconds, lbl, e.Count)
		}
	}
	fmt.Fprintf(&b, "# HELP %s Longest single wait of each event since the process started.\n# TYPE %s gauge\n", WaitMaxSeconds, WaitMaxSeconds)
	for _, s := range snaps {
		for _, e := range s.Events {
			fmt.Fprintf(&b, "%s{side=\"%s\",event=\"%s\"} %s\n", WaitMaxSeconds, escape(s.Side), escape(e.Event.String()), formatFloat(e.Max.Seconds()))
		}
	}

	mu.Lock()
	names := make([]string, 0, len(families))
	for n := range families {
		names = append(names, n)
	}
	slices.Sort(names)
	type gaugeRead struct {
		labels string
		fn     func() float64
	}
	type snap struct {
		name, help string
		counters   []*CounterCell
		gauges     []gaugeRead
	}
	var fams []snap
	for _, n := range names {
		f := families[n]
		s := snap{name: n, help: f.help, counters: slices.Clone(f.counters)}
		for _, g := range f.gauges {
			s.gauges = append(s.gauges, gaugeRead{g.labels, g.fn})
		}
		fams = append(fams, s)
	}
	mu.Unlock()
	for _, f := range fams { // gauge functions run without the lock held
		if len(f.counters) == 0 && len(f.gauges) == 0 {
			continue
		}
		typ := "counter"
		if len(f.counters) == 0 {
			typ = "gauge"
		}
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", f.name, escapeHelp(f.help), f.name, typ)
		for _, c := range f.counters {
			fmt.Fprintf(&b, "%s%s %d\n", f.name, c.labels, c.Value())
		}
		if typ == "gauge" {
			for _, g := range f.gauges {
				fmt.Fprintf(&b, "%s%s %s\n", f.name, g.labels, formatFloat(g.fn()))
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func renderLabels(pairs []string) string {
	if len(pairs) == 0 {
		return ""
	}
	if len(pairs)%2 != 0 {
		panic("metrics: labels must come in name, value pairs")
	}
	var b strings.Builder
	b.WriteByte('{')
	for i := 0; i < len(pairs); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(pairs[i])
		b.WriteString(`="`)
		b.WriteString(escape(pairs[i+1]))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// escape escapes a label value: backslash, double quote and newline.
func escape(s string) string {
	if !strings.ContainsAny(s, "\\\"\n") {
		return s
	}
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}

// escapeHelp escapes a HELP text: backslash and newline.
func escapeHelp(s string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(s)
}

func formatFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "+Inf"
	case math.IsInf(f, -1):
		return "-Inf"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// CounterValue reads the counter of that name and labels (pairs: name,
// value) without creating it; ok is false when there is none.
func CounterValue(name string, labelPairs ...string) (v uint64, ok bool) {
	labels := renderLabels(labelPairs)
	mu.Lock()
	defer mu.Unlock()
	f, found := families[name]
	if !found {
		return 0, false
	}
	for _, c := range f.counters {
		if c.labels == labels {
			return c.Value(), true
		}
	}
	return 0, false
}
