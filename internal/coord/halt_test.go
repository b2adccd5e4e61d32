package coord

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/internal/wal"
)

// stallingHook holds every synced batch (as a sync standby transport whose
// standby does not answer) until released.
type stallingHook struct {
	mu        sync.Mutex
	stalled   chan struct{} // closed when a batch is held
	release   chan struct{}
	isHolding bool
}

func (h *stallingHook) Replayed(wal.Position, wal.Type, []byte) {}
func (h *stallingHook) Released(uint64)                         {}
func (h *stallingHook) Written(_ []wal.Written, synced bool) {
	if !synced {
		return
	}
	h.mu.Lock()
	if !h.isHolding {
		h.isHolding = true
		close(h.stalled)
	}
	h.mu.Unlock()
	<-h.release
}

// A decision whose record is being written when the coordinator is halted
// (a fenced primary whose stalled standby acknowledgement is then released)
// is never acknowledged: Commit reports ErrOutcomeUnknown and phase 2 does
// not touch a branch.
func TestHaltNeverAcknowledgesADecisionInFlight(t *testing.T) {
	sw := &phase2Switch{}
	sw.up.Store(true)
	opts := circularOptions(t, MinLogSize, sw)
	hook := &stallingHook{stalled: make(chan struct{}), release: make(chan struct{})}
	opts.LogHook = hook
	c := open(t, opts)
	done := make(chan error, 1)
	go func() {
		_, err := c.Commit(context.Background(), newGTRID(), []BranchRef{{RM: rmLong.Name}}, CommitMode{WaitPhase2: true})
		done <- err
	}()
	select {
	case <-hook.stalled:
	case <-time.After(10 * time.Second):
		t.Fatal("the COMMIT record never reached the log hook")
	}
	c.Halt()
	close(hook.release)
	select {
	case err := <-done:
		if !errors.Is(err, ErrOutcomeUnknown) {
			t.Fatalf("Commit in flight at Halt = %v, want ErrOutcomeUnknown", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Commit did not return after Halt and the release")
	}
	if n := sw.calls.Load(); n != 0 {
		t.Errorf("phase 2 touched %d branches after Halt", n)
	}
	if _, err := c.Commit(context.Background(), newGTRID(), []BranchRef{{RM: rmLong.Name}}, CommitMode{}); !errors.Is(err, ErrClosed) {
		t.Errorf("a new Commit after Halt = %v, want ErrClosed", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close after Halt: %v", err)
	}
}
