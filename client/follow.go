package client

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tandem-tx/tandem/api"
	"github.com/tandem-tx/tandem/internal/addrhint"
)

// Following the primary. A client may know several coordinators of one
// cluster (a primary and its standbys: Config.Coordinators). It sends
// every call to the one it last found serving, and looks for another only
// when that one refuses a call because it is not the primary (the
// api.MetadataNotPrimary trailer, or FAILED_PRECONDITION from an older
// server) or cannot be reached (UNAVAILABLE): it then asks every configured
// address's Health and moves to the one that says serving (the highest
// epoch if several do). One probe runs at a time (the other callers wait
// for its answer, or for their context), and a probe that found nobody is
// not repeated for probeQuiet, however many calls are refused meanwhile:
// the callers back off (commitRPC) and try again.

// probeTimeout bounds one probe of the coordinators' Health.
const probeTimeout = time.Second

// probeQuiet is how long a probe that found no other serving coordinator
// is trusted before the next.
const probeQuiet = 50 * time.Millisecond

// endpoint is one configured coordinator address.
type endpoint struct {
	addr string
	conn *grpc.ClientConn
	api  api.CoordinatorClient
	// settlesAny: its last Health said it accepts client_settles on any
	// resource manager (api.MetadataClientSettlesAny). False until a
	// Health answered: the client then settles only session-bound branches.
	settlesAny atomic.Bool
}

// health asks the coordinator's Health, and keeps what its headers say it
// accepts.
func (e *endpoint) health(ctx context.Context) (*api.HealthResponse, error) {
	var md metadata.MD
	h, err := e.api.Health(ctx, &api.HealthRequest{}, grpc.Header(&md))
	if err == nil {
		v := md.Get(api.MetadataClientSettlesAny)
		e.settlesAny.Store(len(v) > 0 && v[0] == "1")
	}
	return h, err
}

// coordinators are the configured addresses and which one the client uses.
type coordinators struct {
	eps []*endpoint
	cur atomic.Pointer[endpoint]

	mu        sync.Mutex    // guards the fields below
	probing   chan struct{} // closed when the probe in flight ends; nil: none
	lastProbe time.Time     // when a probe last found nobody better
	// cluster is the cluster followed (Health's cluster=), learnt from the
	// first answer of the coordinator in use that names one; "" until then.
	cluster string
	// floor is the highest epoch moved to: a coordinator naming an older
	// one (a superseded primary not fenced yet) is never moved to.
	floor uint64
}

func newCoordinators(addrs []string, opts []grpc.DialOption) (*coordinators, error) {
	cs := &coordinators{}
	for _, a := range addrs {
		conn, err := grpc.NewClient(a, opts...)
		if err != nil {
			_ = cs.close()
			return nil, fmt.Errorf("client: coordinator address %q: %w", a, err)
		}
		cs.eps = append(cs.eps, &endpoint{addr: a, conn: conn, api: api.NewCoordinatorClient(conn)})
	}
	cs.cur.Store(cs.eps[0])
	return cs, nil
}

func (cs *coordinators) close() error {
	var first error
	for _, ep := range cs.eps {
		if err := ep.conn.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// coordinatorAddrs is Config.Coordinator then Config.Coordinators, each
// address once, in that order (the first is tried first).
func coordinatorAddrs(cfg Config) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, a := range append([]string{cfg.Coordinator}, cfg.Coordinators...) {
		if a == "" || seen[a] {
			continue
		}
		if err := addrhint.CheckAPIAddr(a); err != nil {
			return nil, fmt.Errorf("client: %w", err)
		}
		seen[a] = true
		out = append(out, a)
	}
	return out, nil
}

// notPrimary reports whether a refused call's trailer says the coordinator
// is not the primary now (nothing written), and the role it named.
func notPrimary(trailer metadata.MD) (string, bool) {
	v := trailer.Get(api.MetadataNotPrimary)
	if len(v) == 0 {
		return "", false
	}
	return v[0], true
}

// mayHaveMoved reports whether err, from the coordinator the client uses,
// is a reason to look for another: it refused as a non-primary, or could
// not be reached, or refused with FAILED_PRECONDITION (a standby, demoted or
// fenced coordinator of a version that does not send the trailer).
func (c *Client) mayHaveMoved(err error, trailer metadata.MD) bool {
	if _, ok := notPrimary(trailer); ok {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable:
		return true
	case codes.FailedPrecondition:
		return len(c.coords.eps) > 1
	}
	return false
}

var (
	epochInHealth   = regexp.MustCompile(`\bepoch=(\d+)`)
	clusterInHealth = regexp.MustCompile(`\bcluster=(\S+)`)
)

// probe is the answer of one coordinator's Health.
type probe struct {
	answered, serving bool
	cluster           string // "": not said (a primary without --standby-listen, an older server)
	epoch             uint64
}

// placeIn reads the cluster and epoch of a Health message from its
// "role=… cluster=ID epoch=N" line (internal/server/standby.go), which
// follows any notes about the RMs (whose text could hold anything); from
// the whole message when it has no such line (an older server).
func placeIn(msg string) (cluster string, epoch uint64) {
	line := msg
	for _, l := range strings.Split(msg, "\n") {
		if strings.HasPrefix(l, "role=") {
			line = l
			break
		}
	}
	if m := epochInHealth.FindStringSubmatch(line); m != nil {
		epoch, _ = strconv.ParseUint(m[1], 10, 64)
	}
	if m := clusterInHealth.FindStringSubmatch(line); m != nil {
		cluster = m[1]
	}
	return cluster, epoch
}

// moveFrom looks for the coordinator that serves, after from refused a
// call or could not be reached (why). It returns the endpoint to use next
// and whether it differs from from. Another caller's move since from was
// chosen is taken as it is, without a probe.
func (c *Client) moveFrom(ctx context.Context, from *endpoint, why error) (*endpoint, bool) {
	cs := c.coords
	cs.mu.Lock()
	if cur := cs.cur.Load(); cur != from {
		cs.mu.Unlock()
		return cur, true
	}
	if wait := cs.probing; wait != nil {
		// Another caller probes: take its answer (or give up with ctx).
		cs.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
		}
		cur := cs.cur.Load()
		return cur, cur != from
	}
	if len(cs.eps) == 1 || time.Since(cs.lastProbe) < probeQuiet {
		cs.mu.Unlock()
		return from, false
	}
	done := make(chan struct{})
	cs.probing = done
	cs.mu.Unlock()
	to, p := c.probe(ctx, from)
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.probing = nil
	close(done)
	if to == from {
		cs.lastProbe = time.Now()
		return from, false
	}
	cs.cur.Store(to)
	cs.lastProbe = time.Time{}
	if p.cluster != "" {
		cs.cluster = p.cluster
		cs.floor = max(cs.floor, p.epoch)
	}
	epoch := p.epoch
	if c.cfg.Logger != nil {
		c.cfg.Logger.Warn("coordinator moved from "+from.addr+" to "+to.addr, "from", from.addr, "to", to.addr,
			"because", why, "epoch", epoch)
	}
	return to, true
}

// probe asks every configured coordinator's Health (in parallel, within
// probeTimeout) and returns the one that serves with the highest epoch
// (a superseded primary that has not been fenced yet may still say
// serving), preferring from, then the configured order; from when none
// serves. It follows one cluster, forward only: a coordinator naming
// another cluster than the one followed (the one known, else the one
// from's answer names) never counts, nor one naming an epoch older than
// one moved to; one naming no cluster (a primary without --standby-listen)
// counts only when no named one serves; several clusters serving while
// none is known, or a probe cut short by ctx, move nowhere.
func (c *Client) probe(ctx context.Context, from *endpoint) (*endpoint, probe) {
	cs := c.coords
	eps := cs.eps
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	probes := make([]probe, len(eps))
	_ = parallel(len(eps), func(i int) error {
		c.coordinatorCalls.Add(1)
		if h, err := eps[i].health(pctx); err == nil {
			probes[i] = probe{answered: true, serving: h.GetServing()}
			probes[i].cluster, probes[i].epoch = placeIn(h.GetMessage())
		}
		return nil
	})
	// Cut short by the caller's context: not on the answers heard so far,
	// the one not heard may be the newer primary. (gRPC's own deadline
	// timer can end the calls a moment before ctx.Err() says so: the clock
	// is asked too.)
	if d, ok := ctx.Deadline(); ctx.Err() != nil || ok && !time.Now().Before(d) {
		return from, probe{}
	}
	cs.mu.Lock()
	for i, ep := range eps {
		if ep == from && cs.cluster == "" && probes[i].answered {
			cs.cluster = probes[i].cluster
		}
	}
	known, floor := cs.cluster, cs.floor
	cs.mu.Unlock()
	better := func(i, j int) bool { // whether serving answer i beats j
		if (probes[i].cluster != "") != (probes[j].cluster != "") {
			return probes[i].cluster != ""
		}
		return probes[i].epoch > probes[j].epoch || (probes[i].epoch == probes[j].epoch && eps[i] == from)
	}
	best := -1
	clusters := map[string]bool{}
	for i, p := range probes {
		switch {
		case !p.serving:
			continue
		case p.cluster != "" && known != "" && p.cluster != known:
			c.warn("a coordinator in the list serves another cluster than the one this client follows: never used; list only one cluster's coordinators",
				"coordinator", eps[i].addr, "its_cluster", p.cluster, "followed", known)
			continue
		case p.cluster != "" && p.epoch < floor:
			continue // superseded: a primary of a newer epoch was moved to
		}
		if p.cluster != "" {
			clusters[p.cluster] = true
		}
		if best < 0 || better(i, best) {
			best = i
		}
	}
	if best < 0 || len(clusters) > 1 {
		if len(clusters) > 1 {
			c.warn("coordinators of several clusters serve, and this client does not know which it follows yet: it moves to none; list only one cluster's coordinators")
		}
		return from, probe{}
	}
	return eps[best], probes[best]
}

// current is the coordinator the client uses now.
func (c *Client) current() *endpoint { return c.coords.cur.Load() }

// CurrentCoordinator is the address of the coordinator the client sends
// its calls to now ("" without one): Config's first address until a call
// was refused or failed there and another was found serving.
func (c *Client) CurrentCoordinator() string {
	if c.coords == nil {
		return ""
	}
	return c.current().addr
}

// call runs one Status or Abort RPC (fn) on the coordinator in use,
// following the primary: on a refusal as a non-primary, or when it cannot
// be reached, it moves to the one that serves and tries again, backing off
// while none does, until ctx ends. Both calls are safe to repeat (Abort
// and Status with resolve decide ABORT unless a decision exists; the
// first decision wins).
func (c *Client) call(ctx context.Context, fn func(ctx context.Context, ep *endpoint, opts ...grpc.CallOption) error) error {
	ep := c.current()
	backoff := 10 * time.Millisecond
	for {
		var trailer metadata.MD
		c.coordinatorCalls.Add(1)
		err := fn(ctx, ep, grpc.Trailer(&trailer))
		if err == nil || !c.mayHaveMoved(err, trailer) || ctx.Err() != nil {
			return addrhint.Wrap(ep.addr, err)
		}
		next, moved := c.moveFrom(ctx, ep, err)
		if moved {
			ep = next
			continue
		}
		if _, role := notPrimary(trailer); !role && status.Code(err) != codes.Unavailable {
			return err // FAILED_PRECONDITION with nobody else serving: a refusal
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no coordinator of %s serves (the last answer, from %s: %w)", c.addrList(), ep.addr, err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// addrList names the configured coordinators.
func (c *Client) addrList() string {
	s := ""
	for i, ep := range c.coords.eps {
		if i > 0 {
			s += ", "
		}
		s += ep.addr
	}
	return s
}

// noPrimaryError is what commitRPC returns when every attempt was refused
// before anything was written (by coordinators that are not the primary)
// until ctx ended: no decision exists, so rolling back is safe.
type noPrimaryError struct {
	addrs string
	last  error
}

func (e *noPrimaryError) Error() string {
	return fmt.Sprintf("no coordinator of %s served as the primary before the deadline (each refused before writing anything; the last: %v)", e.addrs, e.last)
}
func (e *noPrimaryError) Unwrap() error { return e.last }
