package server

import (
	"sync"
	"time"
)

// everyCache answers from one read of a costly source for a period: a read
// that walks every transaction the coordinator remembers under the lock
// every Commit takes (GET /unfinished, open to every local user on a
// loopback listener) runs at most once per every, however many ask and
// however fast. Concurrent askers share a read; no answer is older than
// every.
type everyCache[T any] struct {
	every time.Duration
	read  func() T
	mu    sync.Mutex // held during a read: askers meanwhile wait and share it
	at    time.Time  // when the kept value was read; zero: none yet
	v     T
}

// get returns a value read at most every ago.
func (c *everyCache[T]) get() T {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() || time.Since(c.at) >= c.every {
		start := time.Now()
		c.v, c.at = c.read(), start
	}
	return c.v
}
