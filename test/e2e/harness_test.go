// Package e2e tests Tandem end to end against real PostgreSQL and MariaDB
// servers (started by scripts/db) and a real coordinator process built from
// cmd/tandem with failpoints compiled in (and cmd/tandem-bench beside it,
// which the bench tests run through `tandem bench`).
//
// Run: eval "$(scripts/db env)" && go test ./test/e2e/
// Without TANDEM_PG_DSN / TANDEM_MYSQL_DSN the tests skip, unless
// TANDEM_E2E_REQUIRED=1 (as in scripts/test and CI), where they fail.
package e2e

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tandem-tx/tandem/api"
	"github.com/tandem-tx/tandem/client"
	"github.com/tandem-tx/tandem/internal/testport"
	"github.com/tandem-tx/tandem/xid"
)

var (
	tandemBin string // built once by TestMain
	pgDSN     = os.Getenv("TANDEM_PG_DSN")
	myDSN     = os.Getenv("TANDEM_MYSQL_DSN")
	repoRoot  string
)

func TestMain(m *testing.M) {
	_, file, _, _ := runtime.Caller(0)
	repoRoot = filepath.Join(filepath.Dir(file), "..", "..")
	if pgDSN == "" || myDSN == "" {
		if os.Getenv("TANDEM_E2E_REQUIRED") == "1" {
			fmt.Fprintln(os.Stderr, "e2e: TANDEM_PG_DSN and TANDEM_MYSQL_DSN are required: run scripts/db up and eval \"$(scripts/db env)\"")
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, "e2e: skipping: TANDEM_PG_DSN / TANDEM_MYSQL_DSN not set (scripts/db up; eval \"$(scripts/db env)\")")
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "tandem-e2e-bin")
	if err != nil {
		panic(err)
	}
	tandemBin = filepath.Join(dir, "tandem")
	// tandem-bench goes next to tandem, where `tandem bench` finds it.
	for _, prog := range []string{"tandem", "tandem-bench"} {
		build := exec.Command("go", "build", "-tags", "failpoints", "-o", filepath.Join(dir, prog), "./cmd/"+prog)
		build.Dir = repoRoot
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: building %s: %v\n", prog, err)
			os.Exit(1)
		}
	}
	// One admin token file for every coordinator the tests start and every
	// tandem command they run, as for a cluster whose coordinators share one
	// (--admin-token-file); TestRoleChangesNeedTheAdminToken uses each data
	// directory's own instead.
	os.Setenv("TANDEM_ADMIN_TOKEN_FILE", filepath.Join(dir, "admin.token"))
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// coordinator is a real `tandem serve` process.
type coordinator struct {
	t       *testing.T
	addr    string
	dataDir string
	args    []string
	env     []string
	cmd     *exec.Cmd
	out     *syncBuffer
	exited  chan struct{}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type coordOpts struct {
	failpoints string   // TANDEM_FAILPOINTS
	extra      []string // more flags
	rms        []string // --rm values; default pg and maria
	env        []string // more environment variables, NAME=VALUE
}

// freeAddr is a loopback address for a process the test starts
// (testport: outside the ephemeral range that outgoing connections use).
func freeAddr(t *testing.T) string { return testport.Addr(t) }

// startCoordinator starts `tandem serve` on a fresh port and data directory
// and waits until it answers Health.
func startCoordinator(t *testing.T, o coordOpts) *coordinator {
	t.Helper()
	c := &coordinator{t: t, addr: freeAddr(t), dataDir: t.TempDir()}
	rms := o.rms
	if rms == nil {
		// Expanded by tandem from its environment (inherited): the
		// passwords stay off the command line, as they should in production.
		rms = []string{"pg=postgres:${TANDEM_PG_DSN}", "maria=mysql:${TANDEM_MYSQL_DSN}"}
	}
	c.args = []string{"serve", "--listen", c.addr, "--data-dir", c.dataDir, "--scan-interval", "200ms", "--orphan-timeout", "2s"}
	for _, r := range rms {
		c.args = append(c.args, "--rm", r)
	}
	c.args = append(c.args, o.extra...)
	if o.failpoints != "" {
		c.env = []string{"TANDEM_FAILPOINTS=" + o.failpoints}
	}
	c.env = append(c.env, o.env...)
	c.start()
	t.Cleanup(c.stop)
	return c
}

func (c *coordinator) start() {
	c.t.Helper()
	c.launch()
	c.waitHealthy()
}

// launch starts the process without waiting for Health (which a
// coordinator that requires a token or a client certificate refuses).
func (c *coordinator) launch() {
	c.t.Helper()
	c.out = &syncBuffer{}
	c.cmd = exec.Command(tandemBin, c.args...)
	c.cmd.Env = append(os.Environ(), c.env...)
	c.cmd.Stdout, c.cmd.Stderr = c.out, c.out
	if err := c.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.exited = make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(c.exited) }()
}

func (c *coordinator) waitHealthy() {
	c.t.Helper()
	cli := c.api()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		_, err := cli.Health(ctx, &api.HealthRequest{})
		cancel()
		if err == nil {
			return
		}
		select {
		case <-c.exited:
			c.t.Fatalf("coordinator exited at start:\n%s", c.out.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	c.t.Fatalf("coordinator did not become healthy:\n%s", c.out.String())
}

// kill sends SIGKILL and waits for the process to be gone.
func (c *coordinator) kill() {
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.exited
}

// restart starts the process again on the same address and data directory.
func (c *coordinator) restart(env ...string) {
	c.t.Helper()
	c.env = env
	c.start()
}

func (c *coordinator) stop() {
	select {
	case <-c.exited:
		return
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(15 * time.Second):
		c.kill()
	}
}

// api is a client on a new connection, closed when the test ends. The API
// caps the connections it holds (4,096): a loop asks through one client,
// not a client each.
func (c *coordinator) api() api.CoordinatorClient {
	conn := c.dial()
	c.t.Cleanup(func() { conn.Close() })
	return api.NewCoordinatorClient(conn)
}

// dial is a new connection to the API, the caller's to close.
func (c *coordinator) dial() *grpc.ClientConn {
	conn, err := grpc.NewClient(c.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		c.t.Fatal(err)
	}
	return conn
}

func (c *coordinator) client(t *testing.T) *client.Client {
	return newClient(t, c.addr)
}

func newClient(t *testing.T, addr string) *client.Client {
	t.Helper()
	cli, err := client.New(client.Config{
		Coordinator: addr,
		RMs:         []client.RM{{Name: "pg", Driver: "postgres"}, {Name: "maria", Driver: "mysql", MultiStatements: true}},
		// These tests are of the coordinator's decisions; commitpoint_test.go
		// has the commit point's.
		Defaults: client.CommitOptions{DecideAt: client.DecideAtCoordinator},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// dbs holds pools to both databases.
type dbs struct {
	pg, my *sql.DB
}

func openDBs(t *testing.T) dbs {
	t.Helper()
	pg, err := sql.Open("pgx", pgDSN)
	if err != nil {
		t.Fatal(err)
	}
	my, err := sql.Open("mysql", myDSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Close(); my.Close() })
	return dbs{pg: pg, my: my}
}

// table creates a fresh table `name (id int primary key, v text)` on both databases.
func (d dbs) table(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	for _, db := range []*sql.DB{d.pg, d.my} {
		if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+name); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, "CREATE TABLE "+name+" (id int PRIMARY KEY, v varchar(64))"); err != nil {
			t.Fatal(err)
		}
	}
}

func (d dbs) count(t *testing.T, db *sql.DB, table string, id int) int {
	t.Helper()
	var n int
	q := "SELECT count(*) FROM " + table + " WHERE id = "
	if db == d.pg {
		q += "$1"
	} else {
		q += "?"
	}
	if err := db.QueryRowContext(context.Background(), q, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// prepared lists Tandem-format prepared branches left on both databases
// (named with a commit point or not).
func (d dbs) prepared(t *testing.T) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	rows, err := d.pg.QueryContext(ctx, "SELECT gid FROM pg_prepared_xacts WHERE "+xid.PostgresScanPredicate)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var g string
		_ = rows.Scan(&g)
		out = append(out, "pg "+g)
	}
	rows.Close()
	rows, err = d.my.QueryContext(ctx, "XA RECOVER")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var f int64
		var a, b int
		var data []byte
		_ = rows.Scan(&f, &a, &b, &data)
		if isTandemFormat(f) {
			out = append(out, "maria "+string(data))
		}
	}
	rows.Close()
	return out
}

// rollbackLeftovers rolls back every Tandem branch still prepared (a
// previous test's, whose coordinators are gone) and says so: it would hold
// row locks on the tables the next test drops.
func (d dbs) rollbackLeftovers(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	var gids []string
	rows, err := d.pg.QueryContext(ctx, "SELECT gid FROM pg_prepared_xacts WHERE "+xid.PostgresScanPredicate)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var g string
		_ = rows.Scan(&g)
		gids = append(gids, g)
	}
	rows.Close()
	for _, g := range gids {
		t.Logf("rolling back a PostgreSQL branch an earlier test left prepared: %s", g)
		if _, err := d.pg.ExecContext(ctx, "ROLLBACK PREPARED '"+g+"'"); err != nil {
			t.Logf("ROLLBACK PREPARED %s: %v", g, err)
		}
	}
	rows, err = d.my.QueryContext(ctx, "XA RECOVER")
	if err != nil {
		t.Fatal(err)
	}
	var xids []string
	for rows.Next() {
		var f int64
		var a, b int
		var data []byte
		_ = rows.Scan(&f, &a, &b, &data)
		if isTandemFormat(f) && a+b <= len(data) {
			xids = append(xids, fmt.Sprintf("'%s','%s',%d", data[:a], data[a:a+b], f))
		}
	}
	rows.Close()
	for _, x := range xids {
		t.Logf("rolling back a MariaDB branch an earlier test left prepared: %s", x)
		if _, err := d.my.ExecContext(ctx, "XA ROLLBACK "+x); err != nil {
			t.Logf("XA ROLLBACK %s: %v", x, err)
		}
	}
}

// isTandemFormat reports whether an XA format ID is one of Tandem's, owned
// or legacy.
func isTandemFormat(f int64) bool {
	switch f {
	case xid.FormatID, xid.CommitPointFormatID, xid.OwnedFormatID, xid.OwnedCommitPointFormatID:
		return true
	}
	return false
}

// preparedFor lists the branches of one gtrid still prepared.
func (d dbs) preparedFor(t *testing.T, gtrid string) []string {
	var out []string
	for _, p := range d.prepared(t) {
		if strings.Contains(p, gtrid) {
			out = append(out, p)
		}
	}
	return out
}

// eventually polls cond until it holds or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for: %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func conns(t *testing.T, d dbs) (*sql.Conn, *sql.Conn) {
	t.Helper()
	ctx := context.Background()
	pc, err := d.pg.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mc, err := d.my.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close(); mc.Close() })
	return pc, mc
}

// runDB runs scripts/db with args (to stop or start a database).
func runDB(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(repoRoot, "scripts", "db"), args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/db %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

var errBadConn = driver.ErrBadConn

func itoa(i int) string { return strconv.Itoa(i) }

func newGTRIDString() string { return xid.New().String() }
