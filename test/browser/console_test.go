//go:build browser

package browser

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/tandem-tx/tandem/internal/testport"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// consoleRequire skips the test when the databases or Chromium are missing,
// or fails it when TANDEM_E2E_REQUIRED=1. It returns Chromium's path.
func consoleRequire(t *testing.T) string {
	t.Helper()
	miss := func(why string) {
		if os.Getenv("TANDEM_E2E_REQUIRED") == "1" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
	if os.Getenv("TANDEM_PG_DSN") == "" || os.Getenv("TANDEM_MYSQL_DSN") == "" {
		miss("TANDEM_PG_DSN and TANDEM_MYSQL_DSN are needed: scripts/db up; eval \"$(scripts/db env)\"")
	}
	if p := os.Getenv("TANDEM_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	miss("no Chromium: apt-get install -y chromium (or set TANDEM_CHROMIUM to a Chrome or Chromium binary)")
	return ""
}

// consoleRepoRoot is the repository's top directory.
func consoleRepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// consoleBuild builds the packages into dir and returns the binaries' paths.
func consoleBuild(t *testing.T, dir string, pkgs ...string) []string {
	t.Helper()
	var out []string
	for _, p := range pkgs {
		bin := filepath.Join(dir, filepath.Base(p))
		cmd := exec.Command("go", "build", "-o", bin, p)
		cmd.Dir = consoleRepoRoot()
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", p, err, b)
		}
		out = append(out, bin)
	}
	return out
}

func consoleFreeAddr(t *testing.T) string { return testport.Addr(t) }

// consoleProc is a process the test started; it is stopped (SIGINT, then
// SIGKILL) at the test's end, and its output kept for failures.
type consoleProc struct {
	cmd    *exec.Cmd
	out    *consoleBuffer
	exited chan struct{}
}

type consoleBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *consoleBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *consoleBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func consoleStart(t *testing.T, bin string, args ...string) *consoleProc {
	t.Helper()
	p := &consoleProc{cmd: exec.Command(bin, args...), out: &consoleBuffer{}, exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("%s: %v", bin, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-p.exited:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// consoleGetJSON reads an admin endpoint into v; it returns the status.
func consoleGetJSON(url string, v any) (int, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil || resp.StatusCode != 200 {
		return resp.StatusCode, err
	}
	return 200, json.Unmarshal(b, v)
}

// consoleWait polls cond every 200 ms until it holds or the time is up.
func consoleWait(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", limit, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// consoleBrowser starts headless Chromium for the test (closed at its end)
// and returns its tab's context and a function that returns the console
// messages the tab has logged so far (calls of the console API, uncaught
// exceptions, the browser's own log: failed loads, CSP violations).
func consoleBrowser(t *testing.T, chromium string) (context.Context, func() []chromedp.ConsoleMessage) {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.WindowSize(1440, 1000))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses its sandbox as root (CI, containers)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(cancelTab)
	ctx, cancelTime := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(cancelTime)
	var mu sync.Mutex
	var messages []chromedp.ConsoleMessage
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			mu.Lock()
			messages = append(messages, m)
			mu.Unlock()
		}
	}()
	return ctx, func() []chromedp.ConsoleMessage {
		mu.Lock()
		defer mu.Unlock()
		return append([]chromedp.ConsoleMessage(nil), messages...)
	}
}

// consoleScreenshot saves a PNG of the whole page as name in
// TANDEM_SCREENSHOT_DIR, or else in a temporary directory of the test, and
// logs where.
func consoleScreenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("TANDEM_SCREENSHOT_DIR")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	f := filepath.Join(dir, name)
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", f, len(b))
}

// consoleStandby is the part of GET /standby the test compares.
type consoleStandby struct {
	Role       string  `json:"role"`
	Epoch      uint64  `json:"epoch"`
	Transport  string  `json:"transport"`
	Protection string  `json:"protection"`
	Standby    string  `json:"standby"`
	Connected  bool    `json:"connected"`
	Protected  bool    `json:"protected"`
	LagBytes   int64   `json:"lag_bytes"`
	LagSeconds float64 `json:"lag_seconds"`
}

// consoleWaits is the part of GET /waits the test compares.
type consoleWaits map[string]struct {
	Events []struct {
		Event string `json:"event"`
		Count uint64 `json:"count"`
	} `json:"events"`
}

// consolePage is what the test reads from the page.
type consolePage struct {
	Role       string            `json:"role"`
	Updated    string            `json:"updated"`
	Error      string            `json:"error"`
	Throughput string            `json:"throughput"`
	Latency    string            `json:"latency"`
	Log        string            `json:"log"`
	Standby    string            `json:"standby"`
	Alarm      bool              `json:"alarm"`
	Waits      []consolePageWait `json:"waits"`
	Drawn      []string          `json:"drawn"`
	Unfinished string            `json:"unfinished"`
	Tables     [][]string        `json:"tables"`
}

type consolePageWait struct {
	Event string `json:"event"`
	Side  string `json:"side"`
}

const consoleReadPage = `(() => {
  const t = id => (document.getElementById(id) || {}).textContent || "";
  return {
    role: t("role"), updated: t("updated"), error: t("error"),
    throughput: t("throughput-now"), latency: t("latency-now"), log: t("log-now"), standby: t("standby-now"),
    alarm: document.getElementById("p-standby").classList.contains("alarm"),
    waits: [...document.querySelectorAll("#t-waits tbody tr")].filter(r => r.cells.length === 5)
      .map(r => ({event: r.cells[0].textContent, side: r.cells[1].textContent})),
    drawn: [...document.querySelectorAll(".chart[data-drawn]")].filter(c => c.querySelector("canvas") && c.querySelector("canvas").width > 0).map(c => c.id),
    unfinished: t("unfinished-count"),
    tables: [...document.querySelectorAll("#t-tables tbody tr")].map(r => [...r.cells].map(c => c.textContent)),
  };
})()`

// TestConsoleInBrowser starts a primary and its standby (sync transport)
// under the transfer example's load, opens the console in headless
// Chromium, and checks that every chart draws, that what the page shows
// agrees with /standby and /waits, that the page's own requests get through
// the admin guard in a real browser (a resolve without the token is 401, not
// a 403 for its Origin), and that the page logs no error and throws nothing.
func TestConsoleInBrowser(t *testing.T) {
	chromium := consoleRequire(t)
	dir := t.TempDir()
	bins := consoleBuild(t, dir, "./cmd/tandem", "./examples/transfer")
	tandem, transfer := bins[0], bins[1]
	secret := filepath.Join(dir, "standby-secret")
	if b, err := exec.Command(tandem, "secret", "--out", secret).CombinedOutput(); err != nil {
		t.Fatalf("tandem secret: %v\n%s", err, b)
	}
	rms := []string{"--rm", "pg=postgres:${TANDEM_PG_DSN}", "--rm", "maria=mysql:${TANDEM_MYSQL_DSN}"}
	api, admin, link := consoleFreeAddr(t), consoleFreeAddr(t), consoleFreeAddr(t)
	pdir := filepath.Join(dir, "primary")
	primary := consoleStart(t, tandem, append([]string{"serve", "--listen", api, "--data-dir", pdir, "--admin", admin,
		"--standby-listen", link, "--standby-secret-file", secret, "--transport", "sync", "--protection", "max-availability",
		"--net-timeout", "2s", "--log-size", "8MiB"}, rms...)...)
	standby := consoleStart(t, tandem, append([]string{"serve", "--listen", consoleFreeAddr(t), "--data-dir", filepath.Join(dir, "standby"),
		"--admin", "", "--standby-of", link, "--standby-secret-file", secret}, rms...)...)
	base := "http://" + admin
	var st consoleStandby
	consoleWait(t, "the standby to connect (primary:\n"+primary.out.String()+"\nstandby:\n"+standby.out.String()+")", 30*time.Second, func() bool {
		code, err := consoleGetJSON(base+"/standby", &st)
		return err == nil && code == 200 && st.Connected && st.Protected
	})
	// Two loads: one decided by the coordinator, one at MariaDB's commit
	// point (the default), which never reaches the coordinator and is seen
	// in its decision table.
	load := consoleStart(t, transfer, "--coordinator", api, "--duration", "5m", "--workers", "2", "--prefix", "tandem_browser_",
		"--decide-at", "coordinator")
	cpLoad := consoleStart(t, transfer, "--coordinator", api, "--duration", "5m", "--workers", "2", "--prefix", "tandem_browser_cp_")
	// A few seconds of both loads in the sampler's ring before the page opens.
	consoleWait(t, "commits of both loads (transfer:\n"+load.out.String()+"\ncommit-point transfer:\n"+cpLoad.out.String()+")", 40*time.Second, func() bool {
		var d struct {
			Samples []struct {
				Commits   float64 `json:"commits"`
				CPCommits float64 `json:"cp_commits"`
			} `json:"samples"`
		}
		code, err := consoleGetJSON(base+"/console/data", &d)
		n, cp := 0, 0
		for _, s := range d.Samples {
			if s.Commits > 0 {
				n++
			}
			if s.CPCommits > 0 {
				cp++
			}
		}
		return err == nil && code == 200 && n >= 5 && cp >= 3
	})

	ctx, console := consoleBrowser(t, chromium)
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/")); err != nil {
		t.Fatalf("opening %s: %v", base, err)
	}

	charts := []string{"c-throughput", "c-latency", "c-waits", "c-logspace", "c-fsync", "c-lag"}
	var page consolePage
	read := func() {
		t.Helper()
		p, err := chromedp.Run(ctx, chromedp.Evaluate[consolePage](consoleReadPage))
		if err != nil {
			t.Fatalf("reading the page: %v", err)
		}
		page = p
	}
	commitsRe := regexp.MustCompile(`([0-9.,]+) coordinator commits/s`)
	cpCommitsRe := regexp.MustCompile(`last 5 s: ([0-9.,]+) commit-point commits/s`)
	deadline := time.Now().Add(30 * time.Second)
	for {
		read()
		m := commitsRe.FindStringSubmatch(page.Throughput)
		cm := cpCommitsRe.FindStringSubmatch(page.Throughput)
		if len(page.Drawn) == len(charts) && len(page.Waits) > 0 && m != nil && m[1] != "0.0" && cm != nil && cm[1] != "0.0" && page.Standby != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page did not draw within 30 s: %+v", page)
		}
		time.Sleep(300 * time.Millisecond)
	}
	// Let a few refreshes run, then compare with the endpoints.
	time.Sleep(3 * time.Second)
	read()
	if code, err := consoleGetJSON(base+"/standby", &st); err != nil || code != 200 {
		t.Fatalf("GET /standby: %d %v", code, err)
	}
	var ws consoleWaits
	if code, err := consoleGetJSON(base+"/waits", &ws); err != nil || code != 200 {
		t.Fatalf("GET /waits: %d %v", code, err)
	}
	t.Logf("page: %+v", page)

	if page.Role != st.Role || st.Role != "primary" {
		t.Errorf("role badge %q, /standby role %q; want primary on both", page.Role, st.Role)
	}
	for _, want := range []string{"role" + st.Role, "epoch" + strconv.FormatUint(st.Epoch, 10), "transport" + st.Transport, "protection" + st.Protection, "protectedyes"} {
		if !strings.Contains(page.Standby, want) {
			t.Errorf("the standby panel says %q; /standby says %q", page.Standby, want)
		}
	}
	if st.Connected && (strings.Contains(page.Standby, "NONE CONNECTED") || page.Alarm) {
		t.Errorf("the standby panel shows an alarm (%q) while /standby says connected and protected", page.Standby)
	}
	if m := regexp.MustCompile(`lag([0-9.]+ [KMG]?i?B)`).FindStringSubmatch(page.Standby); m == nil {
		t.Errorf("the standby panel shows no lag in bytes: %q", page.Standby)
	}
	if m := commitsRe.FindStringSubmatch(page.Throughput); m == nil {
		t.Errorf("throughput: %q", page.Throughput)
	} else if v, err := strconv.ParseFloat(strings.ReplaceAll(m[1], ",", ""), 64); err != nil || v <= 0 || v > 1e6 {
		t.Errorf("throughput %q: %v commits/s is not plausible under load", page.Throughput, v)
	}
	if m := cpCommitsRe.FindStringSubmatch(page.Throughput); m == nil {
		t.Errorf("throughput: %q; want the commit-point commits/s", page.Throughput)
	} else if v, err := strconv.ParseFloat(strings.ReplaceAll(m[1], ",", ""), 64); err != nil || v <= 0 || v > 1e6 {
		t.Errorf("throughput %q: %v commit-point commits/s is not plausible under a commit-point load", page.Throughput, v)
	}
	if !regexp.MustCompile(`coordinator p50 [0-9.]+ (µs|ms|s), p99 [0-9.]+ (µs|ms|s)`).MatchString(page.Latency) ||
		!regexp.MustCompile(`commit point \(begin → decision\) p50 [0-9.]+ (µs|ms|s), p99 [0-9.]+ (µs|ms|s)`).MatchString(page.Latency) {
		t.Errorf("latency: %q; want the coordinator's and the commit point's p50 and p99 with units", page.Latency)
	}
	// The decision tables panel: MariaDB's table (the commit point of the
	// second load) has commits per second and 'C' rows.
	sawTable := false
	for _, row := range page.Tables {
		if len(row) == 7 && row[0] == "maria" {
			sawTable = true
			if v, err := strconv.ParseFloat(strings.ReplaceAll(row[1], ",", ""), 64); err != nil || v <= 0 {
				t.Errorf("decision tables panel, maria: %q commits/s; want more than 0 under a commit-point load", row[1])
			}
			if n, err := strconv.Atoi(strings.ReplaceAll(row[3], ",", "")); err != nil || n <= 0 {
				t.Errorf("decision tables panel, maria: %q 'C' rows; want some (rows are kept at least 30 s)", row[3])
			}
		}
	}
	if !sawTable {
		t.Errorf("the decision tables panel has no row for maria: %q", page.Tables)
	}
	if resp, err := http.Get(base + "/metrics"); err != nil {
		t.Errorf("GET /metrics: %v", err)
	} else {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		m := regexp.MustCompile(`(?m)^tandem_commit_point_decisions_total\{rm="maria",outcome="committed"\} ([0-9]+)$`).FindSubmatch(b)
		if m == nil || string(m[1]) == "0" {
			t.Errorf("/metrics counts no commit-point commits at maria under a commit-point load (%q)", m)
		}
	}
	if !regexp.MustCompile(`space used[0-9.]+ [KMG]?i?B of 8\.0 MiB \([0-9.]+ %\)`).MatchString(page.Log) || !strings.Contains(page.Log, "fsyncs/s") {
		t.Errorf("decision log panel: %q; want the space used of the 8 MiB log and fsyncs/s", page.Log)
	}
	counts := map[string]uint64{}
	for side, snap := range ws {
		for _, e := range snap.Events {
			counts[side+"/"+e.Event] = e.Count
		}
	}
	sawCommit := false
	for _, w := range page.Waits {
		if w.Event == "other" && w.Side == "–" {
			continue
		}
		if counts[w.Side+"/"+w.Event] == 0 {
			t.Errorf("the page lists a wait on %s/%s that /waits has not counted", w.Side, w.Event)
		}
		sawCommit = sawCommit || w.Side == "coordinator" && w.Event == "coordinator commit"
	}
	if !sawCommit {
		t.Errorf("the wait table does not show the coordinator's commit waits under a commit load: %+v", page.Waits)
	}
	if page.Error != "" {
		t.Errorf("the page shows an error: %q", page.Error)
	}

	shot := func(name string) { t.Helper(); consoleScreenshot(t, ctx, name) }
	shot("console.png")

	// A click on the coordinator's commit wait shows its histogram.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.JSPath(`[...document.querySelectorAll("#t-waits tbody tr")].find(r => r.cells[0].textContent === "coordinator commit" && r.cells[1].textContent === "coordinator")`)),
		chromedp.WaitVisible(chromedp.CSS("#c-histo canvas"))); err != nil {
		t.Fatalf("clicking the coordinator commit wait: %v", err)
	}
	title, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#histo-title")))
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`coordinator: coordinator commit — latency histogram since start \(([0-9,]+) waits`).FindStringSubmatch(title); m == nil {
		t.Errorf("histogram title %q", title)
	} else if n, _ := strconv.ParseUint(strings.ReplaceAll(m[1], ",", ""), 10, 64); n == 0 || n > counts["coordinator/coordinator commit"]*10+1000 {
		t.Errorf("histogram of %s waits; /waits counted %d a moment before", m[1], counts["coordinator/coordinator commit"])
	}
	shot("console-histogram.png")

	messages := console()
	var bad []string
	for _, m := range messages {
		if m.Type == chromedp.ConsoleError || m.IsException() {
			bad = append(bad, fmt.Sprintf("%s %s:%d %s", m.Type, m.URL, m.Line+1, m.Text))
		} else if m.Type == chromedp.ConsoleWarning {
			t.Logf("browser warning: %s %s", m.URL, m.Text)
		}
	}
	checked := len(messages)
	if len(bad) > 0 {
		t.Errorf("the page logged errors or threw:\n%s", strings.Join(bad, "\n"))
	}

	// The page's own POST carries its Origin: the guard lets it through to
	// the token check (401), where another origin's is refused (403).
	// (The page keeps the token in a closure on a plaintext listener: the
	// probe sends the file's; TestConsoleResolvesInDoubt covers the page's
	// own resolve with the token the operator typed.)
	probe := func(tok string) int {
		t.Helper()
		code, err := chromedp.Run(ctx, chromedp.Evaluate[int](`(async () => {
			const t = `+strconv.Quote(tok)+`;
			const r = await fetch("/in-doubt/resolve?gtrid=0123456789abcdef0123456789abcdef&outcome=abort",
				{method: "POST", headers: t ? {"Authorization": "Bearer " + t} : {}});
			return r.status;
		})()`, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("probing a resolve from the page: %v", err)
		}
		return code
	}
	if code := probe(""); code != http.StatusUnauthorized {
		t.Errorf("a resolve from the page without the token: %d, want 401", code)
	}
	tok, err := os.ReadFile(filepath.Join(pdir, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS("#token"), strings.TrimSpace(string(tok))), chromedp.Click(chromedp.CSS("#tokensave"))); err != nil {
		t.Fatal(err)
	}
	state, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#tokenstate")))
	if err != nil || !strings.HasPrefix(state, "token set for this tab") {
		t.Errorf("after entering the token: %q %v", state, err)
	}
	if v, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("token").value`)); err != nil || v != "" {
		t.Errorf("the token field keeps the token after use (%q, %v)", v, err)
	}
	if code := probe(strings.TrimSpace(string(tok))); code == http.StatusUnauthorized || code == http.StatusForbidden || code == http.StatusOK {
		t.Errorf("a resolve of a gtrid not in doubt from the page with the token: %d; want it to reach the resolve and be refused there", code)
	}
	for _, m := range console()[checked:] {
		if m.IsException() {
			t.Errorf("the page threw: %s", m.Text)
		}
	}
	select {
	case <-primary.exited:
		t.Fatalf("the primary exited:\n%s", primary.out.String())
	default:
	}

	// The standby goes away: the panel turns red (no standby connected; with
	// max-availability, after --net-timeout, unprotected), as /standby says.
	_ = standby.cmd.Process.Kill()
	<-standby.exited
	consoleWait(t, "the standby panel's alarm", 30*time.Second, func() bool {
		read()
		return page.Alarm && strings.Contains(page.Standby, "NONE CONNECTED") && strings.Contains(page.Standby, "UNPROTECTED")
	})
	if code, err := consoleGetJSON(base+"/standby", &st); err != nil || code != 200 || st.Connected || st.Protected {
		t.Errorf("GET /standby after the standby was killed: %d %v %+v; want neither connected nor protected", code, err, st)
	}
	shot("console-unprotected.png")
}
