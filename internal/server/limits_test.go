package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tandem-tx/tandem/api"
	"github.com/tandem-tx/tandem/internal/coord"
	"github.com/tandem-tx/tandem/xid"
)

// closedWithin reports how long the server took to close conn (reading
// whatever it sends meanwhile), or fails after limit.
func closedWithin(t *testing.T, conn net.Conn, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	_ = conn.SetReadDeadline(start.Add(limit))
	_, err := io.Copy(io.Discard, conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server still held the connection after %v", limit)
	}
	return time.Since(start)
}

// waitHeld waits until the capped listener l holds n connections: the
// server has accepted (or, after a close, counted out) what the test
// dialled (or closed).
func waitHeld(t *testing.T, l net.Listener, n int) {
	t.Helper()
	cl := l.(*capListener)
	waitUntil(t, fmt.Sprintf("the %s to hold %d connections", cl.name, n), func() bool {
		cl.mu.Lock()
		defer cl.mu.Unlock()
		return cl.n == n
	})
}

// A slowloris client of the admin listener — headers sent slowly, a body
// sent slowly, a kept-alive connection left idle — is closed by the
// listener's timeouts (shortened here).
func TestAdminSlowClientsAreClosed(t *testing.T) {
	saved := adminLimits
	adminLimits = httpLimits{ReadHeader: 200 * time.Millisecond, Read: 300 * time.Millisecond, Write: 300 * time.Millisecond,
		Idle: 200 * time.Millisecond, RoleWrite: time.Second, MaxHeaderBytes: 4 << 10, MaxConns: 16}
	defer func() { adminLimits = saved }()
	s, _ := startAdmin(t, Options{})
	dial := func() net.Conn {
		c, err := net.Dial("tcp", s.AdminAddr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	const limit = 5 * time.Second // far above the timeouts: only a connection never closed fails

	// Headers that never end.
	c := dial()
	_, _ = io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
	t.Logf("slow headers closed after %v", closedWithin(t, c, limit))

	// A body that never comes (the handler does not read it; the server
	// must not wait for it forever either).
	c = dial()
	_, _ = io.WriteString(c, "POST /role/resume HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n\r\nx")
	t.Logf("slow body closed after %v", closedWithin(t, c, limit))

	// send writes req on a new connection and reads the status line. A
	// request this test was too slow to send (ReadHeader past after the
	// dial, on a busy machine) is closed unanswered: it is sent again.
	send := func(req string) (net.Conn, *bufio.Reader, string) {
		var conn net.Conn
		var br *bufio.Reader
		var line string
		waitUntil(t, "an answer", func() bool {
			conn = dial()
			_, _ = io.WriteString(conn, req)
			br = bufio.NewReader(conn)
			var err error
			if line, err = br.ReadString('\n'); err != nil && line == "" {
				t.Logf("closed unanswered (%v): again", err)
				return false
			}
			return true
		})
		return conn, br, line
	}

	// One request, then idle.
	c, br, line := send("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	if !strings.Contains(line, "200") {
		t.Fatalf("GET /metrics: %q", line)
	}
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(limit))
	if _, err := io.Copy(io.Discard, br); err != nil {
		t.Fatalf("the idle kept-alive connection was not closed: %v", err)
	}
	t.Logf("idle connection closed %v after its answer began", time.Since(start))

	// Oversized headers.
	_, _, line = send("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + strings.Repeat("a", 64<<10) + "\r\n\r\n")
	if !strings.Contains(line, "431") {
		t.Fatalf("64 KiB of headers: %q, want 431", line)
	}
}

// The production limits are all set.
func TestAdminLimitsAreSet(t *testing.T) {
	l := adminLimits
	if l.ReadHeader <= 0 || l.Read <= 0 || l.Write <= 0 || l.Idle <= 0 || l.RoleWrite < time.Minute || l.MaxHeaderBytes <= 0 || l.MaxHeaderBytes > 64<<10 || l.MaxConns <= 0 {
		t.Fatalf("admin limits %+v: every timeout must be set, a role change given at least a minute, headers capped at 64 KiB, connections capped", l)
	}
	a := apiLimits
	if a.Handshake <= 0 || a.MaxStreams == 0 || a.MaxRecvMsg <= 0 || a.MaxRecvMsg > 64<<10 {
		t.Fatalf("API limits %+v: a handshake timeout, a stream cap and a request cap of at most 64 KiB", a)
	}
}

// A gRPC connection that never completes its set-up is closed after the
// handshake timeout (shortened here).
func TestAPIHandshakeTimeout(t *testing.T) {
	saved := apiLimits
	apiLimits.Handshake = 200 * time.Millisecond
	defer func() { apiLimits = saved }()
	s, _ := startAdmin(t, Options{})
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	t.Logf("silent connection closed after %v", closedWithin(t, c, 5*time.Second))
}

// The largest legitimate request fits apiLimits.MaxRecvMsg with room to
// spare; a larger one is refused with RESOURCE_EXHAUSTED before it is
// decoded.
func TestAPIRequestSizeCap(t *testing.T) {
	largest := &api.CommitRequest{Gtrid: xid.New().String(), Options: &api.CommitOptions{Durability: api.Durability_NOWAIT, Visibility: api.Visibility_ASYNC}}
	for i := range coord.MaxBranches {
		largest.Branches = append(largest.Branches, &api.Branch{Rm: strings.Repeat("r", 30) + string(rune('a'+i/26)) + string(rune('a'+i%26)), ClientSettles: true})
	}
	n := proto.Size(largest)
	t.Logf("largest legitimate Commit: %d bytes; cap %d", n, apiLimits.MaxRecvMsg)
	if n*2 > apiLimits.MaxRecvMsg {
		t.Fatalf("the largest legitimate request (%d bytes) is more than half the cap %d", n, apiLimits.MaxRecvMsg)
	}
	s, _ := startAdmin(t, Options{})
	conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = api.NewCoordinatorClient(conn).Commit(ctx, &api.CommitRequest{Gtrid: strings.Repeat("a", apiLimits.MaxRecvMsg), Branches: []*api.Branch{{Rm: "pg"}}})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a request over the cap: %v, want RESOURCE_EXHAUSTED", err)
	}
}

// The API holds at most apiLimits.MaxConns connections: past it a new one
// is closed at once (a flood of idle connections cannot exhaust the
// coordinator's file descriptors, which its log and database pools need);
// once one closes, a new one is served again.
func TestAPIConnectionCap(t *testing.T) {
	saved := apiLimits
	apiLimits.MaxConns = 3
	defer func() { apiLimits = saved }()
	s, _ := startAdmin(t, Options{})
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range 3 {
		c, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	waitHeld(t, s.lis, 3)
	extra, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	t.Logf("a connection past the cap closed after %v", closedWithin(t, extra, 2*time.Second))
	held[0].Close()
	waitHeld(t, s.lis, 2)
	again, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	// Served: the server speaks first (its HTTP/2 settings) and holds it.
	_ = again.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	_, err = io.Copy(io.Discard, again)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a connection under the cap again: %v, want it held open (read timeout)", err)
	}
}

// The admin listener holds at most adminLimits.MaxConns connections, as the
// API does: a flood of connections (no token needed to open one) cannot take
// the coordinator's file descriptors; past the cap a new one is closed at
// once, and once one closes a new one is served again.
func TestAdminConnectionCap(t *testing.T) {
	saved := adminLimits
	adminLimits.MaxConns = 3
	defer func() { adminLimits = saved }()
	s, _ := startAdmin(t, Options{})
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range 3 {
		c, err := net.Dial("tcp", s.AdminAddr())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	waitHeld(t, s.adminLis, 3)
	extra, err := net.Dial("tcp", s.AdminAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	t.Logf("an admin connection past the cap closed after %v", closedWithin(t, extra, 2*time.Second))
	held[0].Close()
	waitHeld(t, s.adminLis, 2)
	again, err := net.Dial("tcp", s.AdminAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	_, _ = io.WriteString(again, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	_ = again.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := bufio.NewReader(again).ReadString('\n'); err != nil || !strings.Contains(line, "200") {
		t.Fatalf("a connection under the cap again: GET /metrics: %q %v, want 200", line, err)
	}
}
