package decision

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/xid"
)

// A commit point commits: its decision row and its application write are
// both committed, in one round trip. The shared databases are durable.
func TestCommitPointCommits(t *testing.T) {
	forEachDB(t, func(t *testing.T, e *dbEnv) {
		ctx := testCtx(t)
		if err := CheckDurable(ctx, e.db, e.d); err != nil {
			t.Fatalf("CheckDurable: %v", err)
		}
		c := e.beginCP(t, ctx)
		if err := c.commit(ctx, time.Hour, nil); err != nil {
			t.Fatalf("commit: %v", err)
		}
		if o, found := e.lookupMust(t, c.g); !found || o != Committed {
			t.Fatalf("Lookup = %v %v, want commit", o, found)
		}
		if !e.rowVisible(t, c.row) {
			t.Fatal("the application's write is not committed")
		}
		rows, err := e.tab.rows(ctx, e.db, e.d, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 1 || rows[0].GTRID != c.g || rows[0].Outcome != Committed || rows[0].DecidedAt.Before(rows[0].BeganAt) ||
			time.Since(rows[0].BeganAt).Abs() > time.Minute {
			t.Fatalf("Rows = %+v, want one commit of %s begun about now and decided after it began", rows, c.g)
		}
		// Resolve after the fact reads the commit.
		if o, err := e.tab.resolve(ctx, e.db, e.d, c.g, e.id, time.Second); err != nil || o != Committed {
			t.Fatalf("Resolve after the commit: %v %v, want commit", o, err)
		}
		if n := e.decisionRows(t, c.g); n != 1 {
			t.Fatalf("%d rows for the gtrid, want 1", n)
		}
	})
}

// Order 1: the commit point's 'C' is inserted but not committed when a
// recoverer inserts 'A': the recoverer waits for the commit point's
// transaction, then reads its outcome — commit if it commits; if it rolls
// back, the recoverer's own insert goes through and the outcome is abort.
func TestResolveWaitsForTheOpenCommitPoint(t *testing.T) {
	for _, commits := range []bool{true, false} {
		name := map[bool]string{true: "commit point commits", false: "commit point rolls back"}[commits]
		t.Run(name, func(t *testing.T) {
			forEachDB(t, func(t *testing.T, e *dbEnv) {
				ctx := testCtx(t)
				c := e.beginCP(t, ctx)
				c.insertC(t, ctx)
				res := e.resolveAsync(ctx, c.g, 30*time.Second)
				e.waitForLockWait(t, ctx)
				notYet(t, res, "Resolve")
				want := Aborted
				if commits {
					want = Committed
					c.exec(t, ctx, "COMMIT")
				} else {
					c.exec(t, ctx, "ROLLBACK")
				}
				r := <-res
				if r.err != nil || r.o != want {
					t.Fatalf("Resolve = %v %v, want %v", r.o, r.err, want)
				}
				t.Logf("%s: Resolve blocked, then returned %v %s after it started", e.name, r.o, fmtDur(r.at))
				if o, found := e.lookupMust(t, c.g); !found || o != want {
					t.Fatalf("Lookup = %v %v, want %v", o, found, want)
				}
				if e.rowVisible(t, c.row) != commits {
					t.Fatalf("application write committed = %v, want %v", !commits, commits)
				}
			})
		})
	}
}

// Order 2: a recoverer's 'A' is committed first; the commit point's
// pipelined commit is then refused (duplicate key), and nothing of its
// transaction commits.
func TestResolveFirstRefusesTheCommitPoint(t *testing.T) {
	forEachDB(t, func(t *testing.T, e *dbEnv) {
		ctx := testCtx(t)
		c := e.beginCP(t, ctx)
		if o, err := e.tab.resolve(ctx, e.db, e.d, c.g, e.id, time.Second); err != nil || o != Aborted {
			t.Fatalf("Resolve = %v %v, want abort", o, err)
		}
		err := c.commit(ctx, time.Hour, nil)
		why, ok := Refused(err)
		if !ok || why != RefusedDuplicate {
			t.Fatalf("commit after the abort: %v (refused %v %q), want refused as a duplicate", err, ok, why)
		}
		if e.rowVisible(t, c.row) {
			t.Fatal("the refused commit point's write is visible")
		}
		c.exec(t, ctx, "ROLLBACK")
		if e.rowVisible(t, c.row) {
			t.Fatal("the refused commit point's write is committed")
		}
		if o, found := e.lookupMust(t, c.g); !found || o != Aborted {
			t.Fatalf("Lookup = %v %v, want abort", o, found)
		}
	})
}

// Order 2b: a recoverer's 'A' is inserted but not committed when the commit
// point's INSERT arrives: the commit point waits; when the 'A' commits, it is
// refused and commits nothing. If the recoverer's transaction rolls back
// instead, the commit point commits.
func TestCommitPointWaitsForTheOpenRecoverer(t *testing.T) {
	for _, recovererCommits := range []bool{true, false} {
		name := map[bool]string{true: "recoverer commits", false: "recoverer rolls back"}[recovererCommits]
		t.Run(name, func(t *testing.T) {
			forEachDB(t, func(t *testing.T, e *dbEnv) {
				ctx := testCtx(t)
				c := e.beginCP(t, ctx)
				// The recoverer's statements, held open on a connection.
				rec, err := e.db.Conn(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer rec.Close()
				tx, err := rec.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := tx.ExecContext(ctx, "INSERT INTO "+e.tab.name+" (gtrid, outcome, began_at) VALUES ("+literal(c.g)+", 'A', "+e.tab.ago(e.d, 0)+")"); err != nil {
					t.Fatal(err)
				}
				done := make(chan error, 1)
				start := time.Now()
				go func() { done <- c.commit(ctx, time.Hour, nil) }()
				e.waitForLockWait(t, ctx)
				notYet(t, done, "the commit point's commit")
				if recovererCommits {
					err = tx.Commit()
				} else {
					err = tx.Rollback()
				}
				if err != nil {
					t.Fatal(err)
				}
				err = <-done
				t.Logf("%s: the commit point blocked, then returned %v after %s", e.name, err, fmtDur(time.Since(start)))
				if !recovererCommits {
					if err != nil {
						t.Fatalf("commit after the recoverer rolled back: %v", err)
					}
					if o, _ := e.lookupMust(t, c.g); o != Committed || !e.rowVisible(t, c.row) {
						t.Fatalf("outcome %v, write visible %v: want commit", o, e.rowVisible(t, c.row))
					}
					return
				}
				if why, ok := Refused(err); !ok || why != RefusedDuplicate {
					t.Fatalf("commit: %v, want refused as a duplicate", err)
				}
				c.exec(t, ctx, "ROLLBACK")
				if e.rowVisible(t, c.row) {
					t.Fatal("the refused commit point's write is committed")
				}
				if o, _ := e.lookupMust(t, c.g); o != Aborted {
					t.Fatalf("outcome %v, want abort", o)
				}
			})
		})
	}
}

// Two recoverers on one gtrid at once get the same outcome, and the table
// holds one row: with no commit point in sight, with a commit point that
// commits while they wait, and with one that rolls back while they wait
// (on InnoDB the two waiters then deadlock; the victim tries again).
func TestTwoRecoverersAgree(t *testing.T) {
	for _, cpState := range []string{"no commit point", "commit point commits", "commit point rolls back"} {
		t.Run(cpState, func(t *testing.T) {
			forEachDB(t, func(t *testing.T, e *dbEnv) {
				ctx := testCtx(t)
				g := xid.New()
				var c *cp
				if cpState != "no commit point" {
					c = e.beginCP(t, ctx)
					c.insertC(t, ctx)
					g = c.g
				}
				var wg sync.WaitGroup
				results := make([]result, 2)
				for i := range results {
					wg.Add(1)
					go func() {
						defer wg.Done()
						o, err := e.tab.resolve(ctx, e.db, e.d, g, e.id, 30*time.Second)
						results[i] = result{o: o, err: err}
					}()
				}
				want := Aborted
				if c != nil {
					e.waitForLockWait(t, ctx)
					if cpState == "commit point commits" {
						want = Committed
						c.exec(t, ctx, "COMMIT")
					} else {
						c.exec(t, ctx, "ROLLBACK")
					}
				}
				wg.Wait()
				for i, r := range results {
					if r.err != nil || r.o != want {
						t.Errorf("recoverer %d: %v %v, want %v", i, r.o, r.err, want)
					}
				}
				if n := e.decisionRows(t, g); n != 1 {
					t.Errorf("%d rows for the gtrid, want 1", n)
				}
			})
		})
	}
}

// A commit point that keeps its 'C' uncommitted longer than the lock wait
// makes Resolve answer ErrPending, writing nothing; once it commits, Resolve
// reads the commit.
func TestResolvePendingWhileTheCommitPointIsOpen(t *testing.T) {
	forEachDB(t, func(t *testing.T, e *dbEnv) {
		ctx := testCtx(t)
		c := e.beginCP(t, ctx)
		c.insertC(t, ctx)
		start := time.Now()
		o, err := e.tab.resolve(ctx, e.db, e.d, c.g, e.id, 200*time.Millisecond)
		if !errors.Is(err, ErrPending) {
			t.Fatalf("Resolve = %v %v, want ErrPending", o, err)
		}
		t.Logf("%s: ErrPending after %s (lock wait 200ms asked): %v", e.name, fmtDur(time.Since(start)), err)
		c.exec(t, ctx, "COMMIT")
		if o, err := e.tab.resolve(ctx, e.db, e.d, c.g, e.id, 200*time.Millisecond); err != nil || o != Committed {
			t.Fatalf("Resolve after the commit = %v %v, want commit", o, err)
		}
		if n := e.decisionRows(t, c.g); n != 1 {
			t.Fatalf("%d rows, want 1", n)
		}
	})
}

// A commit point whose transaction began longer than maxAge ago is refused
// and commits nothing; on MySQL a transaction not begun by BeginStatements
// is refused the same way.
func TestAgeCheckRefusesAnOldCommitPoint(t *testing.T) {
	forEachDB(t, func(t *testing.T, e *dbEnv) {
		ctx := testCtx(t)
		c := e.beginCP(t, ctx)
		time.Sleep(1200 * time.Millisecond)
		err := c.commit(ctx, time.Second, nil)
		if why, ok := Refused(err); !ok || why != RefusedTooOld {
			t.Fatalf("commit 1.2 s after begin with max age 1 s: %v, want refused as too old", err)
		}
		c.exec(t, ctx, "ROLLBACK")
		if e.rowVisible(t, c.row) || e.decisionRows(t, c.g) != 0 {
			t.Fatal("the refused commit point committed something")
		}
		// The same age on a young transaction commits.
		y := e.beginCP(t, ctx)
		if err := y.commit(ctx, time.Second, nil); err != nil {
			t.Fatalf("a young commit point: %v", err)
		}
		if e.d == rm.MySQL {
			conn, err := e.db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			n := &cp{e: e, conn: conn, g: xid.New(), row: "plain-" + xid.New().String()}
			n.exec(t, ctx, "SET @tandem_began = NULL") // as in a new session: a pooled one may hold an earlier test's
			n.exec(t, ctx, "START TRANSACTION")
			n.exec(t, ctx, "INSERT INTO "+e.scratch+" (id) VALUES ('"+n.row+"')")
			if why, ok := Refused(n.commit(ctx, time.Hour, nil)); !ok || why != RefusedTooOld {
				t.Fatalf("a transaction not begun by BeginStatements: refused %v %q, want too old", ok, why)
			}
			n.exec(t, ctx, "ROLLBACK")
		}
	})
}

// A session that freezes its clock (MariaDB's SET timestamp, which any
// user may run) must not defeat the age check: the commit point measures
// its age on the server's real clock (SYSDATE), not the session's.
func TestAgeCheckIgnoresAFrozenSessionClock(t *testing.T) {
	forEachDB(t, func(t *testing.T, e *dbEnv) {
		if e.d != rm.MySQL {
			t.Skip("MySQL/MariaDB: PostgreSQL's clock_timestamp() cannot be frozen by a session")
		}
		ctx := testCtx(t)
		conn, err := e.db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		c := &cp{e: e, conn: conn, g: xid.New()}
		c.row = "frozen-" + c.g.String()
		c.exec(t, ctx, "SET timestamp = UNIX_TIMESTAMP()")
		defer func() { _, _ = conn.ExecContext(ctx, "SET timestamp = DEFAULT") }()
		c.exec(t, ctx, strings.Join(BeginStatements(e.d, ""), "; "))
		c.exec(t, ctx, "INSERT INTO "+e.scratch+" (id) VALUES ('"+c.row+"')")
		time.Sleep(1200 * time.Millisecond)
		err = c.commit(ctx, time.Second, nil)
		if why, ok := Refused(err); !ok || why != RefusedTooOld {
			t.Fatalf("commit 1.2 s after begin, max age 1 s, session clock frozen: %v, want refused as too old", err)
		}
		c.exec(t, ctx, "ROLLBACK")
		if e.rowVisible(t, c.row) {
			t.Fatal("the refused commit point committed its write")
		}
	})
}
