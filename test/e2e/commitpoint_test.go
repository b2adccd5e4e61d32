package e2e

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/client"
	"github.com/tandem-tx/tandem/internal/decision"
	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/internal/testproxy"
	"github.com/tandem-tx/tandem/xid"
)

// cpClient makes the decision table on both databases (as a coordinator
// does at start) and returns a client that decides at a commit point, with no
// coordinator at all.
func cpClient(t *testing.T, d dbs, rms ...client.RM) *client.Client {
	t.Helper()
	ctx := context.Background()
	if err := decision.Ensure(ctx, d.pg, rm.Postgres); err != nil {
		t.Fatal(err)
	}
	if err := decision.Ensure(ctx, d.my, rm.MySQL); err != nil {
		t.Fatal(err)
	}
	if rms == nil {
		rms = []client.RM{{Name: "pg", Driver: "postgres", DB: d.pg}, {Name: "maria", Driver: "mysql", MultiStatements: true, DB: d.my}}
	}
	cli, err := client.New(client.Config{RMs: rms})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func writeBoth(t *testing.T, ctx context.Context, tx *client.Tx, table string, id int, pgConn, myConn *sql.Conn) {
	t.Helper()
	bp, err := tx.Branch(ctx, "pg", pgConn)
	if err != nil {
		t.Fatal(err)
	}
	bm, err := tx.Branch(ctx, "maria", myConn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bp.ExecContext(ctx, "INSERT INTO "+table+" (id, v) VALUES ($1, 'x')", id); err != nil {
		t.Fatal(err)
	}
	if _, err := bm.ExecContext(ctx, "INSERT INTO "+table+" (id, v) VALUES (?, 'x')", id); err != nil {
		t.Fatal(err)
	}
}

func decisionRow(t *testing.T, db *sql.DB, g string, mysql bool) string {
	t.Helper()
	q := "SELECT outcome FROM tandem_decision WHERE gtrid = $1"
	if mysql {
		q = "SELECT outcome FROM tandem_decision WHERE gtrid = ?"
	}
	var o string
	err := db.QueryRowContext(context.Background(), q, g).Scan(&o)
	if errors.Is(err, sql.ErrNoRows) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// Real databases, no coordinator: a transaction writing PostgreSQL and
// MariaDB is decided by MariaDB's local commit (with its decision row), in
// 5 round trips; both rows are there, nothing is left prepared, and the
// decision rows of committed transactions are deleted in batches by later
// commits.
func TestCommitPointOnRealDatabases(t *testing.T) {
	d := openDBs(t)
	d.table(t, "e2e_cp")
	cli := cpClient(t, d)
	ctx := context.Background()
	pgConn, myConn := conns(t, d)
	const n = 40
	var first string
	for i := 1; i <= n; i++ {
		tx := cli.Begin()
		writeBoth(t, ctx, tx, "e2e_cp", i, pgConn, myConn)
		res, err := tx.Commit(ctx)
		if err != nil {
			t.Fatalf("transaction %d: %v", i, err)
		}
		if res.Path != client.PathCommitPoint || res.CommitPoint != "maria" || res.CoordinatorCalls != 0 || res.Phase2Pending {
			t.Fatalf("transaction %d: %+v, want decided at maria's commit point, no coordinator call, nothing pending", i, res)
		}
		if i > 1 && res.RMRoundTrips != 5 {
			t.Errorf("transaction %d: %d round trips (%v), want 5", i, res.RMRoundTrips, res.RoundTrips)
		}
		if i == 1 {
			first = tx.GTRID().String()
			if o := decisionRow(t, d.my, first, true); o != "C" {
				t.Errorf("maria's decision row for %s = %q, want C", first, o)
			}
		}
		if d.count(t, d.pg, "e2e_cp", i) != 1 || d.count(t, d.my, "e2e_cp", i) != 1 {
			t.Fatalf("transaction %d is not on both databases", i)
		}
	}
	if left := d.prepared(t); len(left) != 0 {
		t.Errorf("left prepared: %v", left)
	}
	// No 'C' row is deleted before it is decision.ForgetMinAge old (a key
	// taken after it was forgotten would record abort for a transaction
	// committed everywhere): the first one is still there.
	if o := decisionRow(t, d.my, first, true); o != "C" {
		t.Errorf("the first transaction's decision row is %q after %d more commits, want C: no row is forgotten before decision.ForgetMinAge (%s)", o, n-1, decision.ForgetMinAge)
	}
}

// A recoverer took the key first (the transaction was slow, say): the
// commit point's INSERT meets its 'A', the commit point does not commit,
// and everything rolls back — nothing of the transaction anywhere.
func TestCommitPointAfterAbortRecordedRollsBack(t *testing.T) {
	d := openDBs(t)
	d.table(t, "e2e_cp_late")
	cli := cpClient(t, d)
	ctx := context.Background()
	pgConn, myConn := conns(t, d)
	tx := cli.Begin()
	writeBoth(t, ctx, tx, "e2e_cp_late", 1, pgConn, myConn)
	o, err := decision.Resolve(ctx, d.my, rm.MySQL, tx.GTRID(), xid.Owner{}, time.Second)
	if err != nil || o != decision.Aborted {
		t.Fatalf("Resolve before the commit = %v, %v; want Abort recorded", o, err)
	}
	_, err = tx.Commit(ctx)
	if !errors.Is(err, client.ErrAborted) {
		t.Fatalf("Commit after the key was taken = %v, want ErrAborted", err)
	}
	t.Logf("the error says: %v", err)
	if d.count(t, d.pg, "e2e_cp_late", 1) != 0 || d.count(t, d.my, "e2e_cp_late", 1) != 0 {
		t.Fatal("SPLIT or leak: a row of the aborted transaction is visible")
	}
	if left := d.preparedFor(t, tx.GTRID().String()); len(left) != 0 {
		t.Errorf("left prepared: %v", left)
	}
}

// Every writer on PostgreSQL (two RMs on the same server): the stronger is
// the commit point, its decision row and COMMIT go in one simple-protocol
// round trip, and the other prepares named with it.
func TestCommitPointOnPostgres(t *testing.T) {
	d := openDBs(t)
	d.table(t, "e2e_cp_pg")
	cli := cpClient(t, d, client.RM{Name: "pg", Driver: "postgres", DB: d.pg}, client.RM{Name: "pg2", Driver: "postgres", DB: d.pg, CommitPointStrength: 1})
	ctx := context.Background()
	c1, err := d.pg.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	c2, err := d.pg.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	tx := cli.Begin()
	b1, _ := tx.Branch(ctx, "pg", c1)
	b2, _ := tx.Branch(ctx, "pg2", c2)
	if _, err := b1.ExecContext(ctx, "INSERT INTO e2e_cp_pg (id, v) VALUES (1, 'a')"); err != nil {
		t.Fatal(err)
	}
	if _, err := b2.ExecContext(ctx, "INSERT INTO e2e_cp_pg (id, v) VALUES (2, 'b')"); err != nil {
		t.Fatal(err)
	}
	res, err := tx.Commit(ctx)
	if err != nil || res.Path != client.PathCommitPoint || res.CommitPoint != "pg2" {
		t.Fatalf("Commit = %+v, %v; want decided at pg2", res, err)
	}
	if d.count(t, d.pg, "e2e_cp_pg", 1) != 1 || d.count(t, d.pg, "e2e_cp_pg", 2) != 1 {
		t.Fatal("a row is missing")
	}
	if o := decisionRow(t, d.pg, tx.GTRID().String(), false); o != "C" {
		t.Errorf("pg2's decision row = %q, want C", o)
	}
	if left := d.prepared(t); len(left) != 0 {
		t.Errorf("left prepared: %v", left)
	}
}

// MariaDB kept from being the commit point: its XA branch is named with
// PostgreSQL at XA START, PostgreSQL's commit decides, MariaDB's prepared
// branch commits after it.
func TestCommitPointPinnedOnPostgresWithMariaDB(t *testing.T) {
	d := openDBs(t)
	d.table(t, "e2e_cp_pin")
	cli := cpClient(t, d, client.RM{Name: "pg", Driver: "postgres", DB: d.pg}, client.RM{Name: "maria", Driver: "mysql", MultiStatements: true, DB: d.my, NeverCommitPoint: true})
	ctx := context.Background()
	pgConn, myConn := conns(t, d)
	tx := cli.Begin()
	writeBoth(t, ctx, tx, "e2e_cp_pin", 1, pgConn, myConn)
	res, err := tx.Commit(ctx)
	if err != nil || res.Path != client.PathCommitPoint || res.CommitPoint != "pg" || res.RMRoundTrips != 5 {
		t.Fatalf("Commit = %+v, %v; want decided at pg in 5 round trips", res, err)
	}
	if d.count(t, d.pg, "e2e_cp_pin", 1) != 1 || d.count(t, d.my, "e2e_cp_pin", 1) != 1 {
		t.Fatal("the transaction is not on both databases")
	}
	if o := decisionRow(t, d.pg, tx.GTRID().String(), false); o != "C" {
		t.Errorf("pg's decision row = %q, want C", o)
	}
	if left := d.prepared(t); len(left) != 0 {
		t.Errorf("left prepared: %v", left)
	}
}

// The client killed at each step of the commit-point path (a transfer
// process built with failpoints, deciding at MariaDB): before and after
// its prepares, before the commit point's decision, after it. The
// coordinator's in-doubt scan settles what is left from the commit point's
// decision table: every transfer ends on both databases or on neither, the
// money adds up, nothing stays prepared; a transfer killed after the
// decision is committed on both.
func TestCommitPointClientKilledAtEachStep(t *testing.T) {
	killTransferAtEachStep(t, "e2ecp_", "rm", []string{"before-prepare", "after-prepare", "before-commit-point", "after-commit-point"}, "after-commit-point")
}

// The same on the coordinator's path, where the client settles every
// branch itself once the coordinator's COMMIT is durable (PostgreSQL's too,
// api.MetadataClientSettlesAny): killed before its Commit, the branches are
// rolled back after the orphan timeout; killed once the decision is
// durable but before it settled anything, or after, the coordinator
// commits both — PostgreSQL's after its check finds it still prepared,
// MariaDB's once the dead session let go of it.
func TestCoordinatorPathClientKilledAtEachStep(t *testing.T) {
	killTransferAtEachStep(t, "e2ecoordkill_", "coordinator", []string{"after-prepare", "before-commit-rpc", "before-client-settles", "after-commit-rpc"},
		"before-client-settles", "after-commit-rpc")
}

// killTransferAtEachStep kills a transfer at each of the failpoints fps,
// deciding at decideAt, with the transfer's tables under prefix; a transfer
// killed at one of committed must end committed on both databases. Extra
// flags of the transfer go after "--" in committed (--pg-driver pgx).
func killTransferAtEachStep(t *testing.T, prefix, decideAt string, fps []string, committed ...string) {
	var extra []string
	for i, c := range committed {
		if c == "--" {
			committed, extra = committed[:i], committed[i+1:]
			break
		}
	}
	bin := filepath.Join(t.TempDir(), "transfer")
	build := exec.Command("go", "build", "-tags", "failpoints", "-o", bin, "./examples/transfer")
	build.Dir = repoRoot
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the transfer example with failpoints: %v\n%s", err, out)
	}
	c := startCoordinator(t, coordOpts{})
	common := append([]string{"--pg", pgDSN, "--mysql", myDSN, "--coordinator", c.addr, "--prefix", prefix, "--accounts", "10"}, extra...)
	if out, err := exec.Command(bin, append(common, "--reset-only")...).CombinedOutput(); err != nil {
		t.Fatalf("transfer --reset-only: %v\n%s", err, out)
	}
	d := openDBs(t)
	acks := filepath.Join(t.TempDir(), "acked")
	want := 0
	for _, fp := range fps {
		cmd := exec.Command(bin, append(common, "--reset=false", "--no-check", "--transfers", "1", "--workers", "1", "--decide-at", decideAt, "--acked", acks)...)
		cmd.Env = append(os.Environ(), "TANDEM_FAILPOINTS="+fp+"=kill")
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Fatalf("%s: the transfer process was not killed:\n%s", fp, out)
		}
		eventually(t, 30*time.Second, fp+": nothing left prepared", func() bool { return len(d.prepared(t)) == 0 })
		var pgN, myN int
		if err := d.pg.QueryRow("SELECT count(*) FROM " + prefix + "transfer_journal").Scan(&pgN); err != nil {
			t.Fatal(err)
		}
		if err := d.my.QueryRow("SELECT count(*) FROM " + prefix + "transfer_journal").Scan(&myN); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: transfers in the journal: postgres %d, mariadb %d", fp, pgN, myN)
		if pgN != myN {
			t.Fatalf("%s: SPLIT: %d transfers on PostgreSQL, %d on MariaDB", fp, pgN, myN)
		}
		if slices.Contains(committed, fp) {
			want++
		}
		if pgN != want {
			t.Errorf("%s: %d transfers in the journals, want %d: each killed after a durable COMMIT committed (1 row each), the others rolled back", fp, pgN, want)
		}
	}
	out, err := exec.Command(bin, append(common, "--reset=false", "--check-only", "--acked", acks)...).CombinedOutput()
	if err != nil {
		t.Fatalf("transfer --check-only: %v\n%s", err, out)
	}
}

// The network to the commit point is cut during its commit (a proxy
// between the client and MariaDB, with 200 ms of delay each way so that
// the cut lands while the decision is on the way): the SDK takes the
// decision key through its own pool (client.RM.DB, not through the proxy)
// and learns the outcome — committed or aborted, never unknown — and the
// transaction is on both databases or neither, nothing left prepared.
func TestCommitPointNetworkCutMidCommit(t *testing.T) {
	d := openDBs(t)
	d.table(t, "e2e_cp_cut")
	myHost := regexp.MustCompile(`tcp\(([^)]*)\)`).FindStringSubmatch(myDSN)
	if myHost == nil {
		t.Fatalf("no tcp(host:port) in the MariaDB DSN")
	}
	px, err := testproxy.New(myHost[1])
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	viaProxy, err := sql.Open("mysql", strings.Replace(myDSN, myHost[0], "tcp("+px.Addr()+")", 1))
	if err != nil {
		t.Fatal(err)
	}
	defer viaProxy.Close()
	cli := cpClient(t, d)
	ctx := context.Background()
	for i := 1; i <= 3; i++ {
		px.Restore()
		px.SetLink(testproxy.Link{})
		pgConn, err := d.pg.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		myConn, err := viaProxy.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		tx := cli.Begin()
		writeBoth(t, ctx, tx, "e2e_cp_cut", i, pgConn, myConn)
		px.SetLink(testproxy.Link{Delay: 200 * time.Millisecond})
		done := make(chan error, 1)
		go func() { _, err := tx.Commit(ctx); done <- err }()
		g := tx.GTRID().String()
		eventually(t, 10*time.Second, "the PostgreSQL branch prepared", func() bool { return len(d.preparedFor(t, g)) == 1 })
		time.Sleep(time.Duration(i*60) * time.Millisecond) // the decision's bytes on the way, or delivered
		px.Cut()
		err = <-done
		pgN, myN := d.count(t, d.pg, "e2e_cp_cut", i), d.count(t, d.my, "e2e_cp_cut", i)
		t.Logf("cut %d: Commit = %v; rows: postgres %d, mariadb %d", i, err, pgN, myN)
		switch {
		case errors.Is(err, client.ErrOutcomeUnknown):
			t.Errorf("cut %d: outcome unknown although the SDK could take the decision key: %v", i, err)
		case err == nil && (pgN != 1 || myN != 1):
			t.Errorf("cut %d: committed, but rows postgres %d, mariadb %d", i, pgN, myN)
		case err != nil && (pgN != 0 || myN != 0):
			t.Errorf("cut %d: %v, but rows postgres %d, mariadb %d", i, err, pgN, myN)
		}
		if left := d.preparedFor(t, g); len(left) != 0 {
			t.Errorf("cut %d: left prepared: %v", i, left)
		}
		pgConn.Close()
		myConn.Close()
	}
}

// Three writers (two PostgreSQL RMs and MariaDB): MariaDB decides, both
// PostgreSQL branches prepare named with it, all three commit.
func TestCommitPointWithThreeBranches(t *testing.T) {
	d := openDBs(t)
	d.table(t, "e2e_cp3")
	cli := cpClient(t, d, client.RM{Name: "pg", Driver: "postgres", DB: d.pg}, client.RM{Name: "pg2", Driver: "postgres", DB: d.pg},
		client.RM{Name: "maria", Driver: "mysql", MultiStatements: true, DB: d.my})
	ctx := context.Background()
	pgConn, myConn := conns(t, d)
	pg2Conn, err := d.pg.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer pg2Conn.Close()
	tx := cli.Begin()
	writeBoth(t, ctx, tx, "e2e_cp3", 1, pgConn, myConn)
	b2, _ := tx.Branch(ctx, "pg2", pg2Conn)
	if _, err := b2.ExecContext(ctx, "INSERT INTO e2e_cp3 (id, v) VALUES (2, 'y')"); err != nil {
		t.Fatal(err)
	}
	res, err := tx.Commit(ctx)
	if err != nil || res.Path != client.PathCommitPoint || res.CommitPoint != "maria" || res.CoordinatorCalls != 0 {
		t.Fatalf("Commit = %+v, %v; want decided at maria with no coordinator call", res, err)
	}
	if d.count(t, d.pg, "e2e_cp3", 1) != 1 || d.count(t, d.pg, "e2e_cp3", 2) != 1 || d.count(t, d.my, "e2e_cp3", 1) != 1 {
		t.Fatal("a row is missing")
	}
	if left := d.preparedFor(t, tx.GTRID().String()); len(left) != 0 {
		t.Errorf("left prepared: %v", left)
	}
}

// A MariaDB commit point is a plain transaction, which the server lets DDL
// commit implicitly (an XA branch refuses it): the SDK refuses such a
// statement on it, and the transaction rolls back whole.
func TestCommitPointRefusesImplicitCommits(t *testing.T) {
	d := openDBs(t)
	d.table(t, "e2e_cp_ddl")
	cli := cpClient(t, d)
	ctx := context.Background()
	pgConn, myConn := conns(t, d)
	tx := cli.Begin()
	writeBoth(t, ctx, tx, "e2e_cp_ddl", 1, pgConn, myConn)
	bm, _ := tx.Branch(ctx, "maria", myConn)
	_, err := bm.ExecContext(ctx, "CREATE TABLE e2e_cp_ddl_x (a int)")
	if err == nil || !strings.Contains(err.Error(), "implicit commit") {
		t.Fatalf("DDL on the commit point = %v, want refused as an implicit commit", err)
	}
	if _, err := tx.Commit(ctx); !errors.Is(err, client.ErrAborted) {
		t.Fatalf("Commit after the refused statement = %v, want ErrAborted", err)
	}
	if d.count(t, d.pg, "e2e_cp_ddl", 1) != 0 || d.count(t, d.my, "e2e_cp_ddl", 1) != 0 {
		t.Fatal("a row of the aborted transaction is visible")
	}
}

// MariaDB's decision table references its own id (a foreign key), which a
// session can turn off (foreign_key_checks = 0): a commit point on such a
// session is refused by the database, not decided unchecked, and the
// transaction rolls back whole. The next one, on a session with the checks
// on, commits.
func TestCommitPointRefusesASessionWithoutForeignKeyChecks(t *testing.T) {
	d := openDBs(t)
	d.table(t, "e2e_cp_nock")
	if err := decision.AddIDCheck(context.Background(), d.my, rm.MySQL); err != nil {
		t.Fatal(err)
	}
	cli := cpClient(t, d)
	ctx := context.Background()
	pgConn, myConn := conns(t, d)
	tx := cli.Begin()
	writeBoth(t, ctx, tx, "e2e_cp_nock", 1, pgConn, myConn)
	bm, _ := tx.Branch(ctx, "maria", myConn)
	if _, err := bm.ExecContext(ctx, "SET SESSION foreign_key_checks = 0"); err != nil {
		t.Fatal(err)
	}
	_, err := tx.Commit(ctx)
	if !errors.Is(err, client.ErrAborted) || !strings.Contains(err.Error(), "foreign_key_checks") {
		t.Fatalf("Commit on a session without foreign-key checks = %v, want ErrAborted naming foreign_key_checks", err)
	}
	if d.count(t, d.pg, "e2e_cp_nock", 1) != 0 || d.count(t, d.my, "e2e_cp_nock", 1) != 0 {
		t.Fatal("a row of the refused transaction is visible")
	}
	if left := d.preparedFor(t, tx.GTRID().String()); len(left) != 0 {
		t.Errorf("left prepared: %v", left)
	}
	if _, err := myConn.ExecContext(ctx, "SET SESSION foreign_key_checks = 1"); err != nil {
		t.Fatal(err)
	}
	tx = cli.Begin()
	writeBoth(t, ctx, tx, "e2e_cp_nock", 2, pgConn, myConn)
	if res, err := tx.Commit(ctx); err != nil || res.Path != client.PathCommitPoint || res.CommitPoint != "maria" {
		t.Fatalf("Commit with the checks on = %+v, %v; want decided at maria", res, err)
	}
	if d.count(t, d.pg, "e2e_cp_nock", 2) != 1 || d.count(t, d.my, "e2e_cp_nock", 2) != 1 {
		t.Fatal("a row of the committed transaction is missing")
	}
}

// MariaDB runs the content of an executable comment ("/*!50000 … */"): DDL
// hidden in one, after an INSERT in the same multi-statement query, would
// commit the branch's writes; the SDK refuses the query whole, nothing of
// it runs, and the transaction rolls back whole.
func TestCommitPointRefusesExecutableComments(t *testing.T) {
	d := openDBs(t)
	d.table(t, "e2e_cp_exec")
	ctx := context.Background()
	dropX := func() {
		if _, err := d.my.ExecContext(ctx, "DROP TABLE IF EXISTS e2e_cp_exec_x"); err != nil {
			t.Fatal(err)
		}
	}
	dropX()
	t.Cleanup(dropX)
	cli := cpClient(t, d)
	pgConn, myConn := conns(t, d)
	tx := cli.Begin()
	writeBoth(t, ctx, tx, "e2e_cp_exec", 1, pgConn, myConn)
	bm, _ := tx.Branch(ctx, "maria", myConn)
	_, err := bm.ExecContext(ctx, "INSERT INTO e2e_cp_exec (id, v) VALUES (2, 'y'); /*!50000 CREATE TABLE e2e_cp_exec_x (a int) */")
	if err == nil || !strings.Contains(err.Error(), "implicit commit") {
		t.Fatalf("DDL in an executable comment on the commit point = %v, want refused as an implicit commit", err)
	}
	if _, err := tx.Commit(ctx); !errors.Is(err, client.ErrAborted) {
		t.Fatalf("Commit after the refused statement = %v, want ErrAborted", err)
	}
	for _, id := range []int{1, 2} {
		if d.count(t, d.pg, "e2e_cp_exec", id) != 0 || d.count(t, d.my, "e2e_cp_exec", id) != 0 {
			t.Fatalf("row %d of the aborted transaction is visible", id)
		}
	}
	var n int
	if err := d.my.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = 'e2e_cp_exec_x'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("e2e_cp_exec_x: %d tables, %v; want none (the comment's DDL ran)", n, err)
	}
}

// client.RM.DB reaching another decision table than the application's
// connections (another schema here) would take the key in the wrong table:
// the RM does not qualify as a commit point.
func TestCommitPointRefusesAPoolOnAnotherTable(t *testing.T) {
	d := openDBs(t)
	ctx := context.Background()
	if _, err := d.pg.ExecContext(ctx, "CREATE SCHEMA IF NOT EXISTS e2e_other"); err != nil {
		t.Fatal(err)
	}
	other, err := sql.Open("pgx", pgDSN+"&search_path=e2e_other")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	d.table(t, "e2e_cp_other")
	cli := cpClient(t, d, client.RM{Name: "pg", Driver: "postgres", DB: other}, client.RM{Name: "pg2", Driver: "postgres", DB: d.pg})
	c1, _ := d.pg.Conn(ctx)
	defer c1.Close()
	c2, _ := d.pg.Conn(ctx)
	defer c2.Close()
	tx := cli.Begin()
	b1, _ := tx.Branch(ctx, "pg", c1)
	b2, _ := tx.Branch(ctx, "pg2", c2)
	if _, err := b1.ExecContext(ctx, "INSERT INTO e2e_cp_other (id, v) VALUES (1, 'a')"); err != nil {
		t.Fatal(err)
	}
	if _, err := b2.ExecContext(ctx, "INSERT INTO e2e_cp_other (id, v) VALUES (2, 'b')"); err != nil {
		t.Fatal(err)
	}
	res, err := tx.Commit(ctx)
	if err != nil || res.CommitPoint != "pg2" {
		t.Fatalf("Commit = %+v, %v; want decided at pg2 (pg's pool reaches another table)", res, err)
	}
	if _, err := other.ExecContext(ctx, "DROP SCHEMA e2e_other CASCADE"); err != nil {
		t.Fatal(err)
	}
}

// Someone else wrote COMMIT into the decision table for a gtrid whose commit
// point has not committed (a hostile or careless user of the database): the
// commit point's insert meets it, its transaction does not commit, and the
// SDK rolls everything back and raises an integrity alarm instead of taking
// the row for a recoverer's abort silently. Nothing of the transaction is
// committed anywhere.
func TestCommitPointForeignCommitRowIsAnAlarm(t *testing.T) {
	d := openDBs(t)
	d.table(t, "e2e_cp_foreign")
	cli := cpClient(t, d)
	ctx := context.Background()
	pgConn, myConn := conns(t, d)
	tx := cli.Begin()
	writeBoth(t, ctx, tx, "e2e_cp_foreign", 1, pgConn, myConn)
	if _, err := d.my.ExecContext(ctx, "INSERT INTO tandem_decision (gtrid, outcome, began_at) VALUES (?, 'C', UTC_TIMESTAMP(6))", tx.GTRID().String()); err != nil {
		t.Fatal(err)
	}
	_, err := tx.Commit(ctx)
	if !errors.Is(err, client.ErrAborted) || !strings.Contains(err.Error(), "INTEGRITY") {
		t.Fatalf("Commit over a foreign COMMIT row = %v, want ErrAborted with an integrity alarm", err)
	}
	if d.count(t, d.pg, "e2e_cp_foreign", 1) != 0 || d.count(t, d.my, "e2e_cp_foreign", 1) != 0 {
		t.Fatal("a row of the aborted transaction is visible")
	}
	if left := d.preparedFor(t, tx.GTRID().String()); len(left) != 0 {
		t.Errorf("left prepared: %v", left)
	}
}
