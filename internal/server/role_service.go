package server

import (
	"context"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/tandem-tx/tandem/api"
	"github.com/tandem-tx/tandem/internal/version"
)

// roleService is the gRPC face of the server: it hands every call to the
// current role's service. Calls of the primary's service pass a gate, so
// that a switchover can stop new decisions and wait for those in flight.
type roleService struct {
	api.UnimplementedCoordinatorServer
	cur atomic.Pointer[roleImpl]
}

type roleImpl struct {
	srv  api.CoordinatorServer
	gate *gate // nil: the role decides nothing, no need to drain
}

func (r *roleService) set(srv api.CoordinatorServer, g *gate) {
	r.cur.Store(&roleImpl{srv: srv, gate: g})
}

// enter admits a call into the current role's service; a closed gate (a
// switchover or fencing in progress) refuses it before anything is
// written, and says so in the api.MetadataNotPrimary trailer.
func (r *roleService) enter(ctx context.Context) (*roleImpl, error) {
	h := r.cur.Load()
	if h.gate != nil {
		if err := h.gate.enter(); err != nil {
			notPrimary(ctx, "closing")
			return nil, err
		}
	}
	return h, nil
}

// notPrimary marks a refused call's trailer with the role that refused it
// (api.MetadataNotPrimary): nothing was written, the client may go to the
// coordinator that serves.
func notPrimary(ctx context.Context, role string) {
	_ = grpc.SetTrailer(ctx, metadata.Pairs(api.MetadataNotPrimary, role))
}

func (h *roleImpl) leave() {
	if h.gate != nil {
		h.gate.leave()
	}
}

func (r *roleService) Commit(ctx context.Context, req *api.CommitRequest) (*api.CommitResponse, error) {
	h, err := r.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer h.leave()
	return h.srv.Commit(ctx, req)
}

func (r *roleService) Abort(ctx context.Context, req *api.AbortRequest) (*api.AbortResponse, error) {
	h, err := r.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer h.leave()
	return h.srv.Abort(ctx, req)
}

func (r *roleService) Status(ctx context.Context, req *api.StatusRequest) (*api.StatusResponse, error) {
	h, err := r.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer h.leave()
	return h.srv.Status(ctx, req)
}

func (r *roleService) Health(ctx context.Context, req *api.HealthRequest) (*api.HealthResponse, error) {
	return r.cur.Load().srv.Health(ctx, req)
}

// gate counts the calls in a primary's service and, once closed, refuses
// new ones.
type gate struct {
	mu     sync.Mutex
	refuse error
	n      int
	idle   chan struct{}
}

func (g *gate) enter() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.refuse != nil {
		return g.refuse
	}
	g.n++
	return nil
}

func (g *gate) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n--
	if g.n == 0 && g.idle != nil {
		close(g.idle)
		g.idle = nil
	}
}

// close refuses new calls with err; the channel is closed once no call is
// in flight.
func (g *gate) close(err error) <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.refuse = err
	ch := make(chan struct{})
	if g.n == 0 {
		close(ch)
	} else {
		g.idle = ch
	}
	return ch
}

// reopen lets calls in again (a switchover that did not happen).
func (g *gate) reopen() {
	g.mu.Lock()
	g.refuse = nil
	g.mu.Unlock()
}

// refusingService is the API of a role that decides nothing.
// Its refusals carry the api.MetadataNotPrimary trailer naming role.
type refusingService struct {
	api.UnimplementedCoordinatorServer
	role    Role
	refusal func() error
	health  func() string
}

func (s *refusingService) Commit(ctx context.Context, _ *api.CommitRequest) (*api.CommitResponse, error) {
	notPrimary(ctx, s.role.String())
	return nil, s.refusal()
}
func (s *refusingService) Abort(ctx context.Context, _ *api.AbortRequest) (*api.AbortResponse, error) {
	notPrimary(ctx, s.role.String())
	return nil, s.refusal()
}
func (s *refusingService) Status(ctx context.Context, _ *api.StatusRequest) (*api.StatusResponse, error) {
	notPrimary(ctx, s.role.String())
	return nil, s.refusal()
}
func (s *refusingService) Health(context.Context, *api.HealthRequest) (*api.HealthResponse, error) {
	return &api.HealthResponse{Serving: false, Version: version.Version(), Message: s.health()}, nil
}
