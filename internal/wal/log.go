package wal

import (
	"errors"
	"fmt"
	"github.com/tandem-tx/tandem/waits"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultSegmentSize is the segment size used when Options.SegmentSize is 0.
const DefaultSegmentSize = 64 << 20

// minSegmentSize leaves room for the segment header and one small record.
const minSegmentSize = 64

// lockName is the file in the log directory that Open locks.
const lockName = "LOCK"

// Options configure Open.
type Options struct {
	// Dir is the log directory. Open creates it if it does not exist.
	Dir string

	// SegmentSize is the size every new segment is preallocated to: a
	// multiple of 8, at least 64. 0 means DefaultSegmentSize. Segments
	// written with another size are read as they are.
	SegmentSize int64

	// BatchWindow selects the write mode. 0 (the default) is immediate
	// mode: the writer flushes as soon as it has a request, with every
	// request queued at that moment, and nothing but the queue decides when
	// (no sleep, timer or spin). A positive window is batch mode: after
	// taking the first request of a batch the writer keeps taking requests
	// until BatchWindow has passed since that request was queued, or the
	// batch holds BatchMaxBytes, then writes and fdatasyncs them once. It
	// cuts fdatasyncs under load and adds up to BatchWindow to every
	// Append's latency, even when the log is idle. See the package
	// documentation, "Write modes".
	BatchWindow time.Duration

	// BatchMaxBytes ends a batch-mode batch early once its records take
	// this many bytes (headers and padding included). 0 means 4 MiB, also
	// the largest value; negative is an error. Immediate mode ignores it.
	BatchMaxBytes int

	// MaxSize is the log size its owner budgets, in bytes; 0 means no
	// budget. The log never refuses a record because of it (admission is
	// the owner's job, see Usage), but it keeps released segment files for
	// reuse only while they and the live segments fit in MaxSize; Release
	// deletes the others.
	MaxSize int64

	// NoSync skips every fdatasync and directory fsync. For tests only:
	// Append then acknowledges records that a power loss can erase.
	NoSync bool

	// OpenFile opens segment files; nil means os.OpenFile with fdatasync
	// as File.Sync. Tests use it to inject faults.
	OpenFile func(name string, flag int, perm os.FileMode) (File, error)

	// OnWrite, when set, is called by whoever writes a batch (the writer
	// goroutine, or an Append writing directly), holding the write lock,
	// after the batch's records are written (and fdatasynced when synced
	// is true) and before any of its Appends returns: records in log order,
	// each with its Position. synced means every record written so far,
	// in this batch and before, is durable. A batch of AppendNoWait
	// records only is passed with synced false. The payloads are valid only
	// during the call. A standby shipper uses it: it may block (the
	// standby's acknowledgement under the sync transport), which delays
	// every Append of the batch and lets the next batch grow meanwhile. Nil
	// (the default) costs nothing.
	OnWrite func(recs []Written, synced bool)
	// Waits, if set, records the writer's "log file parallel write" (each
	// batch's write) and "log file fdatasync" (each fdatasync) wait events.
	Waits *waits.Registry
}

// Written is one record passed to Options.OnWrite.
type Written struct {
	Pos     Position
	Type    Type
	Payload []byte
}

// Position is where a record starts: its segment's sequence number and its
// byte offset in that segment. Positions of records are ordered like the
// records; the zero Position is before every record.
type Position struct {
	Segment uint64
	Offset  int64
}

// Less reports whether p is before q in the log.
func (p Position) Less(q Position) bool {
	if p.Segment != q.Segment {
		return p.Segment < q.Segment
	}
	return p.Offset < q.Offset
}

func (p Position) String() string { return fmt.Sprintf("%d:%d", p.Segment, p.Offset) }

// Stats are counters since Open, read without stopping the writer.
type Stats struct {
	Appends      uint64 // records written, by Append (acknowledged), AppendNoWait or AppendAsync
	Direct       uint64 // of which written by Append on its own goroutine, the log being idle
	Batches      uint64 // group commits: one write of one or more records
	Fsyncs       uint64 // fdatasync calls on segment files
	BytesWritten uint64 // record bytes written, headers and padding included
	Rotations    uint64 // segments started by the writer
	Recycled     uint64 // of which made from a released segment file
	Released     uint64 // segments released by Release
	Segment      uint64 // sequence number of the segment being written

	Replayed     uint64   // records passed to the replay callback by Open
	TornTailAt   Position // where Open cut a torn tail; zero if it did not
	TornTailSize int64    // bytes Open zeroed from TornTailAt on
}

// Log is an open decision log. Append may be called from any number of
// goroutines; one writer goroutine owns the files and group-commits.
type Log struct {
	opts Options
	open OpenFunc
	lock *os.File

	// wmu is held by whoever writes: the writer goroutine for each batch,
	// or an Append writing directly (writeDirect). The fields below it
	// up to failure are guarded by it after Open returns.
	wmu      sync.Mutex
	f        File
	seq      uint64
	off      int64 // where the next record goes
	size     int64 // size of the current segment
	unsynced bool  // the current segment has records written without fdatasync
	// recycled: the current segment was made from a released file, so the
	// writer ends each batch with a zero header (flagRecycled).
	recycled bool
	buf      []byte
	batch    []*request
	written  []Written // reused for Options.OnWrite
	// batchLimit is the record bytes at which the writer stops adding
	// requests to a batch: BatchMaxBytes in batch mode, else maxBatchBytes.
	batchLimit int64
	pipe       *pipeline
	failure    *WriteError

	failed atomic.Pointer[WriteError] // set once by the writer, read by Append

	// pending counts requests sent on reqs that the writer has not yet
	// taken into a batch under wmu. Append writes directly only when it
	// is 0, so a direct write never passes a record queued before it.
	pending atomic.Int64

	mu     sync.RWMutex // held for reading while sending on reqs, for writing to close it
	closed bool
	reqs   chan *request
	done   chan struct{} // closed when the writer has exited

	closeOnce sync.Once
	closeErr  error

	// smu guards the bookkeeping of segment files: the live range, their
	// sizes and the released files waiting for reuse. The writer takes it
	// to rotate, Release and the pipeline to change the free list.
	smu     sync.Mutex
	first   uint64   // oldest live segment
	sizes   []int64  // sizes of the live segments first..current-1
	sealed  int64    // their sum
	curSize int64    // size of the current segment
	free    []uint64 // released segment files (<seq>.free), oldest first
	relMu   sync.Mutex
	offset  atomic.Int64 // l.off, for Usage

	appends, direct, batches, fsyncs, bytes, rotations, recycledN, released, segment atomic.Uint64
	replayed                                                                         uint64
	tornAt                                                                           Position
	tornSize                                                                         int64
}

// Open opens the log in opts.Dir, creating it if needed, and replays it:
// replay (if not nil) is called for every record of the live segments (not
// released; after a crash in Release, possibly some released ones too: see
// the package documentation, "Circular use"), in log order, before Open
// returns. The payload passed to replay is valid only during the call. An
// error from replay stops Open and is returned wrapped.
//
// A torn tail (a bad record at the end of the last segment, with no valid
// record after it) is cut: zeroed and synced, and writing resumes there.
// Any other damage stops Open with a *CorruptionError and leaves the files
// as they are; a segment from a newer Tandem stops it with a *VersionError.
// If Open fails, whatever replay built must be discarded.
func Open(opts Options, replay func(pos Position, typ Type, payload []byte) error) (*Log, error) {
	if err := opts.normalize(); err != nil {
		return nil, err
	}
	l := &Log{
		opts:       opts,
		open:       opts.OpenFile,
		reqs:       make(chan *request, maxQueued),
		done:       make(chan struct{}),
		batchLimit: maxBatchBytes,
	}
	if opts.BatchWindow > 0 {
		l.batchLimit = int64(opts.BatchMaxBytes)
	}
	if err := makeDir(opts.Dir, opts.NoSync); err != nil {
		return nil, err
	}
	lock, err := lockDir(opts.Dir)
	if err != nil {
		return nil, err
	}
	l.lock = lock
	if err := l.load(replay); err != nil {
		lock.Close()
		return nil, err
	}
	l.segment.Store(l.seq)
	l.offset.Store(l.off)
	l.curSize = l.size
	l.pipe = startPipeline(opts.Dir, opts.SegmentSize, opts.NoSync, l.open, l.takeFree, l.seq+1)
	go l.run()
	return l, nil
}

func (o *Options) normalize() error {
	if o.Dir == "" {
		return errors.New("wal: Options.Dir is empty")
	}
	if o.SegmentSize == 0 {
		o.SegmentSize = DefaultSegmentSize
	}
	if o.SegmentSize < minSegmentSize || o.SegmentSize%alignment != 0 {
		return fmt.Errorf("wal: Options.SegmentSize %d must be a multiple of %d and at least %d",
			o.SegmentSize, alignment, minSegmentSize)
	}
	if o.MaxSize < 0 {
		return fmt.Errorf("wal: Options.MaxSize %d is negative", o.MaxSize)
	}
	if o.BatchWindow < 0 {
		return fmt.Errorf("wal: Options.BatchWindow %v is negative", o.BatchWindow)
	}
	switch {
	case o.BatchMaxBytes < 0 || o.BatchMaxBytes > maxBatchBytes:
		return fmt.Errorf("wal: Options.BatchMaxBytes %d must be between 0 and %d", o.BatchMaxBytes, maxBatchBytes)
	case o.BatchMaxBytes == 0:
		o.BatchMaxBytes = maxBatchBytes
	}
	if o.OpenFile == nil {
		o.OpenFile = openOSFile
	}
	return nil
}

// makeDir creates dir if it does not exist and makes its entry durable.
func makeDir(dir string, noSync bool) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	if err := os.MkdirAll(dir, dirPerm); err != nil {
		return fmt.Errorf("wal: create log directory: %w", err)
	}
	if noSync {
		return nil
	}
	return syncDir(filepath.Dir(filepath.Clean(dir)))
}

// maxPayload is the largest payload Append takes with this segment size.
func (l *Log) maxPayload() int {
	room := l.opts.SegmentSize - segmentHeaderSize - headerSize
	return int(min(room, MaxPayloadSize))
}

// Append adds one record and returns its position once the record is
// durable (written and fdatasynced, together with every other record
// waiting at that moment). If one Append returns before another starts,
// its record is earlier in the log; concurrent Appends are ordered by the
// writer, and Position tells the order.
//
// Errors: ErrInvalidType, ErrRecordTooLarge, ErrClosed (nothing written);
// ErrOutcomeUnknown (the write or fdatasync of this record failed: it may
// or may not be in the log after a restart); ErrLogFailed (an earlier
// failure made the log unusable; nothing written). payload is not retained
// after Append returns.
func (l *Log) Append(typ Type, payload []byte) (Position, error) {
	if err := l.check(typ, payload); err != nil {
		return Position{}, err
	}
	r := requestPool.Get().(*request)
	r.typ, r.payload = typ, payload
	if !l.writeDirect(r) {
		if err := l.enqueue(r); err != nil {
			r.reset()
			return Position{}, err
		}
	}
	<-r.done
	pos, err := r.pos, r.err
	r.reset()
	return pos, err
}

// writeDirect writes and fdatasyncs r on the caller's goroutine when the
// log is idle in immediate mode: nothing queued, nothing being written. It
// reports whether it did; r is then complete. Going through the writer
// goroutine costs two goroutine wake-ups, each of which may have to wake
// an idle CPU (about 10 µs each on a small VM, next to a 100 µs
// fdatasync); an idle log has no batch to gather, so nothing is lost by
// skipping them. Requests that arrive meanwhile queue for the writer
// goroutine, which takes them all as one batch once wmu is free, exactly
// as during one of its own flushes.
func (l *Log) writeDirect(r *request) bool {
	if l.opts.BatchWindow > 0 || l.pending.Load() != 0 {
		return false
	}
	l.mu.RLock() // Close waits for a direct write to finish
	defer l.mu.RUnlock()
	if l.closed || !l.wmu.TryLock() {
		return false
	}
	defer l.wmu.Unlock()
	if l.pending.Load() != 0 {
		return false // queued before us: the writer must write them first
	}
	batch := append(l.batch[:0], r) //nolint:gocritic // reuses l.batch's array; l.commit takes it
	l.commit(batch)
	clear(batch)
	l.batch = batch[:0]
	l.direct.Add(1)
	return true
}

// check returns the error for a record that no log could take, or for any
// record once the log has failed.
func (l *Log) check(typ Type, payload []byte) error {
	if typ == typeEnd || typ == typeSegmentHeader {
		return fmt.Errorf("%w %d: types 0 and 255 are reserved", ErrInvalidType, typ)
	}
	if max := l.maxPayload(); len(payload) > max {
		return fmt.Errorf("%w: %d-byte payload, at most %d with %d-byte segments",
			ErrRecordTooLarge, len(payload), max, l.opts.SegmentSize)
	}
	if werr := l.failed.Load(); werr != nil {
		return &appendError{kind: ErrLogFailed, cause: werr}
	}
	return nil
}

// enqueue hands r to the writer, or returns ErrClosed.
func (l *Log) enqueue(r *request) error {
	if l.opts.BatchWindow > 0 {
		r.queued = time.Now() // the batch window runs from here
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return ErrClosed
	}
	l.pending.Add(1)
	l.reqs <- r
	return nil
}

// Close waits for queued records to be written (AppendNoWait's and
// AppendAsync's included, made durable) without waiting for a batch window, stops the writer and the segment pipeline and closes the
// files. Appends after Close return ErrClosed. Calling Close again is safe
// and returns nil.
func (l *Log) Close() error {
	first := false
	l.closeOnce.Do(func() {
		first = true
		l.mu.Lock()
		l.closed = true
		close(l.reqs)
		l.mu.Unlock()
		<-l.done // the writer has exited: its fields are ours now
		l.pipe.close()
		if l.failure == nil && !l.sync(nil) {
			l.closeErr = fmt.Errorf("wal: close: %w", l.failure)
		}
		if err := l.f.Close(); err != nil && l.closeErr == nil {
			l.closeErr = fmt.Errorf("wal: close segment: %w", err)
		}
		l.lock.Close()
	})
	if !first {
		return nil
	}
	return l.closeErr
}

// Stats returns the log's counters.
func (l *Log) Stats() Stats {
	return Stats{
		Appends:      l.appends.Load(),
		Direct:       l.direct.Load(),
		Batches:      l.batches.Load(),
		Fsyncs:       l.fsyncs.Load(),
		BytesWritten: l.bytes.Load(),
		Rotations:    l.rotations.Load(),
		Recycled:     l.recycledN.Load(),
		Released:     l.released.Load(),
		Segment:      l.segment.Load(),
		Replayed:     l.replayed,
		TornTailAt:   l.tornAt,
		TornTailSize: l.tornSize,
	}
}
