package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"

	"github.com/tandem-tx/tandem/internal/bench"
	"github.com/tandem-tx/tandem/internal/benchhtml"
	"github.com/tandem-tx/tandem/internal/cli"
)

func init() {
	registerBench(&subBenchmark{
		name:    "log",
		summary: "the decision log on this disk: raw write+fdatasync, then group commit at 1 to 1024 committers, immediate and batch",
		usage:   "[--dir DIR] [--duration D | --records N] [--record-size BYTES] [--batch-window D] [--committers LIST] [--json] [--html FILE]",
		help: `Like PostgreSQL's pg_test_fsync, for Tandem's decision log. In one run:
  1. raw: write one record and fdatasync it, again and again, into a
     preallocated file, sequentially and 8-byte aligned as the log writes:
     the disk's own floor.
  2. the decision log (a fresh log per cell, in a temporary directory under
     --dir) with 1, 8, 64, 256 and 1024 goroutines appending concurrently,
     in immediate write mode (group commit: one fdatasync for every record
     waiting at that moment), then in batch mode (the writer also waits up
     to --batch-window for more records before each fdatasync).
Each cell runs for --duration. It prints which file system and device it
measured, a table (decisions/s; p50 and p99 latency of one Append, ms;
fdatasyncs/s; records per fdatasync) and three derived figures:
  single_latency_ratio       log p50 at 1 committer / raw p50: what the log adds
  scaling_256_vs_1           decisions/s at 256 committers / at 1 (immediate)
  batch_fsync_reduction_256  immediate fsyncs/s / batch fsyncs/s at 256
Progress goes to stderr, one line per cell. Every cell's log keeps its
preallocated 64 MiB segments until the end of the run (about 1 GiB in all
with the defaults); everything is removed at the end, also on Ctrl-C.
Other processes' CPU use during the run is reported: on a busy machine the
figures are pessimistic, so run it on a quiet one.

Example: tandem bench log --dir /var/lib/tandem --json > log-bench.json`,
		run: runBenchLog,
	})
}

func runBenchLog(args []string, stdout, stderr io.Writer) error {
	cfg := bench.DefaultLogConfig()
	fs := benchFlags(benchmarks["log"], stderr)
	fs.StringVar(&cfg.Dir, "dir", ".", "measure the file system of this directory: a temporary directory is made (and removed) under it; put it where the coordinator's data directory will be")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "how long each cell runs (raw, and each mode × committers)")
	fs.IntVar(&cfg.Records, "records", 0, "run each cell until this many records are written, instead of for --duration")
	fs.IntVar(&cfg.RecordSize, "record-size", cfg.RecordSize, "payload bytes per record (a decision record is about 40 to 80)")
	fs.DurationVar(&cfg.BatchWindow, "batch-window", cfg.BatchWindow, "how long the batch-mode writer gathers records before each fdatasync")
	committers := fs.String("committers", joinInts(cfg.Committers), "comma-separated numbers of concurrent committers")
	asJSON := fs.Bool("json", false, "print one JSON object (rows and derived figures) instead of the table")
	htmlFile := fs.String("html", "", htmlUsage)
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s log: unexpected argument %q\n", prog, fs.Arg(0))
		fs.Usage()
		return cli.ErrUsage
	}
	var err error
	if cfg.Committers, err = parseInts(*committers); err != nil {
		fmt.Fprintf(stderr, "%s log: --committers: %v\n", prog, err)
		return cli.ErrUsage
	}
	cfg.Progress = stderr

	page, err := createHTML(*htmlFile)
	if err != nil {
		return err
	}
	defer page.abandon()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep, err := bench.Log(ctx, cfg)
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return errors.New("interrupted; temporary files removed")
		}
		return err
	}
	if err := page.write("log", args, stderr, func(w io.Writer, run benchhtml.Run) error { return benchhtml.WriteLog(w, rep, run) }); err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return rep.WriteTable(stdout)
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, n)
	}
	return out, nil
}
