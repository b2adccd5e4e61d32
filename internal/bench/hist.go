package bench

import (
	"math"
	"math/bits"
	"time"
)

// Histogram counts durations in log-linear buckets, as HDR histograms do:
// exact below 128 ns, then 64 buckets per power of two, so a quantile is
// off by at most 1/64 (1.6%). Durations from 2^37 ns (about 137 s) up
// share the last bucket. Record never allocates; the zero value is ready
// to use. A Histogram is not safe for concurrent use: give each goroutine
// its own and Merge them.
type Histogram struct {
	counts [histBuckets]uint64
	total  uint64
	max    time.Duration
}

const (
	histSubBits  = 6 // 64 buckets per power of two
	histLinear   = 2 << histSubBits
	histMaxShift = 31
	histBuckets  = histLinear + histMaxShift<<histSubBits
)

// bucket returns the index of v's bucket.
func bucket(v uint64) int {
	if v < histLinear {
		return int(v)
	}
	shift := bits.Len64(v) - histSubBits - 1 // >= 1: v>>shift is in [64, 128)
	if shift > histMaxShift {
		return histBuckets - 1
	}
	return histLinear + (shift-1)<<histSubBits + int(v>>shift) - 1<<histSubBits
}

// bucketMid returns the middle of bucket i's range, in nanoseconds.
func bucketMid(i int) float64 {
	if i < histLinear {
		return float64(i)
	}
	i -= histLinear
	shift := i>>histSubBits + 1
	low := uint64(1<<histSubBits+i&(1<<histSubBits-1)) << shift
	return float64(low) + float64(uint64(1)<<shift)/2
}

// Record counts one duration (negative counts as 0).
func (h *Histogram) Record(d time.Duration) {
	v := uint64(max(d, 0))
	h.counts[bucket(v)]++
	h.total++
	h.max = max(h.max, d)
}

// Merge adds o's counts to h.
func (h *Histogram) Merge(o *Histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.total += o.total
	h.max = max(h.max, o.max)
}

// Count is the number of durations recorded.
func (h *Histogram) Count() uint64 { return h.total }

// Max is the largest duration recorded, exactly.
func (h *Histogram) Max() time.Duration { return h.max }

// Quantile returns the duration below which a fraction q (0 to 1) of the
// recorded durations fall, to within a bucket's width; 0 if none were
// recorded.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	rank := uint64(q*float64(h.total) + 0.5)
	rank = min(max(rank, 1), h.total)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return min(time.Duration(bucketMid(i)), h.max)
		}
	}
	return h.max
}

// LatencyBin is one bin of a latency distribution: Count durations above
// the previous bin's LeMs and at most LeMs milliseconds (to within the
// Histogram's 1.6 %).
type LatencyBin struct {
	LeMs  float64 `json:"le_ms"`
	Count uint64  `json:"count"`
}

// Bins returns the distribution coarsened to perOctave bins per power of
// two, on a grid fixed for every Histogram (so two distributions line up
// bin by bin): from the first non-empty bin to the last, empty ones
// between included. Nil if nothing was recorded.
func (h *Histogram) Bins(perOctave int) []LatencyBin {
	if h.total == 0 || perOctave < 1 {
		return nil
	}
	// Grid index of a duration of mid nanoseconds: bin k holds (2^((k-1)/p), 2^(k/p)] ns.
	grid := func(mid float64) int { return int(math.Ceil(math.Log2(max(mid, 1)) * float64(perOctave))) }
	var out []LatencyBin
	first := 0
	for i, c := range h.counts {
		if c == 0 {
			continue
		}
		k := grid(bucketMid(i))
		if out == nil {
			first = k
		}
		for len(out) <= k-first {
			out = append(out, LatencyBin{LeMs: math.Exp2(float64(first+len(out))/float64(perOctave)) / 1e6})
		}
		out[k-first].Count += c
	}
	return out
}
