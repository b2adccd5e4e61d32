package wal

import (
	"sync"
	"testing"
)

// Switch closes the current segment once the records queued before it are
// written: the next record goes into the next segment, and replay finds
// them all in order. On a segment that holds no record it does nothing.
func TestSwitchClosesTheSegment(t *testing.T) {
	dir := t.TempDir()
	l, _ := openLog(t, Options{Dir: dir, SegmentSize: 64 << 10, NoSync: true})
	before, err := l.Append(1, []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 { // queued concurrently: they go before or after, never lost
		wg.Add(1)
		go func() { defer wg.Done(); _, _ = l.AppendAsync(1, []byte("q")) }()
	}
	next, err := l.Switch()
	if err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if next, err = l.Switch(); err != nil { // the late queued ones, if any, are behind a switch too
		t.Fatal(err)
	}
	if next.Segment <= before.Segment {
		t.Fatalf("after Switch the next record goes to %s, want a segment after %d", next, before.Segment)
	}
	again, err := l.Switch()
	if err != nil || again.Segment != next.Segment {
		t.Fatalf("Switch of an empty segment: %s, %v; want no rotation (segment %d)", again, err, next.Segment)
	}
	after, err := l.Append(1, []byte("b"))
	if err != nil {
		t.Fatal(err)
	}
	if after.Segment != next.Segment {
		t.Fatalf("the record after Switch is at %s, want segment %d", after, next.Segment)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2, recs := openLog(t, Options{Dir: dir, SegmentSize: 64 << 10, NoSync: true})
	defer l2.Close()
	if len(recs) != 10 || string(recs[0].payload) != "a" || string(recs[9].payload) != "b" {
		t.Fatalf("replayed %d records (first %q, last %q), want 10 from a to b", len(recs), recs[0].payload, recs[len(recs)-1].payload)
	}
}
