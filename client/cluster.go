package client

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/tandem-tx/tandem/api"
	"github.com/tandem-tx/tandem/internal/addrhint"
	"github.com/tandem-tx/tandem/xid"
)

// Branches decided by a coordinator are owned by its cluster (a primary and
// its standbys share one identity, xid.Owner): their names carry it, so that
// a coordinator of another cluster started over the same databases never
// takes them for its own (docs/ownership.md). The client learns the
// identity once, from the coordinator's Health (cluster=…), before its
// first coordinator-decided branch, and keeps it: it follows one cluster
// only (follow.go).

// clusterRetry is how long a failure to learn the identity is kept.
const clusterRetry = time.Second

// clusterState is what the client knows of the cluster's identity.
type clusterState struct {
	mu  sync.Mutex // one Health at a time
	id  xid.Owner  // zero: not known
	err error      // the last failure, kept clusterRetry
	at  time.Time
}

// clusterID returns the identity of the coordinators' cluster: the one the
// client follows when it learnt it from a probe, else the one the
// coordinator in use names in its Health. A coordinator whose Health names
// no cluster is older than this client: the coordinator path is refused
// (an error that says to upgrade it).
func (c *Client) clusterID(ctx context.Context) (xid.Owner, error) {
	if c.coords == nil {
		return xid.Owner{}, ErrNoCoordinator
	}
	s := &c.cluster
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.id.IsZero() {
		return s.id, nil
	}
	if s.err != nil && time.Since(s.at) < clusterRetry {
		return xid.Owner{}, s.err
	}
	id, err := c.askCluster(ctx)
	s.id, s.err, s.at = id, err, time.Now()
	return id, err
}

func (c *Client) askCluster(ctx context.Context) (xid.Owner, error) {
	cs := c.coords
	cs.mu.Lock()
	name := cs.cluster
	cs.mu.Unlock()
	ep := cs.cur.Load()
	if name == "" {
		// Any coordinator of the cluster names it, a standby too: the one
		// in use first, then the others.
		eps := append([]*endpoint{ep}, cs.eps...)
		var h *api.HealthResponse
		var err error
		for _, e := range eps {
			hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			c.coordinatorCalls.Add(1)
			h, err = e.health(hctx)
			cancel()
			if ep = e; err == nil {
				break
			}
		}
		if err != nil {
			return xid.Owner{}, fmt.Errorf("client: ask the coordinator at %s for its cluster's identity (Health), which names the branches it decides: %w", ep.addr, addrhint.Wrap(ep.addr, err))
		}
		name, _ = placeIn(h.GetMessage())
		if name == "" {
			return xid.Owner{}, fmt.Errorf("client: the coordinator at %s names no cluster in its Health (no cluster=…): it is older than this client, "+
				"which names every branch a coordinator decides after the coordinator's cluster; upgrade the coordinator, or decide at a commit point (DecideAt auto or rm)", ep.addr)
		}
		cs.mu.Lock()
		if cs.cluster == "" {
			cs.cluster = name
		}
		cs.mu.Unlock()
	}
	id, err := xid.ParseOwner(name)
	if err != nil {
		return xid.Owner{}, fmt.Errorf("client: the coordinator at %s names its cluster %q, which is not an identity: %w", ep.addr, name, err)
	}
	return id, nil
}
