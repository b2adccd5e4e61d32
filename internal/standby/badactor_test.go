package standby

// The standby link read as an attacker: a peer without the cluster secret
// (or with a wrong one, or replaying a recorded handshake) learns nothing
// and changes nothing; a forged claim of a newer epoch does not fence the
// primary; an acknowledgement of what was never sent is refused; and what
// an unauthenticated peer can make a listener allocate is bounded.

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/internal/setting"
	"github.com/tandem-tx/tandem/internal/wal"
)

var (
	testAuth  = &Auth{Secret: []byte("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")}
	wrongAuth = &Auth{Secret: []byte("fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210")}
)

// startSecurePrimary is startPrimary with the cluster secret; mod adjusts
// the shipper's configuration.
func startSecurePrimary(t *testing.T, mod func(*ShipperConfig)) *primary {
	t.Helper()
	cfg := ShipperConfig{Listen: "127.0.0.1:0", Transport: Async, Protection: MaxPerformance, NetTimeout: 2 * time.Second,
		Identity: testID(), Logger: quiet, Auth: testAuth}
	if mod != nil {
		mod(&cfg)
	}
	sh, err := NewShipper(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := wal.Open(wal.Options{Dir: t.TempDir(), SegmentSize: 64 << 10, NoSync: true, OnWrite: sh.Written}, func(pos wal.Position, typ wal.Type, b []byte) error { sh.Replayed(pos, typ, b); return nil })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sh.Close(); l.Close() })
	return &primary{log: l, sh: sh}
}

func startSecureStandby(t *testing.T, dir, addr string, auth *Auth, listen string) *Receiver {
	t.Helper()
	r, err := OpenReceiver(ReceiverConfig{Primary: addr, Dir: dir, SegmentSize: 64 << 10, NoSync: true, NetTimeout: 2 * time.Second, Logger: quiet,
		Auth: auth, Listen: listen})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func rawFrame(kind byte, payload []byte) []byte {
	var b bytes.Buffer
	w := bufio.NewWriter(&b)
	_ = writeFrame(w, kind, payload)
	return b.Bytes()
}

// readUntilClosed reads what the peer sends until it closes the connection
// (or 5 s pass: then the connection is still open, and open reports it).
func readUntilClosed(c net.Conn) (got []byte, open bool) {
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	var ne net.Error
	return got, errors.As(err, &ne) && ne.Timeout()
}

// frameKinds lists the kinds of the frames in b (by their headers).
func frameKinds(b []byte) []byte {
	var out []byte
	for len(b) >= 9 {
		out = append(out, b[0])
		n := int(binary.LittleEndian.Uint32(b[1:5]))
		if n > len(b)-9 {
			break
		}
		b = b[9+n:]
	}
	return out
}

// assertLearntNothing fails when got holds a WELCOME or the cluster id.
func assertLearntNothing(t *testing.T, got []byte) {
	t.Helper()
	id := testID().Cluster
	if bytes.Contains(got, id[:]) {
		t.Errorf("an unauthenticated peer received the cluster id (%d bytes received, frames %v)", len(got), frameKinds(got))
	}
	if bytes.IndexByte(frameKinds(got), kindWelcome) >= 0 {
		t.Errorf("an unauthenticated peer received a WELCOME (frames %v)", frameKinds(got))
	}
}

// A raw socket that sends a HELLO, a PROBE or a JOIN without the secret,
// or that runs the handshake with a wrong secret, gets no WELCOME and no
// cluster id; the primary goes on serving its real standby.
func TestBadActorWithoutTheSecretGetsNothing(t *testing.T) {
	p := startSecurePrimary(t, nil)
	if _, err := p.log.Append(1, []byte("gtrid-1 COMMIT")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		send []byte
	}{
		{"HELLO", rawFrame(kindHello, hello{}.encode())},
		{"PROBE", rawFrame(kindProbe, hello{cluster: testID().Cluster, epoch: 99}.encode())},
		{"JOIN", rawFrame(kindJoin, join{cluster: testID().Cluster, epoch: 3}.encode())},
		{"CHALLENGE without a secret", rawFrame(kindChallenge, append([]byte{Version, authNone}, make([]byte, nonceSize)...))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", p.sh.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.Write(tc.send)
			got, open := readUntilClosed(c)
			assertLearntNothing(t, got)
			if open {
				t.Errorf("the connection is still open 5 s later")
			}
		})
	}
	t.Run("wrong secret", func(t *testing.T) {
		c, err := net.Dial("tcp", p.sh.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		br, bw := bufio.NewReader(c), bufio.NewWriter(c)
		err = dialAuth(br, bw, wrongAuth)
		if err == nil || !errors.Is(err, errAuth) {
			t.Errorf("the handshake with a wrong secret: %v, want the primary's proof refused", err)
		}
		// Go on regardless, as an attacker would: proof of nothing, then HELLO.
		bw.Write(rawFrame(kindResponse, make([]byte, 32)))
		bw.Write(rawFrame(kindHello, hello{}.encode()))
		bw.Flush()
		got, _ := readUntilClosed(c)
		assertLearntNothing(t, got)
	})
	t.Run("reflected proof", func(t *testing.T) {
		// The primary's own proof sent back to it as the dialling side's.
		c, err := net.Dial("tcp", p.sh.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		br := bufio.NewReader(c)
		c.Write(rawFrame(kindChallenge, append([]byte{Version, authSecret}, make([]byte, nonceSize)...)))
		kind, b, err := readFrame(br, nil, kindsOf(kindProof))
		if err != nil || kind != kindProof {
			t.Fatalf("no PROOF: %v", err)
		}
		c.Write(append(rawFrame(kindResponse, b[2+nonceSize:]), rawFrame(kindHello, hello{}.encode())...))
		got, _ := readUntilClosed(c)
		assertLearntNothing(t, got)
	})
	t.Run("standby with a wrong secret", func(t *testing.T) {
		dir := t.TempDir()
		r := startSecureStandby(t, dir, p.sh.Addr(), wrongAuth, "")
		waitFor(t, "the standby's error", func() bool { return r.LastError() != nil })
		if err := r.LastError(); !errors.Is(err, errAuth) {
			t.Errorf("standby with a wrong secret: %v, want an authentication failure", err)
		}
		r.Close()
		if _, ok, _ := LoadIdentity(dir); ok {
			t.Errorf("the standby with a wrong secret learnt the cluster identity")
		}
		if got := standbyRecords(t, dir); len(got) != 0 {
			t.Errorf("the standby with a wrong secret received %d records", len(got))
		}
	})
	r := startSecureStandby(t, t.TempDir(), p.sh.Addr(), testAuth, "")
	defer r.Close()
	waitFor(t, "the real standby caught up", func() bool { st := p.sh.Status(); return st.Connected && st.LagRecords == 0 })
}

// A fake primary (one that does not hold the secret) cannot feed a standby
// anything: whatever it sends after the standby's CHALLENGE, nothing is
// written and no identity adopted.
func TestBadActorFakePrimaryFeedsNothing(t *testing.T) {
	forged := append(rawFrame(kindWelcome, welcome{cluster: testID().Cluster, epoch: 3}.encode()), rawFrame(kindRecords, goodRecords())...)
	for _, tc := range []struct {
		name string
		do   func(r *bufio.Reader, w *bufio.Writer, c net.Conn)
	}{
		{"no handshake", func(_ *bufio.Reader, _ *bufio.Writer, c net.Conn) { c.Write(forged) }},
		{"wrong secret", func(r *bufio.Reader, w *bufio.Writer, c net.Conn) {
			_ = acceptAuth(r, w, wrongAuth)
			c.Write(forged)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer lis.Close()
			go func() {
				for {
					c, err := lis.Accept()
					if err != nil {
						return
					}
					go func() {
						defer c.Close()
						r := bufio.NewReader(c)
						if tc.name == "no handshake" {
							if _, _, err := readFrame(r, nil, anyKind); err != nil {
								return
							}
						}
						tc.do(r, bufio.NewWriter(c), c)
						time.Sleep(50 * time.Millisecond)
					}()
				}
			}()
			dir := t.TempDir()
			r := startSecureStandby(t, dir, lis.Addr().String(), testAuth, "")
			waitFor(t, "the standby's error", func() bool { return r.LastError() != nil })
			time.Sleep(300 * time.Millisecond) // a few attempts
			r.Close()
			if got := standbyRecords(t, dir); len(got) != 0 {
				t.Errorf("a fake primary fed the standby %d records: %v", len(got), got)
			}
			if _, ok, _ := LoadIdentity(dir); ok {
				t.Errorf("the standby adopted a fake primary's identity")
			}
		})
	}
}

// recordingProxy forwards one address to another and keeps what the
// dialling side sent.
type recordingProxy struct {
	lis  net.Listener
	mu   sync.Mutex
	sent []byte
}

func (p *recordingProxy) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sent = append(p.sent, b...)
	return len(b), nil
}

func newRecordingProxy(t *testing.T, target string) *recordingProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &recordingProxy{lis: lis}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			go func() { io.Copy(io.MultiWriter(s, p), c); s.Close() }()
			go func() { io.Copy(c, s); c.Close() }()
		}
	}()
	return p
}

// A handshake recorded off the wire and replayed on a new connection gets
// nothing: the primary's nonce is new every time.
func TestBadActorReplayedHandshakeFails(t *testing.T) {
	p := startSecurePrimary(t, nil)
	if _, err := p.log.Append(1, []byte("gtrid-1 COMMIT")); err != nil {
		t.Fatal(err)
	}
	px := newRecordingProxy(t, p.sh.Addr())
	r := startSecureStandby(t, t.TempDir(), px.lis.Addr().String(), testAuth, "")
	waitFor(t, "the standby caught up through the proxy", func() bool { st := p.sh.Status(); return st.Connected && st.LagRecords == 0 })
	r.Close()
	px.mu.Lock()
	recorded := bytes.Clone(px.sent)
	px.mu.Unlock()
	if len(recorded) == 0 {
		t.Fatal("nothing recorded")
	}
	c, err := net.Dial("tcp", p.sh.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(recorded)
	got, _ := readUntilClosed(c)
	assertLearntNothing(t, got)
}

// A PROBE claiming a newer epoch from a peer without the secret is
// ignored: the primary is not fenced.
func TestBadActorUnauthenticatedProbeDoesNotFence(t *testing.T) {
	var fenced atomic.Int32
	p := startSecurePrimary(t, func(c *ShipperConfig) { c.OnFenced = func(error) { fenced.Add(1) } })
	newer := testID()
	newer.Epoch++
	for _, send := range [][]byte{
		rawFrame(kindProbe, hello{cluster: newer.Cluster, epoch: newer.Epoch}.encode()),
		rawFrame(kindHello, hello{cluster: newer.Cluster, epoch: newer.Epoch}.encode()),
	} {
		c, err := net.Dial("tcp", p.sh.Addr())
		if err != nil {
			t.Fatal(err)
		}
		c.Write(send)
		readUntilClosed(c)
		c.Close()
	}
	time.Sleep(100 * time.Millisecond) // OnFenced runs in its own goroutine
	if n := fenced.Load(); n != 0 {
		t.Fatalf("an unauthenticated claim of epoch %d fenced the primary (%d times)", newer.Epoch, n)
	}
	// The same claim, authenticated, is passed on (for the server to check
	// with --peer).
	if _, reached, err := CheckPeer(p.sh.Addr(), newer, testAuth, time.Second); err != nil || !reached {
		t.Fatalf("authenticated probe: reached %v, %v", reached, err)
	}
	waitFor(t, "the authenticated claim passed on", func() bool { return fenced.Load() == 1 })
}

// Repeated claims of a newer epoch while one is being checked are
// coalesced: OnFenced runs once at a time.
func TestBadActorFenceAttemptsAreCoalesced(t *testing.T) {
	var calls atomic.Int32
	entered := make(chan struct{}, 64) // one per OnFenced call
	release := make(chan struct{})
	p := startSecurePrimary(t, func(c *ShipperConfig) {
		c.OnFenced = func(error) { calls.Add(1); entered <- struct{}{}; <-release }
	})
	newer := testID()
	newer.Epoch++
	// claim sends one claim; reached: the primary answered, after handing
	// the claim to fenced.
	claim := func() bool {
		_, reached, _ := CheckPeer(p.sh.Addr(), newer, testAuth, time.Minute)
		return reached
	}
	started := func(what string) {
		t.Helper()
		select {
		case <-entered:
		case <-time.After(time.Minute):
			t.Fatalf("OnFenced did not run for %s", what)
		}
	}
	var wg sync.WaitGroup
	var reached atomic.Int32
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if claim() {
				reached.Add(1)
			}
		}()
	}
	wg.Wait()
	if reached.Load() == 0 {
		t.Fatal("none of 20 claims reached the primary")
	}
	// A claim whose connection the primary evicted (over
	// maxHandshakesPerHost) may be handled after its client gave up: wait
	// until the primary holds none of them.
	waitFor(t, "the primary to be done with the 20 claims", func() bool {
		p.sh.gate.mu.Lock()
		defer p.sh.gate.mu.Unlock()
		return len(p.sh.gate.open) == 0
	})
	started("the first of 20 claims")
	if n := calls.Load(); n != 1 {
		close(release)
		t.Fatalf("20 claims (%d answered) while one was being checked: OnFenced ran %d times, want 1", reached.Load(), n)
	}
	close(release)
	// Once the first check has returned, a later claim is checked again.
	waitFor(t, "the first check to return", func() bool { return !p.sh.fencing.Load() })
	if !claim() {
		t.Fatal("a later claim did not reach the primary")
	}
	started("a claim after the first check returned")
	if n := calls.Load(); n != 2 {
		t.Fatalf("OnFenced ran %d times after the first check returned, want exactly 1 more", n)
	}
}

// A standby with a Listen address answers authenticated PROBEs with its
// own cluster and epoch (so a primary's --peer check can disprove a forged
// claim), refuses HELLO, and tells a peer without the secret nothing.
func TestStandbyAnswersProbes(t *testing.T) {
	p := startSecurePrimary(t, nil)
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	listen := lis.Addr().String()
	lis.Close()
	r := startSecureStandby(t, t.TempDir(), p.sh.Addr(), testAuth, listen)
	defer r.Close()
	waitFor(t, "the standby connected", func() bool { return p.sh.Status().Connected })
	info, reached, err := CheckPeer(listen, testID(), testAuth, time.Second)
	if err != nil || !reached || !strings.Contains(info, "epoch 3") {
		t.Fatalf("probe of the standby: %q reached %v, %v; want it to answer epoch 3", info, reached, err)
	}
	older := testID()
	older.Epoch = 2
	if _, _, err := CheckPeer(listen, older, testAuth, time.Second); !errors.Is(err, ErrFenced) {
		t.Errorf("probe of the standby from an older epoch: %v, want ErrFenced (its epoch is newer)", err)
	}
	c, err := net.Dial("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(rawFrame(kindProbe, hello{}.encode()))
	got, _ := readUntilClosed(c)
	assertLearntNothing(t, got)
	if _, _, err := CheckPeer(listen, testID(), wrongAuth, time.Second); err != nil {
		t.Errorf("probe with a wrong secret: %v", err)
	}
}

// An ACK past the last record sent on the connection is refused: the
// connection is dropped and the acknowledged position does not move, so a
// peer cannot make max-protection acknowledge what no standby holds.
func TestBadActorAckPastSentIsRefused(t *testing.T) {
	p := startSecurePrimary(t, nil)
	var last wal.Position
	for i := range 3 {
		pos, err := p.log.Append(1, []byte{'r', byte('0' + i)})
		if err != nil {
			t.Fatal(err)
		}
		last = pos
	}
	c, br, bw := dialShipper(t, p.sh.Addr(), testAuth)
	defer c.Close()
	writeFrame(bw, kindHello, hello{cluster: testID().Cluster, epoch: 3}.encode())
	if kind, _, err := readFrame(br, nil, kindsOf(kindWelcome)); err != nil || kind != kindWelcome {
		t.Fatalf("no WELCOME: %v", err)
	}
	bogus := wal.Position{Segment: last.Segment + 100, Offset: 8}
	writeFrame(bw, kindAck, encodePos(bogus))
	_, open := readUntilClosed(c)
	if open {
		t.Errorf("the primary kept the connection of a standby that acknowledged %s, past everything sent", bogus)
	}
	if got := p.sh.Acked(); got.Less(last) == false {
		t.Fatalf("the primary took an ACK of %s (last record %s): acked %s", bogus, last, got)
	}
}

// heapInuse is the heap in use after a collection.
func heapInuse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// Frame headers claiming 64 MiB (before and after the handshake's frames)
// allocate nothing: the length is checked per kind before the payload is
// read, and the connection is closed at once.
func TestBadActorHugeFrameHeaderAllocatesNothing(t *testing.T) {
	p := startSecurePrimary(t, nil)
	before := heapInuse()
	var conns []net.Conn
	for _, kind := range []byte{kindHello, kindChallenge, kindRecords, kindProbe} {
		for range 2 {
			c, err := net.Dial("tcp", p.sh.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			var h [9]byte
			h[0] = kind
			binary.LittleEndian.PutUint32(h[1:5], MaxFrame)
			c.Write(h[:])
			conns = append(conns, c)
		}
	}
	time.Sleep(300 * time.Millisecond) // the primary reads the headers
	after := heapInuse()
	grew := int64(after) - int64(before)
	t.Logf("heap in use: %d MiB before, %d MiB with %d 64-MiB frame headers pending (%+d KiB)", before>>20, after>>20, len(conns), grew>>10)
	if grew > 32<<20 {
		t.Errorf("%d frame headers claiming 64 MiB grew the heap by %d MiB", len(conns), grew>>20)
	}
	for _, c := range conns {
		if _, open := readUntilClosed(c); open {
			t.Errorf("a connection that sent a 64 MiB frame header is still open")
		}
	}
}

// A thousand idle connections: the listener holds a bounded number of
// handshakes (the rest are closed at once), each closed after the handshake
// deadline; the heap and the goroutines stay bounded, and a real standby
// connects afterwards.
func TestBadActorIdleConnectionsAreBounded(t *testing.T) {
	p := startSecurePrimary(t, func(c *ShipperConfig) { c.NetTimeout = time.Second })
	if _, err := p.log.Append(1, []byte("x")); err != nil {
		t.Fatal(err)
	}
	before, gBefore := heapInuse(), runtime.NumGoroutine()
	conns := make([]net.Conn, 0, 1000)
	for range 1000 {
		c, err := net.Dial("tcp", p.sh.Addr())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	time.Sleep(300 * time.Millisecond)
	after, gAfter := heapInuse(), runtime.NumGoroutine()
	t.Logf("1000 idle connections: heap %d → %d MiB, goroutines %d → %d", before>>20, after>>20, gBefore, gAfter)
	if grew := int64(after) - int64(before); grew > 64<<20 {
		t.Errorf("1000 idle connections grew the heap by %d MiB", grew>>20)
	}
	if g := gAfter - gBefore; g > 2*maxHandshakes+50 {
		t.Errorf("1000 idle connections hold %d more goroutines, want at most about %d (the handshake cap)", g, maxHandshakes)
	}
	var wg sync.WaitGroup
	var stillOpen atomic.Int32
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, open := readUntilClosed(c); open {
				stillOpen.Add(1)
			}
		}()
	}
	wg.Wait()
	if n := stillOpen.Load(); n > 0 {
		t.Errorf("%d idle connections are still open 5 s after a 1 s handshake deadline", n)
	}
	r := startSecureStandby(t, t.TempDir(), p.sh.Addr(), testAuth, "")
	defer r.Close()
	waitFor(t, "a real standby after the flood", func() bool { st := p.sh.Status(); return st.Connected && st.LagRecords == 0 })
}

// Each kind has its own largest payload, checked before anything is
// allocated or read past the header.
func TestFrameLengthIsCheckedPerKind(t *testing.T) {
	for _, kind := range []byte{kindHello, kindWelcome, kindAck, kindRefuse, kindRelease, kindJoin, kindSegment, kindProbe, kindChallenge, kindProof, kindResponse} {
		var h [9]byte
		h[0] = kind
		binary.LittleEndian.PutUint32(h[1:5], MaxFrame)
		rd := bytes.NewReader(append(h[:], make([]byte, 64)...))
		_, _, err := readFrame(rd, nil, anyKind)
		if err == nil || !strings.Contains(err.Error(), "larger than") {
			t.Errorf("kind %d frame header claiming %d bytes: %v, want refused for its length", kind, MaxFrame, err)
		}
		if rd.Len() != 64 {
			t.Errorf("kind %d: %d bytes read past the header", kind, 64-rd.Len())
		}
	}
	// And a frame of a kind the reader does not expect is refused by its
	// header too.
	rd := bytes.NewReader(rawFrame(kindRecords, goodRecords()))
	if _, _, err := readFrame(rd, nil, kindsOf(kindAck)); err == nil {
		t.Errorf("a RECORDS frame where an ACK was expected was read")
	}
}

// An arch SEGMENT header's record count is bounded before anything is
// allocated for it: n records need n distinct positions in the segment.
func TestSegmentHeaderRecordCountIsBounded(t *testing.T) {
	h := segHeader{seg: 2, after: wal.Position{Segment: 1, Offset: 4096}, last: wal.Position{Segment: 2, Offset: 4096}, n: 1 << 31}
	if _, err := decodeSegHeader(h.encode()); err == nil {
		t.Errorf("a SEGMENT claiming %d records ending at offset 4096 was accepted", h.n)
	}
	h.n = 4096/8 + 1
	if _, err := decodeSegHeader(h.encode()); err != nil {
		t.Errorf("a SEGMENT of %d records ending at offset 4096: %v", h.n, err)
	}
}

// Off loopback, a shipper or a standby without authentication is refused
// with an error that names the setting at fault (the command line adds how
// to fix it: cmd/tandem's remedy table).
func TestExposureWithoutAuthIsRefused(t *testing.T) {
	_, err := NewShipper(ShipperConfig{Listen: "0.0.0.0:0", Identity: testID(), Transport: Async, Protection: MaxPerformance, Logger: quiet})
	var se *setting.Error
	if !errors.Is(err, ErrLinkNotAuthenticated) || !errors.As(err, &se) || se.Setting != setting.StandbyListen {
		t.Errorf("a shipper on 0.0.0.0 without a secret: %v, want ErrLinkNotAuthenticated naming standby.listen", err)
	}
	_, err = OpenReceiver(ReceiverConfig{Primary: "192.0.2.1:7072", Dir: t.TempDir(), NoSync: true, Logger: quiet})
	if !errors.Is(err, ErrLinkNotAuthenticated) || !errors.As(err, &se) || se.Setting != setting.StandbyOf {
		t.Errorf("a standby of 192.0.2.1 without a secret: %v, want ErrLinkNotAuthenticated naming standby.of", err)
	}
	for _, tc := range []struct {
		addr string
		auth *Auth
		ok   bool
	}{
		{"127.0.0.1:7072", nil, true}, {"[::1]:7072", nil, true}, {"localhost:7072", nil, true},
		{":7072", nil, false}, {"10.0.0.1:7072", nil, false}, {"db.example:7072", &Auth{}, false},
		// The secret alone authenticates the handshake, not the frames
		// after it: off loopback the link needs TLS too, or the operator's
		// explicit InsecureNoTLS.
		{"10.0.0.1:7072", testAuth, false},
		{"10.0.0.1:7072", &Auth{Secret: testAuth.Secret, InsecureNoTLS: true}, true},
		{"10.0.0.1:7072", &Auth{Secret: testAuth.Secret, ServerTLS: &tls.Config{}, ClientTLS: &tls.Config{}}, true},
		{"10.0.0.1:7072", &Auth{ServerTLS: &tls.Config{}, ClientTLS: &tls.Config{}}, true},
		{"127.0.0.1:7072", testAuth, true},
	} {
		if err := CheckExposure(setting.StandbyListen, tc.addr, tc.auth); (err == nil) != tc.ok {
			t.Errorf("CheckExposure(%s, %v) = %v", tc.addr, tc.auth, err)
		}
	}
}

// A peer that holds more idle, unauthenticated connections than the
// handshake cap must not lock the real standby out until they time out:
// a new connection evicts the oldest pending handshake (of its own host
// first), so the real standby gets in while the flood is still held.
func TestBadActorIdleConnectionsDoNotLockOutTheStandby(t *testing.T) {
	p := startSecurePrimary(t, func(c *ShipperConfig) { c.NetTimeout = time.Minute })
	if _, err := p.log.Append(1, []byte("x")); err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range 2 * maxHandshakes {
		c, err := net.Dial("tcp", p.sh.Addr())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	time.Sleep(200 * time.Millisecond) // all accepted, held in the handshake
	r := startSecureStandby(t, t.TempDir(), p.sh.Addr(), testAuth, "")
	defer r.Close()
	deadline := time.Now().Add(5 * time.Second) // far less than the minute-long handshake deadline
	for {
		if st := p.sh.Status(); st.Connected && st.LagRecords == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("with %d idle connections held, the real standby did not get in within 5 s (handshake deadline 1 min)", len(conns))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
