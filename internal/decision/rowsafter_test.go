package decision

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/xid"
)

// insertRows inserts a 'C' row, decided age ago, for each of gs, in
// multi-row INSERTs.
func (e *dbEnv) insertRows(t *testing.T, ctx context.Context, age time.Duration, gs []xid.GTRID) {
	t.Helper()
	at := e.tab.ago(e.d, age)
	for len(gs) > 0 {
		batch := gs[:min(len(gs), 1000)]
		gs = gs[len(batch):]
		vals := make([]string, len(batch))
		for i, g := range batch {
			vals[i] = "(" + literal(g) + ", 'C', " + at + ", " + at + ")"
		}
		if _, err := e.db.ExecContext(ctx, "INSERT INTO "+e.tab.name+" (gtrid, outcome, began_at, decided_at) VALUES "+strings.Join(vals, ", ")); err != nil {
			t.Fatal(err)
		}
	}
}

func gtridsOf(rows []Row) []xid.GTRID {
	out := make([]xid.GTRID, len(rows))
	for i, r := range rows {
		out[i] = r.GTRID
	}
	return out
}

// RowsAfter lists the rows old enough whose gtrid is after the one given, in
// the order of GTRID.String (the sweep's cursor relies on it: digits before
// letters, byte by byte), RowsLimit at most; paging by the last gtrid of a
// full page reads every row once, and the page after the end is empty.
func TestRowsAfter(t *testing.T) {
	forEachDB(t, func(t *testing.T, e *dbEnv) {
		ctx := testCtx(t)
		// First bytes on both sides of the digit/letter boundary of hex.
		var old []xid.GTRID
		for _, b := range []byte{0xff, 0x0a, 0xa0, 0x9f, 0x10} {
			g := xid.New()
			g[0] = b
			old = append(old, g)
		}
		young := xid.New()
		young[0] = 0x50
		e.insertRows(t, ctx, 2*time.Hour, old)
		e.insertRows(t, ctx, 0, []xid.GTRID{young})
		sorted := slices.Clone(old)
		slices.SortFunc(sorted, func(a, b xid.GTRID) int { return strings.Compare(a.String(), b.String()) })
		for _, c := range []struct {
			after xid.GTRID
			want  []xid.GTRID
		}{
			{xid.GTRID{}, sorted},
			{sorted[0], sorted[1:]},
			{sorted[2], sorted[3:]},
			{young, sorted[2:]}, // 0x50: a gtrid not old enough (or not in the table) is a place in the order
			{sorted[4], nil},
		} {
			rows, err := e.tab.rowsAfter(ctx, e.db, e.d, time.Hour, c.after)
			if err != nil {
				t.Fatal(err)
			}
			if got := gtridsOf(rows); !slices.Equal(got, c.want) {
				t.Errorf("RowsAfter(%s) = %v, want %v", c.after, got, c.want)
			}
		}

		// RowsLimit+1 rows: a full page, then the one row after it.
		many := make([]xid.GTRID, RowsLimit+1-len(old))
		for i := range many {
			many[i] = xid.New()
		}
		e.insertRows(t, ctx, 2*time.Hour, many)
		seen := map[xid.GTRID]int{}
		var after xid.GTRID
		var pages []int
		for len(pages) < 3 {
			rows, err := e.tab.rowsAfter(ctx, e.db, e.d, time.Hour, after)
			if err != nil {
				t.Fatal(err)
			}
			pages = append(pages, len(rows))
			for i, r := range rows {
				seen[r.GTRID]++
				if i > 0 && rows[i-1].GTRID.String() >= r.GTRID.String() {
					t.Fatalf("RowsAfter(%s): %s after %s, want gtrid order", after, r.GTRID, rows[i-1].GTRID)
				}
			}
			if len(rows) < RowsLimit {
				break
			}
			after = rows[len(rows)-1].GTRID
		}
		if !slices.Equal(pages, []int{RowsLimit, 1}) || len(seen) != RowsLimit+1 {
			t.Errorf("pages of %v rows, %d distinct; want [%d 1] and %d: every old row once", pages, len(seen), RowsLimit, RowsLimit+1)
		}
		if seen[young] != 0 {
			t.Errorf("the young row was listed")
		}
	})
}
