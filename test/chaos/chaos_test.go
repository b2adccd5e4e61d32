//go:build chaos

// Package chaos drives the transfer demo against real PostgreSQL and MariaDB
// while it kills the coordinator (at random failpoints and with SIGKILL at
// random times), kills client processes mid-transaction, SIGKILLs and
// restarts the databases, and cuts the network between the coordinator and
// one database. After every round it lets recovery settle and checks that
// the money adds up, that every transfer a client saw as committed is on both
// sides, that no prepared branch is left, and that the coordinator restarted
// by itself.
//
// Run: scripts/chaos   (or: go test -tags chaos -run Chaos -v ./test/chaos/)
// Knobs: CHAOS_ROUNDS (default 3), CHAOS_ROUND (default 8s), CHAOS_CLIENTS (3),
// and events per round: CHAOS_COORD_KILLS (2), CHAOS_CLIENT_KILLS (1),
// CHAOS_DB_RESTARTS (1), CHAOS_CUTS (1), CHAOS_ROGUES (1): an independent
// coordinator with an empty data directory (a second deployment, a pod on an
// ephemeral volume) started over the same databases with a short orphan
// timeout and SIGKILLed a few seconds later, CHAOS_CP_KILLS (1): the commit
// point's database (MariaDB) SIGKILLed while clients decide there.
// CHAOS_HOSTILE (default 0.02, 0 for none): the fraction of transfers that
// send a statement ending the transaction on MariaDB (transfer --hostile),
// ignore its error and commit anyway; a client that had one acknowledged
// reports a VIOLATION, counted with the checker's.
package chaos

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/tandem-tx/tandem/internal/testproxy"
	"github.com/tandem-tx/tandem/xid"
)

// Failpoints a coordinator may be started with (each kills it at first hit).
var failpoints = []string{
	"before-commit-record", "after-commit-record", "before-phase2", "before-phase2-call", "after-phase2-call", "after-phase2", "before-end", "after-end",
	"wal-before-write", "wal-after-write", "wal-rotate-before-rename", "wal-rotate-after-rename",
	"checkpoint-after-carry", "checkpoint-before-release", "checkpoint-after-release",
}

// Client-side failpoints (the SDK in the transfer process): a client started
// with one dies there at its first transaction that reaches it.
// The client's failpoints where the coordinator decides, and where a
// commit point does (mixed: each client process picks one way at random).
var (
	clientFailpoints   = []string{"before-prepare", "after-prepare", "before-commit-rpc", "after-commit-rpc"}
	commitPointKillsAt = []string{"before-prepare", "after-prepare", "before-commit-point", "after-commit-point"}
)

type counters struct {
	coordFailpoint, coordSigkill, clientKills, clientFailpoint, pgRestarts, myRestarts, proxyCuts atomic.Int64
	commitPointClients, rogueCoords, cpKills, hostileViolations                                   atomic.Int64
}

type harness struct {
	t                *testing.T
	root, bin, trans string
	pgDSN, myDSN     string
	coordAddr, dir   string
	acks             string
	pgProxy, myProxy *testproxy.Proxy
	rngMu            sync.Mutex
	rng              *rand.Rand
	mu               sync.Mutex
	coord            *exec.Cmd
	coordDone        chan struct{}
	calm             atomic.Bool
	stopSupervisor   chan struct{}
	supervisorDone   chan struct{}
	kills            counters
	restarts         atomic.Int64
	log              bytes.Buffer
}

// intn draws from the shared generator (events run concurrently).
func (h *harness) intn(n int) int {
	h.rngMu.Lock()
	defer h.rngMu.Unlock()
	return h.rng.IntN(n)
}

func env(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func TestChaos(t *testing.T) {
	h := setup(t)
	rounds := env("CHAOS_ROUNDS", 3)
	clients := env("CHAOS_CLIENTS", 3)
	roundDur := 8 * time.Second
	if d, err := time.ParseDuration(os.Getenv("CHAOS_ROUND")); err == nil {
		roundDur = d
	}
	h.startSupervisor()
	defer h.stopAll()
	var violations, dangling int
	var longestSettle time.Duration
	start := time.Now()
	for r := 1; r <= rounds; r++ {
		h.calm.Store(false)
		h.round(r, clients, roundDur)
		settle, left, viol, out := h.settleAndCheck()
		longestSettle = max(longestSettle, settle)
		dangling += left
		violations += viol + int(h.kills.hostileViolations.Swap(0))
		acked := countLines(h.acks)
		t.Logf("round %d/%d: settled in %s, acknowledged so far %d, dangling %d, violations %d", r, rounds, settle.Round(time.Millisecond), acked, left, viol)
		if viol > 0 || left > 0 {
			t.Logf("check output:\n%s", out)
			break
		}
	}
	k := &h.kills
	summary := fmt.Sprintf(`chaos summary (%s):
  rounds %d, round length %s, clients %d
  coordinator kills: %d at failpoints, %d by SIGKILL at random times (restarts without a manual step: %d)
  client processes: %d deciding at a commit point (MariaDB), the others at the coordinator
  client processes killed mid-run: %d by SIGKILL, %d at client failpoints (before/after prepare, before/after the Commit RPC or the commit point)
  database restarts (SIGKILL + start): postgres %d, mariadb %d
  network cuts coordinator<->database: %d
  independent coordinators with an empty data directory started and killed over the same databases: %d
  commit point's database (MariaDB) SIGKILLed while clients decide there: %d
  transfers acknowledged as committed: %d
  violations: %d
  dangling prepared branches: %d
  longest time to settle: %s`,
		time.Since(start).Round(time.Second), rounds, roundDur, clients,
		k.coordFailpoint.Load(), k.coordSigkill.Load(), h.restarts.Load(), k.commitPointClients.Load(), k.clientKills.Load(), k.clientFailpoint.Load(),
		k.pgRestarts.Load(), k.myRestarts.Load(), k.proxyCuts.Load(), k.rogueCoords.Load(), k.cpKills.Load(), countLines(h.acks), violations, dangling, longestSettle.Round(time.Millisecond))
	fmt.Println(summary)
	if violations != 0 || dangling != 0 {
		t.Fatalf("invariants broken:\n%s", summary)
	}
}

func setup(t *testing.T) *harness {
	pg, my := os.Getenv("TANDEM_PG_DSN"), os.Getenv("TANDEM_MYSQL_DSN")
	if pg == "" || my == "" {
		t.Fatal("TANDEM_PG_DSN and TANDEM_MYSQL_DSN are required: scripts/db up; eval \"$(scripts/db env)\"")
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	dir := t.TempDir()
	h := &harness{t: t, root: root, pgDSN: pg, myDSN: my, dir: dir, acks: filepath.Join(dir, "acked.txt"),
		bin: filepath.Join(dir, "tandem"), trans: filepath.Join(dir, "transfer"),
		rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))}
	for _, b := range [][]string{{"-tags", "failpoints", "-o", h.bin, "./cmd/tandem"}, {"-tags", "failpoints", "-o", h.trans, "./examples/transfer"}} {
		cmd := exec.Command("go", append([]string{"build"}, b...)...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build: %v\n%s", err, out)
		}
	}
	var err error
	if h.pgProxy, err = testproxy.New(dbAddr("TANDEM_PG_PORT", "55432")); err != nil {
		t.Fatal(err)
	}
	if h.myProxy, err = testproxy.New(dbAddr("TANDEM_MY_PORT", "53306")); err != nil {
		t.Fatal(err)
	}
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	h.coordAddr = l.Addr().String()
	l.Close()
	// Fresh accounts.
	out, err := exec.Command(h.trans, "--pg", pg, "--mysql", my, "--reset-only", "--accounts", "200", "--prefix", "chaos_", "--rm-pg", "chaos_pg", "--rm-maria", "chaos_maria").CombinedOutput()
	if err != nil {
		t.Fatalf("reset: %v\n%s", err, out)
	}
	return h
}

// startCoordinator starts one coordinator process; unless calm, with one
// random failpoint that kills it at its first hit.
func (h *harness) startCoordinator() {
	args := []string{"serve", "--listen", h.coordAddr, "--data-dir", filepath.Join(h.dir, "coord"),
		"--orphan-timeout", "2s", "--scan-interval", "500ms", "--log-level", "warn",
		"--rm", "chaos_pg=postgres:" + strings.Replace(h.pgDSN, dbAddr("TANDEM_PG_PORT", "55432"), h.pgProxy.Addr(), 1),
		"--rm", "chaos_maria=mysql:" + strings.Replace(h.myDSN, dbAddr("TANDEM_MY_PORT", "53306"), h.myProxy.Addr(), 1)}
	cmd := exec.Command(h.bin, args...)
	cmd.Env = os.Environ()
	if !h.calm.Load() && h.intn(2) == 0 {
		fp := failpoints[h.intn(len(failpoints))]
		cmd.Env = append(cmd.Env, "TANDEM_FAILPOINTS="+fp+"=kill")
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		if strings.Contains(out.String(), "failpoint ") && strings.Contains(out.String(), "SIGKILL") {
			h.kills.coordFailpoint.Add(1)
		}
		h.mu.Lock()
		h.log.WriteString(out.String())
		h.mu.Unlock()
		close(done)
	}()
	h.mu.Lock()
	h.coord, h.coordDone = cmd, done
	h.mu.Unlock()
}

// startSupervisor restarts the coordinator whenever it dies, as a service
// manager would: the only "manual step" allowed.
func (h *harness) startSupervisor() {
	h.stopSupervisor, h.supervisorDone = make(chan struct{}), make(chan struct{})
	h.startCoordinator()
	go func() {
		defer close(h.supervisorDone)
		for {
			h.mu.Lock()
			done := h.coordDone
			h.mu.Unlock()
			select {
			case <-h.stopSupervisor:
				return
			case <-done:
			}
			select {
			case <-h.stopSupervisor:
				return
			case <-time.After(time.Duration(100+h.intn(400)) * time.Millisecond):
			}
			h.restarts.Add(1)
			h.startCoordinator()
		}
	}()
}

func (h *harness) killCoordinator() {
	h.mu.Lock()
	cmd := h.coord
	h.mu.Unlock()
	if cmd != nil && cmd.Process != nil {
		_ = cmd.Process.Signal(syscall.SIGKILL)
	}
}

func (h *harness) stopAll() {
	close(h.stopSupervisor)
	<-h.supervisorDone
	h.killCoordinator()
	h.mu.Lock()
	done := h.coordDone
	h.mu.Unlock()
	<-done
	h.pgProxy.Close()
	h.myProxy.Close()
}

func (h *harness) db(args ...string) {
	out, err := exec.Command(filepath.Join(h.root, "scripts", "db"), args...).CombinedOutput()
	if err != nil {
		h.t.Logf("scripts/db %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// round runs clients for d while chaos events fire at random times.
func (h *harness) round(n, clients int, d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	var cmu sync.Mutex
	running := map[*exec.Cmd]bool{}
	var startClient func()
	startClient = func() {
		decideAt, fps := "coordinator", clientFailpoints
		if h.intn(2) == 0 {
			decideAt, fps = "auto", commitPointKillsAt
			h.kills.commitPointClients.Add(1)
		}
		cmd := exec.Command(h.trans, "--pg", h.pgDSN, "--mysql", h.myDSN, "--coordinator", h.coordAddr, "--reset=false", "--no-check",
			"--accounts", "200", "--prefix", "chaos_", "--rm-pg", "chaos_pg", "--rm-maria", "chaos_maria", "--workers", "4", "--duration", d.String(), "--acked", h.acks,
			"--decide-at", decideAt, "--hostile", hostileFraction())
		cmd.Env = os.Environ()
		withFailpoint := h.intn(3) == 0
		fp := fps[h.intn(len(fps))]
		if withFailpoint {
			cmd.Env = append(cmd.Env, "TANDEM_FAILPOINTS="+fp+"=kill")
		}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			h.t.Fatal(err)
		}
		cmu.Lock()
		running[cmd] = true
		cmu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd.Wait()
			cmu.Lock()
			delete(running, cmd)
			cmu.Unlock()
			if n := strings.Count(out.String(), "VIOLATION"); n > 0 {
				h.kills.hostileViolations.Add(int64(n))
				h.mu.Lock()
				h.log.WriteString("client: " + out.String())
				h.mu.Unlock()
			}
			if strings.Contains(out.String(), "failpoint ") {
				h.kills.clientFailpoint.Add(1)
				if ctx.Err() == nil {
					startClient() // replace the client that died at its failpoint
				}
			}
		}()
	}
	for i := 0; i < clients; i++ {
		startClient()
	}
	coordKill := func() { h.kills.coordSigkill.Add(1); h.killCoordinator() }
	clientKill := func() { // kill one client mid-transaction, start another
		cmu.Lock()
		for c := range running {
			_ = c.Process.Signal(syscall.SIGKILL)
			h.kills.clientKills.Add(1)
			break
		}
		cmu.Unlock()
		startClient()
	}
	dbRestart := func() { // restart one database
		if h.intn(2) == 0 {
			h.kills.pgRestarts.Add(1)
			h.db("kill", "pg")
			time.Sleep(time.Duration(300+h.intn(1500)) * time.Millisecond)
			h.db("up", "pg")
		} else {
			h.kills.myRestarts.Add(1)
			h.db("kill", "mysql")
			time.Sleep(time.Duration(300+h.intn(1500)) * time.Millisecond)
			h.db("up", "mysql")
		}
	}
	cut := func() { // cut the coordinator from one database for a while
		p := h.pgProxy
		if h.intn(2) == 0 {
			p = h.myProxy
		}
		h.kills.proxyCuts.Add(1)
		p.Cut()
		time.Sleep(time.Duration(500+h.intn(2500)) * time.Millisecond)
		p.Restore()
	}
	rogue := func() { // a second deployment over the same databases, for a while
		h.kills.rogueCoords.Add(1)
		h.runRogueCoordinator(time.Duration(2000+h.intn(3000)) * time.Millisecond)
	}
	cpKill := func() { // the commit point's database dies while clients decide there
		h.kills.cpKills.Add(1)
		h.db("kill", "mysql")
		time.Sleep(time.Duration(200+h.intn(800)) * time.Millisecond)
		h.db("up", "mysql")
	}
	var events []func()
	for kind, e := range map[string]func(){"CHAOS_COORD_KILLS": coordKill, "CHAOS_CLIENT_KILLS": clientKill, "CHAOS_DB_RESTARTS": dbRestart, "CHAOS_CUTS": cut,
		"CHAOS_ROGUES": rogue, "CHAOS_CP_KILLS": cpKill} {
		def := 1
		if kind == "CHAOS_COORD_KILLS" {
			def = 2
		}
		for i := 0; i < env(kind, def); i++ {
			events = append(events, e)
		}
	}
	var ev sync.WaitGroup
	for _, e := range events {
		at := time.Duration(int64(h.intn(int(d * 3 / 4))))
		ev.Add(1)
		go func() {
			defer ev.Done()
			select {
			case <-time.After(at):
				e()
			case <-ctx.Done():
			}
		}()
	}
	ev.Wait()
	<-ctx.Done()
	wg.Wait() // clients end at their --duration (+ in-flight transfers)
}

// runRogueCoordinator runs, for d, an independent coordinator with an empty
// data directory of its own over the same databases (straight, not through
// the proxies), with a short orphan timeout and a fast scan, then SIGKILLs it.
// It knows none of the other coordinator's decisions: it must settle none of
// its branches (nor any commit point's whose table it cannot verify).
func (h *harness) runRogueCoordinator(d time.Duration) {
	dir, err := os.MkdirTemp(h.dir, "rogue-")
	if err != nil {
		h.t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		h.t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(h.bin, "serve", "--listen", addr, "--data-dir", dir,
		"--orphan-timeout", "1s", "--scan-interval", "200ms", "--log-level", "warn",
		"--rm", "chaos_pg=postgres:"+h.pgDSN, "--rm", "chaos_maria=mysql:"+h.myDSN)
	cmd.Env = os.Environ()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	time.Sleep(d)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	h.mu.Lock()
	h.log.WriteString("rogue coordinator " + dir + ":\n" + out.String())
	h.mu.Unlock()
}

// settleAndCheck calms the coordinator, waits until no prepared branch is
// left, and runs the transfer checker.
func (h *harness) settleAndCheck() (settle time.Duration, dangling, violations int, out string) {
	h.db("up")
	h.pgProxy.Restore()
	h.myProxy.Restore()
	h.calm.Store(true)
	h.killCoordinator() // restarted calm by the supervisor
	start := time.Now()
	deadline := start.Add(90 * time.Second)
	for {
		n, err := preparedCount(h.pgDSN, h.myDSN)
		if err == nil && n == 0 {
			break
		}
		if time.Now().After(deadline) {
			dangling = n
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	settle = time.Since(start)
	b, err := exec.Command(h.trans, "--pg", h.pgDSN, "--mysql", h.myDSN, "--reset=false", "--check-only", "--accounts", "200", "--acked", h.acks, "--prefix", "chaos_", "--rm-pg", "chaos_pg", "--rm-maria", "chaos_maria").CombinedOutput()
	out = string(b)
	violations = strings.Count(out, "VIOLATION")
	if err != nil && violations == 0 {
		violations = 1
	}
	return settle, dangling, violations, out
}

func preparedCount(pgDSN, myDSN string) (int, error) {
	pg, err := sql.Open("pgx", pgDSN)
	if err != nil {
		return 0, err
	}
	defer pg.Close()
	my, err := sql.Open("mysql", myDSN)
	if err != nil {
		return 0, err
	}
	defer my.Close()
	var n int
	// Only this run's branches: their RM is the chaos RM's name, whatever
	// the name's kind (owned or legacy, with a commit point or not).
	gids, err := pg.Query("SELECT gid FROM pg_prepared_xacts")
	if err != nil {
		return 0, err
	}
	defer gids.Close()
	for gids.Next() {
		var gid string
		if err := gids.Scan(&gid); err != nil {
			return 0, err
		}
		if b, ok := xid.ParsePostgresGID(gid); ok && b.RM == "chaos_pg" {
			n++
		}
	}
	if err := gids.Err(); err != nil {
		return 0, err
	}
	rows, err := my.Query("XA RECOVER")
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	for rows.Next() {
		var f int64
		var a, b int
		var d []byte
		if err := rows.Scan(&f, &a, &b, &d); err != nil {
			return 0, err
		}
		if br, ok := xid.ParseMySQLXID(f, a, b, d); ok && br.RM == "chaos_maria" {
			n++
		}
	}
	return n, rows.Err()
}

// dbAddr is the address of a database started by scripts/db: its port from
// the same variable scripts/db reads (a chaos run on a pair of servers of its
// own, TANDEM_DB_STATE_DIR and the ports, beside the usual ones), or def.
func dbAddr(portVar, def string) string {
	if p := os.Getenv(portVar); p != "" {
		return "127.0.0.1:" + p
	}
	return "127.0.0.1:" + def
}

// hostileFraction is CHAOS_HOSTILE, or 0.02.
func hostileFraction() string {
	if v := os.Getenv("CHAOS_HOSTILE"); v != "" {
		return v
	}
	return "0.02"
}

func countLines(path string) int {
	b, _ := os.ReadFile(path)
	return bytes.Count(b, []byte("\n"))
}
