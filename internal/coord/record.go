package coord

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/tandem-tx/tandem/internal/wal"
	"github.com/tandem-tx/tandem/xid"
)

// Record types in the decision log.
const (
	recCommit     wal.Type = 1 // the commit point of a global transaction
	recAbort      wal.Type = 2 // an abort that must be remembered (a late Commit answers ABORTED)
	recEnd        wal.Type = 3 // phase 2 finished on every branch
	recCheckpoint wal.Type = 4 // a remembered decision carried forward by a checkpoint
	// RecStandbyMark is wal.TypeStandbyMark, a standby's MARK record: a
	// coordinator replaying the log (a promoted standby) skips it.
	RecStandbyMark = wal.TypeStandbyMark
)

// recordVersion is the payload format version of COMMIT, ABORT and END
// records; a newer one is refused at replay.
const recordVersion = 1

// checkpointVersion is the payload format version of CHECKPOINT records
// (a type of its own since Tandem's log format 2: an older coordinator
// stops at the first one with "unknown record type 4").
const checkpointVersion = 1

// AbortReason says who decided an ABORT.
type AbortReason uint8

// Why an ABORT was decided.
const (
	AbortRequested AbortReason = iota + 1 // the client's Abort call
	AbortOrphan                           // the in-doubt scan: prepared, undecided, older than the orphan timeout
	AbortResolved                         // Status with resolve
	AbortTooOld                           // a Commit for a gtrid older than the maximum transaction age
)

// admitted reports whether an ABORT for this reason passes admission
// control (admit.go): those that a caller can cause with no branch
// prepared, so that a flood of them cannot grow the log past its size.
func (r AbortReason) admitted() bool { return r == AbortRequested || r == AbortTooOld }

func (r AbortReason) String() string {
	switch r {
	case AbortRequested:
		return "aborted at the client's request"
	case AbortOrphan:
		return "aborted by the in-doubt scan: a prepared branch had no decision past the orphan timeout"
	case AbortResolved:
		return "aborted by a Status call with resolve"
	case AbortTooOld:
		return "aborted: the transaction began longer ago than the coordinator's max-txn-age"
	}
	return "aborted"
}

// decision is the payload of a COMMIT or ABORT record:
//
//	version u8 | gtrid [16] | decided unix nanos i64 LE | reason u8 | n u8 | n × (len u8, rm name)
//
// An END record is: version u8 | gtrid [16].
type decision struct {
	gtrid     xid.GTRID
	decidedAt time.Time
	reason    AbortReason // 0 for COMMIT
	rms       []string
}

func (d *decision) encode() []byte {
	n := 1 + 16 + 8 + 1 + 1
	for _, r := range d.rms {
		n += 1 + len(r)
	}
	b := make([]byte, 0, n)
	b = append(b, recordVersion)
	b = append(b, d.gtrid[:]...)
	b = binary.LittleEndian.AppendUint64(b, uint64(d.decidedAt.UnixNano()))
	b = append(b, byte(d.reason), byte(len(d.rms)))
	for _, r := range d.rms {
		b = append(b, byte(len(r)))
		b = append(b, r...)
	}
	return b
}

var errBadRecord = errors.New("coord: malformed decision record")

func decodeDecision(p []byte) (decision, error) {
	var d decision
	if len(p) < 27 {
		return d, fmt.Errorf("%w: %d bytes, want at least 27", errBadRecord, len(p))
	}
	if p[0] != recordVersion {
		return d, fmt.Errorf("%w: payload version %d, this coordinator reads version %d (written by a newer Tandem?)", errBadRecord, p[0], recordVersion)
	}
	copy(d.gtrid[:], p[1:17])
	d.decidedAt = time.Unix(0, int64(binary.LittleEndian.Uint64(p[17:25])))
	d.reason = AbortReason(p[25])
	n := int(p[26])
	rest := p[27:]
	for i := 0; i < n; i++ {
		if len(rest) < 1 || len(rest) < 1+int(rest[0]) {
			return d, fmt.Errorf("%w: branch %d of %d truncated", errBadRecord, i+1, n)
		}
		d.rms = append(d.rms, string(rest[1:1+int(rest[0])]))
		rest = rest[1+int(rest[0]):]
	}
	if len(rest) != 0 {
		return d, fmt.Errorf("%w: %d trailing bytes", errBadRecord, len(rest))
	}
	return d, nil
}

func encodeEnd(g xid.GTRID) []byte {
	b := make([]byte, 17)
	b[0] = recordVersion
	copy(b[1:], g[:])
	return b
}

func decodeEnd(p []byte) (xid.GTRID, error) {
	var g xid.GTRID
	if len(p) != 17 || p[0] != recordVersion {
		return g, fmt.Errorf("%w: END record of %d bytes, version %d", errBadRecord, len(p), firstByte(p))
	}
	copy(g[:], p[1:])
	return g, nil
}

func firstByte(p []byte) int {
	if len(p) == 0 {
		return -1
	}
	return int(p[0])
}

// carried is the payload of a CHECKPOINT record: the state of one
// remembered decision, written again by a checkpoint so that the segment of
// its older records can be reused. Once phase 2 has ended it lists no
// branches: nothing is left to drive, and the record is half the size.
//
//	version u8 (1) | gtrid [16] | outcome u8 (1 COMMIT, 2 ABORT) | flags u8 (1: phase 2 ended)
//	| decided unix nanos i64 LE | ended unix nanos i64 LE (0 unless ended) | reason u8
//	| n u8 | n × (len u8, rm name)
//
// Replay treats it as the decision record again (the same gtrid with the
// same outcome is no conflict), then, if the ended flag is set, as its END:
// an ended ABORT kept for MaxTxnAge is not driven again after a restart.
type carried struct {
	decision
	outcome Outcome
	ended   bool
	endedAt time.Time
}

const carriedFixed = 1 + 16 + 1 + 1 + 8 + 8 + 1 + 1

const carriedEnded = 1 // flags

func (c *carried) encode() []byte {
	n := carriedFixed
	for _, r := range c.rms {
		n += 1 + len(r)
	}
	b := make([]byte, 0, n)
	b = append(b, checkpointVersion)
	b = append(b, c.gtrid[:]...)
	var flags byte
	var ended int64
	if c.ended {
		flags, ended = carriedEnded, c.endedAt.UnixNano()
	}
	b = append(b, byte(c.outcome), flags)
	b = binary.LittleEndian.AppendUint64(b, uint64(c.decidedAt.UnixNano()))
	b = binary.LittleEndian.AppendUint64(b, uint64(ended))
	b = append(b, byte(c.reason), byte(len(c.rms)))
	for _, r := range c.rms {
		b = append(b, byte(len(r)))
		b = append(b, r...)
	}
	return b
}

// carriedSize is the number of log bytes the CHECKPOINT record of a
// decision with these resource managers takes (header and padding included).
func carriedSize(rms []string) int64 {
	n := carriedFixed
	for _, r := range rms {
		n += 1 + len(r)
	}
	return 8 + int64((n+7)&^7)
}

func decodeCarried(p []byte) (carried, error) {
	var c carried
	if len(p) < carriedFixed {
		return c, fmt.Errorf("%w: CHECKPOINT record of %d bytes, want at least %d", errBadRecord, len(p), carriedFixed)
	}
	if p[0] != checkpointVersion {
		return c, fmt.Errorf("%w: CHECKPOINT record version %d, this coordinator reads version %d (written by a newer Tandem? run that version or newer on this log)",
			errBadRecord, p[0], checkpointVersion)
	}
	copy(c.gtrid[:], p[1:17])
	c.outcome = Outcome(p[17])
	if c.outcome != Committed && c.outcome != Aborted {
		return c, fmt.Errorf("%w: CHECKPOINT record with outcome %d", errBadRecord, p[17])
	}
	flags := p[18]
	if flags&^carriedEnded != 0 {
		return c, fmt.Errorf("%w: CHECKPOINT record with unknown flags %#x", errBadRecord, flags)
	}
	c.decidedAt = time.Unix(0, int64(binary.LittleEndian.Uint64(p[19:27])))
	ended := int64(binary.LittleEndian.Uint64(p[27:35]))
	switch {
	case flags&carriedEnded != 0:
		c.ended, c.endedAt = true, time.Unix(0, ended)
	case ended != 0:
		return c, fmt.Errorf("%w: CHECKPOINT record with an end time but no ended flag", errBadRecord)
	}
	c.reason = AbortReason(p[35])
	n := int(p[36])
	rest := p[carriedFixed:]
	for i := 0; i < n; i++ {
		if len(rest) < 1 || len(rest) < 1+int(rest[0]) {
			return c, fmt.Errorf("%w: CHECKPOINT record: branch %d of %d truncated", errBadRecord, i+1, n)
		}
		c.rms = append(c.rms, string(rest[1:1+int(rest[0])]))
		rest = rest[1+int(rest[0]):]
	}
	if len(rest) != 0 {
		return c, fmt.Errorf("%w: CHECKPOINT record: %d trailing bytes", errBadRecord, len(rest))
	}
	return c, nil
}
