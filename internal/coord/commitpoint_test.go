package coord

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/xid"
)

// logBuf is a bytes.Buffer safe for the coordinator's concurrent loggers.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A prepared branch whose name carries a commit point is decided by the
// commit point's decision table, not by this coordinator's log: the
// in-doubt scan never presumes it aborted (no ABORT record, no rollback),
// however long it stays prepared, and never lists it as awaiting an
// operator (its outcome does not depend on this log). It is logged once.
func TestCommitPointBranchIsNeverPresumedAborted(t *testing.T) {
	opts := testOptions(t.TempDir())
	opts.OrphanTimeout = time.Millisecond
	opts.InDoubtBefore = time.Now().Add(-time.Minute)
	logs := &logBuf{}
	opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
	c := open(t, opts)
	young := xid.New()
	old := xid.NewAt(0, opts.InDoubtBefore.Add(-time.Minute)) // from before an unsynchronized promotion
	now := time.Now()
	for _, g := range []xid.GTRID{young, old} {
		b := xid.Branch{GTRID: g, RM: "pg", CommitPoint: "maria"}
		for i := range 3 { // first seen, then twice past the orphan timeout
			c.settleInDoubt(rm.InDoubt{Branch: b}, now.Add(time.Duration(i)*time.Hour))
		}
	}
	c.mu.Lock()
	youngT, oldT := c.txns[young], c.txns[old]
	c.mu.Unlock()
	if youngT != nil || oldT != nil {
		t.Fatalf("a commit-point branch was decided by the coordinator: %v %v, want no decision", youngT, oldT)
	}
	if got := c.InDoubt(); len(got) != 0 {
		t.Errorf("InDoubt = %+v, want none (a commit-point branch is not the coordinator's to settle)", got)
	}
	if n := c.InDoubtBranches(); n != 0 {
		t.Errorf("InDoubtBranches = %d, want 0", n)
	}
	out := logs.String()
	for _, g := range []xid.GTRID{young, old} {
		if n := strings.Count(out, "commit_point=maria gtrid="+g.String()); n != 1 {
			t.Errorf("gtrid %s logged %d times, want once:\n%s", g, n, out)
		}
	}
	if strings.Contains(out, "orphan") {
		t.Errorf("log mentions an orphan:\n%s", out)
	}
	// Status --resolve does not find it among the coordinator-logged
	// branches, so it writes nothing either.
	r, err := c.Status(context.Background(), young.String(), false)
	if err != nil || r.Outcome != Undecided {
		t.Errorf("Status = %v %v, want Undecided", r.Outcome, err)
	}
	// An ordinary orphan is still aborted: the guard is for commit-point
	// branches only.
	ord := xid.New()
	for i := range 2 {
		c.settleInDoubt(rm.InDoubt{Branch: xid.Branch{GTRID: ord, RM: "maria"}}, now.Add(time.Duration(i)*time.Second))
	}
	c.mu.Lock()
	ordT := c.txns[ord]
	c.mu.Unlock()
	if ordT == nil || ordT.outcome != Aborted {
		t.Errorf("an ordinary orphan: %v, want presumed ABORTED", ordT)
	}
}
