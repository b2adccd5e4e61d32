package e2e

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tandem-tx/tandem/api"
	"github.com/tandem-tx/tandem/client"
)

// Branches over pgx connections (client.Tx.BranchPgx, BranchPgxPool): the
// same paths as over *sql.Conn, on the real databases.

// pgxConn opens a pgx connection to the test PostgreSQL (through addr when
// not empty: a proxy), closed at the test's end.
func pgxConn(t *testing.T, addr string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(pgDSN)
	if err != nil {
		t.Fatal(err)
	}
	if addr != "" {
		host, port, _ := net.SplitHostPort(addr)
		p, _ := strconv.Atoi(port)
		cfg.Host, cfg.Port = host, uint16(p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// Two-phase commit with a pgx branch and a MariaDB branch; a rollback; a
// second enlistment returns the same branch; a pgxpool connection commits
// one-phase and goes back to its pool clean.
func TestPgxBranchCommitAndRollback(t *testing.T) {
	c := startCoordinator(t, coordOpts{})
	d := openDBs(t)
	d.table(t, "e2e_pgx_commit")
	cli := c.client(t)
	pc := pgxConn(t, "")
	_, mc := conns(t, d)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	tx := cli.Begin()
	pb, err := tx.BranchPgx(ctx, "pg", pc)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := tx.BranchPgx(ctx, "pg", pc); again == nil || again.RM() != "pg" {
		t.Fatal("a second enlistment of the same RM on the same connection failed")
	}
	if _, err := tx.BranchPgx(ctx, "pg", pgxConn(t, "")); err == nil {
		t.Fatal("a second branch on the same RM over another connection was accepted")
	}
	if _, err := tx.BranchPgx(ctx, "maria", pc); err == nil {
		t.Fatal("BranchPgx accepted a MariaDB RM")
	}
	mb, _ := tx.Branch(ctx, "maria", mc)
	tag, err := pb.Exec(ctx, "INSERT INTO e2e_pgx_commit VALUES ($1, 'pg')", 1)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("Exec = %v, %v; want one row", tag, err)
	}
	if _, err := mb.ExecContext(ctx, "INSERT INTO e2e_pgx_commit VALUES (?, 'maria')", 1); err != nil {
		t.Fatal(err)
	}
	res, err := tx.Commit(ctx)
	if err != nil || res.Path != client.PathTwoPhase || res.CoordinatorCalls != 1 {
		t.Fatalf("Commit = %+v, %v; want two-phase, one coordinator call", res, err)
	}
	// PostgreSQL: BEGIN+INSERT (one batch), PREPARE, COMMIT PREPARED (the
	// client's, under visibility sync). MariaDB: 3.
	if res.RMRoundTrips != 6 {
		t.Errorf("RM round trips = %d (%v), want 6", res.RMRoundTrips, res.RoundTrips)
	}
	if d.count(t, d.pg, "e2e_pgx_commit", 1) != 1 || d.count(t, d.my, "e2e_pgx_commit", 1) != 1 {
		t.Fatal("the committed rows are not on both databases")
	}
	if left := d.preparedFor(t, tx.GTRID().String()); len(left) != 0 {
		t.Fatalf("prepared branches left after commit: %v", left)
	}
	if st := pc.PgConn().TxStatus(); st != 'I' {
		t.Fatalf("pgx connection after commit: transaction status %q, want idle", st)
	}

	// Rollback after both wrote.
	tx = cli.Begin()
	pb, _ = tx.BranchPgx(ctx, "pg", pc)
	mb, _ = tx.Branch(ctx, "maria", mc)
	if _, err := pb.Exec(ctx, "INSERT INTO e2e_pgx_commit VALUES ($1, 'pg')", 2); err != nil {
		t.Fatal(err)
	}
	if _, err := mb.ExecContext(ctx, "INSERT INTO e2e_pgx_commit VALUES (?, 'maria')", 2); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatalf("Rollback: %v", err)
	}
	if d.count(t, d.pg, "e2e_pgx_commit", 2) != 0 || d.count(t, d.my, "e2e_pgx_commit", 2) != 0 {
		t.Fatal("a rolled-back row is visible")
	}
	if st := pc.PgConn().TxStatus(); st != 'I' {
		t.Fatalf("pgx connection after rollback: transaction status %q, want idle", st)
	}
	if _, err := pb.Exec(ctx, "SELECT 1"); !errors.Is(err, client.ErrTxDone) {
		t.Fatalf("Exec after Rollback = %v, want ErrTxDone", err)
	}

	// A pgxpool connection: one-phase, and the pool gets it back idle.
	pool, err := pgxpool.New(ctx, pgDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	poolConn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tx = cli.Begin()
	ppb, err := tx.BranchPgxPool(ctx, "pg", poolConn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ppb.Exec(ctx, "INSERT INTO e2e_pgx_commit VALUES ($1, 'pool')", 3); err != nil {
		t.Fatal(err)
	}
	if res, err := tx.Commit(ctx); err != nil || res.Path != client.PathOnePhase || res.RMRoundTrips != 2 {
		t.Fatalf("Commit = %+v, %v; want one-phase in 2 round trips (BEGIN+INSERT, COMMIT)", res, err)
	}
	poolConn.Release()
	if d.count(t, d.pg, "e2e_pgx_commit", 3) != 1 {
		t.Fatal("the pool connection's one-phase commit is not visible")
	}
	if st := pool.Stat(); st.TotalConns() != 1 || st.IdleConns() != 1 {
		t.Fatalf("pool after commit: %d connections, %d idle; want the connection back, idle", st.TotalConns(), st.IdleConns())
	}
}

// One-phase and read-only on pgx branches make no coordinator call (the
// client's coordinator address has nothing behind it): a pgx branch that
// only read (Query, QueryRow) commits locally.
func TestPgxOnePhaseAndReadOnly(t *testing.T) {
	d := openDBs(t)
	d.table(t, "e2e_pgx_1pc")
	cli, err := client.New(client.Config{
		Coordinator: freeAddr(t),
		RMs: []client.RM{{Name: "pg", Driver: "postgres"}, {Name: "pg2", Driver: "postgres"},
			{Name: "maria", Driver: "mysql", MultiStatements: true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pc, pc2 := pgxConn(t, ""), pgxConn(t, "")
	_, mc := conns(t, d)

	// MariaDB writes, the pgx branch only reads: one-phase on MariaDB.
	tx := cli.Begin()
	pb, _ := tx.BranchPgx(ctx, "pg", pc)
	mb, _ := tx.Branch(ctx, "maria", mc)
	var n int
	if err := pb.QueryRow(ctx, "SELECT count(*) FROM e2e_pgx_1pc").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if _, err := mb.ExecContext(ctx, "INSERT INTO e2e_pgx_1pc VALUES (?, 'one')", 7); err != nil {
		t.Fatal(err)
	}
	res, err := tx.Commit(ctx)
	if err != nil || res.Path != client.PathOnePhase {
		t.Fatalf("Commit = %+v, %v; want one-phase", res, err)
	}
	if d.count(t, d.my, "e2e_pgx_1pc", 7) != 1 {
		t.Fatal("one-phase commit is not visible")
	}

	// The pgx branch writes, MariaDB untouched: one-phase on PostgreSQL.
	tx = cli.Begin()
	pb, _ = tx.BranchPgx(ctx, "pg", pc)
	if _, err := pb.Exec(ctx, "INSERT INTO e2e_pgx_1pc VALUES ($1, 'one')", 8); err != nil {
		t.Fatal(err)
	}
	if res, err := tx.Commit(ctx); err != nil || res.Path != client.PathOnePhase {
		t.Fatalf("Commit = %+v, %v; want one-phase", res, err)
	}
	if d.count(t, d.pg, "e2e_pgx_1pc", 8) != 1 {
		t.Fatal("one-phase commit on PostgreSQL is not visible")
	}

	// A write made through a query (INSERT … RETURNING) is found at commit:
	// with two pgx writers one is the commit point (the decision table
	// exists: the coordinator tests made it), none commits alone.
	tx = cli.Begin()
	b1, _ := tx.BranchPgx(ctx, "pg", pc)
	b2, _ := tx.BranchPgx(ctx, "pg2", pc2)
	var id int
	if err := b1.QueryRow(ctx, "INSERT INTO e2e_pgx_1pc VALUES (9, 'q') RETURNING id").Scan(&id); err != nil || id != 9 {
		t.Fatalf("INSERT … RETURNING = %d, %v", id, err)
	}
	if _, err := b2.Exec(ctx, "INSERT INTO e2e_pgx_1pc VALUES (10, 'q')"); err != nil {
		t.Fatal(err)
	}
	if res, err := tx.Commit(ctx); err != nil || res.Path != client.PathCommitPoint {
		t.Fatalf("Commit with two writers (one through QueryRow) = %+v, %v; want decided at a commit point", res, err)
	}
	if d.count(t, d.pg, "e2e_pgx_1pc", 9) != 1 || d.count(t, d.pg, "e2e_pgx_1pc", 10) != 1 {
		t.Fatal("a row of the committed transaction is missing")
	}

	// Two pgx branches that only read (Query, QueryRow): both commit locally.
	tx = cli.Begin()
	b1, _ = tx.BranchPgx(ctx, "pg", pc)
	b2, _ = tx.BranchPgx(ctx, "pg2", pc2)
	rows, err := b1.Query(ctx, "SELECT id FROM e2e_pgx_1pc ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	var ids []int
	for rows.Next() {
		var i int
		if err := rows.Scan(&i); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, i)
	}
	if err := rows.Err(); err != nil || len(ids) != 3 || ids[0] != 8 || ids[2] != 10 {
		t.Fatalf("Query rows = %v, %v; want [8 9 10]", ids, err)
	}
	if err := b2.QueryRow(ctx, "SELECT count(*) FROM e2e_pgx_1pc").Scan(&n); err != nil || n != 3 {
		t.Fatalf("QueryRow = %d, %v; want 3", n, err)
	}
	res, err = tx.Commit(ctx)
	if err != nil || res.Path != client.PathLocal {
		t.Fatalf("Commit = %+v, %v; want local", res, err)
	}
	// Each: BEGIN+query (one batch), the read-only check, COMMIT.
	if res.RMRoundTrips != 6 {
		t.Errorf("RM round trips = %d (%v), want 6", res.RMRoundTrips, res.RoundTrips)
	}
	if calls := cli.Stats().CoordinatorCalls; calls != 0 {
		t.Fatalf("coordinator calls = %d, want 0", calls)
	}
}

// A prepare that fails (a deferred constraint checked at PREPARE
// TRANSACTION) and a first statement that fails inside its pipelined batch
// both abort everything, leave nothing prepared, and leave the pgx
// connection usable.
func TestPgxPrepareFailure(t *testing.T) {
	c := startCoordinator(t, coordOpts{})
	d := openDBs(t)
	d.table(t, "e2e_pgx_pf")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range []string{"DROP TABLE IF EXISTS e2e_pgx_pf_child", "DROP TABLE IF EXISTS e2e_pgx_pf_parent",
		"CREATE TABLE e2e_pgx_pf_parent (id int PRIMARY KEY)",
		"CREATE TABLE e2e_pgx_pf_child (id int PRIMARY KEY, parent int REFERENCES e2e_pgx_pf_parent DEFERRABLE INITIALLY DEFERRED)"} {
		if _, err := d.pg.ExecContext(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	cli := c.client(t)
	pc := pgxConn(t, "")
	_, mc := conns(t, d)
	tx := cli.Begin()
	pb, _ := tx.BranchPgx(ctx, "pg", pc)
	mb, _ := tx.Branch(ctx, "maria", mc)
	if _, err := mb.ExecContext(ctx, "INSERT INTO e2e_pgx_pf VALUES (?, 'x')", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := pb.Exec(ctx, "INSERT INTO e2e_pgx_pf_child VALUES (1, 42)"); err != nil { // parent 42 missing: fails at PREPARE
		t.Fatal(err)
	}
	if _, err := tx.Commit(ctx); !errors.Is(err, client.ErrAborted) {
		t.Fatalf("Commit = %v, want ErrAborted", err)
	}
	if d.count(t, d.my, "e2e_pgx_pf", 1) != 0 {
		t.Fatal("the MariaDB branch committed although the PostgreSQL prepare failed")
	}
	if left := d.preparedFor(t, tx.GTRID().String()); len(left) != 0 {
		t.Fatalf("prepared branches left: %v", left)
	}
	if cli.Stats().CoordinatorCalls != 1 {
		t.Fatalf("a failed prepare made %d coordinator calls, want 1 (Health, for the cluster's identity that names the branches)", cli.Stats().CoordinatorCalls)
	}
	if st := pc.PgConn().TxStatus(); st != 'I' {
		t.Fatalf("pgx connection after the failed prepare: transaction status %q, want idle", st)
	}

	// The first statement fails inside the batch that carries BEGIN.
	tx = cli.Begin()
	pb, _ = tx.BranchPgx(ctx, "pg", pc)
	mb, _ = tx.Branch(ctx, "maria", mc)
	if _, err := mb.ExecContext(ctx, "INSERT INTO e2e_pgx_pf VALUES (?, 'x')", 2); err != nil {
		t.Fatal(err)
	}
	if _, err := pb.Exec(ctx, "INSERT INTO e2e_pgx_pf VALUES ($1, 'x'), ($1, 'dup')", 2); err == nil {
		t.Fatal("a duplicate key was accepted")
	}
	if _, err := pb.Exec(ctx, "SELECT 1"); !errors.Is(err, client.ErrBranchFailed) {
		t.Fatalf("Exec after a failed statement = %v, want ErrBranchFailed", err)
	}
	if _, err := tx.Commit(ctx); !errors.Is(err, client.ErrAborted) {
		t.Fatalf("Commit after a failed statement = %v, want ErrAborted", err)
	}
	if d.count(t, d.my, "e2e_pgx_pf", 2) != 0 || d.count(t, d.pg, "e2e_pgx_pf", 2) != 0 {
		t.Fatal("a branch of the aborted transaction committed")
	}
	if st := pc.PgConn().TxStatus(); st != 'I' {
		t.Fatalf("pgx connection after the abort: transaction status %q, want idle", st)
	}
}

// The coordinator is killed right after its COMMIT record: the pgx branch
// stays prepared until the restarted coordinator commits it. Then a
// transaction whose Commit never reached the coordinator: its prepared pgx
// branch is rolled back by the coordinator's orphan scan.
func TestPgxCoordinatorRecovery(t *testing.T) {
	c := startCoordinator(t, coordOpts{failpoints: "after-commit-record=kill"})
	d := openDBs(t)
	d.table(t, "e2e_pgx_rec")
	cli := c.client(t)
	pc := pgxConn(t, "")
	_, mc := conns(t, d)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	write := func(tx *client.Tx, id int) {
		t.Helper()
		pb, _ := tx.BranchPgx(ctx, "pg", pc)
		mb, _ := tx.Branch(ctx, "maria", mc)
		if _, err := pb.Exec(ctx, "INSERT INTO e2e_pgx_rec VALUES ($1, 'x')", id); err != nil {
			t.Fatal(err)
		}
		if _, err := mb.ExecContext(ctx, "INSERT INTO e2e_pgx_rec VALUES (?, 'x')", id); err != nil {
			t.Fatal(err)
		}
	}
	tx := cli.Begin()
	write(tx, 1)
	short, cancel1 := context.WithTimeout(ctx, 3*time.Second)
	defer cancel1()
	if _, err := tx.Commit(short); !errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("Commit with the coordinator killed = %v, want ErrOutcomeUnknown", err)
	}
	<-c.exited
	if n := len(d.preparedFor(t, tx.GTRID().String())); n != 2 {
		t.Fatalf("%d branches prepared after the crash, want 2", n)
	}
	c.restart()
	eventually(t, 15*time.Second, "both branches committed by the restarted coordinator", func() bool {
		return d.count(t, d.pg, "e2e_pgx_rec", 1) == 1 && d.count(t, d.my, "e2e_pgx_rec", 1) == 1
	})
	eventually(t, 5*time.Second, "nothing left prepared", func() bool { return len(d.preparedFor(t, tx.GTRID().String())) == 0 })

	// The Commit never reaches the coordinator (it is down): the outcome is
	// unknown, nothing is rolled back by the client, and the restarted
	// coordinator rolls the orphaned branches back.
	c.stop()
	_, mc2 := conns(t, d)
	mc = mc2
	tx = cli.Begin()
	write(tx, 2)
	short, cancel2 := context.WithTimeout(ctx, 2*time.Second)
	defer cancel2()
	if _, err := tx.Commit(short); !errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("Commit with the coordinator down = %v, want ErrOutcomeUnknown", err)
	}
	if n := len(d.preparedFor(t, tx.GTRID().String())); n != 2 {
		t.Fatalf("%d branches prepared after an unanswered Commit, want 2", n)
	}
	c.restart()
	eventually(t, 20*time.Second, "the orphaned branches rolled back", func() bool { return len(d.preparedFor(t, tx.GTRID().String())) == 0 })
	if d.count(t, d.pg, "e2e_pgx_rec", 2) != 0 || d.count(t, d.my, "e2e_pgx_rec", 2) != 0 {
		t.Fatal("an orphaned branch was committed")
	}
	st, err := c.api().Status(context.Background(), &api.StatusRequest{Gtrid: tx.GTRID().String()})
	if err != nil || st.Outcome != api.Outcome_ABORTED {
		t.Fatalf("Status = %v, %v; want ABORTED", st, err)
	}
}

// A pgx branch as the commit point (with MariaDB kept from being one), and
// two pgx branches deciding at the stronger, without client.RM.DB: the
// commit point's checks run on the pgx connections themselves.
func TestPgxCommitPoint(t *testing.T) {
	d := openDBs(t)
	d.table(t, "e2e_pgx_cp")
	cli := cpClient(t, d, client.RM{Name: "pg", Driver: "postgres", DB: d.pg}, client.RM{Name: "maria", Driver: "mysql", MultiStatements: true, DB: d.my, NeverCommitPoint: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pc := pgxConn(t, "")
	_, mc := conns(t, d)
	tx := cli.Begin()
	pb, _ := tx.BranchPgx(ctx, "pg", pc)
	mb, _ := tx.Branch(ctx, "maria", mc)
	if _, err := pb.Exec(ctx, "INSERT INTO e2e_pgx_cp VALUES (1, 'x')"); err != nil {
		t.Fatal(err)
	}
	if _, err := mb.ExecContext(ctx, "INSERT INTO e2e_pgx_cp VALUES (1, 'x')"); err != nil {
		t.Fatal(err)
	}
	res, err := tx.Commit(ctx)
	if err != nil || res.Path != client.PathCommitPoint || res.CommitPoint != "pg" || res.RMRoundTrips != 5 {
		t.Fatalf("Commit = %+v, %v; want decided at pg in 5 round trips", res, err)
	}
	if d.count(t, d.pg, "e2e_pgx_cp", 1) != 1 || d.count(t, d.my, "e2e_pgx_cp", 1) != 1 {
		t.Fatal("the transaction is not on both databases")
	}
	if o := decisionRow(t, d.pg, tx.GTRID().String(), false); o != "C" {
		t.Errorf("pg's decision row = %q, want C", o)
	}

	// MariaDB decides (auto's first choice): the pgx branch prepares named
	// with it (tandemcp:…) and commits after MariaDB's commit.
	cli3 := cpClient(t, d)
	_, mc3 := conns(t, d)
	tx = cli3.Begin()
	pb, _ = tx.BranchPgx(ctx, "pg", pc)
	mb, _ = tx.Branch(ctx, "maria", mc3)
	if _, err := pb.Exec(ctx, "INSERT INTO e2e_pgx_cp VALUES (4, 'x')"); err != nil {
		t.Fatal(err)
	}
	if _, err := mb.ExecContext(ctx, "INSERT INTO e2e_pgx_cp VALUES (4, 'x')"); err != nil {
		t.Fatal(err)
	}
	if res, err := tx.Commit(ctx); err != nil || res.Path != client.PathCommitPoint || res.CommitPoint != "maria" {
		t.Fatalf("Commit = %+v, %v; want decided at maria", res, err)
	}
	if d.count(t, d.pg, "e2e_pgx_cp", 4) != 1 || d.count(t, d.my, "e2e_pgx_cp", 4) != 1 {
		t.Fatal("the transaction decided at MariaDB is not on both databases")
	}
	if o := decisionRow(t, d.my, tx.GTRID().String(), true); o != "C" {
		t.Errorf("maria's decision row = %q, want C", o)
	}

	// No pools: the checks (durability, the table) read through pgx.
	cli2, err := client.New(client.Config{RMs: []client.RM{{Name: "pg", Driver: "postgres"}, {Name: "pg2", Driver: "postgres", CommitPointStrength: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	defer cli2.Close()
	pc2 := pgxConn(t, "")
	tx = cli2.Begin()
	b1, _ := tx.BranchPgx(ctx, "pg", pc)
	b2, _ := tx.BranchPgx(ctx, "pg2", pc2)
	if _, err := b1.Exec(ctx, "INSERT INTO e2e_pgx_cp VALUES (2, 'a')"); err != nil {
		t.Fatal(err)
	}
	if _, err := b2.Exec(ctx, "INSERT INTO e2e_pgx_cp VALUES (3, 'b')"); err != nil {
		t.Fatal(err)
	}
	res, err = tx.Commit(ctx)
	if err != nil || res.Path != client.PathCommitPoint || res.CommitPoint != "pg2" {
		t.Fatalf("Commit = %+v, %v; want decided at pg2", res, err)
	}
	if d.count(t, d.pg, "e2e_pgx_cp", 2) != 1 || d.count(t, d.pg, "e2e_pgx_cp", 3) != 1 {
		t.Fatal("a row is missing")
	}
	if left := d.prepared(t); len(left) != 0 {
		t.Errorf("left prepared: %v", left)
	}
}

// The transfer example with its PostgreSQL branches over pgx, deciding at
// MariaDB (the pgx branch prepared as tandemcp:…), killed before and after
// its prepares and before and after the decision: the coordinator settles
// each pgx branch from the decision table; the journals match.
func TestPgxTransferKilledAtEachStep(t *testing.T) {
	killTransferAtEachStep(t, "e2epgx_", "rm", []string{"before-prepare", "after-prepare", "before-commit-point", "after-commit-point"}, "after-commit-point", "--", "--pg-driver", "pgx")
}

// msgCounter is a proxy to PostgreSQL that counts the round trips clients
// start: each Sync (extended protocol) or Query (simple protocol) message a
// client sends ends a request the server answers with ReadyForQuery.
type msgCounter struct {
	addr  string
	trips atomic.Int64
}

func countingProxy(t *testing.T) *msgCounter {
	t.Helper()
	cfg, err := pgx.ParseConfig(pgDSN)
	if err != nil {
		t.Fatal(err)
	}
	target := net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	m := &msgCounter{addr: l.Addr().String()}
	go func() {
		for {
			cc, err := l.Accept()
			if err != nil {
				return
			}
			sc, err := net.Dial("tcp", target)
			if err != nil {
				cc.Close()
				continue
			}
			go func() { _, _ = io.Copy(cc, sc); cc.Close() }()
			go func() { m.forward(sc, cc); sc.Close() }()
		}
	}()
	return m
}

// forward copies a client's messages to the server, counting Sync and Query.
func (m *msgCounter) forward(dst io.Writer, src io.Reader) {
	var hdr [5]byte
	// Untyped start-up messages (an SSL or GSS request, then the start-up
	// message): a length, then the body.
	for {
		if _, err := io.ReadFull(src, hdr[:4]); err != nil {
			return
		}
		n := binary.BigEndian.Uint32(hdr[:4])
		body := make([]byte, n-4)
		if _, err := io.ReadFull(src, body); err != nil {
			return
		}
		if _, err := dst.Write(append(hdr[:4:4], body...)); err != nil {
			return
		}
		if code := binary.BigEndian.Uint32(body[:4]); code != 80877103 && code != 80877104 {
			break // the start-up message itself
		}
	}
	for {
		if _, err := io.ReadFull(src, hdr[:]); err != nil {
			return
		}
		if hdr[0] == 'S' || hdr[0] == 'Q' {
			m.trips.Add(1)
		}
		n := binary.BigEndian.Uint32(hdr[1:])
		body := make([]byte, n-4)
		if _, err := io.ReadFull(src, body); err != nil {
			return
		}
		if _, err := dst.Write(append(hdr[:5:5], body...)); err != nil {
			return
		}
	}
}

// The pipeline saves a round trip, counted on the wire: a pgx branch's
// BEGIN rides in one batch with its first statement — for Exec (one-phase:
// 2 round trips where pgx's own Begin/Exec/Commit takes 3) and for
// QueryRow (a read-only branch: 3 where the database/sql branch takes 4).
// The SDK's own count (Result.RMRoundTrips) matches the wire's.
func TestPgxPipelineRoundTrips(t *testing.T) {
	d := openDBs(t)
	d.table(t, "e2e_pgx_rt")
	cli, err := client.New(client.Config{RMs: []client.RM{{Name: "pg", Driver: "postgres", NeverCommitPoint: true}}})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	proxy := countingProxy(t)
	pc := pgxConn(t, proxy.addr)

	// measure runs fn twice (the first fills pgx's statement cache, whose
	// misses cost a round trip of their own) and returns the second's count.
	measure := func(what string, fn func(i int) int) int {
		t.Helper()
		fn(100)
		before := proxy.trips.Load()
		sdk := fn(101)
		wire := int(proxy.trips.Load() - before)
		if sdk >= 0 && sdk != wire {
			t.Errorf("%s: the SDK counted %d round trips, the wire %d", what, sdk, wire)
		}
		t.Logf("%s: %d round trips on the wire", what, wire)
		return wire
	}
	sdkExec := measure("SDK pgx branch, one-phase insert", func(i int) int {
		tx := cli.Begin()
		b, _ := tx.BranchPgx(ctx, "pg", pc)
		if _, err := b.Exec(ctx, "INSERT INTO e2e_pgx_rt VALUES ($1, 'x')", i); err != nil {
			t.Fatal(err)
		}
		res, err := tx.Commit(ctx)
		if err != nil || res.Path != client.PathOnePhase {
			t.Fatalf("Commit = %+v, %v", res, err)
		}
		return res.RMRoundTrips
	})
	plainExec := measure("pgx Begin/Exec/Commit", func(i int) int {
		ptx, err := pc.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ptx.Exec(ctx, "INSERT INTO e2e_pgx_rt VALUES ($1, 'x')", i+100); err != nil {
			t.Fatal(err)
		}
		if err := ptx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		return -1
	})
	if sdkExec != 2 || plainExec != 3 {
		t.Errorf("one-phase insert: SDK %d round trips, plain pgx %d; want 2 and 3", sdkExec, plainExec)
	}
	sdkRead := measure("SDK pgx branch, read-only QueryRow", func(int) int {
		tx := cli.Begin()
		b, _ := tx.BranchPgx(ctx, "pg", pc)
		var n int
		if err := b.QueryRow(ctx, "SELECT count(*) FROM e2e_pgx_rt").Scan(&n); err != nil {
			t.Fatal(err)
		}
		res, err := tx.Commit(ctx)
		if err != nil || res.Path != client.PathLocal {
			t.Fatalf("Commit = %+v, %v", res, err)
		}
		return res.RMRoundTrips
	})
	// The database/sql branch's QueryRowContext begins alone: its count.
	sqlConn, err := d.pg.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sqlConn.Close()
	tx := cli.Begin()
	sb, _ := tx.Branch(ctx, "pg", sqlConn)
	var n int
	if err := sb.QueryRowContext(ctx, "SELECT count(*) FROM e2e_pgx_rt").Scan(&n); err != nil {
		t.Fatal(err)
	}
	res, err := tx.Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sdkRead != 3 || res.RMRoundTrips != 4 {
		t.Errorf("read-only branch: pgx %d round trips, database/sql %d; want 3 and 4", sdkRead, res.RMRoundTrips)
	}
}

// The bench runs PostgreSQL over database/sql and over pgx natively in one
// run (--compare W@sql,W@pgx): both commit every transaction with the same
// round trips, the SDK workload through Tx.Branch and Tx.BranchPgx, the
// baseline with the same statements; the report names the driver of each.
func TestPgxBenchComparesDrivers(t *testing.T) {
	for _, pair := range []string{"xa@sql,xa@pgx", "oltp-sql@sql,oltp-sql@pgx"} {
		loose, rep := runBench(t, "--compare", pair, "--txns", "40", "--threads", "2", "--oltp-rows", "200", "--db-counters=false")
		if loose["pg_driver"] != "auto" {
			t.Errorf("%s: pg_driver = %v, want the default, auto", pair, loose["pg_driver"])
		}
		for i, r := range loose["results"].([]any) {
			if got, want := r.(map[string]any)["pg_driver"], []string{"sql", "pgx"}[i]; got != want {
				t.Errorf("%s: result %d: pg_driver %v, want %s", pair, i, got, want)
			}
		}
		if len(rep.Results) != 2 || rep.Ratio == nil {
			t.Fatalf("%s: %d results, ratio %v; want 2 and a ratio", pair, len(rep.Results), rep.Ratio)
		}
		want := strings.Split(pair, ",")
		for i, r := range rep.Results {
			if r.Workload != want[i] || r.Txns != 40 || r.Errors != 0 {
				t.Errorf("%s: result %d: %s, %d txns, %d errors; want %s, 40, 0", pair, i, r.Workload, r.Txns, r.Errors, want[i])
			}
		}
		// oltp re-inserts the row it deleted only when the DELETE found it:
		// with two threads picking rows at random, another transaction
		// sometimes took it first, and that transaction makes one round trip
		// fewer (seen: 8 and 7.975 over 40). Either driver may meet that; a
		// driver that made a round trip more or fewer on every transaction
		// would differ by 1.
		a, b := rep.Results[0].RMRoundtripsPerTxn["pg"], rep.Results[1].RMRoundtripsPerTxn["pg"]
		if math.Abs(a-b) > 0.25 || a == 0 {
			t.Errorf("%s: PostgreSQL round trips per transaction %v (sql) and %v (pgx): want the same", pair, a, b)
		}
		t.Logf("%s: TPS %.0f and %.0f (ratio %.2f; 40 transactions, not a measurement)", pair, rep.Results[0].TPS, rep.Results[1].TPS, *rep.Ratio)
	}
}
