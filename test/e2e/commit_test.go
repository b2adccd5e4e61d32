package e2e

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/api"
	"github.com/tandem-tx/tandem/client"
)

// Two branches that wrote: prepared in parallel, decided by one Commit RPC,
// visible on both databases afterwards, nothing left prepared.
func TestTwoBranchCommitAcrossPostgresAndMariaDB(t *testing.T) {
	c := startCoordinator(t, coordOpts{})
	d := openDBs(t)
	d.table(t, "e2e_commit")
	cli := c.client(t)
	pc, mc := conns(t, d)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	tx := cli.Begin()
	pb, err := tx.Branch(ctx, "pg", pc)
	if err != nil {
		t.Fatal(err)
	}
	mb, err := tx.Branch(ctx, "maria", mc)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := tx.Branch(ctx, "pg", pc); again != pb {
		t.Fatal("a second enlistment of the same RM made a second branch")
	}
	if _, err := pb.ExecContext(ctx, "INSERT INTO e2e_commit VALUES ($1, 'pg')", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := mb.ExecContext(ctx, "INSERT INTO e2e_commit VALUES (?, 'maria')", 1); err != nil {
		t.Fatal(err)
	}
	res, err := tx.Commit(ctx)
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if res.Path != client.PathTwoPhase || res.CoordinatorCalls != 1 || res.Phase2Pending {
		t.Fatalf("result %+v: want two-phase, one coordinator call, phase 2 done", res)
	}
	// PostgreSQL: BEGIN+INSERT, PREPARE, COMMIT PREPARED (the client's, under
	// visibility sync). MariaDB: XA START+INSERT, XA END+XA PREPARE, XA COMMIT.
	if res.RMRoundTrips != 6 {
		t.Errorf("RM round trips = %d, want 6", res.RMRoundTrips)
	}
	if d.count(t, d.pg, "e2e_commit", 1) != 1 || d.count(t, d.my, "e2e_commit", 1) != 1 {
		t.Fatal("the committed rows are not visible on both databases")
	}
	if left := d.preparedFor(t, tx.GTRID().String()); len(left) != 0 {
		t.Fatalf("prepared branches left after commit: %v", left)
	}
	st, err := cli.Status(ctx, tx.GTRID(), false)
	if err != nil || st.Outcome != api.Outcome_COMMITTED {
		t.Fatalf("Status = %v, %v; want COMMITTED", st, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatalf("Rollback after Commit: %v (must be a no-op)", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatalf("second Rollback: %v", err)
	}
	if _, err := tx.Commit(ctx); !errors.Is(err, client.ErrTxDone) {
		t.Fatalf("second Commit: %v, want ErrTxDone", err)
	}
	// A repeated Commit RPC answers the first outcome.
	again, err := c.api().Commit(ctx, &api.CommitRequest{Gtrid: tx.GTRID().String(), Branches: []*api.Branch{{Rm: "pg"}, {Rm: "maria", ClientSettles: true}}})
	if err != nil || again.Outcome != api.Outcome_COMMITTED {
		t.Fatalf("repeated Commit = %v, %v; want COMMITTED", again, err)
	}
}

// One writer commits in one phase and read-only branches commit locally:
// neither touches the coordinator. The client points at an address where
// nothing listens, and its call counter must stay at zero.
func TestOnePhaseAndReadOnlyMakeNoCoordinatorCall(t *testing.T) {
	d := openDBs(t)
	d.table(t, "e2e_1pc")
	cli, err := client.New(client.Config{
		Coordinator: freeAddr(t), // nothing listens here
		RMs: []client.RM{{Name: "pg", Driver: "postgres"}, {Name: "pg2", Driver: "postgres"},
			{Name: "maria", Driver: "mysql", MultiStatements: true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pc, mc := conns(t, d)
	pc2, err := d.pg.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer pc2.Close()

	// MariaDB writes, PostgreSQL only reads: one-phase on MariaDB.
	tx := cli.Begin()
	pb, _ := tx.Branch(ctx, "pg", pc)
	mb, _ := tx.Branch(ctx, "maria", mc)
	var n int
	if err := pb.QueryRowContext(ctx, "SELECT count(*) FROM e2e_1pc").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if _, err := mb.ExecContext(ctx, "INSERT INTO e2e_1pc VALUES (?, 'one')", 7); err != nil {
		t.Fatal(err)
	}
	res, err := tx.Commit(ctx)
	if err != nil || res.Path != client.PathOnePhase {
		t.Fatalf("Commit = %+v, %v; want one-phase", res, err)
	}
	if d.count(t, d.my, "e2e_1pc", 7) != 1 {
		t.Fatal("one-phase commit is not visible")
	}

	// PostgreSQL writes, MariaDB untouched: one-phase on PostgreSQL.
	tx = cli.Begin()
	pb, _ = tx.Branch(ctx, "pg", pc)
	if _, err := tx.Branch(ctx, "maria", mc); err != nil { // enlisted, never used
		t.Fatal(err)
	}
	if _, err := pb.ExecContext(ctx, "INSERT INTO e2e_1pc VALUES ($1, 'one')", 8); err != nil {
		t.Fatal(err)
	}
	if res, err := tx.Commit(ctx); err != nil || res.Path != client.PathOnePhase {
		t.Fatalf("Commit = %+v, %v; want one-phase", res, err)
	}
	if d.count(t, d.pg, "e2e_1pc", 8) != 1 {
		t.Fatal("one-phase commit on PostgreSQL is not visible")
	}

	// Two PostgreSQL branches that only read: both commit locally.
	tx = cli.Begin()
	b1, _ := tx.Branch(ctx, "pg", pc)
	b2, _ := tx.Branch(ctx, "pg2", pc2)
	for _, b := range []*client.Branch{b1, b2} {
		if err := b.QueryRowContext(ctx, "SELECT count(*) FROM e2e_1pc").Scan(&n); err != nil {
			t.Fatal(err)
		}
	}
	if res, err := tx.Commit(ctx); err != nil || res.Path != client.PathLocal {
		t.Fatalf("Commit = %+v, %v; want local", res, err)
	}
	if calls := cli.Stats().CoordinatorCalls; calls != 0 {
		t.Fatalf("coordinator calls = %d, want 0", calls)
	}
}

// A prepare that fails on one RM (a deferred constraint checked at PREPARE
// TRANSACTION) leaves nothing committed and nothing prepared anywhere.
func TestPrepareFailureCommitsNothing(t *testing.T) {
	c := startCoordinator(t, coordOpts{})
	d := openDBs(t)
	d.table(t, "e2e_pf")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range []string{"DROP TABLE IF EXISTS e2e_pf_child", "DROP TABLE IF EXISTS e2e_pf_parent",
		"CREATE TABLE e2e_pf_parent (id int PRIMARY KEY)",
		"CREATE TABLE e2e_pf_child (id int PRIMARY KEY, parent int REFERENCES e2e_pf_parent DEFERRABLE INITIALLY DEFERRED)"} {
		if _, err := d.pg.ExecContext(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	cli := c.client(t)
	pc, mc := conns(t, d)
	tx := cli.Begin()
	pb, _ := tx.Branch(ctx, "pg", pc)
	mb, _ := tx.Branch(ctx, "maria", mc)
	if _, err := mb.ExecContext(ctx, "INSERT INTO e2e_pf VALUES (?, 'x')", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := pb.ExecContext(ctx, "INSERT INTO e2e_pf_child VALUES (1, 42)"); err != nil { // parent 42 missing: fails at prepare
		t.Fatal(err)
	}
	_, err := tx.Commit(ctx)
	if !errors.Is(err, client.ErrAborted) {
		t.Fatalf("Commit = %v, want ErrAborted", err)
	}
	if d.count(t, d.my, "e2e_pf", 1) != 0 {
		t.Fatal("the MariaDB branch committed although the PostgreSQL prepare failed")
	}
	if left := d.preparedFor(t, tx.GTRID().String()); len(left) != 0 {
		t.Fatalf("prepared branches left: %v", left)
	}
	// One call: the Health that learns the cluster's identity, which names
	// the branches (before the MariaDB branch's XA START); no Commit, no Abort.
	if cli.Stats().CoordinatorCalls != 1 {
		t.Fatalf("a failed prepare made %d coordinator calls, want 1 (the cluster's identity); the client rolls back by itself", cli.Stats().CoordinatorCalls)
	}
	// The application's connections are usable again.
	if _, err := mc.ExecContext(ctx, "SELECT 1"); err != nil {
		t.Fatalf("MariaDB connection after abort: %v", err)
	}

	// The RM's connection dies before prepare (the server kills it).
	pc2, mc2 := conns(t, d)
	tx = cli.Begin()
	pb, _ = tx.Branch(ctx, "pg", pc2)
	mb, _ = tx.Branch(ctx, "maria", mc2)
	if _, err := pb.ExecContext(ctx, "INSERT INTO e2e_pf VALUES ($1, 'x')", 2); err != nil {
		t.Fatal(err)
	}
	var id int64
	if err := mb.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		t.Fatal(err)
	}
	if _, err := mb.ExecContext(ctx, "INSERT INTO e2e_pf VALUES (?, 'x')", 2); err != nil {
		t.Fatal(err)
	}
	if _, err := d.my.ExecContext(ctx, "KILL CONNECTION ?", id); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Commit(ctx); !errors.Is(err, client.ErrAborted) {
		t.Fatalf("Commit with a killed MariaDB connection = %v, want ErrAborted", err)
	}
	eventually(t, 10*time.Second, "no branch of the aborted transaction left prepared", func() bool {
		return len(d.preparedFor(t, tx.GTRID().String())) == 0
	})
	if d.count(t, d.pg, "e2e_pf", 2) != 0 || d.count(t, d.my, "e2e_pf", 2) != 0 {
		t.Fatal("a branch of the aborted transaction committed")
	}
}
