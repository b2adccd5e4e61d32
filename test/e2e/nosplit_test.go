package e2e

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/api"
	"github.com/tandem-tx/tandem/client"
	"github.com/tandem-tx/tandem/internal/testproxy"
)

// An async pair never splits a transaction at a failover: the primary's
// shipping is slowed at a failpoint between its durable COMMIT record and
// the ship, and it is killed right after phase 2 committed a first branch
// (the client commits its MariaDB branch on the early decision). The
// standby, not synchronized (async), refuses promote without
// --accept-data-loss, with an error that says what it risks; promoted with
// it, it must commit the other branch: no gtrid is committed on one
// database only.
func TestAsyncFailoverNeverSplits(t *testing.T) {
	d := openDBs(t)
	b := newBank(t, d, 1)
	sbListen := freeAddr(t)
	pdir, sdir := t.TempDir(), t.TempDir()
	prim := startInEnv(t, pdir, "standby-before-ship=sleep(400ms);after-phase2-call=kill",
		"--standby-listen", sbListen, "--transport", "async", "--net-timeout", "5s")
	sbAdmin := freeAddr(t)
	sb := startIn(t, sdir, "--standby-of", sbListen, "--admin", sbAdmin)
	eventually(t, 10*time.Second, "standby connected", func() bool { return strings.Contains(healthMessage(prim), "standby=127.0.0.1") })
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	// Visibility async: PostgreSQL's branch is the coordinator's to commit
	// (under sync the client commits it itself), so that the primary dies
	// at its phase-2 call with a branch committed.
	cli := newClient(t, prim.addr)
	g, err := b.transferWith(ctx, cli, 0, client.CommitOptions{DecideAt: client.DecideAtCoordinator, Visibility: client.VisibilityAsync})
	t.Logf("transfer %s: %v", g, err)
	select {
	case <-prim.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("the primary made no phase-2 call within 30 s (failpoint after-phase2-call=kill)")
	}
	// The running standby refuses too (POST /role/promote), and keeps
	// following.
	if out, err := tandemCmd(t, "promote", "--admin", sbAdmin); err == nil || !strings.Contains(out, "409") || !strings.Contains(out, "--accept-data-loss") {
		t.Fatalf("promote --admin of an async standby without --accept-data-loss: %v\n%s", err, out)
	}
	if msg := healthMessage(sb); !strings.Contains(msg, "role=standby") || !strings.Contains(msg, "synchronized=NO") {
		t.Errorf("after the refused promotion the standby says: %s", msg)
	}
	sb.stop()

	out, err := tandemCmd(t, "promote", "--data-dir", sdir)
	if err == nil {
		t.Fatalf("an async standby was promoted without --accept-data-loss:\n%s", out)
	}
	for _, want := range []string{"not synchronized", "--accept-data-loss", "in doubt"} {
		if !strings.Contains(out, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, out)
		}
	}
	if out, err := tandemCmd(t, "promote", "--data-dir", sdir, "--accept-data-loss", "--old-primary-stopped"); err != nil || !strings.Contains(out, "WITHOUT being synchronized") {
		t.Fatalf("promote --accept-data-loss: %v\n%s", err, out)
	}
	np := startIn(t, sdir)
	eventually(t, 20*time.Second, "nothing of the transfer left prepared", func() bool { return len(d.preparedFor(t, g)) == 0 })
	pg, my := b.journal(t, d.pg)[g], b.journal(t, d.my)[g]
	if pg != my {
		t.Fatalf("SPLIT: gtrid %s committed on PostgreSQL %v, on MariaDB %v\n%s", g, pg, my, np.out.String())
	}
	if !pg {
		t.Errorf("gtrid %s was committed on a branch before the kill, so the standby held the COMMIT: it must be committed on both", g)
	}
	if s := b.sum(t); s != b.total {
		t.Errorf("money: %d, want %d", s, b.total)
	}
}

// The deterministic split of issue 10: an async primary commits the
// PostgreSQL branch of a COMMIT its standby does not have yet (shipping held
// 3s at the failpoint standby-before-ship), cannot reach MariaDB for the
// other branch (the coordinator's link to it is cut), and is SIGKILLed. The
// standby, promoted with --accept-data-loss, must not roll the MariaDB
// branch back. Before the fix phase 2 did not wait for the standby: the
// PostgreSQL row appeared at once, the standby never saw the COMMIT, and its
// orphan scan rolled the MariaDB branch back.
func TestAsyncFailoverAfterAFirstBranchCommitNeverSplits(t *testing.T) {
	d := openDBs(t)
	d.rollbackLeftovers(t)
	d.table(t, "e2e_ns")
	myHost := regexp.MustCompile(`tcp\(([^)]*)\)`).FindStringSubmatch(myDSN)
	if myHost == nil {
		t.Fatalf("no tcp(host:port) in the MariaDB DSN")
	}
	px, err := testproxy.New(myHost[1])
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	viaProxy := strings.Replace(myDSN, myHost[0], "tcp("+px.Addr()+")", 1)
	rms := func(c *coordinator) {
		for i, a := range c.args {
			if strings.HasPrefix(a, "maria=mysql:") {
				c.args[i] = "maria=mysql:" + viaProxy
			}
		}
	}
	sbListen := freeAddr(t)
	pdir, sdir := t.TempDir(), t.TempDir()
	prim := &coordinator{t: t, addr: freeAddr(t), dataDir: pdir, env: []string{"TANDEM_FAILPOINTS=standby-before-ship=sleep(3s)"}}
	prim.args = []string{"serve", "--listen", prim.addr, "--data-dir", pdir, "--admin", "", "--scan-interval", "200ms", "--orphan-timeout", "2s",
		"--rm", "pg=postgres:" + pgDSN, "--rm", "maria=mysql:" + myDSN, "--standby-secret-file", standbySecret(t),
		"--standby-listen", sbListen, "--transport", "async", "--net-timeout", "20s"}
	rms(prim)
	prim.start()
	t.Cleanup(prim.stop)
	sb := startIn(t, sdir, "--standby-of", sbListen)
	eventually(t, 10*time.Second, "standby connected", func() bool { return strings.Contains(healthMessage(prim), "standby=127.0.0.1") })

	g := prepareOwnedAndDie(t, "e2e_ns", 1, clusterOf(t, prim))
	px.Cut() // the coordinator cannot settle the MariaDB branch
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, _ = prim.api().Commit(ctx, &api.CommitRequest{Gtrid: g.String(), Branches: []*api.Branch{{Rm: "pg"}, {Rm: "maria"}},
			Options: &api.CommitOptions{Visibility: api.Visibility_ASYNC}})
	}()
	start := time.Now()
	eventually(t, 15*time.Second, "phase 2 committed the PostgreSQL branch", func() bool { return d.count(t, d.pg, "e2e_ns", 1) == 1 })
	t.Logf("the PostgreSQL branch committed %v after the Commit", time.Since(start).Round(time.Millisecond))
	prim.kill()
	px.Restore()
	sb.stop()
	if out, err := tandemCmd(t, "promote", "--data-dir", sdir, "--accept-data-loss", "--old-primary-stopped"); err != nil {
		t.Fatalf("promote --accept-data-loss: %v\n%s", err, out)
	}
	np := startIn(t, sdir)
	eventually(t, 20*time.Second, "nothing of the gtrid left prepared", func() bool { return len(d.preparedFor(t, g.String())) == 0 })
	if pg, my := d.count(t, d.pg, "e2e_ns", 1), d.count(t, d.my, "e2e_ns", 1); pg != my {
		t.Fatalf("SPLIT: gtrid %s committed on PostgreSQL %d, on MariaDB %d\n%s", g, pg, my, np.out.String())
	}
}

// The in-doubt boundary of a promotion with --accept-data-loss travels to
// the next standby. A gtrid prepared under the old primary A, with no
// decision on B, is in doubt on B once B is promoted that way. C follows B,
// B stops cleanly (C synchronized), and C is promoted without the flag: C
// must still never presume abort for that gtrid — A may have committed it
// on a database C cannot see. Before the boundary was shipped, C's orphan
// scan rolled the branches back after its 2 s orphan timeout.
func TestInDoubtBoundaryFollowsTheNextPromotion(t *testing.T) {
	d := openDBs(t)
	d.rollbackLeftovers(t)
	d.table(t, "e2e_ib")
	listenA, listenB := freeAddr(t), freeAddr(t)
	dirA, dirB, dirC := t.TempDir(), t.TempDir(), t.TempDir()
	a := startIn(t, dirA, "--standby-listen", listenA, "--transport", "async")
	b := startIn(t, dirB, "--standby-of", listenA)
	eventually(t, 10*time.Second, "B follows A", func() bool { return strings.Contains(healthMessage(a), "standby=127.0.0.1") })
	g := prepareOwnedAndDie(t, "e2e_ib", 1, clusterOf(t, a)) // A never hears of it: undecided everywhere
	a.kill()
	b.stop()
	if out, err := tandemCmd(t, "promote", "--data-dir", dirB, "--accept-data-loss", "--old-primary-stopped"); err != nil {
		t.Fatalf("promote B --accept-data-loss: %v\n%s", err, out)
	}
	time.Sleep(1100 * time.Millisecond) // the gtrid is now well before the boundary (max clock skew 1 s below)
	adminB := freeAddr(t)
	b = startIn(t, dirB, "--admin", adminB, "--standby-listen", listenB, "--transport", "sync", "--max-clock-skew", "1s")
	c := startIn(t, dirC, "--standby-of", listenB, "--max-clock-skew", "1s")
	eventually(t, 15*time.Second, "C synchronized with B", func() bool { return strings.Contains(healthMessage(c), "synchronized=yes") })
	if list, _ := tandemCmd(t, "status", "--in-doubt", "--admin", adminB); !strings.Contains(list, g.String()) {
		t.Fatalf("B does not list %s in doubt:\n%s", g, list)
	}
	b.stop() // clean: C gets the final STATE and is synchronized
	c.stop()
	if out, err := tandemCmd(t, "promote", "--data-dir", dirC); err != nil {
		t.Fatalf("promote C (synchronized, B stopped cleanly): %v\n%s", err, out)
	}
	adminC := freeAddr(t)
	c = startIn(t, dirC, "--admin", adminC, "--max-clock-skew", "1s")
	time.Sleep(4 * time.Second) // two orphan timeouts of scans
	if left := d.preparedFor(t, g.String()); len(left) != 2 {
		t.Fatalf("C settled a gtrid from before B's unsynchronized promotion by presumption: prepared now %v, want both branches\n%s", left, c.out.String())
	}
	if list, err := tandemCmd(t, "status", "--in-doubt", "--admin", adminC); err != nil || !strings.Contains(list, g.String()) {
		t.Fatalf("C does not list %s in doubt: %v\n%s", g, err, list)
	}
	resolveInDoubt(t, adminC, dirC)
	eventually(t, 10*time.Second, "nothing of the gtrid left prepared", func() bool { return len(d.preparedFor(t, g.String())) == 0 })
}

// A max-availability primary cut off from its standby goes on deciding,
// unprotected; if the standby were promoted meanwhile, both would decide
// (and both would scan the same databases, each presuming abort for what
// the other decided): a split. So a promotion with --accept-data-loss goes
// ahead only when the old primary is reached — the new epoch then fences it —
// or when the operator says it is stopped (--old-primary-stopped). Here the
// link from the standby to the primary is cut (a partition: the primary
// runs): the running standby's promotion is refused, saying why and what
// to do; the stopped standby's too. With the flag both go ahead.
func TestPromotionWhileTheOldPrimaryMayRunNeedsItStopped(t *testing.T) {
	listenA := freeAddr(t)
	dirA, dirB := t.TempDir(), t.TempDir()
	a := startIn(t, dirA, "--standby-listen", listenA, "--protection", "max-availability", "--net-timeout", "1s")
	px, err := testproxy.New(listenA)
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	adminB := freeAddr(t)
	b := startIn(t, dirB, "--standby-of", px.Addr(), "--admin", adminB, "--net-timeout", "1s")
	eventually(t, 10*time.Second, "B follows A", func() bool { return strings.Contains(healthMessage(b), "(following)") })
	px.Cut()
	eventually(t, 10*time.Second, "B cut from A", func() bool { return strings.Contains(healthMessage(b), "NOT CONNECTED") })

	out, err := tandemCmd(t, "promote", "--admin", adminB, "--accept-data-loss")
	if err == nil {
		t.Fatalf("a standby whose max-availability primary may still run was promoted:\n%s", out)
	}
	for _, want := range []string{px.Addr(), "--old-primary-stopped", "split"} {
		if !strings.Contains(out, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, out)
		}
	}
	if msg := healthMessage(b); !strings.Contains(msg, "role=standby") {
		t.Errorf("after the refused promotion B says: %s", msg)
	}
	b.stop()
	out, err = tandemCmd(t, "promote", "--data-dir", dirB, "--accept-data-loss")
	if err == nil || !strings.Contains(out, "--old-primary-stopped") {
		t.Fatalf("promote --data-dir --accept-data-loss without --old-primary-stopped: %v\n%s", err, out)
	}
	a.kill()
	if out, err := tandemCmd(t, "promote", "--data-dir", dirB, "--accept-data-loss", "--old-primary-stopped"); err != nil {
		t.Fatalf("promote --accept-data-loss --old-primary-stopped: %v\n%s", err, out)
	}
}
