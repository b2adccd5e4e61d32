// Package service exposes a coordinator over gRPC: it turns requests into
// calls on package coord and coord's errors into gRPC status codes. It holds
// no transaction logic of its own.
//
// Status codes: INVALID_ARGUMENT for a malformed request (nothing was
// written); FAILED_PRECONDITION for an Abort after COMMIT; UNAVAILABLE while
// shutting down (safe to retry); RESOURCE_EXHAUSTED when the decision log is
// full and admission control refused a new COMMIT (nothing was written: no
// decision exists; the message says what holds the log; safe to retry, or
// to roll back); INTERNAL when a decision could not be written (the outcome
// is unknown until the coordinator restarts).
package service

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tandem-tx/tandem/api"
	"github.com/tandem-tx/tandem/internal/coord"
	"github.com/tandem-tx/tandem/internal/metrics"
	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/internal/version"
	"github.com/tandem-tx/tandem/internal/waitwire"
	"github.com/tandem-tx/tandem/waits"
	"github.com/tandem-tx/tandem/xid"
)

// Service implements api.CoordinatorServer on a coordinator.
type Service struct {
	api.UnimplementedCoordinatorServer
	c *coord.Coordinator
	d Defaults
}

// Defaults are the coordinator's commit modes for requests that leave them unset.
type Defaults struct {
	// AsyncVisibility: reply right after the decision, not after phase 2.
	AsyncVisibility bool
	// HealthNote, if set, adds a line to Health's message (the standby
	// state: role, epoch, protection, lag).
	HealthNote func() string
}

// New returns the gRPC face of c.
func New(c *coord.Coordinator, d Defaults) *Service { return &Service{c: c, d: d} }

// mode maps a request's options onto the coordinator's, filling in defaults.
func (s *Service) mode(o *api.CommitOptions) coord.CommitMode {
	m := coord.CommitMode{WaitPhase2: !s.d.AsyncVisibility}
	switch o.GetVisibility() {
	case api.Visibility_SYNC:
		m.WaitPhase2 = true
	case api.Visibility_ASYNC:
		m.WaitPhase2 = false
	}
	switch o.GetDurability() {
	case api.Durability_WAIT:
		m.Durability = coord.DurabilityWait
	case api.Durability_NOWAIT:
		m.Durability = coord.DurabilityNoWait
	}
	return m
}

// Commit outcomes, as counted in /metrics (tandem_commit_outcomes_total).
var (
	commitsCommitted = metrics.Counter(metricCommitOutcomes, helpCommitOutcomes, "outcome", "committed")
	commitsPending   = metrics.Counter(metricCommitOutcomes, helpCommitOutcomes, "outcome", "committed_phase2_pending")
	commitsAborted   = metrics.Counter(metricCommitOutcomes, helpCommitOutcomes, "outcome", "aborted")
	commitsRefused   = metrics.Counter(metricCommitOutcomes, helpCommitOutcomes, "outcome", "refused")
	commitsUnknown   = metrics.Counter(metricCommitOutcomes, helpCommitOutcomes, "outcome", "unknown")
	// commitsTakenOver counts the COMMITs whose client-settled branches the
	// coordinator took over (api.MetadataMayTakeOver).
	commitsTakenOver = metrics.Counter("tandem_commit_take_overs_total",
		"COMMITs under visibility async whose session-bound (MariaDB) branches the coordinator took over because its standby did not hold the decision at once: the client ended their sessions and the coordinator committed them once the standby held the decision.")
)

const (
	metricCommitOutcomes = "tandem_commit_outcomes_total"
	helpCommitOutcomes   = "Commit requests by outcome: committed (phase 2 done at the reply), committed_phase2_pending, aborted (ABORT was decided first), refused (bad request, shutting down, decision log full), unknown (the decision could not be written)."
)

// Commit decides. Its handling is a "coordinator commit" wait on the
// coordinator's side. A request carrying api.MetadataTrace gets the
// coordinator's waits for its gtrid back in the trailer (api.MetadataTraceTrailer).
// A request with api.MetadataEarlyDecision and a client-settled branch gets
// the durable decision in the response headers before phase 2 (commitEarly).
func (s *Service) Commit(ctx context.Context, req *api.CommitRequest) (*api.CommitResponse, error) {
	start := time.Now()
	var tr *waits.Trace
	var g xid.GTRID
	md, _ := metadata.FromIncomingContext(ctx)
	if err := s.checkOwner(md, req.GetGtrid()); err != nil {
		commitsRefused.Inc()
		return nil, err
	}
	if len(md.Get(api.MetadataTrace)) > 0 {
		if parsed, err := xid.Parse(req.GetGtrid()); err == nil {
			g = parsed
			tr = s.c.Waits().StartTrace(g)
		}
	}
	early := len(md.Get(api.MetadataEarlyDecision)) > 0
	mode := s.mode(req.GetOptions())
	mode.MayTakeOver = slices.Contains(md.Get(api.MetadataMayTakeOver), "1")
	var r coord.Report
	var err error
	if early && clientSettles(req.GetBranches()) {
		r, err = s.commitEarly(ctx, req, mode)
	} else {
		r, err = s.c.Commit(ctx, req.GetGtrid(), branchRefs(req.GetBranches()), mode)
		if err == nil && r.TakenOver {
			_ = grpc.SetHeader(ctx, metadata.Pairs(api.MetadataTakenOver, "1"))
		}
	}
	if err == nil && r.TookOver {
		commitsTakenOver.Inc()
	}
	d := s.c.Waits().Since(waits.CoordinatorCommit, start)
	if tr != nil {
		s.c.Waits().EndTrace(g)
		tr.Add(waits.SideCoordinator, waits.CoordinatorCommit, "", start, d)
		_ = grpc.SetTrailer(ctx, metadata.Pairs(api.MetadataTraceTrailer, string(waitwire.Encode(tr.Spans()))))
	}
	if err != nil {
		if status.Code(toStatus(err)) == codes.Internal {
			commitsUnknown.Inc()
		} else {
			commitsRefused.Inc()
		}
		return nil, toStatus(err)
	}
	switch {
	case r.Outcome == coord.Committed && r.Phase2Pending:
		commitsPending.Inc()
	case r.Outcome == coord.Committed:
		commitsCommitted.Inc()
	default:
		commitsAborted.Inc()
	}
	return &api.CommitResponse{Outcome: outcome(r.Outcome), Phase2Pending: r.Phase2Pending, Branches: branches(r), Message: r.Message}, nil
}

// Abort serves the Abort RPC: the client hands over branches it could not
// roll back (coord.Coordinator.Abort).
func (s *Service) Abort(ctx context.Context, req *api.AbortRequest) (*api.AbortResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if err := s.checkOwner(md, req.GetGtrid()); err != nil {
		return nil, err
	}
	r, err := s.c.Abort(ctx, req.GetGtrid(), branchRefs(req.GetBranches()))
	if err != nil {
		return nil, toStatus(err)
	}
	return &api.AbortResponse{Outcome: outcome(r.Outcome), Phase2Pending: r.Phase2Pending, Branches: branches(r), Message: r.Message}, nil
}

// checkOwner refuses, before anything is written, a Commit or Abort whose
// branches are named after another owner than this coordinator's cluster
// (api.MetadataOwner): FAILED_PRECONDITION, which a client takes as "no
// decision was written". A call that names no owner (a client from before
// owners existed) and a coordinator without an identity pass.
func (s *Service) checkOwner(md metadata.MD, gtrid string) error {
	v := md.Get(api.MetadataOwner)
	ours := s.c.Owner()
	if len(v) == 0 || ours.IsZero() {
		return nil
	}
	named, err := xid.ParseOwner(v[0])
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "metadata %s: %v", api.MetadataOwner, err)
	}
	if named == ours {
		return nil
	}
	return status.Errorf(codes.FailedPrecondition,
		"gtrid %s: its branches are named after cluster %s, and this coordinator is cluster %s: it decides nothing for them (nothing was written). "+
			"The address now reaches another cluster's coordinator (a new deployment, an emptied data directory?): the branches are cluster %s's to settle; "+
			"a client learns the new cluster only for its next transactions", gtrid, named, ours, named.Short())
}

// Status serves the Status RPC: the outcome of a gtrid, or with resolve an
// abort of an undecided one (coord.Coordinator.Status).
func (s *Service) Status(ctx context.Context, req *api.StatusRequest) (*api.StatusResponse, error) {
	r, err := s.c.Status(ctx, req.GetGtrid(), req.GetResolve())
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &api.StatusResponse{Outcome: outcome(r.Outcome), Phase2Pending: r.Phase2Pending, Branches: branches(r), Message: r.Message}
	if !r.DecidedAt.IsZero() {
		resp.DecidedUnixNano = r.DecidedAt.UnixNano()
	}
	return resp, nil
}

// Health serves the Health RPC: whether the coordinator serves, and each
// resource manager's state.
func (s *Service) Health(ctx context.Context, _ *api.HealthRequest) (*api.HealthResponse, error) {
	serving, rms, unfinished := s.c.Health(ctx)
	// Best effort: a Health called in process (no transport) has no header.
	_ = grpc.SetHeader(ctx, metadata.Pairs(api.MetadataClientSettlesAny, "1"))
	resp := &api.HealthResponse{Serving: serving, Version: version.Version(), Unfinished: uint64(unfinished)}
	var notes []string
	for _, h := range rms {
		rh := &api.RMHealth{Name: h.Name, Driver: h.Driver, Reachable: h.Err == nil}
		if h.Err != nil {
			rh.Error = h.Err.Error()
		}
		if h.Misconfigured {
			// Not an outage: not ready until an operator fixes the DSN.
			resp.Serving = false
			notes = append(notes, h.Err.Error())
		}
		resp.Rms = append(resp.Rms, rh)
	}
	if !serving {
		notes = append([]string{"the decision log failed a write: restart the coordinator to replay it"}, notes...)
	}
	resp.Message = strings.Join(notes, "\n")
	if s.d.HealthNote != nil {
		if resp.Message != "" {
			resp.Message += "\n"
		}
		resp.Message += s.d.HealthNote()
	}
	return resp, nil
}

// commitEarly decides without waiting for phase 2, sends the decision in the
// response headers (it is durable: a transaction with a client-settled
// branch is always decided durably), then waits for phase 2 as the request's
// visibility asks, by repeating the Commit: a repeated Commit answers the
// first one's outcome and waits for the same phase 2. The client settles its
// own branches meanwhile, in parallel with the coordinator's.
//
// When the reply waits for no phase 2 of the coordinator's (visibility
// async, or the client settles every branch), nothing comes between the
// decision and the reply: the decision is made once and its header goes
// out with the reply (one write instead of two; the client reads it as
// before).
func (s *Service) commitEarly(ctx context.Context, req *api.CommitRequest, mode coord.CommitMode) (coord.Report, error) {
	refs := branchRefs(req.GetBranches())
	if !mode.WaitPhase2 || allClientSettle(req.GetBranches()) {
		r, err := s.c.Commit(ctx, req.GetGtrid(), refs, mode)
		if err == nil {
			_ = grpc.SetHeader(ctx, decisionHeader(r)) // sent with the reply
		}
		return r, err
	}
	decideOnly := mode
	decideOnly.WaitPhase2 = false
	decideOnly.MayTakeOver = false // take-over is for visibility async, which took the path above
	r, err := s.c.Commit(ctx, req.GetGtrid(), refs, decideOnly)
	if err != nil {
		return r, err
	}
	_ = grpc.SendHeader(ctx, decisionHeader(r)) // sent now
	return s.c.Commit(ctx, req.GetGtrid(), refs, mode)
}

// decisionHeader is the early decision's header: the outcome of r, and
// whether the coordinator took the client's branches over.
func decisionHeader(r coord.Report) metadata.MD {
	md := metadata.Pairs(api.MetadataDecision, outcome(r.Outcome).String())
	if r.TakenOver {
		md.Set(api.MetadataTakenOver, "1")
	}
	return md
}

func clientSettles(bs []*api.Branch) bool {
	for _, b := range bs {
		if b.GetClientSettles() {
			return true
		}
	}
	return false
}

// allClientSettle reports whether the client settles every one of bs.
func allClientSettle(bs []*api.Branch) bool {
	for _, b := range bs {
		if !b.GetClientSettles() {
			return false
		}
	}
	return len(bs) > 0
}

func branchRefs(bs []*api.Branch) []coord.BranchRef {
	out := make([]coord.BranchRef, len(bs))
	for i, b := range bs {
		out[i] = coord.BranchRef{RM: b.GetRm(), ClientSettles: b.GetClientSettles()}
	}
	return out
}

func outcome(o coord.Outcome) api.Outcome {
	switch o {
	case coord.Committed:
		return api.Outcome_COMMITTED
	case coord.Aborted:
		return api.Outcome_ABORTED
	}
	return api.Outcome_UNDECIDED
}

func branches(r coord.Report) []*api.BranchStatus {
	out := make([]*api.BranchStatus, len(r.Branches))
	for i, b := range r.Branches {
		st := api.BranchState_PENDING
		switch b.State {
		case coord.BranchDone:
			st = api.BranchState_DONE
		case coord.BranchNotFound:
			st = api.BranchState_NOT_FOUND
		}
		out[i] = &api.BranchStatus{Rm: b.RM, State: st, LastError: b.LastError, Attempts: b.Attempts}
	}
	return out
}

func toStatus(err error) error {
	var in *coord.InputError
	switch {
	case errors.As(err, &in):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, coord.ErrAlreadyCommitted), errors.Is(err, rm.ErrMisconfigured):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, coord.ErrClosed):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, coord.ErrLogFull):
		return status.Error(codes.ResourceExhausted, err.Error())
	case errors.Is(err, coord.ErrOutcomeUnknown):
		return status.Error(codes.Internal, err.Error())
	}
	return status.Error(codes.Unknown, err.Error())
}
