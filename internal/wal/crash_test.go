//go:build failpoints

package wal

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/internal/failpoint"
)

// The failpoints of the decision log, in the order a record meets them.
var walFailpoints = []string{
	"wal-before-write", "wal-after-write",
	"wal-rotate-before-rename", "wal-rotate-after-rename", "wal-recycle-after-rename",
	"wal-release-before-rename", "wal-release-after-rename",
}

// crashRecord is record i of the crash workloads: its payload starts with i.
func crashRecord(i int) (Type, []byte) {
	p := payloadFor(i, 8+i%57)
	binary.LittleEndian.PutUint64(p, uint64(i))
	return Type(1 + i%200), p
}

// crashWorkload appends records 0, 1, ... one at a time, releasing every
// segment but the current one whenever three are live (so that rotations
// reuse released files), n records. ack is called after each Append
// returns, releasing before each Release (a crash in Release may release
// any of those segments).
// If appendMu is not nil it is held during each Append, ack and Release.
func crashWorkload(t testing.TB, l *Log, n int, appendMu *sync.Mutex, ack func(i int, pos Position), releasing func(before uint64)) {
	for i := range n {
		typ, p := crashRecord(i)
		if appendMu != nil {
			appendMu.Lock()
		}
		pos, err := l.Append(typ, p)
		if err != nil {
			t.Fatalf("Append %d: %v", i, err)
		}
		ack(i, pos)
		if u := l.Usage(); u.Current-u.First >= 2 {
			releasing(u.Current)
			if err := l.Release(u.Current); err != nil {
				t.Fatalf("Release(%d): %v", u.Current, err)
			}
		}
		if appendMu != nil {
			appendMu.Unlock()
		}
	}
}

// checkCrashReplay opens the log in dir and checks what a crash left:
// replay is a run of consecutive workload records, in order, that holds
// every record acknowledged in a segment that was not released (at or
// after releasedBefore), up to acked (the last acknowledged; -1 for none);
// at most one record after it (being written at the crash). Then the log
// must take records and replay them.
func checkCrashReplay(t *testing.T, opts Options, acked int, releasedBefore uint64, ackedSeg map[int]uint64) {
	t.Helper()
	l, got := openLog(t, opts)
	next := -1
	for k, r := range got {
		i := int(binary.LittleEndian.Uint64(r.payload))
		typ, p := crashRecord(i)
		if r.typ != typ || !bytes.Equal(r.payload, p) {
			t.Fatalf("replayed record %d (%v) is not workload record %d", k, r, i)
		}
		if next >= 0 && i != next {
			t.Fatalf("replayed record %d is workload record %d, want %d: a gap", k, i, next)
		}
		if s, ok := ackedSeg[i]; ok && s != r.pos.Segment {
			t.Fatalf("record %d replayed in segment %d, acknowledged in %d", i, r.pos.Segment, s)
		}
		next = i + 1
	}
	last := next - 1
	if last < acked || last > acked+1 {
		t.Fatalf("replay ends at record %d, %d was the last acknowledged", last, acked)
	}
	for i := 0; i <= acked; i++ {
		if ackedSeg[i] >= releasedBefore && (len(got) == 0 || int(binary.LittleEndian.Uint64(got[0].payload)) > i) {
			t.Fatalf("acknowledged record %d (segment %d, not released: released before %d) is missing",
				i, ackedSeg[i], releasedBefore)
		}
	}
	typ, p := crashRecord(last + 1)
	want := append(got, mustAppend(t, l, typ, p)) //nolint:gocritic // got is replaced below
	l, got = reopen(t, l, opts)
	sameRecords(t, got, want)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// copyDirLoose copies the log files of src to a new directory, skipping
// files that vanish meanwhile (a released file that the pipeline renames:
// not part of the log either way). It stands for what a crash at that
// instant leaves on disk (a process crash: the page cache survives).
func copyDirLoose(t *testing.T, src, dst string) {
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Error(err)
		return
	}
	for _, e := range entries {
		if e.Name() == lockName {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err == nil {
			err = os.WriteFile(filepath.Join(dst, e.Name()), b, filePerm)
		}
		if err != nil {
			t.Error(err)
		}
	}
}

// TestCrashSnapshots runs the workload with a hook at each failpoint that
// copies the log directory at its 5th, 10th, ... hit: what a crash at that
// step would leave. Every copy must open and replay correctly.
func TestCrashSnapshots(t *testing.T) {
	for _, name := range walFailpoints {
		t.Run(name, func(t *testing.T) {
			opts := Options{Dir: t.TempDir(), SegmentSize: 512, MaxSize: 4 * 512, NoSync: true}
			l, _ := openLog(t, opts)
			type snap struct {
				dir            string
				acked          int
				releasedBefore uint64
			}
			var (
				mu             sync.Mutex
				acked          = -1
				releasedBefore uint64
				ackedSeg       = map[int]uint64{}
				snaps          []snap
				hits           int
			)
			// appendMu is held around each Append and Release. The
			// pipeline's goroutine (wal-recycle-after-rename) copies only
			// when it gets it at once, that is while no record is being
			// written and no segment released; the other failpoints run
			// inside the Append or Release of the test's goroutine.
			var appendMu sync.Mutex
			concurrent := name == "wal-recycle-after-rename"
			defer failpoint.SetHook(name, func() error {
				if concurrent {
					// Wait a little for the appender to be between two
					// records, not for ever: it may be waiting for this
					// very segment.
					locked := false
					for deadline := time.Now().Add(50 * time.Millisecond); !locked && time.Now().Before(deadline); {
						if locked = appendMu.TryLock(); !locked {
							time.Sleep(50 * time.Microsecond)
						}
					}
					if !locked {
						return nil
					}
					defer appendMu.Unlock()
				}
				mu.Lock()
				defer mu.Unlock()
				hits++
				if (hits%5 == 0 || concurrent) && len(snaps) < 8 {
					s := snap{dir: t.TempDir(), acked: acked, releasedBefore: releasedBefore}
					copyDirLoose(t, opts.Dir, s.dir)
					snaps = append(snaps, s)
				}
				return nil
			})()
			crashWorkload(t, l, 300, &appendMu,
				func(i int, pos Position) { mu.Lock(); acked = i; ackedSeg[i] = pos.Segment; mu.Unlock() },
				func(before uint64) { mu.Lock(); releasedBefore = before; mu.Unlock() })
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if len(snaps) == 0 {
				t.Fatalf("failpoint %s was hit %d times: no snapshot", name, hits)
			}
			for _, s := range snaps {
				checkCrashReplay(t, Options{Dir: s.dir, SegmentSize: opts.SegmentSize, MaxSize: opts.MaxSize, NoSync: true},
					s.acked, s.releasedBefore, ackedSeg)
			}
		})
	}
}

// TestCrashErrors makes each failpoint fail once, mid-workload: the log
// must fail cleanly (ErrOutcomeUnknown or ErrLogFailed for the write and
// rotation steps, an error from Release), and a reopen must replay every
// acknowledged record that was not released.
func TestCrashErrors(t *testing.T) {
	for _, name := range walFailpoints {
		t.Run(name, func(t *testing.T) {
			opts := Options{Dir: t.TempDir(), SegmentSize: 512, MaxSize: 4 * 512, NoSync: true}
			l, _ := openLog(t, opts)
			var hits atomic.Int32 // the pipeline's goroutine hits wal-recycle-after-rename
			defer failpoint.SetHook(name, func() error {
				if hits.Add(1) == 7 {
					return fmt.Errorf("injected at %s", name)
				}
				return nil
			})()
			acked, releasedBefore := -1, uint64(0)
			ackedSeg := map[int]uint64{}
			for i := 0; i < 300; i++ {
				typ, p := crashRecord(i)
				pos, err := l.Append(typ, p)
				if err != nil {
					if !errors.Is(err, ErrOutcomeUnknown) && !errors.Is(err, ErrLogFailed) {
						t.Fatalf("Append %d: %v", i, err)
					}
					break
				}
				acked, ackedSeg[i] = i, pos.Segment
				if u := l.Usage(); u.Current-u.First >= 2 {
					releasedBefore = u.Current
					if err := l.Release(u.Current); err != nil {
						if !strings.Contains(err.Error(), "injected") {
							t.Fatalf("Release: %v", err)
						}
						break
					}
				}
			}
			if n := hits.Load(); n < 7 {
				t.Fatalf("failpoint %s hit %d times", name, n)
			}
			_ = l.Close()
			failpoint.SetHook(name, nil)
			checkCrashReplay(t, opts, acked, releasedBefore, ackedSeg)
		})
	}
}

// TestCrashKill kills a child process (this test binary, re-run) at each
// failpoint, after a warm-up that makes rotations reuse released files,
// with fdatasync on. The child reports each acknowledged record and each
// Release on stdout; the parent then checks the log the kill left.
func TestCrashKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	for _, name := range walFailpoints {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(os.Args[0], "-test.run=^TestCrashKillChild$", "-test.v")
			cmd.Env = append(os.Environ(), "TANDEM_WAL_CRASH_DIR="+dir, "TANDEM_WAL_CRASH_AT="+name, "TANDEM_FAILPOINTS=")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			acked, releasedBefore := -1, uint64(0)
			ackedSeg := map[int]uint64{}
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				f := strings.Fields(sc.Text())
				switch {
				case len(f) == 3 && f[0] == "ack":
					i, _ := strconv.Atoi(f[1])
					s, _ := strconv.ParseUint(f[2], 10, 64)
					acked, ackedSeg[i] = i, s
				case len(f) == 2 && f[0] == "releasing":
					releasedBefore, _ = strconv.ParseUint(f[1], 10, 64)
				}
			}
			_, _ = io.Copy(io.Discard, out)
			err = cmd.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("child: %v, want killed at %s; stderr:\n%s", err, name, stderr.String())
			}
			if acked < 0 {
				t.Fatalf("child acknowledged nothing before the kill; stderr:\n%s", stderr.String())
			}
			checkCrashReplay(t, Options{Dir: dir, SegmentSize: 512, MaxSize: 4 * 512}, acked, releasedBefore, ackedSeg)
		})
	}
}

// TestCrashKillChild is the child of TestCrashKill.
func TestCrashKillChild(t *testing.T) {
	dir, name := os.Getenv("TANDEM_WAL_CRASH_DIR"), os.Getenv("TANDEM_WAL_CRASH_AT")
	if dir == "" {
		t.Skip("run by TestCrashKill")
	}
	l, _ := openLog(t, Options{Dir: dir, SegmentSize: 512, MaxSize: 4 * 512})
	releases := 0
	crashWorkload(t, l, 100000, nil,
		func(i int, pos Position) { fmt.Printf("ack %d %d\n", i, pos.Segment) },
		func(before uint64) {
			fmt.Printf("releasing %d\n", before)
			if releases++; releases == 4 { // warmed up: released files are being reused
				failpoint.Set(name, "kill")
			}
		})
	t.Fatalf("not killed at %s", name)
}
