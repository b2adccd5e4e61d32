package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tandem-tx/tandem/api"
	"github.com/tandem-tx/tandem/internal/coord"
	"github.com/tandem-tx/tandem/internal/service"
	"github.com/tandem-tx/tandem/internal/standby"
)

// Role is what a running coordinator does.
type Role string

const (
	// RolePrimary decides and settles.
	RolePrimary Role = "primary"
	// RoleStandby copies its primary's decision log and decides nothing.
	RoleStandby Role = "standby"
	// RoleDemoted is a primary that handed over during a switchover (or is
	// about to): its coordinator is closed and it decides nothing; next it
	// follows the new primary (Follow) or, if the switchover failed,
	// resumes (Resume).
	RoleDemoted Role = "demoted"
	// RoleFenced is a primary that learnt that another coordinator of its
	// cluster was promoted: it decides and settles nothing, and says who
	// the new primary is.
	RoleFenced Role = "fenced"
)

// peerCheckEvery is how often a primary with --peer asks the peer for its
// epoch while it runs: the longest a superseded primary goes on deciding
// (under max-availability; under max-protection it cannot acknowledge
// anything without its standby anyway).
const peerCheckEvery = time.Second

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

func (r *roleService) enter() (*roleImpl, error) {
	h := r.cur.Load()
	if h.gate != nil {
		if err := h.gate.enter(); err != nil {
			return nil, err
		}
	}
	return h, nil
}

func (h *roleImpl) leave() {
	if h.gate != nil {
		h.gate.leave()
	}
}

func (r *roleService) Commit(ctx context.Context, req *api.CommitRequest) (*api.CommitResponse, error) {
	h, err := r.enter()
	if err != nil {
		return nil, err
	}
	defer h.leave()
	return h.srv.Commit(ctx, req)
}

func (r *roleService) Abort(ctx context.Context, req *api.AbortRequest) (*api.AbortResponse, error) {
	h, err := r.enter()
	if err != nil {
		return nil, err
	}
	defer h.leave()
	return h.srv.Abort(ctx, req)
}

func (r *roleService) Status(ctx context.Context, req *api.StatusRequest) (*api.StatusResponse, error) {
	h, err := r.enter()
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
type refusingService struct {
	api.UnimplementedCoordinatorServer
	refusal func() error
	health  func() string
}

func (s *refusingService) Commit(context.Context, *api.CommitRequest) (*api.CommitResponse, error) {
	return nil, s.refusal()
}
func (s *refusingService) Abort(context.Context, *api.AbortRequest) (*api.AbortResponse, error) {
	return nil, s.refusal()
}
func (s *refusingService) Status(context.Context, *api.StatusRequest) (*api.StatusResponse, error) {
	return nil, s.refusal()
}
func (s *refusingService) Health(context.Context, *api.HealthRequest) (*api.HealthResponse, error) {
	return &api.HealthResponse{Serving: false, Version: service.Version, Message: s.health()}, nil
}

// Role reports what the server does now.
func (s *Server) Role() Role {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.role
}

// Coordinator is the primary's coordinator, nil in every other role.
func (s *Server) Coordinator() *coord.Coordinator {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.coord
}

// setGaugesLocked replaces the registered metrics with the current role's.
// s.mu held (or the server not yet shared).
func (s *Server) setGaugesLocked() {
	s.unregister()
	gauges, standbyGauges := s.registerGauges(), s.registerStandbyGauges()
	s.unregister = func() { gauges(); standbyGauges() }
}

// becomePrimary opens the coordinator and serves as the primary. s.mu held
// (or the server not yet shared).
func (s *Server) becomePrimary() error {
	c, sh, err := s.openPrimary()
	if err != nil {
		return err
	}
	s.coord, s.shipper, s.receiver, s.following, s.fenced, s.role, s.resumable = c, sh, nil, "", nil, RolePrimary, false
	d := service.Defaults{AsyncVisibility: s.cfg.Visibility == "async"}
	if sh != nil {
		d.HealthNote = func() string { return describe(sh.Status()) }
	}
	if s.svc == nil {
		s.svc = &roleService{}
	}
	s.svc.set(service.New(c, d), &gate{})
	if sh != nil {
		s.statusOf.Store(&statusSource{get: sh.Status})
	} else {
		s.statusOf.Store(&statusSource{})
	}
	s.setGaugesLocked()
	if sh != nil && s.opts.Standby.Peer != "" {
		s.startPeerCheckLocked(sh.Identity())
	}
	return nil
}

// becomeStandby follows primary; with reseed, the data directory's log and
// identity are first moved aside (standby.Reseed). s.mu held (or the
// server not yet shared).
func (s *Server) becomeStandby(primary string, reseed bool) error {
	if reseed {
		moved, err := standby.Reseed(s.cfg.DataDir)
		if err != nil {
			return err
		}
		s.logInfo("re-seeding: the old decision log and cluster identity were moved aside", "moved_to", moved)
	}
	so := s.opts.Standby
	r, err := standby.OpenReceiver(standby.ReceiverConfig{Primary: primary, Dir: s.cfg.DataDir,
		SegmentSize: coord.SegmentSizeFor(int64(s.cfg.LogSize)), LogSize: int64(s.cfg.LogSize), NoSync: s.opts.NoSync,
		NetTimeout: so.NetTimeout, Logger: s.opts.Logger, NetOptions: so.net(), Auth: so.Auth, Listen: so.Listen})
	if err != nil {
		return err
	}
	s.coord, s.shipper, s.receiver, s.following, s.fenced, s.role, s.resumable = nil, nil, r, primary, nil, RoleStandby, false
	if s.svc == nil {
		s.svc = &roleService{}
	}
	s.svc.set(&refusingService{
		refusal: func() error {
			st := r.Status()
			return status.Errorf(codes.FailedPrecondition,
				"this coordinator is a standby of the primary at %s (epoch %d): it decides nothing; send Commit, Abort and Status to the primary, or promote this standby (tandem promote)",
				st.Standby, st.Epoch)
		},
		health: func() string {
			msg := describe(r.Status())
			if err := r.LastError(); err != nil {
				msg += "; last error: " + err.Error()
			}
			return msg
		},
	}, nil)
	s.statusOf.Store(&statusSource{get: r.Status})
	s.setGaugesLocked()
	return nil
}

// becomeIdleLocked serves a role that decides nothing (demoted, fenced)
// after the previous role's parts were closed.
func (s *Server) becomeIdleLocked(role Role, why func() string, id standby.Identity) {
	s.coord, s.shipper, s.receiver, s.role = nil, nil, nil, role
	st := standby.Status{Role: string(role), Cluster: id.Cluster.String(), Epoch: id.Epoch}
	s.svc.set(&refusingService{
		refusal: func() error { return status.Error(codes.FailedPrecondition, why()) },
		health:  func() string { return describe(st) + ": " + why() },
	}, nil)
	s.statusOf.Store(&statusSource{get: func() standby.Status { return st }})
	s.setGaugesLocked()
}

// closeRole closes the current role's parts; the server decides nothing
// afterwards.
func (s *Server) closeRole() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closeRoleLocked()
}

func (s *Server) closeRoleLocked() error {
	s.stopPeerCheckLocked()
	s.unregister()
	s.unregister = func() {}
	var err error
	if s.receiver != nil {
		err = s.receiver.Close()
	}
	if s.coord != nil {
		// First: a decision stalled waiting for the standby must not be
		// acknowledged once closing the shipper releases it.
		s.coord.Halt()
	}
	if s.shipper != nil {
		// Before the coordinator: its last checkpoint must not wait for a
		// standby (the records it carries are already shipped).
		_ = s.shipper.Close()
	}
	if s.coord != nil {
		err = s.coord.Close()
	}
	s.coord, s.shipper, s.receiver = nil, nil, nil
	return err
}

func (s *Server) startPeerCheckLocked(id standby.Identity) {
	s.stopPeerCheckLocked()
	stop := make(chan struct{})
	s.stopPeer = stop
	peer := s.opts.Standby.Peer
	go func() {
		t := time.NewTicker(peerCheckEvery)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			if _, _, err := standby.CheckPeer(peer, id, s.opts.Standby.Auth, time.Second); errors.Is(err, standby.ErrFenced) {
				s.fence(err)
				return
			}
		}
	}()
}

func (s *Server) stopPeerCheckLocked() {
	if s.stopPeer != nil {
		close(s.stopPeer)
		s.stopPeer = nil
	}
}

// fence stops a primary that learnt of a newer epoch of its cluster: new
// calls are refused with err (which names the new primary), the shipper and
// the coordinator are closed (no phase 2, no in-doubt scan, no decision),
// and the server stays up to say so.
func (s *Server) fence(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.role != RolePrimary || s.closed || s.shipper == nil {
		return
	}
	if peer := s.opts.Standby.Peer; peer != "" {
		// Name the new primary precisely when it is the configured peer;
		// and when the peer answers and is not newer, the claim (from a
		// peer that authenticated on --standby-listen) is not believed: a
		// running standby answers with its own epoch, so only a promoted
		// peer (or one that cannot be reached) confirms it.
		info, reached, perr := standby.CheckPeer(peer, s.shipper.Identity(), s.opts.Standby.Auth, time.Second)
		switch {
		case errors.Is(perr, standby.ErrFenced):
			err = perr
		case reached:
			s.logError("a peer claimed a newer epoch, but the configured --peer answers that it is not newer: not fenced", "claim", err, "peer", info)
			return
		}
	}
	s.logError("FENCED: another coordinator of this cluster was promoted; this one stops deciding and settling (it keeps answering, refusing every call)", "error", err)
	id := s.shipper.Identity()
	if h := s.svc.cur.Load(); h.gate != nil {
		h.gate.close(status.Error(codes.FailedPrecondition, err.Error()))
	}
	_ = s.closeRoleLocked()
	s.fenced = err
	s.becomeIdleLocked(RoleFenced, func() string { return err.Error() }, id)
}

var errStopped = errors.New("server: stopping: no role change")

// ErrRole is wrapped by errors of a role change the server's role does not
// allow.
var ErrRole = errors.New("server: wrong role for this")

// Promote makes a running standby the primary (failover, or the second step
// of a switchover): it stops following, bumps the epoch in its data
// directory, opens its copy of the log as the primary's (replay, phase 2 of
// every unfinished COMMIT, the in-doubt scan), serves decisions, ships to a
// standby of its own on --standby-listen, and tells the old primary (best
// effort) that it is superseded.
//
// A standby that is not synchronized with its primary is refused (the
// error wraps standby.ErrNotSynchronized) unless o.AcceptDataLoss: see
// standby.Promote.
func (s *Server) Promote(o standby.PromoteOptions) (standby.Identity, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return standby.Identity{}, errStopped
	}
	if s.role != RoleStandby {
		return standby.Identity{}, fmt.Errorf("%w: this coordinator is %s; only a standby can be promoted", ErrRole, s.role)
	}
	old := s.following
	at := s.receiver.Position()
	// Checked while the standby still follows (a refusal leaves it so):
	// closing the receiver below records "not synchronized", as any end of
	// the stream does.
	err := standby.CheckPromotable(s.cfg.DataDir)
	if err == nil {
		err = s.receiver.TrustedWhileFollowing()
	}
	if err == nil {
		o.CheckedWhileFollowing = true
	} else if !o.AcceptDataLoss {
		return standby.Identity{}, fmt.Errorf("%w: promote refused: %w", ErrRole, err)
	} else if !o.OldPrimaryStopped {
		// The old primary may run on, cut off: go ahead only if it is
		// reached now (the new epoch then fences it).
		id, _, lerr := standby.LoadIdentity(s.cfg.DataDir)
		if lerr != nil {
			return standby.Identity{}, fmt.Errorf("promote: %w", lerr)
		}
		info, reached, _ := standby.CheckPeer(old, id, s.opts.Standby.Auth, time.Second)
		if !reached {
			return standby.Identity{}, fmt.Errorf("%w: promote refused: %w", ErrRole, standby.OldPrimaryMayRun("the old primary at "+old+" could not be reached: "+info))
		}
		o.OldPrimaryReached = true
	}
	if err := s.closeRoleLocked(); err != nil {
		s.logError("closing the standby's log before the promotion", "error", err)
	}
	id, err := standby.Promote(s.cfg.DataDir, o)
	if err != nil {
		if ferr := s.becomeStandby(old, false); ferr != nil {
			s.logError("could not follow the primary again after a failed promotion", "error", ferr)
			s.becomeIdleLocked(RoleDemoted, func() string {
				return "a failed promotion left this standby stopped: restart it (tandem serve --standby-of " + old + ")"
			}, standby.Identity{})
			s.resumable = false
		}
		return id, fmt.Errorf("promote: %w", err)
	}
	if err := s.becomePrimary(); err != nil {
		s.becomeIdleLocked(RoleDemoted, func() string {
			return "the promotion to epoch " + fmt.Sprint(id.Epoch) + " could not open the coordinator: " + err.Error() + "; fix it and restart (tandem serve --data-dir " + s.cfg.DataDir + ")"
		}, id)
		s.resumable = false
		return id, fmt.Errorf("promote: epoch %d taken, but the coordinator did not open: %w", id.Epoch, err)
	}
	s.logInfo("PROMOTED: this coordinator is the primary now", "cluster", id.Cluster.String(), "epoch", id.Epoch, "copied_up_to", at.String(), "old_primary", old)
	go func() {
		// Until the old primary is reached (or 30 tries): if it runs, it
		// fences itself on this PROBE.
		for range 30 {
			info, reached, err := standby.CheckPeer(old, id, s.opts.Standby.Auth, time.Second)
			if reached {
				s.logInfo("told the old primary of the new epoch", "old_primary", old, "answer", info, "error", err)
				return
			}
			time.Sleep(time.Second)
		}
		s.logInfo("the old primary was not reachable to be told of the new epoch (if it runs, its --peer check fences it)", "old_primary", old)
	}()
	return id, nil
}

// Handover is where a demoted primary's log ended and whether the standby
// had all of it.
type Handover struct {
	Cluster   string `json:"cluster"`
	Epoch     uint64 `json:"epoch"`
	Position  string `json:"position"`   // the primary's last durable record
	StandbyAt string `json:"standby_at"` // the standby's acknowledged position (== Position)
}

// Demote is the first step of a switchover: the primary refuses new calls
// (UNAVAILABLE, retry on the new primary), waits for the calls in flight,
// closes its coordinator (no more decisions, phase 2 or in-doubt scans),
// and waits until its standby has acknowledged every record of its log.
// If any step fails it serves as the primary again and returns the error;
// otherwise it is RoleDemoted: Follow the promoted standby next, or Resume.
func (s *Server) Demote(ctx context.Context) (Handover, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return Handover{}, errStopped
	}
	if s.role != RolePrimary {
		return Handover{}, fmt.Errorf("%w: this coordinator is %s; only a primary can hand over", ErrRole, s.role)
	}
	sh := s.shipper
	if sh == nil {
		return Handover{}, fmt.Errorf("%w: this primary has no standby (start it with --standby-listen, and a standby with --standby-of)", ErrRole)
	}
	if st := sh.Status(); !st.Connected {
		return Handover{}, errors.New("switchover refused: no standby is connected to this primary, so nothing could take over")
	} else if st.Transport == string(standby.Arch) {
		return Handover{}, errors.New("switchover refused: the arch transport ships only completed segments, so the standby can never have this primary's last records; switch over with sync or async (restart the primary with --transport sync or async)")
	}
	g := s.svc.cur.Load().gate
	idle := g.close(status.Error(codes.Unavailable, "switchover in progress: this coordinator is handing over to its standby; retry against the new primary"))
	select {
	case <-idle:
	case <-ctx.Done():
		g.reopen()
		return Handover{}, fmt.Errorf("switchover cancelled while waiting for the calls in flight: %w", ctx.Err())
	}
	id := sh.Identity()
	s.stopPeerCheckLocked()
	// The coordinator is closed while the shipper still runs, so that the
	// records of its last checkpoint reach the standby as well.
	c := s.coord
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	netTimeout := s.opts.Standby.NetTimeout
	if netTimeout <= 0 {
		netTimeout = 10 * time.Second // the shipper's default
	}
	released := false
	select {
	case err := <-closed:
		if err != nil {
			s.logError("switchover: closing the coordinator", "error", err)
		}
	case <-time.After(2 * netTimeout):
		_ = sh.Close() // a stalled sync flush: release it (the standby cannot have everything now)
		released = true
		<-closed
	}
	s.coord = nil
	var st standby.Status
	deadline := time.Now().Add(2 * netTimeout)
	for {
		st = sh.Status()
		if !released && st.Connected && st.LagRecords == 0 && st.StandbyAt == st.PrimaryAt {
			break
		}
		if released || time.Now().After(deadline) || ctx.Err() != nil {
			_ = s.closeRoleLocked()
			err := fmt.Errorf("switchover abandoned: the standby did not acknowledge this primary's last record %s (it has %s, connected %v) within %v; this coordinator serves as the primary again",
				st.PrimaryAt, st.StandbyAt, st.Connected, 2*netTimeout)
			if rerr := s.becomePrimary(); rerr != nil {
				s.becomeIdleLocked(RoleDemoted, func() string {
					return "a switchover was abandoned and the primary could not reopen: " + rerr.Error() + "; restart it"
				}, id)
				return Handover{}, fmt.Errorf("%w; and reopening the primary failed: %v", err, rerr)
			}
			return Handover{}, err
		}
		time.Sleep(5 * time.Millisecond)
	}
	_ = s.closeRoleLocked()
	h := Handover{Cluster: id.Cluster.String(), Epoch: id.Epoch, Position: st.PrimaryAt, StandbyAt: st.StandbyAt}
	s.resumable = true
	s.becomeIdleLocked(RoleDemoted, func() string {
		return "switchover: this coordinator handed over (its standby has every record up to " + h.Position +
			"); it decides nothing: send calls to the new primary (or tandem switchover resumes it)"
	}, id)
	s.logInfo("DEMOTED: the standby has every record of this primary's log; waiting to follow the new primary", "position", h.Position)
	return h, nil
}

// Resume makes a demoted coordinator the primary again (a switchover whose
// promotion failed).
func (s *Server) Resume() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errStopped
	}
	if s.role != RoleDemoted || !s.resumable {
		return fmt.Errorf("%w: this coordinator is %s; only a primary demoted by a switchover resumes", ErrRole, s.role)
	}
	return s.becomePrimary()
}

// Follow makes a demoted or fenced coordinator a standby of primary (the
// promoted one): its log and identity are moved aside (they are superseded:
// a demoted primary's standby has all of it; a fenced one's extra records
// were never the cluster's), and it copies the new primary's log from the
// start.
func (s *Server) Follow(primary string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errStopped
	}
	if s.role != RoleDemoted && s.role != RoleFenced {
		return fmt.Errorf("%w: this coordinator is %s; only a demoted or fenced one follows a new primary", ErrRole, s.role)
	}
	if primary == "" {
		return errors.New("follow: the new primary's --standby-listen address is required")
	}
	if err := s.becomeStandby(primary, true); err != nil {
		return fmt.Errorf("follow %s: %w", primary, err)
	}
	s.logInfo("following the new primary as its standby", "primary", primary)
	return nil
}

// statusSource is where StandbyStatus reads from (the shipper, the receiver,
// or a fixed status of an idle role); get is nil for a primary without a
// standby.
type statusSource struct {
	get func() standby.Status
}
