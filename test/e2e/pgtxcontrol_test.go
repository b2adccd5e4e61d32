package e2e

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tandem-tx/tandem/client"
	"github.com/tandem-tx/tandem/internal/testhook"
)

// Transaction-control text on a PostgreSQL branch (COMMIT, END, ROLLBACK,
// …, alone or after another statement) would end the branch's transaction
// before the decision: its writes committed early (or rolled back, and the
// next statements autocommitted), and PREPARE TRANSACTION then answers
// ROLLBACK, so the other branches roll back: a split. The SDK refuses such
// text before it is sent; the transaction rolls back whole.
func TestPostgresBranchRefusesTransactionControl(t *testing.T) {
	d := openDBs(t)
	d.table(t, "e2e_pg_txctl")
	cli := cpClient(t, d)
	ctx := context.Background()
	// Before the fix, PREPARE TRANSACTION 'x' prepared the branch's writes under that name.
	t.Cleanup(func() { _, _ = d.pg.ExecContext(ctx, "ROLLBACK PREPARED 'x'") })
	stmts := []string{
		"COMMIT",
		"end",
		"INSERT INTO e2e_pg_txctl (id, v) VALUES (1000, 'y'); COMMIT",
		"ROLLBACK; INSERT INTO e2e_pg_txctl (id, v) VALUES (1000, 'y')",
		"ABORT",
		"COMMIT AND CHAIN",
		"/* x */ BEGIN",
		"START TRANSACTION",
		"PREPARE TRANSACTION 'x'",
		"SELECT 1; commit work",
	}
	for i, stmt := range stmts {
		for _, viaPgx := range []bool{false, true} {
			id := 2*i + 1
			if viaPgx {
				id++
			}
			pc, mc := conns(t, d)
			tx := cli.Begin()
			bm, err := tx.Branch(ctx, "maria", mc)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := bm.ExecContext(ctx, "INSERT INTO e2e_pg_txctl (id, v) VALUES (?, 'x')", id); err != nil {
				t.Fatal(err)
			}
			var runErr error
			if viaPgx {
				px := pgxConn(t, "")
				bp, err := tx.BranchPgx(ctx, "pg", px)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := bp.Exec(ctx, "INSERT INTO e2e_pg_txctl (id, v) VALUES ($1, 'x')", id); err != nil {
					t.Fatal(err)
				}
				_, runErr = bp.Exec(ctx, stmt)
			} else {
				bp, err := tx.Branch(ctx, "pg", pc)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := bp.ExecContext(ctx, "INSERT INTO e2e_pg_txctl (id, v) VALUES ($1, 'x')", id); err != nil {
					t.Fatal(err)
				}
				_, runErr = bp.ExecContext(ctx, stmt)
			}
			_, err = tx.Commit(ctx)
			pgN, myN := d.count(t, d.pg, "e2e_pg_txctl", id), d.count(t, d.my, "e2e_pg_txctl", id)
			if pgN != myN {
				t.Errorf("%q (pgx %v): split: PostgreSQL has %d row(s), MariaDB %d (statement: %v; Commit: %v)", stmt, viaPgx, pgN, myN, runErr, err)
				continue
			}
			if runErr == nil || !strings.Contains(runErr.Error(), "transaction control") {
				t.Errorf("%q (pgx %v): statement answered %v, want refused as transaction control", stmt, viaPgx, runErr)
			}
			if !errors.Is(err, client.ErrAborted) || pgN != 0 {
				t.Errorf("%q (pgx %v): Commit = %v with %d rows, want ErrAborted and nothing anywhere", stmt, viaPgx, err, pgN)
			}
		}
	}
	if n := d.count(t, d.pg, "e2e_pg_txctl", 1000); n != 0 {
		t.Errorf("a statement after ROLLBACK ran outside the transaction: %d row(s) 1000 on PostgreSQL", n)
	}
}

// With the text check bypassed (testhook), the backend's transaction
// status is the backstop: once a branch is outside its transaction block
// (a ROLLBACK ended it), nothing more is sent on it — the next statement
// would autocommit — and the transaction is doomed: Commit rolls back
// everywhere, with an error saying why.
func TestPostgresBranchOutsideItsTransactionIsDoomed(t *testing.T) {
	d := openDBs(t)
	d.table(t, "e2e_pg_txstatus")
	cli := cpClient(t, d)
	ctx := context.Background()
	testhook.SkipStatementChecks.Store(true)
	t.Cleanup(func() { testhook.SkipStatementChecks.Store(false) })
	for id, viaPgx := range []bool{false, true} {
		pc, mc := conns(t, d)
		var px *pgx.Conn
		if viaPgx {
			px = pgxConn(t, "")
		}
		tx := cli.Begin()
		bm, _ := tx.Branch(ctx, "maria", mc)
		if _, err := bm.ExecContext(ctx, "INSERT INTO e2e_pg_txstatus (id, v) VALUES (?, 'x')", id); err != nil {
			t.Fatal(err)
		}
		exec := func(q string, args ...any) error {
			if viaPgx {
				bp, err := tx.BranchPgx(ctx, "pg", px)
				if err != nil {
					return err
				}
				_, err = bp.Exec(ctx, q, args...)
				return err
			}
			bp, err := tx.Branch(ctx, "pg", pc)
			if err != nil {
				return err
			}
			_, err = bp.ExecContext(ctx, q, args...)
			return err
		}
		if err := exec("INSERT INTO e2e_pg_txstatus (id, v) VALUES ($1, 'x')", id); err != nil {
			t.Fatal(err)
		}
		err1 := exec("ROLLBACK")
		err2 := exec("INSERT INTO e2e_pg_txstatus (id, v) VALUES (100+$1, 'x')", id)
		_, cerr := tx.Commit(ctx)
		if n := d.count(t, d.pg, "e2e_pg_txstatus", 100+id); n != 0 {
			t.Errorf("pgx %v: the statement after ROLLBACK autocommitted (row %d on PostgreSQL; it answered %v)", viaPgx, 100+id, err2)
		}
		if err1 == nil || !strings.Contains(err1.Error(), "outside its transaction") {
			t.Errorf("pgx %v: ROLLBACK answered %v, want the branch reported outside its transaction", viaPgx, err1)
		}
		if !errors.Is(cerr, client.ErrAborted) {
			t.Errorf("pgx %v: Commit = %v, want ErrAborted", viaPgx, cerr)
		}
		if pgN, myN := d.count(t, d.pg, "e2e_pg_txstatus", id), d.count(t, d.my, "e2e_pg_txstatus", id); pgN != 0 || myN != 0 {
			t.Errorf("pgx %v: PostgreSQL has %d row(s), MariaDB %d; want none", viaPgx, pgN, myN)
		}
	}
}
