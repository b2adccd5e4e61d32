package rm

import (
	"context"
	"sort"
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
	set, err := c.preparedSet(ctx, since)
	return set[b], err
}

// PreparedOf lists the branches of g, under any name (any owner, legacy or
// owned, with a commit point or not), that the database holds prepared
// according to a recover scan that started no earlier than since (shared
// as IsPrepared's).
func (c *Conn) PreparedOf(ctx context.Context, g xid.GTRID, since time.Time) ([]xid.Branch, error) {
	set, err := c.preparedSet(ctx, since)
	if err != nil {
		return nil, err
	}
	var out []xid.Branch
	for b := range set {
		if b.GTRID == g {
			out = append(out, b)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PostgresGID() < out[j].PostgresGID() })
	return out, nil
}

// preparedSet is the set of prepared branches of a recover scan that
// started no earlier than since; it must not be modified.
func (c *Conn) preparedSet(ctx context.Context, since time.Time) (map[xid.Branch]bool, error) {
	for {
		c.scans.mu.Lock()
		if c.scans.last != nil && !c.scans.lastAt.Before(since) {
			set := c.scans.last
			c.scans.mu.Unlock()
			return set, nil
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
			return nil, ctx.Err()
		}
		if call.err != nil {
			if call.left && ctx.Err() == nil {
				continue // not this caller's failure: scan again
			}
			return nil, call.err
		}
		if !call.start.Before(since) {
			return call.set, nil
		}
		// That scan started too early for this caller: go round for a fresh one.
	}
}
