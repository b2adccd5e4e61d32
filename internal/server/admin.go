package server

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tandem-tx/tandem/internal/console"
	"github.com/tandem-tx/tandem/internal/coord"
	"github.com/tandem-tx/tandem/internal/metrics"
	"github.com/tandem-tx/tandem/internal/version"
	"github.com/tandem-tx/tandem/waits"
)

// The admin listener (HTTP on loopback, HTTPS with --tls-cert) serves:
//
//	GET  /waits     the wait events of both sides as JSON (WaitsResponse);
//	                ?buckets=1 adds the histograms, ?all=1 keeps events never waited on
//	GET  /metrics   Prometheus text format (package metrics)
//	GET  /standby   the role and shipping state (RoleStatus)
//	POST /role/...  role changes (roles.go): promote, demote, resume, follow
//	GET  /          the console (console.go, package console) and its data
//
// Who may do what (adminGuard):
//   - A request that carries an Origin header (a web page's request) is
//     refused with 403, whatever it carries else, unless the Origin is this
//     listener's own (scheme and Host of the request): the console's page,
//     served from here, is the only page whose requests get through.
//   - A browser's request from another origin that carries no Origin (an
//     <img>, a no-cors fetch: Sec-Fetch-Site cross-site or same-site, which
//     includes another port of localhost) is refused with 403 too, unless
//     it is a top-level navigation (a link the user follows) or asks for
//     one of the console's files (crossSite).
//   - Every method but GET and HEAD needs the admin token ("Authorization:
//     Bearer <token>", the file Options.AdminTokenFile, made at first start);
//     401 otherwise, naming the file.
//   - GET and HEAD are open on a loopback listener (any local user can read
//     them) and on one with mutual TLS (the handshake authenticated the
//     client); elsewhere they need the admin token or the API's token.
//     The console's own files (console.IsAsset: the page, its script and
//     styles, no data) are open to GET everywhere: a browser cannot send a
//     token when it opens a page; the page then sends the one the operator
//     enters with every request for data.
//   - On a plaintext loopback listener, a Host that is not a loopback
//     address or "localhost" is refused with 403 (a web page that
//     rebinds its name to 127.0.0.1 cannot read the open endpoints).
//
// `tandem waits --admin ADDR` reads /waits.

// WaitsResponse is the body of GET /waits.
type WaitsResponse struct {
	Coordinator waits.JSONSnapshot `json:"coordinator"`
	Client      waits.JSONSnapshot `json:"client"`
}

// AdminHandler serves the admin endpoints of one coordinator, whose waits
// are coordWaits; the client side is the process's SDK (waits.Client).
func AdminHandler(coordWaits *waits.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /waits", func(w http.ResponseWriter, r *http.Request) {
		buckets := truthy(r.URL.Query().Get("buckets"))
		all := truthy(r.URL.Query().Get("all"))
		resp := WaitsResponse{
			Coordinator: coordWaits.Snapshot().JSON(buckets, all),
			Client:      waits.Client.Snapshot().JSON(buckets, all),
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(resp)
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_ = metrics.WritePrometheus(w, coordWaits, waits.Client)
	})
	return mux
}

// adminGuard authenticates the admin listener's requests (see the top of
// this file) before handing them to next.
type adminGuard struct {
	next      http.Handler
	admin     []byte // "Bearer <admin token>"
	api       []byte // "Bearer <API token>"; nil without one
	tokenFile string // where the admin token is, for the 401's message
	openReads bool   // GET and HEAD need no token
	checkHost bool   // refuse a Host that is not loopback (DNS rebinding)
}

func newAdminGuard(next http.Handler, adminToken, tokenFile, apiToken string, listen string, mtls bool, tlsOn bool) *adminGuard {
	g := &adminGuard{next: next, admin: []byte("Bearer " + adminToken), tokenFile: tokenFile,
		openReads: isLoopback(listen) || mtls, checkHost: isLoopback(listen) && !tlsOn}
	if apiToken != "" {
		g.api = []byte("Bearer " + apiToken)
	}
	return g
}

func (g *adminGuard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, ok := r.Header["Origin"]; ok && !sameOrigin(r) {
		http.Error(w, "requests from web pages (with an Origin header) are refused: use the tandem CLI, curl or Prometheus", http.StatusForbidden)
		return
	}
	if crossSite(r) {
		http.Error(w, "requests from other web pages (Sec-Fetch-Site "+strconv.Quote(r.Header.Get("Sec-Fetch-Site"))+") are refused: open the console or this address directly, or use the tandem CLI, curl or Prometheus", http.StatusForbidden)
		return
	}
	if g.checkHost && r.Host != "" {
		host := r.Host
		if h, _, err := net.SplitHostPort(r.Host); err == nil {
			host = h
		}
		if !isLoopbackHost(strings.Trim(host, "[]")) {
			http.Error(w, "Host "+strconv.Quote(r.Host)+" is not a loopback address: this listener answers only requests for 127.0.0.1, ::1 or localhost", http.StatusForbidden)
			return
		}
	}
	got := []byte(r.Header.Get("Authorization"))
	isAdmin := subtle.ConstantTimeCompare(got, g.admin) == 1
	read := r.Method == http.MethodGet || r.Method == http.MethodHead
	switch {
	case isAdmin:
	case read && g.openReads:
	case read && console.IsAsset(r.URL.Path):
	case read && g.api != nil && subtle.ConstantTimeCompare(got, g.api) == 1:
	default:
		w.Header().Set("WWW-Authenticate", `Bearer realm="tandem"`)
		what := "role changes need"
		if read {
			what = "off loopback, reads need the API token or"
		}
		http.Error(w, fmt.Sprintf("missing or wrong admin token: %s \"Authorization: Bearer <token>\" with the admin token, which is in %s on the coordinator's host "+
			"(the tandem CLI reads it from there with --data-dir, or from --admin-token-file / TANDEM_ADMIN_TOKEN_FILE)", what, g.tokenFile), http.StatusUnauthorized)
		return
	}
	g.next.ServeHTTP(w, r)
}

// sameOrigin reports whether r's Origin is the listener's own origin, as
// the request names it (scheme and Host): a request of the console's page.
// A page elsewhere that rebinds its name to this address has the same
// Origin and Host, which is why a plaintext loopback listener also refuses
// a Host that is not loopback, and why data off loopback needs a token the
// rebinding page does not have (the console keeps it in the page's memory,
// or over HTTPS in sessionStorage, which is kept per origin).
func sameOrigin(r *http.Request) bool {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return r.Host != "" && r.Header.Get("Origin") == scheme+"://"+r.Host
}

// crossSite reports whether r is a browser's request made by a page of
// another origin that carries no Origin header (an <img>, a no-cors fetch, a
// prefetch: browsers send Origin only with CORS requests and with methods
// other than GET and HEAD), by its Fetch Metadata: Sec-Fetch-Site is
// "cross-site", or "same-site" (another port of localhost is the same site,
// not the same origin). Such a request could not read the answer, but it
// would make the coordinator work (GET /in-doubt?gtrid= scans every
// database), so it reaches only the page's files (console.IsAsset: no data)
// and top-level navigations (a link the user follows: the answer is shown
// to the user, not to the page; Sec-Fetch-User ?1). A request without Fetch Metadata (the CLI,
// curl, Prometheus, a browser too old to send it) is judged by the rest of
// adminGuard.
func crossSite(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
		return false
	}
	if console.IsAsset(r.URL.Path) && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		return false
	}
	// A prefetch or prerender (Sec-Purpose) is the page's doing, not a click,
	// and so is a navigation without user activation (a script's
	// location = …, which the page could repeat): Sec-Fetch-User is ?1 only
	// when the user clicked or typed.
	topLevel := r.Header.Get("Sec-Fetch-Mode") == "navigate" && r.Header.Get("Sec-Fetch-Dest") == "document" &&
		r.Header.Get("Sec-Fetch-User") == "?1" && r.Header.Get("Sec-Purpose") == "" && r.Header.Get("Purpose") == ""
	return !(topLevel && (r.Method == http.MethodGet || r.Method == http.MethodHead))
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
	// MetricCommitPointDecisions: rows in the decision tables, by RM and
	// outcome (coord.Coordinator.CommitPoints).
	MetricCommitPointDecisions = "tandem_commit_point_decisions_total"
	// MetricInDoubtBranches: see coord.Coordinator.InDoubt.
	MetricInDoubtBranches = "tandem_in_doubt_branches"
	// MetricInDoubtByReason: the same, labelled by reason
	// (coord.InDoubtReasons).
	MetricInDoubtByReason = "tandem_in_doubt_branches_by_reason"
	// MetricForeignBranches: the in-doubt branches of another cluster.
	MetricForeignBranches = "tandem_foreign_branches"
)

// MetricBuildInfo is always 1; its labels say which build serves: version
// (a release's, or "dev"), commit (the full git commit hash, "+dirty" when
// built from a modified tree, or "unknown") and goversion (package version).
const MetricBuildInfo = "tandem_build_info"

// registerBuildInfo adds MetricBuildInfo; the returned function removes it.
func registerBuildInfo() func() {
	v := version.Get()
	return metrics.Gauge(MetricBuildInfo, "Always 1: the build of this coordinator (tandem version), in the labels version, commit (+dirty: built from a modified tree) and goversion.",
		func() float64 { return 1 }, "version", v.Version, "commit", v.FullCommit(), "goversion", v.GoVersion)
}

// The commit points' gauges (coord cprecover.go, cpgc.go), labelled by reason.
const (
	MetricCPBranchesHeld   = "tandem_commit_point_branches_held"
	MetricDecisionRowsKept = "tandem_decision_rows_kept"
)

type cpHeldReporter interface {
	CommitPointHeldByReason() map[string]int
}

type decisionRowsKeptReporter interface {
	DecisionRowsKept() map[string]int
}

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

// registerGauges wires the gauges of c (nil: none, a role without a
// coordinator); the returned function removes them.
func (s *Server) registerGauges(c *coord.Coordinator) func() {
	var undo []func()
	backlog := func() float64 { return math.NaN() }
	if c == nil { // a standby: no coordinator of its own yet
		return func() {}
	}
	if b, ok := any(c).(phase2Backlogger); ok {
		backlog = func() float64 { return float64(b.Phase2Backlog()) }
	}
	undo = append(undo, metrics.Gauge(MetricPhase2Backlog,
		"Decided transactions whose phase 2 has not finished on every branch (NaN: not reported by this coordinator).", backlog))
	used, limit := func() float64 { return math.NaN() }, func() float64 { return math.NaN() }
	if l, ok := any(c).(logSpaceReporter); ok {
		used = func() float64 { u, _ := l.LogSpace(); return float64(u) }
		limit = func() float64 { _, m := l.LogSpace(); return float64(m) }
	}
	undo = append(undo, metrics.Gauge(MetricLogSpaceUsed,
		"Bytes of the decision log in use: records not yet recyclable (NaN: not reported by this coordinator).", used))
	undo = append(undo, metrics.Gauge(MetricLogSpaceLimit,
		"Configured size of the decision log, bytes; 0 is unbounded (NaN: not reported by this coordinator).", limit))
	undo = append(undo, metrics.Gauge(MetricInDoubtBranches,
		"Prepared branches this coordinator never settles by itself (tandem status --in-doubt): another cluster's, legacy unowned names, and its own of gtrids from before its log was born or before a promotion with --accept-data-loss; their owner or an operator settles them (tandem resolve).",
		func() float64 { return float64(c.InDoubtBranches()) }))
	for _, r := range coord.InDoubtReasons {
		undo = append(undo, metrics.Gauge(MetricInDoubtByReason,
			"In-doubt branches (tandem_in_doubt_branches) by reason: foreign-owner, unowned-legacy-name, began-before-log-born, began-before-unsynchronized-promotion.",
			func() float64 { return float64(c.InDoubtByReason()[r]) }, "reason", string(r)))
	}
	undo = append(undo, metrics.Gauge(MetricForeignBranches,
		"Prepared branches owned by another coordinator cluster, seen by the in-doubt scan: never touched here (docs/ownership.md).",
		func() float64 { return float64(c.InDoubtByReason()[coord.ReasonForeign]) }))
	if h, ok := any(c).(cpHeldReporter); ok {
		for _, r := range coord.CPHoldReasons {
			undo = append(undo, metrics.Gauge(MetricCPBranchesHeld,
				"Prepared commit-point branches this coordinator will not settle, by reason: a commit point not configured here, a decision table with another id than the branch names (an alarm: the DSN reaches another table), a legacy name without --adopt-unowned.",
				func() float64 { return float64(h.CommitPointHeldByReason()[r]) }, "reason", r))
		}
	}
	if k, ok := any(c).(decisionRowsKeptReporter); ok {
		for _, r := range coord.KeptReasons {
			undo = append(undo, metrics.Gauge(MetricDecisionRowsKept,
				"Committed decision rows older than decision.ForgetMinAge the last sweep kept, by reason; participant-rm-not-configured, participant-table-differs and participants-unreadable are alarms (the row may be kept for ever).",
				func() float64 { return float64(k.DecisionRowsKept()[r]) }, "reason", r))
		}
	}
	start := time.Now()
	undo = append(undo, metrics.Gauge("tandem_uptime_seconds", "Seconds since this coordinator started.",
		func() float64 { return time.Since(start).Seconds() }))
	return func() {
		for _, u := range undo {
			u()
		}
	}
}
