package bench

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestHistogramBuckets checks that bucket boundaries are contiguous and
// that every value lands in a bucket whose middle is within 1/64 of it.
func TestHistogramBuckets(t *testing.T) {
	prev := -1
	for _, v := range []uint64{0, 1, 127, 128, 129, 255, 256, 1000, 1 << 20, 123456789, 1 << 37} {
		i := bucket(v)
		if i < prev || i >= histBuckets {
			t.Fatalf("bucket(%d) = %d after %d (of %d)", v, i, prev, histBuckets)
		}
		prev = i
		if mid := bucketMid(i); v > 0 && (mid < float64(v)*(1-1.0/64) || mid > float64(v)*(1+1.0/64)) {
			t.Fatalf("value %d in bucket %d whose middle is %.0f", v, i, mid)
		}
	}
	for v := uint64(histLinear); v < 1<<16; v++ {
		if d := bucket(v) - bucket(v-1); d != 0 && d != 1 {
			t.Fatalf("bucket(%d) - bucket(%d) = %d", v, v-1, d)
		}
	}
}

// TestHistogramQuantiles compares quantiles with those of sorted samples.
func TestHistogramQuantiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var a, b Histogram
	var all []time.Duration
	for i := range 100000 {
		d := time.Duration(rng.ExpFloat64() * float64(200*time.Microsecond))
		all = append(all, d)
		if i%2 == 0 {
			a.Record(d)
		} else {
			b.Record(d)
		}
	}
	a.Merge(&b)
	slices.Sort(all)
	if a.Count() != uint64(len(all)) || a.Max() != all[len(all)-1] {
		t.Fatalf("count %d max %v, want %d and %v", a.Count(), a.Max(), len(all), all[len(all)-1])
	}
	for _, q := range []float64{0.01, 0.5, 0.9, 0.99, 0.999, 1} {
		want := all[min(int(q*float64(len(all))+0.5), len(all))-1]
		got := a.Quantile(q)
		if diff := float64(got-want) / float64(want); diff < -0.02 || diff > 0.02 {
			t.Errorf("quantile %v = %v, samples say %v", q, got, want)
		}
	}
	var empty Histogram
	if empty.Quantile(0.5) != 0 {
		t.Fatal("quantile of an empty histogram is not 0")
	}
}

// TestHistogramRecordDoesNotAllocate guards the benchmark's hot loop.
func TestHistogramRecordDoesNotAllocate(t *testing.T) {
	var h Histogram
	if n := testing.AllocsPerRun(1000, func() { h.Record(123 * time.Microsecond) }); n != 0 {
		t.Fatalf("Record allocates %v times", n)
	}
}

// TestHistogramBins checks that the coarse bins keep every count, hold
// each duration under their bound and line up across histograms.
func TestHistogramBins(t *testing.T) {
	var a, b Histogram
	for _, d := range []time.Duration{700 * time.Microsecond, time.Millisecond, 3 * time.Millisecond, 40 * time.Millisecond} {
		a.Record(d)
	}
	b.Record(2 * time.Millisecond)
	ba, bb := a.Bins(4), b.Bins(4)
	var n uint64
	for i, x := range ba {
		n += x.Count
		if i > 0 && x.LeMs <= ba[i-1].LeMs {
			t.Fatalf("bins not increasing: %v", ba)
		}
	}
	if n != 4 {
		t.Fatalf("bins hold %d durations, want 4: %v", n, ba)
	}
	if ba[0].Count != 1 || ba[0].LeMs < 0.7 || ba[0].LeMs > 0.7*1.19*1.02 {
		t.Fatalf("first bin %+v, want the 0.7 ms duration alone under a bound just above it", ba[0])
	}
	if last := ba[len(ba)-1]; last.Count != 1 || last.LeMs < 40 {
		t.Fatalf("last bin %+v, want the 40 ms duration", last)
	}
	if !slices.ContainsFunc(ba, func(x LatencyBin) bool { return x.LeMs == bb[0].LeMs }) {
		t.Fatalf("b's bin %v is not on a's grid %v", bb[0], ba)
	}
	var empty Histogram
	if empty.Bins(4) != nil {
		t.Fatal("an empty histogram has bins")
	}
}
