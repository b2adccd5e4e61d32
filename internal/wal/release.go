package wal

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/tandem-tx/tandem/internal/failpoint"
)

// Usage is how much of the log is live: the segments from First to Current,
// which Open would replay, and the released files kept for reuse.
type Usage struct {
	First   uint64 // oldest live segment (not released)
	Current uint64 // segment being written
	Offset  int64  // write position in Current
	// Used is the number of bytes from the start of First to the write
	// position: the sizes of the live segments before Current, plus Offset.
	Used int64
	// Free is the number of released segment files kept for reuse.
	Free int
	// DiskBytes is the size of the live and released segment files (not
	// counting the next segment being prepared).
	DiskBytes int64
}

// Segment returns the sequence number of the segment being written. A
// record queued after the call goes into this segment or a later one.
func (l *Log) Segment() uint64 { return l.segment.Load() }

// Usage reports the live segments and the bytes they hold.
func (l *Log) Usage() Usage {
	l.smu.Lock()
	defer l.smu.Unlock()
	off := l.offset.Load()
	u := Usage{First: l.first, Current: l.segment.Load(), Offset: off, Used: l.sealed + off, Free: len(l.free)}
	u.DiskBytes = l.sealed + l.curSize + int64(len(l.free))*l.opts.SegmentSize
	return u
}

// Release tells the log that its owner no longer needs the segments before
// before: the log may reuse their files for new segments. Segment Current
// (and anything after it) is never released; before is capped at it.
//
// Each released segment <seq>.wal is renamed <seq>.free, in increasing
// order, then the directory is fsynced once; Open replays only the
// segments after the newest released one, and the writer's pipeline reuses
// released files, oldest first, instead of creating new ones. Released
// files beyond Options.MaxSize are deleted.
//
// A crash during Release leaves some of these segments not yet renamed;
// Open then treats every <seq>.wal with a sequence number at or below the
// newest <seq>.free as released too, so the owner never sees a segment it
// released except after a crash, before Release's fsync of the directory
// (then, some of them: a suffix of the released range, just before First).
// An owner must therefore accept replaying records it had released: the
// records must be idempotent or later ones must supersede them.
//
// Errors: ErrClosed; a failed rename or directory fsync (segments renamed
// before the failure are released but not reused before the next Open).
func (l *Log) Release(before uint64) error {
	l.mu.RLock() // Close waits for a Release to finish
	defer l.mu.RUnlock()
	if l.closed {
		return ErrClosed
	}
	l.relMu.Lock()
	defer l.relMu.Unlock()
	l.smu.Lock()
	first := l.first
	before = min(before, l.segment.Load())
	l.smu.Unlock()
	if before <= first {
		return nil
	}
	if err := failpoint.Inject("wal-release-before-rename"); err != nil {
		return fmt.Errorf("wal: release: %w", err)
	}
	dir := l.opts.Dir
	upto := first // segments first..upto-1 are renamed
	var err error
	for s := first; s < before; s++ {
		if err = os.Rename(filepath.Join(dir, segmentName(s)), filepath.Join(dir, freeName(s))); err != nil {
			err = fmt.Errorf("wal: release segment %d: %w", s, err)
			break
		}
		upto = s + 1
	}
	if upto == first {
		return err
	}
	synced := false
	if ferr := failpoint.Inject("wal-release-after-rename"); ferr != nil {
		err = fmt.Errorf("wal: release: %w", ferr)
	} else if l.opts.NoSync {
		synced = true
	} else if serr := syncDir(dir); serr != nil {
		err = serr
	} else {
		synced = true
	}
	l.smu.Lock()
	for s := first; s < upto; s++ {
		l.sealed -= l.sizes[0]
		l.sizes = l.sizes[1:]
		if synced {
			// Reuse only once every rename is durable: a crash must never
			// leave a released segment whose rename was lost behind a
			// newer one that was reused (a gap in the live segments).
			l.free = append(l.free, s)
		}
	}
	l.first = upto
	victims := l.trimLocked()
	l.smu.Unlock()
	l.released.Add(upto - first)
	for _, s := range victims {
		if rerr := os.Remove(filepath.Join(dir, freeName(s))); rerr != nil && err == nil {
			err = fmt.Errorf("wal: delete released segment: %w", rerr)
		}
	}
	return err
}

// trimLocked takes off the free list, and returns, the released files that
// do not fit in Options.MaxSize next to the live segments. l.smu is held.
func (l *Log) trimLocked() []uint64 {
	if l.opts.MaxSize <= 0 {
		return nil
	}
	keep := l.opts.MaxSize/l.opts.SegmentSize - int64(l.segment.Load()-l.first+1)
	if extra := int64(len(l.free)) - max(keep, 0); extra > 0 {
		victims := append([]uint64(nil), l.free[:extra]...)
		l.free = l.free[extra:]
		return victims
	}
	return nil
}

// takeFree hands the pipeline the oldest released file to reuse.
func (l *Log) takeFree() (uint64, bool) {
	l.smu.Lock()
	defer l.smu.Unlock()
	if len(l.free) == 0 {
		return 0, false
	}
	s := l.free[0]
	l.free = l.free[1:]
	return s, true
}
