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
	"time"

	"github.com/tandem-tx/tandem/internal/bench"
	"github.com/tandem-tx/tandem/internal/cli"
)

func init() {
	registerBench(&subBenchmark{
		name:    "ship",
		summary: "copying a backlog of the decision log to a new standby over a simulated long link: arch with 1 and N connections, async",
		usage:   "[--dir DIR] [--backlog SIZE] [--record-size BYTES] [--rtt D] [--bandwidth RATE] [--window SIZE] [--transport LIST] [--connections LIST] [--json]",
		help: `The Data Guard report's catch-up measurement (docs/field-reports.md, section 4),
for Tandem's standby transports. A primary's decision log (in a temporary
directory under --dir, real fdatasyncs) gets --backlog of records with no
standby connected. Then, for each transport (and, for arch, each number of
connections), a primary replays that log into its shipper and a new standby
copies it through a simulated link (internal/testproxy: one-way delay
--rtt/2, --bandwidth shared by all connections, --window bytes in flight per
connection), writing its own log with real fdatasyncs. The time runs from
the standby's start until the primary holds the standby's acknowledgement of
the backlog's last record.
  arch   ships completed segments, each whole on one of --connections
         parallel connections, applied in order on the standby
  async  streams the records on one connection
The window is what bounds one connection on a long link (window / RTT): its
default is the kernel's default receive buffer (net.ipv4.tcp_rmem's middle
value), the window of a connection whose buffers are neither set nor
autotuned; Linux's autotuning can grow a real one up to tcp_rmem's maximum.
Parallel connections multiply it; larger socket buffers (tandem serve's
socket buffer options) raise it.
It prints a table (seconds, MiB/s, and how many times faster than arch with
one connection), progress on stderr, and the other processes' CPU use.
Temporary files are removed at the end, also on Ctrl-C.

Example: tandem bench ship --rtt 50ms --backlog 256MiB --connections 1,5`,
		run: runBenchShip,
	})
}

func runBenchShip(args []string, stdout, stderr io.Writer) error {
	cfg := bench.DefaultShipConfig()
	fs := benchFlags(benchmarks["ship"], stderr)
	fs.StringVar(&cfg.Dir, "dir", ".", "put the temporary logs on this directory's file system")
	backlog := fs.String("backlog", "256MiB", "log to ship (records with their headers): e.g. 64MiB, 1GiB")
	fs.IntVar(&cfg.RecordSize, "record-size", cfg.RecordSize, "payload bytes per record (a decision record is about 100 to 200)")
	segment := fs.String("segment-size", "8MiB", "segment size of the primary's and the standby's logs")
	fs.DurationVar(&cfg.RTT, "rtt", cfg.RTT, "round-trip time of the simulated link")
	bandwidth := fs.String("bandwidth", "1Gbit", "bandwidth of the simulated link, shared by all connections: e.g. 100Mbit, 1Gbit, or 0 for unlimited")
	window := fs.String("window", strconv.FormatInt(cfg.Window, 10), "bytes in flight per connection (a TCP window), e.g. 128KiB, 4MiB, or 0 for unlimited (default: the kernel's default receive buffer)")
	transports := fs.String("transport", "arch,async", "comma-separated transports to measure: arch, async")
	connections := fs.String("connections", "1,5", "comma-separated numbers of arch connections")
	fs.IntVar(&cfg.MaxSend, "max-send", 0, "largest RECORDS frame the shipper sends, in bytes (default 1 MiB)")
	asJSON := fs.Bool("json", false, "print one JSON object instead of the table")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s ship: unexpected argument %q\n", prog, fs.Arg(0))
		fs.Usage()
		return cli.ErrUsage
	}
	bad := func(flag string, err error) error {
		fmt.Fprintf(stderr, "%s ship: --%s: %v\n", prog, flag, err)
		return cli.ErrUsage
	}
	var err error
	if cfg.Backlog, err = parseSize(*backlog); err != nil {
		return bad("backlog", err)
	}
	if cfg.SegmentSize, err = parseSize(*segment); err != nil {
		return bad("segment-size", err)
	}
	if cfg.Window, err = parseSize(*window); err != nil {
		return bad("window", err)
	}
	if cfg.Bandwidth, err = parseBitrate(*bandwidth); err != nil {
		return bad("bandwidth", err)
	}
	conns, err := parseInts(*connections)
	if err != nil {
		return bad("connections", err)
	}
	cfg.Runs = nil
	for _, t := range strings.Split(*transports, ",") {
		switch t = strings.TrimSpace(t); t {
		case "arch":
			for _, n := range conns {
				cfg.Runs = append(cfg.Runs, bench.ShipRun{Transport: t, Connections: n})
			}
		case "async":
			cfg.Runs = append(cfg.Runs, bench.ShipRun{Transport: t, Connections: 1})
		default:
			return bad("transport", fmt.Errorf("%q: use arch or async", t))
		}
	}
	cfg.Progress = stderr

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	start := time.Now()
	rep, err := bench.Ship(ctx, cfg)
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return errors.New("interrupted; temporary files removed")
		}
		return err
	}
	fmt.Fprintf(stderr, "bench ship: done in %.0fs\n", time.Since(start).Seconds())
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return rep.WriteTable(stdout)
}

// parseSize reads a byte count: a number with an optional unit B, KiB, MiB,
// GiB (powers of 1024) or KB, MB, GB (of 1000).
func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}}
	s = strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%q is not a size (e.g. 256MiB, 128KiB, 1GB)", s)
	}
	return int64(v * float64(mult)), nil
}

// parseBitrate reads a link rate in bits per second (bit, Kbit, Mbit, Gbit)
// and returns bytes per second; 0 is unlimited.
func parseBitrate(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   float64
	}{{"Kbit", 1e3}, {"Mbit", 1e6}, {"Gbit", 1e9}, {"bit", 1}}
	s = strings.TrimSpace(s)
	mult := 1.0
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%q is not a rate (e.g. 100Mbit, 1Gbit, 0 for unlimited)", s)
	}
	return int64(v * mult / 8), nil
}
