package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeLog writes n records to a new log in dir and returns them.
func writeLog(t *testing.T, opts Options, n int, size func(i int) int) []rec {
	t.Helper()
	l, _ := openLog(t, opts)
	var want []rec
	for i := range n {
		want = append(want, mustAppend(t, l, Type(1+i%254), payloadFor(i, size(i))))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return want
}

// checkWorks appends to l, reopens, and checks that replay returns want
// followed by the new record.
func checkWorks(t *testing.T, l *Log, opts Options, want []rec) {
	t.Helper()
	want = append(want[:len(want):len(want)], mustAppend(t, l, 7, []byte("after repair")))
	l, got := reopen(t, l, opts)
	sameRecords(t, got, want)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestTornTail damages the last record of the last segment at every byte
// offset k, the way a crash during its write does: either its bytes from k
// on never reached the disk (zeroed) or the file ends at k (truncated).
// Open must succeed, replay every earlier record, cut the tail, and keep
// working.
func TestTornTail(t *testing.T) {
	const n, lastSize = 20, 45
	opts := Options{Dir: t.TempDir(), SegmentSize: 512, NoSync: true}
	size := func(i int) int {
		if i == n-1 {
			return lastSize
		}
		return 20 + i
	}
	want := writeLog(t, opts, n, size)
	last := want[n-1]
	if last.pos.Segment < 2 {
		t.Fatalf("test needs the last record in a later segment, it is at %v", last.pos)
	}
	pristine := readFile(t, segPath(opts.Dir, last.pos.Segment))
	recLen := int(recordSize(lastSize))
	src := opts.Dir

	for _, mode := range []string{"zeroed", "truncated"} {
		for k := 0; k < recLen; k++ {
			t.Run(fmt.Sprintf("%s/k=%d", mode, k), func(t *testing.T) {
				opts := opts
				opts.Dir = copyDir(t, src)
				path := segPath(opts.Dir, last.pos.Segment)
				b := append([]byte(nil), pristine...)
				from := int(last.pos.Offset) + k
				switch mode {
				case "zeroed":
					clear(b[from : int(last.pos.Offset)+recLen])
				case "truncated":
					b = b[:from]
				}
				writeFile(t, path, b)

				l, got := openLog(t, opts)
				intact := k >= headerSize+lastSize // only padding lost: the record is whole
				expect := want[:n-1]
				if intact {
					expect = want
				}
				sameRecords(t, got, expect)
				st := l.Stats()
				torn := k > 0 && !intact
				if torn && st.TornTailAt != last.pos {
					t.Fatalf("TornTailAt = %v, want %v", st.TornTailAt, last.pos)
				}
				if !torn && mode == "zeroed" && st.TornTailSize != 0 {
					t.Fatalf("cut %d bytes from an undamaged log at %v", st.TornTailSize, st.TornTailAt)
				}
				// The cut tail is zero on disk and the file is whole words.
				after := readFile(t, path)
				if len(after)%8 != 0 || (!intact && !isZero(after[last.pos.Offset:])) {
					t.Fatalf("tail not cut: %d bytes, %x", len(after), after[last.pos.Offset:min(len(after), int(last.pos.Offset)+recLen)])
				}
				checkWorks(t, l, opts, expect)
			})
		}
	}
}

// copyDir copies the segment files of src into a new directory.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, ok := parseSegmentName(e.Name()); ok {
			writeFile(t, filepath.Join(dst, e.Name()), readFile(t, filepath.Join(src, e.Name())))
		}
	}
	return dst
}

// TestTornTailGarbage checks a torn tail that is not zero: bytes of a batch
// whose beginning did not reach the disk. No valid record follows, so it is
// cut.
func TestTornTailGarbage(t *testing.T) {
	opts := Options{Dir: t.TempDir(), SegmentSize: 4096, NoSync: true}
	want := writeLog(t, opts, 10, func(i int) int { return 30 })
	end := want[9].pos.Offset + recordSize(30)
	rng := rand.New(rand.NewPCG(5, 6))
	garbage := make([]byte, 1000)
	for i := range garbage {
		garbage[i] = byte(rng.Uint32())
	}
	garbage[0] = 0 // a zero byte in the header is not an end marker
	patchFile(t, segPath(opts.Dir, 1), end, garbage)

	l, got := openLog(t, opts)
	sameRecords(t, got, want)
	if st := l.Stats(); st.TornTailAt != (Position{1, end}) || st.TornTailSize != 1000 {
		t.Fatalf("torn tail at %v, %d bytes; want at 1:%d, 1000 bytes", st.TornTailAt, st.TornTailSize, end)
	}
	if !isZero(readFile(t, segPath(opts.Dir, 1))[end:]) {
		t.Fatal("garbage still on disk after Open")
	}
	checkWorks(t, l, opts, want)
}

// corruptionAt opens the log and checks that it fails with a
// *CorruptionError at file and offset.
func corruptionAt(t *testing.T, opts Options, file string, off int64) *CorruptionError {
	t.Helper()
	l, err := Open(opts, nil)
	if err == nil {
		l.Close()
		t.Fatalf("Open succeeded, want corruption at %s offset %d", file, off)
	}
	var ce *CorruptionError
	if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open = %v (%T), want *CorruptionError", err, err)
	}
	if ce.File != file || ce.Offset != off {
		t.Fatalf("corruption reported at %s offset %d, want %s offset %d (%v)", ce.File, ce.Offset, file, off, err)
	}
	msg := err.Error()
	for _, s := range []string{file, fmt.Sprintf("offset %d", off), "do not delete", "restore"} {
		if !strings.Contains(msg, s) {
			t.Fatalf("error %q does not say %q", msg, s)
		}
	}
	return ce
}

// TestBitFlip flips one bit in every byte of a record in the middle of the
// log, in the last segment and in an earlier one, and in the header of a
// segment. Each must stop Open with a *CorruptionError at the damaged
// record, and leave the file unchanged.
func TestBitFlip(t *testing.T) {
	opts := Options{Dir: t.TempDir(), SegmentSize: 1024, NoSync: true}
	want := writeLog(t, opts, 40, func(i int) int { return 21 + i%3 })
	lastSeg := want[len(want)-1].pos.Segment
	targets := map[string]Position{
		"last segment":    want[len(want)-3].pos,
		"earlier segment": want[5].pos,
		"segment header":  {Segment: lastSeg, Offset: 0},
	}
	if targets["earlier segment"].Segment == lastSeg || targets["last segment"].Segment != lastSeg {
		t.Fatalf("bad test layout: %v", targets)
	}
	for name, pos := range targets {
		path := segPath(opts.Dir, pos.Segment)
		pristine := readFile(t, path)
		size := int(recordSize(payloadLen(pristine[pos.Offset:])))
		for i := range size {
			t.Run(fmt.Sprintf("%s/byte=%d", name, i), func(t *testing.T) {
				b := append([]byte(nil), pristine...)
				b[int(pos.Offset)+i] ^= 1 << (i % 8)
				writeFile(t, path, b)
				defer writeFile(t, path, pristine)
				ce := corruptionAt(t, opts, path, pos.Offset)
				if ce.Reason == "" {
					t.Fatal("no reason")
				}
				if string(readFile(t, path)) != string(b) {
					t.Fatal("Open modified a damaged log")
				}
			})
		}
	}
	l, got := openLog(t, opts) // restored: all good again
	sameRecords(t, got, want)
	l.Close()
}

// TestZeroedMiddle checks that records lost in the middle of the last
// segment (a zeroed page) followed by valid records are corruption, not a
// tail to cut: cutting would drop acknowledged records.
func TestZeroedMiddle(t *testing.T) {
	opts := Options{Dir: t.TempDir(), SegmentSize: 1 << 20, NoSync: true}
	want := writeLog(t, opts, 50, func(i int) int { return 100 })
	patchFile(t, segPath(opts.Dir, 1), want[10].pos.Offset, make([]byte, 3*recordSize(100)))
	ce := corruptionAt(t, opts, segPath(opts.Dir, 1), want[10].pos.Offset)
	if !strings.Contains(ce.Reason, fmt.Sprintf("valid record follows at offset %d", want[13].pos.Offset)) {
		t.Fatalf("reason %q does not name the next valid record", ce.Reason)
	}
}

// TestTornEarlierSegment checks that a torn record at the end of a segment
// that is not the last is corruption: the writer syncs a segment before it
// moves to the next, so that cannot be a crash.
func TestTornEarlierSegment(t *testing.T) {
	opts := Options{Dir: t.TempDir(), SegmentSize: 512, NoSync: true}
	want := writeLog(t, opts, 30, func(i int) int { return 40 })
	var lastOf1 rec
	for _, r := range want {
		if r.pos.Segment == 1 {
			lastOf1 = r
		}
	}
	patchFile(t, segPath(opts.Dir, 1), lastOf1.pos.Offset+20, make([]byte, 8))
	corruptionAt(t, opts, segPath(opts.Dir, 1), lastOf1.pos.Offset)

	// Garbage after the last record of an earlier segment is corruption too.
	// 10 records of 48 bytes fill segment 1 up to 512, 8 zero bytes remain.
	opts2 := Options{Dir: t.TempDir(), SegmentSize: 520, NoSync: true}
	want = writeLog(t, opts2, 30, func(i int) int { return 40 })
	patchFile(t, segPath(opts2.Dir, 1), 515, []byte{1})
	var end int64
	for _, r := range want {
		if r.pos.Segment == 1 {
			end = r.pos.Offset + recordSize(40)
		}
	}
	corruptionAt(t, opts2, segPath(opts2.Dir, 1), end)
}

func TestMissingSegment(t *testing.T) {
	opts := Options{Dir: t.TempDir(), SegmentSize: 256, NoSync: true}
	want := writeLog(t, opts, 20, func(i int) int { return 60 })
	if want[19].pos.Segment < 4 {
		t.Fatalf("need at least 4 segments, have %d", want[19].pos.Segment)
	}
	if err := os.Remove(segPath(opts.Dir, 2)); err != nil {
		t.Fatal(err)
	}
	ce := corruptionAt(t, opts, segPath(opts.Dir, 2), 0)
	if !strings.Contains(ce.Reason, "segment 2 is missing") {
		t.Fatalf("reason %q", ce.Reason)
	}
}

// setHeader rewrites the header of segment seq with a valid checksum.
func setHeader(t *testing.T, dir string, seq uint64, magic string, version uint16, hdrSeq uint64) {
	t.Helper()
	var p [segmentHeaderPayload]byte
	copy(p[0:8], magic)
	binary.LittleEndian.PutUint16(p[8:10], version)
	binary.LittleEndian.PutUint64(p[12:20], hdrSeq)
	patchFile(t, segPath(dir, seq), 0, appendRecord(nil, seq, typeSegmentHeader, p[:]))
}

func TestSegmentHeaderErrors(t *testing.T) {
	t.Run("newer version", func(t *testing.T) {
		opts := Options{Dir: t.TempDir(), SegmentSize: 256, NoSync: true}
		writeLog(t, opts, 10, func(int) int { return 60 })
		setHeader(t, opts.Dir, 2, segmentMagic, formatVersion+1, 2)
		_, err := Open(opts, nil)
		var ve *VersionError
		if !errors.As(err, &ve) || ve.File != segPath(opts.Dir, 2) || ve.Version != formatVersion+1 {
			t.Fatalf("Open = %v, want *VersionError for segment 2 version %d", err, formatVersion+1)
		}
		for _, s := range []string{"newer Tandem", segPath(opts.Dir, 2), fmt.Sprintf("version %d", formatVersion+1)} {
			if !strings.Contains(err.Error(), s) {
				t.Fatalf("error %q does not say %q", err, s)
			}
		}
	})
	cases := []struct {
		name    string
		magic   string
		version uint16
		hdrSeq  uint64
		reason  string
	}{
		{"bad magic", "NOTTANDM", 1, 2, "bad magic"},
		{"version 0", segmentMagic, 0, 2, "version 0"},
		{"renamed segment", segmentMagic, 1, 9, "names segment 9"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			opts := Options{Dir: t.TempDir(), SegmentSize: 256, NoSync: true}
			writeLog(t, opts, 10, func(int) int { return 60 })
			setHeader(t, opts.Dir, 2, c.magic, c.version, c.hdrSeq)
			ce := corruptionAt(t, opts, segPath(opts.Dir, 2), 0)
			if !strings.Contains(ce.Reason, c.reason) {
				t.Fatalf("reason %q does not say %q", ce.Reason, c.reason)
			}
		})
	}
	t.Run("short file", func(t *testing.T) {
		opts := Options{Dir: t.TempDir(), SegmentSize: 256, NoSync: true}
		writeLog(t, opts, 10, func(int) int { return 60 })
		if err := os.Truncate(segPath(opts.Dir, 3), 16); err != nil {
			t.Fatal(err)
		}
		corruptionAt(t, opts, segPath(opts.Dir, 3), 0)
	})
}
