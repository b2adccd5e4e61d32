package waits

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/xid"
)

func TestConcurrentRecordingIsExact(t *testing.T) {
	r := NewRegistry("test")
	const goroutines, each = 8, 20000
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				// 1..7 µs and one large wait per goroutine: exact sums are known.
				r.Record(RMRoundtrip, time.Duration(1+i%7)*time.Microsecond)
				r.Record(LogFileSync, time.Nanosecond)
			}
			r.Record(RMPrepare, time.Duration(g+1)*time.Millisecond)
		}()
	}
	wg.Wait()
	s := r.Snapshot()
	rt := s.Get(RMRoundtrip)
	var want time.Duration
	for i := range each {
		want += time.Duration(1+i%7) * time.Microsecond
	}
	want *= goroutines
	if rt.Count != goroutines*each || rt.Total != want || rt.Max != 7*time.Microsecond {
		t.Fatalf("rm roundtrip: count %d total %v max %v; want %d %v 7µs", rt.Count, rt.Total, rt.Max, goroutines*each, want)
	}
	var inBuckets uint64
	for _, c := range rt.Buckets {
		inBuckets += c
	}
	if inBuckets != rt.Count {
		t.Fatalf("buckets hold %d waits, count is %d", inBuckets, rt.Count)
	}
	if ls := s.Get(LogFileSync); ls.Count != goroutines*each || ls.Total != goroutines*each*time.Nanosecond {
		t.Fatalf("log file sync: %+v", ls)
	}
	if p := s.Get(RMPrepare); p.Count != goroutines || p.Max != goroutines*time.Millisecond {
		t.Fatalf("rm prepare: count %d max %v", p.Count, p.Max)
	}
}

func TestBucketEdges(t *testing.T) {
	for _, c := range []struct {
		d      time.Duration
		bucket int
	}{
		{0, 0}, {-5, 0}, {1, 0}, {999, 0}, {time.Microsecond, 0}, // bucket 0: ≤ 1 µs, inclusive
		{time.Microsecond + 1, 1}, {2 * time.Microsecond, 1},
		{2*time.Microsecond + 1, 2}, {4 * time.Microsecond, 2},
		{4*time.Microsecond + 1, 3},
		{time.Millisecond, 10}, // 1000 µs ≤ 1024 µs
		{1024 * time.Microsecond, 10}, {1024*time.Microsecond + 1, 11},
		{time.Duration(1<<25) * time.Microsecond, 25}, {time.Duration(1<<25)*time.Microsecond + 1, 26},
		{time.Hour, NumBuckets - 1},
	} {
		r := NewRegistry("test")
		r.Record(RMPrepare, c.d)
		got := -1
		for i, n := range r.Snapshot().Get(RMPrepare).Buckets {
			if n == 1 {
				got = i
			}
		}
		if got != c.bucket {
			t.Errorf("%v (%d ns) went to bucket %d, want %d", c.d, int64(c.d), got, c.bucket)
		}
		if c.bucket < NumBuckets-1 && max(c.d, 0) > BucketUpperBound(c.bucket) {
			t.Errorf("%v is above its bucket's bound %v", c.d, BucketUpperBound(c.bucket))
		}
		if c.bucket > 0 && max(c.d, 0) <= BucketUpperBound(c.bucket-1) {
			t.Errorf("%v fits the bucket below (%v)", c.d, BucketUpperBound(c.bucket-1))
		}
	}
}

func TestTraceOrderingAndCoverage(t *testing.T) {
	r := NewRegistry(SideCoordinator)
	g := xid.New()
	other := xid.New()
	base := time.Now()
	tr := r.StartTrace(g)
	// Recorded out of order, and from several goroutines.
	var wg sync.WaitGroup
	for i, off := range []time.Duration{30, 10, 20} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tr.Add(SideClient, RMRoundtrip, string(rune('a'+i)), base.Add(off*time.Millisecond), 5*time.Millisecond)
		}()
	}
	wg.Wait()
	r.SinceTx(RMCommitPrepared, base.Add(-time.Millisecond), g, "pg")     // traced
	r.SinceTx(RMCommitPrepared, base.Add(-time.Millisecond), other, "pg") // another gtrid: not in this trace
	if got := r.EndTrace(g); got != tr {
		t.Fatal("EndTrace returned another trace")
	}
	r.SinceTx(RMCommitPrepared, base, g, "pg") // after the end: not traced
	spans := tr.Spans()
	if len(spans) != 4 {
		t.Fatalf("%d spans, want 4: %+v", len(spans), spans)
	}
	for i := 1; i < len(spans); i++ {
		if spans[i].Start.Before(spans[i-1].Start) {
			t.Fatalf("spans out of order: %+v", spans)
		}
	}
	if spans[0].Event != RMCommitPrepared || spans[1].Detail != "b" || spans[2].Detail != "c" || spans[3].Detail != "a" {
		t.Fatalf("wrong order: %+v", spans)
	}
	if n := r.Snapshot().Get(RMCommitPrepared).Count; n != 3 {
		t.Fatalf("registry counted %d commit prepared, want 3", n)
	}
	// Client spans [10,15] [20,25] [30,35] ms: 15 ms covered from 0 to 40 ms;
	// clipped to [12, 32]: 3 + 5 + 2.
	if c := tr.Covered(SideClient, base, base.Add(40*time.Millisecond)); c != 15*time.Millisecond {
		t.Fatalf("covered %v, want 15ms", c)
	}
	if c := tr.Covered(SideClient, base.Add(12*time.Millisecond), base.Add(32*time.Millisecond)); c != 10*time.Millisecond {
		t.Fatalf("covered (clipped) %v, want 10ms", c)
	}
	// Overlapping spans count once.
	o := NewTrace("x")
	o.Add(SideClient, RMPrepare, "pg", base, 10*time.Millisecond)
	o.Add(SideClient, RMPrepare, "maria", base.Add(2*time.Millisecond), 4*time.Millisecond)
	o.Add(SideClient, CoordinatorCommit, "", base.Add(9*time.Millisecond), 3*time.Millisecond)
	if c := o.Covered("", base, base.Add(time.Second)); c != 12*time.Millisecond {
		t.Fatalf("overlapping: covered %v, want 12ms", c)
	}
	// A nil trace does nothing and does not panic.
	var nilTrace *Trace
	nilTrace.Add(SideClient, RMPrepare, "", base, time.Millisecond)
	if nilTrace.Spans() != nil {
		t.Fatal("nil trace has spans")
	}
	var b bytes.Buffer
	_ = tr.WriteText(&b)
	if !strings.Contains(b.String(), "rm commit prepared (pg)") {
		t.Fatalf("text trace:\n%s", b.String())
	}
}

func TestSubAddAndTable(t *testing.T) {
	r := NewRegistry(SideClient)
	r.Record(RMRoundtrip, 8*time.Millisecond)
	before := r.Snapshot()
	r.Record(RMRoundtrip, 3*time.Millisecond)
	r.Record(RMPrepare, time.Millisecond)
	d := r.Snapshot().Sub(before)
	rt := d.Get(RMRoundtrip)
	if rt.Count != 1 || rt.Total != 3*time.Millisecond || rt.Max != 4096*time.Microsecond {
		// The all-time max (8 ms) is older: the delta's max is its bucket's bound.
		t.Fatalf("delta: %+v", rt)
	}
	if p := d.Get(RMPrepare); p.Count != 1 || p.Max != time.Millisecond {
		t.Fatalf("delta prepare (the new all-time max is exact): %+v", p)
	}
	sum := d.Add(d)
	if sum.Get(RMRoundtrip).Count != 2 || sum.Get(RMRoundtrip).Total != 6*time.Millisecond {
		t.Fatalf("add: %+v", sum.Get(RMRoundtrip))
	}
	var b bytes.Buffer
	if err := d.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	for i := range lines {
		lines[i] = strings.TrimSpace(lines[i])
	}
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "Event waited on") || !strings.HasPrefix(lines[1], "rm roundtrip") {
		t.Fatalf("table:\n%s", b.String())
	}
	back := FromJSON(d.JSON(true, false))
	if back.Get(RMRoundtrip).Count != 1 || back.Get(RMRoundtrip).Buckets != rt.Buckets {
		t.Fatalf("JSON round trip: %+v", back.Get(RMRoundtrip))
	}
}

// A delta of two JSON forms without histograms (GET /waits without
// ?buckets=1) still bounds its Max: exact for a new all-time maximum,
// else the all-time maximum, never 0 for an event waited on.
func TestSubWithoutHistogramsKeepsABound(t *testing.T) {
	r := NewRegistry(SideClient)
	r.Record(RMRoundtrip, 8*time.Millisecond)
	before := FromJSON(r.Snapshot().JSON(false, false))
	r.Record(RMRoundtrip, 3*time.Millisecond)
	r.Record(RMPrepare, 20*time.Millisecond)
	d := FromJSON(r.Snapshot().JSON(false, false)).Sub(before)
	if rt := d.Get(RMRoundtrip); rt.Count != 1 || rt.Max != 8*time.Millisecond {
		t.Errorf("rm roundtrip: count %d, max %v; want 1, 8ms (the all-time max bounds it)", rt.Count, rt.Max)
	}
	if p := d.Get(RMPrepare); p.Count != 1 || p.Max != 20*time.Millisecond {
		t.Errorf("rm prepare: count %d, max %v; want 1, 20ms (exact)", p.Count, p.Max)
	}
	// Seconds read back from JSON are rounded to the nanosecond, not truncated.
	for _, d := range []time.Duration{4096 * time.Microsecond, 20 * time.Millisecond, 1030030 * time.Nanosecond, 127127 * time.Nanosecond} {
		if got := seconds(d.Seconds()); got != d {
			t.Errorf("seconds(%v) = %v", d.Seconds(), got)
		}
	}
}

func TestDefine(t *testing.T) {
	e := Define("test wait")
	if e2 := Define("test wait"); e2 != e {
		t.Fatal("Define twice gave two events")
	}
	if e.String() != "test wait" {
		t.Fatal(e.String())
	}
	if got, ok := Lookup("log file sync"); !ok || got != LogFileSync {
		t.Fatal("Lookup log file sync")
	}
	for _, want := range []string{"log file sync", "log file parallel write", "log space throttle", "standby sync ack", "standby log write",
		"rm roundtrip", "rm prepare", "rm commit prepared", "rm rollback prepared", "rm recover scan", "coordinator commit"} {
		if _, ok := Lookup(want); !ok {
			t.Errorf("event %q is not defined", want)
		}
	}
}

func TestRecordDoesNotAllocate(t *testing.T) {
	r := NewRegistry("test")
	g := xid.New()
	start := time.Now()
	if n := testing.AllocsPerRun(1000, func() {
		r.Record(LogFileSync, time.Millisecond)
		r.Since(RMRoundtrip, start)
		r.SinceTx(RMCommitPrepared, start, g, "pg")
	}); n != 0 {
		t.Fatalf("%v allocations per recorded wait", n)
	}
}

// BenchmarkRecord: one recorded wait, duration given.
func BenchmarkRecord(b *testing.B) {
	r := NewRegistry("bench")
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		r.Record(LogFileSync, time.Duration(i&0xffff)*time.Microsecond)
	}
}

// BenchmarkSince: what a call site pays: reading the clock and recording.
func BenchmarkSince(b *testing.B) {
	r := NewRegistry("bench")
	start := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		r.Since(RMRoundtrip, start)
	}
}

// BenchmarkSinceTx: a wait tied to a gtrid, with no trace open.
func BenchmarkSinceTx(b *testing.B) {
	r := NewRegistry("bench")
	g := xid.New()
	start := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		r.SinceTx(RMCommitPrepared, start, g, "pg")
	}
}

// BenchmarkRecordParallel: every CPU recording the same event (the worst case: one contended cache line).
func BenchmarkRecordParallel(b *testing.B) {
	r := NewRegistry("bench")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			r.Record(LogFileSync, time.Duration(i&0xffff)*time.Microsecond)
		}
	})
}
