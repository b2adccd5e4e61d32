package wal

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
)

// load finds the segments, replays them and leaves the last one open for
// writing, with its torn tail (if any) cut. With no segments it creates
// segment 1.
//
// Released segment files (<seq>.free) are not replayed; neither is a
// segment file numbered at or below the newest of them, whose rename a
// crash in Release lost (it is released now). Replay starts at the first
// segment after those, and the segments from there on must have no gap.
func (l *Log) load(replay func(Position, Type, []byte) error) error {
	dir := l.opts.Dir
	if err := removeTemps(dir); err != nil {
		return err
	}
	seqs, frees, err := listFiles(dir)
	if err != nil {
		return err
	}
	if seqs, frees, err = l.finishRelease(seqs, frees); err != nil {
		return err
	}
	if err := checkContiguous(dir, seqs); err != nil {
		return err
	}
	l.free = frees
	if len(seqs) == 0 {
		if len(frees) > 0 {
			return &CorruptionError{File: filepath.Join(dir, segmentName(frees[len(frees)-1]+1)), Offset: 0,
				Reason: fmt.Sprintf("no live segment after the %d released ones (*%s): the live segments were removed", len(frees), freeExt)}
		}
		l.first = 1
		l.segment.Store(1)
		return l.createFirst()
	}
	l.first = seqs[0]
	var buf []byte
	for i, seq := range seqs {
		last := i == len(seqs)-1
		var f File
		var size int64
		f, buf, size, err = l.readSegment(seq, last, buf)
		if err == nil {
			err = l.replaySegment(f, buf, size, seq, last, replay)
		}
		if err != nil || !last {
			if f != nil {
				f.Close()
			}
		}
		if err != nil {
			return err
		}
		if last {
			l.f, l.seq, l.size = f, seq, int64(len(buf))
			l.segment.Store(seq)
		} else {
			l.sizes = append(l.sizes, size)
			l.sealed += size
		}
	}
	if victims := l.trimLocked(); len(victims) > 0 {
		for _, s := range victims {
			if err := os.Remove(filepath.Join(dir, freeName(s))); err != nil {
				return fmt.Errorf("wal: delete released segment: %w", err)
			}
		}
	}
	return nil
}

// finishRelease completes a Release that a crash interrupted: every
// segment numbered at or below the newest released one was released, so
// it is renamed too (and the directory synced), and joins the free list.
func (l *Log) finishRelease(seqs, frees []uint64) (live, free []uint64, err error) {
	if len(frees) == 0 {
		return seqs, frees, nil
	}
	newest := frees[len(frees)-1]
	i := 0
	for i < len(seqs) && seqs[i] <= newest {
		s := seqs[i]
		if err := os.Rename(filepath.Join(l.opts.Dir, segmentName(s)), filepath.Join(l.opts.Dir, freeName(s))); err != nil {
			return nil, nil, fmt.Errorf("wal: finish the release of segment %d: %w", s, err)
		}
		frees = append(frees, s)
		i++
	}
	if i == 0 {
		return seqs, frees, nil
	}
	if !l.opts.NoSync {
		if err := syncDir(l.opts.Dir); err != nil {
			return nil, nil, err
		}
	}
	slices.Sort(frees)
	return seqs[i:], frees, nil
}

// createFirst creates segment 1 of a new log.
func (l *Log) createFirst() error {
	f, err := createSegment(l.open, l.opts.Dir, 1, l.opts.SegmentSize, l.opts.NoSync, nil)
	if err != nil {
		return err
	}
	if err := installSegment(l.opts.Dir, 1, l.opts.NoSync); err != nil {
		f.Close()
		return err
	}
	l.f, l.seq, l.off, l.size = f, 1, segmentHeaderSize, l.opts.SegmentSize
	return nil
}

// readSegment opens segment seq (for writing if it is the last) and reads
// it whole into buf, grown as needed. It returns the file and its size; the
// returned slice's length is the size rounded up to a multiple of 8,
// zero-filled past the end of the file.
func (l *Log) readSegment(seq uint64, last bool, buf []byte) (File, []byte, int64, error) {
	path := filepath.Join(l.opts.Dir, segmentName(seq))
	fi, err := os.Stat(path)
	if err != nil {
		return nil, buf, 0, fmt.Errorf("wal: open segment: %w", err)
	}
	size := fi.Size()
	flag := os.O_RDONLY
	if last {
		flag = os.O_RDWR
	}
	f, err := l.open(path, flag, 0)
	if err != nil {
		return nil, buf, 0, fmt.Errorf("wal: open segment: %w", err)
	}
	n := int(size+alignment-1) &^ (alignment - 1)
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	got, err := f.ReadAt(buf[:size], 0)
	if errors.Is(err, io.EOF) && int64(got) == size {
		err = nil
	}
	if err != nil {
		return f, buf, 0, fmt.Errorf("wal: read segment %s: %w", path, err)
	}
	clear(buf[size:])
	return f, buf, size, nil
}

// replaySegment checks the header of segment seq held in b, calls replay
// for its records and decides what a bad record means: in the last segment
// with nothing valid after it, a torn tail, cut here; anywhere else,
// corruption.
func (l *Log) replaySegment(f File, b []byte, size int64, seq uint64, last bool, replay func(Position, Type, []byte) error) error {
	path := f.Name()
	flags, err := checkSegmentHeader(b, seq, path)
	if err != nil {
		return err
	}
	recycled := flags&flagRecycled != 0
	var fn func(int, Type, []byte) error
	if replay != nil {
		fn = func(off int, typ Type, payload []byte) error {
			pos := Position{Segment: seq, Offset: int64(off)}
			if err := replay(pos, typ, payload); err != nil {
				return fmt.Errorf("wal: replay of record %s (%s offset %d): %w", pos, path, off, err)
			}
			l.replayed++
			return nil
		}
	} else {
		fn = func(int, Type, []byte) error { l.replayed++; return nil }
	}
	s, err := scanSegment(b, seq, recycled, fn)
	if err != nil {
		return err
	}
	if recycled {
		return l.endRecycled(f, b, seq, last, s)
	}
	switch {
	case s.validAt >= 0:
		return &CorruptionError{File: path, Offset: int64(s.end), Reason: s.describe()}
	case !last && (s.bad != "" || s.dirty()):
		reason := s.bad
		if reason == "" {
			reason = "nonzero bytes after the last record"
		}
		return &CorruptionError{File: path, Offset: int64(s.end),
			Reason: reason + " in a segment that is not the last"}
	case !last:
		return nil
	}
	l.off = int64(s.end)
	if s.bad == "" && !s.dirty() && size == int64(len(b)) {
		return nil
	}
	return l.cutTail(f, b, size, seq, s)
}

// endRecycled decides what the end of the records of a recycled segment
// means. Its records end at a zero header (the writer ends every batch
// with one) or at the end of the file; what follows is the file's earlier
// content. A bad record instead is a torn write in the last segment (cut by
// writing the zero header that the torn batch did not get to), corruption
// in any other. A valid record after the end is corruption in both.
func (l *Log) endRecycled(f File, b []byte, seq uint64, last bool, s segmentScan) error {
	path := f.Name()
	switch {
	case s.validAt >= 0:
		return &CorruptionError{File: path, Offset: int64(s.end), Reason: s.describe()}
	case !last && s.bad != "":
		return &CorruptionError{File: path, Offset: int64(s.end), Reason: s.bad + " in a segment that is not the last"}
	case !last:
		return nil
	}
	l.off, l.recycled = int64(s.end), true
	if s.bad == "" {
		return nil
	}
	if s.end+headerSize <= len(b) {
		if _, err := f.WriteAt(zeroHeader[:], int64(s.end)); err != nil {
			return fmt.Errorf("wal: cut torn tail of %s at offset %d: %w", path, s.end, err)
		}
		if !l.opts.NoSync {
			if err := f.Sync(); err != nil {
				return fmt.Errorf("wal: cut torn tail of %s: %w", path, err)
			}
		}
	}
	l.tornAt = Position{Segment: seq, Offset: int64(s.end)}
	l.tornSize = headerSize
	return nil
}

// cutTail zeroes the torn tail of the last segment from s.end on and syncs
// it, so that writing resumes at s.end and no stale bytes are ever read as
// records.
func (l *Log) cutTail(f File, b []byte, size int64, seq uint64, s segmentScan) error {
	zeros := make([]byte, min(s.zeroEnd-s.end, 1<<20))
	for off := s.end; off < s.zeroEnd; off += len(zeros) {
		chunk := zeros[:min(len(zeros), s.zeroEnd-off)]
		if _, err := f.WriteAt(chunk, int64(off)); err != nil {
			return fmt.Errorf("wal: cut torn tail of %s at offset %d: %w", f.Name(), s.end, err)
		}
	}
	if size != int64(len(b)) {
		// A file cut short inside a word: give it back the whole word.
		if err := f.Truncate(int64(len(b))); err != nil {
			return fmt.Errorf("wal: cut torn tail of %s: %w", f.Name(), err)
		}
	}
	if !l.opts.NoSync {
		if err := f.Sync(); err != nil {
			return fmt.Errorf("wal: cut torn tail of %s: %w", f.Name(), err)
		}
	}
	if s.zeroEnd > s.end {
		l.tornAt = Position{Segment: seq, Offset: int64(s.end)}
		l.tornSize = int64(s.zeroEnd - s.end)
	}
	return nil
}
