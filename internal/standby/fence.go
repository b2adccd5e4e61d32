package standby

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"time"
)

// ErrFenced is wrapped by the error of a primary that learns that another
// coordinator of its cluster was promoted since (a newer epoch).
var ErrFenced = errors.New("standby: fenced")

// CheckPeer asks the coordinator at peer (its --standby-listen address) for
// its cluster and epoch with a PROBE frame (which never displaces the
// peer's standby) and hangs up; a peer of the same cluster at an older
// epoch learns id's epoch from it and fences itself (ShipperConfig.OnFenced).
// It returns an error wrapping ErrFenced when peer is of the same cluster and
// a newer epoch than id: this coordinator was superseded and must not decide
// or settle anything. Otherwise err is nil, info says what was learnt, and
// reached tells whether the peer answered at all (WELCOME or REFUSE) rather
// than being unreachable or cut off mid-handshake.
func CheckPeer(peer string, id Identity, timeout time.Duration) (info string, reached bool, err error) {
	c, err := net.DialTimeout("tcp", peer, timeout)
	if err != nil {
		return fmt.Sprintf("peer %s not reachable: %v", peer, err), false, nil
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	w := bufio.NewWriter(c)
	if err := writeFrame(w, kindProbe, hello{cluster: id.Cluster, epoch: id.Epoch}.encode()); err != nil {
		return fmt.Sprintf("peer %s: %v", peer, err), false, nil
	}
	kind, b, err := readFrame(bufio.NewReader(c), nil)
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

// Identity is the primary's cluster and epoch.
func (s *Shipper) Identity() Identity { return s.cfg.Identity }
