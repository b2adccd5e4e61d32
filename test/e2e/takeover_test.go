package e2e

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/client"
	"github.com/tandem-tx/tandem/internal/testproxy"
)

// takeOverTxn commits row id into e2e_takeover on both databases, decided
// at the coordinator with visibility async and MayTakeOver as given.
func takeOverTxn(t *testing.T, cli *client.Client, pc, mc *sql.Conn, id int, mayTakeOver bool) (string, client.Result) {
	t.Helper()
	opts := client.CommitOptions{DecideAt: client.DecideAtCoordinator, Visibility: client.VisibilityAsync, MayTakeOver: mayTakeOver}
	g, res, err := txnOnBoth(cli, opts, "e2e_takeover", pc, mc, id)
	if err != nil {
		t.Fatalf("transaction %d: %v", id, err)
	}
	return g, res
}

// A standby far away (its link through a proxy adding 400 ms each way):
// with CommitOptions.MayTakeOver an async Commit no longer waits for it. The
// coordinator takes the MariaDB branch over, Commit ends its session (the
// application's *sql.Conn is then done, never silently reused), and the
// coordinator commits the branch once its standby holds the decision. Without
// MayTakeOver, the client commits the branch on its own session as before.
func TestTakeOverWhileTheStandbyLags(t *testing.T) {
	d := openDBs(t)
	d.table(t, "e2e_takeover")
	sbListen := freeAddr(t)
	prim := startIn(t, t.TempDir(), "--standby-listen", sbListen, "--transport", "async")
	px, err := testproxy.New(sbListen)
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	startIn(t, t.TempDir(), "--standby-of", px.Addr())
	eventually(t, 10*time.Second, "standby connected", func() bool { return strings.Contains(healthMessage(prim), "standby=127.0.0.1") })
	px.SetLink(testproxy.Link{Delay: 400 * time.Millisecond})
	cli := newClient(t, prim.addr)

	pc, mc := conns(t, d)
	g, res := takeOverTxn(t, cli, pc, mc, 1, true)
	if len(res.EndedSessions) != 1 || res.EndedSessions[0] != "maria" || !res.Phase2Pending {
		t.Fatalf("Commit with MayTakeOver behind a standby 800 ms away = %+v; want the MariaDB session ended, phase 2 pending", res)
	}
	if _, err := mc.ExecContext(context.Background(), "SELECT 1"); !errors.Is(err, sql.ErrConnDone) {
		t.Fatalf("the ended MariaDB session answered %v; want sql.ErrConnDone (it must never be used again)", err)
	}
	eventually(t, 30*time.Second, "the taken-over transaction committed on both databases", func() bool {
		return d.count(t, d.pg, "e2e_takeover", 1) == 1 && d.count(t, d.my, "e2e_takeover", 1) == 1 && len(d.preparedFor(t, g)) == 0
	})

	pc2, mc2 := conns(t, d)
	_, res = takeOverTxn(t, cli, pc2, mc2, 2, false)
	if len(res.EndedSessions) != 0 {
		t.Fatalf("Commit without MayTakeOver ended sessions %v", res.EndedSessions)
	}
	if _, err := mc2.ExecContext(context.Background(), "SELECT 1"); err != nil {
		t.Fatalf("the MariaDB session after a commit on it: %v", err)
	}
	if d.count(t, d.my, "e2e_takeover", 2) != 1 {
		t.Fatalf("without a take-over the MariaDB branch is committed on the client's session before Commit returns")
	}
}

// A take-over never touches a branch before the standby holds the decision:
// the primary's shipping is held (standby-before-ship=sleep(3s)) and the
// primary is SIGKILLed as soon as the client has its COMMITTED answer.
// Both branches are still prepared then; the standby, promoted with
// --accept-data-loss without the decision, lists the gtrid in doubt and
// presumes nothing (its orphan timeout passes); settled by hand, it commits
// on both databases.
func TestTakeOverThenFailoverBeforeTheStandbyHasTheDecision(t *testing.T) {
	d := openDBs(t)
	d.table(t, "e2e_takeover")
	sbListen := freeAddr(t)
	pdir, sdir := t.TempDir(), t.TempDir()
	prim := startIn(t, pdir, "--standby-listen", sbListen, "--transport", "async", "--net-timeout", "20s")
	sb := startIn(t, sdir, "--standby-of", sbListen)
	eventually(t, 10*time.Second, "standby connected", func() bool { return strings.Contains(healthMessage(prim), "standby=127.0.0.1") })
	// Restarted with shipping held: the standby reconnects and gets
	// nothing new for 3 s per frame.
	prim.stop()
	prim = startInEnv(t, pdir, "standby-before-ship=sleep(3s)", "--standby-listen", sbListen, "--transport", "async", "--net-timeout", "20s")
	eventually(t, 10*time.Second, "standby connected again", func() bool { return strings.Contains(healthMessage(prim), "standby=127.0.0.1") })
	cli := newClient(t, prim.addr)
	pc, mc := conns(t, d)
	g, res := takeOverTxn(t, cli, pc, mc, 3, true)
	prim.kill()
	if len(res.EndedSessions) != 1 {
		t.Fatalf("Commit = %+v; want the MariaDB branch taken over", res)
	}
	if p := d.preparedFor(t, g); len(p) != 2 {
		t.Fatalf("at the kill, %d branches of %s were prepared (%v); want both: nothing is settled before the standby holds the decision", len(p), g, p)
	}
	sb.stop()
	if out, err := tandemCmd(t, "promote", "--data-dir", sdir, "--accept-data-loss", "--old-primary-stopped"); err != nil {
		t.Fatalf("promote --accept-data-loss: %v\n%s", err, out)
	}
	admin := freeAddr(t)
	np := startIn(t, sdir, "--admin", admin)
	time.Sleep(3 * time.Second) // past the orphan timeout (2 s), several scans (200 ms)
	if p := d.preparedFor(t, g); len(p) != 2 {
		t.Fatalf("the promoted standby settled %s without its decision: prepared now %v\n%s", g, p, np.out.String())
	}
	if out, err := tandemCmd(t, "resolve", "--admin", admin, "--data-dir", sdir, "--gtrid", g, "--commit"); err != nil {
		t.Fatalf("tandem resolve --commit: %v\n%s", err, out)
	}
	eventually(t, 20*time.Second, "nothing of the gtrid left prepared", func() bool { return len(d.preparedFor(t, g)) == 0 })
	if pg, my := d.count(t, d.pg, "e2e_takeover", 3), d.count(t, d.my, "e2e_takeover", 3); pg != 1 || my != 1 {
		t.Fatalf("after resolving %s: PostgreSQL %d row(s), MariaDB %d", g, pg, my)
	}
}
