package server

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tandem-tx/tandem/internal/config"
	"github.com/tandem-tx/tandem/internal/version"
	"github.com/tandem-tx/tandem/waits"
)

// A coordinator whose databases are unreachable still starts and serves its
// admin endpoints.
func TestAdminListener(t *testing.T) {
	s, err := Start(config.Config{
		Listen: "127.0.0.1:0", DataDir: t.TempDir(),
		RMs: map[string]config.RM{"pg": {Driver: "postgres", DSN: "postgres://u:p@127.0.0.1:1/db"}},
	}, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), NoSync: true, Admin: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop(time.Second)
	s.Waits().Record(waits.RMCommitPrepared, 2*time.Millisecond)

	get := func(path string) string {
		resp, err := http.Get("http://" + s.AdminAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %s\n%s", path, resp.Status, b)
		}
		return string(b)
	}
	var w WaitsResponse
	if err := json.Unmarshal([]byte(get("/waits?buckets=1")), &w); err != nil {
		t.Fatal(err)
	}
	if w.Coordinator.Side != waits.SideCoordinator || len(w.Coordinator.BucketsLeS) != waits.NumBuckets {
		t.Fatalf("/waits: %+v", w.Coordinator)
	}
	found := false
	for _, e := range w.Coordinator.Events {
		found = found || (e.Event == "rm commit prepared" && e.Count >= 1 && len(e.Buckets) == waits.NumBuckets)
	}
	if !found {
		t.Fatalf("/waits has no rm commit prepared: %+v", w.Coordinator.Events)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(get("/metrics")))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"tandem_wait_seconds", "tandem_commit_outcomes_total", MetricPhase2Backlog, MetricLogSpaceUsed, MetricBuildInfo} {
		if fams[name] == nil {
			t.Errorf("/metrics has no %s", name)
		}
	}
	// The build: one series, 1, labelled as tandem version says.
	if f := fams[MetricBuildInfo]; f != nil {
		v := version.Get()
		want := map[string]string{"version": v.Version, "commit": v.FullCommit(), "goversion": v.GoVersion}
		if len(f.Metric) != 1 || f.Metric[0].GetGauge().GetValue() != 1 {
			t.Errorf("%s: %v, want one series of value 1", MetricBuildInfo, f.Metric)
		} else {
			got := map[string]string{}
			for _, l := range f.Metric[0].Label {
				got[l.GetName()] = l.GetValue()
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s labels %v, want %v", MetricBuildInfo, got, want)
			}
		}
	}
}

// A busy admin address stops the start, unless best effort.
func TestAdminAddressTaken(t *testing.T) {
	cfg := config.Config{Listen: "127.0.0.1:0", RMs: map[string]config.RM{"pg": {Driver: "postgres", DSN: "postgres://u:p@127.0.0.1:1/db"}}}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.DataDir = t.TempDir()
	first, err := Start(cfg, Options{Logger: quiet, NoSync: true, Admin: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Stop(time.Second)
	cfg.DataDir = t.TempDir()
	if _, err := Start(cfg, Options{Logger: quiet, NoSync: true, Admin: first.AdminAddr()}); err == nil || !strings.Contains(err.Error(), "admin listener") {
		t.Fatalf("second start on a taken admin address: %v", err)
	}
	second, err := Start(cfg, Options{Logger: quiet, NoSync: true, Admin: first.AdminAddr(), AdminBestEffort: true})
	if err != nil {
		t.Fatalf("best effort: %v", err)
	}
	defer second.Stop(time.Second)
	if second.AdminAddr() != "" {
		t.Fatalf("best effort got an admin address %s", second.AdminAddr())
	}
}

// The admin guard's rules, on each kind of listener: reads open on loopback
// and with mutual TLS, else the admin or the API token; everything else the
// admin token only; an Origin other than the listener's own refused first;
// a non-loopback Host refused on a plaintext loopback listener.
func TestAdminGuard(t *testing.T) {
	const adminTok, apiTok = "admin-token-0123456789", "api-token-0123456789"
	type req struct {
		method, auth, host, origin string
		want                       int
	}
	for _, c := range []struct {
		name        string
		listen      string
		mtls, tlsOn bool
		apiToken    string
		reqs        []req
	}{
		{"loopback", "127.0.0.1:7071", false, false, apiTok, []req{
			{"GET", "", "127.0.0.1:7071", "", 200},
			{"GET", "", "localhost:7071", "", 200},
			{"GET", "", "[::1]:7071", "", 200},
			{"GET", "", "evil.example:7071", "", 403},
			{"GET", "", "127.0.0.1:7071", "http://127.0.0.1:7071", 200}, // the console's own page
			{"GET", "", "127.0.0.1:7071", "http://127.0.0.1:7072", 403},
			{"GET", "", "127.0.0.1:7071", "https://127.0.0.1:7071", 403},
			{"GET", "", "127.0.0.1:7071", "http://localhost:7071", 403},
			{"GET", "", "evil.example:7071", "http://evil.example:7071", 403}, // DNS rebinding
			{"POST", "", "127.0.0.1:7071", "http://127.0.0.1:7071", 401},
			{"POST", "Bearer " + apiTok, "127.0.0.1:7071", "http://127.0.0.1:7071", 401},
			{"POST", "Bearer " + adminTok, "127.0.0.1:7071", "http://127.0.0.1:7071", 200},
			{"POST", "", "127.0.0.1:7071", "", 401},
			{"POST", "Bearer " + apiTok, "127.0.0.1:7071", "", 401},
			{"POST", "Bearer " + adminTok, "127.0.0.1:7071", "", 200},
			{"POST", "Bearer " + adminTok, "127.0.0.1:7071", "null", 403},
			{"OPTIONS", "", "127.0.0.1:7071", "", 401},
		}},
		{"off loopback with TLS", "10.0.0.5:7071", false, true, apiTok, []req{
			{"GET", "", "coord-b.internal:7071", "", 401},
			{"GET", "Bearer wrong-token-000000", "coord-b.internal:7071", "", 401},
			{"GET", "Bearer " + apiTok, "coord-b.internal:7071", "", 200},
			{"GET", "Bearer " + adminTok, "coord-b.internal:7071", "", 200},
			{"POST", "Bearer " + apiTok, "coord-b.internal:7071", "", 401},
			{"POST", "Bearer " + adminTok, "coord-b.internal:7071", "", 200},
		}},
		{"off loopback with mutual TLS", "10.0.0.5:7071", true, true, "", []req{
			{"GET", "", "coord-b.internal:7071", "", 200},
			{"POST", "", "coord-b.internal:7071", "", 401},
			{"POST", "Bearer " + adminTok, "coord-b.internal:7071", "", 200},
		}},
	} {
		ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
		g := newAdminGuard(ok, adminTok, "/data/admin.token", c.apiToken, c.listen, c.mtls, c.tlsOn)
		for _, r := range c.reqs {
			req := httptest.NewRequest(r.method, "/standby", nil)
			req.Host = r.host
			if r.auth != "" {
				req.Header.Set("Authorization", r.auth)
			}
			if r.origin != "" {
				req.Header.Set("Origin", r.origin)
			}
			rec := httptest.NewRecorder()
			g.ServeHTTP(rec, req)
			if rec.Code != r.want {
				t.Errorf("%s: %s Host %s Authorization %q Origin %q: %d %q, want %d", c.name, r.method, r.host, r.auth, r.origin, rec.Code, rec.Body, r.want)
			}
			if rec.Code == 401 && !strings.Contains(rec.Body.String(), "/data/admin.token") {
				t.Errorf("%s: the 401 does not say where the token is: %q", c.name, rec.Body)
			}
		}
	}
}

// A web page's GET that carries no Origin (an <img>, a no-cors fetch, a
// prefetch) is told apart by its Fetch Metadata: one from another site, or
// from another origin of this site (another port of localhost), reaches no
// data endpoint (GET /in-doubt?gtrid= scans every database), whatever the
// listener's reads allow. The page's own requests (same-origin), a request
// the user typed (none), a top-level navigation (a link to the console or
// to /waits) and the page's files stay open.
func TestAdminRefusesCrossSiteRequestsWithoutOrigin(t *testing.T) {
	var reached []string
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached = append(reached, r.URL.String()) })
	g := newAdminGuard(next, "admin-token-0123456789", "/data/admin.token", "", "127.0.0.1:7071", false, false)
	for _, c := range []struct {
		path, site, mode, dest string
		want                   int
		purpose                string // Sec-Purpose: a prefetch or prerender, not a user's click
		user                   string // Sec-Fetch-User: ?1 when the user activated the navigation
	}{
		{"/in-doubt?gtrid=0123456789abcdef", "cross-site", "no-cors", "image", 403, "", ""},
		{"/in-doubt?gtrid=0123456789abcdef", "same-site", "no-cors", "empty", 403, "", ""}, // http://localhost:3000
		{"/in-doubt?gtrid=0123456789abcdef", "cross-site", "navigate", "iframe", 403, "", ""},
		{"/console/data", "cross-site", "no-cors", "script", 403, "", ""},
		{"/waits", "same-site", "no-cors", "empty", 403, "", ""},
		{"/in-doubt?gtrid=0123456789abcdef", "same-origin", "cors", "empty", 200, "", ""}, // the console's own page
		{"/in-doubt?gtrid=0123456789abcdef", "none", "navigate", "document", 200, "", ""}, // typed in the address bar
		{"/waits", "cross-site", "navigate", "document", 200, "", "?1"},                   // a link clicked elsewhere
		{"/console/console.js", "cross-site", "no-cors", "script", 200, "", ""},           // the page's files: no data
		{"/", "same-site", "navigate", "iframe", 200, "", ""},                             // framing is refused by the headers
		{"/waits", "", "", "", 200, "", ""},                                               // curl, the CLI, Prometheus
		{"/in-doubt?gtrid=0123456789abcdef", "same-site", "navigate", "document", 403, "prefetch;prerender", ""},
		{"/in-doubt?gtrid=0123456789abcdef", "cross-site", "navigate", "document", 403, "prefetch", ""},
		{"/in-doubt?gtrid=0123456789abcdef", "cross-site", "navigate", "document", 403, "", ""}, // a script's location = …, no click: repeatable by the page
		{"/waits", "same-site", "navigate", "document", 403, "", ""},
	} {
		reached = nil
		req := httptest.NewRequest(http.MethodGet, c.path, nil)
		req.Host = "127.0.0.1:7071"
		for k, v := range map[string]string{"Sec-Fetch-Site": c.site, "Sec-Fetch-Mode": c.mode, "Sec-Fetch-Dest": c.dest, "Sec-Purpose": c.purpose, "Sec-Fetch-User": c.user} {
			if v != "" {
				req.Header.Set(k, v)
			}
		}
		rec := httptest.NewRecorder()
		g.ServeHTTP(rec, req)
		if rec.Code != c.want || (c.want == 403) != (len(reached) == 0) {
			t.Errorf("GET %s Sec-Fetch-Site %s mode %s dest %s purpose %q user %q: %d %q (handler reached: %v), want %d", c.path, c.site, c.mode, c.dest, c.purpose, c.user, rec.Code, rec.Body, reached, c.want)
		}
	}
}
