package waits

import (
	"fmt"
	"io"
	"slices"
	"sync"
	"time"
)

// Span is one wait of a traced transaction.
type Span struct {
	Side   string        // SideClient or SideCoordinator
	Event  Event         //
	Detail string        // the RM, when the wait concerns one
	Start  time.Time     // when the wait began
	Dur    time.Duration // how long it lasted
}

// End is when the wait ended.
func (s Span) End() time.Time { return s.Start.Add(s.Dur) }

// Trace is the sequence of waits of one global transaction. Its methods are
// safe for concurrent use (branches prepare in parallel) and do nothing on a
// nil *Trace, so that code paths without a trace cost one nil test.
type Trace struct {
	mu    sync.Mutex
	gtrid string
	begin time.Time
	end   time.Time
	spans []Span
}

// NewTrace starts an empty trace now.
func NewTrace(gtrid string) *Trace { return &Trace{gtrid: gtrid, begin: time.Now()} }

// Reset empties t for another transaction, keeping its memory.
func (t *Trace) Reset(gtrid string) {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.gtrid, t.begin, t.end, t.spans = gtrid, time.Now(), time.Time{}, t.spans[:0]
	t.mu.Unlock()
}

// SetGTRID names the traced transaction.
func (t *Trace) SetGTRID(g string) {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.gtrid = g
	t.mu.Unlock()
}

// GTRID is the traced transaction's gtrid.
func (t *Trace) GTRID() string {
	if t == nil {
		return ""
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.gtrid
}

// Begin is when the trace started.
func (t *Trace) Begin() time.Time {
	if t == nil {
		return time.Time{}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.begin
}

// Finish marks the end of the traced transaction.
func (t *Trace) Finish() {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.end = time.Now()
	t.mu.Unlock()
}

// Add appends one wait.
func (t *Trace) Add(side string, e Event, detail string, start time.Time, d time.Duration) {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.spans = append(t.spans, Span{Side: side, Event: e, Detail: detail, Start: start, Dur: d})
	t.mu.Unlock()
}

// Merge appends spans (from the coordinator's reply, say).
func (t *Trace) Merge(spans []Span) {
	if t == nil || len(spans) == 0 {
		return
	}
	t.mu.Lock()
	t.spans = append(t.spans, spans...)
	t.mu.Unlock()
}

// Spans returns a copy of the waits, ordered by start time (then by end).
func (t *Trace) Spans() []Span {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	out := slices.Clone(t.spans)
	t.mu.Unlock()
	slices.SortStableFunc(out, func(a, b Span) int {
		if c := a.Start.Compare(b.Start); c != 0 {
			return c
		}
		return a.End().Compare(b.End())
	})
	return out
}

// Covered is the time between from and to during which at least one of the
// side's waits was in progress: the union of their intervals, so that waits
// that ran in parallel (two prepares) count once. side "" takes every span.
func (t *Trace) Covered(side string, from, to time.Time) time.Duration {
	var covered time.Duration
	var curS, curE time.Time
	for _, s := range t.Spans() {
		if side != "" && s.Side != side {
			continue
		}
		st, en := s.Start, s.End()
		if st.Before(from) {
			st = from
		}
		if en.After(to) {
			en = to
		}
		if !en.After(st) {
			continue
		}
		if curE.IsZero() || st.After(curE) {
			if !curE.IsZero() {
				covered += curE.Sub(curS)
			}
			curS, curE = st, en
		} else if en.After(curE) {
			curE = en
		}
	}
	if !curE.IsZero() {
		covered += curE.Sub(curS)
	}
	return covered
}

// JSONSpan is a Span as traces are written: times in microseconds from the
// start of the trace.
type JSONSpan struct {
	Side       string  `json:"side"`
	Event      string  `json:"event"`
	Detail     string  `json:"rm,omitempty"`
	AtUs       float64 `json:"at_us"`
	DurationUs float64 `json:"duration_us"`
}

// JSONTrace is a Trace as written by `tandem bench --trace`.
type JSONTrace struct {
	GTRID     string     `json:"gtrid"`
	Begin     time.Time  `json:"begin"`
	ElapsedUs float64    `json:"elapsed_us,omitempty"`
	Waits     []JSONSpan `json:"waits"`
}

// JSON returns t for encoding.
func (t *Trace) JSON() JSONTrace {
	spans := t.Spans()
	t.mu.Lock()
	jt := JSONTrace{GTRID: t.gtrid, Begin: t.begin, Waits: make([]JSONSpan, len(spans))}
	if !t.end.IsZero() {
		jt.ElapsedUs = us(t.end.Sub(t.begin))
	}
	t.mu.Unlock()
	for i, s := range spans {
		jt.Waits[i] = JSONSpan{Side: s.Side, Event: s.Event.String(), Detail: s.Detail, AtUs: us(s.Start.Sub(jt.Begin)), DurationUs: us(s.Dur)}
	}
	return jt
}

// WriteText writes t as a session trace, one wait per line.
func (t *Trace) WriteText(w io.Writer) error {
	jt := t.JSON()
	if _, err := fmt.Fprintf(w, "trace %s  begin %s  elapsed %.3f ms\n", jt.GTRID, jt.Begin.UTC().Format(time.RFC3339Nano), jt.ElapsedUs/1000); err != nil {
		return err
	}
	for _, s := range jt.Waits {
		name := s.Event
		if s.Detail != "" {
			name += " (" + s.Detail + ")"
		}
		if _, err := fmt.Fprintf(w, "  +%9.3f ms  %-11s  %-34s %9.3f ms\n", s.AtUs/1000, s.Side, name, s.DurationUs/1000); err != nil {
			return err
		}
	}
	return nil
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
