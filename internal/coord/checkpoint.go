package coord

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tandem-tx/tandem/internal/failpoint"
	"github.com/tandem-tx/tandem/internal/wal"
)

// The decision log is circular (docs/architecture.md, "The decision log"). A checkpoint
// frees its oldest segments for reuse:
//
//  1. S is the segment being written. Every decision the coordinator still
//     remembers (unfinished, or finished and kept for EndedRetention or
//     MaxTxnAge) whose latest full record lies in a segment below the
//     boundary B <= S is written again, as a CHECKPOINT record (outcome,
//     branches, whether phase 2 ended), with no fdatasync of its own; then
//     one Sync makes them all durable. Decisions being written during the
//     checkpoint are waited for if their record may land below S.
//  2. Release(B): the log may reuse the segments below B.
//
// A crash before step 2 leaves duplicates, which replay accepts; a crash
// inside step 2 may make Open replay some released segments again (see
// package wal, "Circular use"): duplicates again, never a loss.
//
// B is chosen so that the checkpoint pays: the records carried are at most
// half of the bytes released, and they fit in the log next to what is in
// use. When the live segments hold more than half the log and carrying
// everything cannot release them all, finished COMMITs (remembered only so
// that a retried Commit answers from memory, for EndedRetention) are
// forgotten instead of carried if that releases more: the log's size comes
// first. Unfinished decisions and finished ABORTs (which a late Commit must
// find) are always carried. If nothing pays, nothing is written: phase 2
// must catch up first.
//
// The checkpointer runs one when the live segments hold more than half the
// log, when admission control asks, and at Close.

// checkpointer is the state of the checkpointing goroutine.
type checkpointer struct {
	run  sync.Mutex    // one checkpoint at a time
	req  chan struct{} // asks the goroutine for a checkpoint (capacity 1)
	mu   sync.Mutex    // guards next, last and freed
	next chan struct{} // closed when the next checkpoint to start has finished
	last time.Time     // when the last checkpoint finished
	// freed: the last checkpoint released segments. After one that could
	// not (at lastUsed bytes in use), the next waits until the log has
	// grown by a segment or minCheckpointGap has passed: each walks every
	// remembered decision under the coordinator's lock.
	freed    bool
	lastUsed int64
}

func (k *checkpointer) init() {
	k.req = make(chan struct{}, 1)
	k.next = make(chan struct{})
}

// minCheckpointGap is the shortest time between a checkpoint that could not
// free anything and the next one (but Close's).
const minCheckpointGap = 200 * time.Millisecond

// counters are the coordinator's Stats, updated atomically.
type counters struct {
	replayed                     uint64
	checkpoints, carried, forgot atomic.Uint64
	releasedSegs                 atomic.Uint64
	throttled, rejected          atomic.Uint64
}

// Stats are the coordinator's counters since Open and its log's use now.
type Stats struct {
	Replayed     uint64 // records replayed by Open
	Checkpoints  uint64 // checkpoints that released segments
	Carried      uint64 // CHECKPOINT records they wrote
	ForgotEarly  uint64 // finished COMMITs forgotten before EndedRetention to free log space
	ReleasedSegs uint64 // log segments released for reuse
	Throttled    uint64 // Commit calls slowed by admission control (log past 80%)
	Rejected     uint64 // Commit calls refused with ErrLogFull
	Log          wal.Usage
	LogSize      int64
	Remembered   int // decisions in memory
	LogAppends   uint64
	LogRotations uint64
	LogRecycled  uint64 // rotations onto a reused segment file
}

// Stats reports the coordinator's counters.
func (c *Coordinator) Stats() Stats {
	c.mu.Lock()
	n := len(c.txns)
	c.mu.Unlock()
	ls := c.log.Stats()
	return Stats{
		Replayed: c.stats.replayed, Checkpoints: c.stats.checkpoints.Load(), Carried: c.stats.carried.Load(),
		ForgotEarly: c.stats.forgot.Load(), ReleasedSegs: c.stats.releasedSegs.Load(),
		Throttled: c.stats.throttled.Load(), Rejected: c.stats.rejected.Load(),
		Log: c.log.Usage(), LogSize: c.opts.LogSize, Remembered: n,
		LogAppends: ls.Appends, LogRotations: ls.Rotations, LogRecycled: ls.Recycled,
	}
}

// LogSpace reports the decision log's bytes in use, as admission control
// counts them (the live segments, which are not yet reusable, and an END
// record owed by each unfinished decision), and its configured size:
// commits are throttled from 80% of it and refused from 90%. It does no
// I/O (the admin listener's tandem_log_space_* gauges read it).
func (c *Coordinator) LogSpace() (used, limit int64) {
	return c.fill(c.log.Usage()), c.opts.LogSize
}

// Phase2Backlog is the number of decided transactions whose phase 2 has not
// finished on every branch. It does no I/O (tandem_phase2_backlog).
func (c *Coordinator) Phase2Backlog() int { return int(max(c.unfinished.Load(), 0)) }

// checkpointLoop runs checkpoints while the coordinator is open: when the
// live segments hold more than half the log (looked at every
// checkpointEvery), or when admission control asks.
func (c *Coordinator) checkpointLoop() {
	defer c.wg.Done()
	ticker := time.NewTicker(c.opts.checkpointEvery)
	defer ticker.Stop()
	for {
		asked := false
		select {
		case <-c.ctx.Done():
			return
		case <-ticker.C:
		case <-c.ck.req:
			asked = true
		}
		u := c.log.Usage()
		if u.Used <= c.opts.LogSize/2 && !c.underPressure(u) {
			continue // (a request from before the last checkpoint)
		}
		c.ck.mu.Lock()
		wait := minCheckpointGap - time.Since(c.ck.last)
		if c.ck.freed || u.Used-c.ck.lastUsed >= c.opts.SegmentSize {
			wait = 0
		}
		c.ck.mu.Unlock()
		if wait > 0 {
			if !asked {
				continue
			}
			// A full log: commits ask again and again, and one checkpoint
			// per minCheckpointGap answers them all.
			if !c.sleep(wait) {
				return
			}
		}
		if _, err := c.runCheckpoint(false); err != nil {
			c.logger.Error("checkpoint failed; the log cannot release segments until it succeeds", "error", err)
		}
	}
}

// requestCheckpoint asks the checkpointer for a checkpoint and returns a
// channel closed when one that started after this call has finished.
func (c *Coordinator) requestCheckpoint() <-chan struct{} {
	c.ck.mu.Lock()
	ch := c.ck.next
	c.ck.mu.Unlock()
	select {
	case c.ck.req <- struct{}{}:
	default:
	}
	return ch
}

// runCheckpoint runs one checkpoint (closing: the one of Close) and wakes
// those waiting for it. It reports whether it released segments.
func (c *Coordinator) runCheckpoint(closing bool) (freed bool, err error) {
	c.ck.run.Lock()
	defer c.ck.run.Unlock()
	c.ck.mu.Lock()
	done := c.ck.next
	c.ck.next = make(chan struct{})
	c.ck.mu.Unlock()
	used := c.log.Usage().Used
	defer func() {
		c.ck.mu.Lock()
		c.ck.last, c.ck.freed, c.ck.lastUsed = time.Now(), freed, used
		c.ck.mu.Unlock()
		close(done)
	}()
	return c.checkpoint(closing)
}

// survivor is a remembered decision whose record lies below the segment
// being written.
type survivor struct {
	t     *txn
	seg   uint64
	rec   []byte
	size  int64
	endOK bool // a finished COMMIT: may be forgotten instead of carried
}

// checkpoint carries forward the survivors below the chosen boundary and
// releases the segments below it. See the comment at the top of the file.
func (c *Coordinator) checkpoint(closing bool) (bool, error) {
	start := time.Now()
	c.forgetExpired()
	cur := c.log.Segment()
	u := c.log.Usage()
	if u.First >= cur {
		return false, nil
	}
	var survivors []survivor
	for {
		var wait []chan struct{}
		survivors = survivors[:0]
		c.mu.Lock()
		for _, t := range c.txns {
			switch {
			case t.deciding != nil:
				// Its record may still land below cur: wait for it. A
				// decision not yet admitted (seg 0) is written after cur was
				// read, so at cur or later.
				if t.seg != 0 && t.seg < cur {
					wait = append(wait, t.deciding)
				}
			case t.seg < cur:
				cr := t.carried()
				survivors = append(survivors, survivor{t: t, seg: t.seg, rec: cr.encode(), size: carriedSize(cr.rms),
					endOK: t.ended && t.outcome == Committed})
			}
		}
		c.mu.Unlock()
		if len(wait) == 0 {
			break
		}
		for _, ch := range wait {
			<-ch
		}
	}
	bound, forget := c.chooseBoundary(u, cur, survivors, closing)
	if bound <= u.First {
		c.logger.Debug("checkpoint skipped: carrying the decisions still remembered would not free log space",
			"survivors", len(survivors), "log_used", humanBytes(u.Used), "log_size", humanBytes(c.opts.LogSize))
		return false, nil
	}
	// Forget first what is not carried: a finished COMMIT forgotten early is
	// answered by deciding it again, which finds every branch committed.
	var carry []survivor
	forgot := 0
	c.mu.Lock()
	for _, s := range survivors {
		if s.seg >= bound {
			continue
		}
		if forget && s.endOK {
			if c.txns[s.t.gtrid] == s.t && s.t.ended {
				delete(c.txns, s.t.gtrid)
				forgot++
			}
			continue
		}
		carry = append(carry, s)
	}
	c.mu.Unlock()
	segs := make([]uint64, len(carry))
	for i, s := range carry {
		pos, err := c.log.AppendNoWait(recCheckpoint, s.rec)
		if err != nil {
			return false, fmt.Errorf("coord: checkpoint: write: %w", err)
		}
		segs[i] = pos.Segment // a lower bound, at least cur
	}
	if err := failpoint.Inject("checkpoint-after-carry"); err != nil {
		return false, err
	}
	if err := c.log.Sync(); err != nil {
		return false, fmt.Errorf("coord: checkpoint: sync: %w", err)
	}
	c.mu.Lock()
	for i, s := range carry {
		if c.txns[s.t.gtrid] == s.t && s.t.seg < segs[i] {
			s.t.seg = segs[i]
		}
	}
	c.mu.Unlock()
	if err := failpoint.Inject("checkpoint-before-release"); err != nil {
		return false, err
	}
	if err := c.log.Release(bound); err != nil {
		return false, fmt.Errorf("coord: checkpoint: %w", err)
	}
	if c.opts.LogHook != nil {
		c.opts.LogHook.Released(bound)
	}
	if err := failpoint.Inject("checkpoint-after-release"); err != nil {
		return true, err
	}
	after := c.log.Usage()
	c.stats.checkpoints.Add(1)
	c.stats.carried.Add(uint64(len(carry)))
	c.stats.forgot.Add(uint64(forgot))
	c.stats.releasedSegs.Add(after.First - u.First)
	c.logger.Info("checkpoint", "carried", len(carry), "forgot_finished_commits", forgot,
		"released_segments", fmt.Sprintf("%d-%d", u.First, after.First-1),
		"log_used_before", humanBytes(u.Used), "log_used", humanBytes(after.Used), "log_size", humanBytes(c.opts.LogSize),
		"took", time.Since(start).Round(time.Microsecond))
	return true, nil
}

// chooseBoundary returns the highest segment B (u.First < B <= cur) such
// that carrying the survivors below B pays: their records take at most half
// the bytes of the segments released (at Close: less than those bytes), and
// they fit in the log beside what is in use. If carrying every survivor
// cannot release all the segments before cur and the live segments hold
// more than half the log, it tries again without the finished COMMITs
// (forget true). u.First if nothing pays.
func (c *Coordinator) chooseBoundary(u wal.Usage, cur uint64, survivors []survivor, closing bool) (bound uint64, forget bool) {
	n := int(cur - u.First)
	all := make([]int64, n+1)  // all[i]: bytes of survivors in segment u.First+i
	kept := make([]int64, n+1) // the same without the finished COMMITs
	for _, s := range survivors {
		i := 0
		if s.seg > u.First {
			i = int(s.seg - u.First)
		}
		if i >= n {
			continue
		}
		all[i] += s.size
		if !s.endOK {
			kept[i] += s.size
		}
	}
	best := func(bytes []int64) uint64 {
		b := u.First
		var carry int64
		segSize := c.opts.SegmentSize
		for i := 0; i < n; i++ {
			carry += bytes[i]
			released := int64(i+1) * segSize
			pays := 2*carry <= released
			if closing {
				pays = carry < released
			}
			// The records carried are written before the segments are
			// released: they must fit beside what is in use, or at least in
			// part of the reserve (the log may be over its size already,
			// its END records having come in).
			fits := u.Used+carry <= c.opts.LogSize || carry <= c.opts.LogSize/reserveDen/2
			if pays && fits {
				b = u.First + uint64(i+1)
			}
		}
		return b
	}
	if b := best(all); b == cur || u.Used <= c.opts.LogSize/2 {
		return b, false
	}
	bAll, bKept := best(all), best(kept)
	if bKept > bAll {
		return bKept, true
	}
	return bAll, false
}

// humanBytes writes n as KiB or MiB with one decimal.
func humanBytes(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
