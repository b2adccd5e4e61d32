//go:build browser

package browser

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/tandem-tx/tandem/xid"
)

// consolePrepareAndDie prepares a branch of a new gtrid on each database
// (a row in table) and drops the connections, as a client that dies after
// its prepares would: both branches stay prepared, undecided.
func consolePrepareAndDie(t *testing.T, table string) xid.GTRID {
	t.Helper()
	ctx := context.Background()
	g := xid.New()
	pg, err := sql.Open("pgx", os.Getenv("TANDEM_PG_DSN"))
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	my, err := sql.Open("mysql", os.Getenv("TANDEM_MYSQL_DSN"))
	if err != nil {
		t.Fatal(err)
	}
	defer my.Close()
	for _, db := range []*sql.DB{pg, my} {
		for _, q := range []string{"DROP TABLE IF EXISTS " + table, "CREATE TABLE " + table + " (id int PRIMARY KEY, v varchar(64))"} {
			if _, err := db.ExecContext(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
	t.Cleanup(func() {
		for _, dsn := range []struct{ driver, env string }{{"pgx", "TANDEM_PG_DSN"}, {"mysql", "TANDEM_MYSQL_DSN"}} {
			if db, err := sql.Open(dsn.driver, os.Getenv(dsn.env)); err == nil {
				_, _ = db.Exec("DROP TABLE IF EXISTS " + table)
				db.Close()
			}
		}
	})
	pc, err := pg.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mc, err := my.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pgb, myb := xid.Branch{GTRID: g, RM: "pg"}, xid.Branch{GTRID: g, RM: "maria"}
	for _, q := range []string{"BEGIN", "INSERT INTO " + table + " VALUES (1, 'x')", "PREPARE TRANSACTION '" + pgb.PostgresGID() + "'"} {
		if _, err := pc.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for _, q := range []string{"XA START " + myb.MySQLXID(), "INSERT INTO " + table + " VALUES (1, 'x')", "XA END " + myb.MySQLXID(), "XA PREPARE " + myb.MySQLXID()} {
		if _, err := mc.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	_ = pc.Raw(func(any) error { return driver.ErrBadConn })
	_ = mc.Raw(func(any) error { return driver.ErrBadConn })
	return g
}

// TestConsoleResolvesInDoubt makes a gtrid in doubt the way it happens in
// the field (prepared on both databases under primary A, A killed, its async
// standby B promoted with --accept-data-loss), then settles it from the
// console as an operator would: the in-doubt table lists it, Resolve… is
// refused without the admin token, the dialog shows what each database
// holds (PREPARED on both), and Abort decides it; the databases then hold
// nothing of it and the in-doubt table is empty.
func TestConsoleResolvesInDoubt(t *testing.T) {
	chromium := consoleRequire(t)
	dir := t.TempDir()
	tandem := consoleBuild(t, dir, "./cmd/tandem")[0]
	secret := filepath.Join(dir, "standby-secret")
	if b, err := exec.Command(tandem, "secret", "--out", secret).CombinedOutput(); err != nil {
		t.Fatalf("tandem secret: %v\n%s", err, b)
	}
	common := []string{"--scan-interval", "200ms", "--orphan-timeout", "2s", "--max-clock-skew", "1s", "--standby-secret-file", secret,
		"--rm", "pg=postgres:${TANDEM_PG_DSN}", "--rm", "maria=mysql:${TANDEM_MYSQL_DSN}"}
	link, adminA := consoleFreeAddr(t), consoleFreeAddr(t)
	dirA, dirB := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	a := consoleStart(t, tandem, append([]string{"serve", "--listen", consoleFreeAddr(t), "--data-dir", dirA, "--admin", adminA,
		"--standby-listen", link, "--transport", "async"}, common...)...)
	b := consoleStart(t, tandem, append([]string{"serve", "--listen", consoleFreeAddr(t), "--data-dir", dirB, "--admin", "",
		"--standby-of", link}, common...)...)
	var st consoleStandby
	consoleWait(t, "B to follow A (A:\n"+a.out.String()+"\nB:\n"+b.out.String()+")", 30*time.Second, func() bool {
		code, err := consoleGetJSON("http://"+adminA+"/standby", &st)
		return err == nil && code == 200 && st.Connected
	})
	g := consolePrepareAndDie(t, "tandem_browser_indoubt")
	_ = a.cmd.Process.Kill()
	<-a.exited
	_ = b.cmd.Process.Signal(os.Interrupt)
	<-b.exited
	if out, err := exec.Command(tandem, "promote", "--data-dir", dirB, "--accept-data-loss", "--old-primary-stopped").CombinedOutput(); err != nil {
		t.Fatalf("tandem promote --accept-data-loss: %v\n%s", err, out)
	}
	time.Sleep(1100 * time.Millisecond) // the gtrid is now older than the boundary by more than the clock skew
	adminB := consoleFreeAddr(t)
	b = consoleStart(t, tandem, append([]string{"serve", "--listen", consoleFreeAddr(t), "--data-dir", dirB, "--admin", adminB}, common...)...)
	base := "http://" + adminB
	var list struct {
		InDoubt []struct {
			GTRID string `json:"gtrid"`
		} `json:"in_doubt"`
	}
	consoleWait(t, "B to list the gtrid in doubt (B:\n"+b.out.String()+")", 30*time.Second, func() bool {
		code, err := consoleGetJSON(base+"/in-doubt", &list)
		return err == nil && code == 200 && len(list.InDoubt) == 2 && list.InDoubt[0].GTRID == g.String()
	})

	ctx, console := consoleBrowser(t, chromium)
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/")); err != nil {
		t.Fatal(err)
	}
	row := chromedp.JSPath(`[...document.querySelectorAll("#t-indoubt tbody tr")].find(r => r.cells[0].textContent === "` + g.String() + `" && r.querySelector("button"))`)
	if err := chromedp.Do(ctx, chromedp.WaitReady(row)); err != nil {
		t.Fatalf("the in-doubt table does not list %s: %v", g, err)
	}
	disabled, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector("#t-indoubt tbody button").disabled`))
	if err != nil || !disabled {
		t.Errorf("Resolve… is enabled without the admin token (%v)", err)
	}
	tok, err := os.ReadFile(filepath.Join(dirB, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS("#token"), strings.TrimSpace(string(tok))), chromedp.Click(chromedp.CSS("#tokensave"))); err != nil {
		t.Fatal(err)
	}
	enabled := `[...document.querySelectorAll("#t-indoubt tbody button")].find(b => !b.disabled)`
	if err := chromedp.Do(ctx, chromedp.WaitReady(chromedp.JSPath(enabled)), chromedp.Click(chromedp.JSPath(enabled)),
		chromedp.WaitEnabled(chromedp.CSS("#resolve-abort"))); err != nil {
		t.Fatalf("opening the resolve dialog: %v", err)
	}
	held, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#t-holdings tbody")))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(held, "maria") || !strings.Contains(held, "pg") || strings.Count(held, "PREPARED") != 2 {
		t.Errorf("the dialog shows %q; want both databases holding the branch PREPARED", held)
	}
	if gt, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#resolve-gtrid"))); gt != g.String() {
		t.Errorf("the dialog resolves %q, want %s", gt, g)
	}
	consoleScreenshot(t, ctx, "console-resolve.png")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#resolve-abort"))); err != nil {
		t.Fatal(err)
	}
	var msg string
	consoleWait(t, "the resolve's answer", 30*time.Second, func() bool {
		msg, _ = chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#resolve-msg")))
		return strings.HasPrefix(msg, "decided") || strings.HasPrefix(msg, "not resolved")
	})
	if !strings.HasPrefix(msg, "decided ABORTED for "+g.String()) {
		t.Fatalf("resolve: %q, want decided ABORTED", msg)
	}
	var holdings struct {
		Prepared map[string]bool `json:"prepared"`
	}
	consoleWait(t, "phase 2 to roll both branches back", 30*time.Second, func() bool {
		code, err := consoleGetJSON(base+"/in-doubt?gtrid="+g.String(), &holdings)
		return err == nil && code == 200 && len(holdings.Prepared) == 2 && !holdings.Prepared["pg"] && !holdings.Prepared["maria"]
	})
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#resolve-cancel"))); err != nil {
		t.Fatal(err)
	}
	consoleWait(t, "the in-doubt table to empty", 15*time.Second, func() bool {
		n, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("indoubt-count").textContent`))
		return err == nil && n == "(0 branches)"
	})
	for _, m := range console() {
		if m.Type == chromedp.ConsoleError || m.IsException() {
			t.Errorf("the page logged %s: %s %s", m.Type, m.URL, m.Text)
		}
	}
}
