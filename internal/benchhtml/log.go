package benchhtml

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/tandem-tx/tandem/internal/bench"
)

// WriteLog writes the page of a `tandem-bench log` run.
func WriteLog(w io.Writer, rep *bench.LogReport, run Run) error {
	v := &view{Title: "tandem bench log: the decision log on " + rep.FSInfo.String(), Conditions: conditions(run), Warnings: rep.Warnings}
	cell := fmt.Sprintf("%g s per cell", rep.CellSeconds)
	if rep.CellRecords > 0 {
		cell = fmt.Sprintf("%d records per cell", rep.CellRecords)
	}
	v.Conditions = append(v.Conditions,
		[2]string{"file system", rep.FSInfo.String()},
		[2]string{"run", fmt.Sprintf("%d-byte records (%d bytes on disk), %s, batch window %g ms, %d MiB segments", rep.RecordSize, rep.RecordBytes, cell, rep.BatchWindowMs, rep.SegmentBytes>>20)},
		[2]string{"machine", fmt.Sprintf("GOMAXPROCS %d; other processes used %s of the CPUs during the run", rep.GOMAXPROCS, cpuText(rep.OtherCPUPercent))})
	t := &table{Head: []string{"mode", "committers", "decisions/s", "p50 ms", "p99 ms", "fsyncs/s", "records/fsync"}}
	for _, r := range rep.Rows {
		t.Rows = append(t.Rows, []string{r.Mode, fmt.Sprint(r.Committers), fmt.Sprintf("%.0f", r.DecisionsPerSec), fmt.Sprintf("%.3f", r.P50ms),
			fmt.Sprintf("%.3f", r.P99ms), fmt.Sprintf("%.0f", r.FsyncsPerSec), fmt.Sprintf("%.1f", r.RecordsPerFsync)})
	}
	v.Summary = t
	var figs []string
	for _, f := range []struct {
		name string
		v    *float64
	}{{"single_latency_ratio", rep.SingleLatencyRatio}, {"scaling_256_vs_1", rep.Scaling256vs1}, {"batch_fsync_reduction_256", rep.BatchFsyncReduction256}} {
		if f.v != nil {
			figs = append(figs, fmt.Sprintf("%s %.2f", f.name, *f.v))
		}
	}
	v.Headline = strings.Join(figs, " · ")
	v.Charts = []Chart{
		logChart(rep, "decisions", "Decisions/s against committers", "decisions/s (log scale)", func(r bench.LogRow) float64 { return r.DecisionsPerSec }),
		logChart(rep, "fsyncs", "fdatasyncs/s against committers", "fdatasyncs/s (log scale)", func(r bench.LogRow) float64 { return r.FsyncsPerSec }),
		logChart(rep, "p99", "Latency of one append, p99", "ms (log scale)", func(r bench.LogRow) float64 { return r.P99ms }),
	}
	v.Charts[0].Note = "raw: one write+fdatasync at a time on a preallocated file, the disk's floor; immediate: group commit; batch: the writer also waits for the batch window."
	v.Data = data{Kind: "log", Report: rep}
	return render(w, v)
}

// logChart: one series per mode, x = committers, both axes log scale.
func logChart(rep *bench.LogReport, id, title, ylabel string, y func(bench.LogRow) float64) Chart {
	c := Chart{ID: id, Title: title, XLabel: "concurrent committers (log scale)", YLabel: ylabel, XLog: 2, YLog: 10}
	var modes []string
	at := map[int]map[string]float64{}
	for _, r := range rep.Rows {
		if !slices.Contains(modes, r.Mode) {
			modes = append(modes, r.Mode)
		}
		if at[r.Committers] == nil {
			at[r.Committers] = map[string]float64{}
		}
		if v := y(r); v > 0 { // a log scale has no 0
			at[r.Committers][r.Mode] = v
		}
	}
	c.Series = modes
	c.Data = make([][]*float64, len(modes)+1)
	for _, n := range slices.Sorted(maps.Keys(at)) {
		c.Data[0] = append(c.Data[0], num(float64(n)))
		for i, m := range modes {
			var p *float64
			if v, ok := at[n][m]; ok {
				p = num(round(v, 3))
			}
			c.Data[i+1] = append(c.Data[i+1], p)
		}
	}
	return c
}

func cpuText(p float64) string {
	if p < 0 {
		return "an unknown share"
	}
	return fmt.Sprintf("%.1f%%", p)
}
