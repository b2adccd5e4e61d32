// Package wal is the coordinator's decision log: an append-only,
// checksummed, segmented log of records (COMMIT, ABORT, END and so on; the
// package does not interpret them) with group commit.
//
// # Guarantees
//
//   - Append returns only once its record is durable: written and
//     fdatasynced. Records waiting at the same moment share one write and
//     one fdatasync (group commit). In immediate mode (the default) the
//     writer never sleeps, polls or spins to gather them.
//   - Records are written in the order they were queued: if one call
//     (Append, AppendAsync, AppendNoWait) returns before another starts,
//     its record is earlier in the log.
//   - AppendAsync queues a record without waiting; the writer writes and
//     fdatasyncs it with the next group commit even if nothing else comes.
//     AppendNoWait queues a record that gets no fdatasync of its own: it is
//     durable once a later Append or Sync returns (or after Close). Sync
//     waits until everything queued before it is durable.
//   - Open replays every acknowledged record of the live segments (those
//     the owner has not released with Release), in order. A record that was
//     being written when the process or machine stopped (a torn tail) is
//     cut; damage anywhere else stops Open with a *CorruptionError naming
//     the file and offset, and the files are left untouched.
//   - After a failed write or fdatasync the log refuses every later Append
//     (ErrLogFailed): after a failed fdatasync the state of the page cache
//     is unknown, so the only safe way on is to restart and replay. The
//     records of the failed batch get ErrOutcomeUnknown. No acknowledged
//     record is ever overwritten.
//
// # Write modes
//
// Options.BatchWindow chooses how the writer decides when to flush.
//
// Immediate (BatchWindow 0, the default). One writer goroutine takes the
// first queued request, then every request already queued, and writes and
// fdatasyncs them at once; requests that arrive meanwhile form the next
// batch. Nothing but the queue decides when to flush: no sleep, timer or
// spin (docs/field-reports.md §3). When the log is idle (nothing queued or
// being written), Append writes and fdatasyncs its record on its own
// goroutine instead, which saves two goroutine wake-ups; Stats.Direct
// counts those. Costs: at one committer, one fdatasync per record, and an
// Append takes about one write+fdatasync of the disk; under load, batches
// grow by themselves (everything that queued during one fdatasync goes
// into the next), so fdatasyncs per second stay near 1/(fdatasync time)
// while records per fdatasync grow with the committers. Risks: none beyond
// the guarantees above.
//
// Batch (BatchWindow > 0). After taking the first request of a batch, the
// writer keeps taking requests as they arrive until BatchWindow has passed
// since that request was queued, or the batch holds BatchMaxBytes of
// records, or Close; then one write and one fdatasync. It waits on a
// timer, not in a sleep: a full batch or Close ends the wait at once.
// Gains: at most about 1/(BatchWindow + fdatasync) fdatasyncs per second
// whatever the load, which matters where an fdatasync is costly to others
// (a shared disk, network block storage billed or throttled per
// operation, flash wear); `tandem bench log` measures how many it saves.
// Costs: every Append waits up to BatchWindow longer, also when it is
// alone (the writer cannot know nobody else will come), so one committer
// gets at most about 1/(BatchWindow + fdatasync) decisions per second, and
// a loaded log's latency is about BatchWindow + one flush. Risks: none to
// durability; Append still returns only after its own fdatasync. There is
// no direct write in batch mode.
//
// # Durability of one record
//
//   - Append (the coordinator's durability "wait"): durable when it
//     returns.
//   - AppendAsync (durability "nowait"): returns at once; the record is
//     written and fdatasynced with the next group commit: in immediate mode
//     as soon as the writer is free, in batch mode within about
//     BatchWindow. Nobody is told when. Risk: a crash of the process or the
//     machine before that fdatasync loses the record although the caller
//     may already have acknowledged it; a failed write fails the log (Err)
//     and the record's fate is unknown. Before anything acts on such a
//     record where another participant can see it (phase 2 of a COMMIT),
//     call Sync: a COMMIT that phase 2 applied and the log then lost would
//     break atomicity.
//   - AppendNoWait (for END records, whose loss replay repairs): written
//     with the next batch, never fdatasynced for its own sake. Durable once
//     a later Append, AppendAsync or Sync has had its fdatasync, at the next
//     rotation or at Close; on a log with no other traffic, only when the
//     kernel writes it back (by default within about 30 s), and a machine
//     crash before that loses it.
//   - Sync: no record; returns once everything queued before it is
//     durable, sharing the fdatasync of its batch (none if all is synced).
//
// # On-disk format (version 2)
//
// A log is a directory of segment files named by their sequence number, 16
// lower-case hexadecimal digits and ".wal": 0000000000000001.wal,
// 0000000000000002.wal, ... Sequence numbers start at 1 and the live
// segments have no gaps; the first live one is greater than 1 once the
// owner has released older ones (see "Circular use"). The directory also
// holds LOCK, locked (flock) by the process that has the log open;
// released segment files, <seq>.free, kept for reuse; and, while a segment
// is being prepared, <seq>.wal.tmp, which Open deletes.
//
// Each segment is preallocated to its full size (Options.SegmentSize, 64 MiB
// by default). A new one is zero-filled: fallocate (or ftruncate where the
// file system cannot), then zeros written over the whole file, so that
// records only ever overwrite written blocks and an fdatasync needs no
// journal commit for newly written extents (NoSync logs skip the zeros).
// The next segment is prepared in the background: made from the oldest
// released file if there is one (renamed <seq>.wal.tmp, its header
// rewritten, nothing else: it is already allocated and written), else
// created as <seq>.wal.tmp, preallocated and zero-filled; then its header
// record is written and fdatasynced. Rotation fdatasyncs the current
// segment, renames the next one to <seq>.wal and fsyncs the directory. The
// previous segment keeps its size; its unused end keeps what it held.
//
// A segment is a sequence of records, each starting at a multiple of 8:
//
//	offset  size  field
//	0       4     CRC-32C (Castagnoli), little endian
//	4       3     payload length n, little endian (at most 16 MiB - 1)
//	7       1     record type (1..254 for callers; 255 segment header; never 0)
//	8       n     payload
//	8+n     p     zero padding, 0 <= p < 8, so that 8+n+p is a multiple of 8
//
// The CRC covers the segment's sequence number (8 bytes, little endian),
// then header bytes 4 to 7, then the payload. Seeding it with the sequence
// number makes a record left over in a reused file invalid in its new
// segment. A header of eight zero bytes ends the records of a segment. A
// record never crosses segments: when it does not fit in the rest of the
// current segment the writer moves to the next one; a record that cannot
// fit in an empty segment is refused (ErrRecordTooLarge).
//
// The first record of every segment, at offset 0, is the segment header,
// type 255, with a 20-byte payload (32 bytes with header and padding):
//
//	offset  size  field
//	0       8     magic "TANDEMWL"
//	8       2     format version, little endian (2; 1 is still read)
//	10      2     flags, little endian (version 1: reserved, zero)
//	12      8     segment sequence number, little endian
//
// This record is framed the same way in every format version. Open refuses
// a segment of a newer version with a *VersionError naming the file.
//
// Flag 1, recycled: the segment was made from a released file. The bytes
// after its records are not zeros but whatever the file held, records of
// older segments among them, so the writer ends each batch with a zero
// header (written with the batch, overwritten by the next one) and replay
// reads a recycled segment with the rules below. Version 2 added the flags
// and recycling; a log in version 1 opens as it is and new segments are
// written in version 2, which older builds refuse clearly.
//
// # Circular use: Release and recycling
//
// The owner (the coordinator's checkpoint) calls Release(before) once it no
// longer needs the records of the segments before before: it has carried
// what it still needs forward into later segments, durably. Release renames
// each of those segments <seq>.wal to <seq>.free, oldest first, then fsyncs
// the directory once; the current segment is never released. Released files
// are then reused, oldest first, as new segments, so under a steady load
// the directory holds a steady number of files; those that do not fit in
// Options.MaxSize beside the live segments are deleted.
//
// Usage reports what the owner needs for admission control: the live
// segments (First..Current) and the bytes from the start of First to the
// write position. Append returns each record's Position; AppendAsync and
// AppendNoWait return a lower bound of its segment (the current segment
// when it was queued), and Segment the current one.
//
// Crash safety, step by step:
//
//   - Release, between renames or before its directory fsync: some released
//     segments may be back under their .wal name after the crash. Open
//     treats every <seq>.wal numbered at or below the newest <seq>.free as
//     released (renames it, syncs the directory) and replays from the next
//     segment. So Open may replay some records of segments the owner had
//     released, just before the first live one, never a gap: the owner must
//     accept records it has seen again (the coordinator's are: a decision
//     record again is the same decision). A released file is reused only
//     after the directory fsync, so a lost rename can never sit below a
//     reused one.
//   - Recycling, after the rename of <old>.free to <seq>.wal.tmp: the file is
//     either still released or a temporary file Open deletes.
//   - Rotation, before or after the rename to <seq>.wal: as for a new
//     segment; a segment with a header and no record is an empty last
//     segment.
//   - A batch write: a torn tail, cut at the next Open (below).
//
// Replay starts at the first segment that exists after the released ones;
// segments below it (released, deleted or reused) are not missing.
//
// # Replay and damage
//
// Open decodes every live segment in order. A record is bad when its type
// is 0 in a nonzero header, its length runs past the end of the segment,
// its padding is not zero, or its checksum does not match. When the records
// of a segment end (a zero header or a bad record), Open looks for a valid
// record at every later 8-byte-aligned offset of that segment:
//
//   - in the last segment, with none found: a torn tail. Open zeroes the
//     segment from that offset to its end (in a recycled segment: writes a
//     zero header there), fdatasyncs it, and writing resumes there. Stats
//     reports where and how much it cut.
//   - with one found, or in any other segment (which must be all zero after
//     its last record; a recycled one must end at a zero header or the end
//     of the file): corruption. Open returns a *CorruptionError; do not
//     delete or truncate the log, restore it from the standby or a backup.
//
// In a recycled segment a valid record found after the end counts only if
// it is followed by another valid record, a zero header or the end of the
// file. An old record there fails its checksum, but one in 2^32 would
// pass; this second test makes a false alarm about as likely as 2^-64 per
// old record, where real records (the writer ends each batch with a zero
// header) always pass it.
//
// A gap in the sequence numbers of the live segments is also a
// *CorruptionError, naming the missing segment.
//
// # Use
//
//	log, err := wal.Open(wal.Options{Dir: "/var/lib/tandem/log"},
//		func(pos wal.Position, typ wal.Type, payload []byte) error {
//			return state.apply(typ, payload) // payload is only valid during the call
//		})
//	if err != nil {
//		var ce *wal.CorruptionError
//		if errors.As(err, &ce) {
//			// stop: a person must restore the log (ce.File, ce.Offset)
//		}
//		return err
//	}
//	defer log.Close()
//
//	pos, err := log.Append(recCommit, encodedDecision)
//	switch {
//	case errors.Is(err, wal.ErrOutcomeUnknown), errors.Is(err, wal.ErrLogFailed):
//		// the log is unusable: restart the coordinator so that it replays
//	case err == nil:
//		// the decision at pos is durable: acknowledge it
//	}
package wal
