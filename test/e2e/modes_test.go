package e2e

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/client"
)

// twoPGBranches commits (or tries to) one insert on each of two RM names that
// point at the same PostgreSQL database: a transaction the coordinator settles
// entirely, where durability nowait applies.
func twoPGBranches(t *testing.T, c *coordinator, table string, id int, opts client.CommitOptions, timeout time.Duration) (client.Result, error) {
	t.Helper()
	d := openDBs(t)
	cli, err := client.New(client.Config{Coordinator: c.addr, RMs: []client.RM{{Name: "pg", Driver: "postgres"}, {Name: "pg2", Driver: "postgres"}},
		Defaults: client.CommitOptions{DecideAt: client.DecideAtCoordinator}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c1, _ := d.pg.Conn(ctx)
	c2, _ := d.pg.Conn(ctx)
	t.Cleanup(func() { c1.Close(); c2.Close() })
	tx := cli.Begin()
	tx.SetOptions(opts)
	b1, _ := tx.Branch(ctx, "pg", c1)
	b2, _ := tx.Branch(ctx, "pg2", c2)
	if _, err := b1.ExecContext(ctx, "INSERT INTO "+table+" VALUES ($1, 'pg')", id); err != nil {
		t.Fatal(err)
	}
	if _, err := b2.ExecContext(ctx, "INSERT INTO "+table+" VALUES ($1, 'pg2')", id+1000); err != nil {
		t.Fatal(err)
	}
	return tx.Commit(ctx)
}

func pgRows(t *testing.T, d dbs, table string, id int) (int, int) {
	return d.count(t, d.pg, table, id), d.count(t, d.pg, table, id+1000)
}

// Durability nowait: the reply comes before the COMMIT record is on disk. If
// the coordinator dies before writing it, the acknowledged decision is lost —
// but both branches are then rolled back (presumed abort), never one
// committed without the other. With wait, the client is never told COMMITTED
// for a decision that is not on disk.
func TestDurabilityModesUnderACrashBeforeTheLogWrite(t *testing.T) {
	d := openDBs(t)
	d.table(t, "e2e_modes")
	rms := []string{"pg=postgres:" + pgDSN, "pg2=postgres:" + pgDSN}
	stall := "wal-before-write=sleep(3s)" // the log writer stalls before writing: the decision is not on disk

	// nowait: COMMITTED comes back although nothing is on disk yet.
	c := startCoordinator(t, coordOpts{rms: rms, failpoints: stall})
	res, err := twoPGBranches(t, c, "e2e_modes", 1, client.CommitOptions{Durability: client.DurabilityNoWait, Visibility: client.VisibilityAsync}, 2*time.Second)
	if err != nil {
		t.Fatalf("nowait Commit = %v, want COMMITTED before the write", err)
	}
	_ = res
	c.kill() // before the writer wakes up: the acknowledged decision is lost
	c.restart()
	eventually(t, 20*time.Second, "the orphaned branches of the lost decision settled", func() bool {
		a, b := pgRows(t, d, "e2e_modes", 1)
		return len(d.prepared(t)) == 0 && a == b
	})
	if a, b := pgRows(t, d, "e2e_modes", 1); a != 0 || b != 0 {
		t.Fatalf("after losing the nowait decision: rows %d/%d, want both rolled back", a, b)
	}
	c.stop()

	// wait: the client gets no COMMITTED while the record is not on disk.
	c = startCoordinator(t, coordOpts{rms: rms, failpoints: stall})
	_, err = twoPGBranches(t, c, "e2e_modes", 2, client.CommitOptions{Durability: client.DurabilityWait}, time.Second)
	if !errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("wait Commit with the writer stalled = %v, want ErrOutcomeUnknown (no acknowledgement)", err)
	}
	c.kill()
	c.restart()
	eventually(t, 20*time.Second, "both branches settled the same way", func() bool {
		a, b := pgRows(t, d, "e2e_modes", 2)
		return len(d.prepared(t)) == 0 && a == b
	})
}
