package coord

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/xid"
)

// A flood of Abort calls on random gtrids (anyone who reaches the API, or a
// buggy client) writes an ABORT record for each, remembered for
// max-txn-age and carried forward by every checkpoint: unchecked, it grows
// the log past its size. An Abort for a gtrid with no decision, and a
// Commit of a too-old gtrid, pass admission like a new COMMIT: past the
// refusal mark they are refused (ErrLogFull, nothing written) — the
// in-doubt scan still rolls back real prepared branches, and its ABORTs,
// like END and CHECKPOINT records, use the reserve.
func TestAbortFloodCannotGrowTheLogPastItsSize(t *testing.T) {
	sw := &phase2Switch{}
	sw.up.Store(true)
	const logSize = 128 << 10
	opts := circularOptions(t, logSize, sw)
	// The committed gtrid asked about at the end never finishes its phase 2
	// (its RM stays down for it): a finished COMMIT may be forgotten early
	// by a checkpoint short of space (ForgotEarly), and is then answered by
	// deciding it again; an unfinished one is carried, always remembered.
	decided := newGTRID()
	opts.settle = func(ctx context.Context, rmName string, b xid.Branch, commit bool) error {
		if b.GTRID.String() == decided {
			return errors.New(rmDown)
		}
		return sw.settle(ctx, rmName, b, commit)
	}
	c := open(t, opts)
	mustCommitTo(t, c, decided)
	var refused, written int
	for i := 0; i < 20000 && refused < 20; i++ {
		g := newGTRID()
		if i%10 == 9 {
			g = xid.NewAt(0, time.Now().Add(-2*opts.MaxTxnAge-time.Hour)).String() // too old: Commit writes ABORT
			_, err := c.Commit(context.Background(), g, []BranchRef{{RM: rmLong.Name}}, CommitMode{})
			switch {
			case errors.Is(err, ErrLogFull):
				refused++
			case err != nil:
				t.Fatalf("Commit of a too-old gtrid: %v", err)
			default:
				written++
			}
			continue
		}
		_, err := c.Abort(context.Background(), g, []BranchRef{{RM: rmLong.Name}})
		switch {
		case errors.Is(err, ErrLogFull):
			refused++
		case err != nil:
			t.Fatalf("Abort %d: %v", i, err)
		default:
			written++
		}
		// The bound is the log's size plus what a checkpoint may carry
		// beyond it for a moment (checkpoint.go: the records it carries are
		// written before the segments they free are released, up to half
		// the reserve): a busy machine caught that moment (129.4 KiB of
		// 128 KiB in a loaded scripts/test run).
		if u := c.log.Usage(); u.Used > logSize+logSize/reserveDen/2 {
			t.Fatalf("after %d ABORTs the log holds %s, more than its size %s and a checkpoint's carry", written, humanBytes(u.Used), humanBytes(logSize))
		}
	}
	if refused == 0 {
		t.Fatalf("%d ABORTs written, none refused: the flood was not held back (log %s of %s)", written, humanBytes(c.log.Usage().Used), humanBytes(logSize))
	}
	t.Logf("%d ABORTs written, %d refused; log %s of %s", written, refused, humanBytes(c.log.Usage().Used), humanBytes(logSize))
	// An Abort of a decided gtrid still answers the decision, full log or not.
	if _, err := c.Abort(context.Background(), decided, []BranchRef{{RM: rmLong.Name}}); !errors.Is(err, ErrAlreadyCommitted) {
		t.Fatalf("Abort of a committed gtrid on a full log: %v, want ErrAlreadyCommitted (finished COMMITs forgotten early: %d)", err, c.Stats().ForgotEarly)
	}
}

func mustCommitTo(t *testing.T, c *Coordinator, g string) {
	t.Helper()
	r, err := c.Commit(context.Background(), g, []BranchRef{{RM: rmLong.Name}}, CommitMode{})
	if err != nil || r.Outcome != Committed {
		t.Fatalf("Commit(%s): %v %v", g, r.Outcome, err)
	}
}
