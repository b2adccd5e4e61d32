package coord

import (
	"testing"
	"time"
)

// TestUnfinishedListsOldestFirst: with both databases down every decision
// stays unfinished; Unfinished lists them oldest first, cut at the limit,
// with the total, and says which branch has not acknowledged and why.
func TestUnfinishedListsOldestFirst(t *testing.T) {
	c := open(t, testOptions(t.TempDir()))
	var gs []string
	for range 3 {
		g := newGTRID()
		mustCommit(t, c, g, Committed)
		gs = append(gs, g)
		time.Sleep(2 * time.Millisecond) // distinct decision times
	}
	list, total := c.Unfinished(2)
	if total != 3 || len(list) != 2 {
		t.Fatalf("Unfinished(2) = %d listed, total %d; want 2 of 3", len(list), total)
	}
	if list[0].GTRID != gs[0] || list[1].GTRID != gs[1] {
		t.Errorf("Unfinished(2) lists %s, %s; want the oldest two %s, %s", list[0].GTRID, list[1].GTRID, gs[0], gs[1])
	}
	if list[0].Outcome != "COMMITTED" || len(list[0].Branches) != 2 {
		t.Fatalf("first unfinished: outcome %s, %d branches; want COMMITTED with 2", list[0].Outcome, len(list[0].Branches))
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		list, _ = c.Unfinished(1)
		b := list[0].Branches[0]
		if b.State == BranchPending && b.LastError != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("branch %s: state %s, last error %q; want pending with the RM's error", b.RM, b.State, b.LastError)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if l, n := c.Unfinished(0); len(l) != 0 || n != 3 {
		t.Errorf("Unfinished(0) = %d listed, total %d; want none of 3", len(l), n)
	}
}
