package bench

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// fakeSource returns scripted readings, one per read.
type fakeSource struct {
	src    string
	counts []string
	lag    bool
	reads  [][]uint64
	errAt  int // the read (1-based) that fails; 0: none
	n      int
}

func (f *fakeSource) source() string                        { return f.src }
func (f *fakeSource) names() []string                       { return f.counts }
func (f *fakeSource) lagging() bool                         { return f.lag }
func (f *fakeSource) flush(context.Context, execFunc) error { return nil }

func (f *fakeSource) read(context.Context) ([]uint64, error) {
	f.n++
	if f.n == f.errAt {
		return nil, errors.New("connection refused")
	}
	return f.reads[f.n-1], nil
}

func newFakeCounters(srcs ...*fakeSource) *dbCounters {
	c := &dbCounters{}
	for i, s := range srcs {
		name := []string{"pg", "maria"}[i]
		if s == nil {
			c.add(name, nil)
			continue
		}
		c.add(name, s)
	}
	return c
}

// Two workloads in alternating slices: each gets the deltas around its own
// slices, per committed transaction, in RM and counter order.
func TestDBCountersPerTxn(t *testing.T) {
	pg := &fakeSource{src: "pg_stat_wal", counts: []string{"wal_sync", "wal_write"}, lag: true, reads: [][]uint64{
		{100, 200}, {300, 410}, // slice 1 (a): +200 +210
		{305, 410}, {505, 620}, // slice 2 (b): +200 +210 (5 between slices: nobody's)
		{505, 620}, {706, 830}, // slice 3 (a): +201 +210
	}}
	maria := &fakeSource{src: "SHOW GLOBAL STATUS", counts: []string{"Binlog_group_commits", "Innodb_data_fsyncs"}, reads: [][]uint64{
		{10, 20}, {210, 221},
		{210, 221}, {410, 421},
		{410, 421}, {612, 623},
	}}
	c := newFakeCounters(pg, maria)
	ctx := context.Background()
	var a, b counterSample
	for i := range 3 {
		s0 := c.sample(ctx)
		s1 := c.sample(ctx)
		if i%2 == 0 {
			a = a.plus(c.delta(s0, s1))
		} else {
			b = b.plus(c.delta(s0, s1))
		}
	}
	got := c.results(a, 200)
	want := []DBCounter{
		{RM: "pg", Source: "pg_stat_wal", Counter: "wal_sync", Total: 401, PerTxn: 2.005},
		{RM: "pg", Source: "pg_stat_wal", Counter: "wal_write", Total: 420, PerTxn: 2.1},
		{RM: "maria", Source: "SHOW GLOBAL STATUS", Counter: "Binlog_group_commits", Total: 402, PerTxn: 2.01},
		{RM: "maria", Source: "SHOW GLOBAL STATUS", Counter: "Innodb_data_fsyncs", Total: 403, PerTxn: 2.015},
	}
	if len(got) != len(want) {
		t.Fatalf("workload a: %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("workload a counter %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	gotB := c.results(b, 0) // no committed transaction: totals, no per-txn figure
	if gotB[0].Total != 200 || gotB[0].PerTxn != 0 || gotB[2].Total != 200 {
		t.Errorf("workload b: %+v", gotB)
	}
	if len(c.warn) != 0 {
		t.Errorf("warnings: %v", c.warn)
	}
}

// A failed read or a counter that goes backwards voids that source for the
// whole run, with a warning; the other source is unaffected.
func TestDBCountersVoidedSource(t *testing.T) {
	for _, tc := range []struct {
		name, warn string
		pg         *fakeSource
	}{
		{"read fails", "reading pg_stat_wal: connection refused",
			&fakeSource{src: "pg_stat_wal", counts: []string{"wal_sync"}, lag: true, reads: [][]uint64{{1}, {2}, {3}, {4}}, errAt: 3}},
		{"reset", "pg_stat_wal wal_sync went from 50 to 3",
			&fakeSource{src: "pg_stat_wal", counts: []string{"wal_sync"}, lag: true, reads: [][]uint64{{1}, {40}, {50}, {3}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			maria := &fakeSource{src: "SHOW GLOBAL STATUS", counts: []string{"Binlog_group_commits"}, reads: [][]uint64{{0}, {10}, {10}, {20}}}
			c := newFakeCounters(tc.pg, maria)
			ctx := context.Background()
			var tot counterSample
			for range 2 {
				s0 := c.sample(ctx)
				tot = tot.plus(c.delta(s0, c.sample(ctx)))
			}
			got := c.results(tot, 10)
			if len(got) != 1 || got[0].RM != "maria" || got[0].Total != 20 || got[0].PerTxn != 2 {
				t.Errorf("results: %+v; want maria's only, 20 = 2 per txn", got)
			}
			if len(c.warn) != 1 || !strings.Contains(c.warn[0], `rm "pg": no database counters`) || !strings.Contains(c.warn[0], tc.warn) {
				t.Errorf("warnings: %q; want one saying %q", c.warn, tc.warn)
			}
		})
	}
}

// What arrives after the last slice: only lagging sources count, and
// nothing is reported when nothing arrived.
func TestDBCountersLate(t *testing.T) {
	pg := &fakeSource{src: "pg_stat_wal", counts: []string{"wal_sync", "wal_write"}, lag: true, reads: [][]uint64{{10, 10}, {17, 18}, {17, 18}}}
	maria := &fakeSource{src: "SHOW GLOBAL STATUS", counts: []string{"Binlog_group_commits"}, reads: [][]uint64{{5}, {9}, {9}}}
	c := newFakeCounters(pg, maria)
	ctx := context.Background()
	s0 := c.sample(ctx)
	s1 := c.sample(ctx)
	late := c.lateResults(c.delta(s0, s1))
	if len(late) != 2 || late[0].Counter != "wal_sync" || late[0].Total != 7 || late[1].Total != 8 {
		t.Errorf("late: %+v; want pg's two counters, 7 and 8, and not maria's", late)
	}
	if c.onlyLagging(c.delta(s0, s1))[1] != nil {
		t.Error("maria's delta kept in the late counts")
	}
	if late := c.lateResults(c.delta(s1, c.sample(ctx))); late != nil {
		t.Errorf("nothing arrived, yet late = %+v", late)
	}
}

// The text: the header line says the counters are server-wide; one row per
// workload, one column per counter; "-" where a workload has no figure; the
// late counts on their own line. The JSON keeps the fields' names.
func TestDBCountersReport(t *testing.T) {
	rep := &DBReport{
		RMs: []string{"pg (postgres)", "maria (mysql)"}, CPUs: 2, DBCountersNote: dbCountersNote,
		Results: []DBResult{
			{Workload: "raw2pc", Threads: 2, Txns: 100, DBCounters: []DBCounter{
				{RM: "pg", Source: "pg_stat_wal", Counter: "wal_sync", Total: 199, PerTxn: 1.99},
				{RM: "maria", Source: "SHOW GLOBAL STATUS", Counter: "Binlog_group_commits", Total: 200, PerTxn: 2},
			}},
			{Workload: "xa", Threads: 2, Txns: 0, DBCounters: []DBCounter{
				{RM: "pg", Source: "pg_stat_wal", Counter: "wal_sync", Total: 5},
			}},
		},
		DBCountersLate: []DBCounter{{RM: "pg", Source: "pg_stat_wal", Counter: "wal_sync", Total: 12}},
	}
	var b strings.Builder
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	lines := strings.Split(out, "\n")
	if !strings.Contains(lines[0], "database sync counters are server-wide (other sessions' work counts too)") {
		t.Errorf("header line: %q", lines[0])
	}
	// The counters' table follows its heading (the results table has rows
	// of the same names above it).
	start := -1
	for i, l := range lines {
		if strings.HasPrefix(l, "database syncs per committed transaction (server-wide counters") {
			start = i
		}
	}
	if start < 0 || start+3 >= len(lines) {
		t.Fatalf("no counters table in\n%s", out)
	}
	for i, want := range []string{
		"workload pg wal_sync maria Binlog_group_commits",
		"raw2pc 1.990 2.000",
		"xa - -", // no committed transaction; no maria figure
	} {
		if got := strings.Join(strings.Fields(lines[start+1+i]), " "); got != want {
			t.Errorf("counters table line %d: %q, want %q", i, got, want)
		}
	}
	if !strings.Contains(out, "arrived after the last slice, in neither workload's figures (both commit through a coordinator): pg wal_sync 12\n") {
		t.Errorf("no late line in\n%s", out)
	}

	if !strings.Contains(out, "\n("+dbCountersNote+")\n") {
		t.Errorf("no note under the table in\n%s", out)
	}

	j, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"db_counters":[{"rm":"pg","source":"pg_stat_wal","counter":"wal_sync","total":199,"per_txn":1.99}`, `"db_counters_note":"server-wide`, `"db_counters_late":[`} {
		if !strings.Contains(string(j), k) {
			t.Errorf("JSON lacks %s: %s", k, j)
		}
	}

	// Without counters (--db-counters=false), no trace of them.
	rep.DBCountersNote, rep.DBCountersLate = "", nil
	for i := range rep.Results {
		rep.Results[i].DBCounters = nil
	}
	b.Reset()
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "server-wide") || strings.Contains(b.String(), "database syncs") {
		t.Errorf("counters mentioned without counters:\n%s", b.String())
	}
	if j, _ := json.Marshal(rep); strings.Contains(string(j), "db_counters") {
		t.Errorf("JSON mentions counters without counters: %s", j)
	}
}
