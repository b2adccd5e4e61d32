package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tandem-tx/tandem/api"
	"github.com/tandem-tx/tandem/client"
	"github.com/tandem-tx/tandem/internal/testproxy"
	"github.com/tandem-tx/tandem/waits"
)

// startIn starts `tandem serve` on a fresh port with the given data directory
// and flags (besides --listen, --data-dir, the RMs and fast scans). A
// coordinator with a standby role gets the run's cluster secret
// (standbySecret), as a real pair would.
func startIn(t *testing.T, dir string, extra ...string) *coordinator {
	t.Helper()
	return startInEnv(t, dir, "", extra...)
}

// startInEnv is startIn with TANDEM_FAILPOINTS set for the process.
func startInEnv(t *testing.T, dir, failpoints string, extra ...string) *coordinator {
	t.Helper()
	c := &coordinator{t: t, addr: freeAddr(t), dataDir: dir}
	if failpoints != "" {
		c.env = []string{"TANDEM_FAILPOINTS=" + failpoints}
	}
	c.args = []string{"serve", "--listen", c.addr, "--data-dir", dir, "--admin", "", "--scan-interval", "200ms", "--orphan-timeout", "2s",
		"--rm", "pg=postgres:" + pgDSN, "--rm", "maria=mysql:" + myDSN}
	for _, a := range extra {
		if a == "--standby-listen" || a == "--standby-of" {
			c.args = append(c.args, "--standby-secret-file", standbySecret(t))
			break
		}
	}
	c.args = append(c.args, extra...)
	c.start()
	t.Cleanup(c.stop)
	return c
}

var (
	secretOnce sync.Once
	secretFile string
	secretErr  error
)

// standbySecret is the cluster secret of every standby pair of the run,
// made once by `tandem secret` beside the test binary (removed at exit).
// It checks what `tandem secret` promises: mode 0600, never overwritten.
func standbySecret(t *testing.T) string {
	t.Helper()
	secretOnce.Do(func() {
		f := filepath.Join(filepath.Dir(tandemBin), "standby-secret")
		out, err := exec.Command(tandemBin, "secret", "--out", f).CombinedOutput()
		if err != nil {
			secretErr = fmt.Errorf("tandem secret: %v\n%s", err, out)
			return
		}
		if strings.Contains(string(out), readSecret(f)) {
			secretErr = fmt.Errorf("tandem secret printed the secret: %s", out)
			return
		}
		if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != 0o600 {
			secretErr = fmt.Errorf("the secret file: %v, mode %v, want 0600", err, fi.Mode().Perm())
			return
		}
		if out, err := exec.Command(tandemBin, "secret", "--out", f).CombinedOutput(); err == nil || !strings.Contains(string(out), "not overwritten") {
			secretErr = fmt.Errorf("a second tandem secret on the same file: %v\n%s", err, out)
			return
		}
		secretFile = f
	})
	if secretErr != nil {
		t.Fatal(secretErr)
	}
	return secretFile
}

func readSecret(f string) string {
	b, _ := os.ReadFile(f)
	if s := strings.TrimSpace(string(b)); len(s) >= 32 {
		return s
	}
	return "\x00no secret"
}

// Off loopback, a standby address without authentication, or with the
// secret but without TLS, stops the start with an error that says how to
// fix it; with the secret and --insecure-no-tls it starts.
func TestStandbyOffLoopbackNeedsASecret(t *testing.T) {
	rms := []string{"--rm", "pg=postgres:" + pgDSN, "--rm", "maria=mysql:" + myDSN}
	for _, flags := range [][]string{{"--standby-listen", "0.0.0.0:0"}, {"--standby-of", "192.0.2.1:7072"}} {
		out, code := serveOnce(t, append(append([]string{"--data-dir", t.TempDir(), "--admin", ""}, rms...), flags...)...)
		if code == 0 || !strings.Contains(out, "without authentication") || !strings.Contains(out, "tandem secret --out FILE") {
			t.Errorf("tandem serve %v: exit %d, want refused with how to fix it:\n%s", flags, code, out)
		}
		assertNoStackTrace(t, out)
	}
	// The secret alone authenticates only the start of each connection:
	// off loopback the link also needs TLS, or --insecure-no-tls.
	out, code := serveOnce(t, append(append([]string{"--data-dir", t.TempDir(), "--admin", "", "--standby-secret-file", standbySecret(t)}, rms...),
		"--standby-listen", "0.0.0.0:0")...)
	if code == 0 || !strings.Contains(out, "without TLS") || !strings.Contains(out, "--standby-tls-cert") || !strings.Contains(out, "--insecure-no-tls") {
		t.Errorf("tandem serve --standby-listen 0.0.0.0:0 with a secret and no TLS: exit %d, want refused with how to fix it:\n%s", code, out)
	}
	assertNoStackTrace(t, out)
	startIn(t, t.TempDir(), "--standby-listen", "0.0.0.0:"+strings.Split(freeAddr(t), ":")[1], "--insecure-no-tls")
}

func healthMessage(c *coordinator) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	// A connection of its own, closed at once: eventually() asks every
	// 50 ms, and the API caps the connections held.
	conn := c.dial()
	defer conn.Close()
	h, err := api.NewCoordinatorClient(conn).Health(ctx, &api.HealthRequest{})
	if err != nil {
		return err.Error()
	}
	return h.Message
}

// bank is the money of the failover test: accounts on both databases and a
// journal row per transfer on each.
type bank struct {
	d        dbs
	accounts int
	total    int64
}

func newBank(t *testing.T, d dbs, accounts int) *bank {
	t.Helper()
	ctx := context.Background()
	d.rollbackLeftovers(t)
	for _, db := range []*sql.DB{d.pg, d.my} {
		for _, s := range []string{"DROP TABLE IF EXISTS e2e_fo_acct", "DROP TABLE IF EXISTS e2e_fo_j",
			"CREATE TABLE e2e_fo_acct (id int PRIMARY KEY, bal bigint NOT NULL)", "CREATE TABLE e2e_fo_j (g varchar(64) PRIMARY KEY)"} {
			if _, err := db.ExecContext(ctx, s); err != nil {
				t.Fatal(s, err)
			}
		}
		for i := range accounts {
			if _, err := db.ExecContext(ctx, "INSERT INTO e2e_fo_acct VALUES ("+itoa(i)+", 1000)"); err != nil {
				t.Fatal(err)
			}
		}
	}
	return &bank{d: d, accounts: accounts, total: int64(2 * accounts * 1000)}
}

// transfer moves 1 from account a on PostgreSQL to account a on MariaDB.
func (b *bank) transfer(ctx context.Context, cli *client.Client, a int) (string, error) {
	return b.transferWith(ctx, cli, a, client.CommitOptions{})
}

// transferWith is transfer with opts for the transaction (the client's
// defaults when zero).
func (b *bank) transferWith(ctx context.Context, cli *client.Client, a int, opts client.CommitOptions) (string, error) {
	pc, err := b.d.pg.Conn(ctx)
	if err != nil {
		return "", err
	}
	mc, err := b.d.my.Conn(ctx)
	if err != nil {
		pc.Close()
		return "", err
	}
	ok := false
	defer func() {
		if !ok { // whatever state the branch is in, do not reuse the session
			_ = pc.Raw(func(any) error { return errBadConn })
			_ = mc.Raw(func(any) error { return errBadConn })
		}
		pc.Close()
		mc.Close()
	}()
	tx := cli.Begin()
	if opts != (client.CommitOptions{}) {
		tx.SetOptions(opts)
	}
	g := tx.GTRID().String()
	pb, err := tx.Branch(ctx, "pg", pc)
	if err != nil {
		return g, err
	}
	mb, err := tx.Branch(ctx, "maria", mc)
	if err != nil {
		return g, err
	}
	if _, err := pb.ExecContext(ctx, "UPDATE e2e_fo_acct SET bal = bal - 1 WHERE id = $1", a); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return g, err
	}
	if _, err := pb.ExecContext(ctx, "INSERT INTO e2e_fo_j VALUES ($1)", g); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return g, err
	}
	if _, err := mb.ExecContext(ctx, "UPDATE e2e_fo_acct SET bal = bal + 1 WHERE id = ?", a); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return g, err
	}
	if _, err := mb.ExecContext(ctx, "INSERT INTO e2e_fo_j VALUES (?)", g); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return g, err
	}
	if _, err := tx.Commit(ctx); err != nil {
		return g, err
	}
	ok = true
	return g, nil
}

func (b *bank) journal(t *testing.T, db *sql.DB) map[string]bool {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), "SELECT g FROM e2e_fo_j")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var g string
		_ = rows.Scan(&g)
		out[g] = true
	}
	return out
}

// committedOnOther is the operator's look at the data of a transfer
// prepared on one database only (resolveInDoubt): whether the other
// database committed it (its journal row).
func (b *bank) committedOnOther(t *testing.T) func(g, preparedOn string) bool {
	return func(g, preparedOn string) bool {
		other := b.d.my
		if preparedOn == "maria" {
			other = b.d.pg
		}
		return b.journal(t, other)[g]
	}
}

func (b *bank) sum(t *testing.T) int64 {
	t.Helper()
	var total int64
	for _, db := range []*sql.DB{b.d.pg, b.d.my} {
		var s int64
		if err := db.QueryRowContext(context.Background(), "SELECT COALESCE(SUM(bal), 0) FROM e2e_fo_acct").Scan(&s); err != nil {
			t.Fatal(err)
		}
		total += s
	}
	return total
}

// stopPrimaryThenStandby stops prim cleanly, then sb once its session with
// prim has ended: not while prim's final STATE may still be on its way.
func stopPrimaryThenStandby(t *testing.T, prim, sb *coordinator) {
	t.Helper()
	const lost = "standby: not connected to the primary"
	before := strings.Count(sb.out.String(), lost)
	prim.stop()
	eventually(t, 20*time.Second, "the standby's session with the stopped primary ended", func() bool {
		return strings.Count(sb.out.String(), lost) > before
	})
	sb.stop()
}

func promote(t *testing.T, dir string) string {
	t.Helper()
	out, err := exec.Command(tandemBin, "promote", "--data-dir", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("tandem promote: %v\n%s", err, out)
	}
	return string(out)
}

// Failover under load in max-protection, round after round: a primary with a
// fresh standby takes transfers from 4 clients; it is SIGKILLed mid-run; the
// standby is stopped, promoted, and started as the primary (with a fresh
// standby of its own for the next round). Every transfer acknowledged to a
// client is COMMITTED on the new primary; in the end no branch is left in
// doubt, every transfer is on both databases or on neither, and the money
// adds up. Odd rounds promote the standby stopped (tandem promote
// --data-dir, then a restart); even rounds promote it running (tandem promote
// --admin). At least TANDEM_FAILOVER_ROUNDS rounds (default 20), and more
// until TANDEM_FAILOVER_SECONDS (default 0) have passed: a longer soak.
func TestFailoverUnderLoadMaxProtection(t *testing.T) {
	minRounds, budget := 20, time.Duration(0)
	if s := os.Getenv("TANDEM_FAILOVER_ROUNDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatal(err)
		}
		minRounds = n
	}
	if s := os.Getenv("TANDEM_FAILOVER_SECONDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatal(err)
		}
		budget = time.Duration(n) * time.Second
	}
	d := openDBs(t)
	b := newBank(t, d, 8)
	primaryFlags := func() []string {
		return []string{"--standby-listen", freeAddr(t), "--protection", "max-protection", "--net-timeout", "2s"}
	}
	flagValue := func(args []string, name string) string {
		for i, a := range args {
			if a == name {
				return args[i+1]
			}
		}
		return ""
	}
	prim := startIn(t, t.TempDir(), primaryFlags()...)
	var acked []string
	start := time.Now()
	rounds := 0
	live := 0
	for rounds < minRounds || time.Since(start) < budget {
		rounds++
		sdir, sbAdmin := t.TempDir(), freeAddr(t)
		sb := startIn(t, sdir, append([]string{"--standby-of", flagValue(prim.args, "--standby-listen"), "--admin", sbAdmin}, primaryFlags()...)...)
		eventually(t, 10*time.Second, "the standby connected", func() bool {
			return strings.Contains(healthMessage(prim), "(protected) standby=127.0.0.1")
		})
		if rounds == 1 {
			// A standby decides nothing, and says who does.
			_, err := sb.api().Commit(context.Background(), &api.CommitRequest{Gtrid: newGTRIDString()})
			if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "standby of the primary at 127.0.0.1") {
				t.Fatalf("Commit on a standby = %v, want FAILED_PRECONDITION naming the primary", err)
			}
		}
		cli := newClient(t, prim.addr)
		ctx, cancel := context.WithCancel(context.Background())
		var mu sync.Mutex
		var roundAcked []string
		var wg sync.WaitGroup
		var errs atomic.Int32
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
					g, err := b.transfer(cctx, cli, w)
					ccancel()
					if err == nil {
						mu.Lock()
						roundAcked = append(roundAcked, g)
						mu.Unlock()
					} else if ctx.Err() == nil {
						if errs.Add(1) <= 3 {
							t.Logf("round %d: transfer: %v", rounds, err)
						}
						time.Sleep(20 * time.Millisecond)
					}
				}
			}()
		}
		// Until a few transfers are through (the previous round's orphans
		// hold row locks until the orphan timeout), then a little more.
		eventually(t, 20*time.Second, "transfers acknowledged by the new primary", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(roundAcked) >= 5
		})
		time.Sleep(time.Duration(rounds*97%300) * time.Millisecond)
		prim.kill()
		cancel()
		wg.Wait()
		if rounds%2 == 0 {
			live++
			if out, err := tandemCmd(t, "promote", "--admin", sbAdmin); err != nil || !strings.Contains(out, "epoch") {
				t.Fatalf("round %d: tandem promote --admin: %v\n%s\n%s", rounds, err, out, sb.out.String())
			}
			prim = sb
		} else {
			sb.stop()
			if out := promote(t, sdir); !strings.Contains(out, "epoch") {
				t.Fatalf("promote said: %s", out)
			}
			prim = startIn(t, sdir, primaryFlags()...)
		}
		mu.Lock()
		if len(roundAcked) == 0 {
			t.Fatalf("round %d: no transfer acknowledged before the kill", rounds)
		}
		primAPI := prim.api() // one connection for all (the API caps those held)
		for _, g := range roundAcked {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			st, err := primAPI.Status(ctx, &api.StatusRequest{Gtrid: g})
			cancel()
			if err != nil || st.Outcome != api.Outcome_COMMITTED {
				t.Fatalf("round %d: transfer %s was acknowledged to its client; the promoted standby answers %v, %v", rounds, g, st, err)
			}
		}
		acked = append(acked, roundAcked...)
		mu.Unlock()
	}
	// In max-protection the last primary writes no decision (the ABORT of an
	// orphaned branch, say) until a standby has it: give it one.
	startIn(t, t.TempDir(), "--standby-of", flagValue(prim.args, "--standby-listen"))
	eventually(t, 30*time.Second, "every in-doubt branch settled by the last primary", func() bool { return len(d.prepared(t)) == 0 })
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
	for _, g := range acked {
		if !pj[g] || !mj[g] {
			t.Errorf("acknowledged transfer %s is missing from the databases", g)
		}
	}
	if s := b.sum(t); s != b.total {
		t.Errorf("money: %d, want %d", s, b.total)
	}
	if !strings.Contains(healthMessage(prim), fmt.Sprintf("epoch=%d", rounds+1)) {
		t.Errorf("after %d promotions the primary says: %s", rounds, healthMessage(prim))
	}
	t.Logf("%d failovers (%d of a running standby) in %v; %d transfers acknowledged, %d committed", rounds, live, time.Since(start).Round(time.Millisecond), len(acked), len(pj))
}

// max-availability with the standby cut off (a TCP proxy between them):
// protected while it is there; once cut, a commit waits the net timeout, then
// commits go on and the primary says UNPROTECTED with the exposure counted;
// once the network is back the standby catches up and the primary is
// protected again by itself; promoted, the standby has every acknowledged
// transfer, those made while it was cut included.
func TestMaxAvailabilityStandbyCutAndBack(t *testing.T) {
	d := openDBs(t)
	b := newBank(t, d, 2)
	sbListen, admin := freeAddr(t), freeAddr(t)
	prim := startIn(t, t.TempDir(), "--standby-listen", sbListen, "--protection", "max-availability", "--net-timeout", "1s", "--admin", admin)
	px, err := testproxy.New(sbListen)
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	sdir := t.TempDir()
	sb := startIn(t, sdir, "--standby-of", px.Addr())
	protected := func() bool { return strings.Contains(healthMessage(prim), "(protected) standby=127.0.0.1") }
	eventually(t, 10*time.Second, "protected", protected)
	cli := newClient(t, prim.addr)
	var acked []string
	commit := func() time.Duration {
		t.Helper()
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		g, err := b.transfer(ctx, cli, 0)
		if err != nil {
			t.Fatalf("transfer: %v", err)
		}
		acked = append(acked, g)
		return time.Since(start)
	}
	for range 5 {
		commit()
	}
	cut := coordinatorWaits(t, admin, waits.StandbySyncAck)
	px.Cut()
	if d := commit(); d < 900*time.Millisecond {
		t.Errorf("the first commit after the cut took %v: it must wait the net timeout (1s) for the standby", d)
	}
	if coordinatorWaits(t, admin, waits.StandbySyncAck) == cut {
		t.Errorf("the first commit after the cut waited for the standby, but the primary counted no such wait")
	}
	// Whether a commit waited for the standby is counted by the primary (its
	// "standby sync ack" waits), not guessed from how long it took. One
	// commit first: a wait that began before the primary went on
	// unprotected is counted by then.
	commit()
	before := coordinatorWaits(t, admin, waits.StandbySyncAck)
	var slowest time.Duration
	for range 10 {
		slowest = max(slowest, commit())
	}
	if n := coordinatorWaits(t, admin, waits.StandbySyncAck) - before; n != 0 {
		t.Errorf("%d waits for the standby in 10 unprotected commits (the slowest took %v): they must not wait for it", n, slowest)
	}
	msg := healthMessage(prim)
	if !strings.Contains(msg, "UNPROTECTED") || strings.Contains(msg, "exposure=0 ") {
		t.Errorf("the primary without its standby says: %s", msg)
	}
	if !strings.Contains(prim.out.String(), "STANDBY UNPROTECTED") {
		t.Errorf("the primary's log does not say it runs unprotected:\n%s", prim.out.String())
	}
	px.Restore()
	eventually(t, 15*time.Second, "the standby caught up and protected again", func() bool {
		commit()
		return protected() && strings.Contains(healthMessage(prim), "exposure=0 ")
	})
	stopPrimaryThenStandby(t, prim, sb)
	promote(t, sdir)
	np := startIn(t, sdir)
	npAPI := np.api() // one connection for all (the API caps those held)
	for _, g := range acked {
		st, err := npAPI.Status(context.Background(), &api.StatusRequest{Gtrid: g})
		if err != nil || st.Outcome != api.Outcome_COMMITTED {
			t.Fatalf("transfer %s, acknowledged, on the promoted standby: %v, %v", g, st, err)
		}
	}
	eventually(t, 15*time.Second, "nothing left prepared", func() bool { return len(d.prepared(t)) == 0 })
	if s := b.sum(t); s != b.total {
		t.Errorf("money: %d, want %d", s, b.total)
	}
}

// A clean stop hands every record to a slow standby: with the standby
// link's round trip (3 s through a proxy) longer than the net timeout (1 s),
// the last commit goes on unprotected after 1 s; stopped right after
// (SIGTERM), the primary waits for that record's acknowledgement and sends
// its final STATE, so the standby is promoted without --accept-data-loss
// and holds the commit. (Before, the primary gave up after one net timeout
// and the promotion was refused: "the connection to the primary ended
// without its final STATE"; a loaded machine did the same with no proxy.)
func TestCleanStopWaitsForASlowStandby(t *testing.T) {
	d := openDBs(t)
	b := newBank(t, d, 2)
	sbListen := freeAddr(t)
	prim := startIn(t, t.TempDir(), "--standby-listen", sbListen, "--protection", "max-availability", "--net-timeout", "1s")
	px, err := testproxy.New(sbListen)
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	sdir := t.TempDir()
	sb := startIn(t, sdir, "--standby-of", px.Addr())
	eventually(t, 10*time.Second, "protected", func() bool {
		return strings.Contains(healthMessage(prim), "(protected) standby=127.0.0.1")
	})
	cli := newClient(t, prim.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := b.transfer(ctx, cli, 0); err != nil {
		t.Fatalf("transfer: %v", err)
	}
	px.SetLink(testproxy.Link{Delay: 1500 * time.Millisecond})
	g, err := b.transfer(ctx, cli, 0)
	if err != nil {
		t.Fatalf("transfer over the slow link: %v", err)
	}
	stopPrimaryThenStandby(t, prim, sb)
	out, perr := exec.Command(tandemBin, "promote", "--data-dir", sdir).CombinedOutput()
	if perr != nil {
		t.Fatalf("tandem promote after a clean stop of its primary: %v\n%s\nprimary:\n%s", perr, out, prim.out.String())
	}
	np := startIn(t, sdir)
	st, err := np.api().Status(context.Background(), &api.StatusRequest{Gtrid: g})
	if err != nil || st.Outcome != api.Outcome_COMMITTED {
		t.Fatalf("the last transfer %s on the promoted standby: %v, %v", g, st, err)
	}
}

// Fencing: after a failover, the old primary restarted with --peer naming the
// new one refuses to start (so it decides and settles nothing: an orphaned
// prepared branch stays as it was), with an error naming the new primary and
// its epoch; the new primary settles the branch.
func TestOldPrimaryIsFenced(t *testing.T) {
	d := openDBs(t)
	b := newBank(t, d, 1)
	d.table(t, "e2e_fence")
	listenA, listenB := freeAddr(t), freeAddr(t)
	dirA, dirB := t.TempDir(), t.TempDir()
	// max-protection: a standby of a killed max-availability primary is not
	// synchronized (the primary could have gone on without it) and is
	// promoted only with --accept-data-loss.
	a := startIn(t, dirA, "--standby-listen", listenA, "--protection", "max-protection", "--net-timeout", "1s")
	sb := startIn(t, dirB, "--standby-of", listenA)
	eventually(t, 10*time.Second, "protected", func() bool { return strings.Contains(healthMessage(a), "(protected) standby=127.0.0.1") })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g, err := b.transfer(ctx, newClient(t, a.addr), 0)
	if err != nil {
		t.Fatal(err)
	}
	a.kill()
	sb.stop()
	promote(t, dirB)
	nb := startIn(t, dirB, "--standby-listen", listenB, "--peer", listenA)
	if st, err := nb.api().Status(ctx, &api.StatusRequest{Gtrid: g}); err != nil || st.Outcome != api.Outcome_COMMITTED {
		t.Fatalf("the acknowledged transfer on the new primary: %v, %v", st, err)
	}
	orphan := prepareOwnedAndDie(t, "e2e_fence", 1, clusterOf(t, nb))
	// The old primary comes back: it must not start.
	args := append(append([]string(nil), a.args...), "--peer", listenB)
	cctx, ccancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer ccancel()
	out, err := exec.CommandContext(cctx, tandemBin, args...).CombinedOutput()
	if err == nil {
		t.Fatalf("the old primary started after a failover:\n%s", out)
	}
	for _, want := range []string{"fenced", listenB, "epoch 2", "must not decide or settle anything"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the old primary's refusal does not say %q:\n%s", want, out)
		}
	}
	if n := len(d.preparedFor(t, orphan.String())); n != 2 {
		t.Errorf("%d branches of the orphan left after the old primary's attempt, want 2 (untouched)", n)
	}
	eventually(t, 20*time.Second, "the new primary settles the orphan", func() bool { return len(d.preparedFor(t, orphan.String())) == 0 })
}
