package e2e

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/api"
	"github.com/tandem-tx/tandem/client"
)

// insertBoth starts a transaction with one insert per database (not committed).
func insertBoth(t *testing.T, ctx context.Context, cli *client.Client, pc, mc *sql.Conn, table string, id int) *client.Tx {
	t.Helper()
	tx := cli.Begin()
	pb, _ := tx.Branch(ctx, "pg", pc)
	mb, _ := tx.Branch(ctx, "maria", mc)
	if _, err := pb.ExecContext(ctx, "INSERT INTO "+table+" VALUES ($1, 'x')", id); err != nil {
		t.Fatal(err)
	}
	if _, err := mb.ExecContext(ctx, "INSERT INTO "+table+" VALUES (?, 'x')", id); err != nil {
		t.Fatal(err)
	}
	return tx
}

// The coordinator process is SIGKILLed right after its COMMIT record is
// durable and before any phase 2: after a restart, both databases show the commit.
func TestCoordinatorKilledAfterCommitRecord(t *testing.T) {
	c := startCoordinator(t, coordOpts{failpoints: "after-commit-record=kill"})
	d := openDBs(t)
	d.table(t, "e2e_kill")
	cli := c.client(t)
	pc, mc := conns(t, d)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	tx := insertBoth(t, ctx, cli, pc, mc, "e2e_kill", 1)
	_, err := tx.Commit(ctx)
	if !errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("Commit with the coordinator killed = %v, want ErrOutcomeUnknown", err)
	}
	<-c.exited
	if !strings.Contains(c.out.String(), "failpoint after-commit-record: SIGKILL") {
		t.Fatalf("the coordinator did not die at the failpoint:\n%s", c.out.String())
	}
	if n := len(d.preparedFor(t, tx.GTRID().String())); n != 2 {
		t.Fatalf("%d branches prepared after the crash, want 2 (nothing committed yet)", n)
	}
	c.restart()
	eventually(t, 15*time.Second, "both branches committed by the restarted coordinator", func() bool {
		return d.count(t, d.pg, "e2e_kill", 1) == 1 && d.count(t, d.my, "e2e_kill", 1) == 1
	})
	eventually(t, 5*time.Second, "nothing left prepared", func() bool { return len(d.preparedFor(t, tx.GTRID().String())) == 0 })
	st, err := c.api().Status(context.Background(), &api.StatusRequest{Gtrid: tx.GTRID().String()})
	if err != nil || st.Outcome != api.Outcome_COMMITTED {
		t.Fatalf("Status after restart = %v, %v; want COMMITTED", st, err)
	}
}

// The client dies after preparing both branches and before Commit: after the
// orphan timeout both branches are rolled back (ABORT written first), and a
// late Commit for that gtrid answers ABORTED.
func TestClientDiesAfterPrepare(t *testing.T) {
	c := startCoordinator(t, coordOpts{})
	d := openDBs(t)
	d.table(t, "e2e_orphan")
	g := prepareOwnedAndDie(t, "e2e_orphan", 1, clusterOf(t, c))
	if n := len(d.preparedFor(t, g.String())); n != 2 {
		t.Fatalf("%d branches prepared, want 2", n)
	}
	start := time.Now()
	eventually(t, 20*time.Second, "the orphaned branches rolled back", func() bool { return len(d.preparedFor(t, g.String())) == 0 })
	if waited := time.Since(start); waited < time.Second {
		t.Fatalf("branches were rolled back after %s, before the 2s orphan timeout", waited)
	}
	if d.count(t, d.pg, "e2e_orphan", 1) != 0 || d.count(t, d.my, "e2e_orphan", 1) != 0 {
		t.Fatal("an orphaned branch was committed")
	}
	ctx := context.Background()
	resp, err := c.api().Commit(ctx, &api.CommitRequest{Gtrid: g.String(), Branches: []*api.Branch{{Rm: "pg"}, {Rm: "maria"}}})
	if err != nil || resp.Outcome != api.Outcome_ABORTED {
		t.Fatalf("late Commit = %v, %v; want ABORTED", resp, err)
	}
	if !strings.Contains(resp.Message, "orphan") {
		t.Errorf("late Commit message %q does not say why", resp.Message)
	}
	// The ABORT is durable: it survives a restart.
	c.kill()
	c.restart()
	resp, err = c.api().Commit(ctx, &api.CommitRequest{Gtrid: g.String(), Branches: []*api.Branch{{Rm: "pg"}, {Rm: "maria"}}})
	if err != nil || resp.Outcome != api.Outcome_ABORTED {
		t.Fatalf("late Commit after restart = %v, %v; want ABORTED", resp, err)
	}
}

// MariaDB is killed during phase 2: Commit still answers COMMITTED within the
// caller's deadline (phase 2 pending); once MariaDB is back, the coordinator
// commits the branch without any client action.
func TestMariaDBDownDuringPhase2(t *testing.T) {
	c := startCoordinator(t, coordOpts{failpoints: "after-commit-record=sleep(1500ms)"})
	d := openDBs(t)
	d.table(t, "e2e_mdown")
	cli := c.client(t)
	pc, mc := conns(t, d)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	tx := insertBoth(t, ctx, cli, pc, mc, "e2e_mdown", 1)
	type result struct {
		res client.Result
		err error
	}
	done := make(chan result, 1)
	go func() { r, err := tx.Commit(ctx); done <- result{r, err} }()
	// Wait until both branches are prepared (the decision is being logged), then kill MariaDB.
	eventually(t, 5*time.Second, "both branches prepared", func() bool { return len(d.preparedFor(t, tx.GTRID().String())) == 2 })
	runDB(t, "kill", "mysql")
	t.Cleanup(func() { runDB(t, "up", "mysql") })
	start := time.Now()
	r := <-done
	if r.err != nil {
		t.Fatalf("Commit with MariaDB down = %v, want COMMITTED with phase 2 pending", r.err)
	}
	if !r.res.Phase2Pending {
		t.Fatalf("result %+v: want phase 2 pending", r.res)
	}
	if waited := time.Since(start); waited > 8*time.Second {
		t.Fatalf("Commit took %s after the kill, past the caller's deadline", waited)
	}
	if d.count(t, d.pg, "e2e_mdown", 1) != 1 {
		t.Fatal("the PostgreSQL branch is not committed")
	}
	runDB(t, "up", "mysql")
	eventually(t, 30*time.Second, "the MariaDB branch committed after MariaDB came back", func() bool {
		var n int
		err := d.my.QueryRow("SELECT count(*) FROM e2e_mdown WHERE id = 1").Scan(&n)
		return err == nil && n == 1
	})
	eventually(t, 10*time.Second, "nothing left prepared", func() bool { return len(d.preparedFor(t, tx.GTRID().String())) == 0 })
}

// PostgreSQL (driven by the coordinator itself) is killed during phase 2: the
// reply comes before the caller's deadline with phase 2 pending, and the
// branch commits once PostgreSQL is back.
func TestPostgresDownDuringPhase2RepliesBeforeDeadline(t *testing.T) {
	c := startCoordinator(t, coordOpts{failpoints: "after-commit-record=sleep(1500ms)"})
	d := openDBs(t)
	d.table(t, "e2e_pdown")
	cli := c.client(t)
	pc, mc := conns(t, d)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Second)
	defer cancel()
	tx := insertBoth(t, ctx, cli, pc, mc, "e2e_pdown", 1)
	done := make(chan error, 1)
	var res client.Result
	go func() { var err error; res, err = tx.Commit(ctx); done <- err }()
	eventually(t, 5*time.Second, "both branches prepared", func() bool { return len(d.preparedFor(t, tx.GTRID().String())) == 2 })
	runDB(t, "kill", "pg")
	t.Cleanup(func() { runDB(t, "up", "pg") })
	err := <-done
	deadline, _ := ctx.Deadline()
	if err != nil {
		t.Fatalf("Commit with PostgreSQL down = %v, want COMMITTED with phase 2 pending", err)
	}
	if time.Now().After(deadline) {
		t.Fatal("Commit returned after the caller's deadline")
	}
	if !res.Phase2Pending {
		t.Fatalf("result %+v: want phase 2 pending", res)
	}
	runDB(t, "up", "pg")
	eventually(t, 30*time.Second, "the PostgreSQL branch committed after PostgreSQL came back", func() bool {
		var n int
		err := d.pg.QueryRow("SELECT count(*) FROM e2e_pdown WHERE id = 1").Scan(&n)
		return err == nil && n == 1
	})
	if d.count(t, d.my, "e2e_pdown", 1) != 1 {
		t.Fatal("the MariaDB branch is not committed")
	}
}
