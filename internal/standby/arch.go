package standby

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/tandem-tx/tandem/internal/wal"
)

// The ARCH transport.
//
// The standby's first connection (HELLO) starts a session; WELCOME tells
// it the transport, how many connections to open and the session's id,
// which its other connections send in a JOIN. Every connection of the
// session carries whole segments: a SEGMENT frame (the primary's segment,
// its number of records, the position of the record before the first and
// of the last) followed by RECORDS frames holding exactly those records.
// The primary hands out complete segments in log order, each to a free
// connection, at most 2 × MaxConnections not yet acknowledged. The
// standby receives each segment into memory on its connection and hands
// it to one applier, which appends the segments to its log strictly in
// the primary's order (a segment is next when its "after" is the
// standby's position), one fdatasync each, and acknowledges on the first
// connection (the only one the standby writes to after the handshake).
// So the acknowledged position is always contiguous.
//
// A connection that drops: the primary hands the segments it had sent on
// it and that are not acknowledged to the next free connection (the
// standby drops a copy it already has), and the standby dials it again.
// The first connection dropping ends the session on both sides; the
// standby starts a new one from its position. RELEASE notices go on the
// first connection; the standby acts on one once its position reaches the
// notice's.

// segSend is a segment handed out in a session.
type segSend struct {
	seg         uint64
	after, last wal.Position
	n           int
}

// archSession is the primary's side of an arch standby's session; guarded
// by the Shipper's mu.
type archSession struct {
	id       uint64
	ctrl     net.Conn
	max      int // connections
	window   int // segments handed out and not acknowledged, at most
	conns    map[net.Conn]struct{}
	next     wal.Position // the last record handed out: the next segment's "after"
	inflight map[net.Conn][]segSend
	redo     []segSend // handed out on a connection that dropped; by after
	closed   bool
}

func newArchSession(ctrl net.Conn, from wal.Position, conns int) *archSession {
	return &archSession{id: rand.Uint64() | 1, ctrl: ctrl, max: conns, window: 2 * conns,
		conns: map[net.Conn]struct{}{ctrl: {}}, next: from, inflight: map[net.Conn][]segSend{}}
}

func (a *archSession) outstanding() int {
	n := len(a.redo)
	for _, l := range a.inflight {
		n += len(l)
	}
	return n
}

// ackedLocked forgets the segments the standby has.
func (a *archSession) ackedLocked(pos wal.Position) {
	have := func(x segSend) bool { return !pos.Less(x.last) }
	for c, l := range a.inflight {
		a.inflight[c] = slices.DeleteFunc(l, have)
	}
	a.redo = slices.DeleteFunc(a.redo, have)
}

// closeLocked ends the session: every connection is closed.
func (a *archSession) closeLocked() {
	if a.closed {
		return
	}
	a.closed = true
	for c := range a.conns {
		c.Close()
	}
}

// welcome is the WELCOME this primary sends; sess is the arch session a
// standby starts or joins (nil: none).
func (s *Shipper) welcome(sess *archSession) welcome {
	w := welcome{cluster: s.cfg.Identity.Cluster, epoch: s.cfg.Identity.Epoch}
	if !s.cfg.InDoubtBefore.IsZero() {
		w.inDoubtBefore = s.cfg.InDoubtBefore.UnixNano()
	}
	if !s.cfg.Identity.Born.IsZero() {
		w.born = s.cfg.Identity.Born.UnixNano()
		if !s.cfg.Identity.Made.IsZero() {
			w.made = s.cfg.Identity.Made.UnixNano()
		}
	}
	if s.cfg.Transport == Arch {
		w.transport, w.conns = wireArch, byte(s.cfg.MaxConnections)
		if sess != nil {
			w.session = sess.id
		}
	}
	return w
}

// handleJoin serves a further connection of an arch standby's session.
func (s *Shipper) handleJoin(c net.Conn, r *bufio.Reader, w *bufio.Writer, b []byte) error {
	j, err := decodeJoin(b)
	if err != nil {
		return s.refuse(c, w, err.Error())
	}
	id := s.cfg.Identity
	if j.cluster != id.Cluster || j.epoch != id.Epoch {
		return s.refuse(c, w, fmt.Sprintf("JOIN from cluster %s epoch %d: this primary is of cluster %s epoch %d", j.cluster, j.epoch, id.Cluster, id.Epoch))
	}
	s.mu.Lock()
	sess := s.arch
	switch {
	case s.cfg.Transport != Arch:
		s.mu.Unlock()
		return s.refuse(c, w, fmt.Sprintf("JOIN: this primary ships with the %s transport, not arch", s.cfg.Transport))
	case sess == nil || sess.closed || sess.id != j.session:
		s.mu.Unlock()
		return s.refuse(c, w, fmt.Sprintf("JOIN: no arch session %x here (it ended: the standby starts a new one)", j.session))
	case len(sess.conns) >= sess.max:
		s.mu.Unlock()
		return s.refuse(c, w, fmt.Sprintf("JOIN: the session has its %d connections already", sess.max))
	}
	sess.conns[c] = struct{}{}
	s.mu.Unlock()
	if err := s.sendWelcome(c, w, sess); err != nil {
		s.dropArchConn(sess, c)
		return err
	}
	return s.serveArch(c, r, w, sess, false)
}

// dropArchConn takes c out of sess: the segments it was sending and that
// the standby has not acknowledged go to the next free connection. Losing
// the first connection ends the session.
func (s *Shipper) dropArchConn(sess *archSession, c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(sess.conns, c)
	for _, x := range sess.inflight[c] {
		if s.acked.Less(x.last) {
			sess.redo = append(sess.redo, x)
		}
	}
	delete(sess.inflight, c)
	sort.Slice(sess.redo, func(i, j int) bool { return sess.redo[i].after.Less(sess.redo[j].after) })
	if c == sess.ctrl {
		sess.closeLocked()
	}
	s.notifyLocked()
}

// serveArch sends segments on c, one of sess's connections (ctrl: the
// first, which also carries the RELEASE notices and the standby's ACKs),
// until c or the session ends.
func (s *Shipper) serveArch(c net.Conn, r *bufio.Reader, w *bufio.Writer, sess *archSession, ctrl bool) error {
	defer s.dropArchConn(sess, c)
	// The standby applies segments in order: it can acknowledge at most the
	// last record handed out in the session.
	// No STATE travels on arch connections: their acknowledgements never
	// end a downgrade (promise.go; arch is refused while one is owed).
	readErr := s.startAcks(c, r, func() wal.Position { return sess.next }, func() bool { return false })
	var sentNotice uint64
	var buf []byte
	for {
		var (
			notice release
			x      segSend
			recs   []record
			ok     bool
		)
		s.mu.Lock()
		for {
			if s.closed || sess.closed {
				s.mu.Unlock()
				return nil
			}
			if ctrl && s.notice.before > sentNotice {
				notice = s.notice
				break
			}
			if x, recs, ok = s.nextSegmentLocked(sess, c); ok {
				sess.inflight[c] = append(sess.inflight[c], x)
				break
			}
			if sess.closed {
				continue
			}
			if err := s.waitChangeLocked(readErr); err != nil {
				s.mu.Unlock()
				return err
			}
		}
		s.mu.Unlock()
		if notice.before != 0 {
			if err := s.sendRelease(c, w, notice); err != nil {
				return err
			}
			sentNotice = notice.before
			continue
		}
		var err error
		if buf, err = s.sendSegment(c, w, x, recs, buf); err != nil {
			return fmt.Errorf("sending segment %d: %w", x.seg, err)
		}
	}
}

// nextSegmentLocked picks the segment c sends next: one a dropped
// connection did not deliver, else the next complete one, if the window
// allows and c holds no more than its share of it (the window divided among
// the session's connections): otherwise the first connection, whose writes
// the socket buffers absorb, could take every segment while the others
// idle. A segment to resend whose records are no longer kept (past
// MaxRetained) ends the session: the standby starts again from its
// position.
func (s *Shipper) nextSegmentLocked(sess *archSession, c net.Conn) (segSend, []record, bool) {
	if share := (sess.window + len(sess.conns) - 1) / len(sess.conns); len(sess.inflight[c]) >= share {
		return segSend{}, nil, false
	}
	for len(sess.redo) > 0 {
		x := sess.redo[0]
		sess.redo = sess.redo[1:]
		if !s.acked.Less(x.last) {
			continue
		}
		i := sort.Search(s.synced, func(i int) bool { return x.after.Less(s.recs[i].pos) })
		j := i + x.n
		if j > s.synced || s.recs[j-1].pos != x.last {
			s.log.Warn("arch: a segment to send again is no longer kept (past max-retained): the standby starts a new session from its position",
				"segment", x.seg, "standby", s.peer)
			sess.closeLocked()
			return segSend{}, nil, false
		}
		return x, slices.Clone(s.recs[i:j]), true
	}
	if sess.outstanding() >= sess.window {
		return segSend{}, nil, false
	}
	i := sort.Search(s.synced, func(i int) bool { return sess.next.Less(s.recs[i].pos) })
	if i >= s.synced {
		return segSend{}, nil, false
	}
	seg := s.recs[i].pos.Segment
	if seg >= s.durableSeg && seg >= s.first {
		return segSend{}, nil, false // the live segment: not complete yet
	}
	j := i
	for j < s.synced && s.recs[j].pos.Segment == seg {
		j++
	}
	x := segSend{seg: seg, after: sess.next, last: s.recs[j-1].pos, n: j - i}
	sess.next = x.last
	return x, slices.Clone(s.recs[i:j]), true
}

// sendSegment sends x: its SEGMENT frame, then its records in RECORDS
// frames of up to MaxSend bytes.
func (s *Shipper) sendSegment(c net.Conn, w *bufio.Writer, x segSend, recs []record, buf []byte) ([]byte, error) {
	if err := s.send(c, w, kindSegment, segHeader{seg: x.seg, after: x.after, last: x.last, n: uint32(x.n)}.encode()); err != nil {
		return buf, err
	}
	for len(recs) > 0 {
		j := frameEnd(recs, 4, s.cfg.MaxSend)
		buf = encodeRecords(buf[:0], recs[:j])
		if err := s.send(c, w, kindRecords, buf); err != nil {
			return buf, err
		}
		recs = recs[j:]
	}
	return buf, nil
}

// archSeg is a segment received whole by one of the standby's connections.
type archSeg struct {
	segHeader
	recs []record
}

// archItem is what a connection hands the applier: a segment or a notice.
type archItem struct {
	seg    *archSeg
	notice release
}

// followArch is an arch session on the standby's side, c being its first
// connection (past the handshake): it opens the others, receives on all,
// and applies the segments in order, here.
func (r *Receiver) followArch(ctx context.Context, c net.Conn, br *bufio.Reader, bw *bufio.Writer, w welcome) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	items := make(chan archItem, 4*int(w.conns))
	ctrlErr := make(chan error, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Add(1)
	go func() {
		defer wg.Done()
		ctrlErr <- r.archReceive(ctx, br, items)
		cancel()
	}()
	for range int(w.conns) - 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.archConnection(ctx, w, items)
		}()
	}
	r.addConns(1)
	defer r.addConns(-1)
	applied := r.Position()
	pending := map[wal.Position]*archSeg{}
	maxPending := 4*int(w.conns) + 4 // the primary has at most 2 × conns out
	for {
		var it archItem
		select {
		case <-ctx.Done():
			select {
			case err := <-ctrlErr:
				return err
			default:
				return ctx.Err()
			}
		case it = <-items:
		}
		if it.seg == nil {
			if err := r.noted(it.notice); err != nil {
				return err
			}
			continue
		}
		sg := it.seg
		if !applied.Less(sg.last) {
			continue // applied already (sent again after a connection dropped)
		}
		if _, dup := pending[sg.after]; dup {
			continue
		}
		if len(pending) >= maxPending {
			return fmt.Errorf("%w: %d segments received ahead of the one after %s: the primary sent more than its window", ErrProtocol, len(pending), applied)
		}
		pending[sg.after] = sg
		r.mu.Lock()
		r.maxAhead = max(r.maxAhead, len(pending)-1)
		r.mu.Unlock()
		for {
			p := pending[applied]
			if p == nil {
				break
			}
			delete(pending, applied)
			if err := r.write(p.recs, hello{cluster: w.cluster, epoch: w.epoch, pos: p.last}); err != nil {
				return err
			}
			applied = p.last
			if err := r.ack(c, bw, applied); err != nil {
				return err
			}
		}
	}
}

// archReceive reads segments (and RELEASE notices) from one connection and
// hands each whole one to the applier.
func (r *Receiver) archReceive(ctx context.Context, br *bufio.Reader, items chan<- archItem) error {
	var cur *archSeg
	var prev wal.Position
	for {
		kind, b, err := readFrame(br, nil, kindsOf(kindSegment, kindRecords, kindRelease)) // a new buffer: the records alias it until applied
		if err != nil {
			return err
		}
		var it archItem
		switch kind {
		case kindSegment:
			if cur != nil {
				return fmt.Errorf("%w: SEGMENT while %d of segment %d's %d records are missing", ErrProtocol, int(cur.n)-len(cur.recs), cur.seg, cur.n)
			}
			h, err := decodeSegHeader(b)
			if err != nil {
				return err
			}
			// The count is bounded by decodeSegHeader; the records are
			// held only as they arrive.
			cur, prev = &archSeg{segHeader: h, recs: make([]record, 0, min(h.n, 1024))}, h.after
			continue
		case kindRecords:
			if cur == nil {
				return fmt.Errorf("%w: RECORDS outside a segment (arch transport)", ErrProtocol)
			}
			recs, err := decodeRecords(b, prev)
			if err != nil {
				return err
			}
			if n := len(recs); n > 0 && recs[n-1].pos.Segment != cur.seg {
				return fmt.Errorf("%w: segment %d holds a record at %s", ErrProtocol, cur.seg, recs[n-1].pos)
			}
			if len(cur.recs)+len(recs) > int(cur.n) {
				return fmt.Errorf("%w: segment %d has more records than the %d announced", ErrProtocol, cur.seg, cur.n)
			}
			cur.recs = append(cur.recs, recs...)
			if len(recs) > 0 {
				prev = recs[len(recs)-1].pos
			}
			if len(cur.recs) < int(cur.n) {
				continue
			}
			if prev != cur.last {
				return fmt.Errorf("%w: segment %d ends at %s, announced %s", ErrProtocol, cur.seg, prev, cur.last)
			}
			it.seg, cur = cur, nil
		case kindRelease:
			n, err := decodeRelease(b)
			if err != nil {
				return err
			}
			it.notice = n
		default:
			return fmt.Errorf("%w: a kind %d frame in an arch stream", ErrProtocol, kind)
		}
		select {
		case items <- it:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// archConnection keeps one further connection of the session open: it
// dials, JOINs and receives, again after a failure, until the session
// ends.
func (r *Receiver) archConnection(ctx context.Context, w welcome, items chan<- archItem) {
	redial(ctx, func(ctx context.Context) error { return r.archJoin(ctx, w, items) }, func(err error) {
		r.cfg.Logger.Warn("standby: an arch connection to the primary failed; dialling again (what it was receiving is sent again)", "primary", r.cfg.Primary, "error", err)
	})
}

func (r *Receiver) archJoin(ctx context.Context, w welcome, items chan<- archItem) error {
	c, err := r.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	br, _, w2, err := r.handshake(c, kindJoin, join{cluster: w.cluster, epoch: w.epoch, session: w.session}.encode())
	if err != nil {
		return err
	}
	if w2.cluster != w.cluster || w2.epoch != w.epoch || w2.session != w.session {
		return fmt.Errorf("%w: the primary answered a JOIN to session %x of epoch %d with session %x of epoch %d", ErrProtocol, w.session, w.epoch, w2.session, w2.epoch)
	}
	_ = c.SetDeadline(time.Time{})
	r.addConns(1)
	defer r.addConns(-1)
	return r.archReceive(ctx, br, items)
}
