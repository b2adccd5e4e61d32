package coord

import (
	"context"
	"errors"
	"fmt"
	"github.com/tandem-tx/tandem/internal/fileutil"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/internal/wal"
	"github.com/tandem-tx/tandem/waits"
	"github.com/tandem-tx/tandem/xid"
)

// Options configure a Coordinator. Zero values take the defaults shown.
type Options struct {
	// Dir holds the decision log and the lock file.
	Dir string
	// RMs are the resource managers the coordinator drives.
	RMs []rm.Config
	// OrphanTimeout: how long a prepared branch with no decision may stay
	// before the in-doubt scan aborts it (default 60s). It must exceed the
	// longest time a client takes between its prepare and its Commit call.
	OrphanTimeout time.Duration
	// ScanInterval: how often every resource manager is scanned for prepared
	// branches (default 10s).
	ScanInterval time.Duration
	// Phase2Wait caps how long Commit waits for phase 2 when the caller set
	// no deadline (default 10s). With a deadline, Commit replies shortly
	// before it, marking phase 2 pending.
	Phase2Wait time.Duration
	// TakeOverAfter: how long a Commit under visibility async that allows
	// it (CommitMode.MayTakeOver) waits for the standby to hold the
	// decision before taking the client's session-bound branches over
	// (default 5ms: about what the client's reconnection costs it).
	TakeOverAfter time.Duration
	// MaxTxnAge: a Commit for a gtrid that began longer ago is aborted, and
	// ABORT decisions are remembered this long (default 1h).
	MaxTxnAge time.Duration
	// EndedRetention: how long a finished COMMIT is remembered (default 1m).
	EndedRetention time.Duration
	// MaxClockSkew bounds how far in the future a gtrid's time stamp (the
	// client's clock) may be (default 10s). Commit and resolve refuse a gtrid
	// stamped later than that: every age rule (MaxTxnAge, ABORT retention)
	// would be off by the skew.
	MaxClockSkew time.Duration
	// LogSize is the total size of the decision log (default 64 MiB). The
	// log is circular: segments of LogSize/8 each, reused once a checkpoint
	// has carried forward the decisions still remembered in them. Past 80%
	// of LogSize new commits are throttled; with no room left (10% is kept
	// for ABORT, END and checkpoint records) they are refused with
	// ErrLogFull until phase 2 catches up. See checkpoint.go and admit.go.
	LogSize int64
	// SegmentSize of the decision log (default LogSize/8).
	SegmentSize int64
	// NoWait makes durability "nowait" the default for COMMIT decisions:
	// Commit replies once the record is queued for the log writer, before
	// it is on disk. A crash can lose a decision the client saw as
	// committed; the prepared branches are then presumed aborted, so
	// atomicity still holds. ABORT decisions are always durable.
	NoWait bool
	// BatchWindow selects the log's write mode: 0 is immediate (flush at
	// once, group-committing whatever queued meanwhile); >0 is batch (gather
	// for up to this long to cut fdatasyncs, adding up to it to latency).
	BatchWindow time.Duration
	// NoSync skips fdatasync: tests only, never in production.
	NoSync bool
	Logger *slog.Logger
	// Waits receives this coordinator's wait events: its decision log
	// (wal.Options.Waits), its resource managers' connections (rm.Config.Waits),
	// the throttle, phase 2, recovery scans and the standby's
	// acknowledgements. Nil: a new registry of its own (Coordinator.Waits).
	Waits *waits.Registry

	// AdoptUnowned: prepared branches with legacy (unowned) names are
	// this coordinator's own (serve --adopt-unowned). Without it they are
	// listed and settled only by an operator, except those whose gtrid has
	// a decision in this log (a client from before owners existed that
	// committed through this coordinator).
	AdoptUnowned bool
	// CommitPointSettleAfter: how long a prepared branch named with a
	// commit point may stay with no decision row before the in-doubt scan
	// takes the commit point's decision key (records abort there) and rolls
	// it back (default 5s; cprecover.go). Taking the key is always safe (a
	// live client's decision then meets it and is refused); this only
	// bounds how long a dead client's branches hold their row locks. While
	// commit points are in use, the scan runs at least this often.
	CommitPointSettleAfter time.Duration

	// InDoubtBefore, when set, is the time of a promotion with
	// --accept-data-loss: this coordinator's log may lack decisions the old
	// primary made and acted on. A prepared branch of a gtrid that began
	// before it and has no decision here is never presumed aborted by the
	// in-doubt scan: it is listed (InDoubt) for an operator to settle
	// (ResolveInDoubt), and Status will not resolve it.
	InDoubtBefore time.Time

	// Owner is this coordinator's cluster identity (xid.Owner of the data
	// directory's cluster): the owner of every branch it decides
	// (docs/ownership.md). Phase 2 names branches with it (and, for an SDK
	// from before owners existed, with the legacy name). The in-doubt scan
	// settles only its own branches: another owner's are listed (InDoubt),
	// never touched. The zero Owner is a coordinator without an identity
	// (unit tests): legacy names are then its own, as before owners existed.
	Owner xid.Owner
	// Born is when this coordinator's decision log was created (the
	// identity's born line): the log knows nothing of what was decided
	// before. A prepared branch of a gtrid that began before Born (less
	// MaxClockSkew) with no decision here is listed, never presumed
	// aborted. Zero: no such boundary (unit tests).
	Born time.Time
	// OwnerMadeWithLog: Owner was made together with this log, at Born
	// (standby.Identity.MadeWithLog), so no client can have named a branch
	// with it before Born: the boundary for branches named with Owner is
	// Born itself, without the MaxClockSkew margin (a fresh coordinator
	// presumes abort for its own orphans from its first second). Adopted
	// unowned branches keep the margin.
	OwnerMadeWithLog bool

	// LogHook, when set, sees the decision log's records: those replayed
	// at Open, those written since (wal.Options.OnWrite: it may block the
	// writer, as the standby's sync transport does) and the releases of
	// old segments. The standby shipper (internal/standby) is one.
	LogHook LogHook

	// settle, if set, replaces the resource managers' COMMIT PREPARED and
	// ROLLBACK PREPARED in phase 2: a test seam, so that unit tests without
	// databases can make phase 2 fail (an unreachable RM) or succeed.
	settle func(ctx context.Context, rm string, b xid.Branch, commit bool) error
	// prepared, if set, replaces the resource managers' answer to "is this
	// branch prepared?" when Status resolves a gtrid: the same kind of seam.
	prepared func(ctx context.Context, rm string, b xid.Branch) (bool, error)
	// scanSince, if set, is told the oldest scan start each check of a
	// branch would accept (ownPreparedSince's since): a test's view of
	// which scans a check may share.
	scanSince func(rm string, b xid.Branch, since time.Time)
	// recover, if set, replaces the resource managers' recover scans (the
	// in-doubt scan, Status of a commit-point gtrid): the same kind of seam.
	recover func(ctx context.Context, rm string) ([]rm.InDoubt, error)
	// decisions, if set, replaces the commit points' decision tables
	// (package decision on each RM's pool): the same kind of seam.
	decisions decisionTables
	// manualScans: after the scan at start, scans run only when asked
	// (ScanNow, a sweep request): for tests that drive the scan's steps
	// themselves, with times of their own, and must not meet a scan of the
	// coordinator's own in between.
	manualScans bool
	// checkpointEvery is how often the checkpointer looks at the log's use
	// (default 1s): tests shorten it.
	checkpointEvery time.Duration
}

// LogHook sees the decision log's records (Options.LogHook).
type LogHook interface {
	Replayed(pos wal.Position, typ wal.Type, payload []byte) // payload valid during the call
	Written(recs []wal.Written, synced bool)                 // see wal.Options.OnWrite
	Released(before uint64)                                  // segments below before were released
}

// DefaultLogSize is the decision log size when Options.LogSize is 0.
const DefaultLogSize = 64 << 20

// MinLogSize is the smallest Options.LogSize.
const MinLogSize = 64 << 10

func (o *Options) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.OrphanTimeout, 60*time.Second)
	def(&o.ScanInterval, 10*time.Second)
	def(&o.Phase2Wait, 10*time.Second)
	def(&o.TakeOverAfter, 5*time.Millisecond)
	def(&o.MaxTxnAge, time.Hour)
	def(&o.MaxClockSkew, 10*time.Second)
	def(&o.EndedRetention, time.Minute)
	def(&o.checkpointEvery, time.Second)
	if o.LogSize <= 0 {
		o.LogSize = DefaultLogSize
	}
	if o.SegmentSize <= 0 {
		o.SegmentSize = SegmentSizeFor(o.LogSize)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if o.Waits == nil {
		o.Waits = waits.NewRegistry(waits.SideCoordinator)
	}
}

// SegmentSizeFor returns the segment size for a log of logSize bytes: an
// eighth of it, rounded down to a multiple of 8 bytes (at least 64).
func SegmentSizeFor(logSize int64) int64 { return wal.SegmentSizeFor(logSize) }

// Coordinator decides global transactions. It is safe for concurrent use.
type Coordinator struct {
	opts   Options
	log    *wal.Log
	lock   *os.File
	rms    map[string]*rm.Conn
	retry  map[string]*retryQueue // phase-2 retries, one queue per resource manager (retry.go)
	rmList []string               // sorted names
	logger *slog.Logger
	// standbyAck is a moving average of how long decisions waited for the
	// standby to hold them (ns; standbygate.go): a standby known to be
	// slower than Options.TakeOverAfter is not waited for before a take-over.
	standbyAck atomic.Int64

	mu   sync.Mutex
	txns map[xid.GTRID]*txn
	seen map[xid.Branch]time.Time // first time the scan saw an undecided prepared branch
	// misconfigSaid: when the scan last logged each misconfigured RM (scan
	// goroutine only): once, then at most every misconfigEvery.
	misconfigSaid map[string]time.Time
	// cpSeen: first time the scan saw a prepared branch decided by a commit
	// point (Branch.CommitPoint != ""), whose decision is in the commit
	// point's table, never in this log (cprecover.go).
	cpSeen map[xid.Branch]time.Time
	// saidMu guards said: when each rate-limited complaint was last logged
	// (sayEvery).
	saidMu sync.Mutex
	said   map[string]time.Time
	// tableReady: the RMs whose decision table is known to exist (Open and
	// the scan goroutine only).
	tableReady map[string]bool
	// sweepPass: where each RM's sweep of its decision table is (cpgc.go;
	// the scan goroutine only).
	sweepPass map[string]*sweepPass
	// cpst: commit-point recovery's state (cprecover.go).
	cpst cpState
	// lastScan: when the last in-doubt scan started and which RMs it could
	// not read (under mu); listScan: the fresh listings' scans (indoubt.go).
	lastScan scanRecord
	listScan freshScans
	// cpAct: what the decision tables recorded (cpactivity.go).
	cpAct cpActivity

	ctx      context.Context // the coordinator's lifetime: phase 2 and scans run on it
	cancel   context.CancelFunc
	halted   bool // Halt: no decision is acknowledged any more (under mu)
	wg       sync.WaitGroup
	scanNow  chan chan struct{}
	sweepNow chan chan SweepStats

	ck    checkpointer
	admit admission
	stats counters
	// unfinished counts the decisions in txns whose phase 2 has not ended:
	// each will write an END record, which admission control counts as
	// used. Changed under mu.
	unfinished atomic.Int64
}

// Open locks the data directory, replays the decision log, and starts phase 2
// for every decision without END and the periodic in-doubt scan.
//
// A failed Open releases everything it took (the pools, the directory's
// lock, the log), in one deferred cleanup.
func Open(opts Options) (_ *Coordinator, perr error) {
	opts.setDefaults()
	if err := opts.check(); err != nil {
		return nil, err
	}
	c := &Coordinator{opts: opts, rms: map[string]*rm.Conn{}, retry: map[string]*retryQueue{}, txns: map[xid.GTRID]*txn{},
		seen: map[xid.Branch]time.Time{}, cpSeen: map[xid.Branch]time.Time{}, logger: opts.Logger, scanNow: make(chan chan struct{}),
		sweepNow: make(chan chan SweepStats), tableReady: map[string]bool{}}
	c.ck.init()
	var l *wal.Log
	defer func() {
		if perr == nil {
			return
		}
		if l != nil {
			_ = l.Close()
		}
		c.unlockDir() // a no-op when not locked
		c.closeRMs()
	}()
	if err := c.openRMs(); err != nil {
		return nil, err
	}
	if err := c.lockDir(); err != nil {
		return nil, err
	}
	start := time.Now()
	l, replayed, err := c.replay()
	if err != nil {
		return nil, err
	}
	if err := c.checkUnfinishedRMs(); err != nil {
		return nil, err
	}
	c.log = l
	c.stats.replayed = uint64(replayed)
	unfinished := c.start()
	u := l.Usage()
	c.logger.Info("decision log replayed", "records", replayed, "segments", fmt.Sprintf("%d-%d", u.First, u.Current),
		"unfinished", unfinished, "remembered", len(c.txns), "took", time.Since(start).Round(time.Millisecond),
		"log_used", humanBytes(u.Used), "log_size", humanBytes(opts.LogSize))
	c.pingRMs()
	c.wg.Add(2)
	go c.scanLoop()
	go c.checkpointLoop()
	return c, nil
}

// check refuses options Open cannot work with (defaults set).
func (o *Options) check() error {
	if len(o.RMs) == 0 {
		return errors.New("coord: no resource managers configured: name at least one (driver and DSN)")
	}
	if o.LogSize < MinLogSize {
		return fmt.Errorf("coord: log size %d bytes is too small: use at least %d (64 KiB)", o.LogSize, MinLogSize)
	}
	if o.SegmentSize > o.LogSize/2 {
		return fmt.Errorf("coord: segment size %d is more than half the log size %d: the log must hold several segments to be reused", o.SegmentSize, o.LogSize)
	}
	return nil
}

// openRMs opens a pool per configured resource manager (the caller closes
// them on failure: closeRMs).
func (c *Coordinator) openRMs() error {
	for _, cfg := range c.opts.RMs {
		if _, dup := c.rms[cfg.Name]; dup {
			return fmt.Errorf("coord: resource manager %q is configured twice", cfg.Name)
		}
		cfg.Waits = c.opts.Waits
		conn, err := rm.Open(cfg)
		if err != nil {
			return fmt.Errorf("coord: %w", err)
		}
		c.rms[cfg.Name] = conn
		c.retry[cfg.Name] = newRetryQueue(c)
		c.rmList = append(c.rmList, cfg.Name)
	}
	sort.Strings(c.rmList)
	return nil
}

// replay opens the decision log, replaying every record into the decision
// table (and to the LogHook), and reports how many it replayed.
func (c *Coordinator) replay() (*wal.Log, int, error) {
	opts := c.opts
	var replayed int
	wopts := wal.Options{Dir: filepath.Join(opts.Dir, "log"), SegmentSize: opts.SegmentSize, MaxSize: opts.LogSize,
		NoSync: opts.NoSync, BatchWindow: opts.BatchWindow, Waits: opts.Waits}
	if opts.LogHook != nil {
		wopts.OnWrite = opts.LogHook.Written
	}
	l, err := wal.Open(wopts,
		func(pos wal.Position, typ wal.Type, payload []byte) error {
			replayed++
			if opts.LogHook != nil {
				opts.LogHook.Replayed(pos, typ, payload)
			}
			if err := c.apply(pos, typ, payload); err != nil {
				return fmt.Errorf("record at segment %d offset %d: %w", pos.Segment, pos.Offset, err)
			}
			return nil
		})
	if err != nil {
		return nil, 0, fmt.Errorf("coord: open the decision log in %s: %w", opts.Dir, err)
	}
	return l, replayed, nil
}

// checkUnfinishedRMs refuses a replayed decision table whose unfinished
// decisions name a resource manager that is not configured: phase 2 needs
// a connection for every branch.
func (c *Coordinator) checkUnfinishedRMs() error {
	for g, t := range c.txns {
		if t.ended {
			continue
		}
		for _, b := range t.branches {
			if _, ok := c.rms[b.rm]; !ok {
				return fmt.Errorf("coord: the decision log in %s holds an unfinished %s of gtrid %s with a branch on resource manager %q, which is not configured: configure it again so that phase 2 can finish",
					c.opts.Dir, t.outcome, g, b.rm)
			}
		}
	}
	return nil
}

// start starts the retry queues and phase 2 of every replayed decision
// without END (forgetting the expired ended ones), and returns how many it
// started.
func (c *Coordinator) start() int {
	c.ctx, c.cancel = context.WithCancel(context.Background())
	for _, q := range c.retry {
		c.wg.Add(1)
		go q.run()
	}
	unfinished := 0
	now := time.Now()
	for g, t := range c.txns {
		if t.ended {
			if c.expired(t, now) {
				delete(c.txns, g)
			}
			continue
		}
		unfinished++
		c.startPhase2(t, true)
	}
	c.unfinished.Store(int64(unfinished))
	return unfinished
}

// pingRMs checks every resource manager once at start, logging the ones
// that are unreachable or misconfigured, and makes the decision table of
// each one that answers.
func (c *Coordinator) pingRMs() {
	for _, name := range c.rmList {
		ctx, cancel := context.WithTimeout(c.ctx, 2*time.Second)
		if err := c.rms[name].Ping(ctx); err != nil {
			if merr := c.rms[name].Misconfigured(); merr != nil {
				c.logger.Error("resource manager misconfigured: commits that involve it are refused until it is fixed", "rm", name, "error", merr)
			} else {
				c.logger.Warn("resource manager unreachable at start; phase 2 and recovery will retry", "rm", name, "error", err)
			}
		} else {
			c.ensureTable(name)
		}
		cancel()
	}
}

// apply replays one record into the decision table. A decision may come
// more than once (a CHECKPOINT record carries it forward; after a crash in
// the middle of a checkpoint's release, Open may also replay segments the
// checkpoint had released): the latest record of a gtrid is its state.
func (c *Coordinator) apply(pos wal.Position, typ wal.Type, payload []byte) error {
	switch typ {
	case recCommit, recAbort, recCheckpoint:
		var cr carried
		if typ == recCheckpoint {
			var err error
			if cr, err = decodeCarried(payload); err != nil {
				return err
			}
		} else {
			d, err := decodeDecision(payload)
			if err != nil {
				return err
			}
			cr.decision, cr.outcome = d, Committed
			if typ == recAbort {
				cr.outcome = Aborted
			}
		}
		// A finished decision may have been forgotten (EndedRetention) and a
		// gtrid decided again since: the later record is the live answer.
		if prev := c.txns[cr.gtrid]; prev != nil && prev.outcome != cr.outcome && !prev.ended {
			return fmt.Errorf("coord: gtrid %s has both COMMIT and ABORT records: the log is inconsistent", cr.gtrid)
		}
		t := newDecided(cr.decision, cr.outcome)
		t.seg = pos.Segment
		if cr.ended {
			t.markEnded(cr.endedAt)
		}
		c.txns[cr.gtrid] = t
	case RecStandbyMark:
		// Where a standby's copy of the log had got to: nothing to apply.
	case recEnd:
		g, err := decodeEnd(payload)
		if err != nil {
			return err
		}
		if t := c.txns[g]; t != nil {
			t.markEnded(time.Now())
		}
	default:
		return fmt.Errorf("unknown record type %d (written by a newer Tandem?)", typ)
	}
	return nil
}

// Halt makes the coordinator stop deciding and settling at once, without
// closing its log: no phase 2 or scan starts or goes on, a new decision is
// refused (ErrClosed), and a decision whose record is being written when
// Halt is called is reported as ErrOutcomeUnknown, never acknowledged (a
// fenced primary must not acknowledge a decision its successor may lack,
// even when a stalled standby acknowledgement is released afterwards).
// Close must still be called.
func (c *Coordinator) Halt() {
	c.mu.Lock()
	c.halted = true
	cancel := c.cancel
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// Close stops phase 2 and the scans, closes the log and the pools. Unfinished
// phase 2 work resumes at the next Open. Safe to call twice.
func (c *Coordinator) Close() error {
	// Under c.mu: decide and startPhase2Locked read c.cancel, and from here
	// on no phase-2 driver starts (so none is added to c.wg after Wait).
	c.mu.Lock()
	cancel := c.cancel
	c.cancel = nil
	c.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	c.wg.Wait()
	// A last checkpoint, so that the next Open replays little.
	if _, err := c.runCheckpoint(true); err != nil {
		c.logger.Warn("checkpoint at close failed; the next start replays more of the log", "error", err)
	}
	err := c.log.Close()
	c.closeRMs()
	c.unlockDir()
	return err
}

func (c *Coordinator) closeRMs() {
	for _, r := range c.rms {
		_ = r.Close()
	}
}

// lockDir takes an exclusive lock on Dir/LOCK so that two coordinators never
// share one decision log.
func (c *Coordinator) lockDir() error {
	if err := os.MkdirAll(c.opts.Dir, 0o750); err != nil {
		return fmt.Errorf("coord: data directory %s: %w", c.opts.Dir, err)
	}
	path := filepath.Join(c.opts.Dir, "LOCK")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return fmt.Errorf("coord: data directory %s is not writable: %w", c.opts.Dir, err)
	}
	if err := fileutil.TryLock(f); err != nil {
		owner, _ := os.ReadFile(path)
		_ = f.Close()
		return fmt.Errorf("coord: data directory %s is in use by another coordinator (%s); stop it or choose another data directory",
			c.opts.Dir, strings.TrimSpace(string(owner)))
	}
	_ = f.Truncate(0)
	host, _ := os.Hostname()
	_, _ = f.WriteAt([]byte("pid "+strconv.Itoa(os.Getpid())+" on "+host+"\n"), 0)
	c.lock = f
	return nil
}

// CheckDirFree reports, before anything else is started, whether dir is in
// use by another coordinator (the error names it, as Open's would). It
// takes the lock and lets it go: Open takes it for good. A second start of
// the same command then names the data directory, not the port it cannot
// bind.
func CheckDirFree(dir string) error {
	c := &Coordinator{opts: Options{Dir: dir}}
	if err := c.lockDir(); err != nil {
		return err
	}
	c.unlockDir()
	return nil
}

func (c *Coordinator) unlockDir() {
	if c.lock != nil {
		_ = c.lock.Close() // releases the flock
		c.lock = nil
	}
}

// Misconfigured lists the resource managers whose database refused the
// coordinator's login or database name at the last attempt, with why.
func (c *Coordinator) Misconfigured() map[string]error {
	out := map[string]error{}
	for _, name := range c.rmList {
		if err := c.rms[name].Misconfigured(); err != nil {
			out[name] = err
		}
	}
	return out
}

// RMNames lists the configured resource managers.
func (c *Coordinator) RMNames() []string { return append([]string(nil), c.rmList...) }

// Waits returns the registry this coordinator records its wait events in
// (Options.Waits, or the one it made for itself): the admin endpoint's
// /waits and a traced Commit's trailer read it.
func (c *Coordinator) Waits() *waits.Registry { return c.opts.Waits }

// RMHealth is one resource manager's reachability.
type RMHealth struct {
	Name, Driver string
	Err          error
	// Misconfigured: the database refused the coordinator's login or
	// database name (Err is then an *rm.ConfigError): not an outage, an
	// operator must fix the DSN. Commits that involve it are refused.
	Misconfigured bool
}

// Health pings every resource manager in parallel and reports whether the
// log can still take decisions.
func (c *Coordinator) Health(ctx context.Context) (serving bool, rms []RMHealth, unfinished int) {
	rms = make([]RMHealth, len(c.rmList))
	var wg sync.WaitGroup
	for i, name := range c.rmList {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn := c.rms[name]
			rms[i] = RMHealth{Name: name, Driver: string(conn.Dialect().Driver()), Err: conn.Ping(ctx)}
			if merr := conn.Misconfigured(); merr != nil {
				rms[i].Err, rms[i].Misconfigured = merr, true
			}
		}()
	}
	wg.Wait()
	c.mu.Lock()
	for _, t := range c.txns {
		if t.outcome != Undecided && !t.ended {
			unfinished++
		}
	}
	c.mu.Unlock()
	return c.log.Err() == nil, rms, unfinished
}
