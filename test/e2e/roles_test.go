package e2e

import (
	"context"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tandem-tx/tandem/api"
	"github.com/tandem-tx/tandem/client"
)

// pair is a primary and a standby that name each other: each has an admin
// listener, a --standby-listen and --peer, so that either can be promoted,
// demoted, fenced and made to follow the other.
type pair struct {
	a, b               *coordinator
	adminA, adminB     string
	listenA, listenB   string
	dirA, dirB         string
	protection, netOut string
}

func startPair(t *testing.T, protection string, extra ...string) *pair {
	t.Helper()
	p := &pair{adminA: freeAddr(t), adminB: freeAddr(t), listenA: freeAddr(t), listenB: freeAddr(t),
		dirA: t.TempDir(), dirB: t.TempDir(), protection: protection, netOut: "1s"}
	// --max-clock-skew 1s: after a promotion with --accept-data-loss, gtrids
	// stamped up to the skew later are treated as from before it.
	p.a = startIn(t, p.dirA, append([]string{"--admin", p.adminA, "--standby-listen", p.listenA, "--peer", p.listenB,
		"--protection", protection, "--net-timeout", p.netOut, "--max-clock-skew", "1s"}, extra...)...)
	p.b = startIn(t, p.dirB, append([]string{"--admin", p.adminB, "--standby-of", p.listenA, "--standby-listen", p.listenB, "--peer", p.listenA,
		"--protection", protection, "--net-timeout", p.netOut, "--max-clock-skew", "1s"}, extra...)...)
	eventually(t, 10*time.Second, "the standby follows the primary", func() bool {
		return strings.Contains(healthMessage(p.a), "standby=127.0.0.1") && strings.Contains(healthMessage(p.b), "(following)")
	})
	return p
}

func tandemCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, tandemBin, args...).CombinedOutput()
	return string(out), err
}

// load runs transfers from 4 workers against whichever coordinator target()
// names, recording every acknowledged one, until stopped.
type load struct {
	mu     sync.Mutex
	acked  []string
	errs   atomic.Int32
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startLoad(t *testing.T, b *bank, target func() *client.Client) *load {
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{cancel: cancel}
	for w := range 4 {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for ctx.Err() == nil {
				cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
				g, err := b.transfer(cctx, target(), w)
				ccancel()
				if err == nil {
					l.mu.Lock()
					l.acked = append(l.acked, g)
					l.mu.Unlock()
				} else if ctx.Err() == nil {
					if l.errs.Add(1) <= 3 {
						t.Logf("transfer: %v", err)
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}
	return l
}

func (l *load) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

func (l *load) stop() []string {
	l.cancel()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.acked...)
}

func requireCommitted(t *testing.T, c *coordinator, gtrids []string, what string) {
	t.Helper()
	// One connection for every question: a connection each (never closed
	// before the test ends) would pass the API's cap of connections held
	// (4,096) once that many transfers were acknowledged, and the server
	// closes the ones past it at once.
	cli := c.api()
	for _, g := range gtrids {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := cli.Status(ctx, &api.StatusRequest{Gtrid: g})
		cancel()
		if err != nil || st.Outcome != api.Outcome_COMMITTED {
			t.Fatalf("%s: transfer %s was acknowledged to its client; %s answers %v, %v", what, g, c.addr, st, err)
		}
	}
}

// Switchover under load, there and back: `tandem switchover` hands the
// primary role to the standby with no acknowledged transfer lost, the old
// primary serves as the new primary's standby (it is connected and the new
// primary is protected by it), and a second switchover returns the roles.
// In the end every transfer is on both databases or neither, nothing is left
// prepared, and the money adds up.
func TestSwitchoverThereAndBack(t *testing.T) {
	d := openDBs(t)
	b := newBank(t, d, 4)
	p := startPair(t, "max-protection")
	cliA, cliB := newClient(t, p.a.addr), newClient(t, p.b.addr)
	var onB atomic.Bool
	target := func() *client.Client {
		if onB.Load() {
			return cliB
		}
		return cliA
	}
	l := startLoad(t, b, target)
	eventually(t, 20*time.Second, "transfers through the first primary", func() bool { return l.count() >= 20 })

	out, err := tandemCmd(t, "switchover", "--primary-admin", p.adminA, "--standby-admin", p.adminB)
	if err != nil || !strings.Contains(out, "switchover done") {
		t.Fatalf("tandem switchover A→B: %v\n%s\nA's log:\n%s\nB's log:\n%s", err, out, p.a.out.String(), p.b.out.String())
	}
	t.Logf("A→B:\n%s", out)
	onB.Store(true)
	first := l.count()
	// A decides nothing now, and says so.
	_, err = p.a.api().Commit(context.Background(), &api.CommitRequest{Gtrid: newGTRIDString()})
	if c := status.Code(err); c != codes.FailedPrecondition {
		t.Errorf("Commit on the old primary after the switchover = %v, want FAILED_PRECONDITION (it is a standby)", err)
	}
	eventually(t, 10*time.Second, "the old primary is the new primary's standby and protects it", func() bool {
		return strings.Contains(healthMessage(p.b), "epoch=2") && strings.Contains(healthMessage(p.b), "(protected) standby=127.0.0.1") &&
			strings.Contains(healthMessage(p.a), "role=standby of "+p.listenB+" (following)")
	})
	eventually(t, 20*time.Second, "transfers through the new primary", func() bool { return l.count() >= first+20 })

	out, err = tandemCmd(t, "switchover", "--primary-admin", p.adminB, "--standby-admin", p.adminA)
	if err != nil || !strings.Contains(out, "switchover done") {
		t.Fatalf("tandem switchover B→A: %v\n%s\nA's log:\n%s\nB's log:\n%s", err, out, p.a.out.String(), p.b.out.String())
	}
	onB.Store(false)
	second := l.count()
	eventually(t, 20*time.Second, "transfers through the first primary again", func() bool { return l.count() >= second+10 })
	acked := l.stop()
	if !strings.Contains(healthMessage(p.a), "epoch=3") {
		t.Errorf("after two switchovers A says: %s", healthMessage(p.a))
	}
	requireCommitted(t, p.a, acked, "after two switchovers")
	eventually(t, 30*time.Second, "nothing left prepared", func() bool { return len(d.prepared(t)) == 0 })
	pj, mj := b.journal(t, d.pg), b.journal(t, d.my)
	for _, g := range acked {
		if !pj[g] || !mj[g] {
			t.Errorf("acknowledged transfer %s is missing from the databases", g)
		}
	}
	if len(pj) != len(mj) {
		t.Errorf("%d transfers on PostgreSQL, %d on MariaDB", len(pj), len(mj))
	}
	if s := b.sum(t); s != b.total {
		t.Errorf("money: %d, want %d", s, b.total)
	}
	t.Logf("%d transfers acknowledged across two switchovers (%d refused or failed while switching)", len(acked), l.errs.Load())
}

// A primary that keeps running while its standby is promoted (`tandem
// promote --admin`) is fenced at once: the promoted standby tells it the new
// epoch, and from then on it refuses Commit, Abort and Status naming the new
// primary and epoch, and settles nothing (its coordinator is closed); the new
// primary has every acknowledged transfer and settles an orphan; the fenced
// one then follows the new primary (`tandem follow`) as its standby.
func TestRunningPrimaryIsFencedByAPromotion(t *testing.T) {
	d := openDBs(t)
	b := newBank(t, d, 2)
	d.table(t, "e2e_fence_live")
	p := startPair(t, "max-availability")
	cli := p.a.client(t)
	l := startLoad(t, b, func() *client.Client { return cli })
	eventually(t, 20*time.Second, "transfers through the primary", func() bool { return l.count() >= 10 })
	eventually(t, 20*time.Second, "the standby synchronized", func() bool { return strings.Contains(healthMessage(p.b), "(following) synchronized=yes") })
	// Synchronized, but its max-availability primary still runs: a silent
	// partition would let it go on unprotected without this standby hearing
	// of it, so the promotion needs --accept-data-loss.
	out, err := tandemCmd(t, "promote", "--admin", p.adminB)
	if err == nil || !strings.Contains(out, "max-availability") || !strings.Contains(out, "--accept-data-loss") {
		t.Fatalf("promote --admin of a running max-availability standby without the flag: %v\n%s", err, out)
	}

	// Promoted while the clients keep committing on the old primary: what
	// it acknowledged must be on the new one, what it had in flight must
	// not be acknowledged.
	out, err = tandemCmd(t, "promote", "--admin", p.adminB, "--accept-data-loss")
	if err != nil || !strings.Contains(out, "epoch 2") {
		t.Fatalf("tandem promote --admin: %v\n%s\n%s", err, out, p.b.out.String())
	}
	eventually(t, 10*time.Second, "the old primary fenced", func() bool { return strings.Contains(healthMessage(p.a), "role=FENCED") })
	acked := l.stop()
	for name, call := range map[string]func(context.Context) error{
		"Commit": func(ctx context.Context) error {
			_, err := p.a.api().Commit(ctx, &api.CommitRequest{Gtrid: newGTRIDString()})
			return err
		},
		"Abort": func(ctx context.Context) error {
			_, err := p.a.api().Abort(ctx, &api.AbortRequest{Gtrid: newGTRIDString()})
			return err
		},
		"Status": func(ctx context.Context) error {
			_, err := p.a.api().Status(ctx, &api.StatusRequest{Gtrid: acked[0], Resolve: true})
			return err
		},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := call(ctx)
		cancel()
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "epoch 2") || !strings.Contains(err.Error(), p.listenB) {
			t.Errorf("%s on the fenced primary = %v, want FAILED_PRECONDITION naming epoch 2 and %s", name, err, p.listenB)
		}
	}
	t.Logf("%d transfers acknowledged by the old primary before it was fenced", len(acked))
	if !strings.Contains(p.a.out.String(), "FENCED") {
		t.Errorf("the fenced primary's log does not say FENCED:\n%s", p.a.out.String())
	}
	requireCommitted(t, p.b, acked, "on the promoted standby")
	// What the old primary had in flight has no decision here and began
	// before the promotion: in doubt, never presumed aborted. Each is
	// prepared on every database it touched (the old primary was halted
	// before its phase 2, which waits for the standby): the operator aborts.
	// The operator lists and settles until nothing is left: a transfer the
	// load cancelled while its XA PREPARE ran may leave a branch prepared
	// just after the list was made.
	eventually(t, 30*time.Second, "the operator settled every in-doubt branch (nothing left prepared)", func() bool {
		return resolveInDoubt(t, p.adminB, p.dirB, b.committedOnOther(t)) == 0 && len(d.prepared(t)) == 0
	})
	time.Sleep(1500 * time.Millisecond) // past the 1 s clock-skew margin of the promotion
	orphan := prepareOwnedAndDie(t, "e2e_fence_live", 1, clusterOf(t, p.b))
	eventually(t, 20*time.Second, "the new primary settles the orphan", func() bool { return len(d.preparedFor(t, orphan.String())) == 0 })
	eventually(t, 30*time.Second, "nothing left prepared", func() bool { return len(d.prepared(t)) == 0 })
	pj, mj := b.journal(t, d.pg), b.journal(t, d.my)
	for g := range pj {
		if !mj[g] {
			t.Errorf("transfer %s committed on PostgreSQL only", g)
		}
	}
	for g := range mj {
		if !pj[g] {
			t.Errorf("transfer %s committed on MariaDB only", g)
		}
	}

	out, err = tandemCmd(t, "follow", "--admin", p.adminA, "--primary", p.listenB)
	if err != nil {
		t.Fatalf("tandem follow: %v\n%s", err, out)
	}
	eventually(t, 10*time.Second, "the fenced primary follows the new one", func() bool {
		return strings.Contains(healthMessage(p.a), "role=standby of "+p.listenB+" (following)") && strings.Contains(healthMessage(p.b), "(protected) standby=127.0.0.1")
	})
	g, err := b.transfer(context.Background(), p.b.client(t), 0)
	if err != nil {
		t.Fatalf("a transfer through the new primary with its new standby: %v", err)
	}
	requireCommitted(t, p.b, []string{g}, "the new primary")
	if s := b.sum(t); s != b.total {
		t.Errorf("money: %d, want %d", s, b.total)
	}
}

// resolveInDoubt settles, as an operator would after looking, every gtrid
// the coordinator at admin lists in doubt, and returns how many it listed.
// One both databases hold prepared is aborted. One settled on both since
// it was listed is left (the callers check the journals on both databases
// for splits). One prepared on a single database is an error unless
// byData is given: then the operator looks at the other database's data
// (byData says whether it committed the gtrid) and settles the prepared
// branch the same way — a client cancelled between its two prepares, or
// an old primary's phase 2 under --accept-data-loss, leaves such gtrids.
func resolveInDoubt(t *testing.T, admin, dataDir string, byData ...func(g string, preparedOn string) bool) int {
	t.Helper()
	list, err := tandemCmd(t, "status", "--in-doubt", "--admin", admin)
	if err != nil {
		t.Fatalf("tandem status --in-doubt: %v\n%s", err, list)
	}
	seen := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([0-9a-f]{32}) `).FindAllStringSubmatch(list, -1) {
		g := m[1]
		if seen[g] {
			continue
		}
		seen[g] = true
		show, _ := tandemCmd(t, "resolve", "--admin", admin, "--data-dir", dataDir, "--gtrid", g)
		choice := "--abort"
		switch strings.Count(show, "PREPARED") {
		case 2:
		case 0:
			// Listed, then settled on both sides before this look (the old
			// primary, not yet fenced, or past its net-timeout on a busy
			// machine, finished its phase 2): nothing is left to settle,
			// and nothing is half done.
			t.Logf("in-doubt gtrid %s was settled on both databases before the operator looked", g)
			continue
		default:
			if len(byData) == 0 {
				t.Errorf("in-doubt gtrid %s is prepared on one database only (one side acted on a decision the new primary lacks?):\n%s", g, show)
				continue
			}
			on := "maria"
			if regexp.MustCompile(`(?m)^\s*pg\b.*PREPARED`).MatchString(show) {
				on = "pg"
			}
			if byData[0](g, on) {
				choice = "--commit"
			}
			t.Logf("in-doubt gtrid %s is prepared on %s only; the other database's data says %s", g, on, choice)
		}
		if out, err := tandemCmd(t, "resolve", "--admin", admin, "--data-dir", dataDir, "--gtrid", g, choice); err != nil {
			t.Errorf("tandem resolve %s %s: %v\n%s", choice, g, err, out)
		}
	}
	t.Logf("%d in-doubt gtrids settled by hand", len(seen))
	return len(seen)
}
