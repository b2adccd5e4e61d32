package wal

import (
	"errors"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// faults arms failures of the files a faultyOpen opens. Record writes are
// told from the pipeline's segment preparation by offset: records are
// written past the segment header; the header, and the zeros that fill a
// segment of at most 1 MiB (zeroChunk), are written at offset 0. Tests
// that arm write faults therefore use segments of at most 1 MiB.
type faults struct {
	writeFails  atomic.Bool // next record write writes half its bytes, then fails with ENOSPC
	syncFails   atomic.Bool // next Sync after a record write fails with EIO
	createFails atomic.Bool // creating a segment fails with ENOSPC
}

type faultyFile struct {
	File
	fs      *faults
	written atomic.Bool // a record was written to this file
}

func (f *faultyFile) WriteAt(p []byte, off int64) (int, error) {
	if off >= segmentHeaderSize {
		f.written.Store(true)
		if f.fs.writeFails.CompareAndSwap(true, false) {
			n, _ := f.File.WriteAt(p[:len(p)/2], off)
			return n, &os.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
		}
	}
	return f.File.WriteAt(p, off)
}

func (f *faultyFile) Sync() error {
	if f.written.Load() && f.fs.syncFails.CompareAndSwap(true, false) {
		return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: syscall.EIO}
	}
	return f.File.Sync()
}

func (fs *faults) open(name string, flag int, perm os.FileMode) (File, error) {
	if flag&os.O_CREATE != 0 && fs.createFails.Load() {
		return nil, &os.PathError{Op: "open", Path: name, Err: syscall.ENOSPC}
	}
	f, err := openOSFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &faultyFile{File: f, fs: fs}, nil
}

// checkFailedLog checks that l refuses appends with an error that names
// the failure and says to restart, then closes it.
func checkFailedLog(t *testing.T, l *Log, op string, cause error) {
	t.Helper()
	for range 3 {
		_, err := l.Append(1, []byte("later"))
		var we *WriteError
		if !errors.Is(err, ErrLogFailed) || errors.Is(err, ErrOutcomeUnknown) || !errors.As(err, &we) {
			t.Fatalf("Append after failure = %v, want ErrLogFailed", err)
		}
		if we.Op != op || !errors.Is(err, cause) {
			t.Fatalf("failure = %+v, want op %q caused by %v", we, op, cause)
		}
		for _, s := range []string{"unusable", we.File, "restart"} {
			if !strings.Contains(err.Error(), s) {
				t.Fatalf("error %q does not say %q", err, s)
			}
		}
	}
	if err := l.Close(); err != nil {
		t.Fatalf("Close after failure: %v", err)
	}
}

// checkReplay reopens the log without faults and checks that every
// acknowledged record is there, in order, that anything else replayed is a
// record whose Append failed with ErrOutcomeUnknown, and that the log
// works again.
func checkReplay(t *testing.T, opts Options, acked []rec, unknown map[string]bool) {
	t.Helper()
	opts.OpenFile = nil
	l, got := openLog(t, opts)
	if len(got) < len(acked) {
		t.Fatalf("replayed %d records, %d were acknowledged", len(got), len(acked))
	}
	sameRecords(t, got[:len(acked)], acked)
	for _, r := range got[len(acked):] {
		if !unknown[string(r.payload)] {
			t.Fatalf("replayed %v (%q), which was never appended or was refused", r, r.payload)
		}
	}
	checkWorks(t, l, opts, got)
}

// TestWriteFailure fails a write partway (like ENOSPC) and an fdatasync
// (like EIO) under a batch of concurrent committers, in both write modes.
func TestWriteFailure(t *testing.T) {
	for _, tc := range []struct {
		name   string
		arm    func(*faults)
		op     string
		cause  error
		window time.Duration
	}{
		{"write", func(fs *faults) { fs.writeFails.Store(true) }, "write", syscall.ENOSPC, 0},
		{"fdatasync", func(fs *faults) { fs.syncFails.Store(true) }, "fdatasync", syscall.EIO, 0},
		{"batch/write", func(fs *faults) { fs.writeFails.Store(true) }, "write", syscall.ENOSPC, time.Millisecond},
		{"batch/fdatasync", func(fs *faults) { fs.syncFails.Store(true) }, "fdatasync", syscall.EIO, time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := &faults{}
			opts := Options{Dir: t.TempDir(), SegmentSize: 1 << 16, OpenFile: fs.open, BatchWindow: tc.window}
			l, _ := openLog(t, opts)
			var acked []rec
			for i := range 20 {
				acked = append(acked, mustAppend(t, l, 1, payloadFor(i, 40)))
			}
			tc.arm(fs)

			const n = 16
			errs := make([]error, n)
			payloads := make([][]byte, n)
			var wg sync.WaitGroup
			for i := range n {
				payloads[i] = []byte("in flight " + string(rune('a'+i)))
				wg.Go(func() { _, errs[i] = l.Append(2, payloads[i]) })
			}
			wg.Wait()
			unknown := map[string]bool{}
			for i, err := range errs {
				var we *WriteError
				switch {
				case err == nil:
					// Committed before the fault took effect? Impossible: the
					// first write after arming fails.
					t.Fatalf("Append %d succeeded after the fault", i)
				case errors.Is(err, ErrOutcomeUnknown):
					if !errors.As(err, &we) || we.Op != tc.op || !errors.Is(err, tc.cause) {
						t.Fatalf("in-batch error %v does not carry the %s failure", err, tc.op)
					}
					unknown[string(payloads[i])] = true
				case errors.Is(err, ErrLogFailed):
				default:
					t.Fatalf("Append %d = %v", i, err)
				}
			}
			if len(unknown) == 0 {
				t.Fatal("no committer was told its outcome is unknown")
			}
			checkFailedLog(t, l, tc.op, tc.cause)
			checkReplay(t, opts, acked, unknown)
		})
	}
}

// TestRotationFailure fails the preparation of the next segment. The
// records that needed it are refused; the log fails; nothing acknowledged
// is lost.
func TestRotationFailure(t *testing.T) {
	fs := &faults{}
	opts := Options{Dir: t.TempDir(), SegmentSize: 512, OpenFile: fs.open, NoSync: true}
	l, _ := openLog(t, opts)
	l.Close()
	fs.createFails.Store(true)
	l, _ = openLog(t, opts) // segments exist: Open creates none; the pipeline fails
	var acked []rec
	var err error
	for i := 0; err == nil; i++ {
		var pos Position
		p := payloadFor(i, 50)
		pos, err = l.Append(1, p)
		if err == nil {
			acked = append(acked, rec{pos, 1, p})
		}
		if i > 100 {
			t.Fatal("no rotation after 100 records")
		}
	}
	if !errors.Is(err, ErrLogFailed) || errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("Append needing a new segment = %v, want ErrLogFailed", err)
	}
	checkFailedLog(t, l, "rotate", syscall.ENOSPC)
	fs.createFails.Store(false)
	checkReplay(t, opts, acked, nil)
}
