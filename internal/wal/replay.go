package wal

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// load finds the segments, replays them and leaves the last one open for
// writing, with its torn tail (if any) cut. With no segments it creates
// segment 1.
func (l *Log) load(replay func(Position, Type, []byte) error) error {
	dir := l.opts.Dir
	if err := removeTemps(dir); err != nil {
		return err
	}
	seqs, err := listSegments(dir)
	if err != nil {
		return err
	}
	if err := checkContiguous(dir, seqs); err != nil {
		return err
	}
	if len(seqs) == 0 {
		return l.createFirst()
	}
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
		}
	}
	return nil
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
	if err := checkSegmentHeader(b, seq, path); err != nil {
		return err
	}
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
	s, err := scanSegment(b, seq, fn)
	if err != nil {
		return err
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
