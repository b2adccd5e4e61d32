package wal

import (
	"hash/crc32"
	"sync"
)

// CRC-32C arithmetic that lets the tail scan check a record's checksum in
// O(log n) from prefix checksums instead of rereading its payload. The
// method is zlib's crc32_combine: appending n zero bits to a message
// multiplies its raw CRC register by x^n modulo the polynomial.

const castagnoliReflected = 0x82f63b78 // crc32.Castagnoli, bit-reversed

// x2n[k] is x^(2^k) modulo the polynomial, in reflected form.
var x2n = func() (t [64]uint32) {
	p := uint32(1) << 30 // x^1
	t[0] = p
	for k := 1; k < len(t); k++ {
		p = multModP(p, p)
		t[k] = p
	}
	return t
}()

// multModP returns a*b modulo the polynomial (reflected form).
func multModP(a, b uint32) uint32 {
	var p uint32
	for m := uint32(1) << 31; m != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
		}
		if b&1 != 0 {
			b = b>>1 ^ castagnoliReflected
		} else {
			b >>= 1
		}
	}
	return p
}

// xPow8nSlow returns x^(8n) modulo the polynomial by squaring; n < 2^60.
func xPow8nSlow(n uint64) uint32 {
	p := uint32(1) << 31 // x^0
	for k := 3; n != 0; n, k = n>>1, k+1 {
		if n&1 != 0 {
			p = multModP(x2n[k], p)
		}
	}
	return p
}

// x8nTable[k][d] is x^(8 * d * 256^k) modulo the polynomial.
var x8nTable = sync.OnceValue(func() *[8][256]uint32 {
	var t [8][256]uint32
	for k := range t {
		t[k][0] = 1 << 31
		step := xPow8nSlow(1 << (8 * k))
		for d := 1; d < 256; d++ {
			t[k][d] = multModP(t[k][d-1], step)
		}
	}
	return &t
})

// xPow8n returns x^(8n) modulo the polynomial: the factor that shifts a CRC
// register past n bytes. It takes one table look-up per nonzero byte of n.
func xPow8n(n int64) uint32 {
	t := x8nTable()
	p := uint32(1) << 31
	for k := 0; n != 0; k, n = k+1, n>>8 {
		if d := byte(n); d != 0 {
			p = multModP(t[k][d], p)
		}
	}
	return p
}

// crcCombine returns the CRC-32C of A||B given crc(A), crc(B) and len(B).
func crcCombine(crcA, crcB uint32, lenB int64) uint32 {
	return multModP(xPow8n(lenB), crcA) ^ crcB
}

// rangeCRC answers "CRC-32C of b[i:j]" for i a multiple of 8 from base, in
// O(log(j-i)), after one pass over b[base:end]. Every byte of b from end
// on must be zero; the table does not cover them.
type rangeCRC struct {
	b      []byte
	base   int
	end    int      // multiple of 8 from base; b[end:] is all zero
	prefix []uint32 // prefix[k] = crc(b[base : base+8k])
}

func newRangeCRC(b []byte, base, end int) *rangeCRC {
	r := &rangeCRC{b: b, base: base, end: end, prefix: make([]uint32, (end-base)/8+1)}
	var c uint32
	for k := 1; k < len(r.prefix); k++ {
		i := base + 8*(k-1)
		c = crc32.Update(c, castagnoli, b[i:i+8])
		r.prefix[k] = c
	}
	return r
}

// upTo returns crc(b[base:j]) for base <= j <= len(b).
func (r *rangeCRC) upTo(j int) uint32 {
	if j <= r.end {
		k := (j - r.base) / 8
		return crc32.Update(r.prefix[k], castagnoli, r.b[r.base+8*k:j])
	}
	// b[end:j] is zeros: crc(A||zeros(n)) = ^(^crc(A) * x^(8n)).
	return ^multModP(xPow8n(int64(j-r.end)), ^r.prefix[len(r.prefix)-1])
}

// crc returns crc(b[i:j]) for i a multiple of 8 from base, i <= end, i <= j.
func (r *rangeCRC) crc(i, j int) uint32 {
	// crc(A||B) = crcCombine(crc(A), crc(B), len(B)), solved for crc(B).
	return r.upTo(j) ^ multModP(xPow8n(int64(j-i)), r.prefix[(i-r.base)/8])
}

func crc32Castagnoli(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }
