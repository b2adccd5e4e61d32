package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/waits"
)

var (
	testPrepare = waits.Define("rm prepare")
	testCommit  = waits.Define("coordinator commit")
)

// A trace that began at begin, with a prepare of prep from begin and a
// commit of commit right after it.
func slowTrace(begin time.Time, prep, commit time.Duration) *waits.Trace {
	tr := waits.NewTrace("")
	tr.Reset("")
	tr.Add(waits.SideClient, testPrepare, "pg", begin, prep)
	tr.Add(waits.SideClient, testCommit, "", begin.Add(prep), commit)
	return tr
}

// The n slowest are kept, from every worker, slowest first; the rest cost
// a comparison.
func TestSlowestKeepsTheNSlowest(t *testing.T) {
	a, b := slowest{n: 3}, slowest{n: 3}
	begin := time.Now()
	for i, d := range []time.Duration{5, 1, 9, 3, 7} {
		w := &a
		if i%2 == 1 {
			w = &b
		}
		w.offer(d*time.Millisecond, slowTrace(begin, time.Millisecond, time.Millisecond))
	}
	if !b.wants(time.Millisecond) {
		t.Error("a worker that kept fewer than n wants any transaction: wants(1ms) with 2 kept of 3 was false")
	}
	all := slowest{n: 3}
	all.merge(&a)
	all.merge(&b)
	got := all.traces()
	var ms []float64
	for _, tr := range got {
		ms = append(ms, tr.ElapsedUs/1e3)
	}
	if len(ms) != 3 || ms[0] != 9 || ms[1] != 7 || ms[2] != 5 {
		t.Errorf("kept %v ms, want [9 7 5]", ms)
	}
	if all.wants(4 * time.Millisecond) {
		t.Error("a 4 ms transaction is not among 9, 7 and 5 ms")
	}
	if none := (&slowest{}); none.wants(time.Hour) {
		t.Error("n 0 keeps nothing")
	}
}

// The line of a slow transaction names its waits in order with their
// milliseconds, and the time in none of them.
func TestWriteSlowestLine(t *testing.T) {
	begin := time.Now()
	s := slowest{n: 1}
	s.offer(5*time.Millisecond, slowTrace(begin, time.Millisecond, 3*time.Millisecond))
	var out strings.Builder
	writeSlowest(&out, DBResult{Workload: "xa", Slowest: s.traces()})
	want := "rm prepare pg 1.00 | coordinator commit 3.00 | other 1.00"
	if !strings.Contains(out.String(), "== xa: the 1 slowest transactions") || !strings.Contains(out.String(), want) {
		t.Errorf("got:\n%s\nwant a line with %q", out.String(), want)
	}
}
