package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/tandem-tx/tandem/client"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tandem-tx/tandem/waits"
)

// DBResult is one workload's figures.
type DBResult struct {
	Workload string `json:"workload"`
	// PGDriver: how it talked to PostgreSQL, sql (database/sql) or pgx (natively).
	PGDriver string  `json:"pg_driver"`
	Threads  int     `json:"threads"`
	Txns     uint64  `json:"txns"`   // committed
	Errors   uint64  `json:"errors"` // failed (rolled back); not in txns nor in the latencies
	ElapsedS float64 `json:"elapsed_s"`
	TPS      float64 `json:"tps"`
	// Latency of one whole transaction as its client sees it: from the
	// first statement to the end of the commit.
	P50ms float64 `json:"p50_ms"`
	P95ms float64 `json:"p95_ms"`
	P99ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
	// RoundtripsPerTxn counts every round trip the client made per committed
	// transaction: to each RM and to the coordinator.
	RoundtripsPerTxn       float64            `json:"roundtrips_per_txn"`
	RMRoundtripsPerTxn     map[string]float64 `json:"rm_roundtrips_per_txn"`
	CoordinatorCallsPerTxn float64            `json:"coordinator_calls_per_txn"`
	// UnaccountedShare is the share of the transactions' latency during
	// which the client was in no named wait (CPU, scheduling, the SDK's own
	// work): Σ(latency − union of the client's waits) ÷ Σ latency.
	UnaccountedShare float64 `json:"unaccounted_share"`
	// Waits is the client's wait table; CoordinatorWaits the coordinator's
	// during this workload's slices (absent without a view of it).
	Waits            []waits.JSONEvent `json:"waits"`
	CoordinatorWaits []waits.JSONEvent `json:"coordinator_waits,omitempty"`
	LastError        string            `json:"last_error,omitempty"`
	Traces           []waits.JSONTrace `json:"traces,omitempty"`
	// Slowest are the client traces of the slowest transactions
	// (DBConfig.Slowest), slowest first; elapsed_us is each one's latency.
	Slowest []waits.JSONTrace `json:"slowest,omitempty"`
	// DBCounters are the databases' own sync counters over this workload's
	// slices (server-wide: DBReport.DBCountersNote), per RM in order.
	DBCounters []DBCounter `json:"db_counters,omitempty"`
	// DBActivity: the databases' sessions sampled during this workload's
	// slices, by statement and wait (dbactivity.go), per RM, largest first.
	DBActivity []DBActivity `json:"db_activity,omitempty"`
	// Slices are this workload's measured slices in the order they ran,
	// interleaved in time with the other workload's.
	Slices []SliceResult `json:"slices,omitempty"`
	// Latency is the distribution of the committed transactions' latency,
	// 4 bins per power of two (Histogram.Bins).
	Latency []LatencyBin `json:"latency_bins,omitempty"`

	client, coord waits.Snapshot
}

// SliceResult is one measured slice of a workload.
type SliceResult struct {
	StartS  float64 `json:"start_s"` // since the measured run began
	Seconds float64 `json:"seconds"`
	Txns    uint64  `json:"txns"`
	Errors  uint64  `json:"errors"`
	// P99ms: the 99th percentile of this slice's committed transactions.
	P99ms float64 `json:"p99_ms"`
}

// DBReport is the result of DB.
type DBReport struct {
	Results []DBResult `json:"results"`
	// Ratio is TPS of the second workload ÷ TPS of the first, with two.
	Ratio       *float64 `json:"ratio,omitempty"`
	Coordinator string   `json:"coordinator,omitempty"`
	// DecideAt: where xa and oltp decided (client.DecideAt).
	DecideAt   string `json:"decide_at"`
	Visibility string `json:"visibility"`
	// PGDriver: how workloads without an @ suffix talk to PostgreSQL
	// (auto, sql or pgx; each result says which it used).
	PGDriver string `json:"pg_driver"`
	// CommitPoint: the RM allowed to be the commit point ("": auto's choice).
	CommitPoint string `json:"commit_point,omitempty"`
	// CoordinatorConns: the in-process coordinator's connections per RM.
	CoordinatorConns int      `json:"coordinator_conns,omitempty"`
	LogFS            string   `json:"coordinator_log_fs,omitempty"`
	RMs              []string `json:"rms"`
	CPUs             int      `json:"cpus"`
	// CPU used during the run, percent of all CPUs: by this process (clients,
	// and the in-process coordinator), and by every other (the databases).
	OwnCPUPercent    float64  `json:"own_cpu_percent"`
	OthersCPUPercent float64  `json:"others_cpu_percent"`
	SliceS           float64  `json:"slice_s,omitempty"`
	Warnings         []string `json:"warnings,omitempty"`
	// Standby: xa-standby's coordinator pair (absent without xa-standby).
	Standby *StandbyReport `json:"standby,omitempty"`
	// DBCountersNote says how the results' db_counters were read.
	DBCountersNote string `json:"db_counters_note,omitempty"`
	// DBCountersLate: PostgreSQL counts that arrived after the last slice
	// when both workloads commit through a coordinator, in neither's figures.
	DBCountersLate []DBCounter `json:"db_counters_late,omitempty"`
	// ActivityEveryS: the interval of the results' db_activity samples.
	ActivityEveryS float64 `json:"db_activity_every_s,omitempty"`
}

func (e *env) report(states []*wlState, m machineUseT) *DBReport {
	rep := &DBReport{Coordinator: e.coordAt, DecideAt: string(e.cfg.DecideAt), Visibility: visibilityName(e.cfg.Visibility), PGDriver: e.cfg.PGDriver, CommitPoint: e.cfg.CommitPoint, CPUs: runtime.NumCPU(),
		OwnCPUPercent: round(m.own, 1), OthersCPUPercent: round(m.others, 1), Warnings: e.warnings}
	if e.inProc {
		rep.Coordinator += " (in-process)"
		rep.CoordinatorConns = e.cfg.CoordConns
		rep.LogFS = e.fs.String()
	}
	for _, r := range e.rms {
		rep.RMs = append(rep.RMs, r.Name+" ("+string(r.Driver)+")")
	}
	if e.counters != nil {
		rep.Warnings = append(slices.Clip(rep.Warnings), e.counters.warn...)
		if e.counters.any() {
			rep.DBCountersNote = e.counters.note()
		}
	}
	if e.cfg.Txns == 0 {
		rep.SliceS = e.cfg.Slice.Seconds()
		if e.cfg.Slice <= 0 {
			rep.SliceS = min(time.Second, e.cfg.Duration/4).Seconds()
		}
	}
	for _, st := range states {
		r := DBResult{Workload: st.label, PGDriver: st.driver, Threads: e.cfg.Threads, Txns: st.txns, Errors: st.errs,
			ElapsedS: round(st.elapsed.Seconds(), 3), RMRoundtripsPerTxn: map[string]float64{}, Traces: st.traces, Slowest: st.slow.traces(),
			Slices: st.slices, Latency: st.hist.Bins(4)}
		if st.elapsed > 0 {
			r.TPS = round(float64(st.txns)/st.elapsed.Seconds(), 1)
		}
		r.P50ms, r.P95ms, r.P99ms, r.MaxMs = ms(st.hist.Quantile(0.50)), ms(st.hist.Quantile(0.95)), ms(st.hist.Quantile(0.99)), ms(st.hist.Max())
		if st.txns > 0 {
			n := float64(st.txns)
			for i, rmx := range e.rms {
				r.RMRoundtripsPerTxn[rmx.Name] = round(float64(st.trips[i])/n, 3)
			}
			r.CoordinatorCallsPerTxn = round(float64(st.calls)/n, 3)
			r.RoundtripsPerTxn = round(float64(st.trips[0]+st.trips[1]+st.calls)/n, 3)
		}
		if st.latency > 0 {
			r.UnaccountedShare = round(float64(st.uncov)/float64(st.latency), 4)
		}
		r.client = st.reg.Snapshot()
		r.Waits = r.client.JSON(false, false).Events
		if len(st.coord.Events) > 0 {
			r.coord = st.coord
			r.CoordinatorWaits = st.coord.JSON(false, false).Events
		}
		if st.lastErr != nil {
			r.LastError = st.lastErr.Error()
		}
		if e.counters != nil {
			r.DBCounters = e.counters.results(st.dbc, st.txns)
		}
		if st.act != nil {
			r.DBActivity = activityResults(st.act, e.cfg.ActivityEvery, st.txns)
			rep.ActivityEveryS = e.cfg.ActivityEvery.Seconds()
		}
		rep.Results = append(rep.Results, r)
	}
	if len(rep.Results) == 2 && rep.Results[0].TPS > 0 {
		v := round(rep.Results[1].TPS/rep.Results[0].TPS, 3)
		rep.Ratio = &v
	}
	if e.sb != nil {
		rep.Standby = e.standbyReport(rep.Results)
	}
	return rep
}

// standbyReport is the standby section: the link, the lag sampled during
// xa-standby's slices, and the log and standby waits of each workload.
func (e *env) standbyReport(results []DBResult) *StandbyReport {
	p := e.sb
	p.mu.Lock()
	lag := p.lag.result(lagSampleInterval)
	p.mu.Unlock()
	sr := &StandbyReport{Workload: WorkloadXAStandby, Transport: string(p.transport), Protection: string(p.protection),
		RTTms: ms(p.cfg.RTT), BandwidthBytesPerS: p.cfg.Bandwidth, WindowBytes: p.cfg.Window, Lag: lag, Note: standbyWaitsNote}
	for _, ev := range standbyEvents {
		w := StandbyWait{Event: ev.String(), By: map[string]StandbyWaitStats{}}
		for _, r := range results {
			if r.Workload == WorkloadXA || r.Workload == WorkloadXAStandby {
				w.By[r.Workload] = standbyWaitStats(r.coord, ev, r.Txns)
			}
		}
		sr.Waits = append(sr.Waits, w)
	}
	return sr
}

// WriteTable prints the report for a person: one line per workload, the
// ratio, then each workload's wait tables.
func (r *DBReport) WriteTable(w io.Writer) error {
	counters := ""
	if r.DBCountersNote != "" {
		counters = "; database sync counters are server-wide (other sessions' work counts too)"
	}
	fmt.Fprintf(w, "tandem bench: %s; RMs %s; %d CPUs (during the run: this process %.0f%%, others — the databases — %.0f%%)%s\n",
		r.describe(), strings.Join(r.RMs, ", "), r.CPUs, r.OwnCPUPercent, r.OthersCPUPercent, counters)
	if r.Coordinator != "" {
		line := "coordinator " + r.Coordinator
		if r.CoordinatorConns > 0 {
			line += fmt.Sprintf(", %d connections per RM", r.CoordinatorConns)
		}
		if r.LogFS != "" {
			line += ", decision log on " + r.LogFS
		}
		if r.DecideAt != "" {
			line += "; xa and oltp decide at: " + r.DecideAt + ", visibility " + r.Visibility
			if r.CommitPoint != "" {
				line += ", commit point " + r.CommitPoint
			}
		}
		fmt.Fprintln(w, line)
	}
	var drivers []string
	for _, x := range r.Results {
		drivers = append(drivers, x.Workload+" "+x.PGDriver)
	}
	fmt.Fprintf(w, "PostgreSQL driver (--pg-driver %s): %s\n", r.PGDriver, strings.Join(drivers, ", "))
	for _, warn := range r.Warnings {
		fmt.Fprintln(w, "WARNING:", warn)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "workload\tthreads\ttxns\terrors\telapsed s\tTPS\tp50 ms\tp95 ms\tp99 ms\tround trips/txn\tunaccounted\t\n")
	for _, x := range r.Results {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.2f\t%.1f\t%.3f\t%.3f\t%.3f\t%s\t%.1f%%\t\n", x.Workload, x.Threads, x.Txns, x.Errors, x.ElapsedS, x.TPS,
			x.P50ms, x.P95ms, x.P99ms, x.tripsText(), 100*x.UnaccountedShare)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.Ratio != nil {
		fmt.Fprintf(w, "\nratio %s/%s (TPS): %.3f\n", r.Results[1].Workload, r.Results[0].Workload, *r.Ratio)
	}
	if err := writeDBCounters(w, r.Results, r.DBCountersLate, r.DBCountersNote); err != nil {
		return err
	}
	if err := writeDBActivity(w, r.Results, time.Duration(r.ActivityEveryS*float64(time.Second))); err != nil {
		return err
	}
	for _, x := range r.Results {
		fmt.Fprintf(w, "\n== %s: client waits (%d transactions)\n", x.Workload, x.Txns)
		if err := x.client.WriteTable(w); err != nil {
			return err
		}
		if len(x.coord.Events) > 0 {
			fmt.Fprintf(w, "\n== %s: coordinator waits\n", x.Workload)
			if err := x.coord.WriteTable(w); err != nil {
				return err
			}
		}
		if x.LastError != "" {
			fmt.Fprintf(w, "last error: %s\n", x.LastError)
		}
		writeSlowest(w, x)
	}
	if r.Standby != nil {
		return r.Standby.WriteTable(w)
	}
	return nil
}

// WriteTable prints the standby section.
func (s *StandbyReport) WriteTable(w io.Writer) error {
	link := "no added delay"
	if s.RTTms > 0 {
		link = fmt.Sprintf("%.3g ms added round trip (%.3g ms each way)", s.RTTms, s.RTTms/2)
	}
	fmt.Fprintf(w, "\n== standby: %s's coordinator ships its decision log to a standby in this process\n", s.Workload)
	if s.WindowBytes > 0 {
		link += fmt.Sprintf(", window %d bytes", s.WindowBytes)
	}
	fmt.Fprintf(w, "transport %s, protection %s; link: loopback through a proxy, %s, bandwidth %s; measured from a standby connected and caught up\n",
		s.Transport, s.Protection, link, FormatBandwidth(s.BandwidthBytesPerS))
	l := s.Lag
	fmt.Fprintf(w, "lag during %s's slices (%d samples, every %.0f ms):   max      mean\n", s.Workload, l.Samples, l.SampleIntervalS*1000)
	fmt.Fprintf(w, "  bytes                                          %9d  %9.1f\n", l.LagBytesMax, l.LagBytesMean)
	fmt.Fprintf(w, "  seconds (exposure in time: age of the oldest)  %9.4f  %9.4f\n", l.LagSecondsMax, l.LagSecondsMean)
	fmt.Fprintf(w, "  records (exposure: durable here, not there)    %9d  %9.2f\n", l.ExposureRecordsMax, l.ExposureRecordsMean)
	if l.DisconnectedSamples > 0 || l.UnprotectedSamples > 0 {
		fmt.Fprintf(w, "  WARNING: no standby connected in %d samples; primary unprotected in %d samples\n", l.DisconnectedSamples, l.UnprotectedSamples)
	}
	var names []string
	for _, ev := range s.Waits {
		for n := range ev.By {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	slices.Sort(names) // xa before xa-standby
	fmt.Fprintln(w, "coordinator waits per workload's slices:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "  Event\t")
	for _, n := range names {
		fmt.Fprintf(tw, "%s: times\tavg ms\tms/txn\t", n)
	}
	fmt.Fprintln(tw)
	for _, ev := range s.Waits {
		fmt.Fprintf(tw, "  %s\t", ev.Event)
		for _, n := range names {
			st := ev.By[n]
			fmt.Fprintf(tw, "%d\t%.3f\t%.3f\t", st.Count, st.AvgMs, st.MsPerTxn)
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "(%s)\n", s.Note)
	return err
}

func (r *DBReport) describe() string {
	var names []string
	for _, x := range r.Results {
		names = append(names, x.Workload)
	}
	s := strings.Join(names, " vs ")
	if len(r.Results) > 0 {
		s += fmt.Sprintf(", %d threads", r.Results[0].Threads)
	}
	if len(names) > 1 && r.SliceS > 0 {
		s += fmt.Sprintf(", interleaved in %.1fs slices", r.SliceS)
	}
	if r.Standby != nil {
		s += fmt.Sprintf("; %s: standby %s", r.Standby.Workload, r.Standby.Transport)
		if r.Standby.RTTms > 0 {
			s += fmt.Sprintf(" at %.3g ms RTT", r.Standby.RTTms)
		}
	}
	return s
}

// tripsText is "6.00 (pg 2.00 + maria 3.00 + coord 1.00)".
func (x DBResult) tripsText() string {
	var parts []string
	for name, v := range x.RMRoundtripsPerTxn {
		if v > 0 {
			parts = append(parts, fmt.Sprintf("%s %.2f", name, v))
		}
	}
	slices.Sort(parts) // map order is random
	if x.CoordinatorCallsPerTxn > 0 {
		parts = append(parts, fmt.Sprintf("coord %.2f", x.CoordinatorCallsPerTxn))
	}
	return fmt.Sprintf("%.2f (%s)", x.RoundtripsPerTxn, strings.Join(parts, " + "))
}

// fetchAdminWaits reads an external coordinator's waits from its admin listener.
func fetchAdminWaits(ctx context.Context, addr, token string) (waits.Snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/waits?buckets=1", nil)
	if err != nil {
		return waits.Snapshot{}, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return waits.Snapshot{}, fmt.Errorf("the coordinator's waits are not in this report: cannot read http://%s/waits: %w", addr, err)
	}
	defer resp.Body.Close()
	var body struct {
		Coordinator waits.JSONSnapshot `json:"coordinator"`
	}
	if resp.StatusCode != http.StatusOK {
		return waits.Snapshot{}, fmt.Errorf("the coordinator's waits are not in this report: http://%s/waits: %s", addr, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return waits.Snapshot{}, fmt.Errorf("the coordinator's waits are not in this report: http://%s/waits: %w", addr, err)
	}
	return waits.FromJSON(body.Coordinator), nil
}

func visibilityName(v client.Visibility) string {
	if v == client.VisibilityAsync {
		return "async"
	}
	return "sync"
}
