package client

import (
	"context"
	"time"

	"github.com/tandem-tx/tandem/internal/decision"
	"github.com/tandem-tx/tandem/xid"
)

// Forgetting decision rows: once every prepared branch of a gtrid is
// committed on a verified connection, its 'C' row is deleted, in batches,
// no earlier than decision.ForgetMinAge after it was written.

// Forget batching: the rows of committed gtrids are deleted once at least
// forgetBatch are old enough, at most forgetMax at a time. A row waits
// forgetAfter (35 s) in the queue, so the queue holds 35 s of commits:
// forgetKeep bounds it (40 bytes a row: 21 MB) far above that at any rate
// a process reaches (15,000 commits a second); past it the newest are not
// queued (the coordinator's sweep deletes those rows) — dropping the
// oldest instead would drop every row before it is old enough.
const (
	forgetBatch = 32
	forgetMax   = 256
	forgetKeep  = 1 << 19
)

// forgetLater queues g's decision row for deletion. With the RM's pool, a
// full batch is deleted in the background, in its own autocommit statement:
// off the commit path, and holding no lock inside an application's
// transaction (a DELETE carried by the commit point's transaction cost
// about a fifth of the throughput at 32 threads on MariaDB). Without a pool
// the next commit on the RM carries the batch.
func (c *Client) forgetLater(info *rmInfo, g xid.GTRID) {
	s := &info.cp
	s.addForget(g)
	if info.db == nil {
		return
	}
	s.mu.Lock()
	start := !s.forgetting && len(s.forget) >= forgetBatch && !s.forgetAt[forgetBatch-1].After(time.Now().Add(-forgetAfter))
	if start {
		s.forgetting = true
	}
	s.mu.Unlock()
	if start {
		go c.forgetRows(info)
	}
}

// forgetRows deletes full batches of decided rows through info's pool
// until fewer than a batch are pending. A failed delete gives the batch
// back (a later one tries again; the coordinator's sweep is the backstop).
func (c *Client) forgetRows(info *rmInfo) {
	s := &info.cp
	defer func() {
		s.mu.Lock()
		s.forgetting = false
		s.mu.Unlock()
	}()
	for {
		gs := s.takeForget(time.Now())
		if gs == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := decision.Forget(ctx, info.db, info.dialect.Driver(), gs)
		cancel()
		if err != nil {
			s.giveBack(gs)
			c.warn("deleting decided rows from the decision table failed; will try again with the next batch", "rm", info.name, "rows", len(gs), "error", err)
			return
		}
	}
}

// forgetAfter is how long after a gtrid is queued its row may be deleted:
// the database deletes no 'C' row younger than decision.ForgetMinAge by its
// own clock; the margin covers the clocks' difference.
const forgetAfter = decision.ForgetMinAge + 5*time.Second

// takeForget returns at most forgetMax queued gtrids queued at least
// forgetAfter before now, if there are at least forgetBatch of them.
func (s *cpState) takeForget(now time.Time) []xid.GTRID {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for n < len(s.forget) && n < forgetMax && !s.forgetAt[n].After(now.Add(-forgetAfter)) {
		n++
	}
	if n < forgetBatch {
		return nil
	}
	out := append([]xid.GTRID(nil), s.forget[:n]...)
	s.forget, s.forgetAt = s.forget[n:], s.forgetAt[n:]
	return out
}

// giveBack queues gs again (taken, then not deleted), ahead of the others.
func (s *cpState) giveBack(gs []xid.GTRID) {
	if len(gs) == 0 {
		return
	}
	s.mu.Lock()
	s.forget = append(append([]xid.GTRID(nil), gs...), s.forget...)
	s.forgetAt = append(make([]time.Time, len(gs)), s.forgetAt...) // old enough already
	s.mu.Unlock()
}

func (s *cpState) addForget(g xid.GTRID) {
	s.mu.Lock()
	if len(s.forget) < forgetKeep {
		s.forget, s.forgetAt = append(s.forget, g), append(s.forgetAt, time.Now())
	}
	s.mu.Unlock()
}
