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

// followClient is a client that knows both coordinators of p, with its
// log (the "coordinator moved" lines).
type followClient struct {
	c   *client.Client
	log *followLog
}

func newFollowClient(t *testing.T, p *pair, decisionTimeout time.Duration) followClient {
	t.Helper()
	l := &followLog{}
	c, err := client.New(client.Config{
		Coordinators:    []string{p.a.addr, p.b.addr},
		RMs:             []client.RM{{Name: "pg", Driver: "postgres"}, {Name: "maria", Driver: "mysql", MultiStatements: true}},
		Defaults:        client.CommitOptions{DecideAt: client.DecideAtCoordinator},
		DecisionTimeout: decisionTimeout,
		Logger:          slog.New(slog.NewTextHandler(l, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return followClient{c, l}
}

// followLoad runs two workers per client, each transferring on its own
// account until stopped, and sorts every transfer's result.
type followLoad struct {
	t      *testing.T
	start  time.Time
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once

	mu      sync.Mutex
	acked   []string
	unknown []string
	other   []string // any other Commit error: there must be none
	before  []string // errors before Commit (statements): there must be none
	phase   string
	byPhase map[string]int
}

// With accounts, a transfer also moves money between the two databases
// account rows (each worker its own account); without, it only writes its
// journal rows, so that a transfer left in doubt holds no lock the next
// one needs.
func startFollowLoad(t *testing.T, b *bank, clis []followClient, phase string, accounts bool) *followLoad {
	ctx, cancel := context.WithCancel(context.Background())
	l := &followLoad{t: t, start: time.Now(), cancel: cancel, phase: phase, byPhase: map[string]int{}}
	for i, cl := range clis {
		for w := range 2 {
			account := 2*i + w
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				for ctx.Err() == nil {
					tctx, tcancel := context.WithTimeout(context.Background(), 60*time.Second)
					g, committing, r, took, err := followTransfer(tctx, b, cl.c, account, accounts)
					tcancel()
					l.record(i, g, committing, r, took, err)
				}
			}()
		}
	}
	t.Cleanup(l.stop)
	return l
}

func (l *followLoad) record(ci int, g string, committing bool, r client.Result, took time.Duration, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil && took > time.Second {
		l.t.Logf("%6.1fs client %d: %s committed after %s, %d coordinator calls (caught in a role change)",
			time.Since(l.start).Seconds(), ci, g, took.Round(time.Millisecond), r.CoordinatorCalls)
	}
	var ou *client.OutcomeUnknownError
	switch {
	case err == nil:
		l.acked = append(l.acked, g)
		l.byPhase[l.phase]++
	case !committing:
		l.before = append(l.before, fmt.Sprintf("%s: %v", g, err))
	case errors.As(err, &ou) && ou.GTRID.String() == g:
		l.unknown = append(l.unknown, g)
		if len(l.unknown) <= 10 {
			l.t.Logf("%6.1fs client %d: outcome unknown: %v", time.Since(l.start).Seconds(), ci, err)
		}
	default:
		l.other = append(l.other, fmt.Sprintf("%s: %v", g, err))
	}
}

func (l *followLoad) setPhase(ph string) {
	l.mu.Lock()
	l.phase = ph
	l.mu.Unlock()
}

func (l *followLoad) ackedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

func (l *followLoad) logf(format string, args ...any) {
	l.t.Logf("%6.1fs "+format, append([]any{time.Since(l.start).Seconds()}, args...)...)
}

func (l *followLoad) stop() {
	l.once.Do(func() {
		l.cancel()
		l.wg.Wait()
	})
}

// check stops the load and checks what the issue asks of following the
// primary: every Commit returned success or an unknown outcome; each
// unknown one is resolved by Status (no resolve) through cli on the
// primary, or, when that says UNDECIDED (a gtrid from before a promotion
// with --accept-data-loss that the new primary has no decision for), by
// settle; nothing is left prepared; no transfer is on one database only;
// the transfers on the databases are the acknowledged ones plus the
// unknown ones resolved committed; the money adds up.
func (l *followLoad) check(d dbs, b *bank, cli *client.Client, settle func(undecided []string)) {
	t := l.t
	t.Helper()
	l.stop()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.other {
		t.Errorf("a Commit returned neither success nor an unknown outcome: %s", e)
	}
	for _, e := range l.before {
		t.Errorf("a transfer failed before its Commit: %s", e)
	}
	resolvedCommitted := map[string]bool{}
	var undecided []string
	for _, g := range l.unknown {
		gt, err := xid.Parse(g)
		if err != nil {
			t.Fatal(err)
		}
		var st *api.StatusResponse
		eventually(t, 60*time.Second, "the outcome of "+g, func() bool {
			sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer scancel()
			st, err = cli.Status(sctx, gt, false)
			return err == nil && (st.Outcome != api.Outcome_UNDECIDED || settle != nil)
		})
		if len(l.unknown) <= 20 {
			t.Logf("unknown %s: the primary %s answers %s", g, cli.CurrentCoordinator(), st.Outcome)
		}
		switch st.Outcome {
		case api.Outcome_COMMITTED:
			resolvedCommitted[g] = true
		case api.Outcome_UNDECIDED:
			undecided = append(undecided, g)
		}
	}
	if len(undecided) > 0 {
		settle(undecided)
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
	for _, g := range l.acked {
		if !pj[g] || !mj[g] {
			t.Errorf("acknowledged transfer %s is missing from the databases", g)
		}
	}
	for _, g := range l.unknown {
		if resolvedCommitted[g] != (pj[g] && mj[g]) {
			t.Errorf("unknown transfer %s resolved committed=%v, on the databases %v/%v", g, resolvedCommitted[g], pj[g], mj[g])
		}
	}
	if len(pj) != len(l.acked)+len(resolvedCommitted) {
		t.Errorf("%d transfers on the databases; %d acknowledged + %d resolved committed", len(pj), len(l.acked), len(resolvedCommitted))
	}
	if s := b.sum(t); s != b.total {
		t.Errorf("money: %d, want %d", s, b.total)
	}
	t.Logf("acknowledged by phase: %v", l.byPhase)
	t.Logf("%d commits acknowledged, %d outcome unknown (%d resolved committed, %d settled by the operator, %d aborted), %d transfers on the databases, in %s",
		len(l.acked), len(l.unknown), len(resolvedCommitted), len(undecided), len(l.unknown)-len(resolvedCommitted)-len(undecided), len(pj),
		time.Since(l.start).Round(time.Millisecond))
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
	// Client 0 waits for a decision longer than the failover lasts: its
	// commits caught in it are settled on the promoted standby (Status,
	// then Commit). Clients 1 and 2 give up before: outcome unknown.
	clis := []followClient{newFollowClient(t, p, 3*gap), newFollowClient(t, p, decisionTimeout), newFollowClient(t, p, decisionTimeout)}
	l := startFollowLoad(t, b, clis, "A primary", true)
	eventually(t, 30*time.Second, "transfers through A", func() bool { return l.ackedCount() >= 50 })

	// Switchover: A hands over to B, A follows B.
	l.setPhase("switchover A→B")
	t0 := time.Now()
	out, err := tandemCmd(t, "switchover", "--primary-admin", p.adminA, "--standby-admin", p.adminB)
	if err != nil || !strings.Contains(out, "switchover done") {
		t.Fatalf("tandem switchover A→B: %v\n%s\nA's log:\n%s\nB's log:\n%s", err, out, p.a.out.String(), p.b.out.String())
	}
	l.logf("switchover A→B done in %s", time.Since(t0).Round(time.Millisecond))
	l.setPhase("B primary")
	n := l.ackedCount()
	eventually(t, 30*time.Second, "transfers through B", func() bool { return l.ackedCount() >= n+50 })
	eventually(t, 20*time.Second, "A is B's standby and protects it", func() bool {
		return strings.Contains(healthMessage(p.b), "(protected) standby=127.0.0.1") &&
			strings.Contains(healthMessage(p.a), "role=standby of "+p.listenB+" (following)")
	})

	// Failover: B is killed; A is promoted after longer than two clients'
	// DecisionTimeout.
	l.setPhase("B killed, until A promoted with a standby")
	p.b.kill()
	l.logf("B killed; promoting A in %s", gap)
	time.Sleep(gap)
	t0 = time.Now()
	out, err = tandemCmd(t, "promote", "--admin", p.adminA)
	if err != nil || !strings.Contains(out, "epoch") {
		t.Fatalf("tandem promote --admin A: %v\n%s\nA's log:\n%s", err, out, p.a.out.String())
	}
	// max-protection: A acknowledges nothing until a standby has it.
	startIn(t, t.TempDir(), "--standby-of", p.listenA)
	l.logf("A promoted (%s) and given a standby", time.Since(t0).Round(time.Millisecond))
	l.setPhase("A primary again")
	n = l.ackedCount()
	eventually(t, 60*time.Second, "transfers through A again", func() bool { return l.ackedCount() >= n+50 })
	l.check(d, b, clis[0].c, nil)
	for i, cl := range clis {
		moves := cl.log.moves()
		if len(moves) < 2 || cl.c.CurrentCoordinator() != p.a.addr {
			t.Errorf("client %d moved %q and uses %s; want A→B then B→A, ending on A", i, moves, cl.c.CurrentCoordinator())
		}
		t.Logf("client %d: %s", i, strings.Join(moves, "; "))
	}
}

// The same clients through a failover to an async standby promoted with
// --accept-data-loss (and --old-primary-stopped: A was killed). The new
// primary may lack decisions of the old one: for a gtrid from before the
// promotion that it has no decision for, it answers Status UNDECIDED and
// refuses Commit, so a client caught in the failover reports the outcome
// unknown instead of committing what A may have aborted (or rolling back
// what A may have committed). Those are in doubt — prepared on both
// databases, committed on neither — and the operator settles them
// (tandem resolve); everything acknowledged is committed on B. So are
// the transactions that began less than --max-clock-skew (here 1 s) after
// the promotion: the new primary cannot tell them from the old primary's.
func TestFollowThePrimaryAsyncFailover(t *testing.T) {
	d := openDBs(t)
	b := newBank(t, d, 4)
	p := startPair(t, "max-performance")
	clis := []followClient{newFollowClient(t, p, 0), newFollowClient(t, p, 0)}
	// Journal rows only: the transfers left in doubt until the end hold no
	// lock the others need.
	l := startFollowLoad(t, b, clis, "A primary", false)
	eventually(t, 30*time.Second, "transfers through A", func() bool { return l.ackedCount() >= 50 })
	l.setPhase("A killed, until B promoted")
	p.a.kill()
	l.logf("A killed")
	time.Sleep(time.Second)
	out, err := tandemCmd(t, "promote", "--admin", p.adminB)
	if err == nil {
		t.Fatalf("tandem promote of an async standby without --accept-data-loss went ahead:\n%s", out)
	}
	out, err = tandemCmd(t, "promote", "--admin", p.adminB, "--accept-data-loss", "--old-primary-stopped")
	if err != nil || !strings.Contains(out, "epoch") {
		t.Fatalf("tandem promote --accept-data-loss: %v\n%s\nB's log:\n%s", err, out, p.b.out.String())
	}
	l.logf("B promoted with --accept-data-loss")
	l.setPhase("B primary")
	time.Sleep(1500 * time.Millisecond) // past the 1 s clock-skew margin of the promotion
	n := l.ackedCount()
	eventually(t, 60*time.Second, "transfers through B", func() bool { return l.ackedCount() >= n+50 })
	l.check(d, b, clis[0].c, func(undecided []string) {
		t.Logf("%d unknown gtrids the new primary has no decision for: the operator settles them", len(undecided))
		resolveInDoubt(t, p.adminB, p.dirB)
	})
	for i, cl := range clis {
		if moves := cl.log.moves(); len(moves) != 1 || cl.c.CurrentCoordinator() != p.b.addr {
			t.Errorf("client %d moved %q and uses %s; want once, A→B", i, moves, cl.c.CurrentCoordinator())
		}
	}
}

// followTransfer is bank.transfer, saying whether an error came from the
// Commit (committing) or before it.
func followTransfer(ctx context.Context, b *bank, cli *client.Client, a int, accounts bool) (g string, committing bool, res client.Result, took time.Duration, err error) {
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
	type stmt struct {
		br   *client.Branch
		q    string
		args []any
	}
	stmts := []stmt{{pb, "INSERT INTO e2e_fo_j VALUES ($1)", []any{g}}, {mb, "INSERT INTO e2e_fo_j VALUES (?)", []any{g}}}
	if accounts {
		stmts = append(stmts, stmt{pb, "UPDATE e2e_fo_acct SET bal = bal - 1 WHERE id = $1", []any{a}},
			stmt{mb, "UPDATE e2e_fo_acct SET bal = bal + 1 WHERE id = ?", []any{a}})
	}
	for _, st := range stmts {
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
