package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/tandem-tx/tandem/api"
	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/waits"
	"github.com/tandem-tx/tandem/xid"
)

type txState uint8

const (
	txActive txState = iota
	txFinishing
	txCommitted
	txAborted
	txUnknown
)

// Path says how a transaction committed.
type Path uint8

const (
	// PathLocal means no branch wrote; each committed locally. No coordinator call.
	PathLocal Path = iota + 1
	// PathOnePhase means one branch wrote and committed in one phase. No coordinator call.
	PathOnePhase
	// PathTwoPhase means two or more branches wrote and were prepared,, then decided by the coordinator.
	PathTwoPhase
	// PathCommitPoint means two or more branches wrote: all but one prepared,
	// then decided by that one's local commit (Result.CommitPoint). No
	// coordinator call.
	PathCommitPoint
)

func (p Path) String() string {
	switch p {
	case PathLocal:
		return "local"
	case PathOnePhase:
		return "one-phase"
	case PathTwoPhase:
		return "two-phase"
	case PathCommitPoint:
		return "commit-point"
	}
	return "none"
}

// Result describes a committed transaction.
type Result struct {
	GTRID xid.GTRID
	Path  Path
	// Phase2Pending: the coordinator replied before every branch committed
	// (a database was slow or down, or visibility async). The commit is decided
	// and durable; the coordinator finishes phase 2 by itself.
	Phase2Pending bool
	// RMRoundTrips counts round trips to the databases made for this transaction.
	RMRoundTrips int
	// RoundTrips splits RMRoundTrips by resource manager, in enlistment order.
	RoundTrips []RMRoundTrips
	// CoordinatorCalls counts RPCs to the coordinator made by this Commit.
	CoordinatorCalls int
	// CommitPoint names the RM whose local commit decided (PathCommitPoint).
	CommitPoint string
	// EndedSessions names the RMs whose sessions Commit ended because the
	// coordinator took their prepared branches over (CommitOptions.MayTakeOver):
	// the *sql.Conn given to Tx.Branch for each is unusable; take a new one.
	EndedSessions []string
}

// RMRoundTrips is the number of round trips made to one resource manager.
type RMRoundTrips struct {
	RM string
	N  int
}

// Tx is one global transaction. Its methods are safe to call from several
// goroutines, but each Branch is used by one goroutine at a time.
type Tx struct {
	c        *Client
	gtrid    xid.GTRID
	opts     CommitOptions
	mu       sync.Mutex
	state    txState
	branches []*Branch
	// trace, when not nil, receives every wait of this transaction;
	// traceCoord asks the coordinator for its waits too.
	trace      *waits.Trace
	traceCoord bool
	// cp is the branch chosen as the commit point at a MySQL/MariaDB
	// branch's begin (that branch, its own XA branch; or a pinned
	// PostgreSQL branch); unnamedXA: a MySQL/MariaDB branch began as an XA branch
	// named with no commit point, so the coordinator decides (cp_choice.go).
	cp        *Branch
	unnamedXA bool
	// span is the transaction's span (tracing.go), never nil; rec: it
	// records, so the phases get spans too.
	span trace.Span
	rec  bool
}

// SetTrace makes the transaction append each of its waits (every round trip,
// prepare, commit and RPC, with its start and duration) to tr, which it
// names after the gtrid. With coordinator, the Commit RPC also asks the
// coordinator for the waits it spent on this transaction (decision log,
// phase 2), merged into tr when the reply comes. Call it before the first
// statement. Without a trace nothing is collected: the cost is a nil test
// per wait.
func (t *Tx) SetTrace(tr *waits.Trace, coordinator bool) {
	tr.SetGTRID(t.gtrid.String())
	t.mu.Lock()
	t.trace, t.traceCoord = tr, coordinator && tr != nil
	t.mu.Unlock()
}

// GTRID returns the transaction's global id.
func (t *Tx) GTRID() xid.GTRID { return t.gtrid }

// SetOptions sets this transaction's commit modes (before Commit). A zero
// DecideAt keeps the client's default (Config.Defaults.DecideAt).
func (t *Tx) SetOptions(o CommitOptions) {
	if o.DecideAt == "" {
		o.DecideAt = t.c.cfg.Defaults.DecideAt
	}
	t.mu.Lock()
	t.opts = o
	t.mu.Unlock()
}

// Commit makes every branch's work visible, or none of it.
//
//   - no branch wrote: each commits locally;
//   - one wrote: it commits in one phase, the others locally; no coordinator call;
//   - two or more: all prepare in parallel (a PostgreSQL branch that only read
//     and wrote nothing commits locally instead), then one Commit RPC decides.
//
// The error matches ErrAborted when nothing committed, and ErrOutcomeUnknown
// when the SDK could not learn the outcome before ctx ended. Commit on a
// finished transaction returns ErrTxDone.
//
// A coordinator whose decision log is full refuses new decisions
// (RESOURCE_EXHAUSTED: nothing written) until its phase 2 catches up, and
// slows them down when it is nearly full. Commit then keeps trying, with
// backoff, while ctx allows: the transaction commits as soon as there is
// room. If the coordinator refused every try until ctx ended, no decision
// exists, so Commit rolls back every branch and returns ErrAborted whose
// message is the coordinator's (how many transactions are unfinished, the
// oldest, which database has not acknowledged). If any try failed
// otherwise (the coordinator unreachable: it may have decided before it
// went), the outcome is unknown as usual.
//
// The wait for the decision is bounded by ctx's deadline or, when ctx has
// none (or a later one), by Config.DecisionTimeout (default 30s). Past it,
// Commit returns an *OutcomeUnknownError naming the coordinator and what
// was tried, and rolls nothing back: once any attempt went unanswered the
// decision may exist, so the outcome is found out (Client.Status, or
// `tandem status GTRID`), never guessed.
//
// With several coordinators (Config.Coordinators) the decision follows the
// primary: a Commit refused by a coordinator that is not the primary is
// sent to the one that serves (nothing was written by the refused one).
// After an attempt that went unanswered, the first call to the coordinator
// the client moved to is Status without resolve: COMMITTED or ABORTED
// there is the outcome (MariaDB branches are committed or rolled back
// accordingly); UNDECIDED sends the same Commit there, which commits unless
// an ABORT reached its log first. A new primary promoted with
// --accept-data-loss that lacks the decision refuses that Commit as
// unknowable: the outcome is then reported unknown, never guessed.
func (t *Tx) Commit(ctx context.Context) (Result, error) {
	t.mu.Lock()
	if t.state != txActive {
		t.mu.Unlock()
		return Result{GTRID: t.gtrid}, ErrTxDone
	}
	t.state = txFinishing
	branches := t.begun()
	t.mu.Unlock()

	start := time.Now()
	res, state, err := t.commit(t.spanContext(ctx), branches)
	t.c.tx.count(res, err, time.Since(start))
	res.GTRID = t.gtrid
	res.RoundTrips = make([]RMRoundTrips, len(t.branches))
	for i, b := range t.branches {
		res.RMRoundTrips += b.trips
		res.RoundTrips[i] = RMRoundTrips{RM: b.rm.name, N: b.trips}
	}
	t.trace.Finish()
	t.endTxSpan(outcomeName(state), &res, err)
	t.mu.Lock()
	t.state = state
	t.mu.Unlock()
	return res, err
}

// begun returns the branches that reached their database.
func (t *Tx) begun() []*Branch {
	var out []*Branch
	for _, b := range t.branches {
		if b.state != branchIdle {
			out = append(out, b)
		}
	}
	return out
}

func (t *Tx) commit(ctx context.Context, branches []*Branch) (Result, txState, error) {
	for _, b := range t.branches { // enlisted, begun or not: a failed begin leaves one idle
		if err := b.pgStatus(""); err != nil {
			_ = b.fail(err)
		}
		if b.lastErr != nil {
			t.abortAll(ctx, branches)
			return Result{}, txAborted, &AbortedError{GTRID: t.gtrid, Reason: fmt.Sprintf("branch on %q failed earlier", b.rm.name), Cause: b.lastErr, stage: stageStatement}
		}
	}
	// Which branches wrote? Ask the database about those that only read.
	readOnly := make([]bool, len(branches))
	err := parallel(len(branches), func(i int) error {
		b := branches[i]
		if b.wrote {
			return nil
		}
		ro, err := b.readOnly(ctx)
		if err != nil {
			return fmt.Errorf("rm %q: read-only check: %w", b.rm.name, err)
		}
		readOnly[i] = ro
		return nil
	})
	if err != nil {
		t.abortAll(ctx, branches)
		return Result{}, txAborted, &AbortedError{GTRID: t.gtrid, Reason: "could not classify branches", Cause: err, stage: stageSetup}
	}
	var writers, readers []*Branch
	for i, b := range branches {
		if readOnly[i] && b != t.cp {
			readers = append(readers, b)
		} else {
			writers = append(writers, b)
		}
	}
	// A pinned PostgreSQL commit point that only read is a reader unless
	// two other branches wrote: then it commits with the decision.
	if cpi := slices.Index(writers, t.cp); cpi >= 0 && t.cp.rm.dialect.Driver() == rm.Postgres && len(writers) <= 2 && readOnly[slices.Index(branches, t.cp)] {
		writers = slices.Delete(writers, cpi, cpi+1)
		readers = append(readers, t.cp)
	}
	// Read-only branches commit locally; their outcome does not matter to
	// atomicity. Without any, commitReaders stays nil, so that phase 1 runs
	// no goroutine for it (with one prepared branch, none at all).
	var commitReaders func() error
	if len(readers) > 0 {
		commitReaders = func() error {
			return parallel(len(readers), func(i int) error {
				b := readers[i]
				if err := b.execSteps(ctx, waits.RMCommit, b.onePhaseSQL()); err != nil {
					return fmt.Errorf("rm %q: commit read-only branch: %w", b.rm.name, err)
				}
				b.state = branchCommitted
				return nil
			})
		}
	}
	switch len(writers) {
	case 0:
		if err := runIfAny(commitReaders); err != nil {
			t.abortAll(ctx, branches)
			return Result{Path: PathLocal}, txAborted, &AbortedError{GTRID: t.gtrid, Reason: "local commit failed", Cause: err, stage: stageCommit}
		}
		return Result{Path: PathLocal}, txCommitted, nil
	case 1:
		if err := runIfAny(commitReaders); err != nil {
			t.abortAll(ctx, branches)
			return Result{Path: PathOnePhase}, txAborted, &AbortedError{GTRID: t.gtrid, Reason: "local commit of a read-only branch failed", Cause: err, stage: stageCommit}
		}
		return t.commitOnePhase(ctx, writers[0])
	}
	if cp := t.commitPoint(writers); cp != nil {
		return t.commitAtRM(ctx, branches, writers, cp, commitReaders)
	}
	return t.commitTwoPhase(ctx, branches, writers, commitReaders)
}

// Rollback rolls back every branch that has not committed. It is safe to
// call after Commit (it does nothing) and safe to call twice. A prepared
// branch it cannot roll back is handed to the coordinator's Abort; failing
// that, the coordinator's orphan scan rolls it back after its timeout.
func (t *Tx) Rollback(ctx context.Context) error {
	t.mu.Lock()
	if t.state != txActive {
		t.mu.Unlock()
		return nil
	}
	t.state = txFinishing
	branches := t.begun()
	t.mu.Unlock()
	t.c.tx.rollbacks.Add(1)
	err := t.rollbackAll(t.spanContext(ctx), branches)
	t.endTxSpan("rolled-back", nil, err)
	t.mu.Lock()
	t.state = txAborted
	t.mu.Unlock()
	return err
}

// abortAll rolls back branches after the transaction was decided (or
// found) aborted: the outcome is abort whatever the rollback does — a
// branch it cannot roll back is handed to the coordinator, or left to its
// scan.
func (t *Tx) abortAll(ctx context.Context, branches []*Branch) {
	_ = t.rollbackAll(ctx, branches)
}

// rollbackAll rolls back branches on their own connections, in parallel, on
// a context the caller's cancellation cannot cut short.
func (t *Tx) rollbackAll(ctx context.Context, branches []*Branch) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var stuck []*Branch
	var mu sync.Mutex
	err := parallel(len(branches), func(i int) error {
		b := branches[i]
		if err := b.rollback(ctx); err != nil {
			mu.Lock()
			stuck = append(stuck, b)
			mu.Unlock()
			return err
		}
		return nil
	})
	if len(stuck) == 0 || t.c.coords == nil {
		return err
	}
	req := &api.AbortRequest{Gtrid: t.gtrid.String()}
	for _, b := range stuck {
		if (b.state == branchPrepared || b.state == branchInDoubt) && b.id.CommitPoint == "" {
			// A branch named with a commit point is settled from its
			// decision table, which the coordinator's scan reads; an
			// Abort cannot name it.
			req.Branches = append(req.Branches, &api.Branch{Rm: b.rm.name})
		}
	}
	if len(req.Branches) == 0 {
		return err // only active branches: the database rolls them back when their connection ends
	}
	start := time.Now()
	aerr := t.c.call(withOwner(ctx, stuck), func(ctx context.Context, ep *endpoint, opts ...grpc.CallOption) error {
		_, err := ep.api.Abort(ctx, req, opts...)
		return err
	})
	d := t.c.waits.Since(waits.CoordinatorAbort, start)
	t.trace.Add(waits.SideClient, waits.CoordinatorAbort, "", start, d)
	if aerr != nil {
		return fmt.Errorf("%w; handing the prepared branches to the coordinator failed too (its orphan scan will roll them back): %v", err, aerr)
	}
	return nil
}

// rollback ends one branch, whatever state it reached.
func (b *Branch) rollback(ctx context.Context) error {
	d := b.rm.dialect
	var err error
	switch b.state {
	case branchIdle, branchCommitted, branchRolledBack, branchHandedOver:
		return nil
	case branchActive:
		err = b.execSteps(ctx, waits.RMRollback, b.rollbackActiveSQL())
		if err != nil && d.Driver() == rm.MySQL {
			// XA END may fail when the branch already ended (a failed XA PREPARE); try the rollback alone.
			err = b.execSteps(ctx, waits.RMRollback, []string{d.RollbackPrepared(b.id)})
		}
	case branchPrepared, branchInDoubt:
		err = b.execSteps(ctx, waits.RMRollbackPrepared, []string{d.RollbackPrepared(b.id)})
	}
	if err != nil && b.state == branchActive {
		// A branch whose rollback failed is in a state nobody knows (its
		// transaction may still be open, with the application's writes):
		// it must never be committed by whoever uses the connection next.
		// Close it, and the database rolls the transaction back when the
		// session ends; it never goes back to a pool.
		b.releaseSession()
	}
	if err != nil && d.SessionBound() && (b.state == branchPrepared || b.state == branchInDoubt) {
		// Only this session can settle the branch, and it cannot: let go of
		// it so that the coordinator can.
		b.releaseSession()
	}
	if err != nil && d.IsNotFound(err) {
		err = nil // nothing left to roll back
	}
	if err != nil {
		return fmt.Errorf("rm %q: rollback: %w", b.rm.name, err)
	}
	b.state = branchRolledBack
	return nil
}

// runIfAny runs fn unless it is nil.
func runIfAny(fn func() error) error {
	if fn == nil {
		return nil
	}
	return fn()
}

// parallel runs fn(0..n-1) concurrently (the last on the calling goroutine)
// and returns the errors joined.
func parallel(n int, fn func(i int) error) error {
	if n == 0 {
		return nil
	}
	if n == 1 {
		return fn(0)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n-1; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn(i)
		}()
	}
	errs[n-1] = fn(n - 1)
	wg.Wait()
	return errors.Join(errs...)
}
