package standby

import (
	"bufio"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/tandem-tx/tandem/internal/setting"
)

// Auth is how the two ends of a standby link prove to each other that they
// belong to the same cluster (see the package doc, "Authentication"). A nil
// *Auth, or one with neither a secret nor TLS, authenticates nothing: it is
// allowed on loopback only (CheckExposure).
type Auth struct {
	// Secret is the cluster secret both ends hold (LoadSecretFile): every
	// connection starts with a challenge-response over it, in both
	// directions, before anything else is sent.
	Secret []byte
	// ServerTLS and ClientTLS, when set, wrap every standby connection in
	// TLS: ServerTLS on the side that accepts (it must require and verify
	// client certificates: mutual TLS), ClientTLS on the side that dials
	// (its ServerName defaults to the dialled host). TLS also keeps the
	// stream confidential and unmodified on the wire, which the secret alone
	// does not.
	ServerTLS, ClientTLS *tls.Config
	// InsecureNoTLS allows a link off loopback authenticated by the secret
	// alone (--insecure-no-tls). The secret proves who is at the other end
	// when the connection starts; it does not protect the frames after it,
	// so someone on the network path could read every decision and forge
	// ACKs. Only on a network you trust.
	InsecureNoTLS bool
}

// MinSecret is the shortest secret accepted, in bytes of the file's text.
const MinSecret = 32

// Enabled reports whether a authenticates the peer.
func (a *Auth) Enabled() bool {
	return a != nil && (len(a.Secret) > 0 || (a.ServerTLS != nil && a.ClientTLS != nil))
}

func (a *Auth) mode() byte {
	if a != nil && len(a.Secret) > 0 {
		return authSecret
	}
	return authNone
}

// Authentication modes, as CHALLENGE and PROOF name them.
const (
	authNone   = 0 // loopback without a secret (or TLS alone)
	authSecret = 1 // HMAC-SHA256 over the cluster secret
)

// NewSecret returns a new random secret as the text a secret file holds:
// 32 random bytes in hexadecimal.
func NewSecret() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("standby: make a secret: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// Refusals of a secret file (LoadSecretFile).
var (
	ErrSecretUnreadable = errors.New("standby secret file unreadable")
	ErrSecretTooShort   = errors.New("standby secret too short")
)

// LoadSecretFile reads the cluster secret from path (surrounding
// whitespace trimmed; at least MinSecret characters, as "tandem secret"
// writes). warning is non-empty when the file is readable or writable by
// its group or others: the caller logs it.
//
// Its errors are *setting.Error for standby.secret_file, wrapping
// ErrSecretUnreadable or ErrSecretTooShort.
func LoadSecretFile(path string) (secret []byte, warning string, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, "", setting.Refuse(setting.StandbySecretFile, path, fmt.Errorf("%w: %w", ErrSecretUnreadable, err))
	}
	s := strings.TrimSpace(string(b))
	if len(s) < MinSecret {
		return nil, "", setting.Refuse(setting.StandbySecretFile, path, fmt.Errorf("%w: it has %d characters, at least %d are needed", ErrSecretTooShort, len(s), MinSecret))
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		warning = fmt.Sprintf("the standby secret file %s has mode %v: others on this host can read it (anyone holding it can impersonate a coordinator of the cluster); chmod 600 it", path, fi.Mode().Perm())
	}
	return []byte(s), warning, nil
}

// IsLoopback reports whether addr (host:port, to listen on or to dial)
// stays on this host. An empty host (":7072") listens on every interface;
// a host name other than localhost is taken as off the host.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Refusals of a standby address off loopback (CheckExposure).
var (
	// ErrLinkNotAuthenticated: a standby address off loopback with no
	// cluster secret.
	ErrLinkNotAuthenticated = errors.New("standby: refused off loopback without authentication: anyone who reaches it could read every decision, pose as the standby and acknowledge what no standby holds, feed a standby forged decisions, or fence the primary")
	// ErrLinkNotEncrypted: a standby address off loopback with the secret
	// but without TLS (and no InsecureNoTLS).
	ErrLinkNotEncrypted = errors.New("standby: refused off loopback without TLS: the secret authenticates each connection when it starts, not the frames after it, so anyone on the network path could read every decision and forge the standby's ACKs (a max-protection primary would then answer commits no standby holds)")
)

// CheckExposure refuses a standby link off loopback without
// authentication (ErrLinkNotAuthenticated) or, unless a.InsecureNoTLS,
// without TLS (ErrLinkNotEncrypted), as a *setting.Error naming s, the
// setting that gave addr.
func CheckExposure(s setting.Name, addr string, a *Auth) error {
	if addr == "" || IsLoopback(addr) {
		return nil
	}
	if !a.Enabled() {
		return setting.Refuse(s, addr, ErrLinkNotAuthenticated)
	}
	if (a.ServerTLS == nil || a.ClientTLS == nil) && !a.InsecureNoTLS {
		return setting.Refuse(s, addr, ErrLinkNotEncrypted)
	}
	return nil
}

// The handshake's labels: each side's MAC names the side, so a proof
// reflected back to the side that made it never passes.
const (
	labelAccepting = "tandem standby link v4: accepting side"
	labelDialling  = "tandem standby link v4: dialling side"
)

func authMAC(secret []byte, label string, mode byte, nc, ns []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(label))
	m.Write([]byte{Version, mode})
	m.Write(nc)
	m.Write(ns)
	return m.Sum(nil)
}

const nonceSize = 32

// errAuth is wrapped by every authentication failure.
var errAuth = errors.New("standby: authentication failed")

// refuseAuth is the REFUSE an accepting side sends a peer that failed the
// handshake: it names no cluster, epoch or position.
const refuseAuth = "authentication failed: the peer's proof does not match this coordinator's standby secret (both coordinators need the same --standby-secret-file)"

// acceptAuth is the accepting side's handshake (a primary's shipper, a
// standby answering PROBEs): it reads the peer's CHALLENGE, answers with
// its own nonce and proof, and checks the peer's proof. Nothing about this
// coordinator is sent before it returns nil.
func acceptAuth(r *bufio.Reader, w *bufio.Writer, a *Auth) error {
	kind, b, err := readFrame(r, nil, kindsOf(kindChallenge))
	if err != nil {
		return fmt.Errorf("reading CHALLENGE: %w", err)
	}
	if kind != kindChallenge {
		return fmt.Errorf("%w: expected CHALLENGE, got a kind %d frame", ErrProtocol, kind)
	}
	if len(b) != 2+nonceSize {
		return fmt.Errorf("%w: CHALLENGE of %d bytes, want %d", ErrProtocol, len(b), 2+nonceSize)
	}
	if b[0] != Version {
		_ = writeFrame(w, kindRefuse, []byte(fmt.Sprintf("protocol version %d, this coordinator speaks %d: run the same Tandem version on both", b[0], Version)))
		return fmt.Errorf("%w: protocol version %d, this build speaks %d", ErrProtocol, b[0], Version)
	}
	mode := a.mode()
	if b[1] != mode {
		msg := "this coordinator's standby link requires a secret: start the peer with the same --standby-secret-file"
		if mode == authNone {
			msg = "this coordinator has no standby secret, the peer has one: start both with the same --standby-secret-file"
		}
		_ = writeFrame(w, kindRefuse, []byte(msg))
		return fmt.Errorf("%w: the peer's authentication mode %d is not this coordinator's %d: %s", errAuth, b[1], mode, msg)
	}
	nc := b[2:]
	ns := make([]byte, nonceSize)
	if _, err := rand.Read(ns); err != nil {
		return err
	}
	proof := append([]byte{Version, mode}, ns...)
	if mode == authSecret {
		proof = append(proof, authMAC(a.Secret, labelAccepting, mode, nc, ns)...)
	} else {
		proof = append(proof, make([]byte, sha256.Size)...)
	}
	if err := writeFrame(w, kindProof, proof); err != nil {
		return err
	}
	kind, b, err = readFrame(r, nil, kindsOf(kindResponse))
	if err != nil {
		return fmt.Errorf("reading the peer's proof: %w", err)
	}
	if kind != kindResponse || len(b) != sha256.Size {
		return fmt.Errorf("%w: a kind %d frame of %d bytes where the peer's proof belongs", ErrProtocol, kind, len(b))
	}
	if mode == authSecret && !hmac.Equal(b, authMAC(a.Secret, labelDialling, mode, nc, ns)) {
		_ = writeFrame(w, kindRefuse, []byte(refuseAuth))
		return fmt.Errorf("%w: the peer's proof does not match this coordinator's standby secret (a wrong secret, or a replayed handshake)", errAuth)
	}
	return nil
}

// dialAuth is the dialling side's handshake (a standby, a prober): it sends
// a CHALLENGE, checks the accepting side's proof and sends its own. Nothing
// about this coordinator is sent before the peer proved it holds the
// secret (with a secret configured, a peer that does not prove it is
// refused).
func dialAuth(r *bufio.Reader, w *bufio.Writer, a *Auth) error {
	mode := a.mode()
	nc := make([]byte, nonceSize)
	if _, err := rand.Read(nc); err != nil {
		return err
	}
	if err := writeFrame(w, kindChallenge, append([]byte{Version, mode}, nc...)); err != nil {
		return err
	}
	kind, b, err := readFrame(r, nil, kindsOf(kindProof))
	if err != nil {
		return fmt.Errorf("reading the peer's proof: %w", err)
	}
	if kind != kindProof || len(b) != 2+nonceSize+sha256.Size {
		return fmt.Errorf("%w: a kind %d frame of %d bytes where the peer's proof belongs", ErrProtocol, kind, len(b))
	}
	if b[0] != Version {
		return fmt.Errorf("%w: protocol version %d, this build speaks %d", ErrProtocol, b[0], Version)
	}
	if b[1] != mode {
		return fmt.Errorf("%w: the peer answered authentication mode %d, this coordinator uses %d: both need the same --standby-secret-file", errAuth, b[1], mode)
	}
	ns, mac := b[2:2+nonceSize], b[2+nonceSize:]
	resp := make([]byte, sha256.Size)
	if mode == authSecret {
		if !hmac.Equal(mac, authMAC(a.Secret, labelAccepting, mode, nc, ns)) {
			return fmt.Errorf("%w: the peer's proof does not match this coordinator's standby secret: it is not a coordinator of this cluster (or has another secret); nothing was sent to it", errAuth)
		}
		resp = authMAC(a.Secret, labelDialling, mode, nc, ns)
	}
	return writeFrame(w, kindResponse, resp)
}

// serverConn wraps an accepted connection in TLS when a says so.
func (a *Auth) serverConn(c net.Conn) net.Conn {
	if a == nil || a.ServerTLS == nil {
		return c
	}
	return tlsConn{tls.Server(c, a.ServerTLS)}
}

// tlsConn is a TLS connection whose Close closes the socket at once: the
// link closes connections under locks and to drop peers, where a TLS
// close_notify could block on a full send buffer.
type tlsConn struct{ *tls.Conn }

func (c tlsConn) Close() error { return c.NetConn().Close() }

// clientConn wraps a dialled connection to addr in TLS when a says so.
func (a *Auth) clientConn(c net.Conn, addr string) net.Conn {
	if a == nil || a.ClientTLS == nil {
		return c
	}
	cfg := a.ClientTLS
	if cfg.ServerName == "" {
		cfg = cfg.Clone()
		cfg.ServerName, _, _ = net.SplitHostPort(addr)
	}
	return tlsConn{tls.Client(c, cfg)}
}
