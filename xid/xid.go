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
// # Owner
//
// Every branch a client of this version names carries its owner: the only
// party that may decide it by presumption. An owner is 16 bytes, written as 32
// lowercase hexadecimal digits (Owner):
//
//   - a branch decided by a coordinator's log is owned by the coordinator's
//     cluster: the identity of its data directory, shared by a primary and
//     its standbys (Health says it as cluster=…);
//   - a branch decided by a commit point is owned by that commit point's
//     decision table: a random id made with the table and stored beside it
//     (package decision, tandem_decision_id).
//
// A coordinator settles a branch only if it owns it, or if the branch's
// commit point is configured there and that database's decision table has
// the branch's owner id (checked by the database, inside the statement that
// reads or takes the decision). It never presumes abort for another owner's
// branch: it lists it (tandem status --in-doubt) for an operator.
//
// Names written before owners existed (the legacy names below) have no
// owner (Owner.IsZero): a coordinator lists them and settles them only when
// its operator says they are its own (--adopt-unowned).
//
// # On PostgreSQL
//
// The prepared transaction's GID is
//
//	tandem2:<gtrid>:<rm>:<owner>        decided by the coordinator whose cluster is <owner>
//	tandemcp2:<gtrid>:<rm>:<cp>:<owner> decided by commit point <cp>, whose decision table is <owner>
//
// e.g. tandem2:0000019a8f3c2b1e5d0c7a9b3e41f2aa:pg:6f1c…(32 digits). Legacy,
// unowned: tandem:<gtrid>:<rm> and tandemcp:<gtrid>:<rm>:<cp>. A scan made
// before owners existed matches 'tandem:%' and 'tandemcp:%' only, so it never
// sees (and never presumes to abort) an owned branch.
//
// # On MySQL and MariaDB
//
// The XID is gtrid part, bqual part, format ID:
//
//	'<gtrid>','<owner><rm>',1413566002          format 0x54414E32, "TAN2": decided by the coordinator
//	'<gtrid><cp>','<owner><rm>',1413563186      format 0x54414332, "TAC2": decided by commit point <cp>
//
// The bqual is the owner's 32 digits followed by the RM's name, with no
// separator (at most 64 bytes: XA's limit); the gtrid part of a commit-point
// branch is the gtrid's 32 digits followed by the commit point's name (at
// most 64). Legacy, unowned: '<gtrid>','<rm>',1413566020 ("TAND") and
// '<gtrid><cp>','<rm>',1413566019 ("TANC").
//
// # Commit point
//
// When a branch's name carries a commit point cp, the global transaction's
// outcome is not in any coordinator's log: it is the row for the gtrid in the
// tandem_decision table of the database that resource manager cp names
// (committed together with cp's own branch, in one local transaction). Such a
// branch is settled only through that table, never presumed aborted. On
// PostgreSQL the commit point's own branch is never prepared and so has no XA
// name; on MariaDB it is an XA branch named like any branch of cp decided by
// cp (CommitPointSelf), committed with XA COMMIT … ONE PHASE and never
// prepared, so XA RECOVER never lists it.
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

// The XA format identifiers of Tandem's branches on MySQL and MariaDB.
const (
	// OwnedFormatID ("TAN2"): decided by the coordinator's log, owned by its cluster.
	OwnedFormatID = 0x54414E32
	// OwnedCommitPointFormatID ("TAC2"): decided by a commit point, owned by its decision table.
	OwnedCommitPointFormatID = 0x54414332
	// FormatID ("TAND"): legacy, unowned, decided by a coordinator's log.
	FormatID = 0x54414E44
	// CommitPointFormatID ("TANC"): legacy, unowned, decided by a commit point.
	CommitPointFormatID = 0x54414E43
)

// The prefixes of Tandem's prepared-transaction GIDs on PostgreSQL.
const (
	// OwnedPrefix: decided by the coordinator's log, owned by its cluster.
	OwnedPrefix = "tandem2:"
	// OwnedCommitPointPrefix: decided by a commit point, owned by its decision table.
	OwnedCommitPointPrefix = "tandemcp2:"
	// PostgresPrefix: legacy, unowned, decided by a coordinator's log.
	PostgresPrefix = "tandem:"
	// PostgresCommitPointPrefix: legacy, unowned, decided by a commit point.
	PostgresCommitPointPrefix = "tandemcp:"
)

// PostgresScanPredicate is the SQL condition on pg_prepared_xacts.gid that
// keeps every Tandem branch, owned or legacy.
const PostgresScanPredicate = "(gid LIKE 'tandem:%' OR gid LIKE 'tandemcp:%' OR gid LIKE 'tandem2:%' OR gid LIKE 'tandemcp2:%')"

// Owner names who may decide a branch by presumption: a coordinator cluster
// or a commit point's decision table (see the package doc). The zero Owner
// is "unowned": a legacy name.
type Owner [16]byte

// NewOwner returns a random owner id, for a new cluster or decision table.
func NewOwner() Owner {
	var o Owner
	_, _ = rand.Read(o[:]) // crypto/rand.Read never fails (Go 1.24+)
	return o
}

// ParseOwner reads an owner written as 32 lowercase hexadecimal digits.
func ParseOwner(s string) (Owner, error) {
	var o Owner
	if len(s) != 32 || !isLowerHex(s) {
		return o, fmt.Errorf("%w owner %q: want 32 lowercase hex digits", ErrMalformed, clip(s))
	}
	_, _ = hex.Decode(o[:], []byte(s))
	if o.IsZero() {
		return o, fmt.Errorf("%w owner: the all-zero owner is reserved for unowned (legacy) names", ErrMalformed)
	}
	return o, nil
}

// String returns the 32-digit hexadecimal form used in names and tables.
func (o Owner) String() string { return hex.EncodeToString(o[:]) }

// Short returns the first 8 digits, for logs and tables read by people.
func (o Owner) Short() string {
	if o.IsZero() {
		return "unowned"
	}
	return o.String()[:8]
}

// IsZero reports whether o is the zero (unowned) value.
func (o Owner) IsZero() bool { return o == Owner{} }

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

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
	// Owner is the branch's owner: the coordinator cluster's identity when
	// CommitPoint is "", else the commit point's decision-table id. The
	// zero Owner names the branch with the legacy, unowned names.
	Owner Owner
}

// Owned reports whether b carries an owner (is not a legacy name).
func (b Branch) Owned() bool { return !b.Owner.IsZero() }

// CommitPointSelf returns the name of the commit point's own branch on a
// session-bound database (MariaDB): the branch of g on cp decided by cp,
// owned by cp's decision table. It is never prepared.
func CommitPointSelf(g GTRID, cp string, table Owner) Branch {
	return Branch{GTRID: g, RM: cp, CommitPoint: cp, Owner: table}
}

// PostgresGID returns the GID of the branch on PostgreSQL.
func (b Branch) PostgresGID() string {
	g := b.GTRID.String()
	switch {
	case b.CommitPoint != "" && b.Owned():
		return OwnedCommitPointPrefix + g + ":" + b.RM + ":" + b.CommitPoint + ":" + b.Owner.String()
	case b.CommitPoint != "":
		return PostgresCommitPointPrefix + g + ":" + b.RM + ":" + b.CommitPoint
	case b.Owned():
		return OwnedPrefix + g + ":" + b.RM + ":" + b.Owner.String()
	}
	return PostgresPrefix + g + ":" + b.RM
}

// MySQLXID returns the XID of the branch on MySQL/MariaDB as it is written in
// XA statements: 'gtrid','bqual',formatID. Every part is plain ASCII that
// needs no escaping (validated hex and resource-manager names).
func (b Branch) MySQLXID() string {
	g := b.GTRID.String()
	switch {
	case b.CommitPoint != "" && b.Owned():
		return "'" + g + b.CommitPoint + "','" + b.Owner.String() + b.RM + "'," + ownedCPFormatIDString
	case b.CommitPoint != "":
		return "'" + g + b.CommitPoint + "','" + b.RM + "'," + cpFormatIDString
	case b.Owned():
		return "'" + g + "','" + b.Owner.String() + b.RM + "'," + ownedFormatIDString
	}
	return "'" + g + "','" + b.RM + "'," + formatIDString
}

var (
	formatIDString        = fmt.Sprint(FormatID)
	cpFormatIDString      = fmt.Sprint(CommitPointFormatID)
	ownedFormatIDString   = fmt.Sprint(OwnedFormatID)
	ownedCPFormatIDString = fmt.Sprint(OwnedCommitPointFormatID)
)

// ParsePostgresGID reads a GID written by PostgresGID, of any kind. ok is
// false for a GID that is not Tandem's (another application's prepared
// transaction) or is malformed.
func ParsePostgresGID(gid string) (b Branch, ok bool) {
	var parts []string
	var cp, owned bool
	switch {
	case strings.HasPrefix(gid, OwnedCommitPointPrefix):
		parts, cp, owned = strings.Split(gid[len(OwnedCommitPointPrefix):], ":"), true, true
	case strings.HasPrefix(gid, OwnedPrefix):
		parts, owned = strings.Split(gid[len(OwnedPrefix):], ":"), true
	case strings.HasPrefix(gid, PostgresCommitPointPrefix):
		parts, cp = strings.Split(gid[len(PostgresCommitPointPrefix):], ":"), true
	case strings.HasPrefix(gid, PostgresPrefix):
		parts = strings.Split(gid[len(PostgresPrefix):], ":")
	default:
		return b, false
	}
	want := 2
	if cp {
		want++
	}
	if owned {
		want++
	}
	if len(parts) != want {
		return b, false
	}
	id, err := Parse(parts[0])
	if err != nil || ValidateRMName(parts[1]) != nil {
		return b, false
	}
	b = Branch{GTRID: id, RM: parts[1]}
	if cp {
		if ValidateRMName(parts[2]) != nil {
			return Branch{}, false
		}
		b.CommitPoint = parts[2]
	}
	if owned {
		o, err := ParseOwner(parts[want-1])
		if err != nil {
			return Branch{}, false
		}
		b.Owner = o
	}
	return b, true
}

// ParseMySQLXID reads one row of XA RECOVER, of any Tandem format. ok is
// false for an XID that is not Tandem's or is malformed.
func ParseMySQLXID(formatID int64, gtridLen, bqualLen int, data []byte) (b Branch, ok bool) {
	if bqualLen < 1 || gtridLen < 32 || gtridLen+bqualLen != len(data) {
		return b, false
	}
	var cp, owned bool
	switch formatID {
	case FormatID:
	case CommitPointFormatID:
		cp = true
	case OwnedFormatID:
		owned = true
	case OwnedCommitPointFormatID:
		cp, owned = true, true
	default:
		return b, false
	}
	if !cp && gtridLen != 32 {
		return b, false
	}
	id, err := Parse(string(data[:32]))
	if err != nil {
		return b, false
	}
	b.GTRID = id
	if cp {
		b.CommitPoint = string(data[32:gtridLen])
		if ValidateRMName(b.CommitPoint) != nil {
			return Branch{}, false
		}
	}
	bq := string(data[gtridLen:])
	if owned {
		if len(bq) < 33 {
			return Branch{}, false
		}
		o, err := ParseOwner(bq[:32])
		if err != nil {
			return Branch{}, false
		}
		b.Owner, bq = o, bq[32:]
	}
	if ValidateRMName(bq) != nil {
		return Branch{}, false
	}
	b.RM = bq
	return b, true
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
