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
	recCommit wal.Type = 1 // the commit point of a global transaction
	recAbort  wal.Type = 2 // an abort that must be remembered (a late Commit answers ABORTED)
	recEnd    wal.Type = 3 // phase 2 finished on every branch
)

// recordVersion is the payload format version; a newer one is refused at replay.
const recordVersion = 1

// AbortReason says who decided an ABORT.
type AbortReason uint8

const (
	AbortRequested AbortReason = iota + 1 // the client's Abort call
	AbortOrphan                           // the in-doubt scan: prepared, undecided, older than the orphan timeout
	AbortResolved                         // Status with resolve
	AbortTooOld                           // a Commit for a gtrid older than the maximum transaction age
)

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
