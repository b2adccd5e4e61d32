package decision

import (
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/xid"
)

// On MariaDB the commit point is an XA branch (docs/ownership.md). These
// check, on the real server, what CommitStatements relies on there.

// forMariaDB runs f on MariaDB only.
func forMariaDB(t *testing.T, f func(t *testing.T, e *dbEnv)) {
	forEachDB(t, func(t *testing.T, e *dbEnv) {
		if e.d != rm.MySQL {
			t.Skip("MariaDB: PostgreSQL's commit point is not an XA branch")
		}
		f(t, e)
	})
}

// beginXA begins a commit point as an XA branch with one scratch write.
func (e *dbEnv) beginXA(t *testing.T) (*cp, string) {
	t.Helper()
	ctx := testCtx(t)
	conn, err := e.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := &cp{e: e, conn: conn, g: xid.New()}
	c.row = "xa-" + c.g.String()
	xa := xid.CommitPointSelf(c.g, "maria", e.id).MySQLXID()
	c.exec(t, ctx, strings.Join(BeginStatements(e.d, xa), "; "))
	c.exec(t, ctx, "INSERT INTO "+e.scratch+" (id) VALUES ('"+c.row+"')")
	return c, xa
}

// Inside XA START the session is in a transaction (@@in_transaction = 1, which
// the age check requires), and the INSERT whose participants come from a
// scalar subquery of the id table works; INSERT, XA END and XA COMMIT … ONE
// PHASE then commit in one multi-statement round trip (with the forget
// DELETE among them), and the branch is never listed by XA RECOVER.
func TestXACommitPointCommitsInOneRoundTrip(t *testing.T) {
	forMariaDB(t, func(t *testing.T, e *dbEnv) {
		ctx := testCtx(t)
		old := e.beginCP(t, ctx)
		if err := old.commit(ctx, time.Hour, nil); err != nil {
			t.Fatal(err)
		}
		e.age(t, ForgetMinAge+time.Second, old.g)
		c, xa := e.beginXA(t)
		var in int
		if err := c.conn.QueryRowContext(ctx, "SELECT @@in_transaction").Scan(&in); err != nil || in != 1 {
			t.Fatalf("@@in_transaction inside XA START = %d (%v), want 1", in, err)
		}
		ps := []Participant{{RM: "pg", Table: xid.NewOwner()}}
		stmts := e.tab.commitStatements(e.d, Commit{GTRID: c.g, Table: e.id, Participants: ps, MaxAge: time.Hour, XA: xa, Forget: []xid.GTRID{old.g}})
		if _, err := c.conn.ExecContext(ctx, strings.Join(stmts, "; ")); err != nil {
			t.Fatalf("the decision in one round trip: %v", err)
		}
		if !e.rowVisible(t, c.row) {
			t.Fatal("the application's write is not committed")
		}
		rows, err := e.tab.rows(ctx, e.db, e.d, -time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if n := e.decisionRows(t, old.g); n != 0 {
			t.Errorf("the forget list's row (older than ForgetMinAge) is still there: %d rows", n)
		}
		if len(rows) != 1 || rows[0].GTRID != c.g || rows[0].Outcome != Committed || rows[0].Participants != FormatParticipants(ps) {
			t.Fatalf("decision rows %+v, want 'C' for %s naming %s", rows, c.g, FormatParticipants(ps))
		}
		if err := c.conn.QueryRowContext(ctx, "SELECT @@in_transaction").Scan(&in); err != nil || in != 0 {
			t.Fatalf("@@in_transaction after XA COMMIT = %d (%v), want 0", in, err)
		}
		if listed(t, e.db, c.g) {
			t.Fatal("XA RECOVER lists the commit point's branch")
		}
	})
}

// An INSERT that fails stops the multi-statement: XA END and XA COMMIT do
// not run, the branch stays ACTIVE with the application's write uncommitted,
// and XA END + XA ROLLBACK end it.
func TestXAFailedInsertStopsTheRoundTrip(t *testing.T) {
	forMariaDB(t, func(t *testing.T, e *dbEnv) {
		ctx := testCtx(t)
		for _, k := range []struct {
			name string
			c    func(g xid.GTRID, xa string) Commit
			why  string
		}{
			{"wrong table", func(g xid.GTRID, xa string) Commit {
				return Commit{GTRID: g, Table: xid.NewOwner(), MaxAge: time.Hour, XA: xa}
			}, RefusedWrongTable},
			{"too old", func(g xid.GTRID, xa string) Commit { return Commit{GTRID: g, Table: e.id, MaxAge: 0, XA: xa} }, RefusedTooOld},
		} {
			c, xa := e.beginXA(t)
			_, err := c.conn.ExecContext(ctx, strings.Join(e.tab.commitStatements(e.d, k.c(c.g, xa)), "; "))
			if why, ok := Refused(err); !ok || why != k.why {
				t.Fatalf("%s: %v (refused %v %q), want %q", k.name, err, ok, why, k.why)
			}
			var in int
			if err := c.conn.QueryRowContext(ctx, "SELECT @@in_transaction").Scan(&in); err != nil || in != 1 {
				t.Fatalf("%s: @@in_transaction after the failed round trip = %d (%v), want 1: XA END/COMMIT ran", k.name, in, err)
			}
			if e.rowVisible(t, c.row) || e.decisionRows(t, c.g) != 0 {
				t.Fatalf("%s: the refused commit point committed something", k.name)
			}
			c.exec(t, ctx, "XA END "+xa)
			c.exec(t, ctx, "XA ROLLBACK "+xa)
			if e.rowVisible(t, c.row) {
				t.Fatalf("%s: the write is visible after XA ROLLBACK", k.name)
			}
		}
	})
}

// Inside the XA branch MariaDB refuses a statement that would commit
// implicitly (XAER_RMFAIL, 1399) and the branch goes on: the guarantee the
// SDK's classifier only makes earlier.
func TestXABranchRefusesImplicitCommit(t *testing.T) {
	forMariaDB(t, func(t *testing.T, e *dbEnv) {
		ctx := testCtx(t)
		c, xa := e.beginXA(t)
		_, err := c.conn.ExecContext(ctx, "CREATE TABLE "+e.scratch+"_x (id int)")
		var m *mysql.MySQLError
		if !errors.As(err, &m) || m.Number != 1399 {
			t.Fatalf("CREATE TABLE inside the XA branch: %v, want error 1399 XAER_RMFAIL", err)
		}
		defer func() { _, _ = e.db.Exec("DROP TABLE IF EXISTS " + e.scratch + "_x") }()
		if e.rowVisible(t, c.row) {
			t.Fatal("the write was committed by the refused statement")
		}
		if _, err := c.conn.ExecContext(ctx, strings.Join(e.tab.commitStatements(e.d, Commit{GTRID: c.g, Table: e.id, MaxAge: time.Hour, XA: xa}), "; ")); err != nil {
			t.Fatalf("the decision after a refused statement: %v", err)
		}
		if !e.rowVisible(t, c.row) {
			t.Fatal("the write is not committed by the decision")
		}
	})
}

// listed reports whether XA RECOVER lists a branch of g.
func listed(t *testing.T, db *sql.DB, g xid.GTRID) bool {
	t.Helper()
	rows, err := db.Query("XA RECOVER")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var f int64
		var gl, bl int
		var data []byte
		if err := rows.Scan(&f, &gl, &bl, &data); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), g.String()) {
			return true
		}
	}
	return false
}
