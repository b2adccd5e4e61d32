package coord

import (
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/tandem-tx/tandem/xid"
)

// Outcome is the decision for a global transaction.
type Outcome uint8

// The outcomes of a global transaction.
const (
	Undecided Outcome = iota
	Committed
	Aborted
)

func (o Outcome) String() string {
	switch o {
	case Committed:
		return "COMMITTED"
	case Aborted:
		return "ABORTED"
	}
	return "UNDECIDED"
}

// BranchState is where phase 2 stands on one branch.
type BranchState uint8

const (
	// BranchPending means not acknowledged yet; the coordinator keeps retrying.
	BranchPending BranchState = iota
	// BranchDone means the resource manager acknowledged (or, after a restart, no
	// longer knew the branch: already done).
	BranchDone
	// BranchNotFound means that on the first live attempt the resource manager did not
	// know the branch: it was never prepared there, or someone else settled it.
	BranchNotFound
)

func (s BranchState) String() string {
	switch s {
	case BranchDone:
		return "done"
	case BranchNotFound:
		return "not found"
	}
	return "pending"
}

// txn is the coordinator's memory of one gtrid. Guarded by Coordinator.mu,
// except the channels, which are closed once.
type txn struct {
	gtrid     xid.GTRID
	outcome   Outcome
	reason    AbortReason
	decidedAt time.Time
	// deciding is closed when the decision record is durable (or failed).
	deciding chan struct{}
	branches []*branchProgress
	// done is closed when phase 2 finished on every branch.
	done chan struct{}
	// replyReady is closed when every branch the coordinator itself drives
	// (all but client-settled ones) is settled: a sync Commit replies then.
	replyReady chan struct{}
	driving    bool // a phase-2 driver is running
	ending     bool // its END is being written
	// unsynced: the decision was queued with durability nowait; phase 2
	// must wait until it is on disk.
	unsynced bool
	// takenOver: the client's session-bound branches were taken over
	// (takeOverWhileStandbyLags): the coordinator settles them.
	takenOver bool
	ended     bool
	endedAt   time.Time
	// seg is the decision log segment of the latest record that holds this
	// decision in full (the decision record, or a CHECKPOINT record), or a
	// lower bound of it; 0 while a new decision waits for admission. A
	// checkpoint carries forward every remembered decision whose seg is
	// below the segments it releases.
	seg uint64
	// traceParent is the span of the call that decided (its Commit, Abort
	// or Status), when it records: the parent of phase 2's spans
	// (tracing.go). Nil when the call was not traced.
	traceParent trace.Span
}

type branchProgress struct {
	rm string
	// clientSettles: the client settles this branch on its own session (see
	// api.Branch); the coordinator only confirms, or takes over when the
	// session let go of it.
	clientSettles bool
	state         BranchState
	attempts      uint32
	lastErr       string
	// parked: in its resource manager's retry queue (retry.go), which
	// settles it; a driver leaves it alone.
	parked bool
}

// BranchRef names a branch in a Commit or Abort request.
type BranchRef struct {
	RM            string
	ClientSettles bool
}

func refs(rms []string) []BranchRef {
	out := make([]BranchRef, len(rms))
	for i, r := range rms {
		out[i] = BranchRef{RM: r}
	}
	return out
}

func names(bs []BranchRef) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = b.RM
	}
	return out
}

func newTxn(g xid.GTRID, out Outcome, reason AbortReason, at time.Time, bs []BranchRef) *txn {
	t := &txn{gtrid: g, outcome: out, reason: reason, decidedAt: at, done: make(chan struct{}), replyReady: make(chan struct{})}
	t.addBranches(bs)
	t.checkReplyReady()
	return t
}

func newDecided(d decision, out Outcome) *txn {
	return newTxn(d.gtrid, out, d.reason, d.decidedAt, refs(d.rms))
}

// addBranches adds branches not yet known; it reports whether any was new.
func (t *txn) addBranches(bs []BranchRef) bool {
	added := false
next:
	for _, r := range bs {
		for _, b := range t.branches {
			if b.rm == r.RM {
				continue next
			}
		}
		t.branches = append(t.branches, &branchProgress{rm: r.RM, clientSettles: r.ClientSettles})
		added = true
	}
	return added
}

// checkReplyReady closes replyReady once no coordinator-driven branch is
// pending. The caller holds c.mu.
func (t *txn) checkReplyReady() {
	for _, b := range t.branches {
		if b.state == BranchPending && !b.clientSettles {
			return
		}
	}
	select {
	case <-t.replyReady:
	default:
		close(t.replyReady)
	}
}

// carried is what a checkpoint writes for t: its decision, its branches as
// known now (none once phase 2 ended: the record is then half the size, and
// nothing is left to drive), and whether phase 2 ended. The caller holds
// c.mu.
func (t *txn) carried() carried {
	var rms []string
	if !t.ended {
		rms = make([]string, len(t.branches))
		for i, b := range t.branches {
			rms[i] = b.rm
		}
	}
	return carried{
		decision: decision{gtrid: t.gtrid, decidedAt: t.decidedAt, reason: t.reason, rms: rms},
		outcome:  t.outcome, ended: t.ended, endedAt: t.endedAt,
	}
}

// markEnded records that phase 2 finished; it reports whether t was
// unfinished. Callers outside replay use Coordinator.setEnded.
func (t *txn) markEnded(at time.Time) bool {
	if t.ended {
		return false
	}
	t.ended, t.endedAt = true, at
	for _, b := range t.branches {
		if b.state == BranchPending {
			b.state = BranchDone
		}
	}
	select {
	case <-t.done:
	default:
		close(t.done)
	}
	t.checkReplyReady()
	return true
}

// setEnded marks t ended and keeps the count of unfinished decisions. The
// caller holds c.mu.
func (c *Coordinator) setEnded(t *txn, at time.Time) {
	if t.markEnded(at) {
		c.unfinished.Add(-1)
	}
}

// reopenTxn makes an ended t unfinished again (a branch to settle appeared
// after its phase 2). The caller holds c.mu.
func (c *Coordinator) reopenTxn(t *txn) {
	if t.ended {
		t.ended = false
		t.done = reopen(t.done)
		c.unfinished.Add(1)
	}
}

// expired reports whether an ended transaction may be forgotten.
func (c *Coordinator) expired(t *txn, now time.Time) bool {
	if !t.ended {
		return false
	}
	if t.outcome == Aborted {
		return now.Sub(t.decidedAt) > c.opts.MaxTxnAge
	}
	return now.Sub(t.endedAt) > c.opts.EndedRetention
}

// Report is what the coordinator knows of one gtrid.
type Report struct {
	GTRID         xid.GTRID
	Outcome       Outcome
	Reason        AbortReason
	DecidedAt     time.Time
	Phase2Pending bool
	Branches      []BranchReport
	Message       string
	// TakenOver (a COMMIT, CommitMode.MayTakeOver): the coordinator
	// settles the client-settled branches itself; the client must end
	// their sessions, not settle them. TookOver: this call took them over
	// (the first Commit that did).
	TakenOver, TookOver bool
}

// BranchReport is one branch's phase-2 progress.
type BranchReport struct {
	RM            string
	ClientSettles bool
	State         BranchState
	Attempts      uint32
	LastError     string
}

// report snapshots t; the caller holds c.mu. For a reply to Commit or
// Abort, branches the client settles itself do not count as pending.
func (t *txn) report(forReply bool) Report {
	r := Report{GTRID: t.gtrid, Outcome: t.outcome, Reason: t.reason, DecidedAt: t.decidedAt}
	for _, b := range t.branches {
		r.Branches = append(r.Branches, BranchReport{RM: b.rm, State: b.state, Attempts: b.attempts, LastError: b.lastErr, ClientSettles: b.clientSettles})
		if b.state == BranchPending && !(forReply && b.clientSettles) {
			r.Phase2Pending = true
		}
	}
	if t.outcome == Aborted {
		r.Message = t.reason.String()
	}
	return r
}
