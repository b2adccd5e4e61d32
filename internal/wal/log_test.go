package wal

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRoundTrip appends records of many sizes and types across many segment
// rotations, reopens, and checks that replay returns exactly what was
// appended, at the positions Append returned, and that appends continue
// after the reopen.
func TestRoundTrip(t *testing.T) {
	for _, noSync := range []bool{true, false} {
		t.Run(map[bool]string{true: "nosync", false: "sync"}[noSync], func(t *testing.T) {
			opts := Options{Dir: t.TempDir(), SegmentSize: 4096, NoSync: noSync}
			l, got := openLog(t, opts)
			if len(got) != 0 {
				t.Fatalf("new log replayed %d records", len(got))
			}
			maxPayload := int(opts.SegmentSize - segmentHeaderSize - headerSize)
			sizes := []int{0, 1, 7, 8, 9, 100, 1000, 3000, maxPayload, 15, 16, 17}
			var want []rec
			for i := range 300 {
				want = append(want, mustAppend(t, l, Type(1+i%254), payloadFor(i, sizes[i%len(sizes)])))
				if i > 0 && !want[i-1].pos.Less(want[i].pos) {
					t.Fatalf("position %v after %v", want[i].pos, want[i-1].pos)
				}
			}
			st := l.Stats()
			if st.Appends != 300 || st.Rotations < 20 || st.Segment != st.Rotations+1 {
				t.Fatalf("stats after 300 appends: %+v", st)
			}
			if !noSync && st.Fsyncs < st.Batches {
				t.Fatalf("%d fsyncs for %d batches", st.Fsyncs, st.Batches)
			}

			l, got = reopen(t, l, opts)
			sameRecords(t, got, want)
			if st := l.Stats(); st.Replayed != 300 || st.TornTailSize != 0 {
				t.Fatalf("stats after reopen: %+v", st)
			}
			for i := 300; i < 350; i++ {
				want = append(want, mustAppend(t, l, Type(1+i%254), payloadFor(i, sizes[i%len(sizes)])))
			}
			l, got = reopen(t, l, opts)
			sameRecords(t, got, want)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestSegmentFiles checks the directory layout: contiguous names, full
// preallocated size, no temporary file left after Close.
func TestSegmentFiles(t *testing.T) {
	opts := Options{Dir: t.TempDir(), SegmentSize: 1024, NoSync: true}
	l, _ := openLog(t, opts)
	for i := range 40 {
		mustAppend(t, l, 1, payloadFor(i, 100))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(opts.Dir)
	if err != nil {
		t.Fatal(err)
	}
	var segs int
	for _, e := range entries {
		switch {
		case e.Name() == lockName:
		case strings.HasSuffix(e.Name(), tmpExt):
			t.Errorf("temporary segment %s left after Close", e.Name())
		default:
			seq, ok := parseSegmentName(e.Name())
			if !ok || seq != uint64(segs+1) {
				t.Errorf("unexpected file %s", e.Name())
			}
			segs++
			if fi, _ := e.Info(); fi.Size() != opts.SegmentSize {
				t.Errorf("%s is %d bytes, want %d", e.Name(), fi.Size(), opts.SegmentSize)
			}
		}
	}
	// 40 records of 112 bytes, 8 per 1024-byte segment after its header.
	if segs != 5 {
		t.Fatalf("%d segments, want 5", segs)
	}
}

func TestAppendErrors(t *testing.T) {
	opts := Options{Dir: t.TempDir(), SegmentSize: 1024, NoSync: true}
	l, _ := openLog(t, opts)
	for _, typ := range []Type{0, 255} {
		if _, err := l.Append(typ, nil); !errors.Is(err, ErrInvalidType) {
			t.Errorf("Append(type %d) = %v, want ErrInvalidType", typ, err)
		}
	}
	max := 1024 - segmentHeaderSize - headerSize
	if _, err := l.Append(1, make([]byte, max+1)); !errors.Is(err, ErrRecordTooLarge) {
		t.Errorf("Append(%d bytes) = %v, want ErrRecordTooLarge", max+1, err)
	}
	mustAppend(t, l, 1, make([]byte, max))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close = %v, want nil", err)
	}
	if _, err := l.Append(1, nil); !errors.Is(err, ErrClosed) || err.Error() != "wal: log is closed" {
		t.Fatalf("Append after Close = %v, want ErrClosed", err)
	}
}

func TestOptions(t *testing.T) {
	for _, size := range []int64{-8, 8, 63, 1001} {
		if _, err := Open(Options{Dir: t.TempDir(), SegmentSize: size}, nil); err == nil {
			t.Errorf("Open with SegmentSize %d succeeded", size)
		}
	}
	if _, err := Open(Options{}, nil); err == nil {
		t.Error("Open without Dir succeeded")
	}
	// Dir is created, nested.
	dir := filepath.Join(t.TempDir(), "a", "b")
	l, err := Open(Options{Dir: dir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if l.Stats().Segment != 1 {
		t.Fatalf("new log starts at segment %d", l.Stats().Segment)
	}
	if fi, err := os.Stat(segPath(dir, 1)); err != nil || fi.Size() != DefaultSegmentSize {
		t.Fatalf("first segment: %v, %v", fi, err)
	}
	l.Close()
}

// TestLock checks that a second Open of an open log fails instead of
// writing into it.
func TestLock(t *testing.T) {
	opts := Options{Dir: t.TempDir(), SegmentSize: 1024, NoSync: true}
	l, _ := openLog(t, opts)
	if l2, err := Open(opts, nil); !errors.Is(err, ErrLocked) {
		if l2 != nil {
			l2.Close()
		}
		t.Fatalf("second Open = %v, want ErrLocked", err)
	}
	l, _ = reopen(t, l, opts)
	l.Close()
}

// TestReplayError checks that an error from the replay callback stops Open
// and is wrapped with the record's location.
func TestReplayError(t *testing.T) {
	opts := Options{Dir: t.TempDir(), SegmentSize: 1024, NoSync: true}
	l, _ := openLog(t, opts)
	for i := range 20 {
		mustAppend(t, l, 1, payloadFor(i, 50))
	}
	l.Close()
	boom := errors.New("boom")
	n := 0
	_, err := Open(opts, func(Position, Type, []byte) error {
		if n++; n == 17 { // 15 records fit in segment 1
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), segmentName(2)) {
		t.Fatalf("Open = %v, want boom at a record of segment 2", err)
	}
	l, got := openLog(t, opts) // the failed Open released the lock, changed nothing
	if len(got) != 20 {
		t.Fatalf("replayed %d records, want 20", len(got))
	}
	l.Close()
}

// TestStaleTemp checks that a segment left half-prepared by a crash is
// removed and does not stop Open.
func TestStaleTemp(t *testing.T) {
	opts := Options{Dir: t.TempDir(), SegmentSize: 1024, NoSync: true}
	l, _ := openLog(t, opts)
	want := []rec{mustAppend(t, l, 1, []byte("x"))}
	l.Close()
	writeFile(t, filepath.Join(opts.Dir, tmpName(2)), []byte("half made"))
	l, got := openLog(t, opts)
	sameRecords(t, got, want)
	want = append(want, mustAppend(t, l, 2, []byte("y")))
	l, got = reopen(t, l, opts)
	sameRecords(t, got, want)
	l.Close()
}
