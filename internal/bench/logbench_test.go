package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// TestLogSmall runs the log benchmark with a few records per cell and
// checks the report's shape, its derived figures, its JSON and table, and
// that nothing is left behind.
func TestLogSmall(t *testing.T) {
	dir := t.TempDir()
	var progress bytes.Buffer
	cfg := LogConfig{
		Dir:         dir,
		Records:     300,
		RecordSize:  64,
		BatchWindow: 200 * time.Microsecond,
		Committers:  []int{1, 4, 256},
		Progress:    &progress,
	}
	rep, err := Log(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 7 {
		t.Fatalf("%d rows, want 7 (raw, then 3 per mode)", len(rep.Rows))
	}
	for _, row := range rep.Rows {
		if row.Decisions != 300 {
			t.Errorf("%s at %d committers: %d decisions, want 300", row.Mode, row.Committers, row.Decisions)
		}
		if row.DecisionsPerSec <= 0 || row.P50ms <= 0 || row.P99ms < row.P50ms || row.Fsyncs == 0 || row.Fsyncs > row.Decisions {
			t.Errorf("implausible row %+v", row)
		}
	}
	if rep.RecordBytes != 72 || rep.SingleLatencyRatio == nil || rep.Scaling256vs1 == nil || rep.BatchFsyncReduction256 == nil {
		t.Fatalf("report %+v", rep)
	}
	if got := strings.Count(progress.String(), "\n"); got != 7 {
		t.Errorf("%d progress lines, want 7:\n%s", got, progress.String())
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("left %d entries in %s", len(entries), dir)
	}

	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"rows", "single_latency_ratio", "scaling_256_vs_1", "batch_fsync_reduction_256", "filesystem"} {
		if _, ok := back[k]; !ok {
			t.Errorf("JSON has no %q: %s", k, b)
		}
	}

	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"decisions/s", "records/fsync", "immediate", "batch", "single_latency_ratio", rep.FSInfo.Type} {
		if !strings.Contains(table.String(), s) {
			t.Errorf("table does not say %q:\n%s", s, table.String())
		}
	}
}

// TestLogWithoutReferenceCells leaves out the cells the derived figures
// need: they are omitted, not NaN (which JSON cannot encode).
func TestLogWithoutReferenceCells(t *testing.T) {
	rep, err := Log(context.Background(), LogConfig{
		Dir: t.TempDir(), Records: 20, RecordSize: 10, BatchWindow: time.Millisecond, Committers: []int{2},
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.SingleLatencyRatio != nil || rep.Scaling256vs1 != nil || rep.BatchFsyncReduction256 != nil {
		t.Fatalf("derived figures without their cells: %+v", rep)
	}
	if _, err := json.Marshal(rep); err != nil {
		t.Fatal(err)
	}
}

// TestLogCanceled stops a long run through its context and expects the
// context's error and a clean directory.
func TestLogCanceled(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := Log(ctx, LogConfig{Dir: dir, Duration: time.Hour, RecordSize: 64, BatchWindow: time.Millisecond, Committers: []int{1, 8}})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Log = %v, want the context's error", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("left %d entries in %s", len(entries), dir)
	}
}

// TestLogConfigRefused checks the validation of a configuration.
func TestLogConfigRefused(t *testing.T) {
	good := DefaultLogConfig()
	for _, mod := range []func(*LogConfig){
		func(c *LogConfig) { c.Duration = 0 },
		func(c *LogConfig) { c.Records = -1 },
		func(c *LogConfig) { c.RecordSize = -1 },
		func(c *LogConfig) { c.BatchWindow = 0 },
		func(c *LogConfig) { c.Committers = nil },
		func(c *LogConfig) { c.Committers = []int{0} },
	} {
		c := good
		c.Dir = t.TempDir()
		mod(&c)
		if _, err := Log(context.Background(), c); err == nil {
			t.Errorf("Log(%+v) accepted", c)
		}
	}
}
