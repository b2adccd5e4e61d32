package wal

import (
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/tandem-tx/tandem/internal/failpoint"
	"github.com/tandem-tx/tandem/waits"
)

const (
	// maxQueued is the capacity of the queue between Append and the writer.
	maxQueued = 4096
	// maxBatchBytes stops the drain of the queue into one batch; the rest
	// goes into the next batch, right after. It is also the largest
	// Options.BatchMaxBytes.
	maxBatchBytes = 4 << 20
	// maxKeptBuffer is the largest encoding buffer the writer keeps
	// between batches.
	maxKeptBuffer = 8 << 20
)

// mode says what a request asks of the writer.
type mode uint8

const (
	modeWait   mode = iota // Append: write, fdatasync, wake the caller
	modeNoWait             // AppendNoWait: write; no fdatasync of its own; nobody waits
	modeAsync              // AppendAsync: write and fdatasync; nobody waits
	modeSync               // Sync: no record; fdatasync what is written; wake the caller
	modeSwitch             // Switch: no record; close the current segment; wake the caller
)

// request is one Append waiting for the writer. Requests are pooled so that
// a steady-state Append allocates nothing.
type request struct {
	typ     Type
	payload []byte
	pos     Position
	err     error
	mode    mode
	queued  time.Time     // when it was queued; set in batch mode only
	done    chan struct{} // capacity 1; the writer sends once per use
}

// waited reports whether a caller waits on r.done.
func (r *request) waited() bool {
	return r.mode == modeWait || r.mode == modeSync || r.mode == modeSwitch
}

// durable reports whether r's batch must be fdatasynced.
func (r *request) durable() bool { return r.mode != modeNoWait }

// isRecord reports whether r carries a record (Sync's request does not).
func (r *request) isRecord() bool { return r.mode != modeSync && r.mode != modeSwitch }

var requestPool = sync.Pool{New: func() any {
	return &request{done: make(chan struct{}, 1)}
}}

// reset clears r and puts it back in the pool.
func (r *request) reset() {
	*r = request{done: r.done}
	requestPool.Put(r)
}

// finish hands r its result (or recycles a request nobody waits for). The
// writer must not touch r afterwards.
func finish(r *request, pos Position, err error) {
	if !r.waited() {
		r.reset()
		return
	}
	r.pos, r.err = pos, err
	r.done <- struct{}{}
}

// run is the writer goroutine: the group-commit loop. It blocks for one
// request, takes wmu (waiting for a direct write to finish), then takes
// every request already queued without waiting for more, writes them with
// one write and one fdatasync, and wakes their Appends. Requests that arrive meanwhile form the next batch. It exits
// when Close has closed the queue and the queue is empty.
//
// In immediate mode (BatchWindow 0) nothing else decides when to flush: no
// sleep, timer or spin. In batch mode the writer then keeps taking requests
// as they come until BatchWindow has passed since the batch's first
// request was queued, or the batch holds BatchMaxBytes, or Close.
func (l *Log) run() {
	defer close(l.done)
	var timer *time.Timer
	if l.opts.BatchWindow > 0 {
		timer = time.NewTimer(time.Hour)
		timer.Stop()
	}
	for {
		r, ok := <-l.reqs
		if !ok {
			return
		}
		l.wmu.Lock()                    // wait for a direct write (Append's writeDirect) to finish
		batch := append(l.batch[:0], r) //nolint:gocritic // reuses l.batch's array
		bytes := reqSize(r)
		batch, bytes, ok = l.drain(batch, bytes)
		if ok && timer != nil {
			batch, ok = l.gather(batch, bytes, timer)
		}
		l.pending.Add(-int64(len(batch)))
		l.commit(batch)
		clear(batch)
		l.batch = batch[:0]
		l.wmu.Unlock()
		if !ok {
			return
		}
	}
}

// reqSize is the number of log bytes r takes.
func reqSize(r *request) int64 {
	if !r.isRecord() {
		return 0
	}
	return recordSize(len(r.payload))
}

// drain adds to batch every request already queued, without waiting, until
// the batch holds l.batchLimit bytes. ok is false once the queue is closed.
func (l *Log) drain(batch []*request, bytes int64) (_ []*request, _ int64, ok bool) {
	for bytes < l.batchLimit {
		select {
		case r, ok := <-l.reqs:
			if !ok {
				return batch, bytes, false
			}
			batch = append(batch, r)
			bytes += reqSize(r)
		default:
			return batch, bytes, true
		}
	}
	return batch, bytes, true
}

// gather is batch mode's wait: it adds requests to batch as they arrive
// until BatchWindow has passed since batch[0] was queued, the batch holds
// l.batchLimit bytes, or the queue is closed (ok false). timer is stopped
// and unfired; gather leaves it so. The writer blocks in a select on the
// queue and the timer: a request that fills the batch ends the wait at
// once, and Close never waits for the window.
func (l *Log) gather(batch []*request, bytes int64, timer *time.Timer) (_ []*request, ok bool) {
	if bytes >= l.batchLimit {
		return batch, true
	}
	wait := time.Until(batch[0].queued.Add(l.opts.BatchWindow))
	if wait <= 0 {
		return batch, true
	}
	timer.Reset(wait)
	defer timer.Stop() // since Go 1.23, Stop leaves no stale tick in timer.C
	for bytes < l.batchLimit {
		select {
		case r, ok := <-l.reqs:
			if !ok {
				return batch, false
			}
			batch = append(batch, r)
			bytes += reqSize(r)
		case <-timer.C:
			return batch, true
		}
	}
	return batch, true
}

// commit writes batch and completes each of its requests. Records go into
// the current segment while they fit; when one does not, the records before
// it are written and synced, then the writer rotates to the next segment.
// A record never crosses a segment.
func (l *Log) commit(batch []*request) {
	if l.failure != nil {
		l.refuse(batch)
		return
	}
	buf := l.buf[:0]
	first := 0 // batch[first:i] are encoded in buf
	for i, r := range batch {
		n := reqSize(r)
		if r.mode == modeSwitch {
			// Everything before it goes into the current segment, which is
			// then closed (unless it holds no record yet).
			if !l.flush(buf, batch[first:i]) {
				l.refuse(batch[i:])
				return
			}
			buf, first = buf[:0], i+1
			if l.off > segmentHeaderSize && !l.rotate() {
				l.refuse(batch[i:])
				return
			}
			finish(r, Position{Segment: l.seq, Offset: l.off}, nil)
			continue
		}
		if l.off+int64(len(buf))+n > l.size {
			if !l.flush(buf, batch[first:i]) {
				l.refuse(batch[i:])
				return
			}
			buf, first = buf[:0], i
			if !l.rotate() {
				l.refuse(batch[i:])
				return
			}
		}
		r.pos = Position{Segment: l.seq, Offset: l.off + int64(len(buf))}
		if r.isRecord() {
			buf = appendRecord(buf, l.seq, r.typ, r.payload)
		}
	}
	l.flush(buf, batch[first:])
	if cap(buf) <= maxKeptBuffer {
		l.buf = buf[:0]
	} else {
		l.buf = nil
	}
}

// flush writes buf, the encoding of reqs, at the end of the current segment
// with one write, fdatasyncs once (unless every one of reqs is an
// AppendNoWait), and completes reqs. A Sync request has no bytes in buf:
// it only asks for the fdatasync. On failure it fails the log, completes
// reqs with ErrOutcomeUnknown and returns false.
//
// In a recycled segment the write also carries a zero header after the
// records (when it fits), so that replay finds where they end: the bytes
// after them are what the file held before, not zeros. The next batch
// overwrites it.
func (l *Log) flush(buf []byte, reqs []*request) bool {
	if len(reqs) == 0 {
		return true
	}
	if len(buf) > 0 {
		if err := failpoint.Inject("wal-before-write"); err != nil {
			l.fail(reqs, "write", l.f.Name(), l.off, err)
			return false
		}
		out := buf
		if l.recycled && l.off+int64(len(buf))+headerSize <= l.size {
			out = append(buf, zeroHeader[:]...) //nolint:gocritic // buf's array, with the end marker after it
		}
		start := time.Now()
		_, err := l.f.WriteAt(out, l.off)
		if l.opts.Waits != nil {
			l.opts.Waits.Since(waits.LogFileParallelWrite, start)
		}
		if err != nil {
			l.fail(reqs, "write", l.f.Name(), l.off, err)
			return false
		}
		l.unsynced = true
		if err := failpoint.Inject("wal-after-write"); err != nil {
			l.fail(reqs, "write", l.f.Name(), l.off, err)
			return false
		}
	}
	synced := slices.ContainsFunc(reqs, (*request).durable)
	if synced && !l.sync(reqs) {
		return false
	}
	if l.opts.OnWrite != nil {
		w := l.written[:0]
		for _, r := range reqs {
			if r.isRecord() {
				w = append(w, Written{Pos: r.pos, Type: r.typ, Payload: r.payload})
			}
		}
		if len(w) > 0 || synced {
			l.opts.OnWrite(w, synced)
		}
		clear(w)
		l.written = w[:0]
	}
	if len(buf) > 0 {
		l.off += int64(len(buf))
		l.offset.Store(l.off)
		l.batches.Add(1)
		l.bytes.Add(uint64(len(buf)))
	}
	records := 0
	for _, r := range reqs {
		if r.isRecord() {
			records++
		}
	}
	// Count before waking anyone: a returned Append is always in Stats.
	l.appends.Add(uint64(records))
	for _, r := range reqs {
		finish(r, r.pos, nil)
	}
	return true
}

// zeroHeader ends the records of a recycled segment.
var zeroHeader [headerSize]byte

// sync fdatasyncs the current segment if it has unsynced records. On
// failure it fails the log, completes reqs with ErrOutcomeUnknown and
// returns false.
func (l *Log) sync(reqs []*request) bool {
	if !l.unsynced || l.opts.NoSync {
		return true
	}
	start := time.Now()
	err := l.f.Sync()
	if l.opts.Waits != nil {
		l.opts.Waits.Since(waits.LogFileFdatasync, start)
	}
	l.fsyncs.Add(1)
	if err != nil {
		l.fail(reqs, "fdatasync", l.f.Name(), l.off, err)
		return false
	}
	l.unsynced = false
	return true
}

// rotate makes the segment prepared by the pipeline the current one, after
// syncing the current one: a segment is complete on disk before any record
// goes into the next, so only the last segment can have a torn tail.
func (l *Log) rotate() bool {
	if !l.sync(nil) {
		return false
	}
	seq := l.seq + 1
	name := filepath.Join(l.opts.Dir, segmentName(seq))
	next, recycled, err := l.pipe.take(seq)
	if err == nil {
		err = failpoint.Inject("wal-rotate-before-rename")
		if err == nil {
			err = installSegment(l.opts.Dir, seq, l.opts.NoSync)
		}
		if err == nil {
			err = failpoint.Inject("wal-rotate-after-rename")
		}
		if err != nil {
			next.Close()
		}
	}
	if err != nil {
		l.fail(nil, "rotate", name, 0, err)
		return false
	}
	// The old segment is synced; an error closing it cannot lose data.
	l.f.Close()
	l.smu.Lock()
	l.sizes = append(l.sizes, l.size)
	l.sealed += l.size
	l.f, l.seq, l.off, l.size, l.recycled = next, seq, segmentHeaderSize, l.opts.SegmentSize, recycled
	l.curSize = l.size
	l.offset.Store(l.off)
	l.segment.Store(seq)
	l.smu.Unlock()
	l.rotations.Add(1)
	if recycled {
		l.recycledN.Add(1)
	}
	return true
}

// fail makes the log failed for good and completes reqs, whose records were
// handed to the kernel, with ErrOutcomeUnknown.
func (l *Log) fail(reqs []*request, op, file string, off int64, err error) {
	werr := &WriteError{Op: op, File: file, Offset: off, Err: err}
	l.failure = werr
	l.failed.Store(werr)
	for _, r := range reqs {
		finish(r, Position{}, &appendError{kind: ErrOutcomeUnknown, cause: werr})
	}
}

// refuse completes reqs, whose records were not written, with ErrLogFailed.
func (l *Log) refuse(reqs []*request) {
	for _, r := range reqs {
		finish(r, Position{}, &appendError{kind: ErrLogFailed, cause: l.failure})
	}
}
