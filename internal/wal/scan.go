package wal

import (
	"encoding/binary"
	"fmt"
)

// segmentScan is what decoding the records of one segment found.
type segmentScan struct {
	end     int    // offset just past the last valid record
	bad     string // why the record at end is not valid; "" for a clean end
	validAt int    // offset of a valid record after end, or -1
	zeroEnd int    // every byte from here on is zero (a multiple of 8)
}

// dirty reports whether some byte after the last valid record is nonzero.
func (s segmentScan) dirty() bool { return s.zeroEnd > s.end }

// scanSegment decodes the records of segment seq held in b (the whole
// file, its length a multiple of 8, the segment header already checked)
// and calls fn for each valid record in order until the first record that
// is not valid or a zero header. It then looks for a valid record at every
// later 8-byte-aligned offset, which tells a torn tail from damage in the
// middle. An error from fn stops the scan and is returned as is.
//
// In a recycled segment the bytes after the records are the file's earlier
// content, full of records of other segments. Each of them fails its
// checksum here, but with a 32-bit checksum one in 2^32 would pass, and a
// recycled file holds many; so there a record found after the end counts
// only if the next 8-byte word after it starts a valid record too, or is a
// zero header, or is the end of the file: what real records look like
// (the writer ends every batch with a zero header), and what a stale one
// matches with a chance of about 2^-64.
func scanSegment(b []byte, seq uint64, recycled bool, fn func(off int, typ Type, payload []byte) error) (segmentScan, error) {
	off := segmentHeaderSize
	var s segmentScan
	for {
		typ, payload, n, bad := decodeRecord(b[off:], seq)
		if n > 0 && typ == typeSegmentHeader {
			n, bad = 0, "segment header record in the middle of a segment"
		}
		if n == 0 {
			s.end, s.bad = off, bad
			break
		}
		if fn != nil {
			if err := fn(off, typ, payload); err != nil {
				return s, err
			}
		}
		off += n
	}
	s.zeroEnd = zeroEnd(b)
	var confirm func(int) bool
	if recycled {
		confirm = func(off int) bool { return followedByRecord(b, seq, off) }
	}
	s.validAt = findValidRecordN(b, seq, s.end+headerSize, s.zeroEnd, 4096, confirm)
	return s, nil
}

// followedByRecord reports whether the valid record at off in b is followed
// by the end of b, a zero header, or another valid record.
func followedByRecord(b []byte, seq uint64, off int) bool {
	_, _, n, _ := decodeRecord(b[off:], seq)
	next := off + n
	if n == 0 || next >= len(b) {
		return n > 0
	}
	typ, _, m, bad := decodeRecord(b[next:], seq)
	return (m == 0 && bad == "") || (m > 0 && typ != typeSegmentHeader)
}

// findValidRecord returns the first offset at or after from, a multiple of
// 8, where a valid caller record of segment seq starts in b, or -1. Every
// byte of b from end (a multiple of 8, see zeroEnd) on must be zero.
//
// It is what decodeRecord would find if tried at every offset, but checks
// each candidate's checksum in O(log n) through prefix CRCs, so a tail of
// garbage whose headers claim multi-megabyte payloads is scanned in time
// linear in its size rather than quadratic.
func findValidRecord(b []byte, seq uint64, from, end int) int {
	return findValidRecordN(b, seq, from, end, 4096, nil)
}

// findValidRecordN is findValidRecord that checksums payloads of up to
// directMax bytes directly and longer ones through prefix CRCs, and, if
// confirm is not nil, skips a valid record for which confirm(offset) is
// false. Tests set directMax to 0 to check the prefix path against
// decodeRecord.
func findValidRecordN(b []byte, seq uint64, from, end, directMax int, confirm func(int) bool) int {
	var ranges *rangeCRC
	for off := from; off+headerSize <= end; off += alignment {
		hdr := b[off : off+headerSize]
		typ := Type(hdr[7])
		if typ == typeEnd || typ == typeSegmentHeader {
			continue
		}
		n := payloadLen(hdr)
		size := int(recordSize(n))
		if size > len(b)-off {
			continue
		}
		p0, p1 := off+headerSize, off+headerSize+n
		if !isZero(b[p1 : off+size]) {
			continue
		}
		var payloadCRC uint32
		if n <= directMax {
			payloadCRC = crc32Castagnoli(b[p0:p1])
		} else {
			if ranges == nil {
				ranges = newRangeCRC(b, from, end)
			}
			payloadCRC = ranges.crc(p0, p1)
		}
		want := crcCombine(prefixCRC(seq, hdr[4:8]), payloadCRC, int64(n))
		if binary.LittleEndian.Uint32(hdr[0:4]) == want && (confirm == nil || confirm(off)) {
			return off
		}
	}
	return -1
}

// describe turns a scan that did not end cleanly into a reason for a
// CorruptionError.
func (s segmentScan) describe() string {
	what := s.bad
	if what == "" {
		what = "the records end (zero header)"
	}
	if s.validAt >= 0 {
		return fmt.Sprintf("%s, but a valid record follows at offset %d", what, s.validAt)
	}
	return what
}
