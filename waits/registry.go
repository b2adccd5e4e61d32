package waits

import (
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tandem-tx/tandem/xid"
)

// NumBuckets is the number of histogram buckets of every event: bucket i
// (0 ≤ i < NumBuckets-1) counts waits of at most 2^i µs; the last counts the rest.
const NumBuckets = 27

// BucketUpperBound is the inclusive upper bound of bucket i; +Inf for the last.
func BucketUpperBound(i int) time.Duration {
	if i >= NumBuckets-1 {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(1<<i) * time.Microsecond
}

// bucketOf returns the bucket of a wait of ns nanoseconds.
func bucketOf(ns uint64) int {
	if ns <= 1000 {
		return 0
	}
	us := (ns + 999) / 1000 // ceiling: 1001 ns is more than 1 µs
	return min(bits.Len64(us-1), NumBuckets-1)
}

// Sides of a registry.
const (
	SideClient      = "client"
	SideCoordinator = "coordinator"
)

// Client is the process-wide registry of the SDK's waits, the default of
// every client.Config that names no registry of its own. Coordinators have
// no process-wide registry: each records into the one its options name.
var Client = NewRegistry(SideClient)

// Histogram is a count, total, maximum and histogram of durations, in the
// buckets of every wait event (BucketUpperBound): one event's totals in a
// Registry, or any other timing kept the same way (the SDK's commit
// latency by path). Safe for concurrent use; the zero value is empty.
type Histogram struct {
	count   atomic.Uint64
	total   atomic.Uint64 // ns
	max     atomic.Uint64 // ns
	buckets [NumBuckets]atomic.Uint64
}

// Record counts one duration (negative counts as 0). It does not allocate.
func (s *Histogram) Record(d time.Duration) {
	ns := uint64(max(d, 0))
	s.count.Add(1)
	s.total.Add(ns)
	s.buckets[bucketOf(ns)].Add(1)
	for {
		m := s.max.Load()
		if ns <= m || s.max.CompareAndSwap(m, ns) {
			return
		}
	}
}

// Stats copies the totals, labelled e (0 for a timing that is no event).
func (s *Histogram) Stats(e Event) EventStats {
	es := EventStats{Event: e, Count: s.count.Load(), Total: time.Duration(s.total.Load()), Max: time.Duration(s.max.Load())}
	for b := range es.Buckets {
		es.Buckets[b] = s.buckets[b].Load()
	}
	return es
}

func (s *Histogram) reset() {
	s.count.Store(0)
	s.total.Store(0)
	s.max.Store(0)
	for b := range s.buckets {
		s.buckets[b].Store(0)
	}
}

// Registry holds the totals of every event for one side. It is safe for
// concurrent use; its zero value is not usable (use NewRegistry).
type Registry struct {
	side string
	ev   [MaxEvents]Histogram

	// tracing counts open traces, so that SinceTx skips the map when none is.
	tracing atomic.Int32
	tmu     sync.Mutex
	traces  map[xid.GTRID]*Trace
}

// NewRegistry returns an empty registry for side (SideClient, SideCoordinator
// or another label).
func NewRegistry(side string) *Registry {
	return &Registry{side: side, traces: map[xid.GTRID]*Trace{}}
}

// Side is the registry's label.
func (r *Registry) Side() string { return r.side }

// Record counts one wait of d in e. Negative durations count as 0; an
// undefined event is ignored. It does not allocate.
func (r *Registry) Record(e Event, d time.Duration) {
	if e == 0 || int(e) >= MaxEvents {
		return
	}
	r.ev[e].Record(d)
}

// Since records the time elapsed since start in e and returns it.
func (r *Registry) Since(e Event, start time.Time) time.Duration {
	d := time.Since(start)
	r.Record(e, d)
	return d
}

// SinceTx is Since for a wait that belongs to the global transaction g
// (detail names the RM, or is empty): when a trace of g is open on this
// registry, the wait is also appended to it.
func (r *Registry) SinceTx(e Event, start time.Time, g xid.GTRID, detail string) time.Duration {
	d := time.Since(start)
	r.Record(e, d)
	if r.tracing.Load() > 0 {
		r.tmu.Lock()
		t := r.traces[g]
		r.tmu.Unlock()
		t.Add(r.side, e, detail, start, d)
	}
	return d
}

// StartTrace opens a trace of g on this registry: from now until EndTrace,
// every SinceTx for g is appended to it. Starting a trace of a gtrid already
// traced returns the open trace.
func (r *Registry) StartTrace(g xid.GTRID) *Trace {
	r.tmu.Lock()
	defer r.tmu.Unlock()
	if t, ok := r.traces[g]; ok {
		return t
	}
	t := NewTrace(g.String())
	r.traces[g] = t
	r.tracing.Add(1)
	return t
}

// EndTrace closes the trace of g and returns it (nil if none was open).
func (r *Registry) EndTrace(g xid.GTRID) *Trace {
	r.tmu.Lock()
	defer r.tmu.Unlock()
	t, ok := r.traces[g]
	if !ok {
		return nil
	}
	delete(r.traces, g)
	r.tracing.Add(-1)
	return t
}

// EventStats is one event's totals at one moment.
type EventStats struct {
	Event   Event
	Count   uint64
	Total   time.Duration
	Max     time.Duration
	Buckets [NumBuckets]uint64
}

// Plus is s with o's waits added (Max is the larger of the two).
func (s EventStats) Plus(o EventStats) EventStats {
	s.Count += o.Count
	s.Total += o.Total
	s.Max = max(s.Max, o.Max)
	for i := range s.Buckets {
		s.Buckets[i] += o.Buckets[i]
	}
	return s
}

// Avg is Total/Count (0 without waits).
func (s EventStats) Avg() time.Duration {
	if s.Count == 0 {
		return 0
	}
	return s.Total / time.Duration(s.Count)
}

// Snapshot is a registry's totals at one moment: one entry per defined
// event, in definition order.
type Snapshot struct {
	Side   string
	At     time.Time
	Events []EventStats
}

// Snapshot copies the totals. Waits recorded while it runs may be partly
// counted (count in, total not yet); totals taken when recording has stopped
// are exact.
func (r *Registry) Snapshot() Snapshot {
	evs := Events()
	s := Snapshot{Side: r.side, At: time.Now(), Events: make([]EventStats, len(evs))}
	for i, e := range evs {
		s.Events[i] = r.ev[e].Stats(e)
	}
	return s
}

// Reset sets every total to zero (tests and benchmarks).
func (r *Registry) Reset() {
	for e := range r.ev {
		r.ev[e].reset()
	}
}

// Get returns the totals of e (zero if the snapshot does not have it).
func (s Snapshot) Get(e Event) EventStats {
	for _, es := range s.Events {
		if es.Event == e {
			return es
		}
	}
	return EventStats{Event: e}
}

// Sub returns the waits recorded between prev and s. A maximum cannot be
// subtracted: an event waited on in the interval has a delta Max that is
// exact when the largest wait ever fell in the interval (s's Max above
// prev's), otherwise the upper bound of its highest non-empty bucket capped
// by s's Max (within a factor of 2). Snapshots without histograms (the JSON
// form without buckets) give s's Max, the all-time maximum, as the bound.
// An event not waited on in the interval has Max 0.
func (s Snapshot) Sub(prev Snapshot) Snapshot {
	out := Snapshot{Side: s.Side, At: s.At, Events: make([]EventStats, len(s.Events))}
	for i, cur := range s.Events {
		p := prev.Get(cur.Event)
		d := EventStats{Event: cur.Event, Count: cur.Count - p.Count, Total: cur.Total - p.Total}
		top := -1
		for b := range d.Buckets {
			d.Buckets[b] = cur.Buckets[b] - p.Buckets[b]
			if d.Buckets[b] > 0 {
				top = b
			}
		}
		switch {
		case d.Count == 0 && top < 0:
			// Not waited on in the interval.
		case cur.Max > p.Max:
			d.Max = cur.Max // the largest wait ever happened in this interval
		case top >= 0:
			d.Max = min(cur.Max, BucketUpperBound(top))
		default:
			d.Max = cur.Max // no histograms to bound it by: the all-time maximum
		}
		out.Events[i] = d
	}
	return out
}

// Add returns s with o's waits added (Max is the larger of the two).
func (s Snapshot) Add(o Snapshot) Snapshot {
	out := Snapshot{Side: s.Side, At: s.At, Events: make([]EventStats, 0, len(s.Events))}
	if out.Side == "" {
		out.Side, out.At = o.Side, o.At
	}
	seen := map[Event]bool{}
	for _, a := range s.Events {
		out.Events = append(out.Events, a.Plus(o.Get(a.Event)))
		seen[a.Event] = true
	}
	for _, b := range o.Events {
		if !seen[b.Event] {
			out.Events = append(out.Events, b)
		}
	}
	return out
}

// Total is the sum of every event's total.
func (s Snapshot) Total() time.Duration {
	var t time.Duration
	for _, e := range s.Events {
		t += e.Total
	}
	return t
}
