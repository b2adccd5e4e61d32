package server

import (
	"sync"
	"testing"
	"time"
)

// GET /unfinished walks every transaction the coordinator remembers (with a
// minute of finished ones, hundreds of thousands under load) under the lock
// every Commit takes, and is open to every local user on loopback: however
// many ask, and however fast, the walk runs at most once per its period;
// concurrent askers share it; an answer is never older than the period.
func TestEveryCacheReadsAtMostOncePerPeriod(t *testing.T) {
	var mu sync.Mutex
	reads := 0
	c := &everyCache[int]{every: 100 * time.Millisecond, read: func() int {
		mu.Lock()
		defer mu.Unlock()
		reads++
		return reads
	}}
	start := time.Now()
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				_ = c.get()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	mu.Lock()
	got := reads
	mu.Unlock()
	allowed := int(elapsed/c.every) + 1
	t.Logf("1600 gets in %v: %d reads (at most %d allowed)", elapsed, got, allowed)
	if got < 1 || got > allowed {
		t.Fatalf("1600 gets in %v made %d reads, want 1 to %d (one per %v)", elapsed, got, allowed, c.every)
	}
	// Once the period has passed, the next get reads afresh.
	time.Sleep(c.every + 10*time.Millisecond)
	if v := c.get(); v != got+1 {
		t.Fatalf("a get after the period answered read %d, want a fresh read %d", v, got+1)
	}
}
