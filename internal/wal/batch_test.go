package wal

import (
	"encoding/binary"
	"errors"
	"sync"
	"syscall"
	"testing"
	"time"
)

// appendConcurrently runs workers committers of each Appends on l and
// returns what they appended. Payloads are worker and index, so that
// replay can be checked.
func appendConcurrently(t *testing.T, l *Log, workers, each int) map[Position]uint64 {
	t.Helper()
	var mu sync.Mutex
	acked := make(map[Position]uint64, workers*each)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			var p [16]byte
			for i := range each {
				id := uint64(w)<<32 | uint64(i)
				binary.LittleEndian.PutUint64(p[:8], id)
				pos, err := l.Append(1, p[:])
				if err != nil {
					t.Errorf("worker %d append %d: %v", w, i, err)
					return
				}
				mu.Lock()
				acked[pos] = id
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return acked
}

// TestBatchMode runs 64 committers on a log in batch mode with a 2 ms
// window: every Append must be acknowledged and replayed after Close, and
// the window must have shared fdatasyncs far more than one per two
// records. The same load in immediate mode is logged for comparison.
// Counts are asserted, never timings.
func TestBatchMode(t *testing.T) {
	const workers, each = 64, 50
	var immediate Stats
	for _, window := range []time.Duration{0, 2 * time.Millisecond} {
		opts := Options{Dir: t.TempDir(), SegmentSize: 64 << 10, BatchWindow: window}
		l, _ := openLog(t, opts)
		acked := appendConcurrently(t, l, workers, each)
		st := l.Stats()
		l, got := reopen(t, l, opts)
		l.Close()
		if t.Failed() {
			return
		}
		if window == 0 {
			immediate = st
			continue
		}
		t.Logf("%d appends: batch mode (2ms) %d fdatasyncs (%.1f records each), immediate mode %d (%.1f records each); %d rotations",
			st.Appends, st.Fsyncs, float64(st.Appends)/float64(st.Fsyncs),
			immediate.Fsyncs, float64(immediate.Appends)/float64(immediate.Fsyncs), st.Rotations)
		if st.Appends != workers*each || len(acked) != workers*each {
			t.Fatalf("Stats.Appends = %d, %d positions acknowledged; want %d", st.Appends, len(acked), workers*each)
		}
		if st.Fsyncs > st.Appends/2 {
			t.Fatalf("batch mode: %d fdatasyncs for %d appends, want at most %d", st.Fsyncs, st.Appends, st.Appends/2)
		}
		if st.Rotations == 0 {
			t.Fatal("test meant to rotate segments")
		}
		if len(got) != len(acked) {
			t.Fatalf("replayed %d records, %d were acknowledged", len(got), len(acked))
		}
		for _, r := range got {
			id, ok := acked[r.pos]
			if !ok || binary.LittleEndian.Uint64(r.payload[:8]) != id {
				t.Fatalf("replayed %v, not the record acknowledged there", r)
			}
		}
	}
}

// waitOrFail fails t if done is not closed within a minute: a guard against
// a hang, not a timing assertion.
func waitOrFail(t *testing.T, done <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("%s: still blocked after a minute", what)
	}
}

// TestBatchMaxBytesEndsBatch sets a window of an hour and a cap of four
// records: eight concurrent Appends complete as two full batches, without
// waiting for the window.
func TestBatchMaxBytesEndsBatch(t *testing.T) {
	payload := make([]byte, 24) // 32 bytes on disk
	opts := Options{Dir: t.TempDir(), BatchWindow: time.Hour, BatchMaxBytes: 4 * int(recordSize(len(payload)))}
	l, _ := openLog(t, opts)
	defer l.Close()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if _, err := l.Append(1, payload); err != nil {
				t.Error(err)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	waitOrFail(t, done, "8 Appends with a 4-record cap")
	if st := l.Stats(); st.Batches != 2 || st.Fsyncs != 2 {
		t.Fatalf("%d batches, %d fdatasyncs for 8 records in batches of 4; want 2 and 2", st.Batches, st.Fsyncs)
	}
}

// TestBatchCloseSkipsWindow queues records in batch mode with a window of
// an hour: Close writes and syncs them at once, and they are replayed.
func TestBatchCloseSkipsWindow(t *testing.T) {
	opts := Options{Dir: t.TempDir(), BatchWindow: time.Hour}
	l, _ := openLog(t, opts)
	want := []rec{{typ: 1, payload: []byte("async")}, {typ: 2, payload: []byte("nowait")}}
	if _, err := l.AppendAsync(want[0].typ, want[0].payload); err != nil {
		t.Fatal(err)
	}
	if _, err := l.AppendNoWait(want[1].typ, want[1].payload); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := l.Close(); err != nil {
			t.Error(err)
		}
	}()
	waitOrFail(t, done, "Close in batch mode")
	l, got := openLog(t, opts)
	defer l.Close()
	if len(got) != 2 {
		t.Fatalf("replayed %d records, want 2", len(got))
	}
	for i := range want {
		if got[i].typ != want[i].typ || string(got[i].payload) != string(want[i].payload) {
			t.Fatalf("record %d: %v, want %q", i, got[i], want[i].payload)
		}
	}
}

// TestAppendAsync checks that records nobody waits for but AppendAsync
// asked to be durable are fdatasynced by the writer even when nothing else
// comes (unlike AppendNoWait's), that Sync makes AppendNoWait records
// durable and costs nothing when all is synced, and that every record
// survives Close and reopen. A crash before the fdatasync may lose an
// AppendAsync record: that is documented, not tested.
func TestAppendAsync(t *testing.T) {
	opts := Options{Dir: t.TempDir(), SegmentSize: 4096}
	l, _ := openLog(t, opts)
	var want []rec
	for i := range 5 {
		p := payloadFor(i, 40)
		if pos, err := l.AppendAsync(1, p); err != nil || pos.Offset != 0 || pos.Segment == 0 || pos.Segment > l.Segment() {
			t.Fatalf("AppendAsync = %v, %v", pos, err)
		}
		want = append(want, rec{typ: 1, payload: p})
	}
	waitAppends(l, 5) // the writer counts records after their fdatasync
	st := l.Stats()
	if st.Fsyncs == 0 || st.Fsyncs > st.Batches {
		t.Fatalf("%d fdatasyncs for %d batches of AppendAsync records, want one per batch", st.Fsyncs, st.Batches)
	}

	p := []byte("end")
	if _, err := l.AppendNoWait(3, p); err != nil {
		t.Fatal(err)
	}
	want = append(want, rec{typ: 3, payload: p})
	if err := l.Sync(); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	if got := l.Stats(); got.Fsyncs != st.Fsyncs+1 || got.Appends != 6 {
		t.Fatalf("after AppendNoWait and Sync: %d fdatasyncs, %d records; want %d and 6", got.Fsyncs, got.Appends, st.Fsyncs+1)
	}
	if err := l.Sync(); err != nil {
		t.Fatalf("second Sync: %v", err)
	}
	if got := l.Stats(); got.Fsyncs != st.Fsyncs+1 || got.Appends != 6 {
		t.Fatalf("Sync with nothing to sync: %d fdatasyncs, %d records; want %d and 6", got.Fsyncs, got.Appends, st.Fsyncs+1)
	}

	// Across rotations: a 4096-byte segment takes about 70 of them.
	for i := range 200 {
		p := payloadFor(100+i, 40)
		if _, err := l.AppendAsync(2, p); err != nil {
			t.Fatal(err)
		}
		want = append(want, rec{typ: 2, payload: p})
	}
	l, got := reopen(t, l, opts)
	if len(got) != len(want) {
		t.Fatalf("replayed %d records, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].typ != want[i].typ || string(got[i].payload) != string(want[i].payload) {
			t.Fatalf("record %d: got %v, want type %d", i, got[i], want[i].typ)
		}
	}
	if _, err := l.AppendAsync(255, nil); !errors.Is(err, ErrInvalidType) {
		t.Fatalf("AppendAsync(type 255) = %v", err)
	}
	l.Close()
	if _, err := l.AppendAsync(1, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("AppendAsync after Close = %v, want ErrClosed", err)
	}
	if err := l.Sync(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Sync after Close = %v, want ErrClosed", err)
	}
}

// TestSyncFailure fails the fdatasync that Sync asks for: Sync reports the
// outcome as unknown, and later Syncs and appends are refused.
func TestSyncFailure(t *testing.T) {
	fs := &faults{}
	opts := Options{Dir: t.TempDir(), SegmentSize: 4096, OpenFile: fs.open}
	l, _ := openLog(t, opts)
	acked := []rec{mustAppend(t, l, 1, []byte("decided"))}
	if _, err := l.AppendNoWait(3, []byte("end")); err != nil {
		t.Fatal(err)
	}
	fs.syncFails.Store(true)
	err := l.Sync()
	var we *WriteError
	if !errors.Is(err, ErrOutcomeUnknown) || !errors.As(err, &we) || we.Op != "fdatasync" || !errors.Is(err, syscall.EIO) {
		t.Fatalf("Sync with a failing fdatasync = %v, want ErrOutcomeUnknown caused by EIO", err)
	}
	if err := l.Sync(); !errors.Is(err, ErrLogFailed) {
		t.Fatalf("Sync after failure = %v, want ErrLogFailed", err)
	}
	checkFailedLog(t, l, "fdatasync", syscall.EIO)
	checkReplay(t, opts, acked, map[string]bool{"end": true})
}

// TestBatchOptions checks that bad batch options are refused by Open.
func TestBatchOptions(t *testing.T) {
	for _, opts := range []Options{
		{BatchWindow: -time.Millisecond},
		{BatchWindow: time.Millisecond, BatchMaxBytes: -1},
		{BatchWindow: time.Millisecond, BatchMaxBytes: maxBatchBytes + 1},
	} {
		opts.Dir = t.TempDir()
		if l, err := Open(opts, nil); err == nil {
			l.Close()
			t.Fatalf("Open(%+v) succeeded", opts)
		}
	}
}

// TestAppendDoesNotAllocate checks that a steady-state decision costs no
// allocation in either write mode, whichever way it comes in: requests
// are pooled, the encoding buffer and the batch slice are reused. For the
// calls nobody waits for, steady state means the writer keeps up: each is
// followed by Sync here (a burst faster than the writer allocates a
// request per record queued, up to the queue's 4096, all pooled again
// once written).
func TestAppendDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items at random")
	}
	p := payloadFor(1, 64)
	for _, window := range []time.Duration{0, 20 * time.Microsecond} {
		l, _ := openLog(t, Options{Dir: t.TempDir(), NoSync: true, BatchWindow: window})
		for _, c := range []struct {
			name string
			f    func()
		}{
			{"Append", func() { l.Append(1, p) }},
			{"AppendAsync+Sync", func() { l.AppendAsync(1, p); l.Sync() }},
			{"AppendNoWait+Sync", func() { l.AppendNoWait(1, p); l.Sync() }},
		} {
			c.f() // warm the pool and the writer's buffers
			if n := testing.AllocsPerRun(500, c.f); n > 0 {
				t.Errorf("window %v: %s allocates %v times per call, want 0", window, c.name, n)
			}
		}
		l.Close()
	}
}
