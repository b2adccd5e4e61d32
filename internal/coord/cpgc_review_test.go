package coord

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dtable "github.com/tandem-tx/tandem/internal/decision"
	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/xid"
)

// A participant's table id is the sweep's only evidence that the recover
// scan of that RM reached the participant's database. An id remembered from
// an earlier sweep is not that evidence: when pg's DSN reaches another
// database now (failover to a server without the branch, a restored copy
// whose id row is missing), the id read fails and the scan lists nothing —
// the row naming pg must be kept, not forgotten on the old id.
func TestSweepNeedsTheParticipantsIDReadThisSweep(t *testing.T) {
	f, s := newFakeTables(), newSettleLog()
	g := xid.New()
	f.set("maria", g, dtable.Committed)
	f.parts[g] = "pg=" + f.id("pg").String()
	f.old[g] = true
	var moved atomic.Bool // pg's DSN reaches another database, where g has no branch
	opts, _ := cpOptions(t, f, s, func(name string) ([]rm.InDoubt, error) {
		if name == "pg" && !moved.Load() {
			return []rm.InDoubt{{Branch: xid.Branch{GTRID: g, RM: "pg", CommitPoint: "maria", Owner: f.id("maria")}}}, nil
		}
		return nil, nil
	})
	opts.CommitPointSettleAfter = time.Hour // the scan leaves the branch alone
	c := open(t, opts)
	st, err := c.SweepNow(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Kept[KeptPrepared] != 1 {
		t.Fatalf("first sweep: kept %v, want the row kept as %s", st.Kept, KeptPrepared)
	}
	// pg's DSN now reaches a database with no decision-table id, where no
	// branch of g is prepared.
	moved.Store(true)
	f.mu.Lock()
	delete(f.ids, "pg")
	f.mu.Unlock()
	st, err = c.SweepNow(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := f.get("maria", g); !ok {
		t.Fatalf("a 'C' row naming %s was forgotten though pg's table id could not be read this sweep (its scan may have reached another database): sweep %+v", f.parts[g], st)
	}
	if st.Kept[KeptUnanswered] != 1 {
		t.Errorf("sweep kept %v, want the row kept as %s", st.Kept, KeptUnanswered)
	}
}

// A decision row that vanished while the key was taken is an unknown
// outcome, and stays one: the next scan must not find "no row", take the key
// and roll the branch back. (A 'C' row is never forgotten while a branch is
// prepared, and one committed after the read is 30 s from being forgettable:
// a row gone between the key and the read was deleted by something outside
// the rules — a 'C' there means the transaction committed.) The branch is
// held, with its reason, for an operator.
func TestVanishedDecisionIsNotTakenAgainIntoAnAbort(t *testing.T) {
	f, s := newFakeTables(), newSettleLog()
	opts, logs := cpOptions(t, f, s, nil)
	opts.CommitPointSettleAfter = time.Second
	c := openCP(t, opts)
	now := time.Now()
	g := xid.New()
	b := xid.Branch{GTRID: g, RM: "pg", CommitPoint: "maria", Owner: f.id("maria")}
	s.setHeld(b, true)
	f.vanish[g] = true
	c.settleInDoubt(rm.InDoubt{Branch: b}, now)
	c.settleInDoubt(rm.InDoubt{Branch: b}, now.Add(2*time.Second)) // the key: the row vanishes under it
	f.mu.Lock()
	f.vanish[g] = false // the row is gone for good
	f.mu.Unlock()
	c.settleInDoubt(rm.InDoubt{Branch: b}, now.Add(4*time.Second))
	if got := s.got(b); len(got) != 0 {
		t.Fatalf("after its decision row vanished under the key, the next scan settled the branch: settle calls %v (commit?), row now %v; want none: the outcome is unknown", got, f.rows["maria"][g])
	}
	if _, ok := f.get("maria", g); ok {
		t.Errorf("an abort was recorded after the decision row vanished")
	}
	held := c.CommitPointHeld()
	if len(held) != 1 || held[0].Reason != ReasonCPVanished {
		t.Errorf("CommitPointHeld = %+v, want the branch held as %s", held, ReasonCPVanished)
	}
	if !strings.Contains(logs.String(), "OUTCOME UNKNOWN") {
		t.Errorf("no log says the outcome is unknown:\n%s", logs.String())
	}
}

// The participants column is the client's word; the scans are the
// database's. A 'C' row is kept while any RM that answered lists a branch of
// its gtrid, named as a participant or not (an SDK that left one out, a row
// written by hand): forgetting it then would let that branch be aborted by a
// key taken later.
func TestSweepKeepsARowWhileAnyRMHoldsItsGTRID(t *testing.T) {
	f, s := newFakeTables(), newSettleLog()
	f.ids["pg2"] = xid.NewOwner()
	g := xid.New()
	f.set("maria", g, dtable.Committed)
	f.parts[g] = "pg=" + f.id("pg").String() // pg2's branch of g is not named
	f.old[g] = true
	opts, _ := cpOptions(t, f, s, func(name string) ([]rm.InDoubt, error) {
		if name == "pg2" {
			return []rm.InDoubt{{Branch: xid.Branch{GTRID: g, RM: "pg2", CommitPoint: "maria", Owner: f.id("maria")}}}, nil
		}
		return nil, nil
	})
	opts.RMs = append(opts.RMs, rm.Config{Name: "pg2", Driver: rm.Postgres, DSN: "postgres://u:p@127.0.0.1:1/db2"})
	opts.CommitPointSettleAfter = time.Hour // the scan leaves the branch alone
	c := open(t, opts)
	st, err := c.SweepNow(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := f.get("maria", g); !ok {
		t.Fatalf("a 'C' row was forgotten while pg2 lists a prepared branch of its gtrid (not named in its participants %q): sweep %+v", f.parts[g], st)
	}
	if st.Kept[KeptPrepared] != 1 {
		t.Errorf("sweep kept %v, want the row kept as %s", st.Kept, KeptPrepared)
	}
}

// The id a coordinator remembers for a commit point's table is a cache: when
// a branch names another id, the table is read again before the branch is
// held as another table's. A table made again (init-rm after a restore, a
// new id) must not hold its new branches, with an alarm that the DSN reaches
// another schema, until the next sweep happens to re-read it.
func TestCommitPointIDIsReadAgainBeforeHolding(t *testing.T) {
	f, s := newFakeTables(), newSettleLog()
	opts, _ := cpOptions(t, f, s, nil)
	opts.CommitPointSettleAfter = time.Second
	c := openCP(t, opts)
	if _, err := c.tableID(context.Background(), "maria"); err != nil { // remembered
		t.Fatal(err)
	}
	f.mu.Lock()
	f.ids["maria"] = xid.NewOwner() // maria's tables made again
	f.mu.Unlock()
	g := xid.New()
	f.set("maria", g, dtable.Committed)
	b := xid.Branch{GTRID: g, RM: "pg", CommitPoint: "maria", Owner: f.id("maria")}
	now := time.Now()
	c.settleInDoubt(rm.InDoubt{Branch: b}, now)
	c.settleInDoubt(rm.InDoubt{Branch: b}, now.Add(2*time.Second))
	if got := s.got(b); len(got) != 1 || !got[0] {
		t.Errorf("a branch owned by the commit point's table as it is now (the coordinator remembered its old id): settle calls %v, held %+v; want one commit", got, c.CommitPointHeld())
	}
}

// Rows returns at most decision.RowsLimit rows, oldest gtrid first. Rows
// the sweep keeps for ever (a participant no longer configured: an alarm)
// filled that page once there were RowsLimit of them, and no younger row — a
// dead client's, whose branches are all committed — was ever looked at
// again: the table grew while the sweep re-read the same kept rows every
// minute. Each sweep reads the next page (after the last page's last gtrid,
// from the start again after a short page); the kept rows stay counted and
// are read and alarmed again on every pass.
func TestSweepIsNotStarvedByKeptRows(t *testing.T) {
	f, s := newFakeTables(), newSettleLog()
	f.rowsLimit = dtable.RowsLimit
	gone := "gone=" + xid.NewOwner().String()
	for i := 0; i < dtable.RowsLimit; i++ {
		g := xid.NewAt(0, time.Now().Add(-time.Hour))
		f.set("maria", g, dtable.Committed)
		f.parts[g] = gone
		f.old[g] = true
	}
	young := xid.New()
	f.set("maria", young, dtable.Committed)
	f.parts[young] = "pg=" + f.id("pg").String()
	f.old[young] = true
	opts, logs := cpOptions(t, f, s, nil)
	c := open(t, opts)
	// Two pages: two sweeps read them both (Open's own sweep may have read
	// the first).
	for i := 0; i < 2; i++ {
		if _, err := c.SweepNow(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := f.get("maria", young); ok {
		t.Errorf("a forgettable 'C' row behind %d kept ones was never looked at", dtable.RowsLimit)
	}
	if n := c.DecisionRowsKept()[KeptUnknownRM]; n != dtable.RowsLimit {
		t.Errorf("DecisionRowsKept[%s] = %d after a whole pass, want %d", KeptUnknownRM, n, dtable.RowsLimit)
	}
	// The next pass reads the kept rows again.
	again := false
	for i := 0; i < 2 && !again; i++ {
		st, err := c.SweepNow(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		again = st.Kept[KeptUnknownRM] == dtable.RowsLimit
		if n := c.DecisionRowsKept()[KeptUnknownRM]; n != dtable.RowsLimit {
			t.Errorf("DecisionRowsKept[%s] = %d in the next pass, want %d", KeptUnknownRM, n, dtable.RowsLimit)
		}
	}
	if !again {
		t.Errorf("the kept rows were not read again in the pass after the one that reached the end of the table")
	}
	if out := logs.String(); !strings.Contains(out, "ALARM") || !strings.Contains(out, "reason="+KeptUnknownRM) {
		t.Errorf("no alarm for the rows kept as %s", KeptUnknownRM)
	}
}

// A backlog longer than a page (decision.RowsLimit rows) is swept page after
// page at the scan interval, not one page a minute: a coordinator back after
// an outage, or a table filled by a burst of commits whose SDKs did not
// forget their rows, is emptied in seconds. (A loaded run of the e2e test
// TestLateCommitPointCannotCommit found a table holding more forgettable
// rows than a page: the rows past the first page waited a whole minute,
// past the test's 30 s.)
func TestSweepPassGoesOnAtTheScanInterval(t *testing.T) {
	f, s := newFakeTables(), newSettleLog()
	f.rowsLimit = dtable.RowsLimit
	parts := "pg=" + f.id("pg").String()
	var last xid.GTRID
	for i := 0; i <= dtable.RowsLimit; i++ {
		last = xid.NewAt(0, time.Now().Add(-time.Hour+time.Duration(i)*time.Millisecond))
		f.set("maria", last, dtable.Committed)
		f.parts[last] = parts
		f.old[last] = true
	}
	opts, _ := cpOptions(t, f, s, nil)
	opts.manualScans = false
	opts.ScanInterval = 50 * time.Millisecond
	open(t, opts)
	deadline := time.Now().Add(20 * time.Second) // a minute is what a page cost before
	for {
		if _, ok := f.get("maria", last); !ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the row past the first page (%d rows) is still there 20 s later", dtable.RowsLimit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
