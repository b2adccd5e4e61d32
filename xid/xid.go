// Package xid defines how Tandem names global transactions and their branches
// on each database. It is part of the wire contract: a client written in any
// language that builds the same names interoperates with the coordinator.
//
// # Global transaction id (gtrid)
//
// A gtrid is 16 bytes, written as 32 lowercase hexadecimal digits:
//
//	bytes 0-1   shard prefix, big endian (0 today; reserved for routing to coordinator shards)
//	bytes 2-7   milliseconds since the Unix epoch, big endian (48 bits): gtrids sort by start time
//	bytes 8-15  random bits from a cryptographic source
//
// The client makes it locally at Begin: no round trip and no shared sequence.
//
// # Branch qualifier (bqual)
//
// The bqual is the resource manager's configured name: 1 to 32 characters of
// [a-z0-9_-], starting with a letter or digit. One global transaction has at
// most one branch per resource manager.
//
// # On PostgreSQL
//
// The prepared transaction's GID is
//
//	tandem:<gtrid>:<rm>        e.g. tandem:0000019a8f3c2b1e5d0c7a9b3e41f2aa:pg
//
// and Tandem's in-doubt scan reads pg_prepared_xacts for GIDs with that prefix.
//
// A branch whose outcome is decided by a commit point (see below) is named
//
//	tandemcp:<gtrid>:<rm>:<cp>   e.g. tandemcp:0000019a8f3c2b1e5d0c7a9b3e41f2aa:pg:maria
//
// A scan for 'tandem:%' does not match it, so a coordinator that predates
// commit points never sees (and never presumes to abort) such a branch.
//
// # On MySQL and MariaDB
//
// The XID is
//
//	'<gtrid>','<rm>',1413566020      (format ID 0x54414E44, "TAND")
//
// and Tandem's in-doubt scan keeps the rows of XA RECOVER with that format ID.
//
// A branch decided by a commit point has format ID 0x54414E43 ("TANC") and the
// commit point's name appended to the gtrid part, with no separator:
//
//	'<gtrid><cp>','<rm>',1413566019  e.g. '0000019a8f3c2b1e5d0c7a9b3e41f2aamaria','pg',1413566019
//
// (32 + at most 32 characters: within XA's 64-byte gtrid). A coordinator that
// predates commit points keeps only format TAND rows, so it ignores these.
//
// # Commit point
//
// When a branch's name carries a commit point cp, the global transaction's
// outcome is not in any coordinator's log: it is the row for the gtrid in the
// tandem_decision table of the database that resource manager cp names
// (committed together with cp's own branch, in one local transaction). Such a
// branch is settled only through that table, never presumed aborted. The
// commit point's own branch is never prepared and so has no XA name.
package xid

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
)

// FormatID is the XA format identifier of every Tandem branch on MySQL and
// MariaDB decided by the coordinator's log.
const FormatID = 0x54414E44

// CommitPointFormatID is the XA format identifier ("TANC") of every Tandem
// branch on MySQL and MariaDB decided by a commit point.
const CommitPointFormatID = 0x54414E43

// PostgresPrefix starts the GID of every Tandem branch on PostgreSQL decided
// by the coordinator's log.
const PostgresPrefix = "tandem:"

// PostgresCommitPointPrefix starts the GID of every Tandem branch on
// PostgreSQL decided by a commit point.
const PostgresCommitPointPrefix = "tandemcp:"

// MaxRMNameLen is the longest resource-manager name, and so the longest bqual.
const MaxRMNameLen = 32

// ErrMalformed is wrapped by every parse error of this package.
var ErrMalformed = errors.New("xid: malformed")

// GTRID is a global transaction id. The zero value is not a valid gtrid.
type GTRID [16]byte

// New returns a fresh gtrid with shard prefix 0, stamped with the current time.
func New() GTRID { return NewAt(0, time.Now()) }

// NewAt returns a fresh gtrid with the given shard prefix and start time.
func NewAt(shard uint16, t time.Time) GTRID {
	var g GTRID
	binary.BigEndian.PutUint16(g[0:2], shard)
	ms := uint64(t.UnixMilli())
	g[2], g[3], g[4], g[5], g[6], g[7] = byte(ms>>40), byte(ms>>32), byte(ms>>24), byte(ms>>16), byte(ms>>8), byte(ms)
	_, _ = rand.Read(g[8:]) // crypto/rand.Read never fails (Go 1.24+)
	return g
}

// Parse reads a gtrid written as 32 lowercase hexadecimal digits.
func Parse(s string) (GTRID, error) {
	var g GTRID
	if len(s) != 32 {
		return g, fmt.Errorf("%w gtrid %q: want 32 lowercase hex digits, got %d characters", ErrMalformed, clip(s), len(s))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return g, fmt.Errorf("%w gtrid %q: character %d is %q, want 0-9 or a-f", ErrMalformed, s, i, c)
		}
	}
	if _, err := hex.Decode(g[:], []byte(s)); err != nil {
		return g, fmt.Errorf("%w gtrid %q: %v", ErrMalformed, s, err)
	}
	if g.IsZero() {
		return g, fmt.Errorf("%w gtrid: the all-zero gtrid is reserved", ErrMalformed)
	}
	return g, nil
}

// String returns the 32-digit hexadecimal form used on the wire and in the databases.
func (g GTRID) String() string { return hex.EncodeToString(g[:]) }

// IsZero reports whether g is the zero value.
func (g GTRID) IsZero() bool { return g == GTRID{} }

// Shard returns the shard prefix.
func (g GTRID) Shard() uint16 { return binary.BigEndian.Uint16(g[0:2]) }

// Time returns the start time stamped into g, to the millisecond.
func (g GTRID) Time() time.Time {
	ms := uint64(g[2])<<40 | uint64(g[3])<<32 | uint64(g[4])<<24 | uint64(g[5])<<16 | uint64(g[6])<<8 | uint64(g[7])
	return time.UnixMilli(int64(ms))
}

// ValidateRMName reports whether name can name a resource manager (and so be a bqual).
func ValidateRMName(name string) error {
	if name == "" || len(name) > MaxRMNameLen {
		return fmt.Errorf("%w resource manager name %q: want 1 to %d characters of a-z, 0-9, '_' or '-'", ErrMalformed, clip(name), MaxRMNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || (i > 0 && (c == '_' || c == '-'))
		if !ok {
			return fmt.Errorf("%w resource manager name %q: character %d is %q; use a-z, 0-9, '_' or '-' (not first)", ErrMalformed, name, i, c)
		}
	}
	return nil
}

// Branch names one branch: a gtrid on one resource manager.
type Branch struct {
	GTRID GTRID
	RM    string
	// CommitPoint is "" for a branch decided by the coordinator's log, else
	// the name of the resource manager whose decision table holds the
	// outcome. It is part of the branch's name on the database.
	CommitPoint string
}

// PostgresGID returns the GID of the branch on PostgreSQL.
func (b Branch) PostgresGID() string {
	if b.CommitPoint != "" {
		return PostgresCommitPointPrefix + b.GTRID.String() + ":" + b.RM + ":" + b.CommitPoint
	}
	return PostgresPrefix + b.GTRID.String() + ":" + b.RM
}

// MySQLXID returns the XID of the branch on MySQL/MariaDB as it is written in
// XA statements: 'gtrid','bqual',formatID. Every part is plain ASCII that
// needs no escaping (validated hex and resource-manager names).
func (b Branch) MySQLXID() string {
	if b.CommitPoint != "" {
		return "'" + b.GTRID.String() + b.CommitPoint + "','" + b.RM + "'," + cpFormatIDString
	}
	return "'" + b.GTRID.String() + "','" + b.RM + "'," + formatIDString
}

var (
	formatIDString   = fmt.Sprint(FormatID)
	cpFormatIDString = fmt.Sprint(CommitPointFormatID)
)

// ParsePostgresGID reads a GID written by PostgresGID, of either kind. ok is
// false for a GID that is not Tandem's (another application's prepared
// transaction) or is malformed.
func ParsePostgresGID(gid string) (b Branch, ok bool) {
	if rest, found := strings.CutPrefix(gid, PostgresCommitPointPrefix); found {
		g, rest, found := strings.Cut(rest, ":")
		if !found {
			return b, false
		}
		rm, cp, found := strings.Cut(rest, ":")
		if !found {
			return b, false
		}
		id, err := Parse(g)
		if err != nil || ValidateRMName(rm) != nil || ValidateRMName(cp) != nil {
			return b, false
		}
		return Branch{GTRID: id, RM: rm, CommitPoint: cp}, true
	}
	rest, found := strings.CutPrefix(gid, PostgresPrefix)
	if !found {
		return b, false
	}
	g, rm, found := strings.Cut(rest, ":")
	if !found {
		return b, false
	}
	id, err := Parse(g)
	if err != nil || ValidateRMName(rm) != nil {
		return b, false
	}
	return Branch{GTRID: id, RM: rm}, true
}

// ParseMySQLXID reads one row of XA RECOVER, of either format. ok is false
// for an XID that is not Tandem's or is malformed.
func ParseMySQLXID(formatID int64, gtridLen, bqualLen int, data []byte) (b Branch, ok bool) {
	if bqualLen < 1 || gtridLen < 32 || gtridLen+bqualLen != len(data) {
		return b, false
	}
	var cp string
	switch formatID {
	case FormatID:
		if gtridLen != 32 {
			return b, false
		}
	case CommitPointFormatID:
		cp = string(data[32:gtridLen])
		if ValidateRMName(cp) != nil {
			return b, false
		}
	default:
		return b, false
	}
	id, err := Parse(string(data[:32]))
	rm := string(data[gtridLen:])
	if err != nil || ValidateRMName(rm) != nil {
		return b, false
	}
	return Branch{GTRID: id, RM: rm, CommitPoint: cp}, true
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
