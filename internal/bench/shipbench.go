package bench

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tandem-tx/tandem/internal/standby"
	"github.com/tandem-tx/tandem/internal/testproxy"
	"github.com/tandem-tx/tandem/internal/wal"
)

// ShipConfig configures Ship (`tandem bench ship`). DefaultShipConfig gives
// the defaults.
type ShipConfig struct {
	// Dir is where Ship creates its temporary directory (removed at the
	// end): the primary's log and each run's standby log go there, written
	// with real fdatasyncs.
	Dir string
	// Backlog is how much log (records as the log stores them: header,
	// payload, padding) the primary has written before any standby
	// connects; each run ships all of it.
	Backlog int64
	// RecordSize is each record's payload, in bytes: a decision record
	// (gtrid, branches) is about 100 to 200.
	RecordSize int
	// SegmentSize of the primary's and the standby's logs (a coordinator's
	// default: its 64 MiB log / 8).
	SegmentSize int64
	// RTT, Bandwidth (bytes per second, shared by every connection; 0:
	// unlimited) and Window (bytes in flight per connection, as a TCP
	// window; 0: unlimited) describe the simulated link between primary and
	// standby (testproxy.Link, with Delay RTT/2).
	RTT       time.Duration
	Bandwidth int64
	Window    int64
	// MaxSend is the shipper's ShipperConfig.MaxSend (0: its default).
	MaxSend int
	// Runs are measured in this order, each with a fresh standby.
	Runs []ShipRun
	// Progress, if not nil, gets a line every few seconds and one per run.
	Progress io.Writer
}

// ShipRun is one measurement: a transport (arch or async) and, for arch,
// the number of parallel connections.
type ShipRun struct {
	Transport   string `json:"transport"`
	Connections int    `json:"connections"`
}

// DefaultShipWindow is the Window used when the kernel's default receive
// buffer (net.ipv4.tcp_rmem's middle value) cannot be read.
const DefaultShipWindow = 128 << 10

// KernelDefaultWindow is the kernel's default TCP receive buffer
// (net.ipv4.tcp_rmem's default), the window of a connection whose buffers
// are not tuned and not autotuned, or DefaultShipWindow.
func KernelDefaultWindow() int64 {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_rmem")
	if err != nil {
		return DefaultShipWindow
	}
	f := strings.Fields(string(b))
	if len(f) != 3 {
		return DefaultShipWindow
	}
	n, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil || n <= 0 {
		return DefaultShipWindow
	}
	return n
}

// DefaultShipConfig returns the defaults of `tandem bench ship`.
func DefaultShipConfig() ShipConfig {
	return ShipConfig{
		Backlog:     256 << 20,
		RecordSize:  160,
		SegmentSize: 8 << 20,
		RTT:         50 * time.Millisecond,
		Bandwidth:   1e9 / 8, // 1 Gbit/s
		Window:      KernelDefaultWindow(),
		Runs:        []ShipRun{{"arch", 1}, {"arch", 5}, {"async", 1}},
	}
}

func (c *ShipConfig) validate() error {
	switch {
	case c.Backlog < 1<<20:
		return fmt.Errorf("backlog %d bytes: at least 1 MiB", c.Backlog)
	case c.RecordSize < 1 || c.RecordSize > 1<<20:
		return fmt.Errorf("record size %d must be between 1 byte and 1 MiB", c.RecordSize)
	case c.SegmentSize < 1<<20 || c.SegmentSize%8 != 0:
		return fmt.Errorf("segment size %d must be a multiple of 8 and at least 1 MiB", c.SegmentSize)
	case int64(c.RecordSize)*4 > c.SegmentSize:
		return fmt.Errorf("record size %d is too large for %d-byte segments", c.RecordSize, c.SegmentSize)
	case c.RTT < 0 || c.Bandwidth < 0 || c.Window < 0:
		return errors.New("rtt, bandwidth and window must not be negative")
	case len(c.Runs) == 0:
		return errors.New("nothing to run")
	}
	for _, r := range c.Runs {
		switch {
		case r.Transport == string(standby.Arch) && (r.Connections < 1 || r.Connections > standby.MaxArchConnections):
			return fmt.Errorf("arch with %d connections: use 1 to %d", r.Connections, standby.MaxArchConnections)
		case r.Transport == string(standby.Async) && r.Connections != 1:
			return fmt.Errorf("async has one connection, not %d", r.Connections)
		case r.Transport != string(standby.Arch) && r.Transport != string(standby.Async):
			return fmt.Errorf("transport %q: use arch or async", r.Transport)
		}
	}
	return nil
}

// ShipResult is one run's measurement.
type ShipResult struct {
	ShipRun
	// Seconds from the standby's start to the primary's receipt of its
	// acknowledgement of the backlog's last record (on the standby's disk).
	Seconds float64 `json:"seconds"`
	// MiBPerSec is the backlog's bytes over Seconds.
	MiBPerSec float64 `json:"mib_per_sec"`
	// WireBytes are the bytes the link carried to the standby (frames).
	WireBytes int64 `json:"wire_bytes"`
	// VsArch1 is arch with 1 connection's Seconds over this run's: how many
	// times faster (present when that run was measured).
	VsArch1 *float64 `json:"vs_arch_1,omitempty"`
}

// ShipReport is the result of Ship.
type ShipReport struct {
	Dir string `json:"dir"` // the temporary directory, removed since
	FSInfo
	BacklogBytes   int64   `json:"backlog_bytes"` // the log's bytes shipped, headers included
	Records        int     `json:"records"`
	RecordSize     int     `json:"record_size"`
	SegmentBytes   int64   `json:"segment_bytes"`
	RTTms          float64 `json:"rtt_ms"`
	BandwidthBytes int64   `json:"bandwidth_bytes_per_sec"` // 0: unlimited
	WindowBytes    int64   `json:"window_bytes"`            // 0: unlimited
	MaxSend        int     `json:"max_send"`
	CPUs           int     `json:"cpus"`
	// OtherCPUPercent is the share of the machine's CPUs that other
	// processes used during the runs (-1 if unknown).
	OtherCPUPercent float64      `json:"other_cpu_percent"`
	Results         []ShipResult `json:"results"`
}

// Ship measures how long a standby takes to copy a primary's backlog over a
// simulated long link, per transport and number of connections: the
// primary's log (real fdatasyncs, under cfg.Dir) holds cfg.Backlog of
// records written with no standby connected; then, per run, a primary
// (wal replay into a Shipper) serves a fresh standby (a Receiver with its
// own log there) through a testproxy link of cfg.RTT, cfg.Bandwidth and
// cfg.Window, and the time until the primary holds the standby's
// acknowledgement of the backlog's last record is measured. The backlog
// ends in a completed segment (a few filler records follow it in the next
// one), so arch ships all of it.
func Ship(ctx context.Context, cfg ShipConfig) (*ShipReport, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("bench ship: %w", err)
	}
	parent := cfg.Dir
	if parent == "" {
		parent = "."
	}
	root, err := os.MkdirTemp(parent, "tandem-bench-ship-")
	if err != nil {
		return nil, fmt.Errorf("bench ship: create a temporary directory under %s: %w", parent, err)
	}
	defer os.RemoveAll(root)
	if abs, err := filepath.Abs(root); err == nil {
		root = abs
	}
	fi, err := fsInfo(root)
	if err != nil {
		return nil, fmt.Errorf("bench ship: %w", err)
	}
	rep := &ShipReport{Dir: root, FSInfo: fi, RecordSize: cfg.RecordSize, SegmentBytes: cfg.SegmentSize,
		RTTms: float64(cfg.RTT) / float64(time.Millisecond), BandwidthBytes: cfg.Bandwidth, WindowBytes: cfg.Window,
		MaxSend: cfg.MaxSend, CPUs: runtime.NumCPU()}
	if rep.MaxSend == 0 {
		rep.MaxSend = standby.DefaultMaxSend
	}
	pdir := filepath.Join(root, "primary")
	progress(cfg.Progress, "writing a backlog of %s of %d-byte records into %s ...", mib(cfg.Backlog), cfg.RecordSize, pdir)
	start := time.Now()
	target, n, bytes, err := writeBacklog(ctx, pdir, cfg)
	if err != nil {
		return nil, fmt.Errorf("bench ship: write the backlog: %w", err)
	}
	rep.Records, rep.BacklogBytes = n, bytes
	progress(cfg.Progress, "backlog: %d records, %s, last at %s, written in %.1fs", n, mib(bytes), target, time.Since(start).Seconds())
	before := sampleMachine()
	for i, run := range cfg.Runs {
		res, err := shipRun(ctx, cfg, pdir, filepath.Join(root, fmt.Sprintf("standby-%d", i)), run, target, bytes)
		if err != nil {
			return nil, fmt.Errorf("bench ship: %s with %d connections: %w", run.Transport, run.Connections, err)
		}
		rep.Results = append(rep.Results, res)
		progress(cfg.Progress, "%s x%d: %.1fs, %.2f MiB/s", run.Transport, run.Connections, res.Seconds, res.MiBPerSec)
	}
	rep.OtherCPUPercent = othersCPU(before, sampleMachine(), runtime.NumCPU())
	var arch1 float64
	for _, r := range rep.Results {
		if r.Transport == string(standby.Arch) && r.Connections == 1 {
			arch1 = r.Seconds
		}
	}
	if arch1 > 0 {
		for i := range rep.Results {
			if s := rep.Results[i].Seconds; s > 0 {
				v := float64(int(arch1/s*100+0.5)) / 100
				rep.Results[i].VsArch1 = &v
			}
		}
	}
	return rep, nil
}

func progress(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, "bench ship: "+format+"\n", args...)
	}
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// writeBacklog writes cfg.Backlog of records into a new log in dir, then
// filler records until the log has moved to a new segment. It returns the
// position of the backlog's last record, the number of backlog records and
// their bytes in the log.
func writeBacklog(ctx context.Context, dir string, cfg ShipConfig) (wal.Position, int, int64, error) {
	l, err := wal.Open(wal.Options{Dir: dir, SegmentSize: cfg.SegmentSize}, nil)
	if err != nil {
		return wal.Position{}, 0, 0, err
	}
	defer l.Close()
	noise := make([]byte, 1<<20+cfg.RecordSize)
	if _, err := rand.Read(noise); err != nil {
		return wal.Position{}, 0, 0, err
	}
	payload := func(i int) []byte {
		off := (i * 7919) % (1 << 20)
		return noise[off : off+cfg.RecordSize]
	}
	var last wal.Position
	n := 0
	for ; ; n++ {
		if n%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return last, n, 0, err
			}
			if l.Usage().Used >= cfg.Backlog {
				break
			}
		}
		if _, err := l.AppendNoWait(1, payload(n)); err != nil {
			return last, n, 0, err
		}
	}
	if last, err = l.Append(1, payload(n)); err != nil { // the last one, with its exact position
		return last, n, 0, err
	}
	n++
	bytes := l.Usage().Used
	for l.Segment() == last.Segment {
		for range 4096 {
			if _, err := l.AppendNoWait(2, payload(n)); err != nil {
				return last, n, 0, err
			}
		}
		if _, err := l.Append(2, payload(n)); err != nil {
			return last, n, 0, err
		}
	}
	return last, n, bytes, l.Close()
}

// shipRun is one run: a primary replaying the backlog's log into a Shipper,
// a fresh standby in sdir behind a simulated link, timed until the primary
// has the standby's acknowledgement of target.
func shipRun(ctx context.Context, cfg ShipConfig, pdir, sdir string, run ShipRun, target wal.Position, bytes int64) (ShipResult, error) {
	res := ShipResult{ShipRun: run}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var id standby.Identity
	if _, err := rand.Read(id.Cluster[:]); err != nil {
		return res, err
	}
	id.Epoch = 1
	sh, err := standby.NewShipper(standby.ShipperConfig{Listen: "127.0.0.1:0", Transport: standby.Transport(run.Transport),
		Protection: standby.MaxPerformance, NetTimeout: 30 * time.Second, Identity: id, MaxRetained: 1 << 40,
		MaxSend: cfg.MaxSend, MaxConnections: run.Connections, Logger: quiet})
	if err != nil {
		return res, err
	}
	defer sh.Close()
	l, err := wal.Open(wal.Options{Dir: pdir, SegmentSize: cfg.SegmentSize, OnWrite: sh.Written},
		func(pos wal.Position, typ wal.Type, p []byte) error { sh.Replayed(pos, typ, p); return nil })
	if err != nil {
		return res, fmt.Errorf("open the primary's log: %w", err)
	}
	defer l.Close()
	prx, err := testproxy.NewLink(sh.Addr(), testproxy.Link{Delay: cfg.RTT / 2, Bandwidth: cfg.Bandwidth, Window: cfg.Window})
	if err != nil {
		return res, err
	}
	defer prx.Close()
	first := l.Usage().First
	start := time.Now()
	r, err := standby.OpenReceiver(standby.ReceiverConfig{Primary: prx.Addr(), Dir: sdir, SegmentSize: cfg.SegmentSize,
		NetTimeout: 30 * time.Second, Logger: quiet})
	if err != nil {
		return res, err
	}
	defer func() {
		r.Close()
		os.RemoveAll(sdir)
	}()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	lastReport, lastMove := start, start
	var prev wal.Position
	for {
		acked := sh.Acked()
		if !acked.Less(target) {
			break
		}
		now := time.Now()
		if acked != prev {
			prev, lastMove = acked, now
		}
		if now.Sub(lastMove) > 2*time.Minute {
			return res, fmt.Errorf("no progress for 2 minutes at %s of %s (standby: %v)", acked, target, r.LastError())
		}
		if now.Sub(lastReport) >= 5*time.Second {
			lastReport = now
			done := min(int64(acked.Segment-min(acked.Segment, first))*cfg.SegmentSize+acked.Offset, bytes)
			el := now.Sub(start).Seconds()
			progress(cfg.Progress, "%s x%d: %s of %s acknowledged after %.0fs (%.2f MiB/s)", run.Transport, run.Connections,
				mib(done), mib(bytes), el, float64(done)/(1<<20)/el)
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-tick.C:
		}
	}
	res.Seconds = time.Since(start).Seconds()
	res.MiBPerSec = float64(bytes) / (1 << 20) / res.Seconds
	res.WireBytes = prx.Stats().FromTarget
	return res, nil
}

// WriteTable writes the report as text.
func (r *ShipReport) WriteTable(w io.Writer) error {
	link := fmt.Sprintf("%.0f ms RTT", r.RTTms)
	if r.BandwidthBytes > 0 {
		link += fmt.Sprintf(", %.0f Mbit/s", float64(r.BandwidthBytes)*8/1e6)
	} else {
		link += ", unlimited bandwidth"
	}
	if r.WindowBytes > 0 {
		link += fmt.Sprintf(", window %d KiB per connection", r.WindowBytes>>10)
	} else {
		link += ", unlimited window"
	}
	fmt.Fprintf(w, "tandem bench ship: a backlog of %s (%d records of %d bytes, %d MiB segments) copied to a new standby\n",
		mib(r.BacklogBytes), r.Records, r.RecordSize, r.SegmentBytes>>20)
	fmt.Fprintf(w, "link (simulated): %s; sends of up to %d KiB; disk: %s\n", link, r.MaxSend>>10, r.FSInfo)
	if r.OtherCPUPercent >= 0 {
		fmt.Fprintf(w, "other processes used %.1f%% of the %d CPUs during the runs\n", r.OtherCPUPercent, r.CPUs)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "transport\tconnections\tseconds\tMiB/s\tvs arch x1\t")
	for _, x := range r.Results {
		vs := "-"
		if x.VsArch1 != nil {
			vs = fmt.Sprintf("%.2f", *x.VsArch1)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.2f\t%s\t\n", x.Transport, x.Connections, x.Seconds, x.MiBPerSec, vs)
	}
	return tw.Flush()
}
