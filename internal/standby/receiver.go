package standby

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"time"

	"github.com/tandem-tx/tandem/internal/failpoint"
	"github.com/tandem-tx/tandem/internal/setting"
	"github.com/tandem-tx/tandem/internal/wal"
	"github.com/tandem-tx/tandem/waits"
)

// RecMark is the type of the MARK record a standby writes after each batch
// it copied: the primary's position and epoch (wal.TypeStandbyMark, which a
// coordinator replaying the log skips).
const RecMark = wal.TypeStandbyMark

// ReceiverConfig configures a standby's Receiver.
type ReceiverConfig struct {
	// Primary is the primary's --standby-listen address.
	Primary string
	// Dir is the standby's data directory: the log goes in Dir/log, as a
	// coordinator's, so that a promoted standby opens it as its own.
	Dir string
	// LogSize is the size the standby's log is budgeted, as a
	// coordinator's --log-size (wal.Options.MaxSize): released segment
	// files are kept for reuse only while they fit in it. The standby
	// releases its own segments as the primary's checkpoints release the
	// primary's (a RELEASE notice), so it holds about what the primary
	// holds. Default 8 × SegmentSize, or 64 MiB.
	LogSize int64
	// SegmentSize of the standby's log (default LogSize/8: 8 MiB). A
	// record larger than a segment cannot be copied: use the primary's
	// segment size or larger.
	SegmentSize int64
	NoSync      bool // tests only
	NetTimeout  time.Duration
	// NetOptions: socket buffers and TCP_NODELAY of the connection to the
	// primary (the receive buffer is the one that bounds a long link's
	// throughput on this side).
	NetOptions
	// Auth authenticates the primary (and this standby to it) before
	// anything is sent; nil or empty is allowed for a loopback Primary only.
	Auth *Auth
	// Listen, when set, is where this standby answers authenticated PROBEs
	// with its cluster and epoch (its --standby-listen, where it serves its
	// own standby once promoted), so that a primary's --peer check can
	// disprove a forged claim of a newer epoch. It answers nothing else.
	Listen string
	Logger *slog.Logger
	// Waits receives the standby's "standby log write" waits (the
	// standby coordinator's registry, so that its /waits shows them).
	// Nil: a new one.
	Waits *waits.Registry
}

// Receiver is the standby's side: it follows one primary, writes what it
// receives to its own decision log and acknowledges it.
type Receiver struct {
	cfg ReceiverConfig
	log *wal.Log

	mu        sync.Mutex
	id        Identity
	haveID    bool
	pos       wal.Position // the primary's position of the last record on disk here
	records   int          // records in the log (MARKs included): 0 for a fresh or re-seeded standby
	connected bool
	conns     int // connections to the primary carrying data (arch: up to WELCOME's)
	maxAhead  int // arch: the most segments received ahead of the next to apply
	lastErr   error
	lastAt    time.Time // when the last batch was made durable
	primaryAt wal.Position
	conn      net.Conn
	sync      SyncState // as in SyncStateFile
	// finalSeen: the current (or last) primary said it stopped with every
	// record on this standby (a final STATE); reset at each new session.
	finalSeen bool

	// Recycling of the standby's own log, under tmu (the log's writer
	// updates them in onWrite). bound[s]: no record in own segment s has a
	// primary position past it; unbound (at replay only): own segments
	// holding records no MARK covers yet; queued: the primary positions of
	// the records queued for the log and not yet written, in order;
	// markSeg: the own segment of the latest MARK, never released (replay
	// takes the position from it).
	tmu     sync.Mutex
	bound   map[uint64]wal.Position
	unbound map[uint64]bool
	queued  []wal.Position
	markSeg uint64
	notice  release // the latest RELEASE from the primary (before 0: none)
	acted   uint64  // the before of the latest notice recycle acted on

	probes *gate // answers PROBEs on cfg.Listen; nil without

	cancel context.CancelFunc
	done   chan struct{}
}

// OpenReceiver opens (or creates) the standby's log, replays it to find its
// position, and starts following the primary.
func OpenReceiver(cfg ReceiverConfig) (*Receiver, error) {
	if cfg.NetTimeout <= 0 {
		cfg.NetTimeout = DefaultNetTimeout
	}
	switch {
	case cfg.LogSize <= 0 && cfg.SegmentSize <= 0:
		cfg.LogSize = 64 << 20
	case cfg.LogSize <= 0:
		cfg.LogSize = 8 * cfg.SegmentSize
	}
	if cfg.SegmentSize <= 0 {
		cfg.SegmentSize = wal.SegmentSizeFor(cfg.LogSize)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Waits == nil {
		cfg.Waits = waits.NewRegistry(waits.SideCoordinator)
	}
	if err := cfg.NetOptions.check("receiver"); err != nil {
		return nil, err
	}
	if err := CheckExposure(setting.StandbyOf, cfg.Primary, cfg.Auth); err != nil {
		return nil, err
	}
	if err := CheckExposure(setting.StandbyListen, cfg.Listen, cfg.Auth); err != nil {
		return nil, err
	}
	r := &Receiver{cfg: cfg, done: make(chan struct{}), bound: map[uint64]wal.Position{}, unbound: map[uint64]bool{}}
	id, ok, err := LoadIdentity(cfg.Dir)
	if err != nil {
		return nil, err
	}
	r.id, r.haveID = id, ok
	l, err := wal.Open(wal.Options{Dir: filepath.Join(cfg.Dir, "log"), SegmentSize: cfg.SegmentSize, MaxSize: cfg.LogSize, NoSync: cfg.NoSync, OnWrite: r.onWrite},
		func(own wal.Position, typ wal.Type, payload []byte) error {
			r.records++
			if typ != RecMark {
				r.unbound[own.Segment] = true
				return nil
			}
			m, err := decodeHello(payload)
			if err != nil {
				return fmt.Errorf("standby MARK record: %w", err)
			}
			r.pos = m.pos
			// The records since the previous MARK have primary positions
			// up to this one's (their own are not known at replay).
			for s := range r.unbound {
				r.bound[s] = maxPos(r.bound[s], m.pos)
				delete(r.unbound, s)
			}
			r.bound[own.Segment] = maxPos(r.bound[own.Segment], m.pos)
			r.markSeg = own.Segment
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("standby: open the log in %s: %w", cfg.Dir, err)
	}
	r.log = l
	if r.sync, err = LoadSyncState(cfg.Dir); err != nil {
		l.Close()
		return nil, err
	}
	if r.sync.Synchronized && !r.sync.MaxProtection {
		// While this standby was down, its primary may have gone on
		// without it.
		if err := r.setSync(false, false, "the standby (re)started: its primary (not max-protection) may have gone on without it meanwhile"); err != nil {
			l.Close()
			return nil, err
		}
	}
	if cfg.Listen != "" {
		if err := r.answerProbes(); err != nil {
			l.Close()
			return nil, err
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go r.run(ctx)
	return r, nil
}

// Position is the primary's position of the last record on disk here.
func (r *Receiver) Position() wal.Position {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pos
}

// Close stops following and closes the log.
func (r *Receiver) Close() error {
	r.cancel()
	r.mu.Lock()
	if r.conn != nil {
		r.conn.Close()
	}
	r.mu.Unlock()
	<-r.done
	if r.probes != nil {
		_ = r.probes.close()
	}
	return r.log.Close()
}

func (r *Receiver) run(ctx context.Context) {
	defer close(r.done)
	redial(ctx, r.session, func(err error) {
		r.mu.Lock()
		r.connected, r.lastErr = false, err
		r.mu.Unlock()
		if errors.Is(err, ErrRefused) || errors.Is(err, ErrProtocol) || errors.Is(err, errRejected) {
			r.cfg.Logger.Error("standby: the primary's stream is refused; nothing of it was written", "primary", r.cfg.Primary, "error", err)
		} else {
			r.cfg.Logger.Warn("standby: not connected to the primary; retrying", "primary", r.cfg.Primary, "error", err)
		}
	})
}

// Reconnection backoff (redial): the first wait, the longest, and how long
// an attempt must have lasted for the next wait to start again from the
// first.
const (
	redialFirst = 100 * time.Millisecond
	redialMax   = 2 * time.Second
	redialReset = 5 * time.Second
)

// redial runs attempt until ctx ends, handing each of its errors to failed
// (not after ctx ended) and waiting between attempts: redialFirst, doubling
// up to redialMax, from redialFirst again after an attempt that lasted over
// redialReset (a connection that worked for a while).
func redial(ctx context.Context, attempt func(context.Context) error, failed func(error)) {
	backoff := redialFirst
	for ctx.Err() == nil {
		start := time.Now()
		err := attempt(ctx)
		if ctx.Err() != nil {
			return
		}
		failed(err)
		if time.Since(start) > redialReset {
			backoff = redialFirst
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, redialMax)
	}
}

// ack tells the primary, on c, that this standby has every record up to
// pos on disk.
func (r *Receiver) ack(c net.Conn, bw *bufio.Writer, pos wal.Position) error {
	_ = c.SetWriteDeadline(time.Now().Add(r.cfg.NetTimeout))
	return writeFrame(bw, kindAck, encodePos(pos))
}

// dial opens a connection to the primary, with the standby link's socket
// options (the handshake comes next).
func (r *Receiver) dial(ctx context.Context) (net.Conn, error) {
	d := net.Dialer{Timeout: r.cfg.NetTimeout, KeepAlive: r.cfg.NetTimeout, Control: socketControl(r.cfg.SendBuffer, r.cfg.ReceiveBuffer)}
	return d.DialContext(ctx, "tcp", r.cfg.Primary)
}

// errRejected is wrapped by the standby's own refusals of a primary.
var errRejected = errors.New("standby: primary rejected")

// session is one connection to the primary.
func (r *Receiver) session(ctx context.Context) error {
	c, err := r.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	r.mu.Lock()
	r.conn = c
	r.finalSeen = false
	h := hello{epoch: r.id.Epoch, pos: r.pos}
	if r.haveID {
		h.cluster = r.id.Cluster
	}
	r.mu.Unlock()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	// Sent only once the primary proved it holds the secret.
	br, bw, w, err := r.handshake(c, kindHello, h.encode())
	if err != nil {
		return err
	}
	if err := r.accept(w); err != nil {
		return err
	}
	// Following a primary, this directory promises no standby anything
	// (promise.go): it may once have been a max-protection primary.
	if forgot, err := ForgetMaxProtectionPromise(r.cfg.Dir); err != nil {
		return err
	} else if forgot {
		r.cfg.Logger.Info("standby: this data directory follows a primary now: the max-protection promise it made as a primary is withdrawn")
	}
	if w.inDoubtBefore != 0 {
		// Before any record is applied: promoted, this directory must
		// treat the primary's in-doubt gtrids as in doubt too.
		if err := noteInDoubtBoundary(r.cfg.Dir, time.Unix(0, w.inDoubtBefore)); err != nil {
			return err
		}
	}
	_ = c.SetDeadline(time.Time{})
	r.mu.Lock()
	r.connected, r.lastErr = true, nil
	r.mu.Unlock()
	if w.transport == wireArch {
		// No STATE frame travels on arch connections: this standby is
		// never synchronized with an arch primary (it acts on decisions
		// before the standby has them), whatever an earlier primary of
		// this directory (max-protection) said. Recorded before anything
		// is acknowledged.
		if err := r.setSync(false, false, "the primary ships completed segments only (arch): it acts on decisions before this standby has them"); err != nil {
			return err
		}
		r.cfg.Logger.Info("standby: following the primary (arch: completed segments)", "primary", r.cfg.Primary, "cluster", w.cluster.String(), "epoch", w.epoch,
			"from", h.pos.String(), "connections", w.conns)
		return r.followArch(ctx, c, br, bw, w)
	}
	r.cfg.Logger.Info("standby: following the primary", "primary", r.cfg.Primary, "cluster", w.cluster.String(), "epoch", w.epoch, "from", h.pos.String())
	r.addConns(1)
	defer r.addConns(-1)
	final := false
	defer func() {
		// Ended without the primary's final word: unless it is
		// max-protection, it may go on without this standby.
		r.mu.Lock()
		st := r.sync
		r.mu.Unlock()
		if !final && st.Synchronized && !st.MaxProtection {
			if err := r.setSync(false, false, "the connection to the primary ended without its final STATE: it may have gone on (unprotected) without this standby"); err != nil {
				r.cfg.Logger.Error("standby: could not record that it is not synchronized", "error", err)
			}
		}
	}()
	for {
		kind, b, err := readFrame(br, nil, kindsOf(kindRecords, kindRelease, kindState)) // a new buffer: AppendNoWait keeps the payloads
		if err != nil {
			return err
		}
		if kind == kindState {
			if len(b) != 1 {
				return fmt.Errorf("%w: a STATE frame of %d bytes", ErrProtocol, len(b))
			}
			why := "the primary says this standby holds every decision it acts on"
			switch {
			case b[0]&stateFinal != 0:
				_ = failpoint.Inject("standby-before-final-state") // sleep: the final STATE read, not yet recorded
				why = "the primary stopped with every record of its log on this standby"
				final = true
				r.mu.Lock()
				r.finalSeen = true
				r.mu.Unlock()
			case b[0]&stateSynchronized == 0:
				why = "the primary answers or settles decisions before this standby has them (async or arch transport, not caught up yet, or UNPROTECTED)"
			}
			if err := r.setSync(b[0]&stateSynchronized != 0, b[0]&stateMaxProtection != 0, why); err != nil {
				return err
			}
			continue
		}
		if kind == kindRelease {
			n, err := decodeRelease(b)
			if err != nil {
				return err
			}
			if err := r.noted(n); err != nil {
				return err
			}
			continue
		}
		if kind != kindRecords {
			return fmt.Errorf("%w: expected RECORDS or RELEASE, got a kind %d frame", ErrProtocol, kind)
		}
		recs, err := decodeRecords(b, r.Position())
		if err != nil {
			return err
		}
		if len(recs) == 0 {
			continue
		}
		last := recs[len(recs)-1].pos
		if err := r.write(recs, hello{cluster: w.cluster, epoch: w.epoch, pos: last}); err != nil {
			return err
		}
		if err := r.ack(c, bw, last); err != nil {
			return err
		}
	}
}

// setSync records in SyncStateFile whether this standby is synchronized,
// when that changes.
func (r *Receiver) setSync(synced, maxProtection bool, why string) error {
	r.mu.Lock()
	cur := r.sync
	r.mu.Unlock()
	if cur.Synchronized == synced && cur.MaxProtection == maxProtection && cur.Reason != "" {
		return nil
	}
	st := SyncState{Synchronized: synced, MaxProtection: maxProtection, Reason: why, At: time.Now()}
	if err := saveSyncState(r.cfg.Dir, st); err != nil {
		return err
	}
	r.mu.Lock()
	r.sync = st
	r.mu.Unlock()
	return nil
}

// TrustedWhileFollowing says whether a standby that still follows may be
// promoted as synchronized: only if its primary runs max-protection (it
// stalls rather than act without this standby) or said it stopped (a final
// STATE). A max-availability primary cut off by a silent partition goes on
// unprotected after its net timeout, and the STATE that would say so never
// arrives: "synchronized" may be stale, so the promotion needs
// --accept-data-loss. Nil when trusted (or not synchronized at all, which
// CheckPromotable refuses on its own).
func (r *Receiver) TrustedWhileFollowing() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.sync.Synchronized || r.sync.MaxProtection || r.finalSeen {
		return nil
	}
	return fmt.Errorf("%w: its primary runs max-availability and has not said it stopped: if it is cut off rather than gone, "+
		"it goes on unprotected after its net timeout without this standby hearing of it, so being synchronized cannot be proven while it follows. "+
		"Stop the primary first (it then says so), or promote with --accept-data-loss: gtrids from before the promotion are then never presumed aborted, "+
		"they are listed (tandem status --in-doubt) for you to settle (tandem resolve)", ErrNotSynchronized)
}

// Synchronized reports whether this standby holds every decision its
// primary acted on, as far as it knows (see syncstate.go).
func (r *Receiver) Synchronized() SyncState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sync
}

// write appends recs to the standby's log, then the MARK (its Append makes
// them all durable with one fdatasync), and releases the standby's own
// segments that the primary's latest RELEASE notice allows.
func (r *Receiver) write(recs []record, mark hello) error {
	start := time.Now()
	r.tmu.Lock()
	n := len(r.queued)
	for _, rec := range recs {
		if rec.typ != RecMark {
			r.queued = append(r.queued, rec.pos)
		}
	}
	n = len(r.queued) - n
	r.tmu.Unlock()
	for _, rec := range recs {
		if rec.typ == RecMark {
			// Never written (a shipper does not send them): a foreign
			// MARK here would be taken for this standby's own at replay.
			continue
		}
		if _, err := r.log.AppendNoWait(rec.typ, rec.payload); err != nil {
			return fmt.Errorf("standby: write the log: %w", err)
		}
	}
	if _, err := r.log.Append(RecMark, mark.encode()); err != nil {
		return fmt.Errorf("standby: write the log: %w", err)
	}
	r.cfg.Waits.Since(waits.StandbyLogWrite, start)
	r.mu.Lock()
	r.pos, r.lastAt, r.primaryAt = mark.pos, time.Now(), mark.pos
	r.records += n + 1
	r.mu.Unlock()
	return r.recycle()
}

// onWrite is the standby log's wal.Options.OnWrite: it learns the own
// segment of every record written, and so the highest primary position in
// each own segment.
func (r *Receiver) onWrite(recs []wal.Written, _ bool) {
	r.tmu.Lock()
	defer r.tmu.Unlock()
	for _, w := range recs {
		var p wal.Position
		if w.Type == RecMark {
			m, err := decodeHello(w.Payload)
			if err != nil {
				continue // not one of ours; cannot happen
			}
			p = m.pos
			r.markSeg = w.Pos.Segment
		} else if len(r.queued) > 0 {
			p = r.queued[0]
			r.queued = r.queued[1:]
		}
		r.bound[w.Pos.Segment] = maxPos(r.bound[w.Pos.Segment], p)
	}
	if len(r.queued) == 0 {
		r.queued = nil
	}
}

func maxPos(a, b wal.Position) wal.Position {
	if a.Less(b) {
		return b
	}
	return a
}

// release is a RELEASE notice: the primary released its segments before
// before, having carried every record it still needs from them to
// positions up to at.
type release struct {
	before uint64
	at     wal.Position
}

// noted keeps the primary's latest RELEASE notice and acts on it.
func (r *Receiver) noted(n release) error {
	r.tmu.Lock()
	if n.before > r.notice.before {
		r.notice = n
	}
	r.tmu.Unlock()
	return r.recycle()
}

// recycle releases the standby's own segments whose records all have
// primary positions before the notice's segment, once the standby has
// every record up to the notice's position: those records are then all
// either released by the primary or carried forward, and the copies are
// here. It never releases the segment of the latest MARK (nor the
// segment being written).
func (r *Receiver) recycle() error {
	pos := r.Position()
	r.tmu.Lock()
	defer r.tmu.Unlock()
	n := r.notice
	if n.before == 0 || pos.Less(n.at) {
		return nil
	}
	limit := wal.Position{Segment: n.before}
	u := r.log.Usage()
	upto := u.First
	for s := u.First; s < r.markSeg && !r.unbound[s]; s++ {
		b, ok := r.bound[s]
		if !ok || !b.Less(limit) {
			break
		}
		upto = s + 1
	}
	if upto > u.First {
		if err := r.log.Release(upto); err != nil {
			return fmt.Errorf("standby: release the log's segments before %d: %w", upto, err)
		}
		for s := range r.bound {
			if s < upto {
				delete(r.bound, s)
			}
		}
	}
	r.acted = n.before
	return nil
}

// accept checks the primary's identity against this standby's, adopting it
// when this standby's log is empty (fresh, or re-seeded: any epoch) or the
// epoch is the same. Another cluster, or an older epoch (a superseded
// primary), is always refused. Positions are the primary's own log positions, and those of a
// promoted coordinator are unrelated to the old primary's: a standby whose
// log holds records must not follow a primary of a newer epoch (it would
// skip or misplace records), nor of another cluster.
func (r *Receiver) accept(w welcome) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	empty := r.records == 0 && r.pos == (wal.Position{})
	born, made := r.id.Born, r.id.Made
	if w.born != 0 {
		born = time.Unix(0, w.born).UTC() // the primary's log's birth: this copy knows no more than it
		made = time.Time{}
		if w.made != 0 {
			made = time.Unix(0, w.made).UTC()
		}
	}
	if r.haveID {
		if w.cluster != r.id.Cluster {
			return fmt.Errorf("%w: the primary at %s belongs to cluster %s, this standby to cluster %s: refusing its log; to follow it, re-seed this standby: stop it, run %q, start it again",
				errRejected, r.cfg.Primary, w.cluster, r.id.Cluster, ReseedCommand(r.cfg.Dir))
		}
		if w.epoch < r.id.Epoch {
			return fmt.Errorf("%w: the primary at %s is at epoch %d, older than this standby's epoch %d: it was superseded by a promotion and must not be followed",
				errRejected, r.cfg.Primary, w.epoch, r.id.Epoch)
		}
		if w.epoch == r.id.Epoch {
			if (!born.Equal(r.id.Born) || !made.Equal(r.id.Made)) && !born.IsZero() {
				id := r.id
				id.Born, id.Made = born, made
				if err := SaveIdentity(r.cfg.Dir, id); err != nil {
					return err
				}
				r.id = id
			}
			return nil
		}
	}
	if !empty {
		why := fmt.Sprintf("is at epoch %d, newer than this standby's epoch %d (a promotion since)", w.epoch, r.id.Epoch)
		if !r.haveID {
			why = fmt.Sprintf("is at epoch %d and this standby has no cluster identity (file %q missing)", w.epoch, IdentityFile)
		}
		return fmt.Errorf("%w: the primary at %s %s, and this standby's log already holds records (up to the old primary's position %s): a promoted coordinator's log positions are unrelated to the old primary's, so going on from here would skip or misplace records; re-seed this standby: stop it, run %q, start it again",
			errRejected, r.cfg.Primary, why, r.pos, ReseedCommand(r.cfg.Dir))
	}
	if born.IsZero() {
		// A primary from before births were recorded: this log begins now.
		born, made = time.Now(), time.Time{}
	}
	id := Identity{Cluster: w.cluster, Epoch: w.epoch, Born: born, Made: made}
	if err := SaveIdentity(r.cfg.Dir, id); err != nil {
		return err
	}
	r.id, r.haveID = id, true
	return nil
}

func (r *Receiver) addConns(n int) {
	r.mu.Lock()
	r.conns += n
	r.mu.Unlock()
}

// Status reports the standby's state.
func (r *Receiver) Status() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := Status{Role: "standby", Epoch: r.id.Epoch, Standby: r.cfg.Primary, Connected: r.connected, Connections: r.conns,
		StandbyAt: r.pos.String(), PrimaryAt: r.primaryAt.String(), Synchronized: r.sync.Synchronized}
	if r.haveID {
		st.Cluster = r.id.Cluster.String()
	}
	if !r.lastAt.IsZero() {
		st.LagSeconds = time.Since(r.lastAt).Seconds() // since the last batch received
	}
	return st
}

// LastError is why the standby is not following its primary, nil when it is.
func (r *Receiver) LastError() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastErr
}

// handshake tunes a new connection to the primary, authenticates both ends
// (TLS and the secret's challenge-response, as configured), sends the
// opening frame (HELLO or JOIN) and reads the primary's WELCOME, within the
// net timeout (the deadline stays set: the caller clears it).
func (r *Receiver) handshake(c net.Conn, kind byte, payload []byte) (*bufio.Reader, *bufio.Writer, welcome, error) {
	r.cfg.NetOptions.tune(c)
	_ = c.SetDeadline(time.Now().Add(r.cfg.NetTimeout))
	tc := r.cfg.Auth.clientConn(c, r.cfg.Primary)
	br := bufio.NewReaderSize(tc, 256<<10)
	bw := bufio.NewWriterSize(tc, 4<<10)
	if err := dialAuth(br, bw, r.cfg.Auth); err != nil {
		return nil, nil, welcome{}, fmt.Errorf("authenticating the primary at %s: %w", r.cfg.Primary, err)
	}
	if err := writeFrame(bw, kind, payload); err != nil {
		return nil, nil, welcome{}, err
	}
	got, b, err := readFrame(br, nil, kindsOf(kindWelcome))
	if err != nil {
		return nil, nil, welcome{}, err
	}
	if got != kindWelcome {
		return nil, nil, welcome{}, fmt.Errorf("%w: expected WELCOME, got a kind %d frame", ErrProtocol, got)
	}
	w, err := decodeWelcome(b)
	return br, bw, w, err
}
