package standby

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// TestFrameEndFillsUpToMaxSend: a RECORDS frame carries as many records as
// fit in MaxSend bytes, counted with the frame's own header when asked, and
// always at least one, however large.
func TestFrameEndFillsUpToMaxSend(t *testing.T) {
	recs := func(sizes ...int) []record {
		out := make([]record, len(sizes))
		for i, n := range sizes {
			out[i].payload = make([]byte, n)
		}
		return out
	}
	for _, tc := range []struct {
		recs      []record
		size, max int
		want      int
	}{
		{recs(10, 10, 10), 0, 3 * (10 + recordHeader), 3},
		{recs(10, 10, 10), 0, 3*(10+recordHeader) - 1, 2},
		{recs(10, 10, 10), 4, 3 * (10 + recordHeader), 2},
		{recs(10, 10, 10), 4, 4 + 3*(10+recordHeader), 3},
		{recs(1000, 1), 0, 100, 1}, // larger than max: sent alone
		{recs(1, 1000), 0, 100, 1},
		{nil, 0, 100, 0},
	} {
		t.Run(fmt.Sprint(len(tc.recs), tc.size, tc.max), func(t *testing.T) {
			if got := frameEnd(tc.recs, tc.size, tc.max); got != tc.want {
				t.Errorf("frameEnd = %d, want %d", got, tc.want)
			}
		})
	}
	// The records sent do fit: what frameEnd counts is what encodeRecords writes.
	rs := recs(10, 20, 30)
	if got, want := len(encodeRecords(nil, rs[:frameEnd(rs, 4, 1<<20)])), recordsSize(rs); got != want {
		t.Errorf("encoded %d bytes, counted %d", got, want)
	}
}

// TestRedialStopsWithItsContext: redial tries again after each failure,
// hands each error to failed, and stops once its context ends, without
// reporting the attempt the end interrupted.
func TestRedialStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	attempts := 0
	var failures []error
	redial(ctx, func(ctx context.Context) error {
		attempts++
		if attempts == 3 {
			cancel()
			return ctx.Err()
		}
		return fmt.Errorf("attempt %d: %w", attempts, errRejected)
	}, func(err error) { failures = append(failures, err) })
	if attempts != 3 {
		t.Errorf("%d attempts, want 3 (two failures, then the context ended)", attempts)
	}
	if len(failures) != 2 || !errors.Is(failures[0], errRejected) || !errors.Is(failures[1], errRejected) {
		t.Errorf("failures %v: want the two attempts' errors, not the context's", failures)
	}
}
