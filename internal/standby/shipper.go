package standby

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tandem-tx/tandem/internal/failpoint"
	"github.com/tandem-tx/tandem/internal/setting"
	"github.com/tandem-tx/tandem/internal/wal"
	"github.com/tandem-tx/tandem/waits"
)

// Transport says how the primary ships its log.
type Transport string

const (
	// Sync ships every flush as it happens and the primary's Appends
	// return only once the standby has it on disk (AFFIRM): one standby
	// round trip per group commit.
	Sync Transport = "sync"
	// Async runs the stream behind the writer and never delays a commit.
	Async Transport = "async"
	// Arch ships only completed segments: the records of a segment go once
	// the primary's log has a durable record in a later segment (or has
	// released the segment), over up to MaxConnections parallel
	// connections that the standby opens, each carrying whole segments;
	// the standby applies them strictly in order. It never delays a
	// commit, and its exposure is the live segment: a primary that writes
	// little keeps its latest decisions to itself until its segment fills
	// (Status shows the lag in bytes and seconds). It is the transport for
	// catching up a long, fat link (the Data Guard report: five
	// connections cut a 1 GB ship from 80 s to 37 s).
	Arch Transport = "arch"
)

// Protection is the Data Guard protection mode.
type Protection string

const (
	// MaxPerformance is the async transport: commits never wait for the standby.
	MaxPerformance Protection = "max-performance"
	// MaxAvailability is sync, but after NetTimeout without the standby's
	// acknowledgement commits carry on unprotected (loudly), and the
	// shipper returns to sync by itself once the standby has caught up.
	MaxAvailability Protection = "max-availability"
	// MaxProtection is sync, and commits stall rather than be acknowledged
	// before the standby has them.
	MaxProtection Protection = "max-protection"
)

// ParseMode checks a transport and protection pair; empty values take the
// defaults (max-performance, whose transport is async; sync for the other
// two).
func ParseMode(transport, protection string) (Transport, Protection, error) {
	p := Protection(protection)
	switch p {
	case "":
		p = MaxPerformance
		if transport == string(Sync) {
			p = MaxAvailability
		}
	case MaxPerformance, MaxAvailability, MaxProtection:
	default:
		return "", "", fmt.Errorf("standby: unknown protection mode %q: use max-performance, max-availability or max-protection", protection)
	}
	t := Transport(transport)
	switch t {
	case "":
		t = Sync
		if p == MaxPerformance {
			t = Async
		}
	case Sync, Async, Arch:
	default:
		return "", "", fmt.Errorf("standby: unknown transport %q: use sync or async, or arch (completed segments only)", transport)
	}
	if (t == Async || t == Arch) && p != MaxPerformance {
		return "", "", fmt.Errorf("standby: protection %s needs transport sync (%s never waits for the standby)", p, t)
	}
	if t == Sync && p == MaxPerformance {
		return "", "", errors.New("standby: protection max-performance never waits for the standby: with it use transport async or arch; with transport sync use protection max-availability or max-protection")
	}
	return t, p, nil
}

// ShipperConfig configures a primary's Shipper.
type ShipperConfig struct {
	// Listen is the address standbys connect to (--standby-listen).
	Listen     string
	Transport  Transport
	Protection Protection
	// NetTimeout: under max-availability, how long a flush waits for the
	// standby before the primary goes on unprotected; also the deadline of
	// a connection's handshake (authentication and HELLO) and of every
	// write to it (default 10s).
	NetTimeout time.Duration
	// DrainTimeout: how long Close waits for a connected sync or async
	// standby to acknowledge every record and take the final STATE, so
	// that it can be promoted without --accept-data-loss after a clean
	// stop (default DefaultDrainTimeout; never less than NetTimeout). A
	// stop is not the moment to give up on a link that is merely slow.
	DrainTimeout time.Duration
	Identity     Identity
	// MaxRetained bounds the bytes of records of released segments kept in
	// memory for a standby that has not acknowledged them (default 64 MiB).
	// Records of live segments are always kept; the live segments are at
	// most the coordinator's log size (its admission control refuses
	// commits past 90% of it), so the shipper's copy is bounded by log
	// size + MaxRetained, standby or not.
	MaxRetained int64
	// MaxSend is the largest RECORDS frame payload the shipper builds, in
	// bytes: a catching-up standby gets its backlog in frames of about
	// this size (a frame holds at least one record, whatever its size).
	// Default DefaultMaxSend (1 MiB); at most MaxFrame. Larger sends cut
	// the per-send overhead on a long link (the Data Guard report: 10 MB
	// sends instead of 1 MB took a 1 GB ship at 100 ms RTT from 264 s to
	// 102 s); the standby writes each frame with one fdatasync and holds
	// one in memory per connection.
	MaxSend int
	// MaxConnections: under the arch transport, the number of parallel
	// connections the standby opens (it learns it from WELCOME), each
	// carrying whole segments (default 1, at most MaxArchConnections).
	// The standby holds up to 2 × MaxConnections segments in memory while
	// it applies them in order. Ignored by sync and async.
	MaxConnections int
	// ArchLag: under the arch transport, how long a decision waits for its
	// segment to complete before the shipper asks the primary's log to
	// switch segments (SetSwitcher), so that phase 2 waits about this long
	// for an arch standby instead of until the segment fills (default 1s).
	ArchLag time.Duration
	// InDoubtBefore is the primary's in-doubt boundary
	// (coord.Options.InDoubtBefore; zero: none). Every standby is told in
	// WELCOME and keeps it, so that its own promotion inherits it.
	InDoubtBefore time.Time
	// NetOptions: socket buffers and TCP_NODELAY of standby connections
	// (set on the listener, so every accepted connection has them).
	NetOptions
	// Auth authenticates every connection before anything is sent (see the
	// package doc); nil or empty is allowed on a loopback Listen only.
	Auth *Auth
	// Dir is the primary's data directory, where it notes that it told a
	// standby it runs max-protection (MaxProtectionPromiseFile). Empty:
	// nothing is noted (tests, the bench's in-process primaries).
	Dir    string
	Logger *slog.Logger
	// Waits receives the shipper's "standby sync ack" waits: the primary
	// coordinator's registry (coord.Coordinator.Waits). Nil: a new one.
	Waits *waits.Registry
	// OnFenced, when set, is called when a peer of this cluster that
	// authenticated reports a newer epoch: another coordinator may have
	// been promoted, and this primary must check (--peer) and stop deciding
	// and settling. It runs in a goroutine of its own, one call at a time:
	// claims that arrive while it runs are dropped (a flood of claims costs
	// one check). err wraps ErrFenced and names the peer.
	OnFenced func(err error)
}

// Shipper is the primary's side: it keeps the records a standby may still
// need, serves standbys on a listener and, under the sync transport, holds
// each flush until the standby has it. It implements coord.LogHook.
type Shipper struct {
	cfg  ShipperConfig
	lis  net.Listener
	gate *gate
	log  *slog.Logger
	// fencing: a claim of a newer epoch is being handed to OnFenced; more
	// claims meanwhile are dropped (coalesced).
	fencing atomic.Bool

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced at every change below
	recs     []record      // retained, in log order
	recBytes int64
	synced   int          // recs[:synced] are durable on the primary
	last     wal.Position // the last durable record on the primary
	first    uint64       // first live segment (Released)
	notice   release      // the latest Released, for the standby (before 0: none)
	// durableSeg: the segment of the last durable record of any type; under
	// arch, the segments before it are complete.
	durableSeg uint64
	arch       *archSession // the arch standby's session, nil when none
	acked      wal.Position // the standby's durable position, highest seen
	ackedAt    time.Time
	conn       net.Conn // the standby's connection, nil when none
	peer       string
	// unprotected: the primary went on without the standby (max-availability
	// or max-performance after the net timeout).
	unprotected bool
	// caughtUp: the connected standby has acknowledged every record durable
	// at some point since it connected (with sync and protected, it then
	// holds every decision acted on from there on).
	caughtUp bool
	// downgrading: this primary's data directory told a standby it runs
	// max-protection, and it now runs a weaker mode that no standby has
	// acknowledged hearing: until one does, every wait for the standby is
	// max-protection's (no net timeout, never unprotected), in every
	// transport (MaxProtectionPromiseFile).
	downgrading bool
	// promiseMu orders the promise's writing and removal; promiseKept (under
	// it): the max-protection promise is on disk (keepPromise).
	promiseMu   sync.Mutex
	promiseKept bool
	// closing: Close asks the connection's sender for a final STATE.
	closing   bool
	finalSent bool      // the final STATE went out
	since     time.Time // when unprotected began
	closed    bool
	started   time.Time
	// switcher closes the primary's current log segment (arch's bounded
	// lag); switching: one is running.
	switcher  func() error
	switching bool
}

// NewShipper checks cfg and listens; call Serve to accept standbys.
func NewShipper(cfg ShipperConfig) (*Shipper, error) {
	if cfg.NetTimeout <= 0 {
		cfg.NetTimeout = DefaultNetTimeout
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = DefaultDrainTimeout
	}
	cfg.DrainTimeout = max(cfg.DrainTimeout, cfg.NetTimeout)
	if cfg.ArchLag <= 0 {
		cfg.ArchLag = time.Second
	}
	if cfg.MaxRetained <= 0 {
		cfg.MaxRetained = 64 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Waits == nil {
		cfg.Waits = waits.NewRegistry(waits.SideCoordinator)
	}
	if cfg.Identity.Cluster.IsZero() || cfg.Identity.Epoch == 0 {
		return nil, errors.New("standby: the shipper needs the primary's cluster identity")
	}
	switch {
	case cfg.MaxSend == 0:
		cfg.MaxSend = DefaultMaxSend
	case cfg.MaxSend < 0 || cfg.MaxSend > MaxFrame:
		return nil, fmt.Errorf("standby: MaxSend %d: a RECORDS frame must be between 1 byte and MaxFrame (%d)", cfg.MaxSend, MaxFrame)
	}
	switch {
	case cfg.MaxConnections == 0:
		cfg.MaxConnections = 1
	case cfg.MaxConnections < 0 || cfg.MaxConnections > MaxArchConnections:
		return nil, fmt.Errorf("standby: MaxConnections %d: use 1 to %d", cfg.MaxConnections, MaxArchConnections)
	}
	if err := cfg.NetOptions.check("shipper"); err != nil {
		return nil, err
	}
	if err := CheckExposure(setting.StandbyListen, cfg.Listen, cfg.Auth); err != nil {
		return nil, err
	}
	lc := net.ListenConfig{Control: socketControl(cfg.SendBuffer, cfg.ReceiveBuffer)}
	lis, err := lc.Listen(context.Background(), "tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("standby: listen for standbys on %s: %w", cfg.Listen, err)
	}
	s := &Shipper{cfg: cfg, lis: lis, log: cfg.Logger, changed: make(chan struct{}), started: time.Now()}
	if err := s.notePromise(); err != nil {
		lis.Close()
		return nil, err
	}
	s.gate = newGate(lis, cfg.Auth, cfg.NetTimeout, kindsOf(kindHello, kindJoin, kindProbe), cfg.Logger, "standby listener")
	go s.gate.serve(s.handle)
	return s, nil
}

// Addr is the address standbys connect to.
func (s *Shipper) Addr() string { return s.lis.Addr().String() }

func (s *Shipper) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Replayed keeps a record replayed at the primary's start: a standby may
// need it.
func (s *Shipper) Replayed(pos wal.Position, typ wal.Type, payload []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.first == 0 {
		s.first = pos.Segment
	}
	s.durableSeg = max(s.durableSeg, pos.Segment)
	if s.keepLocked(pos, typ, payload, time.Time{}) {
		s.synced = len(s.recs)
		s.last = pos
	}
}

// keepLocked keeps a record for the standby and reports whether it did.
// MARK records are never kept, so never shipped: a promoted standby's log
// holds its own MARKs (the old primary's positions), which a standby of the
// new primary must not take for its own. s.last is therefore always the
// position of a shipped record, one a standby can acknowledge.
func (s *Shipper) keepLocked(pos wal.Position, typ wal.Type, payload []byte, at time.Time) bool {
	if typ == RecMark {
		return false
	}
	if n := len(s.recs); n > 0 && !s.recs[n-1].pos.Less(pos) {
		return false // replayed again after a crash in Release: already kept
	}
	s.recs = append(s.recs, record{pos: pos, typ: typ, payload: append([]byte(nil), payload...), at: at})
	s.recBytes += int64(len(payload) + 32)
	return true
}

// Written is wal.Options.OnWrite: it keeps the batch's records and, under
// the sync transport, returns only once the standby has them on disk (or,
// under max-availability, once NetTimeout has passed without it).
func (s *Shipper) Written(recs []wal.Written, synced bool) {
	now := time.Now()
	s.mu.Lock()
	for _, r := range recs {
		s.keepLocked(r.Pos, r.Type, r.Payload, now)
	}
	if !synced {
		s.mu.Unlock()
		return
	}
	s.synced = len(s.recs)
	if len(s.recs) > 0 {
		s.last = s.recs[len(s.recs)-1].pos
	}
	if n := len(recs); n > 0 {
		s.durableSeg = max(s.durableSeg, recs[n-1].Pos.Segment)
	}
	s.notifyLocked()
	target := s.last
	if (s.cfg.Transport != Sync && !s.downgrading) || s.unprotected || s.closed || !s.acked.Less(target) {
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	start := time.Now()
	_ = s.waitAck(context.Background(), target) // closed: Halt already stopped the coordinator
	s.cfg.Waits.Since(waits.StandbySyncAck, start)
}

// ErrShipperClosed means the shipper was closed while a decision waited for the
// standby; the decision must not be acted on by this primary.
var ErrShipperClosed = errors.New("standby: the shipper is closed")

// WaitStandby implements coord.StandbyWaiter: it returns once the standby
// has acknowledged every record durable in the primary's log at the call,
// in every transport. Under max-protection it waits for as long as that
// takes (or ctx); under max-availability and max-performance (async,
// arch) it waits up to NetTimeout and then lets the primary go on without
// the standby: the shipper is then unprotected (not synchronized) until the
// standby has caught up, and a standby promoted meanwhile may lack
// decisions this primary acted on (it refuses promotion without
// --accept-data-loss). It fails with ErrShipperClosed once the shipper is
// closed, or with ctx's error.
func (s *Shipper) WaitStandby(ctx context.Context) error {
	s.mu.Lock()
	target, closed, done := s.last, s.closed, !s.acked.Less(s.last) || s.unprotected
	s.mu.Unlock()
	switch {
	case closed:
		return ErrShipperClosed
	case done:
		return nil
	}
	return s.waitAck(ctx, target)
}

// Synchronous reports whether a decision durable in the primary's log is
// on the standby already (sync transport, protected): a take-over of the
// client's branches would gain nothing (coord.takeOverWhileStandbyLags).
func (s *Shipper) Synchronous() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg.Transport == Sync && !s.unprotected
}

// waitAck waits until the standby has target, per the protection mode: nil
// once it has, or once the primary goes on unprotected; ErrShipperClosed
// or ctx's error otherwise.
func (s *Shipper) waitAck(ctx context.Context, target wal.Position) error {
	var timeout, warn, lag <-chan time.Time
	if s.cfg.Transport == Arch {
		t := time.NewTicker(s.cfg.ArchLag)
		defer t.Stop()
		lag = t.C
	}
	// Max-protection waits for as long as it takes (warning every net
	// timeout); a primary downgrading from it too, until a standby has
	// heard the new mode: from then on the net timeout runs (rechecked at
	// every change). One timer or ticker per wait, as before downgrades.
	var tm *time.Timer
	var tk *time.Ticker
	defer func() {
		if tm != nil {
			tm.Stop()
		}
		if tk != nil {
			tk.Stop()
		}
	}()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.protectionLocked() == MaxProtection {
		tk = time.NewTicker(s.cfg.NetTimeout)
		warn = tk.C
	}
	for s.acked.Less(target) && !s.closed && !s.unprotected {
		if tm == nil && s.protectionLocked() != MaxProtection {
			tm = time.NewTimer(s.cfg.NetTimeout)
			timeout, warn = tm.C, nil
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			s.mu.Lock()
			return ctx.Err()
		case <-timeout:
			s.mu.Lock()
			if s.acked.Less(target) && !s.unprotected {
				s.unprotected, s.since = true, time.Now()
				s.log.Error("STANDBY UNPROTECTED: no acknowledgement from the standby within the net timeout; the primary carries on without it: decisions acknowledged or acted on (phase 2) from now on are not on the standby until it catches up, and promoting it then needs --accept-data-loss",
					"transport", s.cfg.Transport, "protection", s.cfg.Protection, "net_timeout", s.cfg.NetTimeout, "standby", s.peerLocked(), "standby_at", s.acked.String(), "primary_at", target.String())
				s.notifyLocked()
			}
			s.mu.Unlock()
		case <-lag:
			s.mu.Lock()
			s.switchLocked(target)
			s.mu.Unlock()
		case <-warn:
			s.mu.Lock()
			s.log.Error("decisions stalled: max-protection waits for the standby, which has not acknowledged",
				"standby", s.peerLocked(), "standby_at", s.acked.String(), "primary_at", target.String())
			s.mu.Unlock()
		}
		s.mu.Lock()
	}
	if s.acked.Less(target) && s.closed {
		return ErrShipperClosed
	}
	return nil
}

// stateLocked is the STATE to tell the standby: synchronized only when it
// holds every decision this primary acts on (see syncstate.go); final once
// closing and the standby has every record (under closing, -1 until then:
// the records go first).
func (s *Shipper) stateLocked() int {
	st := 0
	if s.cfg.Protection == MaxProtection {
		st |= stateMaxProtection
	}
	all := !s.acked.Less(s.last)
	if s.closing {
		if all {
			return st | stateFinal | stateSynchronized
		}
		return -1
	}
	if s.cfg.Transport == Sync && !s.unprotected && s.caughtUp {
		st |= stateSynchronized
	}
	return st
}

// SetSwitcher gives the shipper the primary's way to close its current log
// segment (the coordinator's SwitchLogSegment): under the arch transport, a
// decision that has waited ArchLag for its segment to complete makes the
// shipper call it (one call at a time), so the segment is shipped.
func (s *Shipper) SetSwitcher(f func() error) {
	s.mu.Lock()
	s.switcher = f
	s.mu.Unlock()
}

// switchLocked starts a segment switch if target's segment is still the
// live one and none is running.
func (s *Shipper) switchLocked(target wal.Position) {
	if s.switcher == nil || s.switching || target.Segment < s.durableSeg || s.closed {
		return
	}
	s.switching = true
	f := s.switcher
	go func() {
		err := f()
		s.mu.Lock()
		s.switching = false
		s.mu.Unlock()
		if err != nil {
			s.log.Warn("arch: could not switch the log segment to ship a waiting decision", "error", err)
		}
	}()
}

func (s *Shipper) peerLocked() string {
	if s.conn == nil {
		return "none connected"
	}
	return s.peer
}

// Released drops kept records of segments below before that the standby has
// (or, past MaxRetained, that it has not: it then gets the live segments,
// which hold the whole state).
//
// It also tells the standby (a RELEASE notice, after the records up to the
// last durable one, which include the checkpoint's carried copies) so that
// it releases its own copies of those segments.
func (s *Shipper) Released(before uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.first = max(s.first, before)
	if before > s.notice.before {
		s.notice = release{before: before, at: s.last}
		s.notifyLocked()
	}
	s.pruneLocked()
}

func (s *Shipper) pruneLocked() {
	i := 0
	bytes := s.recBytes
	for i < s.synced && s.recs[i].pos.Segment < s.first {
		if s.acked.Less(s.recs[i].pos) && bytes <= s.cfg.MaxRetained {
			break
		}
		bytes -= int64(len(s.recs[i].payload) + 32)
		i++
	}
	if i == 0 {
		return
	}
	clear(s.recs[:i])
	s.recs = s.recs[i:]
	s.synced -= i
	s.recBytes = bytes
}

// Close stops serving standbys and releases every flush waiting for one.
//
// A connected sync or async standby first gets up to DrainTimeout to
// acknowledge every record, then a final STATE saying it holds them all
// (the coordinator was halted or closed before: nothing more is acted on),
// so that it can be promoted without --accept-data-loss after a clean stop
// of its primary. Past DrainTimeout the standby is left without it, and
// the log says so.
func (s *Shipper) Close() error {
	s.mu.Lock()
	if s.conn != nil && s.arch == nil && !s.closed {
		s.closing = true
		s.notifyLocked()
		if s.acked.Less(s.last) {
			s.log.Info("stopping: waiting for the standby to acknowledge the last records before the final STATE",
				"standby", s.peerLocked(), "standby_at", s.acked.String(), "primary_at", s.last.String(), "drain_timeout", s.cfg.DrainTimeout)
		}
		deadline := time.NewTimer(s.cfg.DrainTimeout)
		for s.conn != nil && !s.finalSent {
			ch := s.changed
			s.mu.Unlock()
			timedOut := false
			select {
			case <-ch:
			case <-deadline.C:
				timedOut = true
			}
			s.mu.Lock()
			if timedOut {
				break
			}
		}
		deadline.Stop()
		if s.conn != nil && !s.finalSent {
			s.log.Warn("stopped without the standby acknowledging every record: promoting it will need --accept-data-loss (restart this primary instead to lose nothing)",
				"standby", s.peerLocked(), "standby_at", s.acked.String(), "primary_at", s.last.String(), "drain_timeout", s.cfg.DrainTimeout)
		}
	}
	s.closed = true
	if s.conn != nil {
		s.conn.Close()
	}
	s.notifyLocked()
	s.mu.Unlock()
	return s.gate.close()
}

func (s *Shipper) refuse(c net.Conn, w *bufio.Writer, msg string) error {
	_ = s.send(c, w, kindRefuse, []byte(truncate(msg, maxRefuse)))
	return errors.New("refused the standby: " + msg)
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// fenced hands an authenticated claim of a newer epoch to OnFenced, in its
// own goroutine (it may close this shipper), unless one is being handled:
// a flood of claims costs one check at a time.
func (s *Shipper) fenced(err error) {
	if s.cfg.OnFenced == nil || !s.fencing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer s.fencing.Store(false)
		s.cfg.OnFenced(err)
	}()
}

// handle serves one authenticated standby connection, from its opening
// frame (HELLO, JOIN or PROBE): the handshake (checkHello), then, for a
// HELLO, register and the send loop (sendLoop, or serveArch under the arch
// transport).
func (s *Shipper) handle(o opening) error {
	c, r := o.c, o.r
	s.cfg.NetOptions.tune(c)
	w := bufio.NewWriterSize(c, 256<<10)
	switch o.kind {
	case kindJoin:
		return s.handleJoin(c, r, w, o.payload)
	case kindHello, kindProbe:
	default:
		return s.refuse(c, w, fmt.Sprintf("expected HELLO, got a kind %d frame", o.kind))
	}
	probe := o.kind == kindProbe
	h, last, err := s.checkHello(c, w, o.payload, probe)
	if err != nil {
		return err
	}
	if probe {
		return s.send(c, w, kindWelcome, s.welcome(nil).encode())
	}
	sess, ok, err := s.register(c, w, h, last)
	if !ok {
		return err
	}
	defer s.unregister(c, sess)
	if sess != nil {
		return s.serveArch(c, r, w, sess, true)
	}
	return s.sendLoop(c, r, w, h.pos)
}

// checkHello decodes a HELLO (or PROBE) and refuses a peer this primary
// must not serve: one of another cluster, or of a newer epoch (this
// primary is then fenced: OnFenced), and, unless probe, one whose log is
// of an older primary or reaches past this primary's last durable record
// (last, which it returns).
func (s *Shipper) checkHello(c net.Conn, w *bufio.Writer, b []byte, probe bool) (hello, wal.Position, error) {
	h, err := decodeHello(b)
	if err != nil {
		return h, wal.Position{}, s.refuse(c, w, err.Error())
	}
	id := s.cfg.Identity
	if !h.cluster.IsZero() && h.cluster != id.Cluster {
		return h, wal.Position{}, s.refuse(c, w, fmt.Sprintf("the standby belongs to cluster %s, this primary (%s) to cluster %s: to follow this primary it must be re-seeded (stop it, run %q on its data directory, start it again with --standby-of %s)",
			h.cluster, s.Addr(), id.Cluster, ReseedCommand(""), s.Addr()))
	}
	if h.epoch > id.Epoch {
		s.log.Error("FENCED: a peer reports a newer epoch: another coordinator was promoted since this one became primary; this primary is superseded",
			"standby", c.RemoteAddr().String(), "standby_epoch", h.epoch, "epoch", id.Epoch)
		if h.cluster == id.Cluster {
			s.fenced(fmt.Errorf("%w: a coordinator of cluster %s at epoch %d (connected from %s) was promoted since this primary took epoch %d: this coordinator must not decide or settle anything; re-seed it as a standby of the new primary (tandem reseed, then tandem serve --standby-of)",
				ErrFenced, id.Cluster, h.epoch, c.RemoteAddr(), id.Epoch))
		}
		return h, wal.Position{}, s.refuse(c, w, fmt.Sprintf("the standby is at epoch %d, this primary at epoch %d: it follows a newer primary", h.epoch, id.Epoch))
	}
	if probe {
		return h, wal.Position{}, nil
	}
	if h.epoch < id.Epoch && h.pos != (wal.Position{}) {
		// Its position is one of an older primary's log, unrelated to this
		// one's (a promoted coordinator's positions are its own).
		return h, wal.Position{}, s.refuse(c, w, fmt.Sprintf("the standby is at epoch %d and its log holds records up to %s of an older primary's log; this primary (%s) is at epoch %d and its positions are unrelated: to follow it, the standby must be re-seeded (stop it, run %q on its data directory, start it again with --standby-of %s)",
			h.epoch, h.pos, s.Addr(), id.Epoch, ReseedCommand(""), s.Addr()))
	}
	s.mu.Lock()
	last := s.last
	s.mu.Unlock()
	if last.Less(h.pos) {
		return h, last, s.refuse(c, w, fmt.Sprintf("the standby's log reaches %s, past this primary's last durable record %s: it holds records this primary does not (it diverged): it must be re-seeded (stop it, run %q on its data directory, start it again with --standby-of %s)",
			h.pos, last, ReseedCommand(""), s.Addr()))
	}
	return h, last, nil
}

// register welcomes the standby that sent h and makes c the standby's
// connection (and its arch session, returned, the one being served; nil
// under sync and async), replacing a previous one. ok false: c is not
// registered (the WELCOME failed: err; or the shipper is closed: nil).
// After ok, the caller must unregister.
func (s *Shipper) register(c net.Conn, w *bufio.Writer, h hello, last wal.Position) (sess *archSession, ok bool, err error) {
	if s.cfg.Transport == Arch {
		sess = newArchSession(c, h.pos, s.cfg.MaxConnections)
	}
	if err := s.sendWelcome(c, w, sess); err != nil {
		return nil, false, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, false, nil
	}
	if s.conn != nil {
		s.conn.Close() // a standby reconnecting: the old connection is dead
	}
	if s.arch != nil {
		s.arch.closeLocked() // and so are the old session's others
	}
	s.arch = sess
	s.conn, s.peer = c, c.RemoteAddr().String()
	// What this standby has is what it says, even below what an earlier
	// one acknowledged (a re-seeded or other standby): lag, exposure and a
	// switchover's handover must count what the connected standby lacks.
	// (The same standby never reports less than it acknowledged: it
	// acknowledges only what is durable in its log.)
	s.acked = h.pos
	s.caughtUp = !s.acked.Less(s.last)
	s.notifyLocked()
	s.mu.Unlock()
	s.log.Info("standby connected", "standby", c.RemoteAddr().String(), "standby_at", h.pos.String(), "primary_at", last.String(),
		"transport", s.cfg.Transport, "protection", s.cfg.Protection)
	return sess, true, nil
}

// unregister ends what register began: c is no longer the standby's
// connection (unless another replaced it), and sess is closed.
func (s *Shipper) unregister(c net.Conn, sess *archSession) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == c {
		s.conn = nil
		s.notifyLocked()
	}
	if sess != nil {
		sess.closeLocked()
		if s.arch == sess {
			s.arch = nil
		}
	}
}

// streamOut is what sendLoop has sent on one sync or async connection.
type streamOut struct {
	// sent: the last record handed to the connection, under s.mu (the
	// acknowledgement reader refuses anything past it).
	sent       wal.Position
	sentNotice uint64 // the last RELEASE notice sent: its before
	sentState  int    // the last STATE sent (-1: none)
	// stated: a STATE went out on this connection, before any record sent
	// after it (readAcks: what a downgrade needs the standby to have heard).
	stated atomic.Bool
}

// nextOut is what sendLoop sends next: a STATE (state >= 0), a RELEASE
// notice (notice.before != 0) or a batch of records.
type nextOut struct {
	state  int
	notice release
	batch  []record
}

// sendLoop streams the log to the registered sync or async standby on c,
// from position from, until c or the shipper ends.
func (s *Shipper) sendLoop(c net.Conn, r *bufio.Reader, w *bufio.Writer, from wal.Position) error {
	out := &streamOut{sent: from, sentState: -1}
	readErr := s.startAcks(c, r, func() wal.Position { return out.sent }, out.stated.Load)
	var buf []byte
	var batch []record
	for {
		next, done, err := s.nextOut(c, out, batch[:0], readErr)
		if done || err != nil {
			return err
		}
		switch {
		case next.state >= 0:
			if next.state&stateMaxProtection != 0 {
				// Noted before any standby can hear it (promise.go).
				if err := s.keepPromise(); err != nil {
					return fmt.Errorf("noting the max-protection promise before the first STATE: %w", err)
				}
			}
			if err := s.send(c, w, kindState, []byte{byte(next.state)}); err != nil {
				return fmt.Errorf("sending STATE: %w", err)
			}
			out.sentState = next.state
			out.stated.Store(true)
			if next.state&stateFinal != 0 {
				s.mu.Lock()
				s.finalSent = true
				s.notifyLocked()
				s.mu.Unlock()
			}
		case next.notice.before != 0:
			if err := s.sendRelease(c, w, next.notice); err != nil {
				return err
			}
			out.sentNotice = next.notice.before
		default:
			batch = next.batch
			buf = encodeRecords(buf[:0], batch)
			_ = failpoint.Inject("standby-before-ship") // kill or sleep: records durable here, not yet sent
			if err := s.send(c, w, kindRecords, buf); err != nil {
				return fmt.Errorf("sending records: %w", err)
			}
		}
	}
}

// nextOut waits for what c's standby needs next, in this order: a changed
// STATE, a RELEASE notice it has the records for, and the durable records
// it has not been sent (up to MaxSend bytes, appended to batch; counted as
// sent here). done: c is no longer the standby's connection or the shipper
// is closed; err: the acknowledgement reader failed.
func (s *Shipper) nextOut(c net.Conn, out *streamOut, batch []record, readErr <-chan error) (next nextOut, done bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	next.state = -1
	for {
		if s.closed || s.conn != c {
			return next, true, nil
		}
		if st := s.stateLocked(); st >= 0 && st != out.sentState {
			next.state = st
			return next, false, nil
		}
		if n := s.notice; n.before > out.sentNotice && !out.sent.Less(n.at) {
			next.notice = n
			return next, false, nil
		}
		i := sort.Search(s.synced, func(i int) bool { return out.sent.Less(s.recs[i].pos) })
		if i < s.synced {
			j := i + frameEnd(s.recs[i:s.synced], 0, s.cfg.MaxSend)
			next.batch = append(batch, s.recs[i:j]...) //nolint:gocritic // batch is next.batch emptied: its array reused; payloads are never modified
			// Counted as sent before it is written: the standby's ACK may
			// come back before this goroutine runs again.
			out.sent = next.batch[len(next.batch)-1].pos
			return next, false, nil
		}
		if err := s.waitChangeLocked(readErr); err != nil {
			return next, false, err
		}
	}
}

// frameEnd is how many of recs (at least one) the next RECORDS frame
// carries: as many as fit in max bytes, counting from size.
func frameEnd(recs []record, size, max int) int {
	j := 0
	for j < len(recs) {
		n := len(recs[j].payload) + recordHeader
		if j > 0 && size+n > max {
			break
		}
		size += n
		j++
	}
	return j
}

// recordHeader is a record's size in a RECORDS frame besides its payload:
// position (16 bytes), type (1) and length (4).
const recordHeader = 21

// startAcks reads c's acknowledgements (readAcks) in a goroutine of its
// own, whose error the returned channel delivers once it ends.
func (s *Shipper) startAcks(c net.Conn, r *bufio.Reader, sent func() wal.Position, stated func() bool) <-chan error {
	readErr := make(chan error, 1)
	go func() { readErr <- s.readAcks(c, r, sent, stated) }()
	return readErr
}

// send writes one frame to c within the net timeout.
func (s *Shipper) send(c net.Conn, w *bufio.Writer, kind byte, payload []byte) error {
	_ = c.SetWriteDeadline(time.Now().Add(s.cfg.NetTimeout))
	return writeFrame(w, kind, payload)
}

// sendWelcome answers a standby's HELLO or JOIN: no read deadline from here
// on (the standby may be idle), and the WELCOME of sess (nil: none).
func (s *Shipper) sendWelcome(c net.Conn, w *bufio.Writer, sess *archSession) error {
	_ = c.SetReadDeadline(time.Time{})
	return s.send(c, w, kindWelcome, s.welcome(sess).encode())
}

// readAcks takes the standby's acknowledgements on c until it fails. An
// ACK past sent() (called under s.mu: the last record handed to the
// standby) is refused and ends the connection: no standby can have it, and
// taking it would let max-protection acknowledge decisions no standby
// holds.
func (s *Shipper) readAcks(c net.Conn, r *bufio.Reader, sent func() wal.Position, stated func() bool) error {
	var buf []byte
	for {
		kind, b, err := readFrame(r, buf, kindsOf(kindAck))
		if err != nil {
			c.Close()
			return err
		}
		buf = b
		if kind != kindAck { // cannot happen: readFrame accepts only ACK
			c.Close()
			return fmt.Errorf("%w: expected ACK, got a kind %d frame", ErrProtocol, kind)
		}
		pos, err := decodeAck(b)
		if err != nil {
			c.Close()
			return err
		}
		s.mu.Lock()
		if last := sent(); last.Less(pos) {
			s.mu.Unlock()
			c.Close()
			s.log.Error("standby link: the peer acknowledged a position past every record sent to it: refused, connection dropped (a broken or forged standby)",
				"peer", c.RemoteAddr().String(), "ack", pos.String(), "sent", last.String())
			return fmt.Errorf("%w: ACK of %s, past the last record sent %s", ErrProtocol, pos, last)
		}
		if !s.currentLocked(c) {
			// A replaced connection's late ACK: what the standby now
			// connected holds is what it says (register), not this.
			s.mu.Unlock()
			continue
		}
		s.ackLocked(pos)
		heard := s.heardLocked(stated())
		s.mu.Unlock()
		if heard {
			s.forgetPromise()
		}
	}
}

// currentLocked reports whether c is the standby's connection now (the
// sync or async stream, or one of the arch session's).
func (s *Shipper) currentLocked(c net.Conn) bool {
	if s.conn == c {
		return true
	}
	if s.arch != nil {
		_, ok := s.arch.conns[c]
		return ok
	}
	return false
}

// ackLocked takes the standby's acknowledgement of pos: it has every record
// up to pos on disk.
func (s *Shipper) ackLocked(pos wal.Position) {
	if !s.acked.Less(pos) {
		return
	}
	s.acked, s.ackedAt = pos, time.Now()
	if !s.acked.Less(s.last) {
		s.caughtUp = true
	}
	if s.unprotected && !s.acked.Less(s.last) {
		s.log.Warn("standby caught up: protected (synchronized) again", "transport", s.cfg.Transport, "standby", s.peer, "unprotected_for", time.Since(s.since).Round(time.Millisecond))
		s.unprotected = false
	}
	if s.arch != nil {
		s.arch.ackedLocked(pos)
	}
	s.pruneLocked()
	s.notifyLocked()
}

// Status is what `tandem status` and the metrics show of the primary's
// standby.
type Status struct {
	Role       string `json:"role"`
	Cluster    string `json:"cluster"`
	Epoch      uint64 `json:"epoch"`
	Transport  string `json:"transport,omitempty"`
	Protection string `json:"protection,omitempty"`
	Standby    string `json:"standby,omitempty"` // the connected standby's address ("" none); the primary's on a standby
	Connected  bool   `json:"connected"`
	// Connections carrying the log (arch: up to MaxConnections; 1 with
	// sync or async while connected).
	Connections int `json:"connections,omitempty"`
	// Protected: under a sync protection mode, every acknowledged decision
	// is on the standby (false while max-availability runs without it).
	Protected  bool    `json:"protected"`
	PrimaryAt  string  `json:"primary_at"`
	StandbyAt  string  `json:"standby_at"`
	LagBytes   int64   `json:"lag_bytes"`
	LagSeconds float64 `json:"lag_seconds"`
	LagRecords int     `json:"lag_records"` // data-loss exposure: durable on the primary, not on the standby
	// Synchronized: the standby holds every decision the primary acts on,
	// as the primary tells it (STATE) and the standby records it; a standby
	// that is not is promoted only with --accept-data-loss (syncstate.go).
	Synchronized bool    `json:"synchronized"`
	Unprotected  float64 `json:"unprotected_seconds,omitempty"`
	// Downgrading: the primary runs Protection, but a standby last heard
	// it runs max-protection and no standby has heard otherwise yet: its
	// waits are max-protection's until one does (promise.go).
	Downgrading bool `json:"downgrading_from_max_protection,omitempty"`
}

// Acked is the standby's durable position as it acknowledged it (the zero
// Position: nothing yet): every shipped record up to it is on its disk.
func (s *Shipper) Acked() wal.Position {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acked
}

// Status reports the shipping state.
func (s *Shipper) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Status{Role: "primary", Cluster: s.cfg.Identity.Cluster.String(), Epoch: s.cfg.Identity.Epoch,
		Transport: string(s.cfg.Transport), Protection: string(s.cfg.Protection), Connected: s.conn != nil,
		PrimaryAt: s.last.String(), StandbyAt: s.acked.String(), Downgrading: s.downgrading}
	if s.conn != nil {
		st.Standby = s.peer
		st.Connections = 1
		if s.arch != nil {
			st.Connections = len(s.arch.conns)
		}
	}
	i := sort.Search(s.synced, func(i int) bool { return s.acked.Less(s.recs[i].pos) })
	st.LagRecords = s.synced - i
	for _, r := range s.recs[i:s.synced] {
		st.LagBytes += int64(len(r.payload) + 8)
	}
	if i < s.synced {
		if at := s.recs[i].at; !at.IsZero() {
			st.LagSeconds = time.Since(at).Seconds()
		} else {
			st.LagSeconds = time.Since(s.ackedAt.Add(0)).Seconds()
			if s.ackedAt.Before(s.started) {
				st.LagSeconds = time.Since(s.started).Seconds()
			}
		}
	}
	st.Protected = s.cfg.Transport == Sync && !s.unprotected
	st.Synchronized = s.conn != nil && s.stateLocked()&stateSynchronized != 0
	if s.unprotected {
		st.Unprotected = time.Since(s.since).Seconds()
	}
	return st
}

// waitChangeLocked waits, with s.mu released, for the next change of the
// shipper's state or for the end of the connection's acknowledgement reader
// (its error). s.mu is held again on return.
func (s *Shipper) waitChangeLocked(readErr <-chan error) error {
	ch := s.changed
	s.mu.Unlock()
	defer s.mu.Lock()
	select {
	case <-ch:
		return nil
	case err := <-readErr:
		return err
	}
}

// sendRelease sends a RELEASE notice to the standby.
func (s *Shipper) sendRelease(c net.Conn, w *bufio.Writer, n release) error {
	if err := s.send(c, w, kindRelease, n.encode()); err != nil {
		return fmt.Errorf("sending a RELEASE notice: %w", err)
	}
	return nil
}
