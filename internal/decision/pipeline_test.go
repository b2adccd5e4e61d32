package decision

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/xid"
)

// A pipelined INSERT that fails never commits: the statements after it in
// the same round trip do not run (the forget DELETE leaves its row, the
// COMMIT does not happen), and the application's write never becomes
// visible. On PostgreSQL the session is left in an aborted transaction,
// whose COMMIT is a rollback; on MariaDB the transaction is still open and
// must be rolled back.
func TestFailedPipelinedInsertNeverCommits(t *testing.T) {
	forEachDB(t, func(t *testing.T, e *dbEnv) {
		ctx := testCtx(t)
		// A committed 'C' the failing commit would forget.
		old := e.beginCP(t, ctx)
		if err := old.commit(ctx, time.Hour, nil); err != nil {
			t.Fatal(err)
		}
		c := e.beginCP(t, ctx)
		if o, err := e.tab.resolve(ctx, e.db, e.d, c.g, e.id, time.Second); err != nil || o != Aborted {
			t.Fatalf("Resolve: %v %v", o, err)
		}
		if _, ok := Refused(c.commit(ctx, time.Hour, []xid.GTRID{old.g})); !ok {
			t.Fatal("the commit was not refused")
		}
		if n := e.decisionRows(t, old.g); n != 1 {
			t.Fatalf("the DELETE after the failed INSERT ran: %d rows for the forgotten gtrid, want 1", n)
		}
		if e.rowVisible(t, c.row) {
			t.Fatal("the application's write is visible after the failed pipeline")
		}
		if e.d == rm.Postgres {
			_, err := c.conn.ExecContext(ctx, "SELECT 1")
			if err == nil || !strings.Contains(err.Error(), "25P02") {
				t.Fatalf("a statement after the failed pipeline: %v, want 25P02 (in failed transaction)", err)
			}
			// Even a COMMIT now only ends the aborted transaction (its
			// command tag is ROLLBACK): the write stays absent below.
			c.exec(t, ctx, "COMMIT")
		} else {
			var in int
			if err := c.conn.QueryRowContext(ctx, "SELECT @@in_transaction").Scan(&in); err != nil || in != 1 {
				t.Fatalf("@@in_transaction = %d %v, want 1 (the transaction is still open)", in, err)
			}
			c.exec(t, ctx, "ROLLBACK")
		}
		if e.rowVisible(t, c.row) {
			t.Fatal("the application's write is committed")
		}
		if o, _ := e.lookupMust(t, c.g); o != Aborted {
			t.Fatalf("outcome %v, want abort", o)
		}
	})
}

// A successful commit forgets exactly the 'C' rows it is given that are
// ForgetMinAge old: a younger one stays.
func TestCommitForgetsItsList(t *testing.T) {
	forEachDB(t, func(t *testing.T, e *dbEnv) {
		ctx := testCtx(t)
		var done []xid.GTRID
		for range 3 {
			c := e.beginCP(t, ctx)
			if err := c.commit(ctx, time.Hour, nil); err != nil {
				t.Fatal(err)
			}
			done = append(done, c.g)
		}
		aborted := xid.New()
		if o, err := e.tab.resolve(ctx, e.db, e.d, aborted, e.id, time.Second); err != nil || o != Aborted {
			t.Fatal(o, err)
		}
		e.age(t, ForgetMinAge+time.Second, done[0], done[1], aborted)
		c := e.beginCP(t, ctx)
		if err := c.commit(ctx, time.Hour, []xid.GTRID{done[0], done[1], done[2], aborted, xid.New()}); err != nil {
			t.Fatalf("commit with a forget list: %v", err)
		}
		// done[2] is younger than ForgetMinAge: kept.
		for g, want := range map[xid.GTRID]int{done[0]: 0, done[1]: 0, done[2]: 1, aborted: 1, c.g: 1} {
			if n := e.decisionRows(t, g); n != want {
				t.Errorf("gtrid %s: %d rows, want %d", g, n, want)
			}
		}
	})
}

// Forget deletes 'C' rows only; SweepAborts deletes 'A' rows older than the
// keep time only; Rows lists the rows older than its age.
func TestForgetAndSweep(t *testing.T) {
	forEachDB(t, func(t *testing.T, e *dbEnv) {
		ctx := testCtx(t)
		ins := func(o Outcome, age time.Duration) xid.GTRID {
			g := xid.New()
			at := e.tab.ago(e.d, age)
			if _, err := e.db.ExecContext(ctx, "INSERT INTO "+e.tab.name+" (gtrid, outcome, began_at, decided_at) VALUES ("+
				literal(g)+", '"+string(rune(o))+"', "+at+", "+at+")"); err != nil {
				t.Fatal(err)
			}
			return g
		}
		cOld, cNew := ins(Committed, 2*time.Hour), ins(Committed, 0)
		aOld, aNew := ins(Aborted, 2*time.Hour), ins(Aborted, 0)
		rows, err := e.tab.rows(ctx, e.db, e.d, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		got := map[xid.GTRID]Outcome{}
		for _, r := range rows {
			got[r.GTRID] = r.Outcome
			if d := time.Since(r.DecidedAt); d < 2*time.Hour-time.Minute || d > 2*time.Hour+time.Minute {
				t.Errorf("row %s decided %s ago, want about 2h (times are UTC)", r.GTRID, d)
			}
		}
		if len(got) != 2 || got[cOld] != Committed || got[aOld] != Aborted {
			t.Errorf("Rows(older than 1h) = %+v, want the two old rows", rows)
		}
		n, err := e.tab.forget(ctx, e.db, e.d, []xid.GTRID{cOld, cNew, aOld, aNew, xid.New()})
		if err != nil || n != 1 {
			t.Fatalf("Forget = %d %v, want 1 (only the old 'C' row: the other is younger than ForgetMinAge)", n, err)
		}
		n, err = e.tab.sweepAborts(ctx, e.db, e.d, time.Hour)
		if err != nil || n != 1 {
			t.Fatalf("SweepAborts = %d %v, want 1 (only the old 'A' row)", n, err)
		}
		for g, want := range map[xid.GTRID]int{cOld: 0, cNew: 1, aOld: 0, aNew: 1} {
			if n := e.decisionRows(t, g); n != want {
				t.Errorf("gtrid %s: %d rows, want %d", g, n, want)
			}
		}
		// A batch longer than ForgetBatch.
		many := make([]xid.GTRID, ForgetBatch+5)
		for i := range many {
			many[i] = xid.New()
		}
		e.age(t, ForgetMinAge+time.Second, cNew)
		many[ForgetBatch+2] = cNew
		if n, err := e.tab.forget(ctx, e.db, e.d, many); err != nil || n != 1 {
			t.Fatalf("Forget of %d gtrids = %d %v, want 1", len(many), n, err)
		}
	})
}

// SweepAborts must not wait for an open commit point's transaction: on
// InnoDB a DELETE that scans the table locks every row it reads, so it
// would wait for the uncommitted 'C' (up to the lock wait timeout) while its
// own locks block every commit point's and recoverer's INSERT.
func TestSweepDoesNotWaitForAnOpenCommitPoint(t *testing.T) {
	forEachDB(t, func(t *testing.T, e *dbEnv) {
		ctx := testCtx(t)
		old := xid.New()
		at := e.tab.ago(e.d, 2*time.Hour)
		if _, err := e.db.ExecContext(ctx, "INSERT INTO "+e.tab.name+" (gtrid, outcome, began_at, decided_at) VALUES ("+
			literal(old)+", 'A', "+at+", "+at+")"); err != nil {
			t.Fatal(err)
		}
		c := e.beginCP(t, ctx)
		c.insertC(t, ctx) // holds its key, uncommitted
		sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		start := time.Now()
		n, err := e.tab.sweepAborts(sctx, e.db, e.d, time.Hour)
		t.Logf("%s: SweepAborts with a commit point open took %s", e.name, fmtDur(time.Since(start)))
		if err != nil || n != 1 {
			t.Fatalf("SweepAborts with a commit point open = %d, %v; want 1 and no wait", n, err)
		}
		if _, err := c.conn.ExecContext(ctx, "COMMIT"); err != nil {
			t.Fatal(err)
		}
		if o, ok := e.lookupMust(t, c.g); !ok || o != Committed {
			t.Errorf("the commit point's row: %v %v, want 'C'", o, ok)
		}
	})
}

// Forgetting and sweeping must not wait for an open commit point's
// transaction, whatever plan the database picks: on a small table InnoDB's
// optimizer reads a DELETE … WHERE gtrid IN (most of the table) as a full
// scan, which locks every row it reads, so it waits for the uncommitted 'C'
// (up to the lock wait timeout, 50 s by default, and on after the client
// gives up) while its own locks block every commit point's and
// recoverer's INSERT meanwhile. Likewise a commit point that forgets
// earlier rows in its own transaction must not wait for another one.
func TestForgetDoesNotWaitForAnOpenCommitPoint(t *testing.T) {
	forEachDB(t, func(t *testing.T, e *dbEnv) {
		ctx := testCtx(t)
		old := func(o Outcome, n int) []xid.GTRID {
			var gs []xid.GTRID
			at := e.tab.ago(e.d, 2*time.Hour)
			for range n {
				g := xid.New()
				if _, err := e.db.ExecContext(ctx, "INSERT INTO "+e.tab.name+" (gtrid, outcome, began_at, decided_at) VALUES ("+
					literal(g)+", '"+string(rune(o))+"', "+at+", "+at+")"); err != nil {
					t.Fatal(err)
				}
				gs = append(gs, g)
			}
			return gs
		}
		// commits is a full batch: at MariaDB's in_predicate_conversion_threshold
		// (1000 by default) an IN list becomes a subquery and the DELETE scans
		// the whole table, FORCE INDEX or not.
		commits, aborts, mine := old(Committed, ForgetBatch), old(Aborted, 6), old(Committed, 6)
		open := e.beginCP(t, ctx)
		open.insertC(t, ctx) // holds its key, uncommitted
		wait := func(what string, f func(context.Context) (int64, error), want int64) {
			t.Helper()
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			start := time.Now()
			n, err := f(sctx)
			t.Logf("%s: %s with a commit point open took %s", e.name, what, fmtDur(time.Since(start)))
			if err != nil || n != want {
				t.Fatalf("%s with a commit point open = %d, %v; want %d and no wait for its lock", what, n, err, want)
			}
		}
		wait("Forget", func(c context.Context) (int64, error) { return e.tab.forget(c, e.db, e.d, commits) }, int64(len(commits)))
		wait("SweepAborts", func(c context.Context) (int64, error) { return e.tab.sweepAborts(c, e.db, e.d, time.Hour) }, int64(len(aborts)))
		other := e.beginCP(t, ctx)
		wait("a commit forgetting earlier rows", func(c context.Context) (int64, error) {
			if err := other.commit(c, time.Hour, mine); err != nil {
				return 0, err
			}
			return int64(len(mine)), nil
		}, int64(len(mine)))
		for _, g := range append(append(commits, aborts...), mine...) {
			if n := e.decisionRows(t, g); n != 0 {
				t.Errorf("gtrid %s: %d decision rows left, want 0", g, n)
			}
		}
		if _, err := open.conn.ExecContext(ctx, "COMMIT"); err != nil {
			t.Fatal(err)
		}
		if o, ok := e.lookupMust(t, open.g); !ok || o != Committed {
			t.Errorf("the open commit point's row: %v %v, want 'C'", o, ok)
		}
	})
}

// A forget or a sweep meeting a row another transaction holds gives up after
// gcLockWait, with an error that says so, and holds nothing afterwards: its
// DELETE would otherwise wait (up to the lock wait timeout, and on at the
// server after the client gave up) holding the locks it took meanwhile,
// which can block commit points' and recoverers' INSERTs of nearby keys.
func TestForgetWaitsForALockedRowAtMostItsBound(t *testing.T) {
	forEachDB(t, func(t *testing.T, e *dbEnv) {
		ctx := testCtx(t)
		at := e.tab.ago(e.d, 2*time.Hour)
		c, a := xid.New(), xid.New()
		for g, o := range map[xid.GTRID]string{c: "C", a: "A"} {
			if _, err := e.db.ExecContext(ctx, "INSERT INTO "+e.tab.name+" (gtrid, outcome, began_at, decided_at) VALUES ("+
				literal(g)+", '"+o+"', "+at+", "+at+")"); err != nil {
				t.Fatal(err)
			}
		}
		holder, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Rollback()
		if _, err := holder.ExecContext(ctx, "SELECT gtrid FROM "+e.tab.name+" WHERE gtrid IN "+inList([]xid.GTRID{c, a})+" FOR UPDATE"); err != nil {
			t.Fatal(err)
		}
		for what, f := range map[string]func(context.Context) (int64, error){
			"Forget":      func(ctx context.Context) (int64, error) { return e.tab.forget(ctx, e.db, e.d, []xid.GTRID{c}) },
			"SweepAborts": func(ctx context.Context) (int64, error) { return e.tab.sweepAborts(ctx, e.db, e.d, time.Hour) },
		} {
			wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			start := time.Now()
			n, err := f(wctx)
			cancel()
			t.Logf("%s: %s with its row locked: %d, %v after %s", e.name, what, n, err, fmtDur(time.Since(start)))
			if !isLockTimeout(err) || !strings.Contains(err.Error(), "was not granted within") {
				t.Fatalf("%s with its row locked = %d, %v; want the lock wait timeout (1s), said as such", what, n, err)
			}
		}
		if err := holder.Rollback(); err != nil {
			t.Fatal(err)
		}
		if n, err := e.tab.forget(ctx, e.db, e.d, []xid.GTRID{c}); err != nil || n != 1 {
			t.Fatalf("Forget once the row is free = %d, %v; want 1", n, err)
		}
		if n, err := e.tab.sweepAborts(ctx, e.db, e.d, time.Hour); err != nil || n != 1 {
			t.Fatalf("SweepAborts once the row is free = %d, %v; want 1", n, err)
		}
	})
}

// The bound holds for a lock on the whole table too (an operator's LOCK
// TABLES, an ALTER, a backup stage): on MariaDB those are metadata locks,
// whose wait is lock_wait_timeout (a day by default), not
// innodb_lock_wait_timeout.
func TestForgetWaitsForALockedTableAtMostItsBound(t *testing.T) {
	forEachDB(t, func(t *testing.T, e *dbEnv) {
		ctx := testCtx(t)
		conn, err := e.db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		lock, unlock := "LOCK TABLES "+e.tab.name+" WRITE", "UNLOCK TABLES"
		if e.d == rm.Postgres {
			lock, unlock = "BEGIN; LOCK TABLE "+e.tab.name+" IN ACCESS EXCLUSIVE MODE", "ROLLBACK"
		}
		if _, err := conn.ExecContext(ctx, lock); err != nil {
			t.Fatal(err)
		}
		defer conn.ExecContext(ctx, unlock) //nolint:errcheck // the test's end
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		start := time.Now()
		n, err := e.tab.forget(wctx, e.db, e.d, []xid.GTRID{xid.New()})
		t.Logf("%s: Forget with the table locked: %d, %v after %s", e.name, n, err, fmtDur(time.Since(start)))
		if err == nil || wctx.Err() != nil {
			t.Fatalf("Forget with the table locked = %d, %v after %s; want a lock wait error within its 1 s bound", n, err, fmtDur(time.Since(start)))
		}
	})
}
