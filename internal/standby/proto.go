// Package standby ships the coordinator's decision log to a standby
// coordinator and writes it there: the primary's Shipper and the standby's
// Receiver, over a small framed TCP protocol.
//
// # What is shipped
//
// Records, not segment bytes. The Shipper sees every record the primary's
// log writes (wal.Options.OnWrite, through coord.Options.LogHook) with its
// Position in the primary's log, and every record replayed at start. The
// Receiver appends the same records, in the same order, to the standby's
// own decision log with wal (AppendNoWait for each, then one Append of a
// MARK record carrying the primary's position and epoch: one fdatasync
// per shipped batch), and acknowledges that position. So the standby's log
// is an ordinary Tandem decision log (checksummed, segmented, replayed by
// the same code) and a promoted standby opens it like any coordinator:
// replay, phase 2 of every unfinished COMMIT, the in-doubt scan. Copying
// segment bytes instead would tie the standby's segment layout to the
// primary's (size, recycling, the CRC seeded by segment number) and need a
// raw-write path through wal; records need nothing new in wal but a hook.
//
// Positions are the primary's: the standby's position is the Position of
// the last primary record it has on disk (the zero Position: none). A
// primary restarted after a crash never reuses a position the standby has,
// because only records that are durable on the primary are shipped. A
// promoted coordinator's positions are its own log's, unrelated to the old
// primary's: a standby whose log holds records refuses a primary of a newer
// epoch (and a primary refuses a standby of an older epoch that has a
// position); it must be re-seeded (Reseed, tandem reseed), after which it
// is empty and adopts any epoch.
//
// MARK records are never shipped: a promoted standby's log holds its own,
// and a standby must never take another's MARK for its own at replay. A
// Receiver does not write one it receives.
//
// # Recycling the standby's log
//
// The primary's checkpoint carries the decisions it still needs forward
// (re-appends them), makes them durable, then releases its segments below
// a boundary B (coord.LogHook.Released). The Shipper turns that into a
// RELEASE notice (B, P), P being its last durable record when Released was
// called, so every carried copy is at or before P; it sends the notice
// once it has sent the records up to P. The Receiver keeps the latest
// notice and, once its position is at or past P, releases (wal.Release)
// its own segments whose records all have primary positions before
// segment B: it knows, for each own segment, the highest primary position
// written in it (from the MARKs). It never releases the segment of its
// latest MARK. A notice is not persisted: after a restart of either side
// the primary sends its latest again (a restarted primary: at its next
// checkpoint). So the standby's log stays about as large as the primary's,
// and replaying it (a promoted standby) still finds every decision the
// primary's own replay would.
//
// # Authentication
//
// Every connection, before any other frame (auth.go): the dialling side
// (a standby, an arch JOIN, a prober) sends CHALLENGE with a fresh 32-byte
// nonce Nd; the accepting side (a primary's shipper, a standby answering
// PROBEs) answers PROOF with its own fresh nonce Na and
// HMAC-SHA256(secret, "tandem standby link v4: accepting side" | version |
// mode | Nd | Na); the dialling side checks it (constant time) and only
// then sends RESPONSE, HMAC-SHA256(secret, "tandem standby link v4:
// dialling side" | version | mode | Nd | Na), followed by its HELLO, JOIN or
// PROBE; the accepting side checks RESPONSE before it reads further. Each
// side's nonce makes a recorded handshake useless on a new connection, and
// the per-side labels make a proof reflected back to its maker fail. A
// failure is a REFUSE naming no cluster, or a closed connection: no
// WELCOME, cluster id, epoch, position or record reaches a peer that has not
// proved it holds the secret, in either direction. mode is 1 with a secret
// and 0 without one (CheckExposure allows that on loopback only); sides
// whose modes differ refuse each other. With TLS configured (Auth.ServerTLS
// and ClientTLS: mutual TLS) the connection is TLS first and the handshake
// runs inside it; the secret authenticates the ends, TLS also hides and
// protects the stream on the wire.
//
// An accepting side holds at most maxHandshakes connections that have not
// authenticated (more are closed unread), maxLinkConns in all, each for at
// most the net timeout, with handshakeBuffer-byte buffers; every frame's
// length is checked against its kind's maximum (maxPayload) and against
// the kinds the reader expects next before anything is allocated for it.
//
// # Protocol
//
// Every frame: kind u8 | length u32 LE | CRC-32C u32 LE (of kind, length and
// payload) | payload. The standby connects to the primary's
// --standby-listen address, authenticates (above) and sends HELLO; the
// primary answers WELCOME or REFUSE, then sends RECORDS and RELEASE frames;
// the standby answers each RECORDS with ACK, once the records are on its
// disk. An ACK past the last record the primary sent is refused and ends
// the connection (a peer cannot make max-protection acknowledge what no
// standby holds).
//
//	CHALLENGE version u8 | mode u8 | nonce [32]
//	PROOF    version u8 | mode u8 | nonce [32] | mac [32]
//	RESPONSE mac [32]
//	HELLO    version u8 | cluster [16] | epoch u64 | segment u64 | offset u64
//	WELCOME  version u8 | cluster [16] | epoch u64 | transport u8 (0 sync or
//	         async, 1 arch) | connections u8 | session u64
//	RECORDS  n u32 | n × (segment u64 | offset u64 | type u8 | length u32 | payload)
//	ACK      segment u64 | offset u64
//	REFUSE   message (UTF-8)
//	RELEASE  before u64 | segment u64 | offset u64: the primary released its
//	         segments < before; valid once the standby has every record up
//	         to (segment, offset)
//	PROBE    as HELLO: asks for WELCOME only (fencing checks); never a standby.
//	         A running standby with a listen address answers it too, with
//	         its own cluster and epoch, so a primary can check a claim of a
//	         newer epoch with its --peer. A claim is heard only after the
//	         handshake, and claims arriving while one is checked are dropped.
//	JOIN     version u8 | cluster [16] | epoch u64 | session u64: arch, a
//	         further connection of the session WELCOME named
//	SEGMENT  segment u64 | after (segment u64 | offset u64) | last (segment
//	         u64 | offset u64) | n u32: arch, the next n records (in RECORDS
//	         frames on this connection) are the primary's segment, from the
//	         one after "after" to "last"; n is at most last's offset / 8 + 1
//	         (a record takes at least 8 bytes), checked before anything is
//	         allocated for it
//
// Under the arch transport (see arch.go) the primary sends only completed
// segments, each whole on one of the session's connections, and the
// standby applies them in the primary's order whatever connection they
// came on, acknowledging on its first connection.
//
// A frame with a bad checksum, an unknown kind, a length past MaxFrame, a
// truncated frame, a stream from another cluster or an older epoch, or
// records out of order: the connection is closed with an error that says
// which, and nothing of that frame is written.
package standby

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"time"

	"github.com/tandem-tx/tandem/internal/wal"
)

// Version is the protocol version. 2: RELEASE frames; MARK records are
// never shipped. 3: the ARCH transport (WELCOME says which transport, JOIN
// and SEGMENT frames). 4: every connection starts with the authentication
// handshake (CHALLENGE, PROOF, RESPONSE); frame lengths are bounded per
// kind; STATE frames (syncstate.go). 5: WELCOME carries the primary's
// in-doubt boundary (UnsynchronizedPromotionFile), which the standby keeps;
// since then, a WELCOME may end with the cluster's birth and when its id
// was made (16 more bytes, Identity.Born and Identity.Made): a standby
// reads both lengths, so a standby upgraded first follows a primary of
// either kind.
const Version = 5

// DefaultNetTimeout is the standby link's default net timeout
// (--net-timeout): handshakes, writes, and how long a max-availability
// primary waits for its standby before going on unprotected.
const DefaultNetTimeout = 10 * time.Second

// DefaultDrainTimeout is how long a primary stopping cleanly waits for its
// standby to acknowledge every record and take the final STATE.
const DefaultDrainTimeout = 10 * time.Second

// MaxFrame bounds a frame's payload.
const MaxFrame = 64 << 20

// Frame kinds.
const (
	kindHello   = 1
	kindWelcome = 2
	kindRecords = 3
	kindAck     = 4
	kindRefuse  = 5
	kindRelease = 6
	kindJoin    = 7
	kindSegment = 8
	// kindState: the primary tells its standby whether it holds every
	// decision the primary acts on (syncstate.go): flags u8.
	kindState = 12
	// kindProbe is a HELLO that only asks for the primary's identity (the
	// fencing check of --peer, a promoted standby announcing its epoch):
	// the primary answers WELCOME (or REFUSE) and hangs up; it never takes
	// the prober for its standby.
	kindProbe = 16
	// The authentication handshake (auth.go), before any other frame.
	kindChallenge = 9  // dialling side: version u8 | mode u8 | nonce [32]
	kindProof     = 10 // accepting side: version u8 | mode u8 | nonce [32] | mac [32]
	kindResponse  = 11 // dialling side: mac [32]
)

// kinds is a set of frame kinds: what a reader accepts next.
type kinds uint32

func kindsOf(ks ...byte) kinds {
	var s kinds
	for _, k := range ks {
		s |= 1 << k
	}
	return s
}

func (s kinds) has(k byte) bool { return k < 32 && s&(1<<k) != 0 }

// maxPayload is each kind's largest payload, checked from the header
// before anything is allocated or read for the payload.
var maxPayload = [32]uint32{
	kindHello: 41, kindWelcome: welcomeBornLen, kindRecords: MaxFrame, kindAck: 16, kindRefuse: maxRefuse,
	kindRelease: 24, kindJoin: 33, kindSegment: 44, kindProbe: 41,
	kindChallenge: 2 + nonceSize, kindProof: 2 + nonceSize + 32, kindResponse: 32, kindState: 1,
}

// maxRefuse bounds a REFUSE message.
const maxRefuse = 4096

// anyKind accepts every kind (the checks are the caller's).
const anyKind kinds = 1<<kindHello | 1<<kindWelcome | 1<<kindRecords | 1<<kindAck | 1<<kindRefuse | 1<<kindRelease |
	1<<kindJoin | 1<<kindSegment | 1<<kindProbe | 1<<kindChallenge | 1<<kindProof | 1<<kindResponse | 1<<kindState

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrProtocol is wrapped by every error about bytes a peer sent.
var ErrProtocol = errors.New("standby: protocol error")

// ErrRefused is wrapped by errors the peer sent in a REFUSE frame.
var ErrRefused = errors.New("standby: refused by the peer")

func writeFrame(w *bufio.Writer, kind byte, payload []byte) error {
	var h [9]byte
	h[0] = kind
	binary.LittleEndian.PutUint32(h[1:5], uint32(len(payload)))
	crc := crc32.Update(0, castagnoli, h[:5])
	crc = crc32.Update(crc, castagnoli, payload)
	binary.LittleEndian.PutUint32(h[5:9], crc)
	if _, err := w.Write(h[:]); err != nil {
		return err
	}
	if _, err := w.Write(payload); err != nil {
		return err
	}
	return w.Flush()
}

// readFrame reads one frame of a kind in accept (a REFUSE is always
// accepted, and returned as an error). buf is reused when large enough.
func readFrame(r io.Reader, buf []byte, accept kinds) (byte, []byte, error) {
	var h [9]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, nil, fmt.Errorf("%w: truncated frame header", ErrProtocol)
		}
		return 0, nil, err
	}
	kind := h[0]
	if !anyKind.has(kind) {
		return 0, nil, fmt.Errorf("%w: unknown frame kind %d (not a Tandem standby stream?)", ErrProtocol, kind)
	}
	if !accept.has(kind) && kind != kindRefuse {
		return 0, nil, fmt.Errorf("%w: unexpected kind %d frame here", ErrProtocol, kind)
	}
	n := binary.LittleEndian.Uint32(h[1:5])
	if n > maxPayload[kind] {
		return 0, nil, fmt.Errorf("%w: a kind %d frame of %d bytes is larger than its limit %d", ErrProtocol, kind, n, maxPayload[kind])
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		return 0, nil, fmt.Errorf("%w: truncated frame: %d-byte payload of a kind %d frame cut short: %v", ErrProtocol, n, kind, err)
	}
	crc := crc32.Update(0, castagnoli, h[:5])
	crc = crc32.Update(crc, castagnoli, buf)
	if crc != binary.LittleEndian.Uint32(h[5:9]) {
		return 0, nil, fmt.Errorf("%w: checksum mismatch in a kind %d frame of %d bytes", ErrProtocol, kind, n)
	}
	if kind == kindRefuse {
		return 0, nil, fmt.Errorf("%w: %s", ErrRefused, buf)
	}
	return kind, buf, nil
}

// ClusterID names a primary/standby pair; a standby takes it from the first
// primary it copies.
type ClusterID [16]byte

func (c ClusterID) String() string { return fmt.Sprintf("%x", c[:]) }

// IsZero reports whether c is unset.
func (c ClusterID) IsZero() bool { return c == ClusterID{} }

type hello struct {
	cluster ClusterID
	epoch   uint64
	pos     wal.Position
}

func (h hello) encode() []byte {
	b := []byte{Version}
	b = append(b, h.cluster[:]...)
	b = binary.LittleEndian.AppendUint64(b, h.epoch)
	b = binary.LittleEndian.AppendUint64(b, h.pos.Segment)
	return binary.LittleEndian.AppendUint64(b, uint64(h.pos.Offset))
}

func decodeHello(b []byte) (hello, error) {
	var h hello
	if len(b) != 1+16+24 {
		return h, fmt.Errorf("%w: HELLO of %d bytes, want 41", ErrProtocol, len(b))
	}
	if b[0] != Version {
		return h, fmt.Errorf("%w: protocol version %d, this build speaks %d", ErrProtocol, b[0], Version)
	}
	copy(h.cluster[:], b[1:17])
	h.epoch = binary.LittleEndian.Uint64(b[17:])
	h.pos.Segment = binary.LittleEndian.Uint64(b[25:])
	h.pos.Offset = int64(binary.LittleEndian.Uint64(b[33:]))
	return h, nil
}

// Transports as WELCOME names them.
const (
	wireStream = 0 // sync or async: RECORDS frames on the one connection
	wireArch   = 1 // arch: SEGMENT frames, on up to conns connections
)

// MaxArchConnections bounds ShipperConfig.MaxConnections.
const MaxArchConnections = 16

type welcome struct {
	cluster   ClusterID
	epoch     uint64
	transport byte   // wireStream or wireArch
	conns     byte   // arch: the connections the standby opens, 1 to MaxArchConnections
	session   uint64 // arch: what the standby's other connections JOIN
	// inDoubtBefore: the primary was, or descends from, a standby promoted
	// without being synchronized at this time (Unix ns; 0: never). The
	// standby keeps it (UnsynchronizedPromotionFile).
	inDoubtBefore int64
	// born: when the cluster's decision log was created (Unix ns; 0: not
	// sent, by a primary from before births were recorded). The standby
	// keeps it in its identity.
	born int64
	// made: when the cluster id was made (Identity.Made, Unix ns; 0: not
	// known); sent with born.
	made int64
}

// welcomeLen is a WELCOME's length without born; welcomeBornLen with it.
const (
	welcomeLen     = 1 + 16 + 8 + 2 + 8 + 8
	welcomeBornLen = welcomeLen + 16
)

func (w welcome) encode() []byte {
	b := []byte{Version}
	b = append(b, w.cluster[:]...)
	b = binary.LittleEndian.AppendUint64(b, w.epoch)
	b = append(b, w.transport, w.conns)
	b = binary.LittleEndian.AppendUint64(b, w.session)
	b = binary.LittleEndian.AppendUint64(b, uint64(w.inDoubtBefore))
	if w.born != 0 {
		b = binary.LittleEndian.AppendUint64(b, uint64(w.born))
		b = binary.LittleEndian.AppendUint64(b, uint64(w.made))
	}
	return b
}

func decodeWelcome(b []byte) (welcome, error) {
	var w welcome
	if len(b) > 0 && b[0] != Version {
		return w, fmt.Errorf("%w: protocol version %d, this build speaks %d", ErrProtocol, b[0], Version)
	}
	if len(b) != welcomeLen && len(b) != welcomeBornLen {
		return w, fmt.Errorf("%w: WELCOME of %d bytes, want %d or %d", ErrProtocol, len(b), welcomeLen, welcomeBornLen)
	}
	if len(b) == welcomeBornLen {
		w.born = int64(binary.LittleEndian.Uint64(b[welcomeLen:]))
		w.made = int64(binary.LittleEndian.Uint64(b[welcomeLen+8:]))
	}
	copy(w.cluster[:], b[1:17])
	w.epoch = binary.LittleEndian.Uint64(b[17:])
	w.transport, w.conns = b[25], b[26]
	w.session = binary.LittleEndian.Uint64(b[27:])
	w.inDoubtBefore = int64(binary.LittleEndian.Uint64(b[35:]))
	switch {
	case w.transport == wireStream:
	case w.transport == wireArch && w.conns >= 1 && w.conns <= MaxArchConnections:
	default:
		return w, fmt.Errorf("%w: WELCOME names transport %d with %d connections", ErrProtocol, w.transport, w.conns)
	}
	return w, nil
}

// join is an ARCH standby's further connection to its session.
type join struct {
	cluster ClusterID
	epoch   uint64
	session uint64
}

func (j join) encode() []byte {
	b := []byte{Version}
	b = append(b, j.cluster[:]...)
	b = binary.LittleEndian.AppendUint64(b, j.epoch)
	return binary.LittleEndian.AppendUint64(b, j.session)
}

func decodeJoin(b []byte) (join, error) {
	var j join
	if len(b) > 0 && b[0] != Version {
		return j, fmt.Errorf("%w: protocol version %d, this build speaks %d", ErrProtocol, b[0], Version)
	}
	if len(b) != 1+16+8+8 {
		return j, fmt.Errorf("%w: JOIN of %d bytes, want 33", ErrProtocol, len(b))
	}
	copy(j.cluster[:], b[1:17])
	j.epoch = binary.LittleEndian.Uint64(b[17:])
	j.session = binary.LittleEndian.Uint64(b[25:])
	return j, nil
}

// segHeader announces an ARCH segment: n records of the primary's segment
// seg, the first right after after (the last record of the segment sent
// before it in the session, or the standby's position), the last at last.
type segHeader struct {
	seg         uint64
	after, last wal.Position
	n           uint32
}

func (h segHeader) encode() []byte {
	b := binary.LittleEndian.AppendUint64(nil, h.seg)
	b = append(b, encodePos(h.after)...)
	b = append(b, encodePos(h.last)...)
	return binary.LittleEndian.AppendUint32(b, h.n)
}

func decodeSegHeader(b []byte) (segHeader, error) {
	var h segHeader
	if len(b) != 8+16+16+4 {
		return h, fmt.Errorf("%w: SEGMENT of %d bytes, want 44", ErrProtocol, len(b))
	}
	h.seg = binary.LittleEndian.Uint64(b)
	h.after, _ = decodeAck(b[8:24])
	h.last, _ = decodeAck(b[24:40])
	h.n = binary.LittleEndian.Uint32(b[40:])
	// n records have n distinct positions in the segment, 8-byte aligned
	// and at least 8 bytes apart (a record's header): a count past that is
	// a lie, refused before anything is allocated for it.
	if h.n == 0 || !h.after.Less(h.last) || h.last.Segment != h.seg || h.last.Offset < 0 || uint64(h.n) > uint64(h.last.Offset)/8+1 {
		return h, fmt.Errorf("%w: SEGMENT %d of %d records after %s ending at %s is not a segment", ErrProtocol, h.seg, h.n, h.after, h.last)
	}
	return h, nil
}

// record is one shipped record; payload owned.
type record struct {
	pos     wal.Position
	typ     wal.Type
	payload []byte
	at      time.Time // when the primary wrote it (zero: replayed at start)
}

func recordsSize(recs []record) int {
	n := 4
	for _, r := range recs {
		n += 21 + len(r.payload)
	}
	return n
}

func encodeRecords(b []byte, recs []record) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(recs)))
	for _, r := range recs {
		b = binary.LittleEndian.AppendUint64(b, r.pos.Segment)
		b = binary.LittleEndian.AppendUint64(b, uint64(r.pos.Offset))
		b = append(b, byte(r.typ))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(r.payload)))
		b = append(b, r.payload...)
	}
	return b
}

// decodeRecords decodes a RECORDS payload; the payloads alias b. after is
// the standby's position: every record must come after it, in order.
func decodeRecords(b []byte, after wal.Position) ([]record, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("%w: RECORDS frame of %d bytes", ErrProtocol, len(b))
	}
	n := binary.LittleEndian.Uint32(b)
	b = b[4:]
	if uint64(n) > uint64(len(b))/21 {
		return nil, fmt.Errorf("%w: RECORDS frame claims %d records in %d bytes", ErrProtocol, n, len(b))
	}
	recs := make([]record, 0, n)
	prev := after
	for i := range n {
		if len(b) < 21 {
			return nil, fmt.Errorf("%w: record %d of %d cut short", ErrProtocol, i, n)
		}
		var r record
		r.pos.Segment = binary.LittleEndian.Uint64(b)
		r.pos.Offset = int64(binary.LittleEndian.Uint64(b[8:]))
		r.typ = wal.Type(b[16])
		l := binary.LittleEndian.Uint32(b[17:])
		b = b[21:]
		if uint64(l) > uint64(len(b)) {
			return nil, fmt.Errorf("%w: record %d of %d: payload of %d bytes runs past the frame", ErrProtocol, i, n, l)
		}
		r.payload = b[:l]
		b = b[l:]
		if r.typ == 0 || r.typ == 255 {
			return nil, fmt.Errorf("%w: record %d at %s has reserved type %d", ErrProtocol, i, r.pos, r.typ)
		}
		if !prev.Less(r.pos) {
			return nil, fmt.Errorf("%w: record at %s is not after %s: out of order or repeated", ErrProtocol, r.pos, prev)
		}
		prev = r.pos
		recs = append(recs, r)
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the last record of a RECORDS frame", ErrProtocol, len(b))
	}
	return recs, nil
}

func (n release) encode() []byte {
	b := binary.LittleEndian.AppendUint64(nil, n.before)
	return append(b, encodePos(n.at)...)
}

func decodeRelease(b []byte) (release, error) {
	if len(b) != 24 {
		return release{}, fmt.Errorf("%w: RELEASE of %d bytes, want 24", ErrProtocol, len(b))
	}
	at, _ := decodeAck(b[8:])
	return release{before: binary.LittleEndian.Uint64(b), at: at}, nil
}

func encodePos(p wal.Position) []byte {
	b := binary.LittleEndian.AppendUint64(nil, p.Segment)
	return binary.LittleEndian.AppendUint64(b, uint64(p.Offset))
}

func decodeAck(b []byte) (wal.Position, error) {
	if len(b) != 16 {
		return wal.Position{}, fmt.Errorf("%w: ACK of %d bytes, want 16", ErrProtocol, len(b))
	}
	return wal.Position{Segment: binary.LittleEndian.Uint64(b), Offset: int64(binary.LittleEndian.Uint64(b[8:]))}, nil
}
