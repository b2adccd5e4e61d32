package e2e

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/client"
)

// An InnoDB deadlock rolls back the victim's transaction whole. On a
// MariaDB branch whose error reached the application through a query's row
// (QueryRowContext + Scan, or QueryContext + rows.Err), the SDK must doom
// the transaction as it does for ExecContext: otherwise the next
// statements run in the session's autocommit, each committed at once, and
// the transaction's decision then fails — its later writes stay (a split
// with two writers, a lost update with one).
func TestMariaDBDeadlockInAQueryDoomsTheTransaction(t *testing.T) {
	d := openDBs(t)
	d.table(t, "e2e_my_dl")
	ctx := context.Background()
	if _, err := d.my.ExecContext(ctx, "INSERT INTO e2e_my_dl (id, v) VALUES (1, 'a'), (2, 'a')"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.my.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS e2e_my_dl_heavy (id int PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	cli := cpClient(t, d)
	for i, viaRows := range []bool{false, true} {
		id := 10 + i
		pc, mc := conns(t, d)
		tx := cli.Begin()
		bp, _ := tx.Branch(ctx, "pg", pc)
		bm, _ := tx.Branch(ctx, "maria", mc)
		if _, err := bp.ExecContext(ctx, "INSERT INTO e2e_my_dl (id, v) VALUES ($1, 'x')", id); err != nil {
			t.Fatal(err)
		}
		if _, err := bm.ExecContext(ctx, "UPDATE e2e_my_dl SET v = 'tx' WHERE id = 1"); err != nil {
			t.Fatal(err)
		}
		// The other transaction: heavier (InnoDB rolls back the lighter
		// one of a deadlock), holding row 2.
		other, err := d.my.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		mustExec(t, other, "START TRANSACTION")
		mustExec(t, other, "DELETE FROM e2e_my_dl_heavy")
		for k := 0; k < 50; k++ {
			mustExec(t, other, "INSERT INTO e2e_my_dl_heavy VALUES ("+itoa(k)+")")
		}
		mustExec(t, other, "UPDATE e2e_my_dl SET v = 'other' WHERE id = 2")
		queried := make(chan error, 1)
		go func() {
			var v string
			if viaRows {
				rows, err := bm.QueryContext(ctx, "SELECT v FROM e2e_my_dl WHERE id = 2 FOR UPDATE")
				if err != nil {
					queried <- err
					return
				}
				for rows.Next() {
					_ = rows.Scan(&v)
				}
				queried <- rows.Err()
				rows.Close()
				return
			}
			queried <- bm.QueryRowContext(ctx, "SELECT v FROM e2e_my_dl WHERE id = 2 FOR UPDATE").Scan(&v)
		}()
		eventually(t, 10*time.Second, "the transaction's query waits for row 2's lock", func() bool {
			var n int
			// (INNODB_TRX needs the PROCESS privilege; a user sees its own threads.)
			_ = d.my.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'SELECT v FROM e2e_my_dl WHERE id = 2%'").Scan(&n)
			return n > 0
		})
		mustExec(t, other, "UPDATE e2e_my_dl SET v = 'other' WHERE id = 1") // the deadlock: InnoDB rolls back the transaction's branch
		mustExec(t, other, "ROLLBACK")
		other.Close()
		qerr := <-queried
		if qerr == nil {
			t.Fatalf("rows %v: the query after the deadlock answered no error", viaRows)
		}
		t.Logf("rows %v: the query answered %v", viaRows, qerr)
		// The application carries on regardless.
		_, eerr := bm.ExecContext(ctx, "INSERT INTO e2e_my_dl (id, v) VALUES (?, 'after')", id)
		_, cerr := tx.Commit(ctx)
		pgN, myN := d.count(t, d.pg, "e2e_my_dl", id), d.count(t, d.my, "e2e_my_dl", id)
		if pgN != myN {
			t.Errorf("rows %v: split: PostgreSQL has %d row(s) %d, MariaDB %d (the statement after the deadlock answered %v; Commit %v)", viaRows, pgN, id, myN, eerr, cerr)
			continue
		}
		if myN != 0 || !errors.Is(cerr, client.ErrAborted) {
			t.Errorf("rows %v: Commit = %v with row %d on both databases, want ErrAborted and nothing", viaRows, cerr, id)
		}
		if !errors.Is(eerr, client.ErrBranchFailed) {
			t.Errorf("rows %v: the statement after the deadlock answered %v, want ErrBranchFailed (not sent)", viaRows, eerr)
		}
	}
}

func mustExec(t *testing.T, c *sql.Conn, q string) {
	t.Helper()
	if _, err := c.ExecContext(context.Background(), q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}
