package coord

import (
	"sort"
	"time"
)

// UnfinishedTxn is one decided transaction whose phase 2 has not ended: a
// branch has not acknowledged the decision yet (the coordinator keeps
// retrying it).
type UnfinishedTxn struct {
	GTRID     string
	Outcome   string
	DecidedAt time.Time
	Branches  []BranchReport
}

// Unfinished lists at most limit unfinished transactions, oldest decision
// first, and how many there are in all. It does no I/O; it holds the
// coordinator's lock while it copies, so limit bounds both the answer and
// the copying.
func (c *Coordinator) Unfinished(limit int) (list []UnfinishedTxn, total int) {
	c.mu.Lock()
	var ts []*txn
	for _, t := range c.txns {
		if t.outcome == Undecided || t.deciding != nil || t.ended {
			continue
		}
		ts = append(ts, t)
	}
	total = len(ts)
	sort.Slice(ts, func(i, j int) bool {
		if !ts[i].decidedAt.Equal(ts[j].decidedAt) {
			return ts[i].decidedAt.Before(ts[j].decidedAt)
		}
		return ts[i].gtrid.String() < ts[j].gtrid.String()
	})
	ts = ts[:min(len(ts), max(limit, 0))]
	list = make([]UnfinishedTxn, 0, len(ts))
	for _, t := range ts {
		r := t.report(false)
		list = append(list, UnfinishedTxn{GTRID: t.gtrid.String(), Outcome: r.Outcome.String(), DecidedAt: t.decidedAt, Branches: r.Branches})
	}
	c.mu.Unlock()
	return list, total
}
