package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tandem-tx/tandem/api"
	"github.com/tandem-tx/tandem/internal/coord"
	"github.com/tandem-tx/tandem/internal/service"
	"github.com/tandem-tx/tandem/internal/standby"
)

// primaryRole decides and settles: it owns the coordinator, the shipper to
// its standby (nil without --standby-listen), the gate its API calls pass,
// and its goroutines (the --peer check; after a promotion, telling the old
// primary of the new epoch), which close stops and waits for.
type primaryRole struct {
	coord   *coord.Coordinator
	shipper *standby.Shipper
	svc     api.CoordinatorServer
	gate    *gate
	tasks   *tasks

	coordClosed bool // Demote closed the coordinator already
	closeOnce   sync.Once
	closeErr    error
}

// newPrimary opens the coordinator of the data directory (openPrimary) and
// builds the primary role around it; with --peer (and a shipper) it starts
// the fencing check.
func (s *Server) newPrimary() (*primaryRole, error) {
	c, sh, err := s.openPrimary()
	if err != nil {
		return nil, err
	}
	d := service.Defaults{AsyncVisibility: s.cfg.AsyncVisibility()}
	switch id, ok, err := standby.LoadIdentity(s.cfg.DataDir); {
	case sh != nil:
		d.HealthNote = func() string { return describe(sh.Status()) }
	case err == nil && ok:
		// No standby link, but a cluster identity (a standby promoted
		// without --standby-listen, a primary restarted without it): named,
		// so that clients following the primary can tell this coordinator
		// from another cluster's and from a superseded primary.
		note := fmt.Sprintf("role=primary cluster=%s epoch=%d standby=none", id.Cluster, id.Epoch)
		d.HealthNote = func() string { return note }
	}
	p := &primaryRole{coord: c, shipper: sh, svc: service.New(c, d), gate: &gate{}, tasks: newTasks(&s.roles.live)}
	if peer := s.opts.Standby.Peer; sh != nil && peer != "" {
		id := sh.Identity()
		p.tasks.run(func(ctx context.Context) { s.checkPeer(ctx, peer, id) })
	}
	return p, nil
}

// checkPeer asks peer for its epoch every peerCheckEvery until ctx ends;
// on a newer epoch it hands the claim to fence (in a goroutine of the
// controller: fencing closes this role, which waits for this goroutine)
// and returns.
func (s *Server) checkPeer(ctx context.Context, peer string, id standby.Identity) {
	t := time.NewTicker(peerCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, _, err := standby.CheckPeer(peer, id, s.opts.Standby.Auth, time.Second); errors.Is(err, standby.ErrFenced) {
			s.roles.tasks.run(func(context.Context) { s.fence(err) })
			return
		}
	}
}

func (p *primaryRole) kind() Role                          { return RolePrimary }
func (p *primaryRole) api() (api.CoordinatorServer, *gate) { return p.svc, p.gate }
func (p *primaryRole) coordinator() *coord.Coordinator     { return p.coord }

func (p *primaryRole) status() func() standby.Status {
	if p.shipper == nil {
		return nil
	}
	return p.shipper.Status
}

// close stops the role's goroutines, then halts the coordinator (a
// decision stalled waiting for the standby must not be acknowledged once
// closing the shipper releases it), closes the shipper before the
// coordinator (its last checkpoint must not wait for a standby: the
// records it carries are already shipped), and closes the coordinator.
func (p *primaryRole) close() error {
	p.closeOnce.Do(func() {
		p.tasks.stop()
		if !p.coordClosed {
			p.coord.Halt()
		}
		if p.shipper != nil {
			_ = p.shipper.Close()
		}
		if !p.coordClosed {
			p.coordClosed = true
			p.closeErr = p.coord.Close()
		}
	})
	return p.closeErr
}

// standbyRole copies the primary's log: it owns the receiver.
type standbyRole struct {
	receiver *standby.Receiver
	primary  string // the primary's --standby-listen address
	svc      *refusingService
}

// newStandby follows primary; with reseed, the data directory's log and
// identity are first moved aside (standby.Reseed).
func (s *Server) newStandby(primary string, reseed bool) (*standbyRole, error) {
	if reseed {
		moved, err := standby.Reseed(s.cfg.DataDir)
		if err != nil {
			return nil, err
		}
		s.logInfo("re-seeding: the old decision log and cluster identity were moved aside", "moved_to", moved)
	}
	so := s.opts.Standby
	r, err := standby.OpenReceiver(standby.ReceiverConfig{Primary: primary, Dir: s.cfg.DataDir,
		SegmentSize: coord.SegmentSizeFor(int64(s.cfg.LogSize)), LogSize: int64(s.cfg.LogSize), NoSync: s.opts.NoSync,
		NetTimeout: so.NetTimeout, Logger: s.opts.Logger, NetOptions: so.net(), Auth: so.Auth, Listen: so.Listen,
		Waits: s.waits})
	if err != nil {
		return nil, err
	}
	return &standbyRole{receiver: r, primary: primary, svc: &refusingService{
		role: RoleStandby,
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
	}}, nil
}

func (r *standbyRole) kind() Role                          { return RoleStandby }
func (r *standbyRole) api() (api.CoordinatorServer, *gate) { return r.svc, nil }
func (r *standbyRole) status() func() standby.Status       { return r.receiver.Status }
func (r *standbyRole) coordinator() *coord.Coordinator     { return nil }
func (r *standbyRole) close() error                        { return r.receiver.Close() }

// idleRole decides nothing and owns nothing: a demoted or fenced primary
// (which says why, and the identity it had), a standby whose promotion
// failed, or a stopped server. Every call is refused with why.
type idleRole struct {
	role      Role
	why       string
	id        standby.Identity
	resumable bool // a primary demoted by a switchover: Resume serves again
}

func (r *idleRole) kind() Role                      { return r.role }
func (r *idleRole) coordinator() *coord.Coordinator { return nil }
func (r *idleRole) close() error                    { return nil }

func (r *idleRole) status() func() standby.Status {
	if r.role == RoleStopped {
		return nil
	}
	st := standby.Status{Role: r.role.String(), Cluster: r.id.Cluster.String(), Epoch: r.id.Epoch}
	return func() standby.Status { return st }
}

func (r *idleRole) api() (api.CoordinatorServer, *gate) {
	health := r.why
	if get := r.status(); get != nil {
		health = describe(get()) + ": " + r.why
	}
	return &refusingService{
		role:    r.role,
		refusal: func() error { return status.Error(codes.FailedPrecondition, r.why) },
		health:  func() string { return health },
	}, nil
}
