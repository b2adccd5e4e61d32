package standby

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/tandem-tx/tandem/internal/setting"
)

// ErrFenced is wrapped by the error of a primary that learns that another
// coordinator of its cluster was promoted since (a newer epoch).
var ErrFenced = errors.New("standby: fenced")

// CheckPeer asks the coordinator at peer (its --standby-listen address:
// a primary's shipper, or a standby answering PROBEs) for its cluster and
// epoch with a PROBE frame (which never displaces the peer's standby) and
// hangs up; a primary of the same cluster at an older epoch learns id's
// epoch from it and checks, then fences itself (ShipperConfig.OnFenced).
// Both ends authenticate first (auth, as the link's); nothing is sent to a
// peer that does not prove it holds the secret.
// It returns an error wrapping ErrFenced when peer is of the same cluster and
// a newer epoch than id: this coordinator was superseded and must not decide
// or settle anything. Otherwise err is nil, info says what was learnt, and
// reached tells whether the peer answered at all (WELCOME or REFUSE, after
// authenticating) rather than being unreachable, unauthenticated or cut off
// mid-handshake.
func CheckPeer(peer string, id Identity, auth *Auth, timeout time.Duration) (info string, reached bool, err error) {
	if err := CheckExposure(setting.StandbyPeer, peer, auth); err != nil {
		return fmt.Sprintf("peer %s: %v", peer, err), false, nil
	}
	raw, err := net.DialTimeout("tcp", peer, timeout)
	if err != nil {
		return fmt.Sprintf("peer %s not reachable: %v", peer, err), false, nil
	}
	defer raw.Close()
	_ = raw.SetDeadline(time.Now().Add(timeout))
	c := auth.clientConn(raw, peer)
	r, w := bufio.NewReaderSize(c, handshakeBuffer), bufio.NewWriterSize(c, handshakeBuffer)
	if err := dialAuth(r, w, auth); err != nil {
		return fmt.Sprintf("peer %s: not authenticated: %v", peer, err), false, nil
	}
	if err := writeFrame(w, kindProbe, hello{cluster: id.Cluster, epoch: id.Epoch}.encode()); err != nil {
		return fmt.Sprintf("peer %s: %v", peer, err), false, nil
	}
	kind, b, err := readFrame(r, nil, kindsOf(kindWelcome))
	if errors.Is(err, ErrRefused) {
		return fmt.Sprintf("peer %s: %v", peer, err), true, nil
	}
	if err != nil {
		return fmt.Sprintf("peer %s: %v", peer, err), false, nil
	}
	if kind != kindWelcome {
		return fmt.Sprintf("peer %s: answered a kind %d frame", peer, kind), true, nil
	}
	wl, err := decodeWelcome(b)
	if err != nil {
		return fmt.Sprintf("peer %s: %v", peer, err), true, nil
	}
	if wl.cluster == id.Cluster && wl.epoch > id.Epoch {
		return "", true, fmt.Errorf("%w: the coordinator at %s is the primary of cluster %s at epoch %d, this one is at epoch %d: it was promoted since, so this coordinator must not decide or settle anything; re-seed this one as its standby (stop it, run %q on its data directory, then tandem serve --standby-of %s)",
			ErrFenced, peer, wl.cluster, wl.epoch, id.Epoch, ReseedCommand(""), peer)
	}
	return fmt.Sprintf("peer %s is at epoch %d of cluster %s", peer, wl.epoch, wl.cluster), true, nil
}

// answerProbes listens on the standby's cfg.Listen and answers every
// authenticated PROBE with this standby's cluster and epoch (a WELCOME),
// so that a primary that receives a claim of a newer epoch can ask its
// --peer and disprove it. HELLO and JOIN are refused: a standby ships
// nothing. The listener has the shipper's limits (gate).
func (r *Receiver) answerProbes() error {
	lc := net.ListenConfig{}
	lis, err := lc.Listen(context.Background(), "tcp", r.cfg.Listen)
	if err != nil {
		return fmt.Errorf("standby: listen for fencing checks on %s (--standby-listen): %w", r.cfg.Listen, err)
	}
	r.probes = newGate(lis, r.cfg.Auth, r.cfg.NetTimeout, kindsOf(kindHello, kindJoin, kindProbe), r.cfg.Logger, "standby's probe listener")
	go r.probes.serve(func(o opening) error {
		w := bufio.NewWriterSize(o.c, handshakeBuffer)
		_ = o.c.SetWriteDeadline(time.Now().Add(r.cfg.NetTimeout))
		if o.kind != kindProbe {
			msg := fmt.Sprintf("this coordinator is a standby (of %s): it ships no log; follow the primary instead", r.cfg.Primary)
			_ = writeFrame(w, kindRefuse, []byte(msg))
			return errors.New("refused a standby: " + msg)
		}
		if _, err := decodeHello(o.payload); err != nil {
			_ = writeFrame(w, kindRefuse, []byte(err.Error()))
			return err
		}
		r.mu.Lock()
		wl := welcome{epoch: r.id.Epoch}
		if r.haveID {
			wl.cluster = r.id.Cluster
		}
		r.mu.Unlock()
		return writeFrame(w, kindWelcome, wl.encode())
	})
	return nil
}

// Identity is the primary's cluster and epoch.
func (s *Shipper) Identity() Identity { return s.cfg.Identity }
