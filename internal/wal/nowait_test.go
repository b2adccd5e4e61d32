package wal

import (
	"errors"
	"runtime"
	"syscall"
	"testing"
)

// waitAppends waits until the writer has written n records in all.
func waitAppends(l *Log, n uint64) {
	for l.Stats().Appends < n {
		runtime.Gosched()
	}
}

// TestAppendNoWait checks that records nobody waits for are written in
// order without an fdatasync of their own, made durable by the next
// Append, by rotation and by Close, and replayed.
func TestAppendNoWait(t *testing.T) {
	opts := Options{Dir: t.TempDir(), SegmentSize: 1024}
	l, _ := openLog(t, opts)
	var want []rec
	for i := range 5 {
		p := payloadFor(i, 30)
		if pos, err := l.AppendNoWait(3, p); err != nil || pos.Offset != 0 || pos.Segment == 0 || pos.Segment > l.Segment() {
			t.Fatalf("AppendNoWait = %v, %v", pos, err)
		}
		want = append(want, rec{typ: 3, payload: p})
	}
	waitAppends(l, 5)
	if st := l.Stats(); st.Fsyncs != 0 {
		t.Fatalf("%d fdatasyncs for records nobody waits for", st.Fsyncs)
	}
	want = append(want, mustAppend(t, l, 4, []byte("commit")))
	if st := l.Stats(); st.Fsyncs != 1 {
		t.Fatalf("%d fdatasyncs after one Append, want 1", st.Fsyncs)
	}

	// Across rotations: each segment is synced before the next is used.
	for i := range 60 {
		p := payloadFor(100+i, 30)
		if _, err := l.AppendNoWait(5, p); err != nil {
			t.Fatal(err)
		}
		want = append(want, rec{typ: 5, payload: p})
	}
	waitAppends(l, 66)
	st := l.Stats()
	if st.Rotations == 0 || st.Fsyncs != 1+st.Rotations {
		t.Fatalf("%d fdatasyncs for %d rotations of no-wait records, want 1+%d", st.Fsyncs, st.Rotations, st.Rotations)
	}
	l, got := reopen(t, l, opts) // Close syncs the last ones
	if len(got) != len(want) {
		t.Fatalf("replayed %d records, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].typ != want[i].typ || string(got[i].payload) != string(want[i].payload) {
			t.Fatalf("record %d: got %v, want type %d", i, got[i], want[i].typ)
		}
	}
	if _, err := l.AppendNoWait(0, nil); !errors.Is(err, ErrInvalidType) {
		t.Fatalf("AppendNoWait(type 0) = %v", err)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("Err on a healthy log = %v", err)
	}
	l.Close()
	if _, err := l.AppendNoWait(1, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("AppendNoWait after Close = %v, want ErrClosed", err)
	}
}

// TestAppendNoWaitFailure checks that a failed write of records nobody
// waits for still fails the log, visibly through Err and later appends.
func TestAppendNoWaitFailure(t *testing.T) {
	fs := &faults{}
	opts := Options{Dir: t.TempDir(), SegmentSize: 4096, OpenFile: fs.open}
	l, _ := openLog(t, opts)
	acked := []rec{mustAppend(t, l, 1, []byte("decided"))}
	fs.writeFails.Store(true)
	if _, err := l.AppendNoWait(2, []byte("end")); err != nil {
		t.Fatal(err)
	}
	for l.Err() == nil {
		runtime.Gosched()
	}
	var we *WriteError
	if !errors.As(l.Err(), &we) || !errors.Is(l.Err(), syscall.ENOSPC) {
		t.Fatalf("Err = %v, want the write failure", l.Err())
	}
	if _, err := l.AppendNoWait(2, nil); !errors.Is(err, ErrLogFailed) {
		t.Fatalf("AppendNoWait after failure = %v, want ErrLogFailed", err)
	}
	checkFailedLog(t, l, "write", syscall.ENOSPC)
	checkReplay(t, opts, acked, map[string]bool{"end": true})
}
