package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// dirFiles counts the files of a log directory by kind.
type dirFiles struct{ segs, frees, temps int }

func countFiles(t testing.TB, dir string) dirFiles {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n dirFiles
	for _, e := range entries {
		switch name := e.Name(); {
		case strings.HasSuffix(name, tmpExt):
			n.temps++
		case strings.HasSuffix(name, segmentExt):
			n.segs++
		case strings.HasSuffix(name, freeExt):
			n.frees++
		}
	}
	return n
}

// since returns the records of want in segment first or later.
func since(want []rec, first uint64) []rec {
	var out []rec
	for _, r := range want {
		if r.pos.Segment >= first {
			out = append(out, r)
		}
	}
	return out
}

// TestReleaseRecycles appends across many rotations, releasing all but the
// current segment now and then, the way a checkpointing owner does. The
// directory must stay within MaxSize plus the segment being prepared,
// rotations must reuse released files, and a reopen must replay exactly
// the records of the live segments, from recycled files full of stale
// records, and keep working.
func TestReleaseRecycles(t *testing.T) {
	for _, noSync := range []bool{true, false} {
		t.Run(map[bool]string{true: "nosync", false: "sync"}[noSync], func(t *testing.T) {
			const segSize, maxSegs = 1024, 6
			opts := Options{Dir: t.TempDir(), SegmentSize: segSize, MaxSize: maxSegs * segSize, NoSync: noSync}
			l, _ := openLog(t, opts)
			var want []rec
			for i := range 2000 {
				want = append(want, mustAppend(t, l, Type(1+i%254), payloadFor(i, 10+i%90)))
				if u := l.Usage(); u.Current-u.First+1 >= 3 {
					if err := l.Release(u.Current); err != nil {
						t.Fatalf("Release(%d): %v", u.Current, err)
					}
					if u := l.Usage(); u.First != u.Current {
						t.Fatalf("after Release: %+v", u)
					}
				}
				if n := countFiles(t, opts.Dir); n.segs+n.frees > maxSegs || n.temps > 1 {
					t.Fatalf("after %d records: %+v files, budget %d segments", i+1, n, maxSegs)
				}
			}
			st := l.Stats()
			if st.Recycled == 0 || st.Recycled+maxSegs+1 < st.Rotations || st.Released == 0 {
				t.Fatalf("stats: %+v: rotations should reuse released segments", st)
			}
			u := l.Usage()
			if u.Used != int64(u.Current-u.First)*segSize+u.Offset || u.Used <= 0 {
				t.Fatalf("usage %+v", u)
			}
			l, got := reopen(t, l, opts)
			sameRecords(t, got, since(want, u.First))
			if st := l.Stats(); st.Replayed != uint64(len(got)) || st.TornTailSize != 0 {
				t.Fatalf("stats after reopen: %+v", st)
			}
			if u2 := l.Usage(); u2.First != u.First || u2.Current != u.Current || u2.Used != u.Used {
				t.Fatalf("usage after reopen %+v, before %+v", u2, u)
			}
			// The segments replayed were recycled files: check that the test
			// exercised stale content after the records.
			stale := false
			for s := u.First; s <= u.Current; s++ {
				b := readFile(t, segPath(opts.Dir, s))
				flags, err := checkSegmentHeader(b, s, "")
				if err != nil {
					t.Fatal(err)
				}
				if flags&flagRecycled != 0 && zeroEnd(b) > int(u.Offset)+headerSize {
					stale = true
				}
			}
			if !stale {
				t.Fatalf("no live segment is a recycled file with stale content")
			}
			checkWorks(t, l, opts, got)
		})
	}
}

// TestReleaseBounds: Release never releases the current segment, ignores
// a boundary at or below the first live segment, and fails after Close.
func TestReleaseBounds(t *testing.T) {
	opts := Options{Dir: t.TempDir(), SegmentSize: 256, NoSync: true}
	l, _ := openLog(t, opts)
	for i := range 20 {
		mustAppend(t, l, 1, payloadFor(i, 60))
	}
	cur := l.Segment()
	if cur < 4 {
		t.Fatalf("current segment %d, want at least 4", cur)
	}
	if err := l.Release(2); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(1); err != nil {
		t.Fatal(err)
	}
	if u := l.Usage(); u.First != 2 || u.Free != 1 {
		t.Fatalf("after Release(2): %+v", u)
	}
	if err := l.Release(cur + 100); err != nil {
		t.Fatal(err)
	}
	if u := l.Usage(); u.First != cur || u.Current != cur || u.Used != u.Offset {
		t.Fatalf("after Release(beyond): %+v, current %d", u, cur)
	}
	if _, err := os.Stat(segPath(opts.Dir, cur)); err != nil {
		t.Fatalf("current segment: %v", err)
	}
	want := mustAppend(t, l, 1, []byte("after"))
	l, got := reopen(t, l, opts)
	if len(got) == 0 || got[len(got)-1].pos != want.pos || got[0].pos.Segment != cur {
		t.Fatalf("replayed %v, want the records of segment %d ending with %v", got, cur, want)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(cur); !errors.Is(err, ErrClosed) {
		t.Fatalf("Release after Close = %v, want ErrClosed", err)
	}
}

// TestReleaseInterrupted stands for a crash in Release before its
// directory fsync: some of the released segments kept their .wal name.
// Open must treat every segment at or below the newest released one as
// released, and replay from the one after.
func TestReleaseInterrupted(t *testing.T) {
	opts := Options{Dir: t.TempDir(), SegmentSize: 256, NoSync: true}
	want := writeLog(t, opts, 40, func(int) int { return 60 })
	last := want[len(want)-1].pos.Segment
	if last < 6 {
		t.Fatalf("last segment %d", last)
	}
	// Released 1..4, but the renames of 1, 2 and 4 were lost.
	if err := os.Rename(segPath(opts.Dir, 3), filepath.Join(opts.Dir, freeName(3))); err != nil {
		t.Fatal(err)
	}
	l, got := openLog(t, opts)
	sameRecords(t, got, since(want, 4))
	if u := l.Usage(); u.First != 4 {
		t.Fatalf("usage %+v, want first 4", u)
	}
	checkWorks(t, l, opts, got)
	if n := countFiles(t, opts.Dir); n.frees != 3 || n.segs != int(last)-3 {
		t.Fatalf("files %+v, want the lost renames done", n)
	}
}

// TestNoLiveSegment: only released files left is damage, not a new log.
func TestNoLiveSegment(t *testing.T) {
	opts := Options{Dir: t.TempDir(), SegmentSize: 256, NoSync: true}
	writeLog(t, opts, 10, func(int) int { return 60 })
	seqs, _ := listSegments(opts.Dir)
	for _, s := range seqs {
		if err := os.Rename(segPath(opts.Dir, s), filepath.Join(opts.Dir, freeName(s))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Open(opts, nil); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "no live segment") {
		t.Fatalf("Open = %v, want corruption: no live segment", err)
	}
}

// recycledLog writes records until the current segment is a recycled file
// and at least n records are in it, and returns the log's records in the
// live segments after a Close.
func recycledLog(t *testing.T, opts Options, n int) []rec {
	t.Helper()
	l, _ := openLog(t, opts)
	var want []rec
	for i := 0; ; i++ {
		want = append(want, mustAppend(t, l, Type(1+i%200), payloadFor(i, 24+i%40)))
		if u := l.Usage(); u.Current > u.First {
			if err := l.Release(u.Current); err != nil {
				t.Fatal(err)
			}
		}
		if l.recycledCurrent() && len(since(want, l.Segment())) >= n {
			break
		}
		if i > 10000 {
			t.Fatal("no recycled segment")
		}
	}
	first := l.Usage().First
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return since(want, first)
}

func (l *Log) recycledCurrent() bool {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	return l.recycled
}

// TestRecycledTornTail damages the last record of a recycled last segment
// the ways a crash can: part of it never written (the file's old bytes
// remain, or zeros). Open must replay the records before it, cut the tail
// with a zero header, and work on.
func TestRecycledTornTail(t *testing.T) {
	opts := Options{Dir: t.TempDir(), SegmentSize: 1024, NoSync: true}
	want := recycledLog(t, opts, 4)
	last := want[len(want)-1]
	path := segPath(opts.Dir, last.pos.Segment)
	pristine := readFile(t, path)
	size := int(recordSize(len(last.payload)))
	end := headerSize + len(last.payload) // bytes from here on are padding
	for _, k := range []int{0, 4, 8, 12, end - 8, end - 1} {
		for _, fill := range []byte{0, 0xa5} {
			writeFile(t, path, pristine)
			junk := bytes.Repeat([]byte{fill}, size-k)
			patchFile(t, path, last.pos.Offset+int64(k), junk)
			l, got := openLog(t, opts)
			sameRecords(t, got, want[:len(want)-1])
			wantAt := last.pos
			if k == 0 && fill == 0 {
				wantAt = Position{} // a zero header: the records just end there
			}
			if st := l.Stats(); st.TornTailAt != wantAt {
				t.Fatalf("k=%d fill=%#x: torn tail at %v, want %v", k, fill, st.TornTailAt, wantAt)
			}
			checkWorks(t, l, opts, want[:len(want)-1])
		}
	}
}

// TestRecycledDamage: in a recycled segment, a bad record followed by
// valid ones is still corruption, in the last segment and in another.
func TestRecycledDamage(t *testing.T) {
	opts := Options{Dir: t.TempDir(), SegmentSize: 1024, NoSync: true}
	want := recycledLog(t, opts, 6)
	r := want[len(want)-4]
	patchFile(t, segPath(opts.Dir, r.pos.Segment), r.pos.Offset+headerSize, []byte{^r.payload[0]})
	corruptionAt(t, opts, segPath(opts.Dir, r.pos.Segment), r.pos.Offset)

	// A recycled segment that is not the last must end at a zero header.
	opts = Options{Dir: t.TempDir(), SegmentSize: 1024, NoSync: true}
	want = recycledLog(t, opts, 2)
	l, _ := openLog(t, opts)
	for i := 0; l.Segment() == want[0].pos.Segment; i++ {
		mustAppend(t, l, 1, payloadFor(i, 100))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	seg := want[0].pos.Segment
	b := readFile(t, segPath(opts.Dir, seg))
	end := int64(segmentHeaderSize)
	for {
		_, _, n, _ := decodeRecord(b[end:], seg)
		if n == 0 {
			break
		}
		end += int64(n)
	}
	if end+headerSize > int64(len(b)) {
		t.Skip("segment filled to its end")
	}
	patchFile(t, segPath(opts.Dir, seg), end, []byte{1, 2, 3, 4, 5, 6, 7, 8})
	corruptionAt(t, opts, segPath(opts.Dir, seg), end)
}

// TestRecycledStaleValidRecord plants, after the records of a recycled
// segment, a record that is valid in that segment but followed by neither
// a record nor a zero header: what an old record whose checksum happens to
// match looks like. It must not be taken for a record after damage.
func TestRecycledStaleValidRecord(t *testing.T) {
	opts := Options{Dir: t.TempDir(), SegmentSize: 1024, NoSync: true}
	want := recycledLog(t, opts, 1)
	last := want[len(want)-1]
	end := last.pos.Offset + recordSize(len(last.payload))
	seg := last.pos.Segment
	path := segPath(opts.Dir, seg)
	if end+headerSize+64 > opts.SegmentSize {
		t.Skip("no room after the last record")
	}
	planted := appendRecord(nil, seg, 9, []byte("stale but valid"))
	garbage := make([]byte, 16)
	binary.LittleEndian.PutUint64(garbage, 0xdeadbeefcafe0107)
	binary.LittleEndian.PutUint64(garbage[8:], 0x0102030405060708)
	patchFile(t, path, end+headerSize, append(planted, garbage...))
	l, got := openLog(t, opts)
	sameRecords(t, got, want)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// The same record followed by a zero header is a real one: corruption.
	patchFile(t, path, end+headerSize+int64(len(planted)), make([]byte, headerSize))
	patchFile(t, path, end, []byte{1, 2, 3, 4, 5, 6, 7, 8})
	corruptionAt(t, opts, path, end)
}

// TestOldFormatSegments: a log written in format version 1 (no flags)
// opens, replays and grows in version 2.
func TestOldFormatSegments(t *testing.T) {
	opts := Options{Dir: t.TempDir(), SegmentSize: 256, NoSync: true}
	want := writeLog(t, opts, 12, func(int) int { return 60 })
	seqs, _ := listSegments(opts.Dir)
	for _, s := range seqs {
		setHeader(t, opts.Dir, s, segmentMagic, 1, s)
	}
	l, got := openLog(t, opts)
	sameRecords(t, got, want)
	checkWorks(t, l, opts, want)
}

// TestCloseKeepsPreparedRecycled: a released file that the pipeline had
// made into the next segment goes back to the free files at Close.
func TestCloseKeepsPreparedRecycled(t *testing.T) {
	opts := Options{Dir: t.TempDir(), SegmentSize: 512, NoSync: true}
	l, _ := openLog(t, opts)
	for i := 0; l.Segment() < 6; i++ {
		mustAppend(t, l, 1, payloadFor(i, 100))
	}
	waitFile(t, filepath.Join(opts.Dir, tmpName(7))) // a new file: nothing released yet
	if err := l.Release(l.Segment()); err != nil {   // 1..5
		t.Fatal(err)
	}
	// One rotation, to 7; the pipeline then prepares 8 from released file 1.
	for cur := l.Segment(); l.Segment() == cur; {
		mustAppend(t, l, 1, payloadFor(1, 100))
	}
	waitFile(t, filepath.Join(opts.Dir, tmpName(8)))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if n := countFiles(t, opts.Dir); n.temps != 0 || n.segs != 2 || n.frees != 5 {
		t.Fatalf("files after Close %+v, want segments 6 and 7 and 5 released files", n)
	}
	if _, err := os.Stat(filepath.Join(opts.Dir, freeName(1))); err != nil {
		t.Fatalf("released file 1 not given back: %v", err)
	}
}

func waitFile(t *testing.T, path string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear", path)
		}
	}
}

// TestMaxSizeTrims: released files beyond MaxSize are deleted.
func TestMaxSizeTrims(t *testing.T) {
	opts := Options{Dir: t.TempDir(), SegmentSize: 256, MaxSize: 3 * 256, NoSync: true}
	l, _ := openLog(t, opts)
	for i := 0; l.Segment() < 8; i++ {
		mustAppend(t, l, 1, payloadFor(i, 60))
	}
	if err := l.Release(l.Segment()); err != nil {
		t.Fatal(err)
	}
	if u := l.Usage(); u.Free > 2 { // the pipeline may have taken one already
		t.Fatalf("usage %+v, want at most 2 free files (3 budgeted, 1 live)", u)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if n := countFiles(t, opts.Dir); n.segs != 1 || n.frees != 2 {
		t.Fatalf("files %+v", n)
	}
	// A smaller budget at the next Open trims there.
	opts.MaxSize = 256
	l, _ = openLog(t, opts)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if n := countFiles(t, opts.Dir); n.segs != 1 || n.frees != 0 {
		t.Fatalf("files %+v after reopening with a 1-segment budget", n)
	}
}
