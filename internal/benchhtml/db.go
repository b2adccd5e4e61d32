package benchhtml

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/tandem-tx/tandem/internal/bench"
	"github.com/tandem-tx/tandem/waits"
)

// topWaits is how many wait events a panel shows (the largest by time).
const topWaits = 10

// waitPanel is one workload's waits, client and coordinator side by side.
type waitPanel struct {
	Workload    string
	Txns        uint64
	Unaccounted string // share of the client's latency in no named wait
	Client      []waitRow
	Coord       []waitRow
	HasCoord    bool
	Top         float64 // the largest ms/txn of both sides: the bars' scale
}

type waitRow struct {
	Event    string
	PerTxn   float64 // waits per committed transaction
	MsPerTxn float64
	AvgMs    float64
	Bar      string // the bar's width: MsPerTxn against the panel's largest
}

// WriteDB writes the page of a `tandem-bench db` run.
func WriteDB(w io.Writer, rep *bench.DBReport, run Run) error {
	var names []string
	for _, r := range rep.Results {
		names = append(names, r.Workload)
	}
	v := &view{Title: "tandem bench: " + strings.Join(names, " vs "), Conditions: conditions(run), Warnings: rep.Warnings}
	v.Conditions = append(v.Conditions, dbConditions(rep)...)
	v.Summary = dbSummary(rep)
	if rep.Ratio != nil && len(rep.Results) == 2 {
		v.Headline = fmt.Sprintf("ratio TPS(%s) / TPS(%s) = %.3f", rep.Results[1].Workload, rep.Results[0].Workload, *rep.Ratio)
	}
	v.Charts = append(v.Charts, sliceChart(rep))
	if c, ok := ratioChart(rep); ok {
		v.Charts = append(v.Charts, c)
	}
	v.Charts = append(v.Charts, latencyChart(rep))
	for _, r := range rep.Results {
		v.Waits = append(v.Waits, panel(r))
	}
	if t := countersTable(rep); t != nil {
		v.Extra = append(v.Extra, t)
	}
	if t := activityTable(rep); t != nil {
		v.Extra = append(v.Extra, t)
	}
	// The traces can be large and are in --json already; the page keeps the figures.
	cp := *rep
	cp.Results = slices.Clone(rep.Results)
	for i := range cp.Results {
		cp.Results[i].Traces = nil
	}
	v.Data = data{Kind: "db", Report: &cp}
	return render(w, v)
}

func dbConditions(rep *bench.DBReport) [][2]string {
	var c [][2]string
	run := ""
	if len(rep.Results) > 0 {
		run = fmt.Sprintf("%d threads", rep.Results[0].Threads)
	}
	if rep.SliceS > 0 {
		run += fmt.Sprintf(", slices of %.3g s", rep.SliceS)
		if len(rep.Results) > 1 {
			run += ", the workloads interleaved slice by slice"
		}
	}
	c = append(c, [2]string{"run", run})
	c = append(c, [2]string{"resource managers", strings.Join(rep.RMs, ", ")})
	own := "unknown"
	if rep.OwnCPUPercent >= 0 {
		own = fmt.Sprintf("%.0f%%", rep.OwnCPUPercent)
	}
	c = append(c, [2]string{"machine", fmt.Sprintf("%d CPUs; CPU used during the run: this process (clients and in-process coordinator) %s, every other process (the databases) %.0f%%",
		rep.CPUs, own, rep.OthersCPUPercent)})
	if rep.Coordinator != "" {
		line := rep.Coordinator
		if rep.CoordinatorConns > 0 {
			line += fmt.Sprintf(", %d connections per RM", rep.CoordinatorConns)
		}
		if rep.LogFS != "" {
			line += ", decision log on " + rep.LogFS
		}
		c = append(c, [2]string{"coordinator", line})
		dec := rep.DecideAt + ", visibility " + rep.Visibility
		if rep.CommitPoint != "" {
			dec += ", commit point " + rep.CommitPoint
		}
		c = append(c, [2]string{"xa and oltp decide at", dec})
	}
	if s := rep.Standby; s != nil {
		c = append(c, [2]string{"standby (" + s.Workload + ")", fmt.Sprintf("transport %s, protection %s, %.3g ms added round trip, bandwidth %s; lag max %d bytes / %.4f s, mean %.1f bytes",
			s.Transport, s.Protection, s.RTTms, bench.FormatBandwidth(s.BandwidthBytesPerS), s.Lag.LagBytesMax, s.Lag.LagSecondsMax, s.Lag.LagBytesMean)})
	}
	return c
}

func dbSummary(rep *bench.DBReport) *table {
	t := &table{Head: []string{"workload", "threads", "txns", "errors", "elapsed s", "TPS", "p50 ms", "p95 ms", "p99 ms", "max ms", "round trips/txn", "unaccounted"}}
	for _, x := range rep.Results {
		t.Rows = append(t.Rows, []string{x.Workload, fmt.Sprint(x.Threads), fmt.Sprint(x.Txns), fmt.Sprint(x.Errors), fmt.Sprintf("%.2f", x.ElapsedS),
			fmt.Sprintf("%.1f", x.TPS), fmt.Sprintf("%.3f", x.P50ms), fmt.Sprintf("%.3f", x.P95ms), fmt.Sprintf("%.3f", x.P99ms), fmt.Sprintf("%.3f", x.MaxMs),
			fmt.Sprintf("%.2f", x.RoundtripsPerTxn), fmt.Sprintf("%.1f%%", 100*x.UnaccountedShare)})
	}
	return t
}

// sliceChart: TPS of every slice at its middle, one series per workload,
// so the interleaving shows as alternating points.
func sliceChart(rep *bench.DBReport) Chart {
	type pt struct {
		x, tps float64
		wl     int
	}
	var pts []pt
	c := Chart{ID: "tps-slices", Title: "TPS per slice, in the order the slices ran", XLabel: "seconds since the measured run began", YLabel: "TPS"}
	for i, r := range rep.Results {
		c.Series = append(c.Series, r.Workload)
		for _, s := range r.Slices {
			if s.Seconds > 0 {
				pts = append(pts, pt{s.StartS + s.Seconds/2, float64(s.Txns) / s.Seconds, i})
			}
		}
	}
	slices.SortFunc(pts, func(a, b pt) int { return cmp.Compare(a.x, b.x) })
	c.Data = make([][]*float64, len(rep.Results)+1)
	for _, p := range pts {
		c.Data[0] = append(c.Data[0], num(round(p.x, 3)))
		for i := range rep.Results {
			var y *float64
			if i == p.wl {
				y = num(round(p.tps, 1))
			}
			c.Data[i+1] = append(c.Data[i+1], y)
		}
	}
	c.Note = "Each point is one slice's committed transactions ÷ its length, at the slice's middle. A trend shared by both workloads is drift of the machine, not of either."
	return c
}

// ratioChart: TPS(B) ÷ TPS(A) of each round (the i-th slice of each).
func ratioChart(rep *bench.DBReport) (Chart, bool) {
	if len(rep.Results) != 2 {
		return Chart{}, false
	}
	a, b := rep.Results[0], rep.Results[1]
	c := Chart{ID: "ratio-rounds", Title: fmt.Sprintf("Ratio TPS(%s) / TPS(%s) per round of slices", b.Workload, a.Workload),
		XLabel: "round (the i-th slice of each workload)", YLabel: "ratio", Series: []string{b.Workload + " / " + a.Workload}, Data: make([][]*float64, 2)}
	for i := range min(len(a.Slices), len(b.Slices)) {
		sa, sb := a.Slices[i], b.Slices[i]
		if sa.Seconds <= 0 || sb.Seconds <= 0 || sa.Txns == 0 {
			continue
		}
		c.Data[0] = append(c.Data[0], num(float64(i+1)))
		c.Data[1] = append(c.Data[1], num(round(float64(sb.Txns)/sb.Seconds/(float64(sa.Txns)/sa.Seconds), 3)))
	}
	if rep.Ratio != nil {
		c.Series, c.Dashed = append(c.Series, fmt.Sprintf("whole run %.3f", *rep.Ratio)), []bool{false, true}
		c.Data = append(c.Data, nil)
		for range c.Data[0] {
			c.Data[2] = append(c.Data[2], num(*rep.Ratio))
		}
		c.Note = "A round far from the whole run's ratio is one where something else hit one workload's slice and not the other's."
	}
	return c, len(c.Data[0]) > 0
}

// latencyChart: each workload's share of transactions per latency bin.
func latencyChart(rep *bench.DBReport) Chart {
	c := Chart{ID: "latency", Title: "Latency distribution of a whole transaction", XLabel: "latency, ms (log scale; bin upper bound)", YLabel: "% of the workload's transactions", XLog: 10}
	share := map[float64][]float64{}
	for i, r := range rep.Results {
		c.Series = append(c.Series, fmt.Sprintf("%s (p50 %.3g, p99 %.3g ms)", r.Workload, r.P50ms, r.P99ms))
		var total uint64
		for _, b := range r.Latency {
			total += b.Count
		}
		for _, b := range r.Latency {
			if share[b.LeMs] == nil {
				share[b.LeMs] = make([]float64, len(rep.Results))
			}
			share[b.LeMs][i] = 100 * float64(b.Count) / float64(max(total, 1))
		}
	}
	c.Data = make([][]*float64, len(rep.Results)+1)
	for _, x := range slices.Sorted(maps.Keys(share)) {
		c.Data[0] = append(c.Data[0], num(x))
		for i, v := range share[x] {
			c.Data[i+1] = append(c.Data[i+1], num(round(v, 3)))
		}
	}
	c.Note = "Four bins per doubling of latency; each workload's bins add up to 100 %."
	return c
}

// panel is one workload's top waits, client and coordinator.
func panel(r bench.DBResult) waitPanel {
	p := waitPanel{Workload: r.Workload, Txns: r.Txns, Unaccounted: fmt.Sprintf("%.1f%%", 100*r.UnaccountedShare), HasCoord: len(r.CoordinatorWaits) > 0}
	p.Client = rows(r.Waits, r.Txns)
	p.Coord = rows(r.CoordinatorWaits, r.Txns)
	for _, x := range append(slices.Clone(p.Client), p.Coord...) {
		p.Top = max(p.Top, x.MsPerTxn)
	}
	for _, side := range [][]waitRow{p.Client, p.Coord} {
		for i := range side {
			side[i].Bar = fmt.Sprintf("%.1f%%", 100*side[i].MsPerTxn/max(p.Top, 1e-12))
		}
	}
	return p
}

func rows(evs []waits.JSONEvent, txns uint64) []waitRow {
	evs = slices.Clone(evs)
	slices.SortStableFunc(evs, func(a, b waits.JSONEvent) int { return cmp.Compare(b.TotalS, a.TotalS) })
	var out []waitRow
	n := float64(max(txns, 1))
	for _, e := range evs {
		if e.Count == 0 || len(out) == topWaits {
			continue
		}
		out = append(out, waitRow{Event: e.Event, PerTxn: float64(e.Count) / n, MsPerTxn: 1000 * e.TotalS / n, AvgMs: 1000 * e.AvgS})
	}
	return out
}

func countersTable(rep *bench.DBReport) *table {
	t := &table{Caption: "The databases' own sync counters per committed transaction (server-wide: other sessions' work counts too)", Head: []string{"workload", "RM", "counter", "total", "per txn"}}
	for _, r := range rep.Results {
		for _, x := range r.DBCounters {
			t.Rows = append(t.Rows, []string{r.Workload, x.RM, x.Counter, fmt.Sprint(x.Total), fmt.Sprintf("%.3f", x.PerTxn)})
		}
	}
	if len(t.Rows) == 0 {
		return nil
	}
	if rep.DBCountersNote != "" {
		t.Caption += ". " + rep.DBCountersNote
	}
	return t
}

func round(v float64, digits int) float64 {
	p := math.Pow10(digits)
	return math.Round(v*p) / p
}

// activityRows bounds the rows of the sampled sessions shown per workload
// and RM (the --json report has them all).
const activityRows = 8

// activityTable is where the databases' sessions spent their time
// (db_activity): per workload and RM, the largest statement-and-wait pairs.
func activityTable(rep *bench.DBReport) *table {
	t := &table{Caption: fmt.Sprintf("The databases' sessions, sampled every %.3g s during the measured slices: what each statement waited on, in session-ms per committed transaction (samples × interval ÷ transactions)", rep.ActivityEveryS),
		Head: []string{"workload", "RM", "statement", "wait", "samples", "share of the RM's", "ms/txn"}}
	for _, r := range rep.Results {
		shown := map[string]int{}
		for _, a := range r.DBActivity {
			if shown[a.RM]++; shown[a.RM] > activityRows {
				continue
			}
			t.Rows = append(t.Rows, []string{r.Workload, a.RM, a.Statement, a.Wait, fmt.Sprint(a.Samples), fmt.Sprintf("%.1f%%", 100*a.Share), fmt.Sprintf("%.3f", a.PerTxnMs)})
		}
	}
	if len(t.Rows) == 0 {
		return nil
	}
	return t
}
