package rm

import (
	"context"
	"sync"
	"time"

	"github.com/tandem-tx/tandem/xid"
)

// preparedScans shares recover scans among concurrent IsPrepared callers, so
// that confirming many branches costs one scan per interval, not one each.
type preparedScans struct {
	mu       sync.Mutex
	last     map[xid.Branch]bool
	lastAt   time.Time // when the last completed scan started
	inflight *scanCall
}

type scanCall struct {
	start time.Time
	done  chan struct{}
	set   map[xid.Branch]bool
	err   error
	// left: the scan failed after the caller that started it left (its
	// context ended); the others go round for a scan of their own.
	left bool
}

// IsPrepared reports whether the database holds b prepared, according to a
// recover scan that started no earlier than since. Callers share scans; a
// scan cut short because the caller that started it left (its context
// ended) fails only that caller: the others scan again.
func (c *Conn) IsPrepared(ctx context.Context, b xid.Branch, since time.Time) (bool, error) {
	for {
		c.scans.mu.Lock()
		if c.scans.last != nil && !c.scans.lastAt.Before(since) {
			ok := c.scans.last[b]
			c.scans.mu.Unlock()
			return ok, nil
		}
		call := c.scans.inflight
		if call == nil {
			call = &scanCall{start: time.Now(), done: make(chan struct{})}
			c.scans.inflight = call
			c.scans.mu.Unlock()
			all, err := c.Recover(ctx)
			call.err, call.left = err, err != nil && ctx.Err() != nil
			if err == nil {
				call.set = make(map[xid.Branch]bool, len(all))
				for _, d := range all {
					call.set[d.Branch] = true
				}
			}
			c.scans.mu.Lock()
			c.scans.inflight = nil
			if err == nil && call.start.After(c.scans.lastAt) {
				c.scans.last, c.scans.lastAt = call.set, call.start
			}
			c.scans.mu.Unlock()
			close(call.done)
		} else {
			c.scans.mu.Unlock()
		}
		select {
		case <-call.done:
		case <-ctx.Done():
			return false, ctx.Err()
		}
		if call.err != nil {
			if call.left && ctx.Err() == nil {
				continue // not this caller's failure: scan again
			}
			return false, call.err
		}
		if !call.start.Before(since) {
			return call.set[b], nil
		}
		// That scan started too early for this caller: go round for a fresh one.
	}
}
