package client

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// A commit point's transaction calls no coordinator, yet a coordinator's
// in-doubt scan is what settles its prepared branches if the client dies,
// reading the commit point's decision table: it scans only the resource
// managers it knows, by name. A branch prepared on an RM it does not know
// would wait for an operator, and the commit point's 'C' row could be swept
// as an orphan's before anyone found the branch. So before preparing under
// a commit point, the client asks the coordinator once (Health) which RMs
// it knows, and refuses a transaction that writes one it does not.

// rmProbeAgain is how long a negative or failed answer is kept.
const rmProbeAgain = 5 * time.Second

// A coordinator that knows an RM but cannot reach it (a wrong password in
// its --rm DSN: Health says reachable=false) could not recover the
// transaction's branches there either, were this process to die: the
// commit point still decides (the branches are recovered once the
// coordinator reaches the RM), but the client warns (at most once per
// unrecoverableWarnEvery) and counts it (Stats.UnrecoverableDecisions).

// unrecoverableWarnEvery bounds the warnings about an RM the coordinator
// cannot reach.
const unrecoverableWarnEvery = 10 * time.Second

// coordinatorRMs remembers the coordinator's answer.
type coordinatorRMs struct {
	probe sync.Mutex                        // one Health call at a time; TryLock: callers never wait for it
	known atomic.Pointer[map[string]string] // RM → "" when the coordinator reaches it, else why not; nil: never answered
	next  atomic.Int64                      // unix nanoseconds before which a miss is not asked again
	// unrecoverable counts commit-point decisions made while the
	// coordinator said it could not reach one of the transaction's RMs;
	// warned is when that was last logged (unix nanoseconds).
	unrecoverable atomic.Uint64
	warned        atomic.Int64
}

// coordinatorKnows reports whether the coordinator recovers the RM name.
// asked is false when the client has no coordinator or it could not be
// asked (unreachable, another goroutine asking): the commit point, which
// needs no coordinator to commit, then goes on.
func (c *Client) coordinatorKnows(ctx context.Context, name string) (known, asked bool) {
	if c.coords == nil {
		return false, false
	}
	s := &c.coordRMs
	if m := s.known.Load(); m != nil {
		if why, ok := (*m)[name]; ok && why == "" {
			return true, true
		}
	}
	answer := func() (bool, bool) {
		if m := s.known.Load(); m != nil {
			_, ok := (*m)[name]
			return ok, true
		}
		return false, false
	}
	if time.Now().UnixNano() < s.next.Load() || !s.probe.TryLock() {
		return answer()
	}
	defer s.probe.Unlock()
	defer func() { s.next.Store(time.Now().Add(rmProbeAgain).UnixNano()) }()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	ep := c.coords.cur.Load()
	h, err := ep.health(ctx)
	if err != nil {
		c.warn("could not ask the coordinator which resource managers it recovers; commit points go on without it", "coordinator", ep.addr, "error", err)
		return answer()
	}
	if len(h.GetRms()) > 0 {
		m := make(map[string]string, len(h.GetRms()))
		for _, r := range h.GetRms() {
			why := ""
			if !r.GetReachable() {
				why = r.GetError()
				if why == "" {
					why = "unreachable"
				}
			}
			m[r.GetName()] = why
		}
		s.known.Store(&m)
	}
	return answer()
}

// noteUnrecoverable is called when a commit point is about to decide a
// transaction that writes the RMs names: if the coordinator said it cannot
// reach one, the decision is counted (once) and (rate-limited) a warning
// says so.
func (c *Client) noteUnrecoverable(g string, names []string) {
	s := &c.coordRMs
	m := s.known.Load()
	if m == nil {
		return
	}
	var name, why string
	for _, n := range names {
		if w := (*m)[n]; w != "" {
			name, why = n, w
			break
		}
	}
	if name == "" {
		return
	}
	s.unrecoverable.Add(1)
	now := time.Now().UnixNano()
	if last := s.warned.Load(); now-last >= int64(unrecoverableWarnEvery) && s.warned.CompareAndSwap(last, now) {
		c.warn("the coordinator cannot reach resource manager "+name+", so it could not recover this transaction's branch there if this process died now; "+
			"the commit point decides anyway (the branch waits until the coordinator reaches it): fix the coordinator's --rm "+name+" DSN",
			"rm", name, "coordinator_says", why, "gtrid", g, "decisions_so_far", s.unrecoverable.Load())
	}
}
