package wal

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
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

// BenchmarkDecision is the coordinator's steady state: 64-byte decision
// records through each way in, in each write mode, with real fdatasync,
// from 64 committers (16 × GOMAXPROCS goroutines on 4 CPUs, 32 on 2).
// allocs/op is what one decision costs the garbage collector: 0 once the
// request pool is warm.
func BenchmarkDecision(b *testing.B) {
	calls := []struct {
		name   string
		append func(l *Log, p []byte) error
	}{
		{"Append", func(l *Log, p []byte) error { _, err := l.Append(1, p); return err }},
		{"AppendAsync", func(l *Log, p []byte) error { _, err := l.AppendAsync(1, p); return err }},
		{"AppendNoWait", func(l *Log, p []byte) error { _, err := l.AppendNoWait(1, p); return err }},
	}
	for _, mode := range []struct {
		name   string
		window time.Duration
	}{{"immediate", 0}, {"batch=1ms", time.Millisecond}} {
		for _, call := range calls {
			b.Run(mode.name+"/"+call.name, func(b *testing.B) {
				l, _ := openLog(b, Options{Dir: b.TempDir(), BatchWindow: mode.window})
				defer l.Close()
				p := payloadFor(1, 64)
				b.ReportAllocs()
				b.SetParallelism(32)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := call.append(l, p); err != nil {
							b.Error(err)
							return
						}
					}
				})
				if err := l.Sync(); err != nil {
					b.Fatal(err)
				}
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
