package wal

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkAppend is one committer appending in a loop: every Append pays
// a whole write + fdatasync (sync) or only the hand-off to the writer and
// the encoding (nosync).
func BenchmarkAppend(b *testing.B) {
	for _, sync := range []bool{true, false} {
		for _, size := range []int{64, 512, 4096} {
			b.Run(fmt.Sprintf("sync=%v/size=%d", sync, size), func(b *testing.B) {
				l, _ := openLog(b, Options{Dir: b.TempDir(), NoSync: !sync})
				defer l.Close()
				p := payloadFor(1, size)
				b.ReportAllocs()
				b.SetBytes(int64(size))
				for b.Loop() {
					if _, err := l.Append(1, p); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				reportStats(b, l)
			})
		}
	}
}

// BenchmarkAppendParallel is many committers at once (parallelism ×
// GOMAXPROCS goroutines): group commit shares one fdatasync among every
// record queued while the previous one ran.
func BenchmarkAppendParallel(b *testing.B) {
	for _, sync := range []bool{true, false} {
		for _, par := range []int{1, 8, 32, 128} {
			b.Run(fmt.Sprintf("sync=%v/committers=%dxGOMAXPROCS", sync, par), func(b *testing.B) {
				l, _ := openLog(b, Options{Dir: b.TempDir(), NoSync: !sync})
				defer l.Close()
				p := payloadFor(1, 144) // the size of a decision record
				b.ReportAllocs()
				b.SetParallelism(par)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := l.Append(1, p); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.StopTimer()
				reportStats(b, l)
			})
		}
	}
}

func reportStats(b *testing.B, l *Log) {
	st := l.Stats()
	if st.Appends == 0 {
		return
	}
	b.ReportMetric(float64(st.Fsyncs)/float64(st.Appends), "fsyncs/append")
	b.ReportMetric(float64(st.Appends)/float64(st.Batches), "records/batch")
}

// BenchmarkTailScan measures the search for a valid record after a bad one
// in 8 MiB of garbage whose headers claim long payloads: the worst case of
// Open's torn-tail check.
func BenchmarkTailScan(b *testing.B) {
	rng := rand.New(rand.NewPCG(7, 8))
	buf := make([]byte, 64<<20)
	for i := range 8 << 20 {
		buf[i] = byte(rng.Uint32())
	}
	b.SetBytes(8 << 20)
	for b.Loop() {
		if off := findValidRecord(buf, 1, 0, zeroEnd(buf)); off != -1 {
			b.Fatalf("found a valid record in random bytes at %d", off)
		}
	}
}
