//go:build failpoints

package coord

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/internal/failpoint"
	"github.com/tandem-tx/tandem/xid"
)

// The steps of a checkpoint, and those of the log that a checkpoint drives.
var checkpointFailpoints = []string{
	"checkpoint-after-carry", "checkpoint-before-release", "checkpoint-after-release",
	"wal-release-before-rename", "wal-release-after-rename", "wal-rotate-after-rename",
}

// stuckSet makes phase 2 fail forever for the gtrids in it (their
// resource manager "down") and succeed for every other.
type stuckSet struct {
	mu sync.Mutex
	m  map[xid.GTRID]bool
}

func (s *stuckSet) add(g string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[xid.GTRID]bool{}
	}
	id, err := xid.Parse(g)
	if err != nil {
		panic(err)
	}
	s.m[id] = true
}

func (s *stuckSet) settle(_ context.Context, _ string, b xid.Branch, _ bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m[b.GTRID] {
		return errors.New(rmDown)
	}
	return nil
}

func crashOptions(dir string, settle func(context.Context, string, xid.Branch, bool) error) Options {
	o := testOptions(dir)
	o.RMs = append(o.RMs[:0:0], rmLong)
	o.LogSize = MinLogSize // 8 KiB segments: many checkpoints
	o.NoSync = false
	o.settle = settle
	o.checkpointEvery = 5 * time.Millisecond
	return o
}

// crashWorkload commits (one in every 25 stuck in phase 2) and aborts (one
// in every 40, finished at once) until n decisions or stop, reporting each
// acknowledged stuck COMMIT and ABORT.
func crashWorkload(t testing.TB, c *Coordinator, stuck *stuckSet, n int, stop func() bool, acked func(kind, g string)) {
	ref := []BranchRef{{RM: rmLong.Name}}
	for i := 0; i < n && !stop(); i++ {
		g := newGTRID()
		switch {
		case i%40 == 7:
			r, err := c.Abort(context.Background(), g, ref)
			if err != nil || r.Outcome != Aborted {
				t.Fatalf("Abort: %v %v", r.Outcome, err)
			}
			acked("abort", g)
		case i%25 == 3:
			stuck.add(g)
			r, err := c.Commit(context.Background(), g, ref, CommitMode{})
			if err != nil || r.Outcome != Committed {
				t.Fatalf("Commit: %v %v", r.Outcome, err)
			}
			acked("stuck", g)
		default:
			r, err := c.Commit(context.Background(), g, ref, CommitMode{WaitPhase2: true})
			if err != nil || r.Outcome != Committed {
				t.Fatalf("Commit: %v %v", r.Outcome, err)
			}
		}
	}
}

// checkSurvivors reopens the coordinator on dir (phase 2 failing for all)
// and checks that every acknowledged unfinished COMMIT is there, still to
// be driven, and every acknowledged ABORT still answers ABORTED, finished.
func checkSurvivors(t *testing.T, dir string, stuck, aborted []string) {
	t.Helper()
	c, err := Open(crashOptions(dir, (&phase2Switch{}).settle))
	if err != nil {
		t.Fatalf("Open after the crash: %v", err)
	}
	defer c.Close()
	for _, g := range stuck {
		if r := mustStatus(t, c, g, false, Committed); !r.Phase2Pending {
			t.Errorf("unfinished COMMIT %s came back finished", g)
		}
	}
	for _, g := range aborted {
		if r := mustStatus(t, c, g, false, Aborted); r.Phase2Pending {
			t.Errorf("finished ABORT %s came back unfinished", g)
		}
	}
	if st := c.Stats(); st.Log.Current-st.Log.First > 7 {
		t.Errorf("the restart replayed segments %d-%d: more than the log", st.Log.First, st.Log.Current)
	}
}

// TestCheckpointFailures fails each step once: the checkpoint gives up,
// the coordinator goes on, and a restart has every acknowledged unfinished
// decision and finished ABORT.
// (A failed rotation fails the whole log: package wal's tests cover it.)
func TestCheckpointFailures(t *testing.T) {
	for _, name := range checkpointFailpoints[:5] {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			stuck := &stuckSet{}
			c, err := Open(crashOptions(dir, stuck.settle))
			if err != nil {
				t.Fatal(err)
			}
			var hits atomic.Int32
			defer failpoint.SetHook(name, func() error {
				if hits.Add(1) == 3 {
					return fmt.Errorf("injected at %s", name)
				}
				return nil
			})()
			var stuckAcked, abortAcked []string
			crashWorkload(t, c, stuck, 3000, func() bool { return hits.Load() > 6 }, func(kind, g string) {
				if kind == "stuck" {
					stuckAcked = append(stuckAcked, g)
				} else {
					abortAcked = append(abortAcked, g)
				}
			})
			if hits.Load() < 3 {
				t.Fatalf("failpoint %s hit %d times", name, hits.Load())
			}
			failpoint.SetHook(name, nil)
			if err := c.Close(); err != nil && !strings.Contains(err.Error(), "injected") {
				t.Fatalf("Close: %v", err)
			}
			checkSurvivors(t, dir, stuckAcked, abortAcked)
		})
	}
}

// TestCheckpointKill kills a child process (this test binary) at each step,
// with fdatasync on, after the log has been released and reused a few
// times; the restart must have every acknowledged unfinished decision and
// finished ABORT, and open without damage.
func TestCheckpointKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	for _, name := range checkpointFailpoints {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(os.Args[0], "-test.run=^TestCheckpointKillChild$")
			cmd.Env = append(os.Environ(), "TANDEM_COORD_CRASH_DIR="+dir, "TANDEM_COORD_CRASH_AT="+name, "TANDEM_FAILPOINTS=")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var stuckAcked, abortAcked []string
			armed := false
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				switch f := strings.Fields(sc.Text()); {
				case len(f) == 2 && f[0] == "stuck":
					stuckAcked = append(stuckAcked, f[1])
				case len(f) == 2 && f[0] == "abort":
					abortAcked = append(abortAcked, f[1])
				case len(f) == 1 && f[0] == "armed":
					armed = true
				}
			}
			err = cmd.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL || !armed {
				t.Fatalf("child: %v (armed %v), want killed at %s; stderr:\n%s", err, armed, name, stderr.String())
			}
			t.Logf("killed at %s after %d unfinished COMMITs and %d ABORTs acknowledged", name, len(stuckAcked), len(abortAcked))
			checkSurvivors(t, dir, stuckAcked, abortAcked)
		})
	}
}

// TestCheckpointKillChild is the child of TestCheckpointKill.
func TestCheckpointKillChild(t *testing.T) {
	dir, name := os.Getenv("TANDEM_COORD_CRASH_DIR"), os.Getenv("TANDEM_COORD_CRASH_AT")
	if dir == "" {
		t.Skip("run by TestCheckpointKill")
	}
	stuck := &stuckSet{}
	c, err := Open(crashOptions(dir, stuck.settle))
	if err != nil {
		t.Fatal(err)
	}
	armed := false
	crashWorkload(t, c, stuck, 1<<30, func() bool {
		if !armed && c.Stats().Checkpoints >= 3 { // released segments are being reused
			armed = true
			fmt.Println("armed")
			failpoint.Set(name, "kill")
		}
		return false
	}, func(kind, g string) { fmt.Println(kind, g) })
}
