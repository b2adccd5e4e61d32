package server

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tandem-tx/tandem/api"
	"github.com/tandem-tx/tandem/internal/coord"
	"github.com/tandem-tx/tandem/internal/standby"
)

// The role controller. A running server is in exactly one role at a time,
// held as a value of a type per role that owns what the role runs:
//
//	*primaryRole  the coordinator, its shipper (--standby-listen), the gate
//	              of its API calls, and its goroutines (the --peer check,
//	              telling a superseded primary of a new epoch)
//	*standbyRole  the receiver copying the primary's log
//	*idleRole     demoted, fenced or stopped: why, and the identity it had
//
// A role change (Promote, Demote, Resume, Follow, fence, Stop) is a method
// of Server that builds the next role, installs it (the API, the status of
// GET /standby and the gauges switch to it at once) and closes the previous
// one. The next role is built before the old one is closed wherever they do
// not need the same thing: a primary and a standby of one data directory
// both hold its log, and a primary reopened after an abandoned switchover
// listens on the address its predecessor held, so those close first.
//
// Two locks, after Vitess's tx_engine transitionTo: roleState.change
// serializes role changes and is held across their slow work (draining
// calls, waiting for the standby, opening a coordinator); roleState.mu
// guards the current role and is held only to read or swap it, never while
// waiting. So Role, Coordinator, StandbyListenAddr, Health and GET /standby
// answer while a role change is in progress, with the role it started from.
//
// Every goroutine the controller starts belongs to a tasks group: the
// current role's (closed with the role) or the controller's own (fencing
// claims); Stop cancels both and returns only after they ended.

// Role is what a running coordinator does.
type Role uint8

const (
	roleNone Role = iota
	// RolePrimary decides and settles.
	RolePrimary
	// RoleStandby copies its primary's decision log and decides nothing.
	RoleStandby
	// RoleDemoted is a primary that handed over during a switchover (or a
	// standby whose promotion failed): its coordinator is closed and it
	// decides nothing; next it follows the new primary (Follow) or, if the
	// switchover failed, resumes (Resume).
	RoleDemoted
	// RoleFenced is a primary that learnt that another coordinator of its
	// cluster was promoted: it decides and settles nothing, and says who
	// the new primary is.
	RoleFenced
	// RoleStopped is a server after Stop.
	RoleStopped
)

var roleNames = [...]string{roleNone: "none", RolePrimary: "primary", RoleStandby: "standby",
	RoleDemoted: "demoted", RoleFenced: "fenced", RoleStopped: "stopped"}

// String is the role's name, as GET /standby and Health spell it.
func (r Role) String() string {
	if int(r) < len(roleNames) {
		return roleNames[r]
	}
	return "unknown"
}

// MarshalText encodes the role as its name (JSON bodies of /role/*).
func (r Role) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// ParseRole is the role named name (standby.Status.Role); ok is false for
// a name of no role.
func ParseRole(name string) (r Role, ok bool) {
	for i, n := range roleNames {
		if n == name && Role(i) != roleNone {
			return Role(i), true
		}
	}
	return roleNone, false
}

// peerCheckEvery is how often a primary with --peer asks the peer for its
// epoch while it runs: the longest a superseded primary goes on deciding
// (under max-availability; under max-protection it cannot acknowledge
// anything without its standby anyway).
const peerCheckEvery = time.Second

// role is what one role owns. close releases all of it; it is called
// once the role is no longer installed (or never was), and at most once.
type role interface {
	kind() Role
	// api is the role's gRPC service and the gate its calls pass (nil: it
	// decides nothing, nothing to drain).
	api() (api.CoordinatorServer, *gate)
	// status is the source of StandbyStatus; nil when the role has none.
	status() func() standby.Status
	// coordinator is the role's coordinator, nil but for a primary.
	coordinator() *coord.Coordinator
	close() error
}

// roleState is the controller's state, in Server.
type roleState struct {
	change sync.Mutex // held by a role change from its first check to its end

	mu          sync.Mutex // guards the fields below; never held while waiting
	cur         role       // written with both change and mu held
	handingOver bool       // a Demote is closing cur's coordinator
	stopping    bool       // Stop began: no role change starts
	unregister  func()     // removes cur's gauges

	tasks *tasks       // the controller's own goroutines; its context ends at Stop
	live  atomic.Int64 // goroutines of every tasks group of this server now running
}

var errStopped = errors.New("server: stopping: no role change")

// ErrRole is wrapped by errors of a role change the server's role does not
// allow.
var ErrRole = errors.New("server: wrong role for this")

// startRoles starts the controller in the first role: a standby of so.Of,
// or the primary.
func (s *Server) startRoles() error {
	s.roles.tasks = newTasks(&s.roles.live)
	s.roles.unregister = func() {}
	s.svc = &roleService{}
	var (
		r   role
		err error
	)
	if of := s.opts.Standby.Of; of != "" {
		r, err = s.newStandby(of, false)
	} else {
		r, err = s.newPrimary()
	}
	if err != nil {
		s.roles.tasks.stop()
		return err
	}
	s.roles.change.Lock() // a fencing claim may already be handled
	defer s.roles.change.Unlock()
	s.install(r)
	return nil
}

// install makes next the current role: the API, the status and the gauges
// switch to it. The caller holds roles.change, and closes the previous role
// afterwards (its in-flight calls finish on it).
func (s *Server) install(next role) {
	s.roles.mu.Lock()
	defer s.roles.mu.Unlock()
	s.roles.unregister()
	s.roles.cur = next
	s.svc.set(next.api())
	s.statusOf.Store(&statusSource{get: next.status()})
	gauges, standbyGauges, build := s.registerGauges(next.coordinator()), s.registerStandbyGauges(), registerBuildInfo()
	s.roles.unregister = func() { gauges(); standbyGauges(); build() }
}

// current is the installed role; the caller holds roles.change (which every
// writer of cur holds too).
func (s *Server) current() role { return s.roles.cur }

// stopping reports whether Stop began.
func (s *Server) stopping() bool {
	s.roles.mu.Lock()
	defer s.roles.mu.Unlock()
	return s.roles.stopping
}

// stopRoles ends the controller: a role change in progress is cancelled
// (a Demote waiting for its standby gives up and does not reopen), the
// current role is closed, and it returns once every goroutine of the
// controller and of its roles ended.
func (s *Server) stopRoles() error {
	s.roles.mu.Lock()
	s.roles.stopping = true
	s.roles.mu.Unlock()
	s.roles.tasks.cancel()
	s.roles.change.Lock()
	cur := s.current()
	s.install(&idleRole{role: RoleStopped, why: "this coordinator is stopping"})
	err := cur.close()
	s.roles.change.Unlock()
	s.roles.tasks.stop()
	return err
}

// Role reports what the server does now (during a role change: the role it
// changes from). It never waits for a role change.
func (s *Server) Role() Role {
	s.roles.mu.Lock()
	defer s.roles.mu.Unlock()
	return s.roles.cur.kind()
}

// Coordinator is the primary's coordinator, nil in every other role and
// while a Demote closes it. It never waits for a role change.
func (s *Server) Coordinator() *coord.Coordinator {
	s.roles.mu.Lock()
	defer s.roles.mu.Unlock()
	if s.roles.handingOver {
		return nil
	}
	return s.roles.cur.coordinator()
}

// StandbyListenAddr is the address the primary's shipper listens on (useful
// with --standby-listen 127.0.0.1:0), "" when this coordinator ships to no
// standby now. It never waits for a role change.
func (s *Server) StandbyListenAddr() string {
	s.roles.mu.Lock()
	defer s.roles.mu.Unlock()
	if p, ok := s.roles.cur.(*primaryRole); ok && p.shipper != nil {
		return p.shipper.Addr()
	}
	return ""
}

// runningGoroutines is how many goroutines the controller and its roles
// run now (tests: zero once Stop returned).
func (s *Server) runningGoroutines() int64 { return s.roles.live.Load() }

// statusSource is where StandbyStatus reads from (the shipper, the receiver,
// or a fixed status of an idle role); get is nil when the role has none.
type statusSource struct {
	get func() standby.Status
}

// tasks is a group of goroutines that end when its context is cancelled;
// stop cancels it and returns once all of them ended. Never call stop from
// one of the group's own goroutines.
type tasks struct {
	ctx    context.Context
	cancel context.CancelFunc
	live   *atomic.Int64

	mu      sync.Mutex
	stopped bool
	wg      sync.WaitGroup
}

func newTasks(live *atomic.Int64) *tasks {
	ctx, cancel := context.WithCancel(context.Background())
	return &tasks{ctx: ctx, cancel: cancel, live: live}
}

// enter counts the calling goroutine in the group until leave; false (and
// nothing counted) once the group stopped.
func (t *tasks) enter() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return false
	}
	t.wg.Add(1)
	t.live.Add(1)
	return true
}

func (t *tasks) leave() {
	t.live.Add(-1)
	t.wg.Done()
}

// run starts f in a goroutine of the group, with the group's context; false
// (f not started) once the group stopped.
func (t *tasks) run(f func(ctx context.Context)) bool {
	if !t.enter() {
		return false
	}
	go func() {
		defer t.leave()
		f(t.ctx)
	}()
	return true
}

// stop cancels the group's context, refuses new goroutines and waits for
// the running ones. Idempotent.
func (t *tasks) stop() {
	t.mu.Lock()
	t.stopped = true
	t.mu.Unlock()
	t.cancel()
	t.wg.Wait()
}
