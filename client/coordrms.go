package client

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tandem-tx/tandem/api"
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

// coordinatorRMs remembers the coordinator's answer.
type coordinatorRMs struct {
	probe sync.Mutex                      // one Health call at a time; TryLock: callers never wait for it
	known atomic.Pointer[map[string]bool] // nil: never answered
	next  atomic.Int64                    // unix nanoseconds before which a miss is not asked again
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
	if m := s.known.Load(); m != nil && (*m)[name] {
		return true, true
	}
	answer := func() (bool, bool) {
		if m := s.known.Load(); m != nil {
			return (*m)[name], true
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
	h, err := ep.api.Health(ctx, &api.HealthRequest{})
	if err != nil {
		c.warn("could not ask the coordinator which resource managers it recovers; commit points go on without it", "coordinator", ep.addr, "error", err)
		return answer()
	}
	if len(h.GetRms()) > 0 {
		m := make(map[string]bool, len(h.GetRms()))
		for _, r := range h.GetRms() {
			m[r.GetName()] = true
		}
		s.known.Store(&m)
	}
	return answer()
}
