package coord

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tandem-tx/tandem/internal/wal"
	"github.com/tandem-tx/tandem/waits"
	"github.com/tandem-tx/tandem/xid"
)

// Admission control of new COMMIT decisions (docs/architecture.md, "The
// decision log"; docs/field-reports.md §5, MSDTC's circular log).
//
// "In use" counts the bytes of the live segments plus an END record (32
// bytes) for every unfinished decision: those are owed, and must fit when
// phase 2 catches up.
//
//   - Below 80% of LogSize in use, a Commit is admitted at once.
//   - From 80%: throttled. The Commit asks for a checkpoint first (which may
//     free segments) and waits for it, then waits a small delay that grows
//     with the fill, from 1 ms at 80% to 50 ms at the refusal mark: enough
//     to let phase 2 and the checkpoints catch up when commits come faster
//     than phase 2 finishes them, not a sleep that gathers a batch. The wait
//     is the wait event "log space throttle"; a warning says so in the log
//     at most every 10 s.
//   - From LogSize minus the reserve (10%) after that checkpoint: refused
//     with a *LogFullError (ErrLogFull), which names what holds the log: the
//     unfinished transactions, the oldest one, and the resource manager that
//     has not acknowledged its phase 2. Nothing is written.
//
// New COMMIT decisions are held back as above. ABORTs that anyone who
// reaches the API can cause without a prepared branch — an Abort call for
// an undecided gtrid, a Commit of a too-old gtrid — are refused the same
// way from the refusal mark (not throttled): a flood of them must not grow
// the log past its size. Refusing them is safe: no decision exists, and
// the in-doubt scan rolls back any real prepared branch after the orphan
// timeout. The in-doubt scan's ABORTs, resolve's (written only when a
// branch is found prepared), END and CHECKPOINT records are always
// written: the reserve is for them, and writing them is how the log drains. A Commit for a gtrid that is
// already decided answers the decision, full log or not. A refused Commit
// leaves no trace: the client may roll back its branches or try again.

// ErrLogFull matches the error of a Commit refused because the decision log
// has no room. Nothing was written: no decision exists for the gtrid.
var ErrLogFull = errors.New("coord: decision log full")

// LogFullError is a Commit refused by admission control. It names what
// holds the log. It matches ErrLogFull.
type LogFullError struct {
	Used, Size int64 // bytes of the log in use (END records owed included), and its size
	Unfinished int   // decisions whose phase 2 has not finished
	Oldest     xid.GTRID
	OldestAge  time.Duration // since the oldest unfinished decision
	RM         string        // a resource manager that has not acknowledged the oldest one's phase 2
	LastError  string        // that resource manager's last phase-2 error
	Remembered int           // decisions remembered in all (finished ones included)
	// Throttled: the caller's deadline ended the wait for room (while the
	// log was past its throttle mark) before the decision could be admitted.
	Throttled bool
}

func (e *LogFullError) Error() string {
	head := fmt.Sprintf("decision log full: %s of %s in use", sizeOf(e.Used, e.Size), humanBytes(e.Size))
	if e.Throttled {
		head = fmt.Sprintf("decision log nearly full (%s of %s in use): the commit's deadline ended its wait for room", sizeOf(e.Used, e.Size), humanBytes(e.Size))
	}
	if e.Unfinished == 0 {
		return fmt.Sprintf("%s; no transaction is unfinished, but %d decisions are remembered and kept in the log "+
			"(finished ABORTs for max-txn-age, finished COMMITs for ended-retention); new commits are refused until they expire "+
			"or a checkpoint frees space — raise log_size or lower those retentions; nothing was written", head, e.Remembered)
	}
	who, what := "its END is being written", "phase 2 catches up"
	if e.RM != "" {
		who = fmt.Sprintf("phase 2 not acknowledged by rm %q", e.RM)
		if e.LastError != "" {
			who += " (last error: " + e.LastError + ")"
		}
		what = "phase 2 catches up — check that resource manager"
	}
	return fmt.Sprintf("%s; %d transactions unfinished, oldest %s decided %s ago, %s; new commits are refused until %s; nothing was written",
		head, e.Unfinished, e.Oldest, e.OldestAge.Round(time.Second), who, what)
}

// Is makes errors.Is(err, ErrLogFull) true.
func (e *LogFullError) Is(target error) bool { return target == ErrLogFull }

// sizeOf writes used in the unit humanBytes chooses for size.
func sizeOf(used, size int64) string {
	if size >= 1<<20 {
		return fmt.Sprintf("%.1f", float64(used)/(1<<20))
	}
	return fmt.Sprintf("%.1f", float64(used)/(1<<10))
}

// admission is admission control's state.
type admission struct {
	mu       sync.Mutex
	warned   time.Time     // last "log space throttle" warning
	detail   *LogFullError // cached description of what holds the log
	detailAt time.Time
}

const (
	throttleNum, throttleDen = 8, 10 // throttle from 80% of LogSize
	reserveDen               = 10    // keep 10% for ABORT, END and CHECKPOINT records
	throttleMin              = time.Millisecond
	throttleMax              = 50 * time.Millisecond
	checkpointWaitMax        = time.Second
	throttleWarnEvery        = 10 * time.Second
)

func (c *Coordinator) throttleMark() int64 { return c.opts.LogSize / throttleDen * throttleNum }
func (c *Coordinator) refuseMark() int64   { return c.opts.LogSize - c.opts.LogSize/reserveDen }

// endSize is the size of an END record in the log.
const endSize = 32

// fill is what admission control counts as in use: the live segments, and
// an END record for every unfinished decision.
func (c *Coordinator) fill(u wal.Usage) int64 { return u.Used + endSize*max(c.unfinished.Load(), 0) }

// underPressure reports whether the log is past its throttle mark.
func (c *Coordinator) underPressure(u wal.Usage) bool { return c.fill(u) >= c.throttleMark() }

// admitCommit decides whether a new COMMIT for g may be written now. It
// returns nil (write it), a *LogFullError (refuse; nothing written), or
// ErrClosed. It may wait: see the comment at the top of the file.
func (c *Coordinator) admitCommit(ctx context.Context, g xid.GTRID) error {
	u := c.log.Usage()
	if u.Used > c.opts.LogSize/2 && u.First < u.Current {
		c.requestCheckpoint() // does not wait: the checkpointer runs it
	}
	if !c.underPressure(u) {
		return nil
	}
	start := time.Now()
	c.stats.throttled.Add(1)
	defer c.opts.Waits.SinceTx(waits.LogSpaceThrottle, start, g, "")
	// How long this Commit may wait: until shortly before the caller's
	// deadline, so that the reply still reaches it.
	budget := checkpointWaitMax + throttleMax
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		budget = min(budget, left-min(left/10+5*time.Millisecond, 250*time.Millisecond))
	}
	u = c.checkpointForRoom(ctx, min(budget, checkpointWaitMax), u)
	if c.ctx.Err() != nil {
		return ErrClosed
	}
	if ctx.Err() != nil {
		return c.throttledOut(u)
	}
	if c.fill(u) >= c.refuseMark() {
		c.stats.rejected.Add(1)
		e := c.logFull(u)
		c.warnThrottle(u, e)
		return e
	}
	if !c.underPressure(u) {
		return nil
	}
	// Past the throttle mark, short of the refusal mark: a delay that grows
	// as the log fills.
	f := float64(c.fill(u)-c.throttleMark()) / float64(c.refuseMark()-c.throttleMark())
	delay := throttleMin + time.Duration(f*f*float64(throttleMax-throttleMin))
	if left := budget - time.Since(start); delay > left {
		delay = max(left, 0)
	}
	c.warnThrottle(u, nil)
	if delay > 0 {
		timer := time.NewTimer(delay)
		select {
		case <-timer.C:
		case <-ctx.Done():
		case <-c.ctx.Done():
		}
		timer.Stop()
	}
	if c.ctx.Err() != nil {
		return ErrClosed
	}
	if ctx.Err() != nil {
		return c.throttledOut(u)
	}
	return nil
}

// admitAbort decides whether an ABORT that passes admission (see
// AbortReason.admitted) may be written now: below the refusal mark at
// once; past it after a checkpoint that frees room; else a *LogFullError.
func (c *Coordinator) admitAbort(ctx context.Context) error {
	u := c.log.Usage()
	if c.fill(u) < c.refuseMark() {
		return nil
	}
	u = c.checkpointForRoom(ctx, checkpointWaitMax, u)
	if c.ctx.Err() != nil {
		return ErrClosed
	}
	if c.fill(u) < c.refuseMark() {
		return nil
	}
	c.stats.rejected.Add(1)
	e := c.logFull(u)
	c.warnThrottle(u, e)
	return e
}

// checkpointForRoom asks for a checkpoint and waits for it (at most wait,
// or until ctx ends), unless one that could not free anything finished a
// moment ago; it returns the log's use after it (u when it did not run).
func (c *Coordinator) checkpointForRoom(ctx context.Context, wait time.Duration, u wal.Usage) wal.Usage {
	c.ck.mu.Lock()
	recent := !c.ck.freed && time.Since(c.ck.last) < minCheckpointGap
	c.ck.mu.Unlock()
	if recent || wait <= 0 {
		return u
	}
	done := c.requestCheckpoint()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
	case <-ctx.Done():
	case <-c.ctx.Done():
	}
	return c.log.Usage()
}

// throttledOut is the refusal of a Commit whose caller gave up (its
// context ended) while it was throttled: nothing is written for a client
// that no longer waits for the answer.
func (c *Coordinator) throttledOut(u wal.Usage) error {
	c.stats.rejected.Add(1)
	e := c.logFull(u)
	e.Throttled = true
	return e
}

// warnThrottle logs, at most every throttleWarnEvery, that commits are
// throttled or refused, with the log's use and what holds it.
func (c *Coordinator) warnThrottle(u wal.Usage, refused *LogFullError) {
	c.admit.mu.Lock()
	if time.Since(c.admit.warned) < throttleWarnEvery {
		c.admit.mu.Unlock()
		return
	}
	c.admit.warned = time.Now()
	c.admit.mu.Unlock()
	if refused != nil {
		c.logger.Warn("decision log full: refusing new commits", "used", humanBytes(c.fill(u)), "total", humanBytes(c.opts.LogSize),
			"throttled", c.stats.throttled.Load(), "rejected", c.stats.rejected.Load(), "why", refused.Error())
		return
	}
	c.logger.Warn("log space throttle: new commits are slowed until phase 2 and checkpoints free space",
		"used", humanBytes(c.fill(u)), "total", humanBytes(c.opts.LogSize),
		"percent", fmt.Sprintf("%.0f", 100*float64(c.fill(u))/float64(c.opts.LogSize)), "throttled", c.stats.throttled.Load())
}

// logFull describes what holds the log: the unfinished decisions, the
// oldest one and a resource manager that has not acknowledged its phase 2.
// The walk over every remembered decision is cached for a second: a full
// log refuses many commits.
func (c *Coordinator) logFull(u wal.Usage) *LogFullError {
	used := c.fill(u)
	c.admit.mu.Lock()
	defer c.admit.mu.Unlock()
	if d := c.admit.detail; d != nil && d.Used == used && time.Since(c.admit.detailAt) < time.Second {
		e := *d
		return &e
	}
	e := &LogFullError{Used: used, Size: c.opts.LogSize}
	var oldest *txn
	now := time.Now()
	c.mu.Lock()
	e.Remembered = len(c.txns)
	for _, t := range c.txns {
		if t.deciding != nil || t.ended {
			continue
		}
		e.Unfinished++
		if oldest == nil || t.decidedAt.Before(oldest.decidedAt) {
			oldest = t
		}
	}
	if oldest != nil {
		e.Oldest, e.OldestAge = oldest.gtrid, now.Sub(oldest.decidedAt)
		for _, b := range oldest.branches {
			if b.state == BranchPending {
				e.RM, e.LastError = b.rm, b.lastErr
				if b.lastErr != "" {
					break // prefer a branch that says why
				}
			}
		}
	}
	c.mu.Unlock()
	c.admit.detail, c.admit.detailAt = e, now
	cp := *e
	return &cp
}
