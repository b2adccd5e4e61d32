package standby

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"
)

// Limits of a standby listener (the primary's shipper, a standby answering
// PROBEs) against peers that connect and do not authenticate, or flood it.
const (
	// maxHandshakes bounds the connections a listener holds before they
	// authenticate, and maxHandshakesPerHost those from one address. A new
	// connection past either evicts the oldest pending handshake (of its
	// own host first): a peer that holds connections open without
	// authenticating cannot lock the real standby out until they time out.
	maxHandshakes        = 32
	maxHandshakesPerHost = 8
	// maxLinkConns bounds every connection a listener holds: the standby's
	// (up to MaxArchConnections under arch), probes, handshakes.
	maxLinkConns = 2*MaxArchConnections + maxHandshakes
	// handshakeBuffer is the read buffer of a connection until it has
	// authenticated (the handshake's frames are a few dozen bytes).
	handshakeBuffer = 512
)

// opening is an authenticated connection and its first frame (HELLO, JOIN
// or PROBE).
type opening struct {
	c       net.Conn
	r       *bufio.Reader
	kind    byte
	payload []byte
}

// gate accepts a listener's connections and lets through only those that
// authenticate (auth.go) within the handshake deadline; it bounds what the
// others hold (maxHandshakes, maxLinkConns, handshakeBuffer, the per-kind
// frame limits) and closes every connection it holds on close.
type gate struct {
	lis     net.Listener
	auth    *Auth
	timeout time.Duration // the handshake's deadline
	accept  kinds         // the opening frames served
	log     *slog.Logger
	what    string // for logs: "standby listener", "probe listener"

	mu         sync.Mutex
	open       map[net.Conn]struct{}
	handshakes int
	pending    map[net.Conn]pendingConn // in the handshake and not evicted
	perHost    map[string]int           // pending, by remote host
	closed     bool
	dropped    int       // connections closed over a limit (or evicted) since the last warning
	warned     time.Time // the last such warning
	refused    int       // failed handshakes since the last warning about them
	refusedAt  time.Time // the last such warning
	wg         sync.WaitGroup
}

// pendingConn is a connection in the handshake.
type pendingConn struct {
	host string
	at   time.Time
}

func newGate(lis net.Listener, auth *Auth, timeout time.Duration, accept kinds, log *slog.Logger, what string) *gate {
	return &gate{lis: lis, auth: auth, timeout: timeout, accept: accept, log: log, what: what, open: map[net.Conn]struct{}{},
		pending: map[net.Conn]pendingConn{}, perHost: map[string]int{}}
}

// serve accepts until the listener is closed; handle serves each
// authenticated connection (which the gate closes after it returns).
func (g *gate) serve(handle func(o opening) error) {
	for {
		c, err := g.lis.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			g.log.Warn(g.what+": accept failed", "error", err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if !g.admit(c) {
			c.Close()
			continue
		}
		go func() {
			defer g.done(c)
			o, err := g.handshake(c)
			g.mu.Lock()
			g.handshakes--
			g.unpendLocked(c)
			warn := false
			if err != nil {
				g.refused++
				if warn = time.Since(g.refusedAt) >= 10*time.Second; warn {
					g.refusedAt = time.Now()
				}
			}
			refused := g.refused
			if warn {
				g.refused = 0
			}
			g.mu.Unlock()
			if err != nil {
				if warn { // at most every 10 s: a flood of bad handshakes must not flood the log
					g.log.Warn(g.what+": connection refused before anything was sent to it", "peer", c.RemoteAddr().String(), "error", err,
						"refused_since_last_warning", refused)
				}
				return
			}
			if err := handle(o); err != nil {
				g.log.Warn(g.what+": connection ended", "peer", c.RemoteAddr().String(), "error", err)
			}
		}()
	}
}

// admit counts c in, or reports false when a limit is reached. Past the
// handshake limits it evicts the oldest pending handshake (of c's host when
// that host is at its own limit) instead of refusing c. Warnings at most
// every 10 s, with the number dropped or evicted.
func (g *gate) admit(c net.Conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	host := remoteHost(c)
	var evict net.Conn
	switch {
	case g.perHost[host] >= maxHandshakesPerHost:
		evict = g.oldestPendingLocked(host)
	case len(g.pending) >= maxHandshakes:
		evict = g.oldestPendingLocked("")
	}
	if evict == nil && (g.handshakes >= maxHandshakes || len(g.open) >= maxLinkConns) {
		g.overLimitLocked(c, "closing new ones unread")
		return false
	}
	if evict != nil {
		g.unpendLocked(evict)
		_ = evict.Close() // its handshake fails at once; its goroutine counts it out
		g.overLimitLocked(c, "evicting the oldest pending handshakes")
	}
	g.open[c] = struct{}{}
	g.handshakes++
	g.pending[c] = pendingConn{host: host, at: time.Now()}
	g.perHost[host]++
	g.wg.Add(1)
	return true
}

// overLimitLocked counts a connection dropped or evicted, and warns at most
// every 10 s.
func (g *gate) overLimitLocked(c net.Conn, what string) {
	g.dropped++
	if time.Since(g.warned) >= 10*time.Second {
		g.log.Warn(g.what+": too many connections in the handshake: "+what+" (a flood, or peers that never authenticate)",
			"handshakes", g.handshakes, "connections", len(g.open), "dropped_or_evicted", g.dropped, "latest", c.RemoteAddr().String())
		g.warned, g.dropped = time.Now(), 0
	}
}

// oldestPendingLocked returns the longest-pending handshake (of host, if
// not ""), or nil.
func (g *gate) oldestPendingLocked(host string) net.Conn {
	var oldest net.Conn
	var at time.Time
	for c, p := range g.pending {
		if (host == "" || p.host == host) && (oldest == nil || p.at.Before(at)) {
			oldest, at = c, p.at
		}
	}
	return oldest
}

// unpendLocked takes c out of the pending handshakes (if still there).
func (g *gate) unpendLocked(c net.Conn) {
	if p, ok := g.pending[c]; ok {
		delete(g.pending, c)
		if g.perHost[p.host]--; g.perHost[p.host] <= 0 {
			delete(g.perHost, p.host)
		}
	}
}

// remoteHost is c's remote IP address (its whole address if it has no port).
func remoteHost(c net.Conn) string {
	a := c.RemoteAddr().String()
	if h, _, err := net.SplitHostPort(a); err == nil {
		return h
	}
	return a
}

func (g *gate) done(c net.Conn) {
	c.Close()
	g.mu.Lock()
	delete(g.open, c)
	g.mu.Unlock()
	g.wg.Done()
}

// handshake authenticates c and reads its opening frame, all within the
// handshake deadline (left set: the handler sets its own).
func (g *gate) handshake(c net.Conn) (opening, error) {
	_ = c.SetDeadline(time.Now().Add(g.timeout))
	tc := g.auth.serverConn(c)
	r := bufio.NewReaderSize(tc, handshakeBuffer)
	w := bufio.NewWriterSize(tc, handshakeBuffer)
	if err := acceptAuth(r, w, g.auth); err != nil {
		return opening{}, err
	}
	kind, b, err := readFrame(r, nil, g.accept)
	if err != nil {
		if errors.Is(err, ErrProtocol) {
			_ = writeFrame(w, kindRefuse, []byte(err.Error()))
		}
		return opening{}, fmt.Errorf("reading the opening frame: %w", err)
	}
	return opening{c: tc, r: r, kind: kind, payload: b}, nil
}

// close stops accepting, closes every connection held and waits for their
// handlers.
func (g *gate) close() error {
	g.mu.Lock()
	g.closed = true
	for c := range g.open {
		c.Close()
	}
	g.mu.Unlock()
	err := g.lis.Close()
	g.wg.Wait()
	return err
}
