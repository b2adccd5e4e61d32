package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/tandem-tx/tandem/client"
	"github.com/tandem-tx/tandem/internal/bench"
	"github.com/tandem-tx/tandem/internal/benchhtml"
	"github.com/tandem-tx/tandem/internal/cli"
	"github.com/tandem-tx/tandem/internal/config"
	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/internal/server"
	"github.com/tandem-tx/tandem/waits"
)

func init() {
	var list strings.Builder
	for _, w := range bench.Workloads {
		fmt.Fprintf(&list, "  %-10s %s\n", w.Name, w.Summary)
	}
	registerBench(&subBenchmark{
		name:    "db",
		summary: "transactions against the real databases: sql, raw2pc, xa, 1pc, plain, oltp, xa-standby (also: tandem bench --workload W)",
		usage:   "[--workload W | --compare A,B] [--pg-driver sql|pgx] [--threads N] [--duration D | --txns N] [--coordinator ADDR] [--standby sync|async [--standby-rtt D] ...] [--json] [--html FILE] [--trace N]",
		help: `The unit of work of the Oracle XA report (docs/field-reports.md, section 1):
one insert on each of two resource managers, PostgreSQL and MariaDB by
default. Workloads:
` + list.String() + `
Each thread has its own connection to each database. --compare runs two
workloads in one run, interleaved in slices (so that drift hits both alike),
and reports ratio = TPS(B) / TPS(A). Without --coordinator a coordinator is
started in this process (decision log under --dir) and the clients reach it
over gRPC on loopback, so the RPC cost is real. An external coordinator that
requires a token: set TANDEM_AUTH_TOKEN_FILE to its file.

PostgreSQL's driver: --pg-driver sql (database/sql over pgx's stdlib driver;
the SDK's Tx.Branch) or pgx (pgx natively, each thread its own *pgx.Conn;
the SDK's Tx.BranchPgx); auto, the default, takes pgx for 1pc, plain, oltp
and oltp-sql, where it measured faster, and sql for the others. A workload
named W@sql or W@pgx uses that driver whatever --pg-driver says, so
--compare xa@sql,xa@pgx measures the two against each other in one run. Both
send BEGIN with the first statement in one pipelined batch; MariaDB is
always database/sql.

Report: elapsed, TPS, latency p50/p95/p99 of a whole transaction, round trips
per transaction (to each RM and to the coordinator), the client's wait table
and the coordinator's, and the unaccounted share: the part of the latency
spent in no named wait (CPU, scheduling, the SDK's own work).

Database syncs per committed transaction, for every workload: PostgreSQL's
pg_stat_wal wal_sync and wal_write, MariaDB's Binlog_group_commits,
Binlog_commits and Innodb_os_log_fsyncs or (MariaDB 10.8 and later, where it is
gone) Innodb_data_fsyncs, read before and after each slice. They are
server-wide: other sessions' work during a slice counts too. PostgreSQL
sessions publish their counts late; the bench's own are flushed after each
slice (pg_stat_force_next_flush()), the coordinator's arrive a slice late,
in the workload's next slice, and after a workload that commits through a coordinator the run waits
11 s for the last of them (--db-counters=false skips the counters and the wait).

The standby's cost: --compare xa,xa-standby --standby sync|async runs xa
against two in-process coordinators in the same run, interleaved: the usual
one, and a second one (the primary) that ships its decision log to a standby
started in this process (its own log), through a TCP proxy on loopback that
adds --standby-rtt of round trip (half each way) and, with
--standby-bandwidth and --standby-window, limits the link. Both coordinators and the standby
fdatasync their logs on the disk of --dir. --protection picks the Data Guard
mode (sync: max-availability, the default, or max-protection; async:
max-performance). Measuring starts once the standby is connected and has
every record; between slices the run waits, unmeasured, until the idle
coordinator owes nothing (phase 2, the standby's copy). The standby section
of the report: transport, protection, the link, the primary's lag behind the
standby sampled every 100 ms during xa-standby's slices (bytes, seconds: the
data-loss exposure in time, and records: the decisions a failover would
lose; max and mean), and both workloads' log and standby wait events
(log file sync, which on the primary includes standby sync ack; log file
fdatasync; standby sync ack; standby log write), per committed transaction.

Tables tandem_bench and tandem_bench_oltp are created on both databases;
tandem_bench is emptied at the start.

Examples:
  tandem bench --compare sql,xa --duration 10s
  tandem bench --compare raw2pc,xa --threads 32 --json
  tandem bench --compare xa@sql,xa@pgx --threads 8 --duration 20s
  tandem bench --workload oltp --threads 256 --duration 30s
  tandem bench --workload xa --txns 200 --trace 3
  tandem bench --compare xa,xa-standby --standby sync --threads 8 --duration 20s
  tandem bench --compare xa,xa-standby --standby async --standby-rtt 100ms
  tandem bench --compare xa,xa-standby --standby sync --standby-rtt 10ms --threads 64`,
		run: runBenchDB,
	})
}

func runBenchDB(args []string, stdout, stderr io.Writer) error {
	cfg := bench.DefaultDBConfig()
	fs := benchFlags(benchmarks["db"], stderr)
	workload := fs.String("workload", "", "one workload: sql, raw2pc, xa, 1pc, plain, oltp, oltp-sql or xa-standby; W@sql or W@pgx picks PostgreSQL's driver for it")
	compare := fs.String("compare", "", "two workloads A,B to run interleaved; the ratio is TPS(B)/TPS(A)")
	fs.StringVar(&cfg.PGDriver, "pg-driver", cfg.PGDriver, "how workloads without @sql or @pgx talk to PostgreSQL: auto (pgx natively for 1pc, plain, oltp and oltp-sql, where it measured faster; database/sql for the others), sql or pgx")
	fs.IntVar(&cfg.Threads, "threads", cfg.Threads, "concurrent clients")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "measured time per workload")
	fs.IntVar(&cfg.Txns, "txns", 0, "run this many transactions per workload instead of --duration")
	fs.DurationVar(&cfg.Slice, "slice", 0, "length of one interleaved slice (default 1s, or a quarter of --duration if shorter)")
	fs.IntVar(&cfg.Warmup, "warmup", cfg.Warmup, "unmeasured transactions per thread and workload before the run")
	fs.DurationVar(&cfg.TxnTimeout, "txn-timeout", cfg.TxnTimeout, "a transaction taking longer (a coordinator or database gone) counts as an error, so the run ends")
	fs.StringVar(&cfg.Coordinator, "coordinator", "", "an external coordinator's gRPC address (default: start one in this process)")
	fs.StringVar(&cfg.Admin, "admin", "", "with --coordinator: its admin address, to report its waits; without: serve /waits and /metrics here during the run")
	fs.StringVar(&cfg.Dir, "dir", ".", "directory under which the in-process coordinator's decision log is made (and removed): put it on the disk to measure")
	var rms cli.MultiFlag
	fs.Var(&rms, "rm", "a resource manager NAME=DRIVER:DSN; give two (default pg=postgres:$TANDEM_PG_DSN and maria=mysql:$TANDEM_MYSQL_DSN)")
	fs.StringVar(&cfg.OneRM, "one", "", "the RM of 1pc and plain (default the first)")
	fs.IntVar(&cfg.CoordConns, "coord-conns", 0, "the in-process coordinator's connections per RM (max_conns; default 16, or threads/4 if larger)")
	fs.BoolVar(&cfg.CoordNoSync, "unsafe-coordinator-nosync", false, "EXPERIMENT: the in-process coordinator skips fdatasync of its decision log, to show what it costs (never durable)")
	fs.IntVar(&cfg.OLTPRows, "oltp-rows", cfg.OLTPRows, "rows of the oltp table on each RM")
	fs.StringVar(&cfg.Standby.Transport, "standby", "", "xa-standby: the transport of its coordinator's decision log to the standby, sync or async")
	fs.StringVar(&cfg.Standby.Protection, "protection", "", "xa-standby: max-availability (sync's default), max-protection (sync) or max-performance (async)")
	fs.DurationVar(&cfg.Standby.RTT, "standby-rtt", 0, "xa-standby: round-trip delay the proxy adds between primary and standby (half each way)")
	fs.Func("standby-bandwidth", "xa-standby: the link's bandwidth, e.g. 4MB/s, 100Mbit/s (default unlimited)", func(v string) error {
		b, err := bench.ParseBandwidth(v)
		cfg.Standby.Bandwidth = b
		return err
	})
	fs.Func("standby-window", "xa-standby: bytes in flight per direction of the standby's connection, as a TCP window, e.g. 256KiB (default unlimited)", func(v string) error {
		b, err := config.ParseByteSize(v)
		cfg.Standby.Window = int64(b)
		return err
	})
	fs.Func("decide-at", "where the xa and oltp workloads decide: coordinator (default), rm or auto (a commit point — MariaDB first — records the decision in its tandem_decision table; the bench makes the table)", func(v string) error {
		d, err := client.ParseDecideAt(v)
		cfg.DecideAt = d
		return err
	})
	fs.StringVar(&cfg.CommitPoint, "commit-point", "", "with --decide-at auto|rm: the RM that may be the commit point (e.g. pg or maria); default: auto's choice (MariaDB first)")
	fs.Func("visibility", "xa and oltp: sync (default: Commit returns once every branch committed) or async (once the decision is durable; the rest commits in the background)", func(v string) error {
		switch v {
		case "sync":
			cfg.Visibility = client.VisibilitySync
		case "async":
			cfg.Visibility = client.VisibilityAsync
		default:
			return fmt.Errorf("visibility %q: use sync or async", v)
		}
		return nil
	})
	fs.BoolVar(&cfg.MayTakeOver, "may-take-over", false, "with --visibility async and --decide-at coordinator: let the coordinator take the MariaDB branches over while its standby lags (the SDK's CommitOptions.MayTakeOver); a worker reopens the sessions its commits end")
	dbCounters := fs.Bool("db-counters", true, "report the databases' own sync counters per transaction (pg_stat_wal; Binlog_group_commits, Innodb_*_fsyncs); after a workload that commits through a coordinator the run waits 11s for PostgreSQL's late counts")
	fs.DurationVar(&cfg.ActivityEvery, "db-activity", 50*time.Millisecond, "sample what every session of the bench's databases is doing (statement and wait: pg_stat_activity; PROCESSLIST and INNODB_TRX) this often during the measured slices, and report the session-time per statement and wait; 0 turns it off")
	asJSON := fs.Bool("json", false, "print one JSON object instead of the tables")
	htmlFile := fs.String("html", "", htmlUsage)
	fs.IntVar(&cfg.Trace, "trace", 0, "keep the full wait trace (client and coordinator) of this many transactions per workload")
	fs.IntVar(&cfg.Slowest, "slowest", 0, "print each workload's N slowest committed measured transactions, a line each: their client waits in order, and the time in none (where the tail goes; failed ones are counted as errors, not here)")
	traceFile := fs.String("trace-file", "-", "where --trace writes (JSON lines, one transaction each); - is stdout, after the report (with --json, the traces are in the report instead)")
	quiet := fs.Bool("quiet", false, "no progress lines on stderr")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of this process (clients and in-process coordinator) to this file (go tool pprof)")
	memProfile := fs.String("memprofile", "", "write this process's allocation profile (every allocation of the run, sampled) to this file at the end (go tool pprof -sample_index=alloc_space)")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected argument %q\n", prog, fs.Arg(0))
		return cli.ErrUsage
	}
	cfg.NoDBCounters = !*dbCounters
	switch {
	case *workload != "" && *compare != "":
		fmt.Fprintln(stderr, prog+": give --workload or --compare, not both")
		return cli.ErrUsage
	case *compare != "":
		cfg.Workloads = strings.Split(*compare, ",")
		if len(cfg.Workloads) != 2 {
			fmt.Fprintf(stderr, "%s: --compare %q: want two workloads, A,B\n", prog, *compare)
			return cli.ErrUsage
		}
	case *workload != "":
		cfg.Workloads = []string{*workload}
	default:
		cfg.Workloads = []string{bench.WorkloadXA}
	}
	if len(rms) == 0 {
		// Expanded by ParseRMFlag, once: a DSN's own text is never expanded again.
		rms = cli.MultiFlag{"pg=postgres:${TANDEM_PG_DSN}", "maria=mysql:${TANDEM_MYSQL_DSN}"}
		if os.Getenv("TANDEM_PG_DSN") == "" || os.Getenv("TANDEM_MYSQL_DSN") == "" {
			return errors.New("no databases: set TANDEM_PG_DSN and TANDEM_MYSQL_DSN (scripts/db up; eval \"$(scripts/db env)\") or pass --rm twice")
		}
	}
	if f := os.Getenv("TANDEM_AUTH_TOKEN_FILE"); f != "" && cfg.Coordinator != "" {
		tok, err := server.ReadTokenFile(f)
		if err != nil {
			return err
		}
		cfg.AuthToken = tok
	}
	for _, f := range rms {
		name, r, err := config.ParseRMFlag(f)
		if err != nil {
			return err
		}
		d, err := rm.ParseDriver(r.Driver)
		if err != nil {
			return fmt.Errorf("--rm %s: %w", name, err)
		}
		cfg.RMs = append(cfg.RMs, bench.DBRM{Name: name, Driver: d, DSN: r.DSN})
	}
	if !*quiet {
		cfg.Progress = stderr
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	if *memProfile != "" {
		f, err := os.Create(*memProfile)
		if err != nil {
			return fmt.Errorf("--memprofile: %w", err)
		}
		defer func() {
			if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
				fmt.Fprintf(stderr, "--memprofile: %v\n", err)
			}
			f.Close()
		}()
	}
	page, err := createHTML(*htmlFile)
	if err != nil {
		return err
	}
	defer page.abandon()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep, err := bench.DB(ctx, cfg)
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return errors.New("interrupted")
		}
		return err
	}
	if err := page.write("db", args, stderr, func(w io.Writer, run benchhtml.Run) error { return benchhtml.WriteDB(w, rep, run) }); err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	if err := rep.WriteTable(stdout); err != nil {
		return err
	}
	return writeTraces(rep, *traceFile, stdout)
}

// writeTraces writes the kept traces as JSON lines (and, on stdout, as text first).
func writeTraces(rep *bench.DBReport, path string, stdout io.Writer) error {
	var traces []waits.JSONTrace
	for _, r := range rep.Results {
		traces = append(traces, r.Traces...)
	}
	if len(traces) == 0 {
		return nil
	}
	out := stdout
	if path != "-" {
		f, err := os.Create(path)
		if err != nil {
			return fmt.Errorf("--trace-file: %w", err)
		}
		defer f.Close()
		out = f
	} else {
		fmt.Fprintf(stdout, "\n== traces (%d)\n", len(traces))
	}
	enc := json.NewEncoder(out)
	for _, t := range traces {
		if err := enc.Encode(t); err != nil {
			return err
		}
	}
	if path != "-" {
		fmt.Fprintf(stdout, "\n%d traces written to %s\n", len(traces), path)
	}
	return nil
}
