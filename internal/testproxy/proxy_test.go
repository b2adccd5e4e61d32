package testproxy

import (
	"bytes"
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"
)

// The tests check lower bounds that follow from the model, never upper
// bounds on time: the machine is shared. Waits for something that must
// happen (a close) have generous deadlines.

const deadline = 10 * time.Second

// serve runs h for every connection to a new loopback listener, closing the
// connection after it.
func serve(t *testing.T, h func(c *net.TCPConn)) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				h(c.(*net.TCPConn))
			}()
		}
	}()
	return lis.Addr().String()
}

func echo(c *net.TCPConn) { io.Copy(c, c) }

func newLink(t *testing.T, target string, l Link) *Proxy {
	t.Helper()
	p, err := NewLink(target, l)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func dial(t *testing.T, addr string) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(deadline))
	return c.(*net.TCPConn)
}

func random(seed uint64, n int) []byte {
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)}).Read(b)
	return b
}

// readAll reads to end of stream and returns the hash and byte count.
func readAll(r io.Reader) ([32]byte, int64, error) {
	h := sha256.New()
	n, err := io.Copy(h, r)
	return [32]byte(h.Sum(nil)), n, err
}

// roundTrip sends one byte through an echo and waits for it back.
func roundTrip(t *testing.T, c net.Conn) time.Duration {
	t.Helper()
	start := time.Now()
	if _, err := c.Write([]byte{'p'}); err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		t.Fatal(err)
	}
	return time.Since(start)
}

// Bytes arrive intact, in order, and all of them, in both directions at
// once over a delayed, bandwidth- and window-limited link shared by three
// connections; and a sender that closes right after its last write loses
// nothing, in either direction.
func TestIntact(t *testing.T) {
	l := Link{Delay: 5 * time.Millisecond, Bandwidth: 16 << 20, Window: 128 << 10}

	t.Run("both directions", func(t *testing.T) {
		const conns, size = 3, 1 << 20
		down := random(99, size)
		got := make(chan [32]byte, conns)
		addr := serve(t, func(c *net.TCPConn) {
			var wg sync.WaitGroup
			wg.Go(func() {
				h, _, err := readAll(c)
				if err != nil {
					t.Errorf("server read: %v", err)
				}
				got <- h
			})
			if _, err := c.Write(down); err != nil {
				t.Errorf("server write: %v", err)
			}
			c.CloseWrite()
			wg.Wait()
		})
		p := newLink(t, addr, l)
		var wg sync.WaitGroup
		sent := map[[32]byte]bool{}
		for i := range conns {
			up := random(uint64(i), size)
			sent[sha256.Sum256(up)] = true
			c := dial(t, p.Addr())
			wg.Go(func() {
				if _, err := c.Write(up); err != nil {
					t.Errorf("client write: %v", err)
				}
				c.CloseWrite()
			})
			wg.Go(func() {
				h, n, err := readAll(c)
				if err != nil || h != sha256.Sum256(down) {
					t.Errorf("client %d got %d bytes (err %v), not the %d the server sent", i, n, err, size)
				}
			})
		}
		wg.Wait()
		for range conns {
			h := <-got
			if !sent[h] {
				t.Errorf("the server got bytes no client sent")
			}
			delete(sent, h)
		}
		if s := p.Stats(); s != (Stats{Accepted: conns, ToTarget: conns * size, FromTarget: conns * size}) {
			t.Errorf("stats %+v", s)
		}
	})

	t.Run("server closes after writing", func(t *testing.T) {
		data := random(7, 512<<10)
		addr := serve(t, func(c *net.TCPConn) { c.Write(data) })
		p := newLink(t, addr, l)
		c := dial(t, p.Addr())
		if h, n, err := readAll(c); err != nil || h != sha256.Sum256(data) {
			t.Errorf("got %d bytes (err %v) of the %d the server sent before closing", n, err, len(data))
		}
	})

	t.Run("client closes after writing", func(t *testing.T) {
		data := random(8, 512<<10)
		type result struct {
			h   [32]byte
			n   int64
			err error
		}
		got := make(chan result, 1)
		addr := serve(t, func(c *net.TCPConn) {
			c.SetDeadline(time.Now().Add(deadline))
			h, n, err := readAll(c)
			got <- result{h, n, err}
		})
		p := newLink(t, addr, l)
		c := dial(t, p.Addr())
		if _, err := c.Write(data); err != nil {
			t.Fatal(err)
		}
		c.Close()
		if r := <-got; r.err != nil || r.h != sha256.Sum256(data) {
			t.Errorf("the server got %d bytes (err %v) of the %d the client sent before closing", r.n, r.err, len(data))
		}
	})
}

// A round trip through the proxy takes at least 2×Delay.
func TestRoundTripDelay(t *testing.T) {
	const delay = 25 * time.Millisecond
	p := newLink(t, serve(t, echo), Link{Delay: delay})
	c := dial(t, p.Addr())
	for i := range 5 {
		if rtt := roundTrip(t, c); rtt < 2*delay {
			t.Errorf("round trip %d took %v, less than 2×%v", i, rtt, delay)
		}
	}
}

// sink counts the bytes of each connection and reports them at end of
// stream.
func sink(t *testing.T) (string, chan int64) {
	done := make(chan int64, 16)
	return serve(t, func(c *net.TCPConn) {
		c.SetDeadline(time.Now().Add(deadline))
		n, err := io.Copy(io.Discard, c)
		if err != nil {
			t.Errorf("sink: %v", err)
		}
		done <- n
	}), done
}

// send writes n bytes to a new connection through p and half-closes it.
func send(t *testing.T, p *Proxy, n int) {
	c := dial(t, p.Addr())
	if _, err := c.Write(make([]byte, n)); err != nil {
		t.Error(err)
	}
	c.CloseWrite()
}

// N bytes over a link of bandwidth B take at least N/B (less the burst),
// and two connections share the bandwidth: together they take as long.
func TestBandwidth(t *testing.T) {
	const bw, total = 2 << 20, 512 << 10
	least := time.Duration(float64(total-BurstBytes(bw)) / bw * float64(time.Second))
	for _, conns := range []int{1, 2} {
		addr, done := sink(t)
		p := newLink(t, addr, Link{Bandwidth: bw})
		start := time.Now()
		for range conns {
			go send(t, p, total/conns)
		}
		var got int64
		for range conns {
			got += <-done
		}
		took := time.Since(start)
		t.Logf("%d connection(s): %d bytes in %v", conns, got, took)
		if got != total {
			t.Errorf("%d connection(s): the target got %d bytes of %d", conns, got, total)
		}
		if took < least {
			t.Errorf("%d connection(s): %d bytes at %d B/s took %v, less than %v", conns, total, bw, took, least)
		}
	}
}

// With a window W and a delay d, a connection reads W bytes at most per
// round trip: N bytes take at least (N/W − 1)×2d.
func TestWindow(t *testing.T) {
	const window, delay, total = 32 << 10, 20 * time.Millisecond, 256 << 10
	addr, done := sink(t)
	p := newLink(t, addr, Link{Delay: delay, Window: window})
	start := time.Now()
	go send(t, p, total)
	got := <-done
	took := time.Since(start)
	least := time.Duration(total/window-1) * 2 * delay
	t.Logf("%d bytes in %v", got, took)
	if got != total {
		t.Errorf("the target got %d bytes of %d", got, total)
	}
	if took < least {
		t.Errorf("%d bytes with a %d-byte window and %v delay took %v, less than %v", total, window, delay, took, least)
	}
}

// Cut drops open connections, with what is queued on them, and refuses new
// ones; Restore lets them in again.
func TestCutRestore(t *testing.T) {
	var mu sync.Mutex
	var received [][]byte
	addr := serve(t, func(c *net.TCPConn) {
		var got []byte
		buf := make([]byte, 64)
		for {
			n, err := c.Read(buf)
			got = append(got, buf[:n]...)
			if err != nil {
				break
			}
			c.Write(buf[:n])
		}
		mu.Lock()
		received = append(received, got)
		mu.Unlock()
	})
	p := newLink(t, addr, Link{})
	c := dial(t, p.Addr())
	roundTrip(t, c)

	// a byte queued for an hour, then the cut
	p.SetLink(Link{Delay: time.Hour})
	if _, err := c.Write([]byte{'q'}); err != nil {
		t.Fatal(err)
	}
	wait(t, "the proxy reads the byte", func() bool { return queuedToTarget(p) == 1 })
	p.Cut()
	if n, err := c.Read(make([]byte, 1)); err == nil || n > 0 {
		t.Errorf("after the cut, read %d bytes, err %v: the connection is not dropped", n, err)
	}
	wait(t, "the server sees the connection closed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(received) == 1
	})
	mu.Lock()
	first := received[0]
	mu.Unlock()
	if !bytes.Equal(first, []byte{'p'}) {
		t.Errorf("the server got %q, want %q: the queued byte must be dropped", first, "p")
	}

	p.SetLink(Link{})
	refused := dial(t, p.Addr()) // the kernel accepts, the proxy closes
	refused.Write([]byte{'r'})
	if n, err := refused.Read(make([]byte, 1)); err == nil || n > 0 {
		t.Errorf("while cut, a new connection read %d bytes, err %v", n, err)
	}

	p.Restore()
	roundTrip(t, dial(t, p.Addr()))
	if s := p.Stats(); s.Accepted != 2 {
		t.Errorf("%d connections accepted, want 2 (the one while cut is refused)", s.Accepted)
	}
}

func wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(deadline); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("waited %v: %s", deadline, what)
		}
	}
}

// SetLink changes the delay and the bandwidth of an open connection.
func TestSetLink(t *testing.T) {
	addr := serve(t, func(c *net.TCPConn) {
		var b [1]byte
		if _, err := io.ReadFull(c, b[:]); err != nil {
			return
		}
		c.Write(b[:]) // a ping, then a sink
		io.Copy(io.Discard, c)
		c.Write(b[:])
	})
	p := newLink(t, addr, Link{})
	c := dial(t, p.Addr())
	t.Logf("round trip without delay: %v", roundTrip(t, c))

	const delay, bw, total = 30 * time.Millisecond, 1 << 20, 256 << 10
	l := Link{Delay: delay, Bandwidth: bw}
	p.SetLink(l)
	if got := p.Link(); got != l {
		t.Errorf("Link() = %+v after SetLink(%+v)", got, l)
	}
	start := time.Now()
	if _, err := c.Write(make([]byte, total)); err != nil {
		t.Fatal(err)
	}
	c.CloseWrite()
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	least := 2*delay + time.Duration(float64(total-BurstBytes(bw))/bw*float64(time.Second))
	t.Logf("%d bytes and a reply in %v", total, took)
	if took < least {
		t.Errorf("%d bytes and a reply with %+v took %v, less than %v", total, l, took, least)
	}
}

// Close ends every goroutine of the proxy, whatever its connections were
// doing: idle, waiting for data that is due in an hour, waiting for window
// credit.
func TestCloseStopsEverything(t *testing.T) {
	base := runtime.NumGoroutine()
	addr, _ := sink(t)
	p, err := NewLink(addr, Link{Delay: time.Hour, Window: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	idle := dial(t, p.Addr())
	busy := dial(t, p.Addr())
	var wg sync.WaitGroup
	wg.Go(func() { busy.Write(make([]byte, 64<<10)) })
	wait(t, "the proxy takes a window's worth", func() bool { return queuedToTarget(p) > 0 })
	_ = idle
	p.Close()
	wg.Wait()
	wait(t, "the proxy's goroutines end", func() bool { return runtime.NumGoroutine() <= base+1 }) // +1: the sink's Accept
}

// queuedToTarget is the number of chunks read from clients and waiting to
// be delivered to the target (not yet being written).
func queuedToTarget(p *Proxy) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for pr := range p.pairs {
		d := pr.dirs[0]
		d.mu.Lock()
		n += len(d.q) - d.qh
		d.mu.Unlock()
	}
	return n
}

// BenchmarkThroughput moves 1 MiB per op through the proxy over parallel
// connections, to a target that reads and discards (for the CPU and
// allocations the proxy costs; the rate follows from the link).
func BenchmarkThroughput(b *testing.B) {
	for _, bc := range []struct {
		name  string
		conns int
		link  Link
	}{
		{"plain", 1, Link{}},
		{"delay=10ms", 1, Link{Delay: 10 * time.Millisecond}},
		{"delay=10ms/conns=5", 5, Link{Delay: 10 * time.Millisecond}},
		{"delay=10ms/window=1MiB/conns=5", 5, Link{Delay: 10 * time.Millisecond, Window: 1 << 20}},
		{"bandwidth=200MB/s/conns=5", 5, Link{Bandwidth: 200e6}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer lis.Close()
			got := make(chan int64, bc.conns)
			go func() {
				for {
					c, err := lis.Accept()
					if err != nil {
						return
					}
					go func() {
						n, _ := io.Copy(io.Discard, c)
						c.Close()
						got <- n
					}()
				}
			}()
			p, err := NewLink(lis.Addr().String(), bc.link)
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			const op = 1 << 20
			b.SetBytes(op)
			b.ReportAllocs()
			per := b.N * op / bc.conns
			buf := make([]byte, 64<<10)
			var wg sync.WaitGroup
			b.ResetTimer()
			for range bc.conns {
				wg.Go(func() {
					c, err := net.Dial("tcp", p.Addr())
					if err != nil {
						b.Error(err)
						return
					}
					defer c.Close()
					for left := per; left > 0; {
						n, err := c.Write(buf[:min(left, len(buf))])
						if err != nil {
							b.Error(err)
							return
						}
						left -= n
					}
					c.(*net.TCPConn).CloseWrite()
				})
			}
			wg.Wait()
			for range bc.conns {
				<-got
			}
		})
	}
}
