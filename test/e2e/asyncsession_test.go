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

// Visibility async on the coordinator path, under load, with each client
// goroutine reusing its own MariaDB session across transactions (as a
// connection pool or the bench does): Commit must never hand the session
// back to the application while it still holds the last transaction's
// prepared branch, or the next XA START on it fails with XAER_RMFAIL
// ("... global transaction is in the PREPARED state"). Every acknowledged
// transaction must end up on both databases, with nothing left prepared.
func TestAsyncVisibilityReusesMariaDBSessionsUnderLoad(t *testing.T) {
	c := startCoordinator(t, coordOpts{})
	d := openDBs(t)
	d.table(t, "e2e_async_reuse")
	cli := c.client(t)
	const workers = 8
	const runFor = 3 * time.Second
	opts := client.CommitOptions{DecideAt: client.DecideAtCoordinator, Visibility: client.VisibilityAsync}

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
		go func(w int, pc, mc *sql.Conn) {
			defer wg.Done()
			for i := 0; time.Now().Before(stop); i++ {
				id := w*1_000_000 + i
				err := asyncTxn(cli, opts, pc, mc, id)
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
		}(w, pc, mc)
	}
	wg.Wait()
	if errs > 0 {
		t.Fatalf("%d of %d transactions failed; the first: %v", errs, errs+len(acked), firstErr)
	}
	if len(acked) < workers {
		t.Fatalf("only %d transactions committed in %s by %d workers", len(acked), runFor, workers)
	}
	// Phase 2 of the coordinator's branches is asynchronous: wait for it,
	// then every acknowledged row must be on both databases.
	eventually(t, 30*time.Second, "no Tandem branch left prepared", func() bool { return len(d.prepared(t)) == 0 })
	// The coordinator owes nothing: the client settled its MariaDB branches
	// and the coordinator's check that they are gone ended their phase 2.
	coordAPI := c.api()
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
	t.Logf("%d transactions committed by %d workers, each reusing its own sessions", len(acked), workers)
}

// asyncTxn inserts row id on both databases through pc and mc and commits.
func asyncTxn(cli *client.Client, opts client.CommitOptions, pc, mc *sql.Conn, id int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tx := cli.Begin()
	tx.SetOptions(opts)
	pb, err := tx.Branch(ctx, "pg", pc)
	if err == nil {
		_, err = pb.ExecContext(ctx, "INSERT INTO e2e_async_reuse VALUES ($1, 'pg')", id)
	}
	if err == nil {
		var mb *client.Branch
		if mb, err = tx.Branch(ctx, "maria", mc); err == nil {
			_, err = mb.ExecContext(ctx, "INSERT INTO e2e_async_reuse VALUES (?, 'maria')", id)
		}
	}
	if err != nil {
		_ = tx.Rollback(ctx)
		return err
	}
	res, err := tx.Commit(ctx)
	if err == nil && res.Path != client.PathTwoPhase {
		return fmt.Errorf("committed on path %s, want two-phase", res.Path)
	}
	return err
}
