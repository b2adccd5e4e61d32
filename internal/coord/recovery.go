package coord

import (
	"context"
	"time"

	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/xid"
)

// scanLoop scans every resource manager for in-doubt branches at start and
// every ScanInterval, and forgets ended transactions past their retention.
// About every sweepEvery, the scan is a sweep of the decision tables
// (sweepOnce), which scans too; while a sweep's pass over a table has pages
// left, every scan is a sweep.
func (c *Coordinator) scanLoop() {
	defer c.wg.Done()
	ticker := time.NewTicker(c.opts.ScanInterval)
	defer ticker.Stop()
	var lastSweep time.Time
	passGoesOn := false
	for started := false; ; started = true {
		// With manualScans only the first pass scans by itself: the others
		// wait for a request (each request is served in the select).
		if !started || !c.opts.manualScans {
			if passGoesOn || time.Since(lastSweep) >= sweepEvery {
				lastSweep = time.Now()
				passGoesOn = c.sweepOnce().PassGoesOn
			} else {
				c.scanOnce()
			}
			c.forgetExpired()
		}
		tick, due := ticker.C, c.cpDue()
		if c.opts.manualScans {
			tick, due = nil, nil
		}
		select {
		case <-c.ctx.Done():
			return
		case <-tick:
		case <-due: // commit-point branches waiting (cprecover.go)
		case ack := <-c.scanNow:
			c.scanOnce()
			close(ack)
		case reply := <-c.sweepNow:
			lastSweep = time.Now()
			st := c.sweepOnce()
			passGoesOn = st.PassGoesOn && !c.opts.manualScans
			reply <- st
		}
	}
}

// ScanNow runs one in-doubt scan of every resource manager and returns when
// it finished (tests and `tandem recover`).
func (c *Coordinator) ScanNow(ctx context.Context) error {
	ack := make(chan struct{})
	select {
	case c.scanNow <- ack:
	case <-ctx.Done():
		return ctx.Err()
	case <-c.ctx.Done():
		return ErrClosed
	}
	select {
	case <-ack:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// misconfigEvery is how often the scan repeats that an RM is misconfigured.
const misconfigEvery = time.Minute

// scanOnce settles what the resource managers hold prepared:
//   - decided, with a running phase-2 driver that knows the branch: left to it;
//   - decided otherwise: settled per the decision here;
//   - undecided: remembered as first seen now; once older than OrphanTimeout,
//     ABORT is written durably, then the branch is rolled back;
//   - named with a commit point: settled per the commit point's decision
//     table, never decided in this log (cprecover.go), several at once.
//
// It returns the gtrids with a branch prepared on some RM, and whether
// every RM answered (complete): the sweep of the decision tables needs a
// complete scan.
func (c *Coordinator) scanOnce() (prepared map[xid.GTRID]bool, complete bool) {
	now := time.Now()
	stillThere := map[xid.Branch]bool{}
	prepared, complete = map[xid.GTRID]bool{}, true
	var cps []rm.InDoubt
	var unread []string
	for _, name := range c.rmList {
		ctx, cancel := context.WithTimeout(c.ctx, phase2CallTimeout)
		found, err := c.recoverRM(ctx, name)
		cancel()
		if err != nil {
			complete = false
			unread = append(unread, name)
			if merr := c.rms[name].Misconfigured(); merr != nil && c.ctx.Err() == nil {
				if now.Sub(c.misconfigSaid[name]) >= misconfigEvery {
					if c.misconfigSaid == nil {
						c.misconfigSaid = map[string]time.Time{}
					}
					c.misconfigSaid[name] = now
					c.logger.Error("resource manager misconfigured: commits that involve it are refused until it is fixed (said again every minute while it lasts)", "rm", name, "error", merr)
				}
			} else if c.ctx.Err() == nil {
				c.logger.Warn("in-doubt scan failed; will retry", "rm", name, "error", err)
			}
			// Keep this RM's first-seen times: absence of evidence is not evidence.
			c.mu.Lock() // decide deletes from c.seen concurrently
			for b := range c.seen {
				if b.RM == name {
					stillThere[b] = true
				}
			}
			for b := range c.cpSeen {
				if b.RM == name {
					stillThere[b] = true
				}
			}
			c.mu.Unlock()
			continue
		}
		for _, d := range found {
			stillThere[d.Branch] = true
			prepared[d.Branch.GTRID] = true
			if d.Branch.CommitPoint != "" {
				cps = append(cps, d)
				continue
			}
			c.settleInDoubt(d, now)
		}
	}
	c.settleCPBranches(cps, now)
	c.mu.Lock()
	for b := range c.seen {
		if !stillThere[b] {
			delete(c.seen, b)
		}
	}
	for b := range c.cpSeen {
		if !stillThere[b] {
			delete(c.cpSeen, b)
		}
	}
	c.lastScan = scanRecord{Started: now, Unread: unread}
	c.mu.Unlock()
	return prepared, complete && c.ctx.Err() == nil
}

func (c *Coordinator) settleInDoubt(d rm.InDoubt, now time.Time) {
	b := d.Branch
	if b.CommitPoint != "" {
		// Its outcome is the row for the gtrid in the commit point's
		// decision table, committed (or not) by the commit point's own
		// transaction: this log knows nothing of it, and nothing is written
		// to it. Presuming abort here could roll back a branch whose commit
		// point committed; and a decision of this coordinator for the same
		// gtrid (a confused or hostile client) names other branches, never
		// this one.
		c.mu.Lock()
		first, logged := c.cpSeen[b]
		if !logged {
			c.cpSeen[b], first = now, now
		}
		c.mu.Unlock()
		if !logged {
			c.logger.Info("prepared branch whose commit point is "+b.CommitPoint+": settled by the commit point's decision table",
				"commit_point", b.CommitPoint, "gtrid", b.GTRID.String(), "rm", b.RM)
		}
		c.settleCommitPoint(b, first, now)
		return
	}
	if c.owned(b) == ReasonForeign {
		// Another cluster's: its coordinator decides it, whatever this
		// log holds for the gtrid. Listed (InDoubt), never touched.
		c.mu.Lock()
		_, known := c.seen[b]
		if !known {
			c.seen[b] = now
		}
		c.mu.Unlock()
		if !known {
			c.logger.Warn("IN DOUBT: a prepared branch owned by another coordinator cluster; it is never settled here (listed by tandem status --in-doubt); its own coordinator settles it, or an operator with tandem resolve",
				"gtrid", b.GTRID.String(), "rm", b.RM, "owner", b.Owner.String(), "age", now.Sub(b.GTRID.Time()).Round(time.Second))
		}
		return
	}
	c.mu.Lock()
	t := c.txns[b.GTRID]
	switch {
	case t != nil && t.deciding != nil:
		c.mu.Unlock()
		return // being decided right now
	case t != nil:
		// Decided. Make sure a driver settles this branch.
		if t.addBranches([]BranchRef{{RM: b.RM}}) || t.ended {
			c.reopenTxn(t)
			for _, bp := range t.branches {
				if bp.rm == b.RM {
					bp.state = BranchPending
				}
			}
		}
		c.startPhase2Locked(t, true)
		c.mu.Unlock()
		return
	}
	first, ok := c.seen[b]
	if !ok {
		c.seen[b] = now
		c.mu.Unlock()
		if why := c.holdReason(b); why != "" {
			c.logger.Warn("IN DOUBT: a prepared branch with no decision here that is never presumed aborted ("+why.Describe()+"); listed by tandem status --in-doubt: settle it with tandem resolve",
				"gtrid", b.GTRID.String(), "rm", b.RM, "owner", b.Owner.Short(), "reason", string(why))
		}
		return
	}
	c.mu.Unlock()
	if c.holdReason(b) != "" {
		return // listed by InDoubt; an operator settles it
	}
	if now.Sub(first) < c.opts.OrphanTimeout {
		return
	}
	c.logger.Warn("aborting an orphaned prepared branch", "gtrid", b.GTRID.String(), "rm", b.RM, "undecided_for", now.Sub(first).Round(time.Millisecond))
	if _, err := c.decide(context.Background(), b.GTRID, Aborted, AbortOrphan, []BranchRef{{RM: b.RM}}); err != nil {
		c.logger.Error("could not abort orphaned branch", "gtrid", b.GTRID.String(), "rm", b.RM, "error", err)
	}
}

// reopen returns an open channel in place of a closed one.
func reopen(ch chan struct{}) chan struct{} {
	select {
	case <-ch:
		return make(chan struct{})
	default:
		return ch
	}
}

func (c *Coordinator) forgetExpired() {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for g, t := range c.txns {
		if c.expired(t, now) {
			delete(c.txns, g)
		}
	}
}
