package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/tandem-tx/tandem/internal/wal"
)

// LogConfig configures Log. DefaultLogConfig gives the defaults of
// `tandem bench log`.
type LogConfig struct {
	// Dir is where Log creates its temporary directory (and removes it
	// afterwards): the file system, and so the disk, being measured.
	// "" means the current directory.
	Dir string

	// Duration is how long each cell runs, when Records is 0.
	Duration time.Duration
	// Records, if positive, makes each cell run until its committers
	// together have written this many records, instead of for Duration.
	Records int

	// RecordSize is the payload size of every record, in bytes. A
	// coordinator's decision record is about 40 to 80 bytes.
	RecordSize int

	// BatchWindow is wal.Options.BatchWindow for the batch-mode cells.
	BatchWindow time.Duration

	// Committers lists the numbers of concurrent committers of the log
	// cells, each run in immediate then batch mode.
	Committers []int

	// Progress, if not nil, gets one line per finished cell.
	Progress io.Writer
}

// DefaultLogConfig returns the defaults of `tandem bench log`.
func DefaultLogConfig() LogConfig {
	return LogConfig{
		Duration:    2 * time.Second,
		RecordSize:  64,
		BatchWindow: 2 * time.Millisecond,
		Committers:  []int{1, 8, 64, 256, 1024},
	}
}

// Modes of LogRow.
const (
	ModeRaw       = "raw"       // write+fdatasync on a preallocated file, no log
	ModeImmediate = "immediate" // wal in immediate mode (group commit only)
	ModeBatch     = "batch"     // wal in batch mode (BatchWindow)
)

// LogRow is one cell: a mode at a number of committers.
type LogRow struct {
	Mode       string `json:"mode"`
	Committers int    `json:"committers"`

	Decisions       uint64  `json:"decisions"` // records acknowledged durable
	Seconds         float64 `json:"seconds"`   // from the start to the last acknowledgement
	DecisionsPerSec float64 `json:"decisions_per_sec"`
	P50ms           float64 `json:"p50_ms"` // latency of one Append (raw: one write+fdatasync)
	P99ms           float64 `json:"p99_ms"`
	MaxMs           float64 `json:"max_ms"`
	Fsyncs          uint64  `json:"fsyncs"`
	FsyncsPerSec    float64 `json:"fsyncs_per_sec"`
	RecordsPerFsync float64 `json:"records_per_fsync"`
}

// LogReport is the result of Log.
type LogReport struct {
	Dir string `json:"dir"` // the temporary directory, removed since
	FSInfo
	RecordSize    int     `json:"record_size"`     // payload bytes
	RecordBytes   int64   `json:"record_bytes"`    // on disk: header, payload, padding
	CellSeconds   float64 `json:"cell_seconds"`    // Duration, or 0 with Records
	CellRecords   int     `json:"cell_records"`    // Records, or 0 with Duration
	BatchWindowMs float64 `json:"batch_window_ms"` // of the batch cells
	SegmentBytes  int64   `json:"segment_bytes"`   // preallocated size of each segment and of the raw file
	GOMAXPROCS    int     `json:"gomaxprocs"`      // CPUs the committers and the writer share
	// OtherCPUPercent is the share of the machine's CPUs that other
	// processes used during the run (-1 if unknown): above a few percent,
	// they competed with the benchmark and its figures are pessimistic.
	OtherCPUPercent float64  `json:"other_cpu_percent"`
	Warnings        []string `json:"warnings,omitempty"` // e.g. a file system where fdatasync does nothing

	Rows []LogRow `json:"rows"`

	// SingleLatencyRatio is the log's p50 latency at 1 committer in
	// immediate mode over the raw write+fdatasync p50: what the log adds
	// to the disk's own latency (1 = nothing).
	SingleLatencyRatio *float64 `json:"single_latency_ratio,omitempty"`
	// Scaling256vs1 is decisions/s at 256 committers over decisions/s at
	// 1, immediate mode: how well group commit shares fdatasyncs.
	Scaling256vs1 *float64 `json:"scaling_256_vs_1,omitempty"`
	// BatchFsyncReduction256 is immediate fsyncs/s over batch fsyncs/s at
	// 256 committers: how many fdatasyncs batch mode saves.
	BatchFsyncReduction256 *float64 `json:"batch_fsync_reduction_256,omitempty"`
}

// Row returns the cell of mode at committers, if it was run.
func (r *LogReport) Row(mode string, committers int) (LogRow, bool) {
	for _, row := range r.Rows {
		if row.Mode == mode && row.Committers == committers {
			return row, true
		}
	}
	return LogRow{}, false
}

func (c *LogConfig) validate() error {
	switch {
	case c.Records < 0:
		return fmt.Errorf("records %d is negative", c.Records)
	case c.Records == 0 && c.Duration <= 0:
		return fmt.Errorf("duration %v must be positive", c.Duration)
	case c.RecordSize < 0 || c.RecordSize > 1<<20:
		return fmt.Errorf("record size %d must be between 0 and 1 MiB", c.RecordSize)
	case c.BatchWindow <= 0:
		return fmt.Errorf("batch window %v must be positive", c.BatchWindow)
	case len(c.Committers) == 0:
		return errors.New("no committer counts")
	}
	for _, n := range c.Committers {
		if n < 1 || n > 1<<16 {
			return fmt.Errorf("committer count %d must be between 1 and 65536", n)
		}
	}
	return nil
}

// Log measures the decision log on the disk under cfg.Dir, in one run:
//
//   - raw: one goroutine writing records of the same on-disk size
//     sequentially, 8-byte aligned, into a file preallocated like a log
//     segment, each followed by fdatasync: the floor set by the disk;
//   - then, for each of cfg.Committers, a fresh wal.Log in immediate mode
//     and one in batch mode (cfg.BatchWindow), with that many goroutines
//     each calling Append in a loop and timing every call.
//
// Every cell runs for cfg.Duration (or cfg.Records records). The raw cell
// and the 1-committer immediate cell run in alternating slices of 50 ms,
// so that their latency ratio does not depend on which ran first. Latencies go
// into a Histogram per goroutine, so the timed loop does not allocate.
// Log stops early, returning ctx's error, when ctx is done. It removes
// everything it created.
func Log(ctx context.Context, cfg LogConfig) (*LogReport, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("bench log: %w", err)
	}
	parent := cfg.Dir
	if parent == "" {
		parent = "."
	}
	root, err := os.MkdirTemp(parent, "tandem-bench-log-")
	if err != nil {
		return nil, fmt.Errorf("bench log: create a temporary directory under %s: %w", parent, err)
	}
	defer os.RemoveAll(root)
	if abs, err := filepath.Abs(root); err == nil {
		root = abs
	}
	fi, err := fsInfo(root)
	if err != nil {
		return nil, fmt.Errorf("bench log: %w", err)
	}
	rep := &LogReport{
		Dir:          root,
		FSInfo:       fi,
		RecordSize:   cfg.RecordSize,
		RecordBytes:  onDiskSize(cfg.RecordSize),
		CellRecords:  cfg.Records,
		SegmentBytes: wal.DefaultSegmentSize,
		GOMAXPROCS:   runtime.GOMAXPROCS(0),
	}
	if cfg.Records == 0 {
		rep.CellSeconds = cfg.Duration.Seconds()
	}
	rep.BatchWindowMs = ms(cfg.BatchWindow)
	if noDurableSync(fi.Type) {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf(
			"%s is on %s, where fdatasync makes nothing durable: these figures say nothing about a disk; use --dir on a real disk", root, fi.Type))
	}

	before := sampleMachine()
	cells := 1 + 2*len(cfg.Committers)
	progress := func(row LogRow) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "bench log: [%d/%d] %-9s %5d committers: %9.0f decisions/s, p50 %.3f ms, p99 %.3f ms, %.0f fsyncs/s\n",
				len(rep.Rows), cells, row.Mode, row.Committers, row.DecisionsPerSec, row.P50ms, row.P99ms, row.FsyncsPerSec)
		}
	}
	single := slices.Contains(cfg.Committers, 1)
	raw, single1, err := runRawAndSingle(ctx, cfg, root, single)
	if err != nil {
		return nil, err
	}
	rep.Rows = append(rep.Rows, raw)
	progress(raw)
	for _, mode := range []string{ModeImmediate, ModeBatch} {
		for _, n := range cfg.Committers {
			if mode == ModeImmediate && n == 1 {
				rep.Rows = append(rep.Rows, single1)
				progress(single1)
				continue
			}
			row, err := runLogCell(ctx, cfg, root, mode, n)
			if err != nil {
				return nil, err
			}
			rep.Rows = append(rep.Rows, row)
			progress(row)
		}
	}
	rep.OtherCPUPercent = round(othersCPU(before, sampleMachine(), runtime.NumCPU()), 1)
	if rep.OtherCPUPercent > 10 {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf(
			"other processes used %.0f%% of the %d CPUs during the run: they competed with the committers and the writer (and perhaps for the disk); run again on a quiet machine",
			rep.OtherCPUPercent, runtime.NumCPU()))
	}
	rep.derive()
	return rep, nil
}

// derive computes the report's ratios from its rows.
func (r *LogReport) derive() {
	ratio := func(a, b float64) *float64 {
		if b == 0 || math.IsNaN(a/b) || math.IsInf(a/b, 0) {
			return nil
		}
		v := round(a/b, 3)
		return &v
	}
	raw, ok1 := r.Row(ModeRaw, 1)
	imm1, ok2 := r.Row(ModeImmediate, 1)
	imm256, ok3 := r.Row(ModeImmediate, 256)
	bat256, ok4 := r.Row(ModeBatch, 256)
	if ok1 && ok2 {
		r.SingleLatencyRatio = ratio(imm1.P50ms, raw.P50ms)
	}
	if ok2 && ok3 {
		r.Scaling256vs1 = ratio(imm256.DecisionsPerSec, imm1.DecisionsPerSec)
	}
	if ok3 && ok4 {
		r.BatchFsyncReduction256 = ratio(imm256.FsyncsPerSec, bat256.FsyncsPerSec)
	}
}

// onDiskSize is the bytes a record with an n-byte payload takes in the log:
// an 8-byte header, the payload, zero padding to a multiple of 8.
func onDiskSize(n int) int64 { return 8 + int64(n+7)&^7 }

// cellStop ends a cell after cfg.Duration, when ctx is done, or on the
// first error; with cfg.Records it also hands out the records to write.
type cellStop struct {
	stop atomic.Bool
	left atomic.Int64 // records still to write, with cfg.Records
	byN  bool

	once sync.Once
	err  error
}

func newCellStop(ctx context.Context, cfg LogConfig) (*cellStop, func()) {
	s := &cellStop{byN: cfg.Records > 0}
	s.left.Store(int64(cfg.Records))
	stopCtx := context.AfterFunc(ctx, func() { s.fail(ctx.Err()) })
	var timer *time.Timer
	if !s.byN {
		timer = time.AfterFunc(cfg.Duration, func() { s.stop.Store(true) })
	}
	return s, func() {
		stopCtx()
		if timer != nil {
			timer.Stop()
		}
	}
}

// next reports whether the caller should write one more record.
func (s *cellStop) next() bool {
	if s.stop.Load() {
		return false
	}
	return !s.byN || s.left.Add(-1) >= 0
}

func (s *cellStop) fail(err error) {
	s.once.Do(func() { s.err = err })
	s.stop.Store(true)
}

// fillPayload makes a payload that changes with every record, like
// distinct gtrids would.
func fillPayload(p []byte, committer int, i uint64) {
	if len(p) >= 16 {
		binary.LittleEndian.PutUint64(p[0:8], uint64(committer))
		binary.LittleEndian.PutUint64(p[8:16], i)
	} else if len(p) > 0 {
		p[0] = byte(i) | 1
	}
}

// rawFile is the baseline's writer: records of the log's on-disk size
// written one at a time at sequential 8-byte-aligned offsets, each followed
// by fdatasync, into files preallocated and zero-filled like the log's
// segments (a new one when one is full, as the log rotates).
type rawFile struct {
	dir   string
	size  int64
	rec   []byte
	f     *os.File
	off   int64
	files int
	i     uint64
}

func newRawFile(dir string, recordSize int) (*rawFile, error) {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	size := int64(wal.DefaultSegmentSize)
	r := &rawFile{dir: dir, size: size, off: size, rec: make([]byte, onDiskSize(recordSize))}
	if err := r.next(); err != nil {
		return nil, err
	}
	return r, nil
}

// next starts a new preallocated file.
func (r *rawFile) next() error {
	r.close()
	r.files++
	f, err := createPreallocated(filepath.Join(r.dir, fmt.Sprintf("raw-%d", r.files)), r.size)
	if err != nil {
		return err
	}
	r.f, r.off = f, 0
	return nil
}

// write writes and fdatasyncs one record and returns how long that took;
// preparing a new file when one is full is not counted.
func (r *rawFile) write() (time.Duration, error) {
	n := int64(len(r.rec))
	if r.off+n > r.size {
		if err := r.next(); err != nil {
			return 0, err
		}
	}
	r.i++
	fillPayload(r.rec[8:], 0, r.i)
	t0 := time.Now()
	if _, err := r.f.WriteAt(r.rec, r.off); err != nil {
		return 0, fmt.Errorf("write: %w", err)
	}
	if err := fdatasync(r.f); err != nil {
		return 0, err
	}
	d := time.Since(t0)
	r.off += n
	return d, nil
}

func (r *rawFile) close() {
	if r.f != nil {
		r.f.Close()
		r.f = nil
	}
}

// sliceTime is how long the raw baseline and the 1-committer log cell run
// before handing over to the other.
const sliceTime = 50 * time.Millisecond

// runRawAndSingle measures the raw baseline and, if single, the log in
// immediate mode with one committer, in alternating slices of sliceTime
// (or of a twentieth of cfg.Records records) until each has had its
// cfg.Duration (or cfg.Records). The ratio of their latencies is the
// report's headline: alternating makes a drift of the disk's latency
// (other tenants of a shared disk, the host's cache) hit both alike,
// instead of whichever ran second.
func runRawAndSingle(ctx context.Context, cfg LogConfig, root string, single bool) (raw, log LogRow, err error) {
	rf, err := newRawFile(filepath.Join(root, "raw"), cfg.RecordSize)
	if err != nil {
		return raw, log, fmt.Errorf("bench log: raw: %w", err)
	}
	defer rf.close()
	var l *wal.Log
	var before wal.Stats
	if single {
		if l, err = wal.Open(wal.Options{Dir: filepath.Join(root, "immediate-1")}, nil); err != nil {
			return raw, log, fmt.Errorf("bench log: immediate, 1 committer: %w", err)
		}
		defer l.Close()
		before = l.Stats()
	}
	p := make([]byte, cfg.RecordSize)
	var rawH, logH Histogram
	var rawSpent, logSpent time.Duration
	enough := func(h *Histogram, spent time.Duration) bool {
		if cfg.Records > 0 {
			return h.Count() >= uint64(cfg.Records)
		}
		return spent >= cfg.Duration
	}
	// slice runs op until the slice is over or its side has enough.
	slice := func(h *Histogram, spent *time.Duration, op func() (time.Duration, error)) error {
		t0 := time.Now()
		quota := uint64(max(cfg.Records/20, 1))
		for n := uint64(0); ; n++ {
			if err := ctx.Err(); err != nil {
				return err
			}
			elapsed := time.Since(t0)
			if cfg.Records > 0 && (n == quota || h.Count() >= uint64(cfg.Records)) ||
				cfg.Records == 0 && (elapsed >= sliceTime || *spent+elapsed >= cfg.Duration) {
				*spent += elapsed
				return nil
			}
			d, err := op()
			if err != nil {
				return err
			}
			h.Record(d)
		}
	}
	var i uint64
	appendOne := func() (time.Duration, error) {
		i++
		fillPayload(p, 0, i)
		t0 := time.Now()
		_, err := l.Append(1, p)
		return time.Since(t0), err
	}
	for !enough(&rawH, rawSpent) || single && !enough(&logH, logSpent) {
		if !enough(&rawH, rawSpent) {
			if err := slice(&rawH, &rawSpent, rf.write); err != nil {
				return raw, log, fmt.Errorf("bench log: raw: %w", err)
			}
		}
		if single && !enough(&logH, logSpent) {
			if err := slice(&logH, &logSpent, appendOne); err != nil {
				return raw, log, fmt.Errorf("bench log: immediate, 1 committer: %w", err)
			}
		}
	}
	raw = makeRow(ModeRaw, 1, &rawH, rawSpent, rawH.Count())
	if single {
		after := l.Stats()
		if err := l.Close(); err != nil {
			return raw, log, fmt.Errorf("bench log: immediate, 1 committer: %w", err)
		}
		log = makeRow(ModeImmediate, 1, &logH, logSpent, after.Fsyncs-before.Fsyncs)
	}
	return raw, log, nil
}

// runLogCell runs committers goroutines appending to a fresh wal.Log in
// mode.
func runLogCell(ctx context.Context, cfg LogConfig, root, mode string, committers int) (LogRow, error) {
	dir := filepath.Join(root, fmt.Sprintf("%s-%d", mode, committers))
	opts := wal.Options{Dir: dir}
	if mode == ModeBatch {
		opts.BatchWindow = cfg.BatchWindow
	}
	l, err := wal.Open(opts, nil)
	if err != nil {
		return LogRow{}, fmt.Errorf("bench log: %s, %d committers: %w", mode, committers, err)
	}
	// The directory stays until Log removes them all: deleting 64 MiB files
	// between cells can stall the next cell's fdatasyncs (file systems
	// mounted with discard trim the freed blocks in the journal commit).
	defer l.Close()

	hists := make([]Histogram, committers)
	s, done := newCellStop(ctx, cfg)
	defer done()
	start := make(chan struct{})
	var wg sync.WaitGroup
	for c := range committers {
		wg.Go(func() {
			h := &hists[c]
			p := make([]byte, cfg.RecordSize)
			<-start
			for i := uint64(1); s.next(); i++ {
				fillPayload(p, c, i)
				t0 := time.Now()
				_, err := l.Append(1, p)
				if err != nil {
					s.fail(err)
					return
				}
				h.Record(time.Since(t0))
			}
		})
	}
	before := l.Stats()
	t0 := time.Now()
	close(start)
	wg.Wait()
	elapsed := time.Since(t0)
	after := l.Stats()
	if s.err != nil {
		return LogRow{}, fmt.Errorf("bench log: %s, %d committers: %w", mode, committers, s.err)
	}
	if err := l.Close(); err != nil {
		return LogRow{}, fmt.Errorf("bench log: %s, %d committers: %w", mode, committers, err)
	}
	var all Histogram
	for i := range hists {
		all.Merge(&hists[i])
	}
	return makeRow(mode, committers, &all, elapsed, after.Fsyncs-before.Fsyncs), nil
}

func makeRow(mode string, committers int, h *Histogram, elapsed time.Duration, fsyncs uint64) LogRow {
	sec := elapsed.Seconds()
	row := LogRow{
		Mode:            mode,
		Committers:      committers,
		Decisions:       h.Count(),
		Seconds:         round(sec, 3),
		DecisionsPerSec: round(float64(h.Count())/sec, 1),
		P50ms:           ms(h.Quantile(0.50)),
		P99ms:           ms(h.Quantile(0.99)),
		MaxMs:           ms(h.Max()),
		Fsyncs:          fsyncs,
		FsyncsPerSec:    round(float64(fsyncs)/sec, 1),
	}
	if fsyncs > 0 {
		row.RecordsPerFsync = round(float64(h.Count())/float64(fsyncs), 2)
	}
	return row
}

func ms(d time.Duration) float64 { return round(float64(d)/1e6, 4) }

func round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

// WriteTable prints the report for people: where it ran, one line per
// cell, then the derived figures.
func (r *LogReport) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "Tandem decision log on %s\n", r.FSInfo)
	fmt.Fprintf(w, "  directory %s (removed)\n", r.Dir)
	cell := fmt.Sprintf("%gs per cell", r.CellSeconds)
	if r.CellRecords > 0 {
		cell = fmt.Sprintf("%d records per cell", r.CellRecords)
	}
	fmt.Fprintf(w, "  %d-byte records (%d bytes on disk), %s, batch window %g ms, %d MiB segments, GOMAXPROCS %d\n",
		r.RecordSize, r.RecordBytes, cell, r.BatchWindowMs, r.SegmentBytes>>20, r.GOMAXPROCS)
	if r.OtherCPUPercent >= 0 {
		fmt.Fprintf(w, "  other processes used %.1f%% of the CPUs meanwhile\n", r.OtherCPUPercent)
	}
	for _, warn := range r.Warnings {
		fmt.Fprintf(w, "  WARNING: %s\n", warn)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tcommitters\tdecisions/s\tp50 ms\tp99 ms\tfsyncs/s\trecords/fsync\t")
	for _, row := range r.Rows {
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.3f\t%.3f\t%.0f\t%.1f\t\n",
			row.Mode, row.Committers, row.DecisionsPerSec, row.P50ms, row.P99ms, row.FsyncsPerSec, row.RecordsPerFsync)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	figure := func(name string, v *float64, meaning string) {
		s := "n/a"
		if v != nil {
			s = fmt.Sprintf("%.2f", *v)
		}
		fmt.Fprintf(w, "%-26s %7s  %s\n", name, s, meaning)
	}
	figure("single_latency_ratio", r.SingleLatencyRatio, "immediate p50 at 1 committer / raw write+fdatasync p50 (1 = the log adds nothing)")
	figure("scaling_256_vs_1", r.Scaling256vs1, "immediate decisions/s at 256 committers / at 1 (group commit)")
	figure("batch_fsync_reduction_256", r.BatchFsyncReduction256, "immediate fsyncs/s / batch fsyncs/s at 256 committers")
	_, err := fmt.Fprint(w)
	return err
}
