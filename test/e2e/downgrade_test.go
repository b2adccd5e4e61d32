package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tandem-tx/tandem/api"
	"github.com/tandem-tx/tandem/internal/standby"
)

// commitWithin sends a Commit (two branches nobody prepared: the decision
// is all this looks at) and reports whether it was answered within d.
func commitWithin(t *testing.T, cli api.CoordinatorClient, d time.Duration) (answered bool, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_, err = cli.Commit(ctx, &api.CommitRequest{Gtrid: newGTRIDString(), Branches: []*api.Branch{{Rm: "pg"}, {Rm: "maria"}}})
	if status.Code(err) == codes.DeadlineExceeded {
		return false, nil
	}
	return true, err
}

// A max-protection primary's standby takes itself for synchronized after an
// unannounced disconnect (its primary stalls rather than go on without it).
// Restarted with a weaker --protection while that standby is away, the
// primary must not go on unprotected (a COMMIT it acknowledged could be lost
// by promoting that standby without --accept-data-loss): it waits as under
// max-protection until a standby has heard the new mode, then its own mode
// applies. Started with no standby listener at all, it refuses to start
// unless told the standby is lost (--standby-lost).
func TestPrimaryRestartedWithAWeakerModeWaitsUntilItsStandbyHearsIt(t *testing.T) {
	pdir, sdir := t.TempDir(), t.TempDir()
	sbListen := freeAddr(t)
	mode := func(p string) []string {
		return []string{"--standby-listen", sbListen, "--transport", "sync", "--protection", p, "--net-timeout", "1s"}
	}
	prim := startIn(t, pdir, mode("max-protection")...)
	sb := startIn(t, sdir, "--standby-of", sbListen)
	eventually(t, 10*time.Second, "the standby synchronized", func() bool {
		return strings.Contains(healthMessage(sb), "synchronized=yes")
	})
	if answered, err := commitWithin(t, prim.api(), 10*time.Second); !answered || err != nil {
		t.Fatalf("a Commit with the standby connected: answered %v, %v", answered, err)
	}
	if _, err := os.Stat(filepath.Join(pdir, standby.MaxProtectionPromiseFile)); err != nil {
		t.Fatalf("the max-protection primary noted no promise: %v", err)
	}
	sb.stop() // the standby goes away first: it still takes itself for synchronized
	prim.stop()

	prim = startIn(t, pdir, mode("max-availability")...)
	if !strings.Contains(healthMessage(prim), "waiting as max-protection") {
		t.Errorf("the health of a primary downgrading from max-protection does not say so: %s", healthMessage(prim))
	}
	// Three net timeouts: a max-availability primary would have gone on
	// unprotected after one.
	if answered, err := commitWithin(t, prim.api(), 3*time.Second); answered {
		t.Fatalf("restarted with max-availability while its max-protection standby was away, the primary answered a Commit without it (%v):\n%s", err, prim.out.String())
	}
	sb = startIn(t, sdir, "--standby-of", sbListen)
	eventually(t, 20*time.Second, "the standby heard the new mode", func() bool {
		_, err := os.Stat(filepath.Join(pdir, standby.MaxProtectionPromiseFile))
		return os.IsNotExist(err)
	})
	if answered, err := commitWithin(t, prim.api(), 10*time.Second); !answered || err != nil {
		t.Fatalf("a Commit once the standby heard the new mode: answered %v, %v", answered, err)
	}
	sb.stop()
	// Its own mode now: unprotected after the net timeout.
	if answered, err := commitWithin(t, prim.api(), 10*time.Second); !answered || err != nil {
		t.Fatalf("max-availability without its standby, once it heard the mode: answered %v, %v\n%s", answered, err, prim.out.String())
	}
	prim.stop()

	// Max-protection again, told to the standby, then restarted with no
	// standby listener: refused.
	prim = startIn(t, pdir, mode("max-protection")...)
	sb = startIn(t, sdir, "--standby-of", sbListen)
	eventually(t, 20*time.Second, "the promise noted", func() bool {
		_, err := os.Stat(filepath.Join(pdir, standby.MaxProtectionPromiseFile))
		return err == nil
	})
	sb.stop()
	prim.stop()
	out, code := serveOnce(t, "--data-dir", pdir, "--admin", "", "--rm", "pg=postgres:"+pgDSN, "--rm", "maria=mysql:"+myDSN)
	if code == 0 || !strings.Contains(out, "--standby-lost") || !strings.Contains(out, "max-protection") {
		t.Fatalf("a primary that promised max-protection started without a standby listener: exit %d\n%s", code, out)
	}
	assertNoStackTrace(t, out)
	prim = startIn(t, pdir, "--standby-lost")
	if !strings.Contains(prim.out.String(), "--standby-lost") {
		t.Errorf("--standby-lost withdrew the promise without saying so:\n%s", prim.out.String())
	}
	if answered, err := commitWithin(t, prim.api(), 10*time.Second); !answered || err != nil {
		t.Fatalf("a Commit after --standby-lost: answered %v, %v", answered, err)
	}
}
