package client

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tandem-tx/tandem/api"
	"github.com/tandem-tx/tandem/waits"
)

// warm runs one one-phase transaction with query on the branch's RM, so
// that pgx's statement cache holds query (a miss costs a describe round
// trip of its own) and the counts that follow are the steady state.
func warm(t *testing.T, c *Client, f *fakePG, conn *pgx.Conn, rm string, fn func(b *PgxBranch) error) {
	t.Helper()
	tx := c.Begin()
	b, err := tx.BranchPgx(context.Background(), rm, conn)
	if err != nil {
		t.Fatal(err)
	}
	if err := fn(b); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A one-phase pgx branch: BEGIN rides in one batch with the first
// statement (one round trip on the wire), then COMMIT; the SDK's count, the
// wire's and the wait events agree.
func TestPgxOnePhasePipelinesBegin(t *testing.T) {
	f := startFakePG(t)
	reg := waits.NewRegistry(waits.SideClient)
	c := newClient(t, Config{Waits: reg})
	ctx := context.Background()
	conn := f.conn(t)
	insert := func(b *PgxBranch) error {
		_, err := b.Exec(ctx, "INSERT INTO a VALUES ($1)", 1)
		return err
	}
	warm(t, c, f, conn, "pg", insert)
	f.reset()
	reg.Reset()

	tx := c.Begin()
	b, err := tx.BranchPgx(ctx, "pg", conn)
	if err != nil {
		t.Fatal(err)
	}
	if err := insert(b); err != nil {
		t.Fatal(err)
	}
	res, err := tx.Commit(ctx)
	if err != nil || res.Path != PathOnePhase || res.RMRoundTrips != 2 {
		t.Fatalf("Commit = %+v, %v; want one-phase in 2 round trips", res, err)
	}
	trips, stmts := f.counts()
	if trips != 2 || !slices.Equal(stmts, []string{"BEGIN", "INSERT INTO a VALUES ($1)", "COMMIT"}) {
		t.Fatalf("the server saw %d round trips and %q; want 2: BEGIN+INSERT, COMMIT", trips, stmts)
	}
	snap := reg.Snapshot()
	if n := snap.Get(waits.RMRoundtrip).Count; n != 1 {
		t.Errorf("rm roundtrip waits = %d, want 1", n)
	}
	if n := snap.Get(waits.RMCommit).Count; n != 1 {
		t.Errorf("rm commit waits = %d, want 1", n)
	}
	if st := conn.PgConn().TxStatus(); st != 'I' {
		t.Errorf("connection after commit: status %q, want idle", st)
	}
}

// A pgx branch that only read: the query carries BEGIN (one round trip,
// where the database/sql branch's QueryRowContext begins alone), the
// read-only check finds no write, the branch commits locally.
func TestPgxReadOnlyQueryRow(t *testing.T) {
	f := startFakePG(t)
	c := newClient(t, Config{})
	ctx := context.Background()
	conn := f.conn(t)
	read := func(b *PgxBranch) error {
		var n int64
		return b.QueryRow(ctx, "SELECT count(*) FROM a WHERE id = $1", 1).Scan(&n)
	}
	warm(t, c, f, conn, "pg", read)
	f.reset()
	tx := c.Begin()
	b, _ := tx.BranchPgx(ctx, "pg", conn)
	if err := read(b); err != nil {
		t.Fatal(err)
	}
	res, err := tx.Commit(ctx)
	if err != nil || res.Path != PathLocal || res.RMRoundTrips != 3 {
		t.Fatalf("Commit = %+v, %v; want local in 3 round trips", res, err)
	}
	trips, stmts := f.counts()
	if trips != 3 || !slices.Equal(stmts, []string{"BEGIN", "SELECT count(*) FROM a WHERE id = $1", "SELECT txid_current_if_assigned() IS NULL", "COMMIT"}) {
		t.Fatalf("the server saw %d round trips and %q", trips, stmts)
	}
}

// Two writers, one on pgx: both prepare, one Commit RPC decides, the pgx
// branch is handed to the coordinator; the prepare is timed as rm prepare.
func TestPgxTwoPhase(t *testing.T) {
	fc := &fakeCoordinator{commit: func(*api.CommitRequest) (*api.CommitResponse, error) {
		return &api.CommitResponse{Outcome: api.Outcome_COMMITTED}, nil
	}}
	f := startFakePG(t)
	reg := waits.NewRegistry(waits.SideClient)
	c := newClient(t, Config{Coordinator: startCoordinator(t, fc), Waits: reg})
	ctx := context.Background()
	tx := c.Begin()
	pb, _ := tx.BranchPgx(ctx, "pg", f.conn(t))
	myConn, maria := fakeConnTo(t)
	mb, _ := tx.Branch(ctx, "maria", myConn)
	if _, err := pb.Exec(ctx, "INSERT INTO a VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	if _, err := mb.ExecContext(ctx, "UPDATE b SET v = 2"); err != nil {
		t.Fatal(err)
	}
	res, err := tx.Commit(ctx)
	if err != nil || res.Path != PathTwoPhase || res.CoordinatorCalls != 1 {
		t.Fatalf("Commit = %+v, %v", res, err)
	}
	_, stmts := f.counts()
	if want := []string{"BEGIN", "INSERT INTO a VALUES (1)", "PREPARE TRANSACTION " + pgGID(tx.GTRID())}; !slices.Equal(stmts, want) {
		t.Fatalf("pgx branch statements %q, want %q", stmts, want)
	}
	x := xaOwned(tx.GTRID())
	wantLog(t, "maria", maria, "XA START "+x, "UPDATE b SET v = 2", "XA END "+x, "XA PREPARE "+x, "XA COMMIT "+x)
	// PREPARE TRANSACTION; MariaDB without MultiStatements: XA END, XA PREPARE.
	if n := reg.Snapshot().Get(waits.RMPrepare).Count; n != 3 {
		t.Errorf("rm prepare waits = %d, want 3", n)
	}
}

// A statement whose error came only while its rows were read (the SDK
// never saw it) failed PostgreSQL's transaction: the backend's transaction
// status ('E', failed) dooms it at Commit, before any PREPARE (which would
// answer ROLLBACK) — the transaction aborts and the coordinator is never
// asked.
func TestPgxPrepareAnsweredRollback(t *testing.T) {
	fc := &fakeCoordinator{commit: func(*api.CommitRequest) (*api.CommitResponse, error) {
		return &api.CommitResponse{Outcome: api.Outcome_COMMITTED}, nil
	}}
	f := startFakePG(t)
	f.failLate = "late"
	c := newClient(t, Config{Coordinator: startCoordinator(t, fc)})
	ctx := context.Background()
	conn := f.conn(t)
	tx := c.Begin()
	pb, _ := tx.BranchPgx(ctx, "pg", conn)
	myConn, _ := fakeConnTo(t)
	mb, _ := tx.Branch(ctx, "maria", myConn)
	if _, err := pb.Exec(ctx, "INSERT INTO a VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	rows, err := pb.Query(ctx, "SELECT late FROM a")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
	}
	if rows.Err() == nil {
		t.Fatal("the late error did not reach the rows")
	}
	if _, err := mb.ExecContext(ctx, "UPDATE b SET v = 2"); err != nil {
		t.Fatal(err)
	}
	_, err = tx.Commit(ctx)
	if !errors.Is(err, ErrAborted) || !strings.Contains(err.Error(), "transaction status is 'E'") {
		t.Fatalf("Commit = %v; want ErrAborted saying the branch's transaction had failed", err)
	}
	if commits, _ := fc.counts(); commits != 0 {
		t.Fatalf("the coordinator was asked to commit %d times", commits)
	}
	if st := conn.PgConn().TxStatus(); st != 'I' {
		t.Errorf("connection after the abort: status %q, want idle", st)
	}
}

// The first statement fails inside the batch that carries BEGIN: the
// branch is failed (later statements refused), Commit aborts, and the
// rollback ends the server's transaction.
func TestPgxFirstStatementFails(t *testing.T) {
	f := startFakePG(t)
	f.fail = "boom"
	c := newClient(t, Config{})
	ctx := context.Background()
	conn := f.conn(t)
	tx := c.Begin()
	pb, _ := tx.BranchPgx(ctx, "pg", conn)
	if _, err := pb.Exec(ctx, "INSERT INTO boom VALUES (1)"); err == nil || !strings.Contains(err.Error(), "begin and first statement") {
		t.Fatalf("Exec = %v, want the failure", err)
	}
	if _, err := pb.Exec(ctx, "INSERT INTO a VALUES (1)"); !errors.Is(err, ErrBranchFailed) {
		t.Fatalf("Exec after a failure = %v, want ErrBranchFailed", err)
	}
	if _, err := tx.Commit(ctx); !errors.Is(err, ErrAborted) {
		t.Fatalf("Commit = %v, want ErrAborted", err)
	}
	if _, stmts := f.counts(); stmts[len(stmts)-1] != "ROLLBACK" {
		t.Fatalf("statements %q: want the transaction rolled back", stmts)
	}
	if st := conn.PgConn().TxStatus(); st != 'I' {
		t.Errorf("connection after the abort: status %q, want idle", st)
	}
}

// BranchPgx refuses what Branch refuses, and a MySQL RM.
func TestBranchPgxRefuses(t *testing.T) {
	f := startFakePG(t)
	c := newClient(t, Config{})
	ctx := context.Background()
	tx := c.Begin()
	conn := f.conn(t)
	if _, err := tx.BranchPgx(ctx, "maria", conn); err == nil || !strings.Contains(err.Error(), "pgx speaks only PostgreSQL") {
		t.Errorf("BranchPgx on a MySQL RM = %v", err)
	}
	if _, err := tx.BranchPgx(ctx, "nosuch", conn); !errors.Is(err, ErrUnknownRM) {
		t.Errorf("BranchPgx on an unknown RM = %v", err)
	}
	if _, err := tx.BranchPgx(ctx, "pg", nil); err == nil {
		t.Error("BranchPgx accepted a nil connection")
	}
	if _, err := tx.BranchPgxPool(ctx, "pg", nil); err == nil {
		t.Error("BranchPgxPool accepted a nil connection")
	}
	b1, err := tx.BranchPgx(ctx, "pg", conn)
	if err != nil {
		t.Fatal(err)
	}
	if b2, err := tx.BranchPgx(ctx, "pg", conn); err != nil || b2.b != b1.b {
		t.Errorf("a second BranchPgx on the same connection = %v, %v; want the same branch", b2, err)
	}
	if _, err := tx.BranchPgx(ctx, "pg", f.conn(t)); err == nil {
		t.Error("a second connection for the same RM was accepted")
	}
	sqlConn, _ := fakeConnTo(t)
	if _, err := tx.Branch(ctx, "pg", sqlConn); err == nil {
		t.Error("a *sql.Conn for an RM enlisted over pgx was accepted")
	}
	_ = tx.Rollback(ctx)
	if _, err := tx.BranchPgx(ctx, "pg", conn); !errors.Is(err, ErrTxDone) {
		t.Errorf("BranchPgx after Rollback = %v, want ErrTxDone", err)
	}
}

// The SDK's and the driver's cost of a one-phase transaction (one insert)
// over pgx natively and over database/sql on pgx's stdlib driver, against
// the same fake PostgreSQL on loopback (its cost, the same for both, is in
// the figures): run both with -bench 'OnePhaseOver' -benchmem.
func BenchmarkOnePhaseOverPgx(b *testing.B) {
	f := startFakePG(b)
	c, err := New(Config{RMs: twoRMs, Waits: waits.NewRegistry(waits.SideClient)})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, "postgres://u@"+f.addr+"/db?sslmode=disable")
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		tx := c.Begin()
		pb, _ := tx.BranchPgx(ctx, "pg", conn)
		if _, err := pb.Exec(ctx, "INSERT INTO a VALUES ($1)", i); err != nil {
			b.Fatal(err)
		}
		if _, err := tx.Commit(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkOnePhaseOverSQL(b *testing.B) {
	f := startFakePG(b)
	c, err := New(Config{RMs: twoRMs, Waits: waits.NewRegistry(waits.SideClient)})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	db, err := sql.Open("pgx", "postgres://u@"+f.addr+"/db?sslmode=disable")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		tx := c.Begin()
		sb, _ := tx.Branch(ctx, "pg", conn)
		if _, err := sb.ExecContext(ctx, "INSERT INTO a VALUES ($1)", i); err != nil {
			b.Fatal(err)
		}
		if _, err := tx.Commit(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
