package waits

import (
	"fmt"
	"io"
	"math"
	"slices"
	"text/tabwriter"
	"time"
)

// JSONEvent is one event's totals as the admin endpoint (/waits), `tandem
// waits --json` and `tandem bench --json` write them: times in seconds.
type JSONEvent struct {
	Event  string  `json:"event"`
	Count  uint64  `json:"count"`
	TotalS float64 `json:"total_s"`
	MaxS   float64 `json:"max_s"`
	AvgS   float64 `json:"avg_s"`
	// Buckets[i] counts waits of at most BucketsLeS[i] seconds and more than
	// the one before (not cumulative); the last bound is +Inf, written as 0.
	Buckets []uint64 `json:"buckets,omitempty"`
}

// JSONSnapshot is a Snapshot as JSON.
type JSONSnapshot struct {
	Side       string      `json:"side"`
	At         time.Time   `json:"at"`
	BucketsLeS []float64   `json:"buckets_le_s,omitempty"`
	Events     []JSONEvent `json:"events"`
}

// BucketBoundsSeconds lists the inclusive upper bounds of the buckets in
// seconds; the last (+Inf) is written as 0 since JSON has no infinity.
func BucketBoundsSeconds() []float64 {
	out := make([]float64, NumBuckets)
	for i := range NumBuckets - 1 {
		out[i] = BucketUpperBound(i).Seconds()
	}
	return out
}

// JSON converts s, sorted by total time, largest first. withBuckets adds
// the histograms; withZero keeps events that were never waited on.
func (s Snapshot) JSON(withBuckets, withZero bool) JSONSnapshot {
	out := JSONSnapshot{Side: s.Side, At: s.At, Events: []JSONEvent{}}
	if withBuckets {
		out.BucketsLeS = BucketBoundsSeconds()
	}
	for _, e := range s.Sorted() {
		if e.Count == 0 && !withZero {
			continue
		}
		je := JSONEvent{Event: e.Event.String(), Count: e.Count, TotalS: e.Total.Seconds(), MaxS: e.Max.Seconds(), AvgS: e.Avg().Seconds()}
		if withBuckets {
			je.Buckets = slices.Clone(e.Buckets[:])
		}
		out.Events = append(out.Events, je)
	}
	return out
}

// FromJSON rebuilds a Snapshot from its JSON form (events this process does
// not know are defined).
func FromJSON(j JSONSnapshot) Snapshot {
	s := Snapshot{Side: j.Side, At: j.At}
	for _, je := range j.Events {
		e, ok := Lookup(je.Event)
		if !ok {
			e = Define(je.Event)
		}
		es := EventStats{Event: e, Count: je.Count, Total: seconds(je.TotalS), Max: seconds(je.MaxS)}
		copy(es.Buckets[:], je.Buckets)
		s.Events = append(s.Events, es)
	}
	return s
}

// seconds converts a JSON time in seconds back to a Duration, rounded to
// the nanosecond (truncating would turn 0.00103003 into 1.030029ms).
func seconds(f float64) time.Duration { return time.Duration(math.Round(f * float64(time.Second))) }

// Sorted returns the events by total time waited, largest first (ties by name).
func (s Snapshot) Sorted() []EventStats {
	out := slices.Clone(s.Events)
	slices.SortStableFunc(out, func(a, b EventStats) int {
		switch {
		case a.Total != b.Total:
			if a.Total > b.Total {
				return -1
			}
			return 1
		case a.Count != b.Count:
			if a.Count > b.Count {
				return -1
			}
			return 1
		}
		return 0
	})
	return out
}

// WriteTable prints the events that were waited on, sorted by total time,
// in the form of a database's wait-event report (seconds; Avg in milliseconds):
//
//	Event waited on            Times Waited  Max. Wait  Total Waited  Avg (ms)
//	log file sync                      1001     0.0081        0.6120     0.611
func (s Snapshot) WriteTable(w io.Writer) error {
	// Right-aligned numbers; the names are padded by hand to stay left-aligned.
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	width := len("Event waited on")
	for _, e := range s.Events {
		width = max(width, len(e.Event.String()))
	}
	fmt.Fprintf(tw, "%-*s\t  Times Waited\t  Max. Wait (s)\t  Total Waited (s)\t  Avg (ms)\t\n", width, "Event waited on")
	n := 0
	for _, e := range s.Sorted() {
		if e.Count == 0 {
			continue
		}
		n++
		fmt.Fprintf(tw, "%-*s\t%d\t%.4f\t%.4f\t%.3f\t\n", width, e.Event, e.Count, e.Max.Seconds(), e.Total.Seconds(), float64(e.Avg())/1e6)
	}
	if n == 0 {
		fmt.Fprintf(tw, "%-*s\t\t\t\t\t\n", width, "(no waits recorded)")
	}
	return tw.Flush()
}
