package coord

import (
	"testing"

	"github.com/tandem-tx/tandem/waits"
)

// Two coordinators in one process record into separate registries: a
// Commit on one shows in its own registry (its decision record's "log file
// sync", its log writer's "log file parallel write") and not in the other's.
// Options.Waits is used when given; without it each makes its own.
func TestEachCoordinatorRecordsIntoItsOwnRegistry(t *testing.T) {
	given := waits.NewRegistry(waits.SideCoordinator)
	optsA := testOptions(t.TempDir())
	optsA.Waits = given
	a := open(t, optsA)
	b := open(t, testOptions(t.TempDir()))
	if a.Waits() != given {
		t.Fatal("Waits() is not the registry given in Options.Waits")
	}
	if b.Waits() == nil || b.Waits() == given {
		t.Fatalf("a coordinator opened without Options.Waits has registry %p, want a new one (not %p)", b.Waits(), given)
	}
	commitEvents := []waits.Event{waits.LogFileSync, waits.LogFileParallelWrite}
	count := func(c *Coordinator, e waits.Event) uint64 { return c.Waits().Snapshot().Get(e).Count }

	mustCommit(t, a, newGTRID(), Committed)
	for _, e := range commitEvents {
		if n := count(a, e); n == 0 {
			t.Errorf("after a Commit on A, A's registry has no %q wait", e)
		}
		if n := count(b, e); n != 0 {
			t.Errorf("after a Commit on A only, B's registry has %d %q waits, want 0", n, e)
		}
	}

	syncsA := count(a, waits.LogFileSync)
	mustCommit(t, b, newGTRID(), Committed)
	mustCommit(t, b, newGTRID(), Committed)
	if n := count(b, waits.LogFileSync); n != 2 {
		t.Errorf("after two Commits on B, B's registry has %d %q waits, want 2", n, waits.LogFileSync)
	}
	if n := count(a, waits.LogFileSync); n != syncsA {
		t.Errorf("Commits on B changed A's %q count from %d to %d", waits.LogFileSync, syncsA, n)
	}
}
