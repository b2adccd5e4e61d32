package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/api"
	"github.com/tandem-tx/tandem/client"
	"github.com/tandem-tx/tandem/xid"
)

// followLog collects a client's log lines (the "coordinator moved" ones).
type followLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *followLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *followLog) moves() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range strings.Split(l.buf.String(), "\n") {
		if i := strings.Index(line, "msg=\"coordinator moved from "); i >= 0 {
			out = append(out, strings.SplitN(line[i+5:], "\"", 2)[0])
		}
	}
	return out
}

// followResults is what the workers saw: each Commit's result.
type followResults struct {
	mu      sync.Mutex
	acked   []string
	unknown []string
	other   []string // any other Commit error: there must be none
	before  []string // errors before Commit (statements): there must be none
	phase   string
	byPhase map[string]int
}

// Clients that know both coordinators follow the primary with no
// repointing: 3 clients, 2 workers each, commit transfers continuously
// through `tandem switchover` (A to B) and then a failover (B killed, A
// promoted after longer than two clients' DecisionTimeout, so that some
// of their commits caught in it end unknown; the third client's are
// settled on A once it is promoted). Every Commit returns success or an
// outcome-unknown error; every unknown gtrid is then resolved by Status
// (no resolve) on the new primary; nothing is left prepared, no transfer
// is on one database only, every acknowledged and resolved-committed
// transfer is on both, and the transfers on the databases are exactly the
// acknowledged plus the resolved-committed ones.
func TestFollowThePrimary(t *testing.T) {
	const decisionTimeout = 6 * time.Second
	const gap = 8 * time.Second // the failover: from the kill to the promotion
	d := openDBs(t)
	b := newBank(t, d, 6)
	// An orphan timeout well beyond the clients' backoff (1 s at most): the
	// promoted standby's in-doubt scan must not abort a transaction whose
	// client is on its way to commit it (that would be a correct ABORTED,
	// but this test wants every Commit caught in the change to succeed or
	// end unknown).
	p := startPair(t, "max-protection", "--orphan-timeout", "10s")
	type cli struct {
		c   *client.Client
		log *followLog
	}
	var clis []cli
	// Client 0 waits for a decision longer than the failover lasts: its
	// commits caught in it are settled on the promoted standby (Status,
	// then Commit). Clients 1 and 2 give up before: outcome unknown.
	for i := range 3 {
		l := &followLog{}
		timeout := decisionTimeout
		if i == 0 {
			timeout = 3 * gap
		}
		c, err := client.New(client.Config{
			Coordinators:    []string{p.a.addr, p.b.addr},
			RMs:             []client.RM{{Name: "pg", Driver: "postgres"}, {Name: "maria", Driver: "mysql", MultiStatements: true}},
			Defaults:        client.CommitOptions{DecideAt: client.DecideAtCoordinator},
			DecisionTimeout: timeout,
			Logger:          slog.New(slog.NewTextHandler(l, nil)),
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		clis = append(clis, cli{c, l})
	}
	res := &followResults{phase: "A primary", byPhase: map[string]int{}}
	setPhase := func(ph string) {
		res.mu.Lock()
		res.phase = ph
		res.mu.Unlock()
	}
	acked := func() int {
		res.mu.Lock()
		defer res.mu.Unlock()
		return len(res.acked)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	start := time.Now()
	for i, cl := range clis {
		for w := range 2 {
			account := 2*i + w
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					tctx, tcancel := context.WithTimeout(context.Background(), 60*time.Second)
					g, committing, r, took, err := followTransfer(tctx, b, cl.c, account)
					tcancel()
					if err == nil && took > time.Second {
						t.Logf("%6.1fs client %d: %s committed after %s, %d coordinator calls (caught in a role change)",
							time.Since(start).Seconds(), i, g, took.Round(time.Millisecond), r.CoordinatorCalls)
					}
					var ou *client.OutcomeUnknownError
					res.mu.Lock()
					switch {
					case err == nil:
						res.acked = append(res.acked, g)
						res.byPhase[res.phase]++
					case !committing:
						res.before = append(res.before, fmt.Sprintf("%s: %v", g, err))
					case errors.As(err, &ou) && ou.GTRID.String() == g:
						res.unknown = append(res.unknown, g)
						t.Logf("%6.1fs client %d: outcome unknown: %v", time.Since(start).Seconds(), i, err)
					default:
						res.other = append(res.other, fmt.Sprintf("%s: %v", g, err))
					}
					res.mu.Unlock()
				}
			}()
		}
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			wg.Wait()
		}
	}
	defer stop()
	eventually(t, 30*time.Second, "transfers through A", func() bool { return acked() >= 50 })

	// Switchover: A hands over to B, A follows B.
	setPhase("switchover A→B")
	t0 := time.Now()
	out, err := tandemCmd(t, "switchover", "--primary-admin", p.adminA, "--standby-admin", p.adminB)
	if err != nil || !strings.Contains(out, "switchover done") {
		t.Fatalf("tandem switchover A→B: %v\n%s\nA's log:\n%s\nB's log:\n%s", err, out, p.a.out.String(), p.b.out.String())
	}
	t.Logf("%6.1fs switchover A→B done in %s", time.Since(start).Seconds(), time.Since(t0).Round(time.Millisecond))
	setPhase("B primary")
	n := acked()
	eventually(t, 30*time.Second, "transfers through B", func() bool { return acked() >= n+50 })
	eventually(t, 20*time.Second, "A is B's standby and protects it", func() bool {
		return strings.Contains(healthMessage(p.b), "(protected) standby=127.0.0.1") &&
			strings.Contains(healthMessage(p.a), "role=standby of "+p.listenB+" (following)")
	})

	// Failover: B is killed; A is promoted after longer than the clients'
	// DecisionTimeout.
	setPhase("B killed, until A promoted with a standby")
	p.b.kill()
	t.Logf("%6.1fs B killed; promoting A in %s", time.Since(start).Seconds(), gap)
	time.Sleep(gap)
	t0 = time.Now()
	out, err = tandemCmd(t, "promote", "--admin", p.adminA)
	if err != nil || !strings.Contains(out, "epoch") {
		t.Fatalf("tandem promote --admin A: %v\n%s\nA's log:\n%s", err, out, p.a.out.String())
	}
	// max-protection: A acknowledges nothing until a standby has it.
	startIn(t, t.TempDir(), "--standby-of", p.listenA)
	t.Logf("%6.1fs A promoted (%s) and given a standby", time.Since(start).Seconds(), time.Since(t0).Round(time.Millisecond))
	setPhase("A primary again")
	n = acked()
	eventually(t, 60*time.Second, "transfers through A again", func() bool { return acked() >= n+50 })
	stop()

	res.mu.Lock()
	defer res.mu.Unlock()
	for _, e := range res.other {
		t.Errorf("a Commit returned neither success nor an unknown outcome: %s", e)
	}
	for _, e := range res.before {
		t.Errorf("a transfer failed before its Commit: %s", e)
	}
	// Every unknown outcome is resolved by the new primary's Status
	// (without resolve: its in-doubt scan settles what no Commit reached).
	resolvedCommitted := map[string]bool{}
	for _, g := range res.unknown {
		gt, err := xid.Parse(g)
		if err != nil {
			t.Fatal(err)
		}
		var st *api.StatusResponse
		eventually(t, 60*time.Second, "the outcome of "+g, func() bool {
			sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer scancel()
			st, err = clis[0].c.Status(sctx, gt, false)
			return err == nil && (st.Outcome == api.Outcome_COMMITTED || st.Outcome == api.Outcome_ABORTED)
		})
		t.Logf("unknown %s resolved by the new primary %s: %s", g, clis[0].c.CurrentCoordinator(), st.Outcome)
		if st.Outcome == api.Outcome_COMMITTED {
			resolvedCommitted[g] = true
		}
	}
	eventually(t, 60*time.Second, "nothing left prepared (pg_prepared_xacts, XA RECOVER)", func() bool { return len(d.prepared(t)) == 0 })
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
	for _, g := range res.acked {
		if !pj[g] || !mj[g] {
			t.Errorf("acknowledged transfer %s is missing from the databases", g)
		}
	}
	for _, g := range res.unknown {
		if resolvedCommitted[g] != (pj[g] && mj[g]) {
			t.Errorf("unknown transfer %s resolved committed=%v, on the databases %v/%v", g, resolvedCommitted[g], pj[g], mj[g])
		}
	}
	if len(pj) != len(res.acked)+len(resolvedCommitted) {
		t.Errorf("%d transfers on the databases; %d acknowledged + %d resolved committed", len(pj), len(res.acked), len(resolvedCommitted))
	}
	if s := b.sum(t); s != b.total {
		t.Errorf("money: %d, want %d", s, b.total)
	}
	for i, cl := range clis {
		moves := cl.log.moves()
		if len(moves) < 2 || cl.c.CurrentCoordinator() != p.a.addr {
			t.Errorf("client %d moved %q and uses %s; want A→B then B→A, ending on A", i, moves, cl.c.CurrentCoordinator())
		}
		t.Logf("client %d: %s", i, strings.Join(moves, "; "))
	}
	t.Logf("acknowledged by phase: %v", res.byPhase)
	t.Logf("%d commits acknowledged, %d outcome unknown (%d resolved committed, %d aborted), %d transfers on the databases, in %s",
		len(res.acked), len(res.unknown), len(resolvedCommitted), len(res.unknown)-len(resolvedCommitted), len(pj), time.Since(start).Round(time.Millisecond))
}

// followTransfer is bank.transfer, saying whether an error came from the
// Commit (committing) or before it.
func followTransfer(ctx context.Context, b *bank, cli *client.Client, a int) (g string, committing bool, res client.Result, took time.Duration, err error) {
	pc, err := b.d.pg.Conn(ctx)
	if err != nil {
		return "", false, res, 0, err
	}
	defer pc.Close()
	mc, err := b.d.my.Conn(ctx)
	if err != nil {
		return "", false, res, 0, err
	}
	defer mc.Close()
	ok := false
	defer func() {
		if !ok { // whatever state the branch is in, do not reuse the session
			_ = pc.Raw(func(any) error { return errBadConn })
			_ = mc.Raw(func(any) error { return errBadConn })
		}
	}()
	tx := cli.Begin()
	g = tx.GTRID().String()
	pb, err := tx.Branch(ctx, "pg", pc)
	if err != nil {
		return g, false, res, 0, err
	}
	mb, err := tx.Branch(ctx, "maria", mc)
	if err != nil {
		return g, false, res, 0, err
	}
	for _, st := range []struct {
		br   *client.Branch
		q    string
		args []any
	}{
		{pb, "UPDATE e2e_fo_acct SET bal = bal - 1 WHERE id = $1", []any{a}},
		{pb, "INSERT INTO e2e_fo_j VALUES ($1)", []any{g}},
		{mb, "UPDATE e2e_fo_acct SET bal = bal + 1 WHERE id = ?", []any{a}},
		{mb, "INSERT INTO e2e_fo_j VALUES (?)", []any{g}},
	} {
		if _, err := st.br.ExecContext(ctx, st.q, st.args...); err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
			return g, false, res, 0, err
		}
	}
	start := time.Now()
	res, err = tx.Commit(ctx)
	took = time.Since(start)
	if err != nil {
		return g, true, res, took, err
	}
	ok = true
	return g, true, res, took, nil
}
