package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/tandem-tx/tandem/internal/fileutil"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/tandem-tx/tandem/internal/failpoint"
)

const (
	segmentMagic         = "TANDEMWL"
	formatVersion        = 2  // version 2 added the flags, recycled segments and terminators
	segmentHeaderPayload = 20 // magic (8) + version (2) + flags (2) + seq (8)

	// flagRecycled marks a segment written over a released segment file:
	// the bytes after its last record may be records of older segments
	// (invalid here: their checksums are seeded with another sequence
	// number), and the writer ends every batch with a zero header.
	flagRecycled uint16 = 1

	// segmentHeaderSize is the size of the segment header record, the
	// offset of a segment's first caller record.
	segmentHeaderSize = headerSize + 24

	segmentExt = ".wal"
	tmpExt     = ".wal.tmp"
	freeExt    = ".free"

	filePerm = 0o600
	dirPerm  = 0o700
)

func segmentName(seq uint64) string { return fmt.Sprintf("%016x%s", seq, segmentExt) }
func tmpName(seq uint64) string     { return fmt.Sprintf("%016x%s", seq, tmpExt) }
func freeName(seq uint64) string    { return fmt.Sprintf("%016x%s", seq, freeExt) }

// parseSegmentName returns the sequence number of a segment file name.
func parseSegmentName(name string) (uint64, bool) { return parseName(name, segmentExt) }

// parseFreeName returns the sequence number of a released segment file.
func parseFreeName(name string) (uint64, bool) { return parseName(name, freeExt) }

func parseName(name, ext string) (uint64, bool) {
	hex, ok := strings.CutSuffix(name, ext)
	if !ok || len(hex) != 16 {
		return 0, false
	}
	seq, err := strconv.ParseUint(hex, 16, 64)
	if err != nil || seq == 0 {
		return 0, false
	}
	return seq, true
}

// appendSegmentHeader appends the header record of segment seq to buf.
func appendSegmentHeader(buf []byte, seq uint64, flags uint16) []byte {
	var p [segmentHeaderPayload]byte
	copy(p[0:8], segmentMagic)
	binary.LittleEndian.PutUint16(p[8:10], formatVersion)
	binary.LittleEndian.PutUint16(p[10:12], flags)
	binary.LittleEndian.PutUint64(p[12:20], seq)
	return appendRecord(buf, seq, typeSegmentHeader, p[:])
}

// checkSegmentHeader validates the header record at the start of b, the
// contents of segment file path with sequence number seq, and returns its
// flags (always 0 in a version 1 segment, whose flags field was reserved).
//
// The header record is framed the same way in every format version, so its
// checksum is verified before its version is trusted: a damaged header is
// corruption, a well-formed header with a newer version is a VersionError.
func checkSegmentHeader(b []byte, seq uint64, path string) (uint16, error) {
	corrupt := func(reason string) (uint16, error) {
		return 0, &CorruptionError{File: path, Offset: 0, Reason: "segment header: " + reason}
	}
	if len(b) < segmentHeaderSize {
		return corrupt(fmt.Sprintf("file is %d bytes, shorter than a segment header", len(b)))
	}
	if string(b[headerSize:headerSize+8]) != segmentMagic {
		return corrupt("bad magic: not a Tandem decision log segment")
	}
	if got := binary.LittleEndian.Uint64(b[headerSize+12 : headerSize+20]); got != seq {
		return corrupt(fmt.Sprintf("header names segment %d but the file name says %d", got, seq))
	}
	typ, p, _, bad := decodeRecord(b[:segmentHeaderSize], seq)
	switch {
	case bad != "":
		return corrupt(bad)
	case typ != typeSegmentHeader || len(p) != segmentHeaderPayload:
		return corrupt("first record is not a segment header")
	}
	v := binary.LittleEndian.Uint16(p[8:10])
	switch {
	case v > formatVersion:
		return 0, &VersionError{File: path, Version: v}
	case v == 0:
		return corrupt("format version 0")
	case v == 1:
		return 0, nil // the field was reserved
	}
	flags := binary.LittleEndian.Uint16(p[10:12])
	if flags&^flagRecycled != 0 {
		return corrupt(fmt.Sprintf("unknown flags %#x", flags))
	}
	return flags, nil
}

// listSegments returns the sequence numbers of the segment files in dir,
// in increasing order.
func listSegments(dir string) ([]uint64, error) {
	seqs, _, err := listFiles(dir)
	return seqs, err
}

// listFiles returns the sequence numbers of the segment files (<seq>.wal)
// and of the released segment files (<seq>.free) in dir, each in
// increasing order.
func listFiles(dir string) (segs, frees []uint64, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("wal: list segments: %w", err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		if seq, ok := parseSegmentName(e.Name()); ok {
			segs = append(segs, seq)
		} else if seq, ok := parseFreeName(e.Name()); ok {
			frees = append(frees, seq)
		}
	}
	slices.Sort(segs)
	slices.Sort(frees)
	return segs, frees, nil
}

// checkContiguous returns a CorruptionError naming the first missing
// segment if seqs (sorted) has a gap.
func checkContiguous(dir string, seqs []uint64) error {
	for i := 1; i < len(seqs); i++ {
		if seqs[i] != seqs[i-1]+1 {
			return &CorruptionError{
				File:   filepath.Join(dir, segmentName(seqs[i-1]+1)),
				Offset: 0,
				Reason: fmt.Sprintf("segment %d is missing between %s and %s",
					seqs[i-1]+1, segmentName(seqs[i-1]), segmentName(seqs[i])),
			}
		}
	}
	return nil
}

// removeTemps deletes segment files left half-prepared by a crash. They
// were never renamed into place, so they hold no records.
func removeTemps(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("wal: list segments: %w", err)
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), tmpExt) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return fmt.Errorf("wal: remove unfinished segment: %w", err)
			}
		}
	}
	return nil
}

// createSegment prepares segment seq as <seq>.wal.tmp in dir: created,
// preallocated to size (and zero-filled unless noSync), header written, and
// (unless noSync) fdatasynced. Closing stop (if not nil) abandons the
// zero-fill with errStopped. On error nothing is left behind.
func createSegment(open OpenFunc, dir string, seq uint64, size int64, noSync bool, stop <-chan struct{}) (File, error) {
	path := filepath.Join(dir, tmpName(seq))
	f, err := open(path, os.O_CREATE|os.O_TRUNC|os.O_RDWR, filePerm)
	if err != nil {
		return nil, fmt.Errorf("wal: create segment: %w", err)
	}
	err = preallocate(f, size, !noSync, stop)
	if err == nil {
		_, err = f.WriteAt(appendSegmentHeader(nil, seq, 0), 0)
	}
	if err == nil && !noSync {
		err = f.Sync()
	}
	if err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("wal: prepare segment %s: %w", path, err)
	}
	return f, nil
}

// errWrongSize: a released segment file has another size than new
// segments; it is deleted rather than reused.
var errWrongSize = errors.New("wal: released segment has another size")

// recycleSegment prepares segment seq as <seq>.wal.tmp from the released
// segment file <from>.free instead of creating one: renamed, its header
// rewritten (flagged recycled) and followed by a zero header, fdatasynced
// (unless noSync). Nothing else is written: the file is already allocated
// and written over its whole size, and what it held stays behind the zero
// header, invalid in segment seq because every record's checksum is seeded
// with its segment's sequence number.
//
// A crash at any step is harmless: the file is either still <from>.free
// (released: Open reuses it later) or <seq>.wal.tmp (deleted by Open).
// On error the file is deleted; the caller creates a new segment instead.
func recycleSegment(open OpenFunc, dir string, from, seq uint64, size int64, noSync bool) (File, error) {
	src, path := filepath.Join(dir, freeName(from)), filepath.Join(dir, tmpName(seq))
	fi, err := os.Stat(src)
	if err != nil {
		return nil, fmt.Errorf("wal: recycle segment: %w", err)
	}
	if fi.Size() != size {
		os.Remove(src)
		return nil, errWrongSize
	}
	if err := os.Rename(src, path); err != nil {
		os.Remove(src)
		return nil, fmt.Errorf("wal: recycle segment: %w", err)
	}
	if err := failpoint.Inject("wal-recycle-after-rename"); err != nil {
		os.Remove(path)
		return nil, err
	}
	f, err := open(path, os.O_RDWR, 0)
	if err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("wal: recycle segment: %w", err)
	}
	hdr := appendSegmentHeader(make([]byte, 0, segmentHeaderSize+headerSize), seq, flagRecycled)
	hdr = append(hdr, make([]byte, headerSize)...) // a zero header: no records yet
	_, err = f.WriteAt(hdr, 0)
	if err == nil && !noSync {
		err = f.Sync()
	}
	if err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("wal: recycle %s as segment %d: %w", src, seq, err)
	}
	return f, nil
}

// installSegment renames the prepared segment seq into place and makes the
// rename durable by syncing the directory.
func installSegment(dir string, seq uint64, noSync bool) error {
	from, to := filepath.Join(dir, tmpName(seq)), filepath.Join(dir, segmentName(seq))
	if err := os.Rename(from, to); err != nil {
		return fmt.Errorf("wal: install segment: %w", err)
	}
	if noSync {
		return nil
	}
	return syncDir(dir)
}

// syncDir fsyncs a directory so that entries created or renamed in it
// survive a crash.
func syncDir(dir string) error {
	if err := fileutil.SyncDir(dir); err != nil {
		return fmt.Errorf("wal: %w", err)
	}
	return nil
}

// zeroChunk is the size of the writes that zero-fill a segment.
const zeroChunk = 1 << 20

// zeroBlock is what they write; never modified.
var zeroBlock [zeroChunk]byte

// preallocate makes f size bytes long, with zeros. It reserves the blocks
// where the file system can (fallocate), else it only sets the size. With
// zeroFill it then writes the zeros too, so that the writer only ever
// overwrites written blocks: on ext4 or XFS, fallocate leaves "unwritten"
// extents, and the first write into each block makes the next fdatasync
// commit the file system's journal to record the change. With records of
// 72 bytes that happens once in 56 records; with a batch of a few KiB it
// happens on every fdatasync, and `tandem bench log` measured such an
// fdatasync at about twice the cost of overwriting written blocks (PostgreSQL
// zero-fills its WAL segments for the same reason). The cost is writing the
// segment once more, in the background, ahead of use.
//
// Closing stop (if not nil) abandons the zero-fill with errStopped.
func preallocate(f File, size int64, zeroFill bool, stop <-chan struct{}) error {
	err := fallocate(f, size)
	if errors.Is(err, errNoFallocate) {
		err = f.Truncate(size)
	}
	if err == nil && zeroFill {
		// A chunk at a time, each synced: the writer's fdatasyncs then
		// never wait behind more than one chunk of zeros in the device's
		// queue and cache.
		for off := int64(0); off < size && err == nil; off += zeroChunk {
			select {
			case <-stop:
				return errStopped
			default:
			}
			if _, err = f.WriteAt(zeroBlock[:min(zeroChunk, size-off)], off); err == nil {
				err = f.Sync()
			}
		}
	}
	if err != nil {
		return fmt.Errorf("preallocate %d bytes: %w", size, err)
	}
	return nil
}
