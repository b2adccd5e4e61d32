package bench

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tandem-tx/tandem/internal/config"
	"github.com/tandem-tx/tandem/internal/server"
	"github.com/tandem-tx/tandem/internal/standby"
	"github.com/tandem-tx/tandem/internal/testproxy"
	"github.com/tandem-tx/tandem/waits"
)

// StandbyConfig configures the coordinator pair of the xa-standby workload:
// a second in-process coordinator (the primary) that ships its decision log
// to a standby in this process, through a TCP proxy that adds delay.
type StandbyConfig struct {
	// Transport: sync or async ("" when the run has no xa-standby).
	Transport string
	// Protection: max-availability or max-protection with sync,
	// max-performance with async; "" picks the transport's default.
	Protection string
	// RTT is the round-trip delay the proxy adds between primary and
	// standby (half each way).
	RTT time.Duration
	// Bandwidth limits each direction of the link, in bytes per second (0:
	// unlimited).
	Bandwidth int64
	// Window bounds the bytes in flight per direction of the connection,
	// as a TCP window does (0: unlimited).
	Window int64
	// NetTimeout: the shipper's and the receiver's (default 10s).
	NetTimeout time.Duration
}

func (s StandbyConfig) set() bool {
	return s.Transport != "" || s.Protection != "" || s.RTT != 0 || s.Bandwidth != 0 || s.Window != 0
}

// validateStandby checks the standby flags against the workloads.
func (c *DBConfig) validateStandby() error {
	s := c.Standby
	has := false
	for _, w := range c.Workloads {
		has = has || w == WorkloadXAStandby
	}
	switch {
	case !has && s.set():
		return errors.New("--standby, --protection, --standby-rtt, --standby-bandwidth and --standby-window configure the xa-standby workload: add it (e.g. --compare xa,xa-standby)")
	case !has:
		return nil
	case s.Transport == "":
		return errors.New("xa-standby needs --standby sync or --standby async (the transport of its coordinator's decision log to the standby)")
	case c.Coordinator != "":
		return errors.New("xa-standby starts its own coordinator and standby in this process: drop --coordinator")
	case s.RTT < 0:
		return fmt.Errorf("--standby-rtt %s is negative", s.RTT)
	case s.Bandwidth < 0:
		return fmt.Errorf("--standby-bandwidth %d is negative", s.Bandwidth)
	case s.Window < 0:
		return fmt.Errorf("--standby-window %d is negative", s.Window)
	}
	t, _, err := standby.ParseMode(s.Transport, s.Protection)
	if err != nil {
		return fmt.Errorf("--standby %s --protection %q: %w", s.Transport, s.Protection, err)
	}
	if t != standby.Sync && t != standby.Async {
		return fmt.Errorf("--standby %s: xa-standby measures sync or async; %s ships only completed segments, so the standby is never caught up under load (tandem bench ship measures it)", t, t)
	}
	return nil
}

// ParseBandwidth reads a link bandwidth as bytes per second: a number with
// an optional unit, and an optional "/s": B, KB, MB, GB (powers of 1000),
// KiB, MiB, GiB (powers of 1024), kbit, Mbit, Gbit (bits, powers of 1000;
// also kbps, Mbps, Gbps).
// "0" is unlimited.
func ParseBandwidth(s string) (int64, error) {
	t := strings.TrimSpace(s)
	t = strings.TrimSuffix(t, "/s")
	if strings.HasSuffix(t, "bps") { // Mbps: bits
		t = strings.TrimSuffix(t, "bps") + "bit"
	}
	t = strings.TrimSuffix(t, "ps") // MBps: bytes
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("bandwidth %q: want a number with a unit, e.g. 4MB/s, 100Mbit/s, 512KiB/s", s)
	}
	mult := map[string]float64{"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30,
		"bit": 1.0 / 8, "kbit": 1e3 / 8, "mbit": 1e6 / 8, "gbit": 1e9 / 8}[unit]
	if mult == 0 {
		return 0, fmt.Errorf("bandwidth %q: unknown unit %q: use B, KB, MB, GB, KiB, MiB, GiB, kbit, Mbit or Gbit (per second)", s, t[i:])
	}
	b := v * mult
	if b > math.MaxInt64/2 {
		return 0, fmt.Errorf("bandwidth %q is too large", s)
	}
	return int64(math.Round(b)), nil
}

// FormatBandwidth writes bytes per second for a person.
func FormatBandwidth(b int64) string {
	switch {
	case b <= 0:
		return "unlimited"
	case b >= 1e6:
		return fmt.Sprintf("%.3g MB/s (%.3g Mbit/s)", float64(b)/1e6, float64(b)*8/1e6)
	case b >= 1e3:
		return fmt.Sprintf("%.3g KB/s", float64(b)/1e3)
	}
	return fmt.Sprintf("%d B/s", b)
}

// standbyPair is xa-standby's primary coordinator, its standby, and the
// proxy between them.
type standbyPair struct {
	cfg        StandbyConfig
	transport  standby.Transport
	protection standby.Protection
	dir        string
	primary    *server.Server
	standby    *server.Server
	link       *testproxy.Proxy

	mu      sync.Mutex
	lag     lagAgg
	stop    chan struct{}
	stopped chan struct{}
}

// startStandbyPair starts the primary (its log in dir/primary), the proxy,
// and the standby (dir/standby), and waits until the standby is connected
// and has every record.
func startStandbyPair(dir string, base config.Config, sc StandbyConfig, noSync bool, logger *slog.Logger) (_ *standbyPair, err error) {
	tr, prot, err := standby.ParseMode(sc.Transport, sc.Protection)
	if err != nil {
		return nil, err
	}
	p := &standbyPair{cfg: sc, transport: tr, protection: prot, dir: dir}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	pc := base
	pc.Listen, pc.DataDir = "127.0.0.1:0", filepath.Join(dir, "primary")
	p.primary, err = server.Start(pc, server.Options{Logger: logger, NoSync: noSync, Standby: server.StandbyOptions{
		Listen: "127.0.0.1:0", Transport: string(tr), Protection: string(prot), NetTimeout: sc.NetTimeout}})
	if err != nil {
		return nil, fmt.Errorf("start xa-standby's primary coordinator: %w", err)
	}
	listen := p.primary.StandbyListenAddr()
	if p.link, err = newLink(listen, sc); err != nil {
		return nil, fmt.Errorf("the delaying proxy between primary and standby: %w", err)
	}
	scfg := base
	scfg.Listen, scfg.DataDir = "127.0.0.1:0", filepath.Join(dir, "standby")
	p.standby, err = server.Start(scfg, server.Options{Logger: logger, NoSync: noSync, Standby: server.StandbyOptions{
		Of: p.link.Addr(), NetTimeout: sc.NetTimeout}})
	if err != nil {
		return nil, fmt.Errorf("start xa-standby's standby: %w", err)
	}
	if err := p.waitCaughtUp(30 * time.Second); err != nil {
		return nil, err
	}
	return p, nil
}

// newLink is the proxy between primary and standby: rtt/2 of delay each
// way, the bandwidth of each direction, and the window per connection.
func newLink(target string, sc StandbyConfig) (*testproxy.Proxy, error) {
	return testproxy.NewLink(target, testproxy.Link{Delay: sc.RTT / 2, Bandwidth: sc.Bandwidth, Window: sc.Window})
}

// caughtUp: the standby is connected and has every record durable on the
// primary (and, under sync, the primary is protected).
func (p *standbyPair) caughtUp() (standby.Status, bool) {
	st, _ := p.primary.StandbyStatus()
	return st, st.Connected && st.LagRecords == 0 && (p.transport != standby.Sync || st.Protected)
}

// waitCaughtUp waits up to limit for caughtUp.
func (p *standbyPair) waitCaughtUp(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		st, ok := p.caughtUp()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			msg := fmt.Sprintf("connected=%v protected=%v lag %d records, %d bytes, %.3fs", st.Connected, st.Protected, st.LagRecords, st.LagBytes, st.LagSeconds)
			if sst, ok := p.standby.StandbyStatus(); ok && !sst.Connected {
				msg += "; the standby is not connected to " + p.link.Addr()
			}
			return fmt.Errorf("xa-standby: the standby did not catch up within %s (%s)", limit, msg)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// settle waits (up to limit, unmeasured) until the primary owes no phase 2
// and the standby has every record, so that the pair's trailing work does
// not land in the next workload's slice.
func (p *standbyPair) settle(limit time.Duration) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if _, ok := p.caughtUp(); ok && phase2Backlog(p.primary) == 0 {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// startSampling samples the primary's standby status every interval until
// stopSampling. When the standby had every durable record as the slice
// began, a sample's lag in seconds is counted at most from then: what it
// lacks became durable on the primary during the slice. (The shipper dates
// a record from its write, and an END record written without fdatasync
// when the previous slice ended only becomes durable, and shipped, with
// this slice's first commit: dated from its write, the idle time between
// slices would count as lag.)
func (p *standbyPair) startSampling(interval time.Duration) {
	var since time.Time
	if _, ok := p.caughtUp(); ok {
		since = time.Now()
	}
	p.stop, p.stopped = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(p.stopped)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				st, _ := p.primary.StandbyStatus()
				if !since.IsZero() {
					st.LagSeconds = min(st.LagSeconds, time.Since(since).Seconds())
				}
				p.mu.Lock()
				p.lag.add(st)
				p.mu.Unlock()
			}
		}
	}()
}

func (p *standbyPair) stopSampling() {
	if p.stop == nil {
		return
	}
	close(p.stop)
	<-p.stopped
	p.stop = nil
}

// close stops the standby pair; it reports whether the primary still owed
// phase 2 (its log must then be kept).
func (p *standbyPair) close() (keepLog bool) {
	p.stopSampling()
	if p.primary != nil {
		keepLog = drainAndStop(p.primary)
	}
	if p.standby != nil {
		_ = p.standby.Stop(5 * time.Second)
	}
	if p.link != nil {
		p.link.Close()
	}
	return keepLog
}

// drainAndStop waits (up to 30s) for an in-process coordinator's phase 2
// backlog, then stops it; true when some phase 2 was still owed.
func drainAndStop(srv *server.Server) (owed bool) {
	// Its decision log may be deleted only once every decision's phase 2
	// is done: a COMMIT still owed to a branch must not be forgotten.
	deadline := time.Now().Add(30 * time.Second)
	for phase2Backlog(srv) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	owed = phase2Backlog(srv) > 0
	_ = srv.Stop(5 * time.Second)
	return owed
}

// phase2Backlog is an in-process coordinator's count of decisions whose
// phase 2 is not done (the one place the bench reaches into the server).
func phase2Backlog(srv *server.Server) int {
	return srv.Coordinator().Phase2Backlog()
}

// removeOrKeep removes an in-process coordinator's directory, unless it
// still owes phase 2: then it says how to finish.
func removeOrKeep(dir, dataDir string, keep bool) {
	if keep {
		fmt.Fprintf(os.Stderr, "bench: an in-process coordinator still owed phase 2 to some branches after 30s; its decision log is kept in %s: "+
			"run `tandem serve --data-dir %s` with the same --rm flags to finish them\n", dir, dataDir)
		return
	}
	_ = os.RemoveAll(dir)
}

// lagAgg aggregates samples of the primary's standby status.
type lagAgg struct {
	n            int
	sumBytes     float64
	sumSeconds   float64
	sumRecords   float64
	maxBytes     int64
	maxSeconds   float64
	maxRecords   int
	disconnected int
	unprotected  int
}

func (a *lagAgg) add(st standby.Status) {
	a.n++
	a.sumBytes += float64(st.LagBytes)
	a.sumSeconds += st.LagSeconds
	a.sumRecords += float64(st.LagRecords)
	a.maxBytes = max(a.maxBytes, st.LagBytes)
	a.maxSeconds = max(a.maxSeconds, st.LagSeconds)
	a.maxRecords = max(a.maxRecords, st.LagRecords)
	if !st.Connected {
		a.disconnected++
	}
	if st.Transport == string(standby.Sync) && !st.Protected {
		a.unprotected++
	}
}

// StandbyLag is the primary's lag behind the standby, sampled during
// xa-standby's measured slices.
type StandbyLag struct {
	Samples         int     `json:"samples"`
	SampleIntervalS float64 `json:"sample_interval_s"`
	LagBytesMax     int64   `json:"lag_bytes_max"`
	LagBytesMean    float64 `json:"lag_bytes_mean"`
	// LagSeconds: age of the oldest record durable on the primary and not
	// on the standby, the data-loss exposure in time (counted at most from
	// the start of the slice: see startSampling).
	LagSecondsMax  float64 `json:"lag_seconds_max"`
	LagSecondsMean float64 `json:"lag_seconds_mean"`
	// ExposureRecords: records durable on the primary and not on the
	// standby (decisions a failover at that moment would lose).
	ExposureRecordsMax  int     `json:"exposure_records_max"`
	ExposureRecordsMean float64 `json:"exposure_records_mean"`
	// Samples in which no standby was connected, and (sync) in which the
	// primary ran unprotected.
	DisconnectedSamples int `json:"disconnected_samples"`
	UnprotectedSamples  int `json:"unprotected_samples"`
}

func (a lagAgg) result(interval time.Duration) StandbyLag {
	r := StandbyLag{Samples: a.n, SampleIntervalS: interval.Seconds(), LagBytesMax: a.maxBytes, LagSecondsMax: round(a.maxSeconds, 4),
		ExposureRecordsMax: a.maxRecords, DisconnectedSamples: a.disconnected, UnprotectedSamples: a.unprotected}
	if a.n > 0 {
		n := float64(a.n)
		r.LagBytesMean, r.LagSecondsMean, r.ExposureRecordsMean = round(a.sumBytes/n, 1), round(a.sumSeconds/n, 4), round(a.sumRecords/n, 2)
	}
	return r
}

// StandbyReport is the report's standby section.
type StandbyReport struct {
	Workload   string `json:"workload"`
	Transport  string `json:"transport"`
	Protection string `json:"protection"`
	// RTTms is the round-trip delay added between primary and standby (half
	// each way), on top of loopback.
	RTTms              float64    `json:"rtt_ms"`
	BandwidthBytesPerS int64      `json:"bandwidth_bytes_per_s,omitempty"`
	WindowBytes        int64      `json:"window_bytes,omitempty"`
	Lag                StandbyLag `json:"lag"`
	// Waits compares the log and standby wait events of the coordinator
	// without a standby (xa) and of the primary with one (xa-standby), per
	// workload's slices.
	Waits []StandbyWait `json:"waits"`
	Note  string        `json:"note"`
}

// StandbyWait is one event in both workloads' slices.
type StandbyWait struct {
	Event string `json:"event"`
	// Per workload name: the coordinator's count, total and average wait,
	// and the wait per committed transaction.
	By map[string]StandbyWaitStats `json:"by_workload"`
}

// StandbyWaitStats is one event's figures during one workload's slices.
type StandbyWaitStats struct {
	Count    uint64  `json:"count"`
	TotalS   float64 `json:"total_s"`
	AvgMs    float64 `json:"avg_ms"`
	MsPerTxn float64 `json:"ms_per_txn"`
}

// standbyEvents are the events the standby section compares, in the order
// a commit meets them.
var standbyEvents = []waits.Event{waits.LogFileSync, waits.LogFileParallelWrite, waits.LogFileFdatasync, waits.StandbySyncAck, waits.StandbyLogWrite, waits.CoordinatorCommit}

const standbyWaitsNote = "Each workload's coordinator waits are the deltas, over its own slices, of the registries of the coordinators it commits through " +
	"(xa: the in-process coordinator; xa-standby: the pair's primary and standby), " +
	"and between slices the run waits (unmeasured) until the idle coordinator owes no phase 2 and the standby has every record. " +
	"'standby sync ack' and 'standby log write' come only from the standby pair. On the primary, 'log file sync' (a COMMIT record's Append) " +
	"includes 'standby sync ack': under sync the log writer hands the batch to the standby after its fdatasync and returns only on the acknowledgement, " +
	"and the standby's 'standby log write' (its write+fdatasync of the batch) is inside that ack."

func standbyWaitStats(s waits.Snapshot, e waits.Event, txns uint64) StandbyWaitStats {
	es := s.Get(e)
	r := StandbyWaitStats{Count: es.Count, TotalS: round(es.Total.Seconds(), 4), AvgMs: ms(es.Avg())}
	if txns > 0 {
		r.MsPerTxn = round(es.Total.Seconds()*1000/float64(txns), 4)
	}
	return r
}
