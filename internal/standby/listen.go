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
	// authenticate; a connection past it is closed at once, unread.
	maxHandshakes = 32
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
	closed     bool
	dropped    int       // connections closed over a limit since the last warning
	warned     time.Time // the last such warning
	wg         sync.WaitGroup
}

func newGate(lis net.Listener, auth *Auth, timeout time.Duration, accept kinds, log *slog.Logger, what string) *gate {
	return &gate{lis: lis, auth: auth, timeout: timeout, accept: accept, log: log, what: what, open: map[net.Conn]struct{}{}}
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
			g.mu.Unlock()
			if err != nil {
				g.log.Warn(g.what+": connection refused before anything was sent to it", "peer", c.RemoteAddr().String(), "error", err)
				return
			}
			if err := handle(o); err != nil {
				g.log.Warn(g.what+": connection ended", "peer", c.RemoteAddr().String(), "error", err)
			}
		}()
	}
}

// admit counts c in, or reports false when a limit is reached (warning at
// most every 10 s, with the number dropped).
func (g *gate) admit(c net.Conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	if g.handshakes >= maxHandshakes || len(g.open) >= maxLinkConns {
		g.dropped++
		if time.Since(g.warned) >= 10*time.Second {
			g.log.Warn(g.what+": too many connections: closing new ones unread (a flood, or peers that never authenticate)",
				"handshakes", g.handshakes, "connections", len(g.open), "dropped", g.dropped, "latest", c.RemoteAddr().String())
			g.warned, g.dropped = time.Now(), 0
		}
		return false
	}
	g.open[c] = struct{}{}
	g.handshakes++
	g.wg.Add(1)
	return true
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
