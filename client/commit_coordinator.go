package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tandem-tx/tandem/api"
	"github.com/tandem-tx/tandem/internal/addrhint"
	"github.com/tandem-tx/tandem/internal/failpoint"
	"github.com/tandem-tx/tandem/internal/waitwire"
	"github.com/tandem-tx/tandem/waits"
)

// Two phases decided by the coordinator: the writers are named after the
// coordinator's cluster (cluster.go), prepared in parallel (prepare.go),
// then one Commit RPC writes the decision in the coordinator's log; the
// client settles its session-bound branches (phase2.go) and the
// coordinator the others. Read top to bottom: commitTwoPhase, then the
// decision's RPC and how its failures are told apart.

// commitTwoPhase prepares every writer, then asks the coordinator to
// decide. Nothing is rolled back once an attempt may have reached the
// coordinator's log: the outcome is then what the coordinator answers, or
// unknown.
func (t *Tx) commitTwoPhase(ctx context.Context, all, writers []*Branch, commitReaders func() error) (Result, txState, error) {
	res := Result{Path: PathTwoPhase}
	if t.c.coords == nil {
		t.abortAll(ctx, all)
		return res, txAborted, &AbortedError{GTRID: t.gtrid, Reason: fmt.Sprintf("%d branches wrote", len(writers)), Cause: ErrNoCoordinator, stage: stageNoCoordinator}
	}
	if err := t.ownByCluster(ctx, writers); err != nil {
		t.abortAll(ctx, all)
		return res, txAborted, &AbortedError{GTRID: t.gtrid, Reason: "the branches cannot be named after the coordinator's cluster; nothing was prepared", Cause: err, stage: stageSetup}
	}
	// Phase 1: prepare every writer in parallel; read-only branches commit meanwhile.
	prepErr := t.prepareAll(ctx, writers, commitReaders)
	if prepErr != nil {
		t.abortAll(ctx, all)
		return res, txAborted, &AbortedError{GTRID: t.gtrid, Reason: "phase 1 failed", Cause: prepErr, stage: stagePrepare}
	}
	// The decision: one RPC.
	req := &api.CommitRequest{Gtrid: t.gtrid.String(), Options: &api.CommitOptions{Durability: t.opts.Durability, Visibility: t.opts.Visibility}}
	settleAll := t.opts.Visibility != VisibilityAsync && t.c.current().settlesAny.Load()
	for _, b := range writers {
		b.clientSettles = settleAll || b.rm.dialect.SessionBound()
		req.Branches = append(req.Branches, &api.Branch{Rm: b.rm.name, ClientSettles: b.clientSettles})
	}
	// Session-bound branches (MariaDB) can only be committed here, on the
	// session that prepared them. The coordinator sends the durable decision
	// in the response headers before its own phase 2 (api.MetadataEarlyDecision),
	// so they commit while it commits the others. Under visibility sync,
	// with a coordinator that allows it (api.MetadataClientSettlesAny),
	// every branch commits here, in parallel, as raw 2PC would: the
	// reply then waits for no phase 2 of the coordinator's (which only
	// checks, after a head start, that they are gone). Under visibility
	// async the coordinator keeps the others: the reply waits for none.
	var settled chan bool
	takenOver := false
	onCommitted := func(taken bool) {
		settled = make(chan bool, 1)
		if taken {
			// The coordinator settles them once its standby holds the
			// decision: end the sessions so that it can (api.MetadataMayTakeOver).
			takenOver = true
			t.releaseOwn(writers)
			settled <- false
			return
		}
		if failpoint.Inject("before-client-settles") != nil { // kill: COMMIT is durable, the client settled nothing
			t.releaseOwn(writers)
			settled <- false
			return
		}
		// Here, on the caller's goroutine, inside the call: the reply waits
		// in the stream until the branches are committed (no hand-off to
		// another goroutine; the coordinator's own phase 2, if any, runs
		// meanwhile).
		settled <- t.settleOwn(ctx, writers, true)
	}
	if !anyClientSettles(writers) {
		onCommitted = nil
	}
	_ = failpoint.Inject("before-commit-rpc") // kill: the client dies with every branch prepared
	dctx, dspan := t.decisionSpan(ctx, "coordinator", "")
	rpcCtx, cancel := t.c.decisionContext(dctx)
	defer cancel()
	// The owner the branches are named after: a coordinator of another
	// cluster refuses the Commit before writing anything (api.MetadataOwner).
	rpcCtx = withOwner(rpcCtx, writers)
	rpcStart := time.Now()
	mayTakeOver := t.opts.MayTakeOver && t.opts.Visibility == VisibilityAsync
	resp, calls, err := t.c.commitRPC(rpcCtx, req, t.trace, t.traceCoord, mayTakeOver, onCommitted)
	if settleAll && refusedClientSettles(err) {
		// A coordinator older than the Health that allowed it (replaced at
		// the same address, or the primary after a failover): it refused
		// the request as a whole, before writing anything. Ask again, the
		// old way, and keep asking so until a Health says otherwise.
		t.c.current().settlesAny.Store(false)
		req.Branches = req.Branches[:0]
		for _, b := range writers {
			b.clientSettles = b.rm.dialect.SessionBound()
			req.Branches = append(req.Branches, &api.Branch{Rm: b.rm.name, ClientSettles: b.clientSettles})
		}
		var more int
		resp, more, err = t.c.commitRPC(rpcCtx, req, t.trace, t.traceCoord, mayTakeOver, onCommitted)
		calls += more
	}
	_ = failpoint.Inject("after-commit-rpc") // kill: the decision is made; session-bound branches wait for the coordinator
	res.CoordinatorCalls = calls
	if t.rec {
		dspan.SetAttributes(AttrCalls.Int(calls))
		if err == nil {
			dspan.SetAttributes(AttrOutcome.String(strings.ToLower(resp.GetOutcome().String())))
		}
	}
	endSpan(dspan, err)
	if settled != nil {
		// The durable decision was COMMIT (commitRPC then never fails).
		// Wait for the session-bound commits whatever the reply says: the
		// sessions go back to the application when Commit returns, and one
		// still holding its prepared branch would refuse the next XA START
		// (XAER_RMFAIL). A reply with phase 2 pending (visibility async, or
		// a database slow) must not skip this wait.
		own := <-settled
		res.Phase2Pending = resp.GetPhase2Pending() || !own
		if takenOver {
			for _, b := range writers {
				if b.rm.dialect.SessionBound() {
					res.EndedSessions = append(res.EndedSessions, b.rm.name)
				}
			}
		}
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
		return res, txAborted, &AbortedError{GTRID: t.gtrid, Reason: "the coordinator decided ABORT: " + resp.Message, stage: stageDecidedAbort}
	case err == nil:
		t.releaseOwn(writers)
		return res, txUnknown, &OutcomeUnknownError{GTRID: t.gtrid, Cause: fmt.Errorf("coordinator answered outcome %v", resp.Outcome)}
	case errors.As(err, new(*unknownAfterError)):
		// An earlier attempt ended without an answer: the decision may exist
		// (and a promoted standby may be committing it). Never roll back.
	case errors.As(err, new(*noPrimaryError)):
		// Every attempt was refused before anything was written.
		t.abortAll(ctx, all)
		return res, txAborted, &AbortedError{GTRID: t.gtrid, Reason: "no coordinator served as the primary; nothing was decided and the branches were rolled back", Cause: err, stage: stageNoCoordinator}
	case isRejection(err):
		// Every attempt was answered, and this one refused the request as a
		// whole: no decision was written anywhere, so rolling back is safe.
		t.abortAll(ctx, all)
		return res, txAborted, &AbortedError{GTRID: t.gtrid, Reason: "the coordinator refused the commit", Cause: err, stage: stageRefused}
	case errors.As(err, new(*logFullError)):
		// Refused on every try until ctx ended: no decision was written.
		t.abortAll(ctx, all)
		return res, txAborted, &AbortedError{GTRID: t.gtrid, Cause: err,
			Reason: fmt.Sprintf("the coordinator's decision log stayed full until the context ended (%d tries); nothing was decided and the branches were rolled back", calls), stage: stageRefused}
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

// ownByCluster names the writers decided by the coordinator after its
// cluster: a PostgreSQL branch is named at PREPARE (now); a MariaDB/MySQL
// branch was named at XA START, and must carry the same owner, or the
// transaction cannot be decided by this cluster.
func (t *Tx) ownByCluster(ctx context.Context, writers []*Branch) error {
	id, err := t.c.clusterID(ctx)
	if err != nil {
		return err
	}
	for _, b := range writers {
		if b.rm.dialect.SessionBound() {
			if b.id.Owner != id {
				return fmt.Errorf("client: rm %q: its branch began (XA START) named after owner %s before the coordinator's cluster (%s) was known, "+
					"so the coordinator could not settle it: nothing was prepared; try again", b.rm.name, b.id.Owner.Short(), id.Short())
			}
			continue
		}
		b.id.Owner = id
	}
	return nil
}

// withOwner adds to ctx's outgoing metadata the owner the coordinator-decided
// branches among bs are named after (api.MetadataOwner), if any is owned.
func withOwner(ctx context.Context, bs []*Branch) context.Context {
	for _, b := range bs {
		if b.id.CommitPoint == "" && b.id.Owned() {
			return metadata.AppendToOutgoingContext(ctx, api.MetadataOwner, b.id.Owner.String())
		}
	}
	return ctx
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
// COMMITTED with phase 2 pending, not as an unknown outcome. With
// mayTakeOver the coordinator may take the client-settled branches over
// (api.MetadataMayTakeOver): onCommitted is then told so.
func (c *Client) commitRPC(ctx context.Context, req *api.CommitRequest, tr *waits.Trace, traceCoord, mayTakeOver bool, onCommitted func(takenOver bool)) (*api.CommitResponse, int, error) {
	if traceCoord {
		ctx = metadata.AppendToOutgoingContext(ctx, api.MetadataTrace, "1")
	}
	if onCommitted != nil {
		ctx = metadata.AppendToOutgoingContext(ctx, api.MetadataEarlyDecision, "1")
		if mayTakeOver {
			ctx = metadata.AppendToOutgoingContext(ctx, api.MetadataMayTakeOver, "1")
		}
	}
	committed := false
	onHeader := func(md metadata.MD) bool {
		if v := md.Get(api.MetadataDecision); !committed && len(v) > 0 && v[0] == api.Outcome_COMMITTED.String() {
			committed = true
			onCommitted(len(md.Get(api.MetadataTakenOver)) > 0)
			return true
		}
		return false
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
			// settle is the part of the call onHeader spent committing the
			// branches, waited for as their own events: not the coordinator's.
			var settle waits.Span
			if onCommitted != nil {
				resp, trailer, settle, err = c.commitStream(ctx, ep, req, onHeader)
			} else {
				resp, err = ep.api.Commit(ctx, req, grpc.Trailer(&trailer))
			}
			end := time.Now()
			c.waits.Record(waits.CoordinatorCommit, end.Sub(start)-settle.Dur)
			if settle.Dur > 0 {
				tr.Add(waits.SideClient, waits.CoordinatorCommit, "", start, settle.Start.Sub(start))
				tr.Add(waits.SideClient, waits.CoordinatorCommit, "", settle.End(), end.Sub(settle.End()))
			} else {
				tr.Add(waits.SideClient, waits.CoordinatorCommit, "", start, end.Sub(start))
			}
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
// the unary API does not allow. On the wire it is the same unary call. It
// also returns when onHeader ran, and for how long, if it reported that it
// acted on the header (zero otherwise).
func (c *Client) commitStream(ctx context.Context, ep *endpoint, req *api.CommitRequest, onHeader func(metadata.MD) bool) (*api.CommitResponse, metadata.MD, waits.Span, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := ep.conn.NewStream(ctx, &grpc.StreamDesc{StreamName: "Commit"}, api.Coordinator_Commit_FullMethodName)
	if err != nil {
		return nil, nil, waits.Span{}, err
	}
	resp := new(api.CommitResponse)
	if err := stream.SendMsg(req); err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, waits.Span{}, err
	}
	// io.EOF from SendMsg: the call already ended; RecvMsg returns its status.
	_ = stream.CloseSend()
	var in waits.Span
	if md, err := stream.Header(); err == nil {
		start := time.Now()
		if onHeader(md) {
			in = waits.Span{Start: start, Dur: time.Since(start)}
		}
	}
	if err := stream.RecvMsg(resp); err != nil {
		return nil, stream.Trailer(), in, err
	}
	return resp, stream.Trailer(), in, nil
}

// refusedClientSettles reports whether err is a coordinator's refusal of
// client_settles on a branch that is not session-bound (INVALID_ARGUMENT
// naming it): a coordinator older than api.MetadataClientSettlesAny.
func refusedClientSettles(err error) bool {
	st, ok := status.FromError(err)
	return ok && err != nil && st.Code() == codes.InvalidArgument && strings.Contains(st.Message(), "client_settles")
}

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
