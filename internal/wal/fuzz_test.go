package wal

import (
	"bytes"
	"testing"
)

// FuzzDecode feeds arbitrary bytes to the record decoder. It must never
// panic; what it accepts must be exactly a record the encoder produces for
// that segment; anything else is an end marker or an error.
func FuzzDecode(f *testing.F) {
	for i, n := range []int{0, 1, 5, 8, 13, 100, 700} {
		f.Add(uint64(1+i), appendRecord(nil, uint64(1+i), Type(1+i*40), payloadFor(i, n)))
	}
	f.Add(uint64(9), appendSegmentHeader(nil, 9, 0))
	two := appendRecord(nil, 3, 4, []byte("commit gtrid-1"))
	f.Add(uint64(3), appendRecord(two, 3, 5, []byte("end gtrid-1")))
	f.Add(uint64(1), make([]byte, 16))
	f.Add(uint64(1), []byte{1, 2, 3})
	f.Add(uint64(1), []byte{0, 0, 0, 0, 0xff, 0xff, 0xff, 1})

	f.Fuzz(func(t *testing.T, seq uint64, b []byte) {
		typ, payload, n, bad := decodeRecord(b, seq)
		switch {
		case n > 0:
			if bad != "" || n > len(b) || n%8 != 0 || typ == typeEnd {
				t.Fatalf("accepted record: type %d, size %d of %d, bad %q", typ, n, len(b), bad)
			}
			if enc := appendRecord(nil, seq, typ, payload); !bytes.Equal(enc, b[:n]) {
				t.Fatalf("accepted bytes are not an encoded record:\n got %x\nwant %x", b[:n], enc)
			}
		case bad == "":
			if len(b) >= 8 && !isZero(b[:8]) || len(b) < 8 && !isZero(b) {
				t.Fatalf("end of records reported for a nonzero header %x", b[:min(8, len(b))])
			}
		}
	})
}

// FuzzFindValidRecord checks the tail scan, prefix-CRC path included,
// against decodeRecord tried at every offset.
func FuzzFindValidRecord(f *testing.F) {
	r1 := appendRecord(nil, 2, 3, payloadFor(1, 50))
	f.Add(uint64(2), append(bytes.Repeat([]byte{0xee}, 24), r1...), uint16(0))
	f.Add(uint64(2), append(make([]byte, 64), r1...), uint16(8))
	f.Add(uint64(1), []byte("\x01\x02\x03\x04\x05\x00\x00\x07garbage"), uint16(0))
	f.Fuzz(func(t *testing.T, seq uint64, data []byte, from uint16) {
		b := make([]byte, align(len(data)))
		copy(b, data)
		start := int(from) &^ 7
		if start > len(b) {
			start = len(b)
		}
		want := naiveFindValid(b, seq, start)
		for _, direct := range []int{0, 4096} {
			if got := findValidRecordN(b, seq, start, zeroEnd(b), direct, nil); got != want {
				t.Fatalf("direct=%d: found %d, want %d", direct, got, want)
			}
		}
	})
}

// FuzzScanSegment runs the segment scanner Open uses over a valid segment
// header followed by arbitrary bytes: no panic; every record it reports is
// valid where it says; the end and the valid record after it (if any) are
// consistent.
func FuzzScanSegment(f *testing.F) {
	seg := appendSegmentHeader(nil, 4, 0)
	seg = appendRecord(seg, 4, 1, []byte("commit"))
	seg = appendRecord(seg, 4, 2, payloadFor(3, 40))
	f.Add(seg[segmentHeaderSize:])
	f.Add(append(append([]byte(nil), seg[segmentHeaderSize:40]...), seg[segmentHeaderSize:]...))
	f.Add(append(make([]byte, 8), seg[segmentHeaderSize:]...))
	f.Fuzz(func(t *testing.T, data []byte) {
		b := appendSegmentHeader(nil, 4, 0)
		b = append(b, data...)
		b = append(b, make([]byte, align(len(b))-len(b))...)
		next := segmentHeaderSize
		s, err := scanSegment(b, 4, false, func(off int, typ Type, payload []byte) error {
			if off != next {
				t.Fatalf("record at %d, expected %d", off, next)
			}
			gt, gp, n, bad := decodeRecord(b[off:], 4)
			if n == 0 || bad != "" || gt != typ || !bytes.Equal(gp, payload) {
				t.Fatalf("reported record at %d does not decode", off)
			}
			next += n
			return nil
		})
		if err != nil || s.end != next || s.end > len(b) || s.zeroEnd > len(b) {
			t.Fatalf("scan = %+v, %v; records end at %d of %d", s, err, next, len(b))
		}
		if s.validAt >= 0 && (s.validAt <= s.end || naiveFindValid(b, 4, s.end+headerSize) != s.validAt) {
			t.Fatalf("valid record reported at %d after end %d", s.validAt, s.end)
		}
	})
}
