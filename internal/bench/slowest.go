package bench

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/tandem-tx/tandem/waits"
)

// slowest keeps the client traces of the n slowest transactions offered to
// it (DBConfig.Slowest): where the tail's time went, wait by wait, without a
// profiler. Not safe for concurrent use: each worker keeps its own during a
// slice, merged into the workload's after it.
type slowest struct {
	n    int
	txns []slowTxn
	low  int // index of the fastest kept once n are kept: wants is one comparison
}

type slowTxn struct {
	d  time.Duration
	tr waits.JSONTrace
}

// wants says whether a transaction that took d would be kept: the check
// made before the trace is copied, so that the rest cost nothing.
func (s *slowest) wants(d time.Duration) bool {
	if s.n <= 0 {
		return false
	}
	return len(s.txns) < s.n || d > s.txns[s.low].d
}

// offer keeps tr, the trace of a transaction that took d, if it is among
// the n slowest so far.
func (s *slowest) offer(d time.Duration, tr *waits.Trace) {
	if !s.wants(d) {
		return
	}
	s.keep(slowTxn{d: d, tr: tr.JSON()})
}

// merge offers every transaction o kept.
func (s *slowest) merge(o *slowest) {
	for _, t := range o.txns {
		if s.wants(t.d) {
			s.keep(t)
		}
	}
}

// keep adds t (which wants accepted), in place of the fastest once n are
// kept, and finds the fastest again.
func (s *slowest) keep(t slowTxn) {
	if len(s.txns) < s.n {
		s.txns = append(s.txns, t)
	} else {
		s.txns[s.low] = t
	}
	s.low = 0
	for i, x := range s.txns {
		if x.d < s.txns[s.low].d {
			s.low = i
		}
	}
}

// traces returns the kept traces, slowest first, each with its latency.
func (s *slowest) traces() []waits.JSONTrace {
	txns := slices.Clone(s.txns)
	slices.SortFunc(txns, func(a, b slowTxn) int { return cmp.Compare(b.d, a.d) })
	out := make([]waits.JSONTrace, len(txns))
	for i, t := range txns {
		out[i] = t.tr
		out[i].ElapsedUs = float64(t.d.Nanoseconds()) / 1e3
	}
	return out
}

// writeSlowest prints x's slowest transactions, a line each: the latency,
// then each client wait in the order it began (the RM, the milliseconds),
// then the time in none of them ("other": the SDK's and the bench's own
// work, scheduling, the CPU).
func writeSlowest(w io.Writer, x DBResult) {
	if len(x.Slowest) == 0 {
		return
	}
	fmt.Fprintf(w, "\n== %s: the %d slowest transactions (client waits in order, ms)\n", x.Workload, len(x.Slowest))
	for _, t := range x.Slowest {
		var parts []string
		var spans []waits.Span
		for _, sp := range t.Waits {
			name := sp.Event
			if sp.Detail != "" {
				name += " " + sp.Detail
			}
			parts = append(parts, fmt.Sprintf("%s %.2f", name, sp.DurationUs/1e3))
			start := t.Begin.Add(time.Duration(sp.AtUs * 1e3))
			spans = append(spans, waits.Span{Start: start, Dur: time.Duration(sp.DurationUs * 1e3)})
		}
		total := time.Duration(t.ElapsedUs * 1e3)
		union := waits.NewTrace("")
		union.Merge(spans)
		other := total - union.Covered("", t.Begin, t.Begin.Add(total))
		parts = append(parts, fmt.Sprintf("other %.2f", float64(other.Microseconds())/1e3))
		fmt.Fprintf(w, "%8.2f  %s\n", t.ElapsedUs/1e3, strings.Join(parts, " | "))
	}
}
