package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tandem-tx/tandem/api"
	"github.com/tandem-tx/tandem/internal/addrhint"
	"github.com/tandem-tx/tandem/internal/failpoint"
	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/internal/waitwire"
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
	// named with no commit point, so the coordinator decides (commitpoint.go).
	cp        *Branch
	unnamedXA bool
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

	res, state, err := t.commit(ctx, branches)
	res.GTRID = t.gtrid
	res.RoundTrips = make([]RMRoundTrips, len(t.branches))
	for i, b := range t.branches {
		res.RMRoundTrips += b.trips
		res.RoundTrips[i] = RMRoundTrips{RM: b.rm.name, N: b.trips}
	}
	t.trace.Finish()
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
			b.fail(err)
		}
		if b.lastErr != nil {
			t.abortAll(ctx, branches)
			return Result{}, txAborted, &AbortedError{GTRID: t.gtrid, Reason: fmt.Sprintf("branch on %q failed earlier", b.rm.name), Cause: b.lastErr}
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
		return Result{}, txAborted, &AbortedError{GTRID: t.gtrid, Reason: "could not classify branches", Cause: err}
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
	// Read-only branches commit locally; their outcome does not matter to atomicity.
	commitReaders := func() error {
		return parallel(len(readers), func(i int) error {
			b := readers[i]
			if err := b.execSteps(ctx, waits.RMCommit, b.onePhaseSQL()); err != nil {
				return fmt.Errorf("rm %q: commit read-only branch: %w", b.rm.name, err)
			}
			b.state = branchCommitted
			return nil
		})
	}
	switch len(writers) {
	case 0:
		if err := commitReaders(); err != nil {
			t.abortAll(ctx, branches)
			return Result{Path: PathLocal}, txAborted, &AbortedError{GTRID: t.gtrid, Reason: "local commit failed", Cause: err}
		}
		return Result{Path: PathLocal}, txCommitted, nil
	case 1:
		if err := commitReaders(); err != nil {
			t.abortAll(ctx, branches)
			return Result{Path: PathOnePhase}, txAborted, &AbortedError{GTRID: t.gtrid, Reason: "local commit of a read-only branch failed", Cause: err}
		}
		return t.commitOnePhase(ctx, writers[0])
	}
	if cp := t.commitPoint(writers); cp != nil {
		return t.commitAtRM(ctx, branches, writers, cp, commitReaders)
	}
	return t.commitTwoPhase(ctx, branches, writers, commitReaders)
}

func (t *Tx) commitOnePhase(ctx context.Context, w *Branch) (Result, txState, error) {
	res := Result{Path: PathOnePhase}
	err := w.execSteps(ctx, waits.RMCommit, w.onePhaseSQL())
	if err == nil {
		w.state = branchCommitted
		return res, txCommitted, nil
	}
	if serverSaidNo(err) {
		t.abortAll(ctx, []*Branch{w})
		return res, txAborted, &AbortedError{GTRID: t.gtrid, Reason: fmt.Sprintf("one-phase commit on %q failed", w.rm.name), Cause: err}
	}
	// The commit may or may not have reached the database.
	return res, txUnknown, &OutcomeUnknownError{GTRID: t.gtrid, Cause: fmt.Errorf("rm %q: one-phase commit: %w", w.rm.name, err)}
}

func (t *Tx) commitTwoPhase(ctx context.Context, all, writers []*Branch, commitReaders func() error) (Result, txState, error) {
	res := Result{Path: PathTwoPhase}
	if t.c.coords == nil {
		t.abortAll(ctx, all)
		return res, txAborted, &AbortedError{GTRID: t.gtrid, Reason: fmt.Sprintf("%d branches wrote", len(writers)), Cause: ErrNoCoordinator}
	}
	if err := t.ownByCluster(ctx, writers); err != nil {
		t.abortAll(ctx, all)
		return res, txAborted, &AbortedError{GTRID: t.gtrid, Reason: "the branches cannot be named after the coordinator's cluster; nothing was prepared", Cause: err}
	}
	// Phase 1: prepare every writer in parallel; read-only branches commit meanwhile.
	prepErr := t.prepareAll(ctx, writers, commitReaders)
	if prepErr != nil {
		t.abortAll(ctx, all)
		return res, txAborted, &AbortedError{GTRID: t.gtrid, Reason: "phase 1 failed", Cause: prepErr}
	}
	// The decision: one RPC.
	req := &api.CommitRequest{Gtrid: t.gtrid.String(), Options: &api.CommitOptions{Durability: t.opts.Durability, Visibility: t.opts.Visibility}}
	for _, b := range writers {
		req.Branches = append(req.Branches, &api.Branch{Rm: b.rm.name, ClientSettles: b.rm.dialect.SessionBound()})
	}
	// Session-bound branches (MariaDB) can only be committed here, on the
	// session that prepared them. The coordinator sends the durable decision
	// in the response headers before its own phase 2 (api.MetadataEarlyDecision),
	// so they commit while it commits the others.
	var settled chan bool
	onCommitted := func() {
		settled = make(chan bool, 1)
		go func() { settled <- t.settleOwn(ctx, writers, true) }()
	}
	if !hasSessionBound(writers) {
		onCommitted = nil
	}
	_ = failpoint.Inject("before-commit-rpc") // kill: the client dies with every branch prepared
	rpcCtx, cancel := t.c.decisionContext(ctx)
	defer cancel()
	rpcStart := time.Now()
	resp, calls, err := t.c.commitRPC(rpcCtx, req, t.trace, t.traceCoord, onCommitted)
	_ = failpoint.Inject("after-commit-rpc") // kill: the decision is made; session-bound branches wait for the coordinator
	res.CoordinatorCalls = calls
	if settled != nil {
		// The durable decision was COMMIT (commitRPC then never fails).
		res.Phase2Pending = resp.GetPhase2Pending() || !<-settled
		return res, txCommitted, nil
	}
	switch {
	case err == nil && resp.Outcome == api.Outcome_COMMITTED:
		res.Phase2Pending = resp.Phase2Pending
		if !t.settleOwn(ctx, writers, true) {
			res.Phase2Pending = true
		}
		return res, txCommitted, nil
	case err == nil && resp.Outcome == api.Outcome_ABORTED:
		// The coordinator decided ABORT first and rolls back what it can reach.
		t.settleOwn(ctx, writers, false)
		return res, txAborted, &AbortedError{GTRID: t.gtrid, Reason: "the coordinator decided ABORT: " + resp.Message}
	case err == nil:
		t.releaseOwn(writers)
		return res, txUnknown, &OutcomeUnknownError{GTRID: t.gtrid, Cause: fmt.Errorf("coordinator answered outcome %v", resp.Outcome)}
	case errors.As(err, new(*unknownAfterError)):
		// An earlier attempt ended without an answer: the decision may exist
		// (and a promoted standby may be committing it). Never roll back.
	case errors.As(err, new(*noPrimaryError)):
		// Every attempt was refused before anything was written.
		t.abortAll(ctx, all)
		return res, txAborted, &AbortedError{GTRID: t.gtrid, Reason: "no coordinator served as the primary; nothing was decided and the branches were rolled back", Cause: err}
	case isRejection(err):
		// Every attempt was answered, and this one refused the request as a
		// whole: no decision was written anywhere, so rolling back is safe.
		t.abortAll(ctx, all)
		return res, txAborted, &AbortedError{GTRID: t.gtrid, Reason: "the coordinator refused the commit", Cause: err}
	case errors.As(err, new(*logFullError)):
		// Refused on every try until ctx ended: no decision was written.
		t.abortAll(ctx, all)
		return res, txAborted, &AbortedError{GTRID: t.gtrid, Cause: err,
			Reason: fmt.Sprintf("the coordinator's decision log stayed full until the context ended (%d tries); nothing was decided and the branches were rolled back", calls)}
	}
	// Unknown outcome: let go of the session-bound branches so that the
	// coordinator, which knows the outcome, can settle them.
	t.releaseOwn(writers)
	return res, txUnknown, &OutcomeUnknownError{GTRID: t.gtrid, Cause: fmt.Errorf(
		"no decision from the coordinator at %s after %d attempts in %s: %w; nothing was rolled back: "+
			"the prepared branches are the coordinator's to settle once it is reachable (committed if it decided COMMIT, "+
			"rolled back after its orphan timeout if it never received the Commit)",
		t.c.CurrentCoordinator(), calls, time.Since(rpcStart).Round(time.Millisecond), err)}
}

// decisionContext bounds the wait for the coordinator's decision by
// Config.DecisionTimeout when ctx has no earlier deadline.
func (c *Client) decisionContext(ctx context.Context) (context.Context, context.CancelFunc) {
	d := c.cfg.DecisionTimeout
	if d == 0 {
		d = DefaultDecisionTimeout
	}
	if dl, ok := ctx.Deadline(); d < 0 || (ok && time.Until(dl) <= d) {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}

// settleOwn commits (or rolls back) the session-bound prepared branches on
// their own sessions, in parallel, after the decision. A branch it cannot
// settle has its connection closed, which hands the branch to the
// coordinator. It reports whether every one was settled here.
func (t *Tx) settleOwn(ctx context.Context, writers []*Branch, commit bool) bool {
	var own []*Branch
	for _, b := range writers {
		if b.rm.dialect.SessionBound() {
			own = append(own, b)
		} else {
			b.state = branchHandedOver
		}
	}
	return t.settlePrepared(ctx, own, commit)
}

// releaseOwn closes the sessions holding session-bound prepared branches.
func (t *Tx) releaseOwn(writers []*Branch) {
	for _, b := range writers {
		if b.rm.dialect.SessionBound() {
			b.releaseSession()
		}
		b.state = branchHandedOver
	}
}

func hasSessionBound(bs []*Branch) bool {
	for _, b := range bs {
		if b.rm.dialect.SessionBound() {
			return true
		}
	}
	return false
}

// commitRPC sends Commit, retrying while the coordinator is unreachable and
// ctx allows: a repeated Commit answers the first one's outcome. Each call is
// a "coordinator commit" wait; with traceCoord the coordinator's own waits
// for this gtrid come back in the reply's trailer and join tr.
//
// It follows the primary (follow.go): a coordinator that refuses the call
// because it is not the primary, or cannot be reached, sends the next
// attempt to the one that serves. Once an attempt went unanswered (the
// decision may exist on the old primary, and reached the new one with its
// log), the first call to a coordinator the client moved to is Status
// without resolve, never anything that could write ABORT: COMMITTED or
// ABORTED there is the outcome; UNDECIDED (or COMMITTED with a branch the
// client settles, so that the answer waits for the new primary's standby)
// sends the Commit again, which decides COMMIT unless a decision exists:
// the first of COMMIT or ABORT to reach the log wins.
//
// With onCommitted, the call asks for the early decision: onCommitted runs
// (once) as soon as the response headers say COMMITTED, which the
// coordinator sends only once the decision is durable. From then on the
// outcome is known: an error on the rest of the call is reported as
// COMMITTED with phase 2 pending, not as an unknown outcome.
func (c *Client) commitRPC(ctx context.Context, req *api.CommitRequest, tr *waits.Trace, traceCoord bool, onCommitted func()) (*api.CommitResponse, int, error) {
	if traceCoord {
		ctx = metadata.AppendToOutgoingContext(ctx, api.MetadataTrace, "1")
	}
	if onCommitted != nil {
		ctx = metadata.AppendToOutgoingContext(ctx, api.MetadataEarlyDecision, "1")
	}
	committed := false
	onHeader := func(md metadata.MD) {
		if v := md.Get(api.MetadataDecision); !committed && len(v) > 0 && v[0] == api.Outcome_COMMITTED.String() {
			committed = true
			onCommitted()
		}
	}
	backoff := 10 * time.Millisecond
	// ambiguous is the first attempt that ended without a definite answer:
	// not a reply, not RESOURCE_EXHAUSTED (the coordinator's "decision log
	// full, nothing written"), not a refusal before anything was written.
	// UNAVAILABLE may come from a coordinator that wrote the decision and
	// then died or was cut off. From then on the outcome is unknown until
	// a coordinator that serves answers it: a later refusal (a credential no
	// longer accepted, say) says nothing about that attempt, so it is
	// reported as unknownAfterError, never as a refusal the caller may
	// roll back on.
	var ambiguous error
	ep := c.current()
	askStatus := false // ambiguous, then moved: ask the new primary first
	moves := 0
	first, warned := time.Now(), time.Time{}
	for calls := 1; ; calls++ {
		c.coordinatorCalls.Add(1)
		start := time.Now()
		var resp *api.CommitResponse
		var trailer metadata.MD
		var err error
		if askStatus {
			var st *api.StatusResponse
			st, err = ep.api.Status(ctx, &api.StatusRequest{Gtrid: req.GetGtrid()}, grpc.Trailer(&trailer))
			c.waits.Since(waits.CoordinatorStatus, start)
			switch {
			case err == nil && st.GetOutcome() == api.Outcome_ABORTED,
				err == nil && st.GetOutcome() == api.Outcome_COMMITTED && onCommitted == nil:
				return &api.CommitResponse{Outcome: st.GetOutcome(), Phase2Pending: st.GetPhase2Pending(), Branches: st.GetBranches(),
					Message: "after a role change, the primary at " + ep.addr + " answers: " + st.GetMessage()}, calls, nil
			case err == nil:
				askStatus = false // UNDECIDED: decide there (or learn its COMMIT after its standby has it)
				calls++
				c.coordinatorCalls.Add(1)
				start = time.Now()
			}
		}
		if !askStatus {
			trailer = nil
			if onCommitted != nil {
				resp, trailer, err = c.commitStream(ctx, ep, req, onHeader)
			} else {
				resp, err = ep.api.Commit(ctx, req, grpc.Trailer(&trailer))
			}
			d := c.waits.Since(waits.CoordinatorCommit, start)
			tr.Add(waits.SideClient, waits.CoordinatorCommit, "", start, d)
			if traceCoord {
				for _, v := range trailer.Get(api.MetadataTraceTrailer) {
					if spans, perr := waitwire.Decode([]byte(v)); perr == nil {
						tr.Merge(spans)
					}
				}
			}
			if err != nil && committed {
				return &api.CommitResponse{Outcome: api.Outcome_COMMITTED, Phase2Pending: true,
					Message: "the coordinator decided COMMIT (durable); its reply after phase 2 was lost: " + err.Error()}, calls, nil
			}
			if err == nil {
				return resp, calls, nil
			}
		}
		_, refusedHere := notPrimary(trailer) // this attempt wrote nothing
		definite := refusedHere || isRejection(err) || status.Code(err) == codes.ResourceExhausted
		if ambiguous == nil && !definite && !askStatus {
			ambiguous = err
		}
		retry := refusedHere || retryable(err)
		if c.mayHaveMoved(err, trailer) {
			if next, moved := c.moveFrom(ctx, ep, err); moved {
				ep, retry = next, true
				askStatus = ambiguous != nil
				if moves++; moves == 1 {
					continue // straight to the new primary
				}
			}
			// Not moved: keep trying the same one (a standby may be
			// promoted, the primary may come back), unless it refused with
			// FAILED_PRECONDITION and no trailer while nobody else serves:
			// a refusal of its own (an RM it cannot log in to, say).
		}
		switch {
		case !retry && ambiguous != nil && definite:
			return nil, calls, &unknownAfterError{ambiguous: ambiguous, last: addrhint.Wrap(ep.addr, err)}
		case !retry:
			return nil, calls, addrhint.Wrap(ep.addr, err)
		case ctx.Err() != nil:
			return nil, calls, c.gaveUp(ctx, ep.addr, ambiguous, err, refusedHere)
		}
		if status.Code(err) == codes.Unavailable && time.Since(warned) >= time.Second {
			warned = time.Now()
			c.warn("coordinator unreachable at "+ep.addr+", retrying", "gtrid", req.GetGtrid(), "attempts", calls,
				"for", time.Since(first).Round(time.Second).String(), "error", addrhint.Wrap(ep.addr, err))
		}
		select {
		case <-ctx.Done():
			return nil, calls, c.gaveUp(ctx, ep.addr, ambiguous, err, refusedHere)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// gaveUp is commitRPC's error when ctx ended while it was still trying:
// after an attempt that went unanswered, the outcome is unknown; if every
// attempt was refused before anything was written, no decision exists
// (noPrimaryError, or logFullError when the last said the log is full).
func (c *Client) gaveUp(ctx context.Context, addr string, ambiguous, last error, refused bool) error {
	definite := ambiguous != last && (refused || isRejection(last) || status.Code(last) == codes.ResourceExhausted)
	last = addrhint.Wrap(addr, last)
	switch {
	case ambiguous != nil && definite:
		return &unknownAfterError{ambiguous: ambiguous, last: last}
	case ambiguous != nil:
		return fmt.Errorf("%w (last error: %v)", ctx.Err(), last)
	case status.Code(last) == codes.ResourceExhausted:
		return &logFullError{last}
	}
	return &noPrimaryError{addrs: c.addrList(), last: last}
}

// commitStream makes one Commit call through the stream API, so that the
// response headers (the early decision) can be read before the reply, which
// the unary API does not allow. On the wire it is the same unary call.
func (c *Client) commitStream(ctx context.Context, ep *endpoint, req *api.CommitRequest, onHeader func(metadata.MD)) (*api.CommitResponse, metadata.MD, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := ep.conn.NewStream(ctx, &grpc.StreamDesc{StreamName: "Commit"}, api.Coordinator_Commit_FullMethodName)
	if err != nil {
		return nil, nil, err
	}
	resp := new(api.CommitResponse)
	if err := stream.SendMsg(req); err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, err
	}
	// io.EOF from SendMsg: the call already ended; RecvMsg returns its status.
	_ = stream.CloseSend()
	if md, err := stream.Header(); err == nil {
		onHeader(md)
	}
	if err := stream.RecvMsg(resp); err != nil {
		return nil, stream.Trailer(), err
	}
	return resp, stream.Trailer(), nil
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
	err := t.rollbackAll(ctx, branches)
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
	aerr := t.c.call(ctx, func(ctx context.Context, ep *endpoint, opts ...grpc.CallOption) error {
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
	if err != nil && b.selfCP && b.state == branchActive {
		// A commit point whose rollback failed must never be committed by
		// whoever uses the connection next: close it, and the database
		// rolls the branch back when the session ends.
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

// serverSaidNo reports whether the database itself answered err (so the
// statement's effect is known), as opposed to a broken connection.
func serverSaidNo(err error) bool {
	var pgErr *pgconn.PgError
	var myErr *mysql.MySQLError
	return errors.As(err, &pgErr) || errors.As(err, &myErr) || errors.Is(err, errPrepareRolledBack)
}

// errPrepareRolledBack: PostgreSQL answered PREPARE TRANSACTION with ROLLBACK.
var errPrepareRolledBack = errors.New("prepare rolled back")

// unknownAfterError is what commitRPC returns when an attempt was refused
// (or the log was full) after an earlier attempt had ended without an
// answer. The refusal does not settle the earlier attempt, so the outcome
// is unknown. It unwraps to the ambiguous attempt's error only, so that
// nothing reads it as a refusal.
type unknownAfterError struct{ ambiguous, last error }

func (e *unknownAfterError) Error() string {
	return fmt.Sprintf("an earlier Commit attempt ended without an answer (%v), so the decision may exist; "+
		"a later attempt was refused (%v), which does not settle it. Ask the current primary (Status) for the outcome", e.ambiguous, e.last)
}
func (e *unknownAfterError) Unwrap() error { return e.ambiguous }

// logFullError is what commitRPC returns when the coordinator answered
// every call RESOURCE_EXHAUSTED (its decision log full: no decision was
// written) until ctx ended. It wraps the last answer, whose message says
// what holds the coordinator's log.
type logFullError struct{ last error }

func (e *logFullError) Error() string { return e.last.Error() }
func (e *logFullError) Unwrap() error { return e.last }

func retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.ResourceExhausted:
		return true
	}
	return false
}

func isRejection(err error) bool {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.FailedPrecondition, codes.NotFound, codes.PermissionDenied, codes.Unauthenticated, codes.Unimplemented:
		return true
	}
	return false
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
