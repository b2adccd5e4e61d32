package e2e

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tandem-tx/tandem/client"
	"github.com/tandem-tx/tandem/internal/testhook"
)

// endsCorpus reads the statements marked "ends" in
// api/testdata/implicit-commit.txt (the corpus the SDKs' classifiers are
// tested with).
func endsCorpus(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "api", "testdata", "implicit-commit.txt"))
	if err != nil {
		t.Fatal(err)
	}
	unescape := strings.NewReplacer(`\\`, `\`, `\n`, "\n", `\t`, "\t")
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if stmt, ok := strings.CutPrefix(line, "ends "); ok {
			out = append(out, unescape.Replace(strings.TrimLeft(stmt, " ")))
		}
	}
	return out
}

// On a MariaDB commit point, every statement of the corpus that ends (or
// may end) a transaction is sent with the SDK's classifier bypassed
// (testhook): what keeps the transaction whole is then the database alone.
// Each transaction writes MariaDB, sends the statement there, writes
// PostgreSQL and commits: it must be all or nothing on both databases.
func TestCommitPointCorpusIsAllOrNothingWithoutTheClassifier(t *testing.T) {
	d := openDBs(t)
	d.table(t, "e2e_cp_corpus")
	ctx := context.Background()
	// The corpus's statements name tables t and x, and may create them.
	dropTX := func() {
		for _, tb := range []string{"t", "x"} {
			if _, err := d.my.ExecContext(ctx, "DROP TABLE IF EXISTS "+tb); err != nil {
				t.Fatal(err)
			}
		}
	}
	dropTX()
	t.Cleanup(dropTX)
	cli := cpClient(t, d)
	// The application's MariaDB connections: a pool of its own that keeps
	// none (a statement may change the session: autocommit, isolation).
	my, err := sql.Open("mysql", myDSN)
	if err != nil {
		t.Fatal(err)
	}
	my.SetMaxIdleConns(0)
	t.Cleanup(func() { my.Close() })
	testhook.SkipStatementChecks.Store(true)
	t.Cleanup(func() { testhook.SkipStatementChecks.Store(false) })
	stmts := endsCorpus(t)
	var splits []string
	for i, stmt := range stmts {
		id := i + 1
		pc, err := d.pg.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		mc, err := my.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		tx := cli.Begin()
		bm, _ := tx.Branch(ctx, "maria", mc)
		bp, _ := tx.Branch(ctx, "pg", pc)
		if _, err := bm.ExecContext(ctx, "INSERT INTO e2e_cp_corpus (id, v) VALUES (?, 'x')", id); err != nil {
			t.Fatal(err)
		}
		_, serr := bm.ExecContext(ctx, stmt)
		_, perr := bp.ExecContext(ctx, "INSERT INTO e2e_cp_corpus (id, v) VALUES ($1, 'x')", id)
		res, cerr := tx.Commit(ctx)
		_ = tx.Rollback(ctx)
		pc.Close()
		mc.Close()
		pgN, myN := d.count(t, d.pg, "e2e_cp_corpus", id), d.count(t, d.my, "e2e_cp_corpus", id)
		switch {
		case pgN != myN:
			splits = append(splits, stmt)
			t.Errorf("%q: SPLIT: PostgreSQL has %d row(s), MariaDB %d (statement: %v; Commit: %v)", stmt, pgN, myN, serr, cerr)
		case pgN == 1 && (cerr != nil || res.Path != client.PathCommitPoint):
			t.Errorf("%q: committed on both, but Commit = %+v, %v", stmt, res, cerr)
		case pgN == 0 && !errors.Is(cerr, client.ErrAborted):
			t.Errorf("%q: on neither database, but Commit = %v, want ErrAborted", stmt, cerr)
		default:
			t.Logf("%q: whole (%d on both); statement: %v; PostgreSQL insert: %v; Commit: %v", stmt, pgN, serr, perr, cerr)
		}
	}
	t.Logf("%d of %d statements split the transaction", len(splits), len(stmts))
}
