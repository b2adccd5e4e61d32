package wal

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestRecordRoundTrip(t *testing.T) {
	for n := 0; n <= 70; n++ {
		for _, seq := range []uint64{1, 7, 1 << 40} {
			typ := Type(1 + n%254)
			p := payloadFor(n, n)
			b := appendRecord([]byte{0xAA}, seq, typ, p)[1:] // not at offset 0 of buf
			if len(b)%8 != 0 || int64(len(b)) != recordSize(n) {
				t.Fatalf("n=%d: encoded %d bytes, want %d (a multiple of 8)", n, len(b), recordSize(n))
			}
			if !isZero(b[headerSize+n:]) {
				t.Fatalf("n=%d: padding not zero: %x", n, b[headerSize+n:])
			}
			gt, gp, size, bad := decodeRecord(append(b, make([]byte, 16)...), seq)
			if bad != "" || size != len(b) || gt != typ || !bytes.Equal(gp, p) {
				t.Fatalf("n=%d seq=%d: decode = (%d, %x, %d, %q), want (%d, %x, %d, \"\")", n, seq, gt, gp, size, bad, typ, p, len(b))
			}
			if _, _, _, bad := decodeRecord(b, seq+1); bad != "checksum mismatch" {
				t.Fatalf("n=%d: record decoded in another segment: bad=%q", n, bad)
			}
		}
	}
}

func TestDecodeRecordBad(t *testing.T) {
	const seq = 3
	valid := appendRecord(nil, seq, 9, []byte("hello")) // 8 + 5 + 3 padding
	mod := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(valid)) }
	tests := []struct {
		name string
		b    []byte
		bad  string // "" with n == 0: end of records
	}{
		{"zero header", make([]byte, 16), ""},
		{"empty", nil, ""},
		{"short zero", make([]byte, 5), ""},
		{"short nonzero", []byte{0, 0, 1}, "truncated record header"},
		{"type 0", mod(func(b []byte) []byte { b[7] = 0; return b }), "record type 0"},
		{"length past end", mod(func(b []byte) []byte { b[4] = 200; return b }), "runs past the end"},
		{"length past end by one word", valid[:8], "runs past the end"},
		{"nonzero padding", mod(func(b []byte) []byte { b[15] = 1; return b }), "nonzero padding"},
		{"payload bit", mod(func(b []byte) []byte { b[9] ^= 4; return b }), "checksum mismatch"},
		{"crc bit", mod(func(b []byte) []byte { b[0] ^= 1; return b }), "checksum mismatch"},
		{"type changed", mod(func(b []byte) []byte { b[7] = 10; return b }), "checksum mismatch"},
		{"length changed", mod(func(b []byte) []byte { b[4] = 4; return b }), ""}, // padding check or crc
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, n, bad := decodeRecord(tt.b, seq)
			if n != 0 {
				t.Fatalf("decoded a %d-byte record from damaged input", n)
			}
			if tt.name == "length changed" {
				if bad == "" {
					t.Fatal("damaged length reads as end of records")
				}
				return
			}
			if !strings.Contains(bad, tt.bad) || (tt.bad == "") != (bad == "") {
				t.Fatalf("bad = %q, want %q", bad, tt.bad)
			}
		})
	}
}

func TestSegmentHeader(t *testing.T) {
	b := appendSegmentHeader(nil, 42, 0)
	if len(b) != segmentHeaderSize {
		t.Fatalf("segment header is %d bytes, want %d", len(b), segmentHeaderSize)
	}
	if _, err := checkSegmentHeader(b, 42, "x"); err != nil {
		t.Fatal(err)
	}
	if string(b[8:16]) != "TANDEMWL" || binary.LittleEndian.Uint16(b[16:18]) != 2 ||
		binary.LittleEndian.Uint16(b[18:20]) != 0 || binary.LittleEndian.Uint64(b[20:28]) != 42 || b[7] != 255 {
		t.Fatalf("segment header layout: %x", b)
	}
	r := appendSegmentHeader(nil, 42, flagRecycled)
	if flags, err := checkSegmentHeader(r, 42, "x"); err != nil || flags != flagRecycled || binary.LittleEndian.Uint16(r[18:20]) != 1 {
		t.Fatalf("recycled segment header: flags %d, %v (%x)", flags, err, r)
	}
}

// TestRangeCRC checks the prefix-CRC arithmetic against hash/crc32 on
// random ranges, inside the table and reaching into the zero tail.
func TestRangeCRC(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, 1<<16)
	for i := range 1 << 13 { // nonzero start, zero tail
		b[i] = byte(rng.Uint32())
	}
	base := 64
	r := newRangeCRC(b, base, zeroEnd(b))
	for range 2000 {
		i := base + 8*rng.IntN((zeroEnd(b)-base)/8+1)
		j := i + rng.IntN(len(b)-i+1)
		if got, want := r.crc(i, j), crc32.Checksum(b[i:j], castagnoli); got != want {
			t.Fatalf("crc(b[%d:%d]) = %08x, want %08x", i, j, got, want)
		}
	}
	x, y := []byte("decision"), []byte(" log, combined")
	if got, want := crcCombine(crc32Castagnoli(x), crc32Castagnoli(y), int64(len(y))), crc32Castagnoli(append(x, y...)); got != want {
		t.Fatalf("crcCombine = %08x, want %08x", got, want)
	}
}

// naiveFindValid is findValidRecord's definition: decodeRecord at every
// aligned offset.
func naiveFindValid(b []byte, seq uint64, from int) int {
	for off := from; off+headerSize <= len(b); off += alignment {
		typ, _, n, _ := decodeRecord(b[off:], seq)
		if n > 0 && typ != typeSegmentHeader {
			return off
		}
	}
	return -1
}

func TestFindValidRecord(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const seq = 5
	for iter := range 300 {
		b := make([]byte, 8*(64+rng.IntN(4096)))
		garbage := 8 * rng.IntN(len(b)/8)
		for i := range garbage {
			b[i] = byte(rng.Uint32())
			if rng.IntN(4) == 0 {
				b[i] = 0
			}
		}
		if iter%3 != 0 { // plant a valid record, small or large
			n := rng.IntN(300)
			if iter%2 == 0 {
				n = 5000 + rng.IntN(5000)
			}
			r := appendRecord(nil, seq, Type(1+rng.IntN(254)), payloadFor(iter, n))
			if len(r) < len(b) {
				at := 8 * rng.IntN((len(b)-len(r))/8+1)
				copy(b[at:], r)
			}
		}
		from := 8 * rng.IntN(len(b)/8)
		want := naiveFindValid(b, seq, from)
		for _, direct := range []int{0, 4096, 1 << 30} {
			if got := findValidRecordN(b, seq, from, zeroEnd(b), direct, nil); got != want {
				t.Fatalf("iter %d direct=%d: found %d, want %d", iter, direct, got, want)
			}
		}
	}
}

func TestZeroEnd(t *testing.T) {
	for n := 0; n <= 64; n++ {
		for last := -1; last < n; last++ {
			b := make([]byte, n)
			if last >= 0 {
				b[last] = 1
			}
			if got, want := zeroEnd(b), align(last+1); got != want {
				t.Fatalf("zeroEnd(len %d, last nonzero %d) = %d, want %d", n, last, got, want)
			}
		}
	}
}

func TestXPow8n(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for range 1000 {
		n := rng.Int64N(1 << 40)
		if got, want := xPow8n(n), xPow8nSlow(uint64(n)); got != want {
			t.Fatalf("xPow8n(%d) = %08x, want %08x", n, got, want)
		}
	}
	if prefixCRC(0x0102030405060708, []byte{9, 10, 11, 12}) != crc32Castagnoli([]byte{8, 7, 6, 5, 4, 3, 2, 1, 9, 10, 11, 12}) {
		t.Fatal("prefixCRC disagrees with hash/crc32")
	}
}
