package console

import (
	"context"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/tandem-tx/tandem/waits"
)

// Reading is what the Sampler reads from the coordinator at every tick:
// counters and totals since the process started, and gauges now.
type Reading struct {
	At time.Time
	// Commit requests by outcome (tandem_commit_outcomes_total).
	Committed, Aborted, Refused, Unknown uint64
	// The wait events of each side: the coordinator's, and the SDK's in
	// this process (its "rm commit" count is the local, one-phase or
	// read-only, commits).
	Coordinator, Client waits.Snapshot
	// HasLog: this process has a coordinator (a standby has none).
	HasLog bool
	// LogUsed, LogLimit: coord.Coordinator.LogSpace; LogLimit 0 is unbounded.
	LogUsed, LogLimit int64
	LogAppends        uint64 // records appended to the decision log
	Backlog           int    // decided transactions whose phase 2 has not ended
	// HasStandby: the process has a standby role; the lag is the primary's.
	HasStandby                  bool
	LagBytes, LagRecords        int64
	LagSeconds                  float64
	StandbyConnected, Protected bool
	// CommitPoints: what each RM's decision table recorded since the
	// coordinator started reading it (coord.Coordinator.CommitPoints):
	// the commits decided at a commit point, which never reach the
	// coordinator.
	CommitPoints []CommitPoint
}

// CommitPoint is one RM's decision table as read by the coordinator:
// totals since it started reading, and the table's state.
type CommitPoint struct {
	RM              string
	Commits, Aborts uint64
	BeganToDecided  waits.EventStats
	CRows, ARows    int64
	CKept           int64
	OldestC         time.Duration
	Err             string
}

// DecisionTable is one RM's decision table in a Sample.
type DecisionTable struct {
	RM    string `json:"rm"`
	CRows int64  `json:"c_rows"`
	ARows int64  `json:"a_rows"`
	// CKept: 'C' rows older than decision.ForgetMinAge (30 s): waiting for
	// a participant's branch, or for the sweep after a client died.
	CKept    int64   `json:"c_kept"`
	OldestCS float64 `json:"oldest_c_s"`
	// Commits and Aborts per second in the interval.
	Commits float64 `json:"commits"`
	Aborts  float64 `json:"aborts"`
	Error   string  `json:"error,omitempty"`
}

// MaxWaitsPerSample bounds the wait events a Sample lists (the largest by
// time waited); the rest are summed into one "other" entry.
const MaxWaitsPerSample = 12

// Wait is the time waited on one event in one interval.
type Wait struct {
	Side    string  `json:"side"`
	Event   string  `json:"event"`
	Seconds float64 `json:"s"`
	Count   uint64  `json:"n"`
}

// Sample is one interval's figures: rates per second over the interval that
// ends at T, and gauges at T. A figure the interval cannot tell (a
// percentile without commits) is null.
type Sample struct {
	T        int64   `json:"t"` // unix milliseconds
	Interval float64 `json:"interval_s"`
	// Per second: commit requests decided COMMIT (phase 2 done or not),
	// decided ABORT, refused or of unknown outcome, and the SDK's local
	// (one-phase or read-only) commits in this process.
	Commits      float64 `json:"commits"`
	Aborts       float64 `json:"aborts"`
	Refused      float64 `json:"refused"`
	Unknown      float64 `json:"unknown"`
	LocalCommits float64 `json:"local_commits"`
	// Commit latency as the coordinator handles it ("coordinator commit"
	// waits of the interval), seconds; interpolated within the histogram's
	// power-of-two buckets.
	CommitP50 *float64 `json:"commit_p50_s"`
	CommitP99 *float64 `json:"commit_p99_s"`
	// Decision log: bytes in use and the configured size (null on a standby),
	// fdatasyncs per second and records per fdatasync (null without one).
	LogUsed         *int64   `json:"log_used"`
	LogLimit        *int64   `json:"log_limit"`
	Fsyncs          float64  `json:"fsyncs"`
	RecordsPerFsync *float64 `json:"records_per_fsync"`
	Backlog         int      `json:"phase2_backlog"`
	// Standby (null without a standby role).
	LagBytes   *int64   `json:"lag_bytes"`
	LagSeconds *float64 `json:"lag_s"`
	Exposure   *int64   `json:"exposure_records"`
	// Waits: the events waited on in the interval, largest first, at most
	// MaxWaitsPerSample (then one "other").
	Waits []Wait `json:"waits"`
	// Commits decided at a commit point (read from the decision tables,
	// decision.ActivityLag late), per second: 'C' rows, and the 'A' rows
	// recoverers wrote; the commit point's transaction from begin to
	// decision, p50 and p99 (null without commits).
	CPCommits float64  `json:"cp_commits"`
	CPAborts  float64  `json:"cp_aborts"`
	CPP50     *float64 `json:"cp_p50_s"`
	CPP99     *float64 `json:"cp_p99_s"`
	// DecisionTables: each RM's table at T.
	DecisionTables []DecisionTable `json:"decision_tables"`
}

// Sampler keeps the last Capacity samples in a ring. Safe for concurrent use.
type Sampler struct {
	capacity int
	mu       sync.Mutex
	ring     []Sample // oldest first once full: ring[next:] then ring[:next]
	next     int
	full     bool
	prev     *Reading
}

// DefaultCapacity is five minutes of one-second samples.
const DefaultCapacity = 300

// NewSampler returns an empty sampler of capacity samples (at least 2).
func NewSampler(capacity int) *Sampler {
	capacity = max(capacity, 2)
	return &Sampler{capacity: capacity, ring: make([]Sample, 0, capacity)}
}

// Run takes a Reading every interval until ctx ends.
func (s *Sampler) Run(ctx context.Context, interval time.Duration, read func() Reading) {
	s.Add(read())
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.Add(read())
		}
	}
}

// Add records r: the first reading only sets the base, every later one
// adds the sample of the interval since the one before.
func (s *Sampler) Add(r Reading) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.prev != nil && r.At.After(s.prev.At) {
		smp := sampleOf(*s.prev, r)
		if len(s.ring) < s.capacity {
			s.ring = append(s.ring, smp)
		} else {
			s.ring[s.next] = smp
			s.next = (s.next + 1) % s.capacity
			s.full = true
		}
	}
	s.prev = &r
}

// Since returns the samples after unix millisecond t (0: all), oldest first.
func (s *Sampler) Since(t int64) []Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Sample, 0, len(s.ring))
	for i := range len(s.ring) {
		smp := s.ring[(s.next+i)%len(s.ring)]
		if smp.T > t {
			out = append(out, smp)
		}
	}
	return out
}

func sampleOf(a, b Reading) Sample {
	dt := b.At.Sub(a.At).Seconds()
	rate := func(x, y uint64) float64 {
		if y < x { // a counter reset (waits.Registry.Reset): no rate
			return 0
		}
		return float64(y-x) / dt
	}
	coord := b.Coordinator.Sub(a.Coordinator)
	client := b.Client.Sub(a.Client)
	s := Sample{
		T: b.At.UnixMilli(), Interval: dt,
		Commits: rate(a.Committed, b.Committed), Aborts: rate(a.Aborted, b.Aborted),
		Refused: rate(a.Refused, b.Refused), Unknown: rate(a.Unknown, b.Unknown),
		LocalCommits: rate(a.Client.Get(waits.RMCommit).Count, b.Client.Get(waits.RMCommit).Count),
		Backlog:      b.Backlog,
	}
	cc := coord.Get(waits.CoordinatorCommit)
	if cc.Count > 0 && cc.Count < 1<<62 {
		s.CommitP50, s.CommitP99 = ptr(Quantile(cc, 0.50)), ptr(Quantile(cc, 0.99))
	}
	fs := coord.Get(waits.LogFileFdatasync).Count
	if fs >= 1<<62 { // a reset between the readings
		fs = 0
	}
	s.Fsyncs = float64(fs) / dt
	if b.HasLog {
		s.LogUsed, s.LogLimit = ptr(b.LogUsed), ptr(b.LogLimit)
		if fs > 0 && b.LogAppends >= a.LogAppends && a.HasLog {
			s.RecordsPerFsync = ptr(float64(b.LogAppends-a.LogAppends) / float64(fs))
		}
	}
	if b.HasStandby {
		s.LagBytes, s.LagSeconds, s.Exposure = ptr(b.LagBytes), ptr(b.LagSeconds), ptr(b.LagRecords)
	}
	s.Waits = topWaits(coord, client)
	prev := map[string]CommitPoint{}
	for _, cp := range a.CommitPoints {
		prev[cp.RM] = cp
	}
	var began waits.EventStats
	s.DecisionTables = []DecisionTable{}
	for _, cp := range b.CommitPoints {
		p := prev[cp.RM]
		dt := DecisionTable{RM: cp.RM, CRows: cp.CRows, ARows: cp.ARows, CKept: cp.CKept, OldestCS: cp.OldestC.Seconds(),
			Commits: rate(p.Commits, cp.Commits), Aborts: rate(p.Aborts, cp.Aborts), Error: cp.Err}
		s.DecisionTables = append(s.DecisionTables, dt)
		s.CPCommits += dt.Commits
		s.CPAborts += dt.Aborts
		if cp.BeganToDecided.Count >= p.BeganToDecided.Count {
			began = began.Plus(subStats(cp.BeganToDecided, p.BeganToDecided))
		}
	}
	if began.Count > 0 {
		s.CPP50, s.CPP99 = ptr(Quantile(began, 0.50)), ptr(Quantile(began, 0.99))
	}
	return s
}

// subStats is the waits of b not in a (b a later total of the same
// counts); the maximum is b's (an upper bound).
func subStats(b, a waits.EventStats) waits.EventStats {
	out := waits.EventStats{Count: b.Count - a.Count, Total: b.Total - a.Total, Max: b.Max}
	for i := range out.Buckets {
		if b.Buckets[i] >= a.Buckets[i] {
			out.Buckets[i] = b.Buckets[i] - a.Buckets[i]
		}
	}
	return out
}

// topWaits lists the events of both sides waited on in the interval,
// largest total first, at most MaxWaitsPerSample and the rest as "other".
func topWaits(sides ...waits.Snapshot) []Wait {
	var all []Wait
	for _, snap := range sides {
		for _, e := range snap.Events {
			if e.Count == 0 || e.Count >= 1<<62 || e.Total <= 0 {
				continue
			}
			all = append(all, Wait{Side: snap.Side, Event: e.Event.String(), Seconds: e.Total.Seconds(), Count: e.Count})
		}
	}
	slices.SortStableFunc(all, func(x, y Wait) int {
		switch {
		case x.Seconds > y.Seconds:
			return -1
		case x.Seconds < y.Seconds:
			return 1
		}
		return 0
	})
	if len(all) <= MaxWaitsPerSample {
		return all
	}
	other := Wait{Side: "", Event: "other"}
	for _, w := range all[MaxWaitsPerSample:] {
		other.Seconds += w.Seconds
		other.Count += w.Count
	}
	return append(all[:MaxWaitsPerSample:MaxWaitsPerSample], other)
}

// Quantile estimates the q-quantile (0 < q ≤ 1) of e's waits, in seconds,
// from its histogram: the bucket that holds it is found exactly, and the
// value interpolated linearly within the bucket's bounds (the last bucket,
// unbounded, is capped by e.Max). 0 without waits.
func Quantile(e waits.EventStats, q float64) float64 {
	var n uint64
	for _, c := range e.Buckets {
		n += c
	}
	if n == 0 {
		return 0
	}
	rank := q * float64(n)
	var cum float64
	for i, c := range e.Buckets {
		if c == 0 {
			continue
		}
		if cum+float64(c) >= rank {
			lo := 0.0
			if i > 0 {
				lo = waits.BucketUpperBound(i - 1).Seconds()
			}
			hi := waits.BucketUpperBound(i).Seconds()
			if i == waits.NumBuckets-1 || (e.Max > 0 && e.Max.Seconds() < hi) {
				hi = math.Max(lo, e.Max.Seconds())
			}
			return lo + (hi-lo)*(rank-cum)/float64(c)
		}
		cum += float64(c)
	}
	return e.Max.Seconds()
}

func ptr[T any](v T) *T { return &v }
