package coord

import (
	"context"
	"sync"
	"time"

	dtable "github.com/tandem-tx/tandem/internal/decision"
	"github.com/tandem-tx/tandem/waits"
)

// Commits decided at a commit point never reach the coordinator: their
// decision is a row in the commit point's decision table. The coordinator
// learns them from there (decision.ReadActivity), whichever SDK and
// language decided them and whether or not the client could reach a
// coordinator: the table is the one record every such commit leaves.

// CommitPointStateEvery is how often CommitPoints reads each decision
// table's state (its rows); its activity is read at every call.
const CommitPointStateEvery = 5 * time.Second

// CommitPointTotals is what one RM's decision table recorded since this
// coordinator started reading it.
type CommitPointTotals struct {
	RM string `json:"rm"`
	// Commits ('C' rows) and Aborts ('A' rows, a recoverer's), counted
	// decision.ActivityLag after they were decided.
	Commits uint64 `json:"commits"`
	Aborts  uint64 `json:"aborts"`
	// BeganToDecided: for each commit, the commit point's transaction from
	// its begin to its decision (decided_at − began_at).
	BeganToDecided waits.EventStats `json:"-"`
	// State is the table's state at StateAt (every CommitPointStateEvery).
	State   dtable.TableState `json:"-"`
	StateAt time.Time         `json:"-"`
	// Err is the last read's error ("" when it succeeded): a missing table
	// (no commit point there yet), an unreachable database.
	Err string `json:"error,omitempty"`
}

// cpActivity is the state of CommitPoints' reads (its own lock: read by the
// console's sampler, never on a commit's path).
type cpActivity struct {
	mu      sync.Mutex
	cursors map[string]dtable.ActivityCursor
	totals  map[string]*CommitPointTotals
}

// CommitPoints reads, on every RM, the decisions its decision table
// recorded since the last call (one aggregate query each; the table's state
// every CommitPointStateEvery), and returns the totals since the first
// call, in RM order. An RM that cannot be read keeps its totals and says
// why in Err. Call it from one goroutine at a steady pace (the console's
// sampler, every second): each call's window starts where the last ended.
func (c *Coordinator) CommitPoints(ctx context.Context) []CommitPointTotals {
	a := &c.cpAct
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.totals == nil {
		a.cursors, a.totals = map[string]dtable.ActivityCursor{}, map[string]*CommitPointTotals{}
	}
	out := make([]CommitPointTotals, 0, len(c.rmList))
	for _, name := range c.rmList {
		t := a.totals[name]
		if t == nil {
			t = &CommitPointTotals{RM: name}
			a.totals[name] = t
		}
		if conn := c.rms[name]; conn != nil {
			d := conn.Dialect().Driver()
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			act, next, err := dtable.ReadActivity(rctx, conn.DB(), d, a.cursors[name])
			if err == nil && time.Since(t.StateAt) >= CommitPointStateEvery {
				var st dtable.TableState
				if st, err = dtable.ReadState(rctx, conn.DB(), d); err == nil {
					t.State, t.StateAt = st, time.Now()
				}
			}
			cancel()
			if err != nil {
				t.Err = err.Error()
			} else {
				t.Err = ""
				a.cursors[name] = next
				t.Commits += act.Commits
				t.Aborts += act.Aborts
				t.BeganToDecided = t.BeganToDecided.Plus(act.BeganToDecided)
			}
		}
		out = append(out, *t)
	}
	return out
}
