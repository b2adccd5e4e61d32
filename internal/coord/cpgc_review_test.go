package coord

import (
	"context"
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
