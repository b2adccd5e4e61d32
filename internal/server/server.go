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
	"time"

	"google.golang.org/grpc"

	"github.com/tandem-tx/tandem/api"
	"github.com/tandem-tx/tandem/internal/config"
	"github.com/tandem-tx/tandem/internal/coord"
	"github.com/tandem-tx/tandem/internal/service"
	"github.com/tandem-tx/tandem/internal/standby"
)

// Server is a running coordinator and its gRPC listener.
type Server struct {
	Coord *coord.Coordinator
	grpc  *grpc.Server
	lis   net.Listener
	done  chan error

	admin      *http.Server // nil without Options.Admin
	adminLis   net.Listener
	unregister func()

	shipper  *standby.Shipper  // a primary with --standby-listen
	receiver *standby.Receiver // a standby (--standby-of): Coord is nil
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
	rms, err := cfg.RMConfigs()
	if err != nil {
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
	if so.Of != "" && so.Listen != "" {
		_ = lis.Close()
		return nil, errors.New("server: --standby-of (run a standby) and --standby-listen (a primary serving standbys) exclude each other; a standby serves no cascaded standby yet")
	}
	if so.Listen == "" && (so.Transport != "" || so.Protection != "" || so.Peer != "") && so.Of == "" {
		_ = lis.Close()
		return nil, errors.New("server: --transport, --protection and --peer need --standby-listen (the address standbys connect to)")
	}
	if so.Of != "" {
		s, err := startStandby(cfg, o, lis)
		if err != nil {
			_ = lis.Close()
		}
		return s, err
	}
	copts := coord.Options{
		Dir: cfg.DataDir, RMs: rms, OrphanTimeout: cfg.OrphanTimeout, ScanInterval: cfg.ScanInterval,
		Phase2Wait: cfg.Phase2Wait, MaxTxnAge: cfg.MaxTxnAge, NoSync: o.NoSync, Logger: o.Logger,
		NoWait: cfg.Durability == "nowait", BatchWindow: cfg.LogBatchWindow(), LogSize: int64(cfg.LogSize),
	}
	var sh *standby.Shipper
	if so.Listen != "" {
		tr, prot, err := standby.ParseMode(so.Transport, so.Protection)
		if err == nil {
			var id standby.Identity
			if id, err = standby.PrimaryIdentity(cfg.DataDir); err == nil && so.Peer != "" {
				var info string
				info, err = standby.CheckPeer(so.Peer, id, max(so.NetTimeout, time.Second))
				if err == nil && o.Logger != nil {
					o.Logger.Info("fencing check at start: not superseded", "peer", info)
				}
			}
			if err == nil {
				sh, err = standby.NewShipper(standby.ShipperConfig{Listen: so.Listen, Transport: tr, Protection: prot,
					NetTimeout: so.NetTimeout, Identity: id, MaxRetained: int64(cfg.LogSize), Logger: o.Logger})
			}
		}
		if err != nil {
			_ = lis.Close()
			return nil, err
		}
		copts.LogHook = sh
	}
	c, err := coord.Open(copts)
	if err != nil {
		_ = lis.Close()
		if sh != nil {
			_ = sh.Close()
		}
		return nil, err
	}
	var adminLis net.Listener
	if o.Admin != "" {
		if adminLis, err = net.Listen("tcp", o.Admin); err != nil {
			if !o.AdminBestEffort {
				_ = lis.Close()
				if sh != nil {
					_ = sh.Close()
				}
				_ = c.Close()
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
	g := grpc.NewServer(sopts...)
	s := &Server{Coord: c, grpc: g, lis: lis, done: make(chan error, 1), shipper: sh}
	d := service.Defaults{AsyncVisibility: cfg.Visibility == "async"}
	if sh != nil {
		d.HealthNote = func() string { return describe(sh.Status()) }
	}
	api.RegisterCoordinatorServer(g, service.New(c, d))
	gauges, standbyGauges := s.registerGauges(), s.registerStandbyGauges()
	s.unregister = func() { gauges(); standbyGauges() }
	s.serve(adminLis, o)
	return s, nil
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
	s.unregister()
	if s.receiver != nil {
		return s.receiver.Close()
	}
	if s.shipper != nil {
		// Before the coordinator: its last checkpoint must not wait for a
		// standby (the records it carries are already shipped).
		_ = s.shipper.Close()
	}
	return s.Coord.Close()
}

// startStandby runs a standby: the receiver and an API that refuses to
// decide.
func startStandby(cfg config.Config, o Options, lis net.Listener) (*Server, error) {
	r, err := standby.OpenReceiver(standby.ReceiverConfig{Primary: o.Standby.Of, Dir: cfg.DataDir,
		SegmentSize: coord.SegmentSizeFor(int64(cfg.LogSize)), NoSync: o.NoSync, NetTimeout: o.Standby.NetTimeout, Logger: o.Logger})
	if err != nil {
		return nil, err
	}
	var adminLis net.Listener
	if o.Admin != "" {
		if adminLis, err = net.Listen("tcp", o.Admin); err != nil {
			if !o.AdminBestEffort {
				_ = r.Close()
				return nil, fmt.Errorf("server: admin listener on %s: %w (choose another address, or none)", o.Admin, err)
			}
			adminLis = nil
		}
	}
	sopts := []grpc.ServerOption{grpc.MaxRecvMsgSize(1 << 20)}
	if o.AuthToken != "" {
		sopts = append(sopts, grpc.UnaryInterceptor(tokenInterceptor(o.AuthToken)), grpc.StreamInterceptor(streamTokenInterceptor(o.AuthToken)))
	}
	g := grpc.NewServer(sopts...)
	api.RegisterCoordinatorServer(g, &standbyService{r: r})
	s := &Server{grpc: g, lis: lis, done: make(chan error, 1), receiver: r}
	s.unregister = s.registerStandbyGauges()
	s.serve(adminLis, o)
	return s, nil
}
