// Package server runs a coordinator with its gRPC API on a listener: the
// daemon (`tandem serve`), the in-process coordinator of examples and
// benchmarks, and end-to-end tests all start it the same way.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/tandem-tx/tandem/api"
	"github.com/tandem-tx/tandem/internal/config"
	"github.com/tandem-tx/tandem/internal/coord"
	"github.com/tandem-tx/tandem/internal/standby"
)

// Server is a running coordinator and its gRPC listener. Its role (primary,
// standby, demoted during a switchover, fenced) can change while it runs:
// the gRPC API and the admin listener stay up across role changes; see
// roles.go.
type Server struct {
	grpc *grpc.Server
	lis  net.Listener
	done chan error
	svc  *roleService

	admin    *http.Server // nil without Options.Admin
	adminLis net.Listener

	cfg  config.Config
	opts Options

	mu         sync.Mutex // role changes, and the fields below
	role       Role
	coord      *coord.Coordinator // the primary's; nil in every other role
	shipper    *standby.Shipper   // a primary with --standby-listen
	receiver   *standby.Receiver  // a standby (--standby-of)
	following  string             // the primary a standby follows
	fenced     error              // why a fenced primary stopped deciding
	unregister func()             // the current role's gauges
	stopPeer   chan struct{}      // closes the fencing check of --peer
	closed     bool
	resumable  bool // a demoted primary that may serve again (Resume)
	statusOf   atomic.Pointer[statusSource]
}

// Options beyond the configuration file.
type Options struct {
	Logger *slog.Logger
	// NoSync skips fdatasync of the decision log: tests only.
	NoSync bool
	// Admin is the admin HTTP listener's address (/waits, /metrics; see
	// AdminHandler), e.g. 127.0.0.1:7071; "" for none. It serves plain HTTP
	// without authentication: keep it on loopback or a trusted network.
	Admin string
	// AdminBestEffort: when Admin cannot be listened on (a default address
	// already taken), log a warning and serve without it instead of failing.
	AdminBestEffort bool
	// AuthToken, when set, is required on every API call
	// ("authorization: Bearer <token>"). Without it the API must listen on
	// loopback, unless InsecureNoAuth.
	AuthToken string
	// InsecureNoAuth allows an unauthenticated API on a non-loopback address.
	InsecureNoAuth bool
	// Standby: the decision-log transport; zero for none.
	Standby StandbyOptions
}

// Start opens the coordinator (replaying its log) and serves its API.
func Start(cfg config.Config, o Options) (*Server, error) {
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if _, err := cfg.RMConfigs(); err != nil {
		return nil, err
	}
	if err := checkExposure(cfg.Listen, o.AuthToken, o.InsecureNoAuth); err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("server: listen on %s: %w", cfg.Listen, err)
	}

	so := o.Standby
	if so.Listen == "" && (so.Transport != "" || so.Protection != "" || so.Peer != "") {
		_ = lis.Close()
		return nil, errors.New("server: --transport, --protection and --peer need --standby-listen (the address standbys connect to)")
	}
	if so.Listen != "" {
		if _, _, err := standby.ParseMode(so.Transport, so.Protection); err != nil {
			_ = lis.Close()
			return nil, err
		}
	}
	s := &Server{lis: lis, done: make(chan error, 1), cfg: cfg, opts: o, unregister: func() {}, svc: &roleService{}}
	if so.Of != "" {
		err = s.becomeStandby(so.Of, false)
	} else {
		err = s.becomePrimary()
	}
	if err != nil {
		_ = lis.Close()
		return nil, err
	}
	var adminLis net.Listener
	if o.Admin != "" {
		if adminLis, err = net.Listen("tcp", o.Admin); err != nil {
			if !o.AdminBestEffort {
				_ = lis.Close()
				s.closeRole()
				return nil, fmt.Errorf("server: admin listener on %s: %w (choose another address, or none)", o.Admin, err)
			}
			if o.Logger != nil {
				o.Logger.Warn("admin listener not started: /waits and /metrics are not served (set --admin to another address)", "admin", o.Admin, "error", err)
			}
			adminLis = nil
		}
	}
	sopts := []grpc.ServerOption{grpc.MaxRecvMsgSize(1 << 20)}
	if o.AuthToken != "" {
		sopts = append(sopts, grpc.UnaryInterceptor(tokenInterceptor(o.AuthToken)), grpc.StreamInterceptor(streamTokenInterceptor(o.AuthToken)))
	}
	s.grpc = grpc.NewServer(sopts...)
	api.RegisterCoordinatorServer(s.grpc, s.svc)
	s.serve(adminLis, o)
	return s, nil
}

// openPrimary opens the coordinator of the data directory (replaying its
// log), with a shipper when --standby-listen is set; with --peer, it first
// refuses to open when the peer was promoted since (fencing at start).
func (s *Server) openPrimary() (*coord.Coordinator, *standby.Shipper, error) {
	cfg, o, so := s.cfg, s.opts, s.opts.Standby
	rms, err := cfg.RMConfigs()
	if err != nil {
		return nil, nil, err
	}
	copts := coord.Options{
		Dir: cfg.DataDir, RMs: rms, OrphanTimeout: cfg.OrphanTimeout, ScanInterval: cfg.ScanInterval,
		Phase2Wait: cfg.Phase2Wait, MaxTxnAge: cfg.MaxTxnAge, NoSync: o.NoSync, Logger: o.Logger,
		NoWait: cfg.Durability == "nowait", BatchWindow: cfg.LogBatchWindow(), LogSize: int64(cfg.LogSize),
	}
	if at, ok, err := standby.UnsynchronizedPromotion(cfg.DataDir); err != nil {
		return nil, nil, err
	} else if ok {
		copts.InDoubtBefore = at
		s.logError("this coordinator was promoted with --accept-data-loss while not synchronized: prepared branches of gtrids from before the promotion with no decision here are listed as in doubt (tandem status --in-doubt), never presumed aborted; settle them with tandem resolve",
			"promoted_at", at.UTC().Format(time.RFC3339Nano))
	}
	var sh *standby.Shipper
	if so.Listen != "" {
		tr, prot, err := standby.ParseMode(so.Transport, so.Protection)
		if err != nil {
			return nil, nil, err
		}
		id, err := standby.PrimaryIdentity(cfg.DataDir)
		if err != nil {
			return nil, nil, err
		}
		sh, err = standby.NewShipper(standby.ShipperConfig{Listen: so.Listen, Transport: tr, Protection: prot,
			NetTimeout: so.NetTimeout, Identity: id, MaxRetained: int64(cfg.LogSize), Logger: o.Logger,
			MaxSend: so.MaxSend, MaxConnections: so.MaxConnections, NetOptions: so.net(), ArchLag: so.ArchLag,
			OnFenced: func(err error) { go s.fence(err) }})
		if err != nil {
			return nil, nil, err
		}
		if so.Peer != "" {
			// After listening: a peer this check fences asks back who
			// superseded it.
			info, _, err := standby.CheckPeer(so.Peer, id, max(so.NetTimeout, time.Second))
			if err != nil {
				_ = sh.Close()
				return nil, nil, err
			}
			s.logInfo("fencing check at start: not superseded", "peer", info)
		}
		copts.LogHook = sh
	}
	c, err := coord.Open(copts)
	if err != nil {
		if sh != nil {
			_ = sh.Close()
		}
		return nil, nil, err
	}
	if sh != nil {
		sh.SetSwitcher(c.SwitchLogSegment)
	}
	return c, sh, nil
}

func (s *Server) logInfo(msg string, args ...any) {
	if s.opts.Logger != nil {
		s.opts.Logger.Info(msg, args...)
	}
}

func (s *Server) logError(msg string, args ...any) {
	if s.opts.Logger != nil {
		s.opts.Logger.Error(msg, args...)
	}
}

// serve starts the gRPC server and the admin listener.
func (s *Server) serve(adminLis net.Listener, o Options) {
	go func() { s.done <- s.grpc.Serve(s.lis) }()
	if adminLis != nil {
		mux := http.NewServeMux()
		mux.Handle("/", AdminHandler())
		s.standbyHandler(mux)
		s.admin = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		s.adminLis = adminLis
		go func() {
			if err := s.admin.Serve(adminLis); err != nil && !errors.Is(err, http.ErrServerClosed) && o.Logger != nil {
				o.Logger.Error("admin listener stopped", "error", err)
			}
		}()
	}
}

// AdminAddr is the admin listener's address, "" without one.
func (s *Server) AdminAddr() string {
	if s.adminLis == nil {
		return ""
	}
	return s.adminLis.Addr().String()
}

// Addr is the address the API listens on (useful with port 0).
func (s *Server) Addr() string { return s.lis.Addr().String() }

// Done delivers the serving error, if serving stops by itself.
func (s *Server) Done() <-chan error { return s.done }

// Stop stops accepting calls, lets calls in flight finish (up to grace), and
// closes the coordinator. Unfinished phase 2 resumes at the next start.
func (s *Server) Stop(grace time.Duration) error {
	stopped := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(grace):
		s.grpc.Stop()
	}
	if s.admin != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = s.admin.Shutdown(ctx)
		cancel()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return s.closeRoleLocked()
}
