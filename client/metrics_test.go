package client

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// Each Commit outcome lands in exactly one counter: commits by path,
// aborts by stage (wrapped or not, "other" when the stage is unset),
// unknown outcomes; an ErrTxDone counts nowhere.
func TestCommitOutcomesAreCountedOnce(t *testing.T) {
	c := newTxCounters()
	c.count(Result{Path: PathCommitPoint}, nil, time.Millisecond)
	c.count(Result{Path: PathTwoPhase}, nil, 3*time.Millisecond)
	c.count(Result{}, &AbortedError{stage: stagePrepare}, time.Millisecond)
	c.count(Result{}, fmt.Errorf("wrapped: %w", &AbortedError{stage: stageRefused}), time.Millisecond)
	c.count(Result{}, &AbortedError{}, time.Millisecond)
	c.count(Result{}, &OutcomeUnknownError{}, 5*time.Second)
	c.count(Result{}, ErrTxDone, time.Millisecond)
	c.count(Result{}, errors.New("some other error"), time.Millisecond)
	if c.committed[PathCommitPoint].Load() != 1 || c.committed[PathTwoPhase].Load() != 1 || c.committed[PathLocal].Load() != 0 {
		t.Errorf("commits by path: %d %d %d", c.committed[PathCommitPoint].Load(), c.committed[PathTwoPhase].Load(), c.committed[PathLocal].Load())
	}
	for st, want := range map[abortStage]uint64{stagePrepare: 1, stageRefused: 1, stageOther: 1, stageCommit: 0} {
		if got := c.aborted[st].Load(); got != want {
			t.Errorf("aborts at %s = %d, want %d", st, got, want)
		}
	}
	if c.unknown.Load() != 1 || c.unknownL.Stats(0).Max != 5*time.Second {
		t.Errorf("unknown = %d (max %v), want 1 (5s)", c.unknown.Load(), c.unknownL.Stats(0).Max)
	}
	if s := c.latency[PathTwoPhase].Stats(0); s.Count != 1 || s.Total != 3*time.Millisecond {
		t.Errorf("two-phase latency %+v", s)
	}
	if s := c.abortedL.Stats(0); s.Count != 3 {
		t.Errorf("aborted latency count %d, want 3", s.Count)
	}
}
