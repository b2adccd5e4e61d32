// Package server runs a coordinator with its gRPC API on a listener: the
// daemon (`tandem serve`), the in-process coordinator of examples and
// benchmarks, and end-to-end tests all start it the same way.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/tandem-tx/tandem/api"
	"github.com/tandem-tx/tandem/internal/config"
	"github.com/tandem-tx/tandem/internal/console"
	"github.com/tandem-tx/tandem/internal/coord"
	"github.com/tandem-tx/tandem/internal/setting"
	"github.com/tandem-tx/tandem/internal/standby"
	"github.com/tandem-tx/tandem/internal/tlsconf"
	"github.com/tandem-tx/tandem/waits"
	"github.com/tandem-tx/tandem/xid"
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

	admin       *http.Server // nil without Options.Admin
	adminLis    net.Listener
	stopConsole func() // stops the console's sampler; nil without Options.Admin

	cfg  config.Config
	opts Options

	roles    roleState // the role controller (roles.go)
	statusOf atomic.Pointer[statusSource]

	// waits is this coordinator's wait-event registry, one for the life of
	// the Server whatever its role: each primary's coord.Coordinator and
	// shipper and each standby's receiver record into it, and the admin
	// listener's /waits and /metrics serve it.
	waits *waits.Registry
}

// ErrStandbyListenNeeded reports a standby transport, protection or peer
// set without the address standbys connect to.
var ErrStandbyListenNeeded = errors.New("standby.transport, standby.protection and standby.peer need it (the address standbys connect to)")

// Options beyond the configuration file.
type Options struct {
	Logger *slog.Logger
	// NoSync skips fdatasync of the decision log: tests only.
	NoSync bool
	// Admin is the admin HTTP listener's address (/waits, /metrics,
	// /standby, /role/*; see admin.go), e.g. 127.0.0.1:7071; "" for none.
	// Role changes always need the admin token; off loopback the listener
	// needs TLS (or InsecureNoTLS).
	Admin string
	// AdminTokenFile holds the admin token that role changes need
	// ("Authorization: Bearer <token>"); "" for DATA_DIR/admin.token. With
	// an admin listener, a missing file is created at start (32 random
	// bytes in hex, mode 0600).
	AdminTokenFile string
	// AdminBestEffort: when Admin cannot be listened on (a default address
	// already taken), log a warning and serve without it instead of failing.
	AdminBestEffort bool
	// AuthToken, when set, is required on every API call
	// ("authorization: Bearer <token>"). Without it the API must listen on
	// loopback, unless InsecureNoAuth.
	AuthToken string
	// InsecureNoAuth allows an unauthenticated API on a non-loopback address.
	InsecureNoAuth bool
	// TLS, when set, is the API's and the admin listener's TLS
	// configuration (tlsconf.Server); with ClientAuth
	// tls.RequireAndVerifyClientCert, clients must present a certificate
	// (mutual TLS), which also authenticates API calls. Without it both
	// serve plaintext, which is refused off loopback unless InsecureNoTLS.
	TLS *tls.Config
	// InsecureNoTLS allows plaintext on a non-loopback address.
	InsecureNoTLS bool
	// Standby: the decision-log transport; zero for none.
	Standby StandbyOptions
	// TracerProvider, when set, makes the spans of the calls that carry a
	// client's trace context (tracing.go): Commit, Abort and Status, the
	// decision log's write and phase 2, in the client's trace. Nil: no
	// span at all (`tandem serve` sets one with --otlp-endpoint or
	// OTEL_EXPORTER_OTLP_ENDPOINT).
	TracerProvider trace.TracerProvider
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
	if err := checkExposure(cfg.Listen, o); err != nil {
		return nil, err
	}
	if so := o.Standby; so.Of == "" {
		if err := coord.CheckDirFree(cfg.DataDir); err != nil {
			return nil, err
		}
	}
	var adminToken string
	if o.Admin != "" {
		if o.AdminTokenFile == "" {
			o.AdminTokenFile = DefaultAdminTokenFile(cfg.DataDir)
		}
		tok, created, err := LoadOrCreateToken(o.AdminTokenFile)
		if err != nil {
			return nil, fmt.Errorf("server: the admin token (role changes need it): %w", err)
		}
		adminToken = tok
		if created && o.Logger != nil {
			o.Logger.Info("admin token created (mode 0600): tandem promote, follow and switchover read it from there", "file", o.AdminTokenFile)
		}
	}
	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("server: listen on %s: %w", cfg.Listen, err)
	}
	lis = &capListener{Listener: lis, max: apiLimits.MaxConns, log: o.Logger, name: "API listener"}

	so := o.Standby
	if so.Listen == "" && (so.Transport != "" || so.Protection != "" || so.Peer != "") {
		_ = lis.Close()
		return nil, setting.Refuse(setting.StandbyListen, "", ErrStandbyListenNeeded)
	}
	if so.Listen != "" {
		if _, _, err := standby.ParseMode(so.Transport, so.Protection); err != nil {
			_ = lis.Close()
			return nil, err
		}
	}
	if err := so.checkExposure(); err != nil {
		_ = lis.Close()
		return nil, err
	}
	if (so.Listen != "" || so.Of != "") && !so.Auth.Enabled() && o.Logger != nil {
		o.Logger.Warn("the standby link is not authenticated (allowed on loopback only): any local process can connect to it; set --standby-secret-file (make one with tandem secret --out FILE)")
	}
	s := &Server{lis: lis, done: make(chan error, 1), cfg: cfg, opts: o, waits: waits.NewRegistry(waits.SideCoordinator)}
	if err := s.startRoles(); err != nil {
		_ = lis.Close()
		return nil, err
	}
	var adminLis net.Listener
	if o.Admin != "" {
		if adminLis, err = net.Listen("tcp", o.Admin); err != nil {
			if !o.AdminBestEffort {
				_ = lis.Close()
				_ = s.stopRoles()
				return nil, fmt.Errorf("server: admin listener on %s: %w (choose another address, or none)", o.Admin, err)
			}
			if o.Logger != nil {
				o.Logger.Warn("admin listener not started: /waits and /metrics are not served (set --admin to another address)", "admin", o.Admin, "error", err)
			}
			adminLis = nil
		}
	}
	sopts := apiLimits.serverOptions()
	if o.TLS != nil {
		sopts = append(sopts, grpc.Creds(credentials.NewTLS(o.TLS)))
	}
	if o.AuthToken != "" {
		sopts = append(sopts, grpc.ChainUnaryInterceptor(tokenInterceptor(o.AuthToken)), grpc.StreamInterceptor(streamTokenInterceptor(o.AuthToken)))
	}
	if o.TracerProvider != nil {
		// After the token check: a refused call makes no span.
		sopts = append(sopts, grpc.ChainUnaryInterceptor(traceInterceptor(o.TracerProvider)))
	}
	s.grpc = grpc.NewServer(sopts...)
	api.RegisterCoordinatorServer(s.grpc, s.svc)
	s.serve(adminLis, adminToken, o)
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
		Phase2Wait: cfg.Phase2Wait, MaxTxnAge: cfg.MaxTxnAge, MaxClockSkew: cfg.MaxClockSkew, NoSync: o.NoSync, Logger: o.Logger,
		NoWait: cfg.NoWait(), BatchWindow: cfg.LogBatchWindow(), LogSize: int64(cfg.LogSize),
		Waits: s.waits,
	}
	// Every primary's data directory has an identity from its first start:
	// its cluster owns the branches it decides (xid.Owner), and its birth
	// bounds what its log can know (coord.Options.Born).
	segs, _ := os.ReadDir(filepath.Join(cfg.DataDir, "log"))
	hadLog := len(segs) > 0
	id, bornNow, err := standby.PrimaryIdentity(cfg.DataDir)
	if err != nil {
		return nil, nil, fmt.Errorf("the data directory's identity (%s): %w", filepath.Join(cfg.DataDir, standby.IdentityFile), err)
	}
	if !hadLog && !bornNow {
		// The identity outlived its log (a lost volume, a copied cluster
		// file): the log about to be created knows nothing before now.
		s.logError("this data directory has a cluster identity but no decision log: the log is created now, and born is set to now; "+
			"prepared branches of gtrids that began before now are listed as in doubt (tandem status --in-doubt), never presumed aborted",
			"cluster", id.Cluster.String(), "born_was", id.Born.UTC().Format(time.RFC3339Nano))
		id.Born = time.Now()
		if err := standby.SaveIdentity(cfg.DataDir, id); err != nil {
			return nil, nil, fmt.Errorf("the data directory's identity (%s): %w", filepath.Join(cfg.DataDir, standby.IdentityFile), err)
		}
	}
	copts.Owner, copts.Born, copts.OwnerMadeWithLog, copts.AdoptUnowned = xid.Owner(id.Cluster), id.Born, id.MadeWithLog(), cfg.AdoptUnowned
	if bornNow && hadLog {
		s.logError("this data directory's decision log had no recorded birth (written by an older Tandem): born is set to now; "+
			"prepared branches of gtrids that began before now with no decision in the log are listed as in doubt (tandem status --in-doubt), never presumed aborted; settle them with tandem resolve",
			"born", id.Born.UTC().Format(time.RFC3339Nano), "cluster", id.Cluster.String())
	}
	if at, ok, err := standby.UnsynchronizedPromotion(cfg.DataDir); err != nil {
		return nil, nil, err
	} else if ok {
		copts.InDoubtBefore = at
		s.logError("this coordinator was promoted with --accept-data-loss while not synchronized: prepared branches of gtrids from before the promotion with no decision here are listed as in doubt (tandem status --in-doubt), never presumed aborted; settle them with tandem resolve",
			"promoted_at", at.UTC().Format(time.RFC3339Nano))
	}
	copts.CommitPointSettleAfter = cfg.CommitPointSettleAfter
	if cfg.StandbyLost {
		if forgot, err := standby.ForgetMaxProtectionPromise(cfg.DataDir); err != nil {
			return nil, nil, err
		} else if forgot {
			s.logError("--standby-lost: the max-protection promise this primary made to its standby is withdrawn without that standby hearing of it: "+
				"if it still exists it takes itself for synchronized; never promote it without --accept-data-loss (re-seed it: tandem reseed)",
				"file", filepath.Join(cfg.DataDir, standby.MaxProtectionPromiseFile))
		}
	}
	if so.Listen == "" {
		if err := standby.CheckNoMaxProtectionPromise(cfg.DataDir); err != nil {
			return nil, nil, err
		}
	}
	var sh *standby.Shipper
	if so.Listen != "" {
		tr, prot, err := standby.ParseMode(so.Transport, so.Protection)
		if err != nil {
			return nil, nil, err
		}
		sh, err = standby.NewShipper(standby.ShipperConfig{Listen: so.Listen, Transport: tr, Protection: prot,
			NetTimeout: so.NetTimeout, Identity: id, MaxRetained: int64(cfg.LogSize), Logger: o.Logger,
			MaxSend: so.MaxSend, MaxConnections: so.MaxConnections, NetOptions: so.net(), Auth: so.Auth, ArchLag: so.ArchLag,
			InDoubtBefore: copts.InDoubtBefore, Waits: s.waits, Dir: cfg.DataDir,
			// Synchronous: the shipper runs it in a goroutine of its own and
			// drops further claims until it returns (coalesced).
			OnFenced: s.fence})
		if err != nil {
			return nil, nil, err
		}
		if so.Peer != "" {
			// After listening: a peer this check fences asks back who
			// superseded it.
			info, _, err := standby.CheckPeer(so.Peer, id, so.Auth, max(so.NetTimeout, time.Second))
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
func (s *Server) serve(adminLis net.Listener, adminToken string, o Options) {
	go func() { s.done <- s.grpc.Serve(s.lis) }()
	if adminLis == nil {
		return
	}
	mux := http.NewServeMux()
	mux.Handle("/", AdminHandler(s.waits))
	s.standbyHandler(mux)
	sampler := console.NewSampler(console.DefaultCapacity)
	s.consoleRoutes(mux, sampler)
	s.stopConsole = s.startConsole(sampler)
	guard := newAdminGuard(mux, adminToken, o.AdminTokenFile, o.AuthToken, o.Admin, tlsconf.MutualTLS(o.TLS), o.TLS != nil)
	s.admin = adminLimits.server(console.Secure(guard), o.TLS, o.Logger)
	adminLis = &capListener{Listener: adminLis, max: adminLimits.MaxConns, log: o.Logger, name: "admin listener"}
	s.adminLis = adminLis
	go func() {
		var err error
		if o.TLS != nil {
			err = s.admin.ServeTLS(adminLis, "", "") // the certificate is in o.TLS
		} else {
			err = s.admin.Serve(adminLis)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) && o.Logger != nil {
			o.Logger.Error("admin listener stopped", "error", err)
		}
	}()
}

// Waits returns this coordinator's wait-event registry, the one /waits
// serves: it stays the same across promotions and demotions.
func (s *Server) Waits() *waits.Registry { return s.waits }

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
// closes the coordinator. Unfinished phase 2 resumes at the next start. A
// role change in progress is cancelled (a switchover waiting for its standby
// does not reopen the primary); Stop returns once every goroutine of the
// role controller has ended, and the server is RoleStopped.
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
		s.stopConsole()
	}
	return s.stopRoles()
}
