package e2e

import (
	"context"
	"strings"
	"testing"
	"time"
)

// startInEnv is startIn with TANDEM_FAILPOINTS set for the process.
func startInEnv(t *testing.T, dir, failpoints string, extra ...string) *coordinator {
	t.Helper()
	c := &coordinator{t: t, addr: freeAddr(t), dataDir: dir}
	c.args = []string{"serve", "--listen", c.addr, "--data-dir", dir, "--admin", "", "--scan-interval", "200ms", "--orphan-timeout", "2s",
		"--rm", "pg=postgres:" + pgDSN, "--rm", "maria=mysql:" + myDSN}
	c.args = append(c.args, extra...)
	if failpoints != "" {
		c.env = []string{"TANDEM_FAILPOINTS=" + failpoints}
	}
	c.start()
	t.Cleanup(c.stop)
	return c
}

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
	sb := startIn(t, sdir, "--standby-of", sbListen)
	eventually(t, 10*time.Second, "standby connected", func() bool { return strings.Contains(healthMessage(prim), "standby=127.0.0.1") })
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	g, err := b.transfer(ctx, newClient(t, prim.addr), 0)
	t.Logf("transfer %s: %v", g, err)
	<-prim.exited
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
	if out, err := tandemCmd(t, "promote", "--data-dir", sdir, "--accept-data-loss"); err != nil || !strings.Contains(out, "WITHOUT being synchronized") {
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
