package coord

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/xid"
)

// A coordinator promoted with --accept-data-loss (InDoubtBefore) never
// presumes abort for a prepared branch of a gtrid from before the
// promotion that it has no decision for: the scan lists it (InDoubt),
// Status --resolve refuses it, and only an explicit ResolveInDoubt decides
// it. A gtrid begun after the promotion is an ordinary orphan.
func TestUnknowableGTRIDsAreInDoubtNotAborted(t *testing.T) {
	opts := testOptions(t.TempDir())
	opts.OrphanTimeout = time.Millisecond
	opts.InDoubtBefore = time.Now().Add(-time.Minute) // young gtrids are later than it by more than the clock skew
	c := open(t, opts)
	old := xid.NewAt(0, opts.InDoubtBefore.Add(-time.Minute))
	young := xid.New()
	now := time.Now()
	for _, g := range []xid.GTRID{old, young} {
		for i := range 2 { // first seen, then past the orphan timeout
			c.settleInDoubt(rm.InDoubt{Branch: xid.Branch{GTRID: g, RM: "pg"}}, now.Add(time.Duration(i)*time.Second))
		}
	}
	c.mu.Lock()
	oldT, youngT := c.txns[old], c.txns[young]
	c.mu.Unlock()
	if oldT != nil {
		t.Fatalf("the branch of a gtrid from before the promotion was decided %s by presumption", oldT.outcome)
	}
	if youngT == nil || youngT.outcome != Aborted {
		t.Errorf("an orphan begun after the promotion: %v, want presumed ABORTED", youngT)
	}
	got := c.InDoubt()
	if len(got) != 1 || got[0].GTRID != old.String() || got[0].RM != "pg" {
		t.Fatalf("InDoubt = %+v, want the one branch of %s", got, old)
	}
	if n := c.InDoubtBranches(); n != 1 {
		t.Errorf("InDoubtBranches = %d, want 1", n)
	}
	var in *InputError
	if _, err := c.Status(context.Background(), old.String(), true); !errors.As(err, &in) {
		t.Errorf("Status --resolve of an unknowable gtrid: %v, want a refusal", err)
	}
}
