package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/internal/console"
	"github.com/tandem-tx/tandem/internal/coord"
)

func get(t *testing.T, url string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// The console's files are open to GET everywhere (a browser opening the page
// cannot send a token; they hold no data); its data is exactly as open as
// /waits: here, off loopback with TLS and no mutual TLS, it needs a token.
// Only the exact paths of the files are open: a path that names one by
// detour, or another method, is not.
func TestConsoleGuard(t *testing.T) {
	const adminTok, apiTok = "admin-token-0123456789", "api-token-0123456789"
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	g := newAdminGuard(ok, adminTok, "/data/admin.token", apiTok, "10.0.0.5:7071", false, true)
	for _, c := range []struct {
		method, path, auth, origin string
		want                       int
	}{
		{"GET", "/", "", "", 200},
		{"HEAD", "/", "", "", 200},
		{"GET", "/console/console.js", "", "", 200},
		{"GET", "/console/console.css", "", "", 200},
		{"GET", "/console/uplot.js", "", "", 200},
		{"GET", "/console/uplot.css", "", "", 200},
		{"GET", "/console/LICENSE-uplot.txt", "", "", 200},
		{"GET", "/console/data", "", "", 401},
		{"GET", "/unfinished", "", "", 401},
		{"GET", "/waits", "", "", 401},
		{"GET", "/console/../waits", "", "", 401},
		{"GET", "//console/console.js", "", "", 401},
		{"GET", "/console/", "", "", 401},
		{"GET", "/console/data", "Bearer " + apiTok, "", 200},
		{"GET", "/unfinished", "Bearer " + adminTok, "", 200},
		{"POST", "/", "", "", 401},
		{"POST", "/in-doubt/resolve", "Bearer " + apiTok, "https://coord-b.internal:7071", 401},
		{"POST", "/in-doubt/resolve", "Bearer " + adminTok, "https://coord-b.internal:7071", 200},
		{"POST", "/in-doubt/resolve", "Bearer " + adminTok, "https://evil.example", 403},
		{"GET", "/", "", "https://evil.example", 403},
	} {
		req := httptest.NewRequest(c.method, "https://coord-b.internal:7071/", nil)
		req.URL.Path = c.path
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		if c.origin != "" {
			req.Header.Set("Origin", c.origin)
		}
		rec := httptest.NewRecorder()
		g.ServeHTTP(rec, req)
		if rec.Code != c.want {
			t.Errorf("%s %s Authorization %q Origin %q: %d %q, want %d", c.method, c.path, c.auth, c.origin, rec.Code, rec.Body, c.want)
		}
	}
}

// The page and every answer of the admin listener carry the security
// headers; the page loads no inline script or style and no third-party
// resource.
func TestConsolePageHeaders(t *testing.T) {
	s, _ := startAdmin(t, Options{})
	base := "http://" + s.AdminAddr()
	for _, path := range []string{"/", "/console/console.js", "/console/uplot.js", "/console/data", "/unfinished", "/waits", "/nothing-here"} {
		resp, _ := get(t, base+path, nil)
		h := resp.Header
		if h.Get("Content-Security-Policy") != console.ContentSecurityPolicy || h.Get("X-Content-Type-Options") != "nosniff" ||
			h.Get("X-Frame-Options") != "DENY" || h.Get("Cache-Control") != "no-store" {
			t.Errorf("GET %s: %d, headers CSP %q nosniff %q frame %q cache %q", path, resp.StatusCode, h.Get("Content-Security-Policy"),
				h.Get("X-Content-Type-Options"), h.Get("X-Frame-Options"), h.Get("Cache-Control"))
		}
	}
	if !strings.Contains(console.ContentSecurityPolicy, "script-src 'self';") || strings.Contains(console.ContentSecurityPolicy, "unsafe") {
		t.Errorf("CSP %q: want scripts from self only, nothing unsafe", console.ContentSecurityPolicy)
	}
	resp, page := get(t, base+"/", nil)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	for _, bad := range []*regexp.Regexp{
		regexp.MustCompile(`<script(\s[^>]*)?>[^<]`), // inline script
		regexp.MustCompile(`\son[a-z]+\s*=`),         // inline event handlers
		regexp.MustCompile(`<style`),                 // inline styles
		regexp.MustCompile(`\sstyle\s*=`),
		regexp.MustCompile(`(src|href)="(https?:)?//`), // anything off this listener
	} {
		if m := bad.FindString(page); m != "" {
			t.Errorf("the page has %q (%s)", m, bad)
		}
	}
	for _, tag := range regexp.MustCompile(`<script[^>]*>`).FindAllString(page, -1) {
		if !strings.Contains(tag, ` src="/`) {
			t.Errorf("the page has a script not loaded from this listener: %s", tag)
		}
	}
	for _, p := range regexp.MustCompile(`(?:src|href)="(/console/[^"]*)"`).FindAllStringSubmatch(page, -1) {
		if r, _ := get(t, base+p[1], nil); r.StatusCode != 200 {
			t.Errorf("the page loads %s: %d", p[1], r.StatusCode)
		}
	}
	if r, _ := get(t, base+"/favicon.ico", nil); r.StatusCode != 404 {
		t.Logf("favicon: %d", r.StatusCode)
	}
}

// /console/data serves the sampler's ring (a sample a second, only those
// after since), /unfinished the unfinished and in-doubt transactions;
// their parameters are checked and bounded.
func TestConsoleData(t *testing.T) {
	s, _ := startAdmin(t, Options{})
	base := "http://" + s.AdminAddr()
	var d ConsoleData
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, body := get(t, base+"/console/data", nil)
		if resp.StatusCode != 200 {
			t.Fatalf("GET /console/data: %d %q", resp.StatusCode, body)
		}
		if err := json.Unmarshal([]byte(body), &d); err != nil {
			t.Fatalf("GET /console/data: %v in %q", err, body)
		}
		if len(d.Samples) >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /console/data: %d samples after 10 s, want 2 (one a second)", len(d.Samples))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if d.Role != "primary" || d.Standby || d.Capacity != console.DefaultCapacity || d.IntervalS != 1 {
		t.Errorf("GET /console/data: role %q standby %v capacity %d interval %v", d.Role, d.Standby, d.Capacity, d.IntervalS)
	}
	last := d.Samples[len(d.Samples)-1]
	if last.LogUsed == nil || last.LogLimit == nil || *last.LogLimit <= 0 || last.LagBytes != nil {
		t.Errorf("last sample: log used %v limit %v lag %v; want the log's figures and no standby", last.LogUsed, last.LogLimit, last.LagBytes)
	}
	var later ConsoleData
	_, body := get(t, base+"/console/data?since="+jsonInt(d.Samples[0].T), nil)
	if err := json.Unmarshal([]byte(body), &later); err != nil {
		t.Fatal(err)
	}
	if len(later.Samples) == 0 || later.Samples[0].T <= d.Samples[0].T {
		t.Errorf("since=%d: %d samples, first at %v", d.Samples[0].T, len(later.Samples), later.Samples)
	}
	for _, q := range []string{"since=-1", "since=abc", "since=12345678901234567890", "since=1e9"} {
		if r, body := get(t, base+"/console/data?"+q, nil); r.StatusCode != 400 {
			t.Errorf("GET /console/data?%s: %d %q, want 400", q, r.StatusCode, body)
		}
	}
	resp, body := get(t, base+"/unfinished", nil)
	var u UnfinishedResponse
	if err := json.Unmarshal([]byte(body), &u); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /unfinished: %d %q %v", resp.StatusCode, body, err)
	}
	if u.Role != "primary" || u.Unfinished == nil || u.InDoubt == nil {
		t.Errorf("GET /unfinished: %+v; want the primary's, with empty lists rather than null", u)
	}
	for _, q := range []string{"limit=-1", "limit=201", "limit=x", "limit=99999999999999999999"} {
		if r, body := get(t, base+"/unfinished?"+q, nil); r.StatusCode != 400 {
			t.Errorf("GET /unfinished?%s: %d %q, want 400", q, r.StatusCode, body)
		}
	}
	if r, _ := get(t, base+"/unfinished?limit=200", nil); r.StatusCode != 200 {
		t.Errorf("GET /unfinished?limit=200: %d", r.StatusCode)
	}
}

func jsonInt(v int64) string { b, _ := json.Marshal(v); return string(b) }

// The console's page may POST (its requests carry its own Origin), but a
// resolve still needs the admin token; another origin is refused with it.
func TestConsolePageRequests(t *testing.T) {
	s, dir := startAdmin(t, Options{})
	base := "http://" + s.AdminAddr()
	tok, err := ReadTokenFile(filepath.Join(dir, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	resolve := base + "/in-doubt/resolve?gtrid=0123456789abcdef0123456789abcdef&outcome=commit"
	if code, body := post(t, resolve, map[string]string{"Origin": base}); code != http.StatusUnauthorized {
		t.Errorf("POST resolve from the page without the token: %d %q, want 401", code, body)
	}
	if code, body := post(t, resolve, map[string]string{"Origin": "http://evil.example", "Authorization": "Bearer " + tok}); code != http.StatusForbidden {
		t.Errorf("POST resolve from another origin with the token: %d %q, want 403", code, body)
	}
	code, body := post(t, resolve, map[string]string{"Origin": base, "Authorization": "Bearer " + tok})
	if code == http.StatusUnauthorized || code == http.StatusForbidden || code == http.StatusOK {
		t.Errorf("POST resolve of a gtrid not in doubt from the page with the token: %d %q; want it to reach the resolve and be refused there", code, body)
	}
	if resp, _ := get(t, base+"/console/data", map[string]string{"Origin": base}); resp.StatusCode != 200 {
		t.Errorf("GET /console/data from the page: %d", resp.StatusCode)
	}
}

// /unfinished lists no more than unfinishedBranchesMax branches in all, and
// cuts each last error: its answer is bounded whatever the coordinator holds.
func TestUnfinishedAnswerIsBounded(t *testing.T) {
	long := strings.Repeat("é", 10*consoleLastErrorMax)
	var list []coord.UnfinishedTxn
	for i := range unfinishedMax {
		txn := coord.UnfinishedTxn{GTRID: fmt.Sprintf("%032x", i), Outcome: "COMMITTED", DecidedAt: time.Now()}
		for j := range coord.MaxBranches {
			txn.Branches = append(txn.Branches, coord.BranchReport{RM: fmt.Sprintf("rm%02d", j), LastError: long})
		}
		list = append(list, txn)
	}
	out := unfinishedJSON(list, time.Now())
	n := 0
	for _, u := range out {
		n += len(u.Branches)
		for _, b := range u.Branches {
			if r := []rune(b.LastError); len(r) != consoleLastErrorMax+1 {
				t.Fatalf("a last error of %d characters shown, want %d and an ellipsis", len(r), consoleLastErrorMax)
			}
		}
	}
	if n > unfinishedBranchesMax || len(out) != unfinishedBranchesMax/coord.MaxBranches {
		t.Errorf("%d transactions, %d branches listed; want whole transactions up to %d branches", len(out), n, unfinishedBranchesMax)
	}
	b, _ := json.Marshal(UnfinishedResponse{Unfinished: out})
	t.Logf("the largest /unfinished answer: %d bytes", len(b))
	if len(b) > 2<<20 {
		t.Errorf("the largest /unfinished answer is %d bytes, want at most 2 MiB", len(b))
	}
}
