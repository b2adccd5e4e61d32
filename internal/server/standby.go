package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tandem-tx/tandem/api"
	"github.com/tandem-tx/tandem/internal/metrics"
	"github.com/tandem-tx/tandem/internal/service"
	"github.com/tandem-tx/tandem/internal/standby"
)

// StandbyOptions configure the decision-log transport (internal/standby).
// All empty: no standby, nothing shipped (the default).
type StandbyOptions struct {
	// Listen (primary): the address standbys connect to (--standby-listen).
	Listen string
	// Transport sync or async; Protection max-performance,
	// max-availability or max-protection (standby.ParseMode).
	Transport, Protection string
	// NetTimeout: see standby.ShipperConfig (default 10s).
	NetTimeout time.Duration
	// Of (standby): the primary's --standby-listen address. The process
	// then runs a standby: it copies the primary's log and decides nothing.
	Of string
	// Peer (primary): the other coordinator's --standby-listen address. At
	// start the primary asks it for its epoch and refuses to start (to
	// decide or settle anything) when it is newer: fencing after a failover.
	Peer string
}

// standbyStatus is what the process shows of its standby role.
type standbyStatus interface{ Status() standby.Status }

// StandbyStatus reports the primary's or the standby's shipping state; ok is
// false when the process has no standby role.
func (s *Server) StandbyStatus() (st standby.Status, ok bool) {
	if s.shipper != nil {
		return s.shipper.Status(), true
	}
	if s.receiver != nil {
		return s.receiver.Status(), true
	}
	return st, false
}

// describe is the one line Health and `tandem status` show.
func describe(st standby.Status) string {
	if st.Role == "standby" {
		state := "following"
		if !st.Connected {
			state = "NOT CONNECTED"
		}
		return fmt.Sprintf("role=standby of %s (%s) cluster=%s epoch=%d at=%s", st.Standby, state, st.Cluster, st.Epoch, st.StandbyAt)
	}
	prot := "protected"
	if !st.Protected {
		prot = "UNPROTECTED"
	}
	peer := st.Standby
	if !st.Connected {
		peer = "NONE CONNECTED"
	}
	return fmt.Sprintf("role=primary cluster=%s epoch=%d transport=%s protection=%s (%s) standby=%s lag=%dB/%.3fs exposure=%d records (durable here, not on the standby)",
		st.Cluster, st.Epoch, st.Transport, st.Protection, prot, peer, st.LagBytes, st.LagSeconds, st.LagRecords)
}

// standbyService is the API of a standby: it decides nothing.
type standbyService struct {
	api.UnimplementedCoordinatorServer
	r *standby.Receiver
}

func (s *standbyService) refusal() error {
	st := s.r.Status()
	return status.Errorf(codes.FailedPrecondition,
		"this coordinator is a standby of the primary at %s (epoch %d): it decides nothing; send Commit, Abort and Status to the primary, or promote this standby (tandem promote)",
		st.Standby, st.Epoch)
}

func (s *standbyService) Commit(context.Context, *api.CommitRequest) (*api.CommitResponse, error) {
	return nil, s.refusal()
}
func (s *standbyService) Abort(context.Context, *api.AbortRequest) (*api.AbortResponse, error) {
	return nil, s.refusal()
}
func (s *standbyService) Status(context.Context, *api.StatusRequest) (*api.StatusResponse, error) {
	return nil, s.refusal()
}
func (s *standbyService) Health(context.Context, *api.HealthRequest) (*api.HealthResponse, error) {
	msg := describe(s.r.Status())
	if err := s.r.LastError(); err != nil {
		msg += "; last error: " + err.Error()
	}
	return &api.HealthResponse{Serving: false, Version: service.Version, Message: msg}, nil
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
		_ = enc.Encode(st)
	})
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
