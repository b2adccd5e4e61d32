package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/tandem-tx/tandem/internal/coord"
	"github.com/tandem-tx/tandem/internal/metrics"
	"github.com/tandem-tx/tandem/internal/setting"
	"github.com/tandem-tx/tandem/internal/standby"
)

// StandbyOptions configure the decision-log transport (internal/standby).
// All empty: no standby, nothing shipped (the default).
type StandbyOptions struct {
	// Listen: the address standbys connect to (--standby-listen). On a
	// standby, the address it serves its own standby on once promoted
	// (nothing listens there before).
	Listen string
	// Transport sync, async or arch; Protection max-performance,
	// max-availability or max-protection (standby.ParseMode).
	Transport, Protection string
	// NetTimeout: see standby.ShipperConfig (default 10s).
	NetTimeout time.Duration
	// Of (standby): the primary's --standby-listen address. The process
	// then runs a standby: it copies the primary's log and decides nothing.
	Of string
	// Peer (primary): the other coordinator's --standby-listen address. At
	// start the primary asks it for its epoch and refuses to start (to
	// decide or settle anything) when it is newer; while it runs it asks
	// again every second and, on a newer epoch, stops deciding and settling
	// (RoleFenced): fencing after a failover.
	Peer string
	// MaxSend (primary): the largest RECORDS frame, bytes (default 1 MiB).
	MaxSend int
	// MaxConnections (primary, arch): parallel connections the standby
	// opens to receive completed segments (default 1).
	MaxConnections int
	// ArchLag (primary, arch): the longest a decision waits for its log
	// segment to complete before the segment is switched (default 1s).
	ArchLag time.Duration
	// SendBuffer, ReceiveBuffer: SO_SNDBUF/SO_RCVBUF of the standby
	// connections, bytes; 0 leaves them to the kernel (standby.NetOptions).
	SendBuffer, ReceiveBuffer int
	// DisableNoDelay turns TCP_NODELAY off (it is on by default).
	DisableNoDelay bool
	// Auth authenticates both ends of every standby connection (the
	// cluster secret, TLS): see standby.Auth. Without it, Listen, Of and
	// Peer must be loopback addresses.
	Auth *standby.Auth
}

// checkExposure refuses standby addresses off loopback without
// authentication.
func (so StandbyOptions) checkExposure() error {
	for _, a := range []struct {
		name setting.Name
		addr string
	}{{setting.StandbyListen, so.Listen}, {setting.StandbyOf, so.Of}, {setting.StandbyPeer, so.Peer}} {
		if err := standby.CheckExposure(a.name, a.addr, so.Auth); err != nil {
			return err
		}
	}
	return nil
}

func (so StandbyOptions) net() standby.NetOptions {
	return standby.NetOptions{SendBuffer: so.SendBuffer, ReceiveBuffer: so.ReceiveBuffer, DisableNoDelay: so.DisableNoDelay}
}

// StandbyStatus reports the primary's or the standby's shipping state (and
// the role of a demoted or fenced coordinator); ok is false when the process
// has no standby role. It never waits for a role change.
func (s *Server) StandbyStatus() (st standby.Status, ok bool) {
	src := s.statusOf.Load()
	if src == nil || src.get == nil {
		return st, false
	}
	return src.get(), true
}

// RoleStatus is the body of GET /standby: the shipping state and the
// address this coordinator serves (or, as a standby, will serve once
// promoted) its standby on.
type RoleStatus struct {
	standby.Status
	StandbyListen string `json:"standby_listen,omitempty"`
}

// describe is the one line Health and `tandem status` show.
func describe(st standby.Status) string {
	switch r, _ := ParseRole(st.Role); r {
	case RoleStandby:
		state := "following"
		if !st.Connected {
			state = "NOT CONNECTED"
		}
		sync := "synchronized=yes"
		if !st.Synchronized {
			sync = "synchronized=NO (promote needs --accept-data-loss)"
		}
		return fmt.Sprintf("role=standby of %s (%s) %s cluster=%s epoch=%d at=%s", st.Standby, state, sync, st.Cluster, st.Epoch, st.StandbyAt)
	case RoleDemoted, RoleFenced:
		return fmt.Sprintf("role=%s cluster=%s epoch=%d", strings.ToUpper(st.Role), st.Cluster, st.Epoch)
	}
	prot := "protected"
	switch {
	case st.Transport != string(standby.Sync):
		// Not alarming: that is what max-performance means. The exposure
		// below says how much a failover now would lose.
		prot = "not synchronous: a failover loses the exposure below"
	case !st.Protected:
		prot = "UNPROTECTED"
	}
	if st.Downgrading {
		prot = "waiting as max-protection until a standby hears the new mode"
	}
	peer := st.Standby
	if !st.Connected {
		peer = "NONE CONNECTED"
	}
	return fmt.Sprintf("role=primary cluster=%s epoch=%d transport=%s protection=%s (%s) standby=%s lag=%dB/%.3fs exposure=%d records (durable here, not on the standby)",
		st.Cluster, st.Epoch, st.Transport, st.Protection, prot, peer, st.LagBytes, st.LagSeconds, st.LagRecords)
}

// standbyHandler serves GET /standby on the admin listener.
func (s *Server) standbyHandler(mux *http.ServeMux) {
	mux.HandleFunc("GET /standby", func(w http.ResponseWriter, r *http.Request) {
		st, ok := s.StandbyStatus()
		if !ok {
			http.Error(w, "no standby role: start with --standby-listen or --standby-of", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(RoleStatus{Status: st, StandbyListen: s.opts.Standby.Listen})
	})
	role := func(f func(r *http.Request) (any, error)) http.Handler {
		// The admin guard (admin.go) has checked the admin token for every
		// method but GET: only a role change (authenticated) gets the long
		// deadline, never a read anyone on loopback may send.
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				adminLimits.extendForRole(w)
			}
			v, err := f(r)
			if err != nil {
				code := http.StatusInternalServerError
				var in *coord.InputError
				switch {
				case errors.Is(err, ErrRole):
					code = http.StatusConflict
				case errors.As(err, &in):
					code = http.StatusBadRequest
				}
				http.Error(w, err.Error(), code)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			_ = enc.Encode(v)
		})
	}
	mux.Handle("POST /role/promote", role(func(r *http.Request) (any, error) {
		q := r.URL.Query()
		id, err := s.Promote(standby.PromoteOptions{AcceptDataLoss: truthy(q.Get("accept-data-loss")), OldPrimaryStopped: truthy(q.Get("old-primary-stopped"))})
		return map[string]any{"role": RolePrimary, "cluster": id.Cluster.String(), "epoch": id.Epoch}, err
	}))
	primary := func() (*coord.Coordinator, error) {
		if c := s.Coordinator(); c != nil {
			return c, nil
		}
		return nil, fmt.Errorf("%w: this coordinator is %s; only the primary lists and settles in-doubt branches", ErrRole, s.Role())
	}
	// In-doubt branches (a promotion with --accept-data-loss): listed, the
	// RMs' holdings of one gtrid shown, settled by an explicit choice.
	mux.Handle("GET /in-doubt", role(func(r *http.Request) (any, error) {
		c, err := primary()
		if err != nil {
			return nil, err
		}
		if g := r.URL.Query().Get("gtrid"); g != "" {
			ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
			defer cancel()
			h, err := c.Holdings(ctx, g)
			return map[string]any{"gtrid": g, "prepared": h}, err
		}
		// As of a scan begun after the request (coord.InDoubtNow: shared,
		// spaced): the operator's list right after a promotion must hold
		// what the old primary's clients prepared since the last scan.
		ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		defer cancel()
		return c.InDoubtNow(ctx)
	}))
	mux.Handle("POST /in-doubt/resolve", role(func(r *http.Request) (any, error) {
		c, err := primary()
		if err != nil {
			return nil, err
		}
		q := r.URL.Query()
		var commit bool
		switch q.Get("outcome") {
		case "commit":
			commit = true
		case "abort":
		default:
			return nil, fmt.Errorf("%w: outcome must be commit or abort (the operator's explicit choice)", ErrRole)
		}
		ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		defer cancel()
		rep, err := c.ResolveInDoubt(ctx, q.Get("gtrid"), commit)
		return map[string]any{"gtrid": q.Get("gtrid"), "outcome": rep.Outcome.String(), "phase2_pending": rep.Phase2Pending}, err
	}))
	mux.Handle("POST /role/demote", role(func(r *http.Request) (any, error) {
		ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		defer cancel()
		return s.Demote(ctx)
	}))
	mux.Handle("POST /role/resume", role(func(*http.Request) (any, error) {
		return map[string]any{"role": RolePrimary}, s.Resume()
	}))
	mux.Handle("POST /role/follow", role(func(r *http.Request) (any, error) {
		p := r.URL.Query().Get("primary")
		return map[string]any{"role": RoleStandby, "primary": p}, s.Follow(p)
	}))
}

// registerStandbyGauges adds the standby metrics.
func (s *Server) registerStandbyGauges() func() {
	if _, ok := s.StandbyStatus(); !ok {
		return func() {}
	}
	get := func(f func(standby.Status) float64) func() float64 {
		return func() float64 { st, _ := s.StandbyStatus(); return f(st) }
	}
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	undo := []func(){
		metrics.Gauge("tandem_standby_epoch", "Epoch of this coordinator's cluster (grows at every promotion).", get(func(st standby.Status) float64 { return float64(st.Epoch) })),
		metrics.Gauge("tandem_standby_connected", "1 when the standby (on a primary) or the primary (on a standby) is connected.", get(func(st standby.Status) float64 { return b(st.Connected) })),
		metrics.Gauge("tandem_standby_synchronized", "1 when the standby holds every decision the primary acts on (promotable without --accept-data-loss).", get(func(st standby.Status) float64 { return b(st.Synchronized) })),
		metrics.Gauge("tandem_standby_protected", "Primary: 1 when every acknowledged decision is on the standby (sync transport, not running unprotected).", get(func(st standby.Status) float64 { return b(st.Protected) })),
		metrics.Gauge("tandem_standby_lag_bytes", "Primary: bytes of records durable here and not yet on the standby.", get(func(st standby.Status) float64 { return float64(st.LagBytes) })),
		metrics.Gauge("tandem_standby_lag_seconds", "Primary: age of the oldest record the standby does not have.", get(func(st standby.Status) float64 { return st.LagSeconds })),
		metrics.Gauge("tandem_standby_exposure_records", "Primary: records durable here and not on the standby (the data loss of a failover now).", get(func(st standby.Status) float64 { return float64(st.LagRecords) })),
	}
	return func() {
		for _, u := range undo {
			u()
		}
	}
}
