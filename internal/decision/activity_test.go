package decision

import (
	"testing"
	"time"

	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/xid"
)

// ReadActivity counts each row once, in the read after it is ActivityLag
// old: the first read only sets the cursor; 'C' rows with their
// begin-to-decision time in the right bucket, 'A' rows apart; a row
// decided before the cursor is never counted.
func TestReadActivityCountsEachDecisionOnce(t *testing.T) {
	forEachDB(t, func(t *testing.T, e *dbEnv) {
		ctx := testCtx(t)
		now, ago := "clock_timestamp()", func(ms int) string { return "clock_timestamp() - interval '" + itoa(ms) + " milliseconds'" }
		if e.d == rm.MySQL {
			now = "UTC_TIMESTAMP(6)"
			ago = func(ms int) string { return "UTC_TIMESTAMP(6) - INTERVAL " + itoa(ms*1000) + " MICROSECOND" }
		}
		insert := func(outcome string, began, decided string) {
			t.Helper()
			if _, err := e.db.ExecContext(ctx, "INSERT INTO "+e.tab.name+" (gtrid, outcome, began_at, decided_at) VALUES ("+
				literal(xid.New())+", '"+outcome+"', "+began+", "+decided+")"); err != nil {
				t.Fatal(err)
			}
		}
		insert("C", ago(10_000), ago(9_000)) // before the first read's window ends: never counted
		a, cur, err := e.tab.readActivity(ctx, e.db, e.d, "")
		if err != nil || cur == "" || a.Commits != 0 || a.Aborts != 0 {
			t.Fatalf("first read: %+v cursor %q %v; want nothing counted and a cursor", a, cur, err)
		}
		for range 3 {
			insert("C", ago(3), now) // 3 ms from begin to decision: bucket (2.048, 4.096] ms
		}
		insert("C", ago(600), now) // 600 ms: bucket (524.288, 1048.576] ms
		insert("A", ago(1), now)
		a, cur2, err := e.tab.readActivity(ctx, e.db, e.d, cur)
		if err != nil || a.Commits != 0 {
			t.Fatalf("a read at once: %+v %v; want the new rows not yet counted (younger than ActivityLag)", a, err)
		}
		time.Sleep(ActivityLag + 300*time.Millisecond)
		a, cur3, err := e.tab.readActivity(ctx, e.db, e.d, cur2)
		if err != nil {
			t.Fatal(err)
		}
		b := a.BeganToDecided
		if a.Commits != 4 || a.Aborts != 1 || b.Count != 4 || b.Buckets[12] != 3 || b.Buckets[20] != 1 {
			t.Fatalf("read past the lag: commits %d aborts %d, histogram count %d buckets[12]=%d buckets[20]=%d; want 4, 1, 4, 3, 1 (%+v)",
				a.Commits, a.Aborts, b.Count, b.Buckets[12], b.Buckets[20], b)
		}
		if b.Max < 590*time.Millisecond || b.Max > 700*time.Millisecond || b.Total < b.Max {
			t.Errorf("max %v total %v; want about 600 ms and more", b.Max, b.Total)
		}
		a, _, err = e.tab.readActivity(ctx, e.db, e.d, cur3)
		if err != nil || a.Commits != 0 || a.Aborts != 0 {
			t.Errorf("the read after: %+v %v; want nothing counted twice", a, err)
		}
	})
}

// ReadState counts the rows by outcome, the oldest 'C' row's age and the
// 'C' rows past ForgetMinAge.
func TestReadStateOfADecisionTable(t *testing.T) {
	forEachDB(t, func(t *testing.T, e *dbEnv) {
		ctx := testCtx(t)
		s, err := e.tab.readState(ctx, e.db, e.d)
		if err != nil || s != (TableState{}) {
			t.Fatalf("empty table: %+v %v", s, err)
		}
		ago := func(s int) string { return "clock_timestamp() - interval '" + itoa(s) + " seconds'" }
		if e.d == rm.MySQL {
			ago = func(s int) string { return "UTC_TIMESTAMP(6) - INTERVAL " + itoa(s) + " SECOND" }
		}
		for _, r := range []struct {
			o   string
			age int
		}{{"C", 100}, {"C", 40}, {"C", 1}, {"A", 50}} {
			if _, err := e.db.ExecContext(ctx, "INSERT INTO "+e.tab.name+" (gtrid, outcome, began_at, decided_at) VALUES ("+
				literal(xid.New())+", '"+r.o+"', "+ago(r.age+1)+", "+ago(r.age)+")"); err != nil {
				t.Fatal(err)
			}
		}
		s, err = e.tab.readState(ctx, e.db, e.d)
		if err != nil || s.CRows != 3 || s.ARows != 1 || s.CKept != 2 || s.OldestC < 99*time.Second || s.OldestC > 110*time.Second {
			t.Fatalf("state %+v %v; want 3 C rows, 1 A row, 2 kept past %s, the oldest 100 s", s, err, ForgetMinAge)
		}
	})
}
