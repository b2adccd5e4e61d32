package console

import (
	"encoding/json"
	"io/fs"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/waits"
)

func reading(at time.Time, committed uint64, reg *waits.Registry) Reading {
	return Reading{At: at, Committed: committed, Coordinator: reg.Snapshot(), Client: waits.NewRegistry(waits.SideClient).Snapshot(),
		HasLog: true, LogUsed: 10, LogLimit: 100}
}

// The ring keeps the last Capacity samples, oldest first; Since returns
// those after a time; rates are per second of the interval.
func TestSamplerRing(t *testing.T) {
	s := NewSampler(3)
	reg := waits.NewRegistry(waits.SideCoordinator)
	t0 := time.UnixMilli(1_000_000)
	for i := range 6 {
		s.Add(reading(t0.Add(time.Duration(i)*2*time.Second), uint64(i*10), reg))
	}
	all := s.Since(0)
	if len(all) != 3 {
		t.Fatalf("%d samples kept, want 3", len(all))
	}
	for i, smp := range all {
		want := t0.Add(time.Duration(i+3) * 2 * time.Second).UnixMilli()
		if smp.T != want || smp.Commits != 5 || smp.Interval != 2 {
			t.Errorf("sample %d: t %d commits/s %v interval %v; want t %d, 5/s over 2 s", i, smp.T, smp.Commits, smp.Interval, want)
		}
	}
	if got := s.Since(all[1].T); len(got) != 1 || got[0].T != all[2].T {
		t.Errorf("Since(second): %d samples", len(got))
	}
	// A reading not after the one before adds nothing.
	s.Add(reading(t0, 0, reg))
	if len(s.Since(all[2].T)) != 0 {
		t.Error("a reading from the past added a sample")
	}
}

// The commit percentiles come from the interval's histogram, the decision
// log's figures from the readings, the waits sorted and bounded.
func TestSampleFigures(t *testing.T) {
	reg := waits.NewRegistry(waits.SideCoordinator)
	t0 := time.Now()
	a := reading(t0, 0, reg)
	a.LogAppends = 100
	for range 99 {
		reg.Record(waits.CoordinatorCommit, 3*time.Millisecond)
	}
	reg.Record(waits.CoordinatorCommit, 900*time.Millisecond)
	for range 10 {
		reg.Record(waits.LogFileFdatasync, time.Millisecond)
	}
	for i := range MaxWaitsPerSample + 3 {
		reg.Record(waits.Define("console test event "+string(rune('a'+i))), time.Duration(i+1)*time.Microsecond)
	}
	b := reading(t0.Add(time.Second), 0, reg)
	b.LogAppends = 140
	smp := sampleOf(a, b)
	if smp.CommitP50 == nil || *smp.CommitP50 < 0.002 || *smp.CommitP50 > 0.0041 {
		t.Errorf("p50 %v, want within the bucket of 3 ms (2.048–4.096 ms)", smp.CommitP50)
	}
	if smp.CommitP99 == nil || *smp.CommitP99 > 0.0041 {
		t.Errorf("p99 %v: 99 of 100 waits are 3 ms", smp.CommitP99)
	}
	if smp.Fsyncs != 10 || smp.RecordsPerFsync == nil || *smp.RecordsPerFsync != 4 {
		t.Errorf("fsyncs %v/s, records per fsync %v; want 10 and 4", smp.Fsyncs, smp.RecordsPerFsync)
	}
	if len(smp.Waits) != MaxWaitsPerSample+1 || smp.Waits[len(smp.Waits)-1].Event != "other" {
		t.Fatalf("%d waits listed, last %+v; want %d and other", len(smp.Waits), smp.Waits[len(smp.Waits)-1], MaxWaitsPerSample+1)
	}
	if smp.Waits[0].Event != "coordinator commit" || smp.Waits[0].Count != 100 {
		t.Errorf("largest wait %+v, want coordinator commit ×100", smp.Waits[0])
	}
	for i := 1; i < len(smp.Waits)-1; i++ {
		if smp.Waits[i].Seconds > smp.Waits[i-1].Seconds {
			t.Errorf("waits not sorted: %+v after %+v", smp.Waits[i], smp.Waits[i-1])
		}
	}
	if none := sampleOf(b, reading(t0.Add(2*time.Second), 0, reg)); none.CommitP50 != nil || none.RecordsPerFsync != nil || len(none.Waits) != 0 {
		t.Errorf("an interval without waits: p50 %v records/fsync %v waits %v; want nulls and none", none.CommitP50, none.RecordsPerFsync, none.Waits)
	}
}

func TestQuantile(t *testing.T) {
	var e waits.EventStats
	e.Buckets[10] = 100 // 512 µs < w ≤ 1024 µs
	e.Max = 2 * time.Millisecond
	if q := Quantile(e, 0.5); math.Abs(q-0.000768) > 1e-9 {
		t.Errorf("median %v, want the bucket's middle 768 µs", q)
	}
	e.Max = time.Millisecond // the largest wait caps the bucket
	if q := Quantile(e, 0.5); math.Abs(q-0.000756) > 1e-9 {
		t.Errorf("median %v, want 756 µs (between 512 µs and the max, 1000 µs)", q)
	}
	e.Buckets[waits.NumBuckets-1] = 100
	e.Max = time.Minute
	if q := Quantile(e, 1); q != 60 {
		t.Errorf("max %v, want 60 (the last bucket is capped by Max)", q)
	}
	if q := Quantile(waits.EventStats{}, 0.5); q != 0 {
		t.Errorf("no waits: %v", q)
	}
}

// The page's script never puts the server's words into the page as markup
// and runs nothing built from strings; the page stays light.
func TestPageScriptHygiene(t *testing.T) {
	b, err := fs.ReadFile(static, "static/console.js")
	if err != nil {
		t.Fatal(err)
	}
	js := string(b)
	for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "setTimeout(\"", "localStorage", "document.cookie"} {
		if strings.Contains(js, bad) {
			t.Errorf("console.js uses %s", bad)
		}
	}
	if !strings.Contains(js, "sessionStorage") || !strings.Contains(js, `"Authorization"`) || !strings.Contains(js, `location.protocol === "https:"`) {
		t.Error("console.js does not keep the token in sessionStorage over HTTPS only and send it in Authorization")
	}
	w := PageWeight()
	t.Logf("page weight: %d bytes (%.1f KiB)", w, float64(w)/1024)
	if w > 300<<10 {
		t.Errorf("page weight %d bytes, want at most 300 KiB", w)
	}
}

// A full ring of the largest samples stays a bounded answer.
func TestFullRingIsBounded(t *testing.T) {
	s := NewSampler(DefaultCapacity)
	reg := waits.NewRegistry(waits.SideCoordinator)
	t0 := time.Now()
	for i := range DefaultCapacity + 1 {
		for _, e := range waits.Events() {
			reg.Record(e, time.Duration(i+1)*time.Millisecond)
		}
		r := reading(t0.Add(time.Duration(i)*time.Second), uint64(i), reg)
		r.HasStandby = true
		s.Add(r)
	}
	all := s.Since(0)
	if len(all) != DefaultCapacity {
		t.Fatalf("%d samples, want %d", len(all), DefaultCapacity)
	}
	for _, smp := range all {
		if len(smp.Waits) > MaxWaitsPerSample+1 {
			t.Fatalf("a sample lists %d waits", len(smp.Waits))
		}
	}
	b, err := json.Marshal(all)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("a full ring of the largest samples: %d bytes of JSON", len(b))
	if len(b) > 1<<20 {
		t.Errorf("a full ring is %d bytes of JSON, want at most 1 MiB", len(b))
	}
}
