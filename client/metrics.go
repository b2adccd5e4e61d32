package client

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/tandem-tx/tandem/waits"
)

// abortStage is where a commit ended in abort (AbortedError.Stage).
type abortStage string

const (
	// stageStatement: a statement of a branch failed before Commit (any
	// error dooms the transaction).
	stageStatement abortStage = "statement"
	// stageSetup: Commit could not start (classifying the branches, naming
	// them, a decision-table id unknown, an RM the coordinator does not
	// know, the commit point's begin); nothing was prepared.
	stageSetup abortStage = "setup"
	// stagePrepare: a branch's PREPARE failed.
	stagePrepare abortStage = "prepare"
	// stageCommit: a local or one-phase commit failed, or the commit point
	// could not record the decision (or refused it).
	stageCommit abortStage = "commit"
	// stageDecidedAbort: the decision was ABORT (the coordinator's, or a
	// recoverer's found by taking the key).
	stageDecidedAbort abortStage = "decided-abort"
	// stageRefused: the coordinator refused the Commit (or its log stayed
	// full): nothing was decided.
	stageRefused abortStage = "refused"
	// stageNoCoordinator: the decision needed a coordinator and none was
	// configured or served as the primary.
	stageNoCoordinator abortStage = "no-coordinator"
	stageOther         abortStage = "other"
)

// AbortStages lists every value of AbortedError.Stage, in a fixed order.
var AbortStages = []string{string(stageStatement), string(stageSetup), string(stagePrepare), string(stageCommit),
	string(stageDecidedAbort), string(stageRefused), string(stageNoCoordinator), string(stageOther)}

// CommitPaths lists every Path a commit can take, in a fixed order.
var CommitPaths = []Path{PathLocal, PathOnePhase, PathCommitPoint, PathTwoPhase}

// txCounters are a client's transaction outcomes since New: updated once
// per Commit or Rollback (a few atomic adds), read by Metrics.
type txCounters struct {
	committed [PathCommitPoint + 1]atomic.Uint64
	latency   [PathCommitPoint + 1]waits.Histogram
	aborted   map[abortStage]*atomic.Uint64 // fixed at New: read without a lock
	unknown   atomic.Uint64
	rollbacks atomic.Uint64
	unknownL  waits.Histogram
	abortedL  waits.Histogram
}

func newTxCounters() *txCounters {
	c := &txCounters{aborted: map[abortStage]*atomic.Uint64{}}
	for _, s := range AbortStages {
		c.aborted[abortStage(s)] = new(atomic.Uint64)
	}
	return c
}

// count records one Commit's outcome and how long it took.
func (c *txCounters) count(res Result, err error, took time.Duration) {
	var ab *AbortedError
	switch {
	case err == nil:
		if res.Path >= PathLocal && res.Path <= PathCommitPoint {
			c.committed[res.Path].Add(1)
			c.latency[res.Path].Record(took)
		}
	case errors.As(err, &ab):
		c.aborted[abortStage(ab.Stage())].Add(1)
		c.abortedL.Record(took)
	case errors.Is(err, ErrOutcomeUnknown):
		c.unknown.Add(1)
		c.unknownL.Record(took)
	}
}

// Metrics are a client's transaction outcomes and commit latencies since
// New, and its wait events: what a service exports so that commits decided
// at a commit point — which never reach a coordinator — are seen (package
// client/prommetrics serves them to Prometheus).
type Metrics struct {
	// Committed counts commits by path; CommitLatency is the time each
	// took, from Commit's call to its return, by path (waits buckets).
	Committed     map[Path]uint64
	CommitLatency map[Path]waits.EventStats
	// Aborted counts Commits that ended in abort, by AbortedError.Stage;
	// AbortLatency is how long those Commits took.
	Aborted      map[string]uint64
	AbortLatency waits.EventStats
	// Unknown counts Commits whose outcome was not learned
	// (ErrOutcomeUnknown); UnknownLatency how long those took.
	Unknown        uint64
	UnknownLatency waits.EventStats
	// Rollbacks counts Tx.Rollback calls that rolled back a transaction.
	Rollbacks uint64
	// CoordinatorCalls and UnrecoverableDecisions are Stats'.
	CoordinatorCalls       uint64
	UnrecoverableDecisions uint64
	// Waits is the client's wait registry (Config.Waits, or the
	// process-wide waits.Client that clients share by default).
	Waits *waits.Registry
}

// Metrics returns the client's outcome counters and latencies. It does no
// I/O and is cheap enough to call at every scrape.
func (c *Client) Metrics() Metrics {
	m := Metrics{Committed: map[Path]uint64{}, CommitLatency: map[Path]waits.EventStats{}, Aborted: map[string]uint64{},
		AbortLatency: c.tx.abortedL.Stats(0), Unknown: c.tx.unknown.Load(), UnknownLatency: c.tx.unknownL.Stats(0),
		Rollbacks: c.tx.rollbacks.Load(), Waits: c.waits}
	for _, p := range CommitPaths {
		m.Committed[p] = c.tx.committed[p].Load()
		m.CommitLatency[p] = c.tx.latency[p].Stats(0)
	}
	for _, s := range AbortStages {
		m.Aborted[s] = c.tx.aborted[abortStage(s)].Load()
	}
	st := c.Stats()
	m.CoordinatorCalls, m.UnrecoverableDecisions = st.CoordinatorCalls, st.UnrecoverableDecisions
	return m
}
