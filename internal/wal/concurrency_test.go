package wal

import (
	"encoding/binary"
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestConcurrentAppends runs 64 committers of 200 records each with real
// fdatasync and segment rotations. Every Append must succeed, every record
// must be replayed exactly once, each committer's records in its order, at
// the positions Append returned; and group commit must have shared
// fdatasyncs between committers.
func TestConcurrentAppends(t *testing.T) {
	const workers, each = 64, 200
	opts := Options{Dir: t.TempDir(), SegmentSize: 128 << 10}
	l, _ := openLog(t, opts)

	positions := make([][]Position, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			p := make([]byte, 8+w%50) // worker, index, then filler
			for i := range each {
				binary.LittleEndian.PutUint32(p[0:4], uint32(w))
				binary.LittleEndian.PutUint32(p[4:8], uint32(i))
				pos, err := l.Append(Type(1+w), p)
				if err != nil {
					t.Errorf("worker %d append %d: %v", w, i, err)
					return
				}
				positions[w] = append(positions[w], pos)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		l.Close()
		return
	}
	st := l.Stats()
	t.Logf("%d appends, %d batches, %d fdatasyncs (%.1f records per fdatasync), %d rotations",
		st.Appends, st.Batches, st.Fsyncs, float64(st.Appends)/float64(st.Fsyncs), st.Rotations)
	if st.Appends != workers*each {
		t.Fatalf("Stats.Appends = %d, want %d", st.Appends, workers*each)
	}
	if st.Fsyncs >= st.Appends || st.Batches >= st.Appends {
		t.Fatalf("no group commit: %d fdatasyncs and %d batches for %d appends", st.Fsyncs, st.Batches, st.Appends)
	}
	if st.Rotations == 0 {
		t.Fatal("test meant to rotate segments")
	}

	l, got := reopen(t, l, opts)
	defer l.Close()
	if len(got) != workers*each {
		t.Fatalf("replayed %d records, want %d", len(got), workers*each)
	}
	next := make([]int, workers)
	for i, r := range got {
		if i > 0 && !got[i-1].pos.Less(r.pos) {
			t.Fatalf("replay out of order: %v then %v", got[i-1].pos, r.pos)
		}
		w := int(binary.LittleEndian.Uint32(r.payload[0:4]))
		n := int(binary.LittleEndian.Uint32(r.payload[4:8]))
		if w >= workers || r.typ != Type(1+w) || len(r.payload) != 8+w%50 {
			t.Fatalf("record %v is not one a worker wrote", r)
		}
		if n != next[w] {
			t.Fatalf("worker %d: record %d replayed where %d was expected", w, n, next[w])
		}
		if positions[w][n] != r.pos {
			t.Fatalf("worker %d record %d: Append returned %v, replayed at %v", w, n, positions[w][n], r.pos)
		}
		next[w]++
	}
}

// TestCloseWhileAppending closes the log under concurrent Appends: each
// Append either succeeds (and its record is replayed) or returns ErrClosed.
func TestCloseWhileAppending(t *testing.T) {
	opts := Options{Dir: t.TempDir(), SegmentSize: 4096, NoSync: true}
	l, _ := openLog(t, opts)
	var mu sync.Mutex
	acked := map[Position]bool{}
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := 0; ; i++ {
				pos, err := l.Append(1, payloadFor(w*1000+i, 30))
				if err != nil {
					if err != ErrClosed {
						t.Errorf("Append = %v, want ErrClosed", err)
					}
					return
				}
				mu.Lock()
				acked[pos] = true
				mu.Unlock()
			}
		})
	}
	for l.Stats().Appends < 500 {
		runtime.Gosched()
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	l, got := openLog(t, opts)
	defer l.Close()
	if len(got) != len(acked) {
		t.Fatalf("replayed %d records, %d were acknowledged", len(got), len(acked))
	}
	for _, r := range got {
		if !acked[r.pos] {
			t.Fatalf("replayed unacknowledged record at %v", r.pos)
		}
	}
}

// TestQueuedBeforeDirect mixes, in each of several goroutines, records
// nobody waits for with Appends (which write directly whenever the log is
// idle) and Syncs: every goroutine's records must be replayed in the order
// it issued them, so a direct write never passes a record queued before it.
func TestQueuedBeforeDirect(t *testing.T) {
	const workers, each = 3, 800
	opts := Options{Dir: t.TempDir(), SegmentSize: 16 << 10}
	l, _ := openLog(t, opts)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				p := make([]byte, 8) // queued payloads must not be reused
				binary.LittleEndian.PutUint32(p[0:4], uint32(w))
				binary.LittleEndian.PutUint32(p[4:8], uint32(i))
				var err error
				switch i % 8 {
				case 0:
					_, err = l.AppendNoWait(1, p)
				case 1:
					_, err = l.AppendAsync(1, p)
				case 2:
					if _, err = l.AppendNoWait(1, p); err == nil && i%16 == 2 {
						err = l.Sync()
					}
				default:
					_, err = l.Append(1, p)
				}
				if err != nil {
					t.Errorf("worker %d record %d: %v", w, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d of %d Appends written directly", l.Stats().Direct, workers*each*5/8)
	l, got := reopen(t, l, opts)
	defer l.Close()
	if len(got) != workers*each {
		t.Fatalf("replayed %d records, want %d", len(got), workers*each)
	}
	next := make([]uint32, workers)
	for _, r := range got {
		w, i := binary.LittleEndian.Uint32(r.payload[0:4]), binary.LittleEndian.Uint32(r.payload[4:8])
		if i != next[w] {
			t.Fatalf("worker %d: record %d replayed where %d was expected", w, i, next[w])
		}
		next[w]++
	}
}

// TestDirectWrite checks that Appends on an idle log in immediate mode are
// written by the caller (one write and one fdatasync each, no batch
// through the writer goroutine), that batch mode never does so, and that
// both are replayed.
func TestDirectWrite(t *testing.T) {
	for _, window := range []time.Duration{0, 50 * time.Microsecond} {
		opts := Options{Dir: t.TempDir(), SegmentSize: 4096, BatchWindow: window}
		l, _ := openLog(t, opts)
		var want []rec
		for i := range 100 {
			want = append(want, mustAppend(t, l, 1, payloadFor(i, 40)))
		}
		st := l.Stats()
		wantDirect := uint64(100)
		if window > 0 {
			wantDirect = 0
		}
		if st.Direct != wantDirect || st.Appends != 100 || st.Fsyncs < 100 {
			t.Fatalf("window %v: %d direct of %d records, %d fdatasyncs; want %d direct and 100 fdatasyncs",
				window, st.Direct, st.Appends, st.Fsyncs, wantDirect)
		}
		if st.Rotations == 0 {
			t.Fatal("test meant to rotate segments")
		}
		l, got := reopen(t, l, opts)
		sameRecords(t, got, want)
		l.Close()
	}
}
