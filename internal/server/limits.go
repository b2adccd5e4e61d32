package server

import (
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"sync"
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
	// MaxConns bounds the connections the listener holds; past it a new
	// one is closed at once (capListener), so that a flood of connections,
	// which need no token, cannot take the file descriptors the decision
	// log and the database pools need. A console tab holds a few.
	MaxConns int
}

// grpcLimits bound what one client of the gRPC API can hold.
type grpcLimits struct {
	Handshake time.Duration // connection set-up, TLS handshake included
	// MaxRecvMsg is the largest request, bytes: the largest legitimate one
	// (a Commit of coord.MaxBranches branches with 32-character names) is
	// about 2.5 KiB (TestAPIRequestSizeCap).
	MaxRecvMsg int
	MaxStreams uint32 // concurrent calls per connection; more wait in the client
	// MaxConns bounds the connections the API holds; past it a new one is
	// closed at once (capListener).
	MaxConns int
	// Keepalive: a client may ping at most every PingMinTime (more often:
	// the connection is closed, GOAWAY "too_many_pings"); the server pings
	// an idle connection every Ping and closes it without an answer within
	// PingTimeout; a connection with no call for Idle is closed (a client
	// reconnects on its next call).
	PingMinTime, Ping, PingTimeout, Idle time.Duration
}

var (
	adminLimits = httpLimits{ReadHeader: 5 * time.Second, Read: 10 * time.Second, Write: 30 * time.Second,
		Idle: time.Minute, RoleWrite: 10 * time.Minute, MaxHeaderBytes: 16 << 10, MaxConns: 256}
	apiLimits = grpcLimits{Handshake: 10 * time.Second, MaxRecvMsg: 16 << 10, MaxStreams: 1024, MaxConns: 4096,
		PingMinTime: 10 * time.Second, Ping: time.Minute, PingTimeout: 20 * time.Second, Idle: 15 * time.Minute}
)

// server is the admin listener's HTTP server with these limits.
func (l httpLimits) server(h http.Handler, tlsCfg *tls.Config, logger *slog.Logger) *http.Server {
	// HTTP/1.1 only: one request at a time per connection, so MaxConns
	// bounds the answers held at once (HTTP/2 would allow hundreds per
	// connection, each up to a MiB of /console/data kept until the write
	// deadline by a client that does not read).
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	srv := &http.Server{Handler: h, TLSConfig: tlsCfg, ReadHeaderTimeout: l.ReadHeader, ReadTimeout: l.Read,
		WriteTimeout: l.Write, IdleTimeout: l.Idle, MaxHeaderBytes: l.MaxHeaderBytes, Protocols: protocols}
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

// capListener closes, as soon as they are accepted, connections past max
// held at once: a flood of idle connections cannot take every file
// descriptor (which the decision log and the database pools need), and a
// client past the cap is told at once rather than left waiting in the
// kernel's backlog. A warning says so at most every 10 s.
type capListener struct {
	net.Listener
	name   string // for the warning: "API listener"
	max    int
	log    *slog.Logger
	mu     sync.Mutex
	n      int
	warned time.Time
	closed int // past the cap since the last warning
}

func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		if l.n >= l.max {
			l.closed++
			warn := time.Since(l.warned) >= 10*time.Second
			n := l.closed
			if warn {
				l.warned, l.closed = time.Now(), 0
			}
			l.mu.Unlock()
			_ = c.Close()
			if warn && l.log != nil {
				l.log.Warn(l.name+": too many connections: closing new ones at once", "max", l.max, "closed", n, "latest", c.RemoteAddr().String())
			}
			continue
		}
		l.n++
		l.mu.Unlock()
		return &cappedConn{Conn: c, l: l}, nil
	}
}

// cappedConn counts itself out of its capListener when closed (once).
type cappedConn struct {
	net.Conn
	l    *capListener
	once sync.Once
}

func (c *cappedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.n--
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}
