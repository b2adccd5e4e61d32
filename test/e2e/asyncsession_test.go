package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/api"
	"github.com/tandem-tx/tandem/client"
)

// Visibility async under load, with each client goroutine reusing its own
// sessions across transactions (as a connection pool or the bench does):
// Commit must never hand a MariaDB session back to the application while
// it still holds the last transaction's prepared branch, or the next XA
// START on it fails with XAER_RMFAIL ("... global transaction is in the
// PREPARED state"). Every acknowledged transaction must end up on both
// databases, with nothing left prepared and nothing owed by the coordinator.
// On the coordinator's path and at a commit point on each database (at
// PostgreSQL, MariaDB's branch is prepared on the application's session).
func TestAsyncVisibilityReusesMariaDBSessionsUnderLoad(t *testing.T) {
	c := startCoordinator(t, coordOpts{})
	d := openDBs(t)
	coordAPI := c.api()
	cpAt := func(cp string) *client.Client {
		cli, err := client.New(client.Config{Coordinator: c.addr, RMs: []client.RM{
			{Name: "pg", Driver: "postgres", DB: d.pg, NeverCommitPoint: cp != "pg"},
			{Name: "maria", Driver: "mysql", MultiStatements: true, DB: d.my, NeverCommitPoint: cp != "maria"}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		return cli
	}
	for _, tc := range []struct {
		name     string
		cli      *client.Client
		decideAt client.DecideAt
		path     client.Path
	}{
		{"coordinator", c.client(t), client.DecideAtCoordinator, client.PathTwoPhase},
		{"commit point at PostgreSQL", cpAt("pg"), client.DecideAuto, client.PathCommitPoint},
		{"commit point at MariaDB", cpAt("maria"), client.DecideAuto, client.PathCommitPoint},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d.table(t, "e2e_async_reuse")
			opts := client.CommitOptions{DecideAt: tc.decideAt, Visibility: client.VisibilityAsync}
			acked := asyncLoad(t, d, tc.cli, opts, tc.path)
			// Phase 2 of the branches left to the coordinator (or to the
			// SDK's background commits) is asynchronous: wait for it, then
			// every acknowledged row must be on both databases.
			eventually(t, 30*time.Second, "no Tandem branch left prepared", func() bool { return len(d.prepared(t)) == 0 })
			eventually(t, 30*time.Second, "the coordinator has no unfinished transaction", func() bool {
				h, err := coordAPI.Health(context.Background(), &api.HealthRequest{})
				return err == nil && h.GetUnfinished() == 0
			})
			for _, db := range []*sql.DB{d.pg, d.my} {
				var n int
				if err := db.QueryRow("SELECT count(*) FROM e2e_async_reuse").Scan(&n); err != nil {
					t.Fatal(err)
				}
				if n != len(acked) {
					t.Fatalf("%d rows on one database, %d transactions acknowledged", n, len(acked))
				}
			}
			for _, id := range acked {
				if d.count(t, d.pg, "e2e_async_reuse", id) != 1 || d.count(t, d.my, "e2e_async_reuse", id) != 1 {
					t.Fatalf("acknowledged transaction with row %d is not on both databases", id)
				}
			}
		})
	}
}

// asyncLoad runs 8 goroutines for 3 s, each committing transactions that
// insert one row on both databases through its own two sessions; it fails
// the test on any error and returns the acknowledged rows' ids.
func asyncLoad(t *testing.T, d dbs, cli *client.Client, opts client.CommitOptions, path client.Path) []int {
	t.Helper()
	const workers = 8
	const runFor = 3 * time.Second
	var (
		mu       sync.Mutex
		acked    []int
		errs     int
		firstErr error
		wg       sync.WaitGroup
	)
	stop := time.Now().Add(runFor)
	for w := 0; w < workers; w++ {
		pc, mc := conns(t, d)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(stop); i++ {
				id := w*1_000_000 + i
				err := asyncTxn(cli, opts, path, pc, mc, id)
				mu.Lock()
				if err != nil {
					errs++
					if firstErr == nil {
						firstErr = fmt.Errorf("worker %d, transaction %d: %w", w, i, err)
					}
				} else {
					acked = append(acked, id)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if errs > 0 {
		t.Fatalf("%d of %d transactions failed; the first: %v", errs, errs+len(acked), firstErr)
	}
	if len(acked) < workers {
		t.Fatalf("only %d transactions committed in %s by %d workers", len(acked), runFor, workers)
	}
	t.Logf("%d transactions committed by %d workers, each reusing its own sessions", len(acked), workers)
	return acked
}

// asyncTxn inserts row id on both databases through pc and mc and commits,
// expecting path.
func asyncTxn(cli *client.Client, opts client.CommitOptions, path client.Path, pc, mc *sql.Conn, id int) error {
	_, res, err := txnOnBoth(cli, opts, "e2e_async_reuse", pc, mc, id)
	if err == nil && res.Path != path {
		return fmt.Errorf("committed on path %s, want %s", res.Path, path)
	}
	return err
}

// txnOnBoth inserts row id into table on both databases through pc and mc,
// one global transaction with opts, and commits it.
func txnOnBoth(cli *client.Client, opts client.CommitOptions, table string, pc, mc *sql.Conn, id int) (string, client.Result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tx := cli.Begin()
	tx.SetOptions(opts)
	pb, err := tx.Branch(ctx, "pg", pc)
	if err == nil {
		_, err = pb.ExecContext(ctx, "INSERT INTO "+table+" VALUES ($1, 'pg')", id)
	}
	if err == nil {
		var mb *client.Branch
		if mb, err = tx.Branch(ctx, "maria", mc); err == nil {
			_, err = mb.ExecContext(ctx, "INSERT INTO "+table+" VALUES (?, 'maria')", id)
		}
	}
	if err != nil {
		_ = tx.Rollback(ctx)
		return tx.GTRID().String(), client.Result{}, err
	}
	res, err := tx.Commit(ctx)
	return tx.GTRID().String(), res, err
}
