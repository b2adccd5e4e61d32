package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tandem-tx/tandem/waits"
)

// runBench runs `tandem bench ARGS --json` (tandem execs tandem-bench, built
// next to it by TestMain) and decodes the report both loosely (to check that every documented field is present) and strictly.
func runBench(t *testing.T, args ...string) (map[string]any, benchReport) {
	t.Helper()
	cmd := exec.Command(tandemBin, append(append([]string{"bench"}, args...), "--json", "--quiet", "--dir", t.TempDir())...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tandem bench %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	var loose map[string]any
	if err := json.Unmarshal(out, &loose); err != nil {
		t.Fatalf("bench --json is not JSON: %v\n%s", err, out)
	}
	var rep benchReport
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatal(err)
	}
	return loose, rep
}

// `tandem bench` is tandem-bench under another name: the same help (naming
// "tandem bench"), output and exit status; without tandem-bench it says how
// to build it and exits 2.
func TestBenchThroughTandem(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"bench"}, 0, "Usage: tandem bench <benchmark> [flags]"},
		{[]string{"help", "bench"}, 0, `Run "tandem bench <benchmark> --help"`},
		{[]string{"bench", "log", "--help"}, 0, "Usage: tandem bench log [--dir DIR]"},
		{[]string{"bench", "nosuch"}, 2, `tandem bench: unknown benchmark "nosuch"`},
		{[]string{"bench", "ship", "--backlog", "lots"}, 2, `tandem bench ship: --backlog: "lots" is not a size`},
	} {
		out, err := exec.Command(tandemBin, tc.args...).CombinedOutput()
		if code := exitCode(err); code != tc.code || !strings.Contains(string(out), tc.want) {
			t.Errorf("tandem %s: exit %d (%v), output:\n%s\nwant exit %d and %q", strings.Join(tc.args, " "), code, err, out, tc.code, tc.want)
		}
	}

	// A tandem alone in its directory, with nothing on PATH.
	alone := filepath.Join(t.TempDir(), "tandem")
	b, err := os.ReadFile(tandemBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(alone, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(alone, "bench", "--compare", "sql,xa")
	cmd.Env = append(os.Environ(), "PATH="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if code := exitCode(err); code != 2 || !strings.Contains(string(out), "go build -o bin/tandem-bench ./cmd/tandem-bench") {
		t.Errorf("tandem bench without tandem-bench: exit %d (%v), output:\n%s\nwant exit 2 and how to build it", code, err, out)
	}
}

// exitCode is a finished command's exit status (-1 if it did not run).
func exitCode(err error) int {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	return -1
}

type benchWait struct {
	Event  string  `json:"event"`
	Count  uint64  `json:"count"`
	TotalS float64 `json:"total_s"`
	MaxS   float64 `json:"max_s"`
}

type benchResult struct {
	DBActivity []struct {
		RM, Statement, Wait string
		Samples             uint64
	} `json:"db_activity"`
	Workload               string             `json:"workload"`
	Threads                int                `json:"threads"`
	Txns                   uint64             `json:"txns"`
	Errors                 uint64             `json:"errors"`
	LastError              string             `json:"last_error"`
	Slowest                []waits.JSONTrace  `json:"slowest"`
	ElapsedS               float64            `json:"elapsed_s"`
	TPS                    float64            `json:"tps"`
	P50ms                  float64            `json:"p50_ms"`
	P95ms                  float64            `json:"p95_ms"`
	P99ms                  float64            `json:"p99_ms"`
	RoundtripsPerTxn       float64            `json:"roundtrips_per_txn"`
	RMRoundtripsPerTxn     map[string]float64 `json:"rm_roundtrips_per_txn"`
	CoordinatorCallsPerTxn float64            `json:"coordinator_calls_per_txn"`
	UnaccountedShare       float64            `json:"unaccounted_share"`
	Waits                  []benchWait        `json:"waits"`
	CoordinatorWaits       []benchWait        `json:"coordinator_waits"`
	Traces                 []waits.JSONTrace  `json:"traces"`
	DBCounters             []struct {
		RM      string  `json:"rm"`
		Counter string  `json:"counter"`
		Total   uint64  `json:"total"`
		PerTxn  float64 `json:"per_txn"`
	} `json:"db_counters"`
}

type benchReport struct {
	Results []benchResult `json:"results"`
	Ratio   *float64      `json:"ratio"`
}

func (r benchResult) wait(event string) benchWait {
	for _, w := range r.Waits {
		if w.Event == event {
			return w
		}
	}
	return benchWait{Event: event}
}

// dbCounter is a database counter's figure per transaction (-1 if absent).
func (r benchResult) dbCounter(rm, counter string) float64 {
	for _, c := range r.DBCounters {
		if c.RM == rm && c.Counter == counter {
			return c.PerTxn
		}
	}
	return -1
}

func (r benchResult) coordWait(event string) benchWait {
	for _, w := range r.CoordinatorWaits {
		if w.Event == event {
			return w
		}
	}
	return benchWait{Event: event}
}

// checkFields fails unless every field the issue names is in each result.
func checkFields(t *testing.T, loose map[string]any, compare bool) {
	t.Helper()
	results, _ := loose["results"].([]any)
	if len(results) == 0 {
		t.Fatalf("no results: %v", loose)
	}
	for _, r := range results {
		m := r.(map[string]any)
		for _, k := range []string{"workload", "threads", "txns", "elapsed_s", "tps", "p50_ms", "p95_ms", "p99_ms", "roundtrips_per_txn", "unaccounted_share", "waits"} {
			if _, ok := m[k]; !ok {
				t.Errorf("result %v has no %q", m["workload"], k)
			}
		}
		ws, _ := m["waits"].([]any)
		for _, w := range ws {
			for _, k := range []string{"event", "count", "total_s", "max_s"} {
				if _, ok := w.(map[string]any)[k]; !ok {
					t.Errorf("a wait of %v has no %q: %v", m["workload"], k, w)
				}
			}
		}
	}
	if _, ok := loose["ratio"]; ok != compare {
		t.Errorf("ratio present = %v, want %v", ok, compare)
	}
}

func checkSane(t *testing.T, r benchResult, threads int) {
	t.Helper()
	if r.Txns == 0 || r.Errors != 0 || r.TPS <= 0 || r.ElapsedS <= 0 || r.Threads != threads {
		t.Errorf("%s: txns %d errors %d tps %v elapsed %v threads %d", r.Workload, r.Txns, r.Errors, r.TPS, r.ElapsedS, r.Threads)
	}
	if !(0 < r.P50ms && r.P50ms <= r.P95ms && r.P95ms <= r.P99ms) {
		t.Errorf("%s: latency quantiles p50 %v p95 %v p99 %v", r.Workload, r.P50ms, r.P95ms, r.P99ms)
	}
	if r.UnaccountedShare < 0 || r.UnaccountedShare >= 1 {
		t.Errorf("%s: unaccounted share %v", r.Workload, r.UnaccountedShare)
	}
}

// The xa workload against raw2pc: every field, the waits each must hit, and
// the round trips the protocol says (README, "How a commit works"):
// PostgreSQL 3 (BEGIN+INSERT, PREPARE, COMMIT PREPARED), MariaDB 3
// (XA START+INSERT, XA END+XA PREPARE, XA COMMIT), one Commit RPC: under
// visibility sync the client settles both branches itself.
func TestBenchXAAgainstRaw2PC(t *testing.T) {
	loose, rep := runBench(t, "--compare", "raw2pc,xa", "--txns", "300", "--threads", "2", "--trace", "2", "--db-activity", "2ms")
	checkFields(t, loose, true)
	if len(rep.Results) != 2 || rep.Results[0].Workload != "raw2pc" || rep.Results[1].Workload != "xa" || rep.Ratio == nil || *rep.Ratio <= 0 {
		t.Fatalf("report: %+v", rep)
	}
	raw, xa := rep.Results[0], rep.Results[1]
	checkSane(t, raw, 2)
	checkSane(t, xa, 2)
	if xa.Txns != 300 || raw.Txns != 300 {
		t.Errorf("txns: raw2pc %d, xa %d; want 300 each", raw.Txns, xa.Txns)
	}
	if xa.RoundtripsPerTxn != 7 || xa.RMRoundtripsPerTxn["pg"] != 3 || xa.RMRoundtripsPerTxn["maria"] != 3 || xa.CoordinatorCallsPerTxn != 1 {
		t.Errorf("xa round trips: %v total, %v per RM, %v coordinator calls; want 7 = pg 3 + maria 3 + 1", xa.RoundtripsPerTxn, xa.RMRoundtripsPerTxn, xa.CoordinatorCallsPerTxn)
	}
	if raw.RoundtripsPerTxn != 6 || raw.CoordinatorCallsPerTxn != 0 {
		t.Errorf("raw2pc round trips: %v, %v coordinator calls; want 6, 0", raw.RoundtripsPerTxn, raw.CoordinatorCallsPerTxn)
	}
	// Each xa transaction: 2 statement round trips, 2 prepares, 1 RPC, the
	// client's XA COMMIT and COMMIT PREPARED.
	for ev, n := range map[string]uint64{"rm roundtrip": 2, "rm prepare": 2, "coordinator commit": 1, "rm commit prepared": 2} {
		if w := xa.wait(ev); w.Count != n*xa.Txns || w.TotalS <= 0 || w.MaxS <= 0 {
			t.Errorf("xa client wait %q: %+v; want %d waits with time", ev, w, n*xa.Txns)
		}
	}
	// The coordinator handled every Commit and checked the client's
	// branches with scans (shared: fewer than the transactions).
	if w := xa.coordWait("coordinator commit"); w.Count != xa.Txns || w.TotalS <= 0 {
		t.Errorf("xa coordinator wait coordinator commit: %+v", w)
	}
	if w := xa.coordWait("rm recover scan"); w.Count == 0 || w.TotalS <= 0 {
		t.Errorf("xa coordinator wait rm recover scan: %+v (want the checks of the client-settled branches)", w)
	}
	for ev, n := range map[string]uint64{"rm roundtrip": 2, "rm prepare": 2, "rm commit prepared": 2} {
		if w := raw.wait(ev); w.Count != n*raw.Txns || w.TotalS <= 0 {
			t.Errorf("raw2pc client wait %q: %+v; want %d", ev, w, n*raw.Txns)
		}
	}
	if raw.wait("coordinator commit").Count != 0 {
		t.Error("raw2pc called the coordinator")
	}
	// The databases' own syncs. Each transaction has PostgreSQL sync its
	// PREPARE and its COMMIT PREPARED, and MariaDB group-commit its XA
	// PREPARE and its XA COMMIT to the binlog; with 2 threads one sync covers
	// at most two of them, so each is at least 1 per transaction (the
	// counters are server-wide: other work only adds), provided every
	// session's counts were published before the run ended.
	for _, r := range []benchResult{raw, xa} {
		for _, c := range [][2]string{{"pg", "wal_sync"}, {"maria", "Binlog_group_commits"}} {
			if v := r.dbCounter(c[0], c[1]); v < 1 {
				t.Errorf("%s: %s %s per transaction %v, want at least 1 (db_counters %+v)", r.Workload, c[0], c[1], v, r.DBCounters)
			}
		}
		if v := r.dbCounter("maria", "Binlog_commits"); v < 2 {
			t.Errorf("%s: maria Binlog_commits per transaction %v, want at least 2 (XA PREPARE, XA COMMIT)", r.Workload, v)
		}
	}
	// Alone, raw2pc's run ends with no wait for late counts: the bench's own
	// PostgreSQL sessions must have published theirs (without
	// pg_stat_force_next_flush() they hold up to a second's worth, all of
	// this short run).
	_, rep = runBench(t, "--workload", "raw2pc", "--txns", "300", "--threads", "2")
	if v := rep.Results[0].dbCounter("pg", "wal_sync"); v < 1 {
		t.Errorf("raw2pc alone: pg wal_sync per transaction %v, want at least 1 (db_counters %+v)", v, rep.Results[0].DBCounters)
	}
	// The sampled sessions: each workload's prepares at both databases.
	for _, c := range []struct {
		r             benchResult
		rm, statement string
	}{{raw, "pg", "PREPARE TRANSACTION"}, {raw, "maria", "XA PREPARE"}, {xa, "pg", "PREPARE TRANSACTION"}, {xa, "maria", "XA PREPARE"}} {
		var n uint64
		for _, a := range c.r.DBActivity {
			if a.RM == c.rm && a.Statement == c.statement {
				n += a.Samples
			}
		}
		if n == 0 {
			t.Errorf("%s: no session of %s sampled running %s (db_activity %+v)", c.r.Workload, c.rm, c.statement, c.r.DBActivity)
		}
	}
	// Traces: client and coordinator waits of one transaction, in order.
	if len(xa.Traces) != 2 {
		t.Fatalf("xa kept %d traces, want 2", len(xa.Traces))
	}
	tr := xa.Traces[0]
	sides := map[string]int{}
	for i, w := range tr.Waits {
		sides[w.Side]++
		if i > 0 && w.AtUs < tr.Waits[i-1].AtUs {
			t.Errorf("trace out of order: %+v", tr.Waits)
		}
	}
	// The client's 8: two begins, two prepares, the Commit call in two parts
	// (up to the early decision, and from the end of the client's own
	// commits, made on the call's goroutine, to the reply), two commits.
	if sides[waits.SideClient] != 8 || sides[waits.SideCoordinator] < 2 || tr.GTRID == "" {
		t.Errorf("trace %s: %d client and %d coordinator waits: %+v", tr.GTRID, sides[waits.SideClient], sides[waits.SideCoordinator], tr.Waits)
	}
}

// The other workloads: sql and plain make no coordinator call and commit
// locally; 1pc commits in one phase; oltp is a global transaction.
func TestBenchOtherWorkloads(t *testing.T) {
	loose, rep := runBench(t, "--compare", "sql,1pc", "--txns", "200", "--threads", "2", "--slowest", "3")
	checkFields(t, loose, true)
	sql, one := rep.Results[0], rep.Results[1]
	checkSane(t, sql, 2)
	checkSane(t, one, 2)
	// --slowest: each workload's 3 slowest measured transactions (after
	// the warm-up), slowest first, none faster than the median, each with
	// its client waits.
	for _, r := range []benchResult{sql, one} {
		if len(r.Slowest) != 3 {
			t.Errorf("%s: %d slowest transactions, want 3", r.Workload, len(r.Slowest))
			continue
		}
		for i, tr := range r.Slowest {
			if tr.ElapsedUs < r.P50ms*1000*0.99 || (i > 0 && tr.ElapsedUs > r.Slowest[i-1].ElapsedUs) || len(tr.Waits) == 0 {
				t.Errorf("%s: slowest %d: %v µs with %d waits (p50 %v ms; the one before %v µs)", r.Workload, i, tr.ElapsedUs, len(tr.Waits), r.P50ms, r.Slowest[max(i-1, 0)].ElapsedUs)
			}
		}
	}
	if sql.RoundtripsPerTxn != 4 || sql.wait("rm commit").Count != 2*sql.Txns || sql.wait("rm roundtrip").Count != 2*sql.Txns {
		t.Errorf("sql: %v round trips, waits %+v", sql.RoundtripsPerTxn, sql.Waits)
	}
	if one.RoundtripsPerTxn != 2 || one.CoordinatorCallsPerTxn != 0 || one.wait("rm commit").Count != one.Txns || one.wait("rm prepare").Count != 0 {
		t.Errorf("1pc: %v round trips, %v coordinator calls, waits %+v", one.RoundtripsPerTxn, one.CoordinatorCallsPerTxn, one.Waits)
	}

	loose, rep = runBench(t, "--workload", "plain", "--txns", "100", "--threads", "1")
	checkFields(t, loose, false)
	if p := rep.Results[0]; p.RoundtripsPerTxn != 2 || p.wait("rm commit").Count != p.Txns {
		t.Errorf("plain: %+v", p)
	}

	_, rep = runBench(t, "--workload", "oltp", "--txns", "200", "--threads", "4", "--oltp-rows", "1000", "--db-counters=false")
	o := rep.Results[0]
	if o.Txns == 0 || o.TPS <= 0 {
		t.Fatalf("oltp: %+v", o)
	}
	// Per RM: update (with the begin), 4 reads, delete, insert (skipped when
	// the row was gone), prepare, and the client's commit; plus one RPC.
	if o.RMRoundtripsPerTxn["pg"] < 8 || o.RMRoundtripsPerTxn["pg"] > 9 || o.RMRoundtripsPerTxn["maria"] < 8 || o.RMRoundtripsPerTxn["maria"] > 9 || o.CoordinatorCallsPerTxn != 1 {
		t.Errorf("oltp round trips: %v per RM, %v coordinator calls", o.RMRoundtripsPerTxn, o.CoordinatorCallsPerTxn)
	}
	if o.wait("rm prepare").Count != 2*o.Txns || o.wait("coordinator commit").Count != o.Txns {
		t.Errorf("oltp waits: %+v", o.Waits)
	}

	// xa observed (traced and scraped) commits as xa does, at the commit point.
	_, rep = runBench(t, "--compare", "xa,xa-observed", "--txns", "200", "--threads", "2", "--decide-at", "auto", "--db-counters=false")
	if len(rep.Results) != 2 || rep.Results[1].Workload != "xa-observed" || rep.Results[1].Txns != 200 || rep.Results[1].Errors != 0 ||
		rep.Results[1].CoordinatorCallsPerTxn != 0 || rep.Results[1].wait("rm prepare").Count != rep.Results[1].Txns {
		t.Errorf("xa-observed: %+v", rep.Results)
	}

	// Its baseline: the same statements, two local commits, no coordinator.
	_, rep = runBench(t, "--workload", "oltp-sql", "--txns", "100", "--threads", "2", "--oltp-rows", "1000")
	l := rep.Results[0]
	if l.Txns != 100 || l.CoordinatorCallsPerTxn != 0 || l.RMRoundtripsPerTxn["pg"] < 7 || l.RMRoundtripsPerTxn["pg"] > 8 || l.wait("rm commit").Count != 2*l.Txns {
		t.Errorf("oltp-sql: %+v", l)
	}
}

// The admin listener of a real `tandem serve`: /metrics parses with
// Prometheus's own text parser and names every wait event; /waits and
// `tandem waits` show the waits of a committed transaction.
func TestMetricsAndWaitsEndpoints(t *testing.T) {
	admin := freeAddr(t)
	c := startCoordinator(t, coordOpts{extra: []string{"--admin", admin}})
	d := openDBs(t)
	d.table(t, "e2e_metrics")
	pc, mc := conns(t, d)
	cli := c.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tx := cli.Begin()
	bp, _ := tx.Branch(ctx, "pg", pc)
	bm, _ := tx.Branch(ctx, "maria", mc)
	if _, err := bp.ExecContext(ctx, "INSERT INTO e2e_metrics (id, v) VALUES ($1, 'x')", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := bm.ExecContext(ctx, "INSERT INTO e2e_metrics (id, v) VALUES (?, 'x')", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	get := func(path string) string {
		resp, err := http.Get("http://" + admin + path)
		if err != nil {
			t.Fatalf("GET %s: %v\n%s", path, err, c.out.String())
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s", path, resp.Status)
		}
		return string(b)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(get("/metrics")))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	h := fams["tandem_wait_seconds"]
	if h == nil || h.GetType() != dto.MetricType_HISTOGRAM {
		t.Fatal("/metrics has no histogram tandem_wait_seconds")
	}
	events := map[string]uint64{}
	for _, m := range h.GetMetric() {
		var side, event string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "side":
				side = l.GetValue()
			case "event":
				event = l.GetValue()
			}
		}
		if side == waits.SideCoordinator {
			events[event] = m.GetHistogram().GetSampleCount()
		}
	}
	for _, name := range []string{"log file sync", "log file parallel write", "log space throttle", "standby sync ack", "standby log write",
		"rm roundtrip", "rm prepare", "rm commit prepared", "rm rollback prepared", "rm recover scan", "coordinator commit"} {
		if _, ok := events[name]; !ok {
			t.Errorf("/metrics has no histogram for event %q", name)
		}
	}
	// (The client commits both branches itself: the coordinator's phase 2
	// is a scan, after a head start, not part of this.)
	if events["coordinator commit"] < 1 || events["log file sync"] < 1 {
		t.Errorf("the committed transaction is not in /metrics: %v", events)
	}
	committed := 0.0
	if f := fams["tandem_commit_outcomes_total"]; f != nil {
		for _, m := range f.GetMetric() {
			committed += m.GetCounter().GetValue()
		}
	}
	if committed < 1 {
		t.Error("/metrics counts no commit outcome")
	}
	for _, g := range []string{"tandem_phase2_backlog", "tandem_log_space_used_bytes"} {
		if fams[g] == nil {
			t.Errorf("/metrics has no %s", g)
		}
	}
	if !strings.Contains(get("/waits"), `"coordinator commit"`) {
		t.Error("/waits does not list coordinator commit")
	}
	out, err := exec.Command(tandemBin, "waits", "--admin", admin).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Event waited on") || !strings.Contains(string(out), "coordinator commit") {
		t.Errorf("tandem waits: %v\n%s", err, out)
	}
}

// TestBenchHTML: `tandem bench --html FILE` writes the page beside the
// JSON report, whose slices and latency bins account for every transaction.
func TestBenchHTML(t *testing.T) {
	page := filepath.Join(t.TempDir(), "report.html")
	loose, rep := runBench(t, "--compare", "sql,1pc", "--txns", "200", "--threads", "2", "--db-counters=false", "--html", page)
	results := loose["results"].([]any)
	for i, r := range rep.Results {
		m := results[i].(map[string]any)
		var slices, binned float64
		for _, s := range m["slices"].([]any) {
			slices += s.(map[string]any)["txns"].(float64) + s.(map[string]any)["errors"].(float64)
		}
		for _, b := range m["latency_bins"].([]any) {
			binned += b.(map[string]any)["count"].(float64)
		}
		if uint64(slices) != r.Txns+r.Errors || uint64(binned) != r.Txns || len(m["slices"].([]any)) < 2 {
			t.Errorf("%s: %d txns, %d errors; its %d slices hold %.0f, its latency bins %.0f", r.Workload, r.Txns, r.Errors, len(m["slices"].([]any)), slices, binned)
		}
	}
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`id="tandem-bench-data"`, "TPS per slice", "tandem bench db --compare sql,1pc"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the page (%d bytes) has no %q", len(b), want)
		}
	}
}

// A run's rows never meet an earlier run's. An earlier run may leave
// branches prepared when it exits (a visibility async run's last
// phase 2, a coordinator's phase 2 with --db-counters=false): they keep
// their rows locked, and whoever resolves them later (the SDK's sweep, the
// coordinator's recovery, an operator) makes the rows appear after this
// run's setup emptied the table. Ids counted from 1 in every run met them:
// a lock wait, then a duplicate key, counted as the run's errors.
func TestBenchIDsNeverMeetAnEarlierRunsRows(t *testing.T) {
	d := openDBs(t)
	ctx := context.Background()
	for _, s := range []string{"CREATE TABLE IF NOT EXISTS tandem_bench (id bigint PRIMARY KEY, v varchar(64) NOT NULL)", "DELETE FROM tandem_bench"} {
		if _, err := d.pg.ExecContext(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	gid := fmt.Sprintf("e2e-earlier-run-%d", time.Now().UnixNano())
	conn, err := d.pg.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// An earlier run's prepared branch, as the SDK leaves one (not named
	// bench:, so the bench's setup leaves it alone), holding ids 1 to 100.
	for _, s := range []string{"BEGIN", "INSERT INTO tandem_bench (id, v) SELECT g, 'an earlier run' FROM generate_series(1, 100) g", "PREPARE TRANSACTION '" + gid + "'"} {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	t.Cleanup(func() { _, _ = d.pg.ExecContext(context.Background(), "ROLLBACK PREPARED '"+gid+"'") })
	_, rep := runBench(t, "--workload", "xa", "--decide-at", "auto", "--txns", "20", "--threads", "1", "--txn-timeout", "2s", "--db-counters=false")
	if r := rep.Results[0]; r.Errors != 0 || r.Txns != 20 {
		t.Errorf("xa after an earlier run's prepared rows: %d txns, %d errors (last: %q); want 20, none", r.Txns, r.Errors, r.LastError)
	}
}
