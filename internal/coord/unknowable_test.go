package coord

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/xid"
)

// After a promotion with --accept-data-loss, a gtrid from before it may
// have been decided (and acted on) by the old primary. A Commit or Abort
// for it must not decide here by presumption — a late Commit would commit
// a branch the old primary rolled back, a too-old Commit or an Abort would
// roll back a branch it committed: either splits the transaction. They
// answer outcome unknown (never a refusal the SDK would roll back on); the
// operator settles it with ResolveInDoubt. The boundary allows for clients
// whose clocks run ahead by up to MaxClockSkew.
func TestUnknowableGTRIDsAreNotDecidedByCommitOrAbort(t *testing.T) {
	opts := testOptions(t.TempDir())
	opts.MaxClockSkew = 10 * time.Second
	opts.InDoubtBefore = time.Now().Add(-20 * time.Second)
	c := open(t, opts)
	for name, g := range map[string]xid.GTRID{
		"before the promotion":                   xid.NewAt(0, opts.InDoubtBefore.Add(-time.Second)),
		"after it by less than the clock skew":   xid.NewAt(0, opts.InDoubtBefore.Add(5*time.Second)),
		"older than max-txn-age (Commit aborts)": xid.NewAt(0, opts.InDoubtBefore.Add(-2*time.Hour)),
	} {
		if _, err := c.Commit(short(t), g.String(), both, CommitMode{}); !errors.Is(err, ErrOutcomeUnknown) {
			t.Errorf("%s: Commit = %v, want ErrOutcomeUnknown", name, err)
		}
		if _, err := c.Abort(short(t), g.String(), both); !errors.Is(err, ErrOutcomeUnknown) {
			t.Errorf("%s: Abort = %v, want ErrOutcomeUnknown", name, err)
		}
		mustStatus(t, c, g.String(), false, Undecided)
	}
	// Well after the promotion: decided as usual.
	mustCommit(t, c, xid.NewAt(0, time.Now().Add(-time.Second)).String(), Committed)
	// The operator's choice is what settles one.
	g := xid.NewAt(0, opts.InDoubtBefore.Add(-time.Second))
	c.opts.prepared = func(context.Context, string, xid.Branch) (bool, error) { return true, nil }
	if r, err := c.ResolveInDoubt(short(t), g.String(), true); err != nil || r.Outcome != Committed {
		t.Fatalf("ResolveInDoubt: %v %v", r.Outcome, err)
	}
}
