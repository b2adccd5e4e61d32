// Package testproxy is a TCP proxy for tests on loopback: it forwards
// connections to a target, can cut the network (Cut drops every open
// connection and refuses new ones until Restore), and can put a simulated
// link between the two sides: one-way delay, a bandwidth shared by every
// connection, and a per-connection window (see Link). Tests use it to cut a
// coordinator off a database or a primary off its standby, and benchmarks to
// ship a standby's log over a slow link where netem is not available.
//
// # What is modelled
//
// Each direction of the proxy is one link. The proxy reads chunks of up to
// ChunkSize from a sender; a chunk is timestamped when read and is due Delay
// later. Guaranteed:
//
//   - Order and integrity: a connection's bytes are delivered in the order
//     they were read, none lost, none added; its sender's end of stream
//     (close or half-close) reaches the receiver as a half-close after every
//     byte read before it, so a sender that closes right after writing loses
//     nothing. A connection is closed once both directions have ended; a
//     read error other than end of stream (a reset) closes the receiving
//     side, also after the queued bytes.
//   - Delay: no byte is delivered before it is due. The delay is pipelined,
//     as on a real link or netem: many chunks are on the way at once and
//     throughput is not bounded by one chunk per Delay.
//   - Bandwidth: the chunks of every connection of a direction pass the link
//     one after another, each taking len/Bandwidth of link time, and are
//     delivered when through (serialization delay), in pieces of about 2 ms
//     of link time; parallel connections share the bandwidth. A piece never
//     starts before it is due or before the link is free, so from an idle
//     link N bytes take at least N/Bandwidth; after falling behind (a late
//     timer) the link catches up by at most BurstBytes.
//   - Window: a connection may have at most Window bytes per direction read
//     from its sender and not yet acknowledged. Bytes are acknowledged Delay
//     after their delivery, so a round trip or more after they were read.
//     The proxy does not read from a sender without credit: the sender's
//     socket buffer fills and its writes block, as with a real TCP window.
//   - Memory: whatever the Window, the proxy holds at most MaxQueued bytes
//     per connection and direction read and not yet delivered; a sender
//     beyond that waits as for a window.
//
// Delivered means written to the receiver's socket: bytes in its kernel
// buffer count as delivered (a real TCP acknowledges those too), and a
// receiver that stops reading holds up delivery, hence acknowledgements,
// once that buffer is full. Bytes a sender has written and the proxy has
// not yet read are in the sender's kernel buffer, not on the link.
//
// Not modelled: loss, reordering, duplication, jitter, slow start,
// congestion control, a limit on the number of packets. The window is a
// parameter because the proxy cannot see the endpoints' socket buffers and
// settings, which bound a real connection's window (Linux by default lets a
// connection have a few MiB in flight).
package testproxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Link describes the simulated network between the two sides. Negative
// values count as zero. The zero Link forwards as fast as it can.
type Link struct {
	// Delay is added one way, in each direction: a round trip through the
	// proxy takes 2×Delay more.
	Delay time.Duration
	// Bandwidth in bytes per second per direction, shared by every
	// connection of the proxy (one link); 0: unlimited. From an idle link,
	// N bytes take at least N/Bandwidth to get through; a link that fell
	// behind (a late timer) may catch up by running ahead of its rate by at
	// most BurstBytes(Bandwidth).
	Bandwidth int64
	// Window bounds the bytes in flight per connection and direction, as
	// TCP's window does: a chunk read from the sender takes Window credit,
	// which returns a full round trip (2×Delay) later (later still when
	// delivery was held up by the bandwidth or the receiver), so one
	// connection moves at most Window/(2×Delay) bytes per second.
	// 0: unlimited (but see MaxQueued).
	Window int64
}

const (
	// ChunkSize is the most the proxy reads from a sender at once.
	ChunkSize = 64 << 10
	// MaxQueued bounds the bytes of a connection and direction that the
	// proxy has read and not yet delivered, whatever the Window: a sender
	// beyond it waits, so the proxy's memory stays bounded.
	MaxQueued = 16 << 20
	// burstMin and burstTime make BurstBytes.
	burstMin  = 16 << 10
	burstTime = 5 * time.Millisecond
	// pieceTime is the link time of one write with a Bandwidth: chunks are
	// delivered in pieces of about that much (1 KiB to ChunkSize), so the
	// receiver sees a stream, not lumps.
	pieceTime = 2 * time.Millisecond
	pieceMin  = 1 << 10
	// batchMax is the most one write delivers without a Bandwidth (chunks
	// already due are written together).
	batchMax = 256 << 10
)

// BurstBytes is how far a link of the given bandwidth may run ahead of its
// rate to catch up after falling behind: max(16 KiB, 5 ms of bandwidth).
func BurstBytes(bandwidth int64) int64 {
	if bandwidth <= 0 {
		return 0
	}
	return max(burstMin, bandwidth/int64(time.Second/burstTime))
}

// Stats counts what the proxy forwarded since it started.
type Stats struct {
	// Accepted is the number of connections accepted and forwarded to the
	// target.
	Accepted int64
	// ToTarget and FromTarget are the bytes delivered to the target and
	// back to the clients.
	ToTarget, FromTarget int64
}

// Proxy forwards TCP connections; see the package doc.
type Proxy struct {
	lis    net.Listener
	target string
	state  atomic.Pointer[linkState]
	setMu  sync.Mutex // serializes SetLink
	mu     sync.Mutex
	cut    bool
	pairs  map[*pair]struct{}
	wires  [2]wire // 0: to the target, 1: back to the clients
	conns  atomic.Int64
}

// linkState is the current Link and a channel closed when it is replaced,
// so that readers waiting for credit see a new Window at once.
type linkState struct {
	Link
	changed chan struct{}
}

// wire is one direction of the link, shared by every connection: the time
// at which it is free for the next chunk (bandwidth), and the bytes it
// delivered.
type wire struct {
	mu    sync.Mutex
	free  time.Time
	bytes atomic.Int64
}

// reserve takes n bytes of link time from the first moment allowed: not
// before the bytes are due, not before the link is free, not more than the
// burst's worth of time in the past. It returns when they are through.
func (w *wire) reserve(n int64, due, now time.Time, bandwidth int64) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	start := due
	if w.free.After(start) {
		start = w.free
	}
	if lo := now.Add(-bytesTime(BurstBytes(bandwidth), bandwidth)); lo.After(start) {
		start = lo
	}
	w.free = start.Add(bytesTime(n, bandwidth))
	return w.free
}

func bytesTime(n, bandwidth int64) time.Duration {
	return time.Duration(float64(n) / float64(bandwidth) * float64(time.Second))
}

// New listens on a free loopback port and forwards to target.
func New(target string) (*Proxy, error) { return NewLink(target, Link{}) }

// NewLink is New with a simulated link between the clients and the target.
func NewLink(target string, l Link) (*Proxy, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{lis: lis, target: target, pairs: map[*pair]struct{}{}}
	p.state.Store(&linkState{Link: clean(l), changed: make(chan struct{})})
	go p.serve()
	return p, nil
}

func clean(l Link) Link {
	return Link{Delay: max(l.Delay, 0), Bandwidth: max(l.Bandwidth, 0), Window: max(l.Window, 0)}
}

// Addr is the address to connect to instead of the target.
func (p *Proxy) Addr() string { return p.lis.Addr().String() }

// SetLink changes the link at run time, for open connections too: chunks
// read from then on get the new Delay, writes from then on the new
// Bandwidth, reads from then on the new Window. Chunks already on the way
// keep the delay they had.
func (p *Proxy) SetLink(l Link) {
	p.setMu.Lock()
	defer p.setMu.Unlock()
	old := p.state.Swap(&linkState{Link: clean(l), changed: make(chan struct{})})
	close(old.changed)
}

// Link is the current link.
func (p *Proxy) Link() Link { return p.state.Load().Link }

// Stats counts the connections and bytes forwarded so far.
func (p *Proxy) Stats() Stats {
	return Stats{Accepted: p.conns.Load(), ToTarget: p.wires[0].bytes.Load(), FromTarget: p.wires[1].bytes.Load()}
}

func (p *Proxy) serve() {
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.mu.Unlock()
		go p.pipe(c)
	}
}

// pair is one connection through the proxy: the client's side and the
// target's.
type pair struct {
	c, up net.Conn
	kill  chan struct{} // closed by abort
	once  sync.Once
	dirs  [2]*dir // to the target, back to the client
}

// abort drops the connection at once, whatever is queued.
func (pr *pair) abort() {
	pr.once.Do(func() {
		close(pr.kill)
		pr.c.Close()
		pr.up.Close()
	})
}

func (p *Proxy) pipe(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	pr := &pair{c: c, up: up, kill: make(chan struct{})}
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	p.conns.Add(1)
	a := newDir(p, pr, c, up, &p.wires[0])
	b := newDir(p, pr, up, c, &p.wires[1])
	p.pairs[pr] = struct{}{}
	pr.dirs = [2]*dir{a, b}
	p.mu.Unlock()
	go a.read()
	go b.read()
	go a.write()
	go b.write()
	<-a.dead
	<-b.dead
	pr.abort()
	p.mu.Lock()
	delete(p.pairs, pr)
	p.mu.Unlock()
}

// Cut drops every connection, discarding what is queued, and refuses new
// ones.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for pr := range p.pairs {
		pr.abort()
	}
}

// Restore lets connections through again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// Close stops the proxy and drops every connection.
func (p *Proxy) Close() { p.lis.Close(); p.Cut() }

// chunk is what one read got from a sender.
type chunk struct {
	buf   []byte
	off   int           // delivered so far
	due   time.Time     // read time + delay
	delay time.Duration // the Delay when it was read
}

// ack returns n bytes of window credit at a time.
type ack struct {
	at time.Time
	n  int64
}

// dir is one direction of one connection: a reader goroutine that reads
// chunks from src into a queue, and a writer goroutine that delivers them
// to dst when due.
type dir struct {
	p        *Proxy
	pr       *pair
	src, dst net.Conn
	w        *wire

	mu       sync.Mutex
	q        []chunk // from qh on
	qh       int
	ended    bool  // the reader is done
	rerr     error // why
	broken   bool  // the writer is done: drop what is read
	inflight int64 // credit taken and not returned
	queued   int64 // read and not delivered
	acks     []ack // from ah on, in order of at
	ah       int

	wakeW chan struct{} // to the writer: a chunk or the end is queued
	wakeR chan struct{} // to the reader: credit returns or room freed
	dead  chan struct{} // closed when the writer is done
}

func newDir(p *Proxy, pr *pair, src, dst net.Conn, w *wire) *dir {
	return &dir{p: p, pr: pr, src: src, dst: dst, w: w,
		wakeW: make(chan struct{}, 1), wakeR: make(chan struct{}, 1), dead: make(chan struct{})}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

var bufPool = sync.Pool{New: func() any { return new([ChunkSize]byte) }}

func getBuf() []byte { return bufPool.Get().(*[ChunkSize]byte)[:] }

func putBuf(b []byte) {
	if cap(b) == ChunkSize {
		bufPool.Put((*[ChunkSize]byte)(b[:ChunkSize]))
	}
}

// read moves chunks from src to the queue while there is credit.
func (d *dir) read() {
	buf := getBuf()
	defer func() { putBuf(buf) }()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		room, ok := d.credit(timer)
		if !ok {
			d.end(nil)
			return
		}
		n, err := d.src.Read(buf[:room])
		if n > 0 {
			now := time.Now()
			delay := d.p.state.Load().Delay
			var data []byte
			if n < ChunkSize/4 {
				data = append([]byte(nil), buf[:n]...)
			} else {
				data, buf = buf[:n], getBuf()
			}
			d.push(chunk{buf: data, due: now.Add(delay), delay: delay})
		}
		if err != nil {
			d.end(err)
			return
		}
	}
}

// credit waits until the connection may read and returns how much; false
// once the writer is done or the connection dropped.
func (d *dir) credit(timer *time.Timer) (int, bool) {
	for {
		st := d.p.state.Load()
		now := time.Now()
		d.mu.Lock()
		for d.ah < len(d.acks) && !d.acks[d.ah].at.After(now) {
			d.inflight -= d.acks[d.ah].n
			d.ah++
		}
		d.acks, d.ah = compact(d.acks, d.ah)
		room := int64(ChunkSize)
		if st.Window > 0 {
			room = min(room, st.Window-d.inflight)
		}
		room = min(room, MaxQueued-d.queued)
		var next time.Time
		if d.ah < len(d.acks) {
			next = d.acks[d.ah].at
		}
		broken := d.broken
		d.mu.Unlock()
		if broken {
			return 0, false
		}
		if room > 0 {
			return int(room), true
		}
		var tc <-chan time.Time
		if !next.IsZero() {
			timer.Reset(next.Sub(now))
			tc = timer.C
		}
		select {
		case <-tc:
		case <-d.wakeR:
		case <-st.changed:
		case <-d.dead:
			timer.Stop()
			return 0, false
		case <-d.pr.kill:
			timer.Stop()
			return 0, false
		}
		timer.Stop()
	}
}

// compact drops the consumed head of a queue once it is most of it.
func compact[T any](s []T, h int) ([]T, int) {
	if h == len(s) {
		clear(s)
		return s[:0], 0
	}
	if h >= 1024 && 2*h >= len(s) {
		n := copy(s, s[h:])
		clear(s[n:])
		return s[:n], 0
	}
	return s, h
}

func (d *dir) push(c chunk) {
	n := int64(len(c.buf))
	d.mu.Lock()
	if d.broken {
		d.mu.Unlock()
		putBuf(c.buf)
		return
	}
	d.q = append(d.q, c)
	d.inflight += n
	d.queued += n
	d.mu.Unlock()
	signal(d.wakeW)
}

func (d *dir) end(err error) {
	d.mu.Lock()
	d.ended, d.rerr = true, err
	d.mu.Unlock()
	signal(d.wakeW)
}

// sleepUntil waits until t; false if the connection was dropped.
func (d *dir) sleepUntil(timer *time.Timer, t time.Time) bool {
	wait := time.Until(t)
	if wait <= 0 {
		select {
		case <-d.pr.kill:
			return false
		default:
			return true
		}
	}
	timer.Reset(wait)
	select {
	case <-timer.C:
		return true
	case <-d.pr.kill:
		timer.Stop()
		return false
	}
}

// write delivers the queued chunks to dst when due, through the link's
// bandwidth, then passes the end of stream on.
func (d *dir) write() {
	defer close(d.dead)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var bufs net.Buffers
	var done [][]byte
	for {
		d.mu.Lock()
		for d.qh == len(d.q) && !d.ended {
			d.mu.Unlock()
			select {
			case <-d.wakeW:
			case <-d.pr.kill:
				return
			}
			d.mu.Lock()
		}
		if d.qh == len(d.q) {
			err := d.rerr
			d.mu.Unlock()
			d.finish(err)
			return
		}
		first := d.q[d.qh]
		d.mu.Unlock()
		if !d.sleepUntil(timer, first.due) {
			return
		}
		bandwidth := d.p.state.Load().Bandwidth
		limit := batchMax
		if bandwidth > 0 {
			limit = int(min(max(pieceMin, bandwidth/int64(time.Second/pieceTime)), ChunkSize))
		}
		now := time.Now()
		total := 0
		bufs, done = bufs[:0], done[:0]
		d.mu.Lock()
		for d.qh < len(d.q) && total < limit {
			c := &d.q[d.qh]
			if c.due.After(now) {
				break
			}
			take := min(len(c.buf)-c.off, limit-total)
			bufs = append(bufs, c.buf[c.off:c.off+take])
			total += take
			c.off += take
			if c.off == len(c.buf) {
				done = append(done, c.buf)
				*c = chunk{}
				d.qh++
			}
		}
		d.q, d.qh = compact(d.q, d.qh)
		d.mu.Unlock()
		if bandwidth > 0 {
			if !d.sleepUntil(timer, d.w.reserve(int64(total), first.due, now, bandwidth)) {
				return
			}
		}
		vec := bufs // WriteTo reslices its receiver
		_, err := vec.WriteTo(d.dst)
		clear(bufs)
		now = time.Now()
		for i, b := range done {
			putBuf(b)
			done[i] = nil
		}
		if err != nil {
			d.mu.Lock()
			d.broken = true
			for i := d.qh; i < len(d.q); i++ {
				putBuf(d.q[i].buf)
			}
			clear(d.q)
			d.q, d.qh = d.q[:0], 0
			d.mu.Unlock()
			signal(d.wakeR)
			return
		}
		d.w.bytes.Add(int64(total))
		d.mu.Lock()
		d.queued -= int64(total)
		at := now.Add(first.delay)
		if len(d.acks) > d.ah && d.acks[len(d.acks)-1].at.After(at) {
			at = d.acks[len(d.acks)-1].at // keep them in order if the delay shrank
		}
		d.acks = append(d.acks, ack{at: at, n: int64(total)})
		d.mu.Unlock()
		signal(d.wakeR)
	}
}

// finish passes the end of the sender's stream on to dst once everything
// before it is delivered: a half-close after end of stream, a close after
// an error (a reset).
func (d *dir) finish(err error) {
	if err == nil || errors.Is(err, io.EOF) {
		if cw, ok := d.dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite() // the peer then sees end of stream; a failure leaves the close below
			return
		}
	}
	d.dst.Close()
}
