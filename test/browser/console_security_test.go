//go:build browser

package browser

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/tandem-tx/tandem/internal/config"
	"github.com/tandem-tx/tandem/internal/server"
)

// consoleChromium returns Chromium's path, or skips (fails with
// TANDEM_E2E_REQUIRED=1) without it. These tests need no database.
func consoleChromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("TANDEM_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("TANDEM_E2E_REQUIRED") == "1" {
		t.Fatal("no Chromium: apt-get install -y chromium (or set TANDEM_CHROMIUM)")
	}
	t.Skip("no Chromium: apt-get install -y chromium (or set TANDEM_CHROMIUM)")
	return ""
}

// consoleInProcess starts a primary in this process with a plaintext
// loopback admin listener and a database that is never reachable (the
// pages read nothing from it). It returns the admin base URL and the admin
// token.
func consoleInProcess(t *testing.T) (base, token string) {
	t.Helper()
	dir := t.TempDir()
	s, err := server.Start(config.Config{Listen: "127.0.0.1:0", DataDir: dir,
		RMs: map[string]config.RM{"pg": {Driver: "postgres", DSN: "postgres://u:p@127.0.0.1:1/db"}}},
		server.Options{NoSync: true, Admin: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(time.Second) })
	tok, err := server.ReadTokenFile(filepath.Join(dir, server.AdminTokenName))
	if err != nil {
		t.Fatal(err)
	}
	return "http://" + s.AdminAddr(), tok
}

// consoleRequest is one request the tab made, as DevTools saw it.
type consoleRequest struct {
	method, url string
	headers     network.Headers // as the page asked (fetch's headers included)
	wire        network.Headers // as sent on the wire (Sec-Fetch-*, Origin)
	status      int64           // 0: no answer seen
}

// consoleRecord records the tab's requests whose URL starts with prefix.
// The status is the one on the wire, also of an answer the browser then
// blocked (an image that is not one, an opaque answer).
func consoleRecord(t *testing.T, ctx context.Context, prefix string) func() []consoleRequest {
	t.Helper()
	var mu sync.Mutex
	byID := map[network.RequestID]*consoleRequest{}
	wire := map[network.RequestID]network.Headers{}
	status := map[network.RequestID]int64{}
	var order []network.RequestID
	err := chromedp.Listen(ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *network.EventRequestWillBeSent:
			if strings.HasPrefix(e.Request.URL, prefix) {
				byID[e.RequestID] = &consoleRequest{method: e.Request.Method, url: e.Request.URL, headers: e.Request.Headers}
				order = append(order, e.RequestID)
			}
		case *network.EventRequestWillBeSentExtraInfo:
			wire[e.RequestID] = e.Headers
		case *network.EventResponseReceivedExtraInfo:
			status[e.RequestID] = e.StatusCode
		case *network.EventResponseReceived:
			if _, ok := status[e.RequestID]; !ok {
				status[e.RequestID] = e.Response.Status
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	return func() []consoleRequest {
		mu.Lock()
		defer mu.Unlock()
		out := make([]consoleRequest, 0, len(order))
		for _, id := range order {
			r := *byID[id]
			r.wire, r.status = wire[id], status[id]
			out = append(out, r)
		}
		return out
	}
}

// A page on another port of the same host (another origin of the same site:
// a developer's web server on localhost, a local app) loads data URLs of the
// admin listener as an image and as a no-cors fetch: requests that carry no
// Origin header. They must not reach the endpoint: GET /in-doubt?gtrid= scans
// every database, and could be sent in a loop by any page the operator opens.
func TestConsoleOtherOriginOfLocalhostReachesNoData(t *testing.T) {
	chromium := consoleChromium(t)
	base, _ := consoleInProcess(t)
	target := base + "/in-doubt?gtrid=0123456789abcdef0123456789abcdef"
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(`<!DOCTYPE html><title>another page</title><script>
			const u = ` + "`" + target + "`" + `;
			new Image().src = u + "&via=img";
			fetch(u + "&via=nocors", {mode: "no-cors"}).catch(() => {});
			fetch("` + base + `/waits?via=nocors", {mode: "no-cors"}).catch(() => {});
			</script>`))
	}))
	defer evil.Close()
	if !strings.HasPrefix(evil.URL, "http://127.0.0.1:") {
		t.Fatalf("the other page is at %s, want 127.0.0.1 (the same site as the listener)", evil.URL)
	}
	ctx, _ := consoleBrowser(t, chromium)
	requests := consoleRecord(t, ctx, base)
	if err := chromedp.Do(ctx, chromedp.Navigate(evil.URL+"/")); err != nil {
		t.Fatal(err)
	}
	consoleWait(t, "the other page's three requests and their answers", 20*time.Second, func() bool {
		n := 0
		for _, r := range requests() {
			if r.status != 0 {
				n++
			}
		}
		return n >= 3
	})
	for _, r := range requests() {
		t.Logf("%s %s Origin %v Sec-Fetch-Site %v Sec-Fetch-Mode %v -> %d", r.method, r.url, r.wire["Origin"], r.wire["Sec-Fetch-Site"], r.wire["Sec-Fetch-Mode"], r.status)
		if r.status != http.StatusForbidden {
			t.Errorf("a page of another origin (%s): %s %s answered %d, want 403 before the endpoint runs", evil.URL, r.method, r.url, r.status)
		}
	}
}

// The admin token the operator types stays in the page: on a plaintext
// loopback listener, whose port any local user can take once the
// coordinator stops, the page keeps it in no Web Storage (a page served
// there later would read it) and sends it with no read (reads are open
// there; a poll would hand it to whatever answers on the port).
func TestConsoleTokenStaysInThePage(t *testing.T) {
	chromium := consoleChromium(t)
	base, tok := consoleInProcess(t)
	ctx, console := consoleBrowser(t, chromium)
	requests := consoleRecord(t, ctx, base)
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/")); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS("#token")), chromedp.SendKeys(chromedp.CSS("#token"), tok), chromedp.Click(chromedp.CSS("#tokensave"))); err != nil {
		t.Fatal(err)
	}
	state, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#tokenstate")))
	if err != nil || !strings.HasPrefix(state, "token set for this tab") {
		t.Errorf("after entering the token: %q %v", state, err)
	}
	n := len(requests())
	consoleWait(t, "three more polls", 20*time.Second, func() bool { return len(requests()) >= n+3 })
	stored, err := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify([sessionStorage, localStorage])`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stored, tok) {
		t.Errorf("the page keeps the admin token in Web Storage: %s", stored)
	}
	for _, r := range requests() {
		if _, ok := r.headers["Authorization"]; ok && r.method == http.MethodGet {
			t.Errorf("GET %s carried the admin token; reads are open on this listener", r.url)
		}
	}
	for _, m := range console() {
		if m.IsException() {
			t.Errorf("the page threw: %s", m.Text)
		}
	}
}
