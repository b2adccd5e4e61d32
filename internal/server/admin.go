package server

import (
	"crypto/subtle"
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/tandem-tx/tandem/internal/metrics"
	"github.com/tandem-tx/tandem/internal/waits"
)

// The admin listener (HTTP, plain text, meant for loopback or a trusted
// network) serves:
//
//	GET /waits     the wait events of both sides as JSON (WaitsResponse);
//	               ?buckets=1 adds the histograms, ?all=1 keeps events never waited on
//	GET /metrics   Prometheus text format (package metrics)
//
// `tandem waits --admin ADDR` reads /waits.

// WaitsResponse is the body of GET /waits.
type WaitsResponse struct {
	Coordinator waits.JSONSnapshot `json:"coordinator"`
	Client      waits.JSONSnapshot `json:"client"`
}

// AdminHandler serves the admin endpoints of this process.
func AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /waits", func(w http.ResponseWriter, r *http.Request) {
		buckets := truthy(r.URL.Query().Get("buckets"))
		all := truthy(r.URL.Query().Get("all"))
		resp := WaitsResponse{
			Coordinator: waits.Coordinator.Snapshot().JSON(buckets, all),
			Client:      waits.Client.Snapshot().JSON(buckets, all),
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(resp)
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_ = metrics.WritePrometheus(w, waits.Coordinator, waits.Client)
	})
	return mux
}

// RequireToken wraps an admin handler so that, when token is set, every
// request must carry "Authorization: Bearer <token>" (what Prometheus sends
// with authorization.credentials_file), like the gRPC API.
func RequireToken(h http.Handler, token string) http.Handler {
	if token == "" {
		return h
	}
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="tandem"`)
			http.Error(w, "missing or wrong auth token: send \"Authorization: Bearer <token>\" (the coordinator's --auth-token-file)", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func truthy(s string) bool {
	b, _ := strconv.ParseBool(s)
	return b || s == "yes"
}

// Gauges the coordinator feeds. Each reads an optional method of
// *coord.Coordinator, so that the gauge starts reporting as soon as the
// coordinator has the method, with no change here; until then it is NaN.
const (
	MetricPhase2Backlog = "tandem_phase2_backlog"
	MetricLogSpaceUsed  = "tandem_log_space_used_bytes"
	MetricLogSpaceLimit = "tandem_log_space_limit_bytes"
	// MetricInDoubtBranches: see coord.Coordinator.InDoubt.
	MetricInDoubtBranches = "tandem_in_doubt_branches"
)

type phase2Backlogger interface {
	// Phase2Backlog is the number of decided transactions whose phase 2 has
	// not finished on every branch. It must not block on I/O.
	Phase2Backlog() int
}

type logSpaceReporter interface {
	// LogSpace reports the decision log's bytes in use (records not yet
	// recyclable) and its configured size (0: unbounded). It must not block on I/O.
	LogSpace() (used, limit int64)
}

// registerGauges wires the coordinator's gauges; the returned function
// removes them.
func (s *Server) registerGauges() func() {
	var undo []func()
	backlog := func() float64 { return math.NaN() }
	if s.coord == nil { // a standby: no coordinator of its own yet
		return func() {}
	}
	if b, ok := any(s.coord).(phase2Backlogger); ok {
		backlog = func() float64 { return float64(b.Phase2Backlog()) }
	}
	undo = append(undo, metrics.Gauge(MetricPhase2Backlog,
		"Decided transactions whose phase 2 has not finished on every branch (NaN: not reported by this coordinator).", backlog))
	used, limit := func() float64 { return math.NaN() }, func() float64 { return math.NaN() }
	if l, ok := any(s.coord).(logSpaceReporter); ok {
		used = func() float64 { u, _ := l.LogSpace(); return float64(u) }
		limit = func() float64 { _, m := l.LogSpace(); return float64(m) }
	}
	undo = append(undo, metrics.Gauge(MetricLogSpaceUsed,
		"Bytes of the decision log in use: records not yet recyclable (NaN: not reported by this coordinator).", used))
	undo = append(undo, metrics.Gauge(MetricLogSpaceLimit,
		"Configured size of the decision log, bytes; 0 is unbounded (NaN: not reported by this coordinator).", limit))
	c := s.coord
	undo = append(undo, metrics.Gauge(MetricInDoubtBranches,
		"Prepared branches of gtrids from before a promotion with --accept-data-loss that have no decision here: never presumed aborted, an operator settles them (tandem resolve).",
		func() float64 { return float64(c.InDoubtBranches()) }))
	start := time.Now()
	undo = append(undo, metrics.Gauge("tandem_uptime_seconds", "Seconds since this coordinator started.",
		func() float64 { return time.Since(start).Seconds() }))
	return func() {
		for _, u := range undo {
			u()
		}
	}
}
