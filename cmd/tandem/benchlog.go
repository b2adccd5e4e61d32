package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"

	"github.com/tandem-tx/tandem/internal/bench"
)

// subBenchmark is one `tandem bench NAME`. Add one with registerBench in an
// init func of its own file; `tandem bench` lists them.
type subBenchmark struct {
	name    string
	summary string
	usage   string // after "tandem bench <name> "
	help    string // what it does, for --help
	run     func(args []string, stdout, stderr io.Writer) error
}

var benchmarks = map[string]*subBenchmark{}

func registerBench(b *subBenchmark) { benchmarks[b.name] = b }

func init() {
	register(&command{
		name:    "bench",
		summary: "measure Tandem on this machine: transactions against the databases (--workload, --compare), or the decision log's disk (log)",
		usage:   "[<benchmark>] [flags]",
		run:     runBench,
	})
	registerBench(&subBenchmark{
		name:    "log",
		summary: "the decision log on this disk: raw write+fdatasync, then group commit at 1 to 1024 committers, immediate and batch",
		usage:   "[--dir DIR] [--duration D | --records N] [--record-size BYTES] [--batch-window D] [--committers LIST] [--json]",
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

// runBench dispatches `tandem bench NAME ...`; without NAME (or with
// --help) it lists the benchmarks.
func runBench(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		printBenchList(stdout)
		return nil
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		printBenchList(stderr)
		return flag.ErrHelp
	}
	if strings.HasPrefix(args[0], "-") {
		// tandem bench --workload xa ...: the database benchmark.
		return benchmarks["db"].run(args, stdout, stderr)
	}
	b, ok := benchmarks[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "tandem bench: unknown benchmark %q\n\n", args[0])
		printBenchList(stderr)
		return errUsage
	}
	return b.run(args[1:], stdout, stderr)
}

func printBenchList(w io.Writer) {
	fmt.Fprint(w, "Usage: tandem bench <benchmark> [flags]\n\nBenchmarks:\n")
	names := make([]string, 0, len(benchmarks))
	for n := range benchmarks {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, benchmarks[n].summary)
	}
	fmt.Fprint(w, "\nRun \"tandem bench <benchmark> --help\" for a benchmark's flags.\n"+
		"\"tandem bench --workload W\" and \"tandem bench --compare A,B\" are short for \"tandem bench db ...\".\n")
}

// benchFlags is newFlags for a sub-benchmark: its --help prints
// "tandem bench <name>", the usage line, the help text and the flags.
func benchFlags(b *subBenchmark, stderr io.Writer) *flag.FlagSet {
	fs := newFlags(&command{name: "bench " + b.name, summary: b.summary, usage: b.usage}, stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: tandem bench %s %s\n\nMeasures %s.\n\n%s\n", b.name, b.usage, b.summary, b.help)
		printFlags(fs, stderr)
	}
	return fs
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
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "tandem bench log: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return errUsage
	}
	var err error
	if cfg.Committers, err = parseInts(*committers); err != nil {
		fmt.Fprintf(stderr, "tandem bench log: --committers: %v\n", err)
		return errUsage
	}
	cfg.Progress = stderr

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep, err := bench.Log(ctx, cfg)
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return errors.New("interrupted; temporary files removed")
		}
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
