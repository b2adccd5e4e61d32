package server

import (
	"crypto/tls"
	"log/slog"
	"net/http"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// httpLimits bound what one client of the admin listener can hold: a
// connection that sends its request slowly, reads the answer slowly, or
// stays idle is closed.
type httpLimits struct {
	ReadHeader time.Duration // to read a request's headers (and the TLS handshake)
	Read       time.Duration // to read a whole request
	Write      time.Duration // to write an answer (read-only endpoints)
	Idle       time.Duration // a kept-alive connection waiting for its next request
	// RoleWrite replaces Read and Write for an authenticated role change,
	// which can take long (a promotion replays the log and scans every
	// database; a demotion waits for the standby).
	RoleWrite      time.Duration
	MaxHeaderBytes int
}

// grpcLimits bound what one client of the gRPC API can hold.
type grpcLimits struct {
	Handshake time.Duration // connection set-up, TLS handshake included
	// MaxRecvMsg is the largest request, bytes: the largest legitimate one
	// (a Commit of coord.MaxBranches branches with 32-character names) is
	// about 2.5 KiB (TestAPIRequestSizeCap).
	MaxRecvMsg int
	MaxStreams uint32 // concurrent calls per connection; more wait in the client
	// Keepalive: a client may ping at most every PingMinTime (more often:
	// the connection is closed, GOAWAY "too_many_pings"); the server pings
	// an idle connection every Ping and closes it without an answer within
	// PingTimeout; a connection with no call for Idle is closed (a client
	// reconnects on its next call).
	PingMinTime, Ping, PingTimeout, Idle time.Duration
}

var (
	adminLimits = httpLimits{ReadHeader: 5 * time.Second, Read: 10 * time.Second, Write: 30 * time.Second,
		Idle: time.Minute, RoleWrite: 10 * time.Minute, MaxHeaderBytes: 16 << 10}
	apiLimits = grpcLimits{Handshake: 10 * time.Second, MaxRecvMsg: 16 << 10, MaxStreams: 1024,
		PingMinTime: 10 * time.Second, Ping: time.Minute, PingTimeout: 20 * time.Second, Idle: 15 * time.Minute}
)

// server is the admin listener's HTTP server with these limits.
func (l httpLimits) server(h http.Handler, tlsCfg *tls.Config, logger *slog.Logger) *http.Server {
	srv := &http.Server{Handler: h, TLSConfig: tlsCfg, ReadHeaderTimeout: l.ReadHeader, ReadTimeout: l.Read,
		WriteTimeout: l.Write, IdleTimeout: l.Idle, MaxHeaderBytes: l.MaxHeaderBytes}
	if logger != nil {
		// Failed TLS handshakes and the like: debug, not stderr.
		srv.ErrorLog = slog.NewLogLogger(logger.Handler(), slog.LevelDebug)
	}
	return srv
}

// extendForRole gives an authenticated role change RoleWrite to finish:
// without it the connection's read deadline would cancel the request's
// context, and its write deadline would drop the answer of a role change
// that happened.
func (l httpLimits) extendForRole(w http.ResponseWriter) {
	rc := http.NewResponseController(w)
	deadline := time.Now().Add(l.RoleWrite)
	_ = rc.SetReadDeadline(deadline)
	_ = rc.SetWriteDeadline(deadline)
}

// serverOptions are the gRPC server's options for these limits.
func (l grpcLimits) serverOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ConnectionTimeout(l.Handshake),
		grpc.MaxRecvMsgSize(l.MaxRecvMsg),
		grpc.MaxConcurrentStreams(l.MaxStreams),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: l.PingMinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: l.Idle, Time: l.Ping, Timeout: l.PingTimeout}),
	}
}
