package wal

import (
	"encoding/binary"
	"hash/crc32"
	"slices"
)

// Type is a record type. Types 1 to 254 belong to the caller; 0 marks the
// end of the records in a segment and 255 is the segment header.
type Type uint8

const (
	typeEnd           Type = 0   // a zero header: no more records
	typeSegmentHeader Type = 255 // first record of every segment
)

// TypeStandbyMark is the one caller type defined here, because two packages
// share it: a standby (internal/standby) writes a MARK record after each
// batch it copied from its primary (the primary's position and epoch), and
// a coordinator replaying the log of a promoted standby (internal/coord)
// skips it. The coordinator's own types are 1 to 4 (internal/coord).
const TypeStandbyMark Type = 5

// SegmentSizeFor is the segment size of a log of logSize bytes: an eighth
// of it, rounded down to the record alignment, at least 64 bytes. A
// coordinator and its standby size their logs with it.
func SegmentSizeFor(logSize int64) int64 { return max(logSize/8&^(alignment-1), 64) }

const (
	// MaxPayloadSize is the largest payload a record can carry: its length
	// is stored in 24 bits.
	MaxPayloadSize = 1<<24 - 1

	headerSize = 8 // CRC-32C (4) + payload length (3) + type (1)
	alignment  = 8 // every record starts at a multiple of 8
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// recordSize is the number of bytes a record with an n-byte payload takes:
// header, payload and zero padding to a multiple of 8.
func recordSize(n int) int64 {
	return headerSize + int64(align(n))
}

func align(n int) int { return (n + alignment - 1) &^ (alignment - 1) }

// appendRecord appends the encoding of one record of segment seq to buf and
// returns the extended buffer. The caller checks typ and len(payload).
func appendRecord(buf []byte, seq uint64, typ Type, payload []byte) []byte {
	start := len(buf)
	n := int(recordSize(len(payload)))
	buf = slices.Grow(buf, n)[:start+n]
	rec := buf[start:]
	rec[4] = byte(len(payload))
	rec[5] = byte(len(payload) >> 8)
	rec[6] = byte(len(payload) >> 16)
	rec[7] = byte(typ)
	copy(rec[headerSize:], payload)
	clear(rec[headerSize+len(payload):]) // padding; buf may hold older bytes
	binary.LittleEndian.PutUint32(rec[0:4], recordCRC(seq, rec[4:8], payload))
	return buf
}

// recordCRC is the CRC-32C of seq (8 bytes little endian), the length and
// type bytes of the header, and the payload.
func recordCRC(seq uint64, lenType []byte, payload []byte) uint32 {
	return crc32.Update(prefixCRC(seq, lenType), castagnoli, payload)
}

// prefixCRC is the CRC-32C of seq (8 bytes little endian) then the 4 bytes
// of lenType. It runs the table byte by byte: handing a stack buffer to
// hash/crc32 would move it to the heap, one allocation per record.
func prefixCRC(seq uint64, lenType []byte) uint32 {
	crc := ^uint32(0)
	for i := range 8 {
		crc = castagnoli[byte(crc)^byte(seq>>(8*i))] ^ crc>>8
	}
	for _, c := range lenType[:4] {
		crc = castagnoli[byte(crc)^c] ^ crc>>8
	}
	return ^crc
}

// payloadLen reads the 24-bit payload length of a header.
func payloadLen(hdr []byte) int {
	return int(hdr[4]) | int(hdr[5])<<8 | int(hdr[6])<<16
}

// decodeRecord decodes the record at the start of b, where b runs to the
// end of the segment's data and seq is the segment's sequence number.
//
// It returns the record's type, payload (a sub-slice of b) and size in
// bytes. A zero header, or fewer than 8 bytes left that are all zero, is
// the end of the records: n == 0 and bad == "". A record that is not valid
// returns n == 0 and bad saying why. decodeRecord never panics, whatever b
// holds.
func decodeRecord(b []byte, seq uint64) (typ Type, payload []byte, n int, bad string) {
	if len(b) < headerSize {
		if isZero(b) {
			return 0, nil, 0, ""
		}
		return 0, nil, 0, "truncated record header"
	}
	hdr := b[:headerSize]
	if binary.LittleEndian.Uint64(hdr) == 0 {
		return 0, nil, 0, ""
	}
	typ = Type(hdr[7])
	if typ == typeEnd {
		return 0, nil, 0, "record type 0 in a nonzero header"
	}
	length := payloadLen(hdr)
	size := recordSize(length)
	if size > int64(len(b)) {
		return 0, nil, 0, "record length runs past the end of the segment"
	}
	payload = b[headerSize : headerSize+length]
	if !isZero(b[headerSize+length : size]) {
		return 0, nil, 0, "nonzero padding after the payload"
	}
	if binary.LittleEndian.Uint32(hdr[0:4]) != recordCRC(seq, hdr[4:8], payload) {
		return 0, nil, 0, "checksum mismatch"
	}
	return typ, payload, int(size), ""
}

// isZero reports whether every byte of b is zero.
func isZero(b []byte) bool {
	for len(b) >= 8 {
		if binary.LittleEndian.Uint64(b) != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// zeroEnd returns the smallest multiple of 8 (at most len(b) rounded up)
// such that every byte of b from there on is zero.
func zeroEnd(b []byte) int {
	i := len(b)
	for i > 0 && b[i-1] == 0 {
		i--
		// Skip whole zero words quickly once aligned.
		for i >= 8 && i%8 == 0 && binary.LittleEndian.Uint64(b[i-8:i]) == 0 {
			i -= 8
		}
	}
	return align(i)
}
