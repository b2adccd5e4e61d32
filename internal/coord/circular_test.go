package coord

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/internal/wal"
	"github.com/tandem-tx/tandem/waits"
	"github.com/tandem-tx/tandem/xid"
)

// phase2Switch is the settle seam of these tests: phase 2 fails on every
// branch (the resource manager is down) until up is set, then succeeds.
type phase2Switch struct {
	up    atomic.Bool
	calls atomic.Int64
}

const rmDown = "dial tcp 127.0.0.1:1: connect: connection refused (test: rm down)"

func (s *phase2Switch) settle(ctx context.Context, _ string, _ xid.Branch, _ bool) error {
	s.calls.Add(1)
	if s.up.Load() {
		return nil
	}
	return errors.New(rmDown)
}

// rmLong has the longest name a resource manager may have, so that each
// decision record is large and a small log fills with few transactions
// (each unfinished one keeps a phase-2 goroutine, and the race detector
// allows 8128).
var rmLong = rm.Config{Name: "ledger_primary_db_eu_west_1_main", Driver: rm.Postgres, DSN: "postgres://u:p@127.0.0.1:1/db"}

func circularOptions(t *testing.T, logSize int64, sw *phase2Switch) Options {
	o := testOptions(t.TempDir())
	o.RMs = []rm.Config{rmLong}
	o.LogSize = logSize
	o.settle = sw.settle
	o.checkpointEvery = 20 * time.Millisecond
	if os.Getenv("TANDEM_TEST_LOG") != "" {
		o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return o
}

// segmentFiles counts the log's segment files (live, released and being
// prepared) and their bytes.
func segmentFiles(t *testing.T, dir string) (files int, bytes int64) {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, "log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == "LOCK" {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue // renamed meanwhile
		}
		files++
		bytes += fi.Size()
	}
	return files, bytes
}

// TestSustainedLoadKeepsDiskFlat commits many transactions whose phase 2
// finishes, far more than the log holds: checkpoints must release segments
// and rotations reuse them, so that the segment files never exceed the
// configured size (plus the one being prepared), nothing is throttled or
// refused, and a restart replays only the live segments. With the default
// EndedRetention (finished COMMITs remembered for a minute, longer than the
// run) checkpoints must still keep the log flat, forgetting finished
// COMMITs early under pressure.
func TestSustainedLoadKeepsDiskFlat(t *testing.T) {
	for _, retention := range []time.Duration{50 * time.Millisecond, time.Minute} {
		t.Run("ended-retention="+retention.String(), func(t *testing.T) {
			sw := &phase2Switch{}
			sw.up.Store(true)
			const logSize = 256 << 10
			opts := circularOptions(t, logSize, sw)
			opts.EndedRetention = retention
			c := open(t, opts)
			segSize := SegmentSizeFor(logSize)
			const total, workers = 30000, 16
			var next atomic.Int64
			var maxFiles int
			var maxBytes int64
			var samples []string
			ticks := 0
			var wg sync.WaitGroup
			for range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= total {
						r, err := c.Commit(context.Background(), newGTRID(), []BranchRef{{RM: rmLong.Name}}, CommitMode{WaitPhase2: true})
						if err != nil || r.Outcome != Committed || r.Phase2Pending {
							t.Errorf("Commit: %v %v pending %v", r.Outcome, err, r.Phase2Pending)
							return
						}
					}
				}()
			}
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			for tick := time.NewTicker(20 * time.Millisecond); ; {
				files, bytes := segmentFiles(t, opts.Dir)
				maxFiles, maxBytes = max(maxFiles, files), max(maxBytes, bytes)
				if ticks++; ticks%10 == 0 {
					samples = append(samples, fmt.Sprintf("%d commits: %d files, %s", min(next.Load(), total), files, humanBytes(bytes)))
				}
				select {
				case <-tick.C:
					continue
				case <-done:
				}
				tick.Stop()
				break
			}
			if t.Failed() {
				return
			}
			st := c.Stats()
			t.Logf("%d commits: at most %d segment files, %s on disk (log size %s, segments %s); %d checkpoints carried %d decisions, forgot %d finished COMMITs early, released %d segments; %d rotations, %d onto reused files; throttled %d, refused %d",
				total, maxFiles, humanBytes(maxBytes), humanBytes(logSize), humanBytes(segSize), st.Checkpoints, st.Carried, st.ForgotEarly,
				st.ReleasedSegs, st.LogRotations, st.LogRecycled, st.Throttled, st.Rejected)
			for _, s := range samples {
				t.Log("  " + s)
			}
			budget := int(logSize/segSize) + 1 // the configured segments and the next one being prepared
			if maxFiles > budget || maxBytes > int64(budget)*segSize {
				t.Errorf("disk use grew: at most %d files, %s; budget %d files", maxFiles, humanBytes(maxBytes), budget)
			}
			if st.Checkpoints == 0 || st.LogRecycled == 0 || st.ReleasedSegs == 0 {
				t.Errorf("no circular use: %+v", st)
			}
			if st.Rejected != 0 {
				t.Errorf("%d commits refused under a load whose phase 2 finishes", st.Rejected)
			}
			// A restart replays the live segments only, not the 30000 decisions.
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			c = open(t, opts)
			st = c.Stats()
			// What stays live depends on how far phase 2 and the closing
			// checkpoint got (two or three segments on a quiet machine, four
			// under load): bound the records replayed, not the span.
			maxReplay := uint64(3 * segSize / 32) // three segments of the smallest records
			if st.Replayed > maxReplay {
				t.Errorf("restart replayed %d records from segments %d-%d; want at most %d, from the last checkpoint",
					st.Replayed, st.Log.First, st.Log.Current, maxReplay)
			}
			t.Logf("restart replayed %d records (log segments %d-%d, %s in use)", st.Replayed, st.Log.First, st.Log.Current, humanBytes(st.Log.Used))
		})
	}
}

// TestLogFullRefusesAndRecovers fills a small log with transactions whose
// phase 2 cannot finish (the resource manager is down). Past 80% commits
// are throttled; then refused with ErrLogFull, whose message says how many
// transactions are unfinished, which is the oldest, and which resource
// manager has not acknowledged. A refusal writes nothing, a restart still
// has every acknowledged decision, ABORT and repeated Commits still work,
// and once phase 2 succeeds the log drains and commits are accepted again
// with no manual step.
func TestLogFullRefusesAndRecovers(t *testing.T) {
	sw := &phase2Switch{}
	const logSize = 256 << 10
	opts := circularOptions(t, logSize, sw)
	c := open(t, opts)
	throttleWaits := c.Waits().Snapshot().Get(waits.LogSpaceThrottle).Count

	var (
		mu       sync.Mutex
		acked    []string
		oldest   string
		oldestAt time.Time
		refusal  error
		refused  atomic.Int64
	)
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for refused.Load() < 200 {
				g := newGTRID()
				r, err := c.Commit(context.Background(), g, []BranchRef{{RM: rmLong.Name}}, CommitMode{})
				mu.Lock()
				switch {
				case errors.Is(err, ErrLogFull):
					refused.Add(1)
					refusal = err
				case err != nil || r.Outcome != Committed:
					t.Errorf("Commit: %v %v", r.Outcome, err)
					mu.Unlock()
					return
				default:
					acked = append(acked, g)
					if oldest == "" || r.DecidedAt.Before(oldestAt) {
						oldest, oldestAt = g, r.DecidedAt
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	st := c.Stats()
	t.Logf("%d commits accepted, %d refused; log %s of %s in use; throttled %d", len(acked), refused.Load(), humanBytes(st.Log.Used), humanBytes(logSize), st.Throttled)
	if st.Throttled == 0 || c.Waits().Snapshot().Get(waits.LogSpaceThrottle).Count == throttleWaits {
		t.Errorf("no commit was throttled (no %q wait) before the log filled", "log space throttle")
	}
	if st.Log.Used > logSize {
		t.Errorf("log uses %s, more than its size", humanBytes(st.Log.Used))
	}
	if used, limit := c.LogSpace(); limit != logSize || used < limit/10*9 || c.Phase2Backlog() != len(acked) {
		t.Errorf("LogSpace %d of %d, Phase2Backlog %d; want at least 90%% in use and %d unfinished", used, limit, c.Phase2Backlog(), len(acked))
	}
	// The refusal after the last acceptance describes the log as it stays.
	_, err := c.Commit(context.Background(), newGTRID(), []BranchRef{{RM: rmLong.Name}}, CommitMode{})
	if !errors.Is(err, ErrLogFull) {
		t.Fatalf("Commit on a full log: %v, want ErrLogFull (earlier: %v)", err, refusal)
	}
	var lf *LogFullError
	if !errors.As(err, &lf) {
		t.Fatalf("%T is not a *LogFullError", err)
	}
	msg := err.Error()
	t.Logf("refusal: %s", msg)
	for _, want := range []string{
		"decision log full", fmt.Sprintf("%d transactions unfinished", len(acked)), "oldest " + oldest,
		fmt.Sprintf("rm %q", rmLong.Name), rmDown, "check that resource manager", "nothing was written",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("refusal %q does not say %q", msg, want)
		}
	}
	// Already decided: answered, full or not. An Abort of an undecided
	// gtrid passes admission too (a flood of them must not grow the log):
	// refused, nothing written; the in-doubt scan's ABORTs use the reserve.
	if r, err := c.Commit(context.Background(), acked[0], []BranchRef{{RM: rmLong.Name}}, CommitMode{}); err != nil || r.Outcome != Committed {
		t.Errorf("repeated Commit on a full log: %v %v", r.Outcome, err)
	}
	aborted := newGTRID()
	if r, err := c.Abort(short(t), aborted, []BranchRef{{RM: rmLong.Name}}); !errors.Is(err, ErrLogFull) {
		t.Errorf("Abort of an undecided gtrid on a full log: %v %v, want ErrLogFull", r.Outcome, err)
	}

	// Nothing acknowledged is lost, nothing refused was written: restart.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c = open(t, opts)
	c.mu.Lock()
	remembered := len(c.txns)
	c.mu.Unlock()
	if remembered != len(acked) {
		t.Errorf("after restart %d decisions remembered, want the %d acknowledged", remembered, len(acked))
	}
	for _, g := range acked {
		mustStatus(t, c, g, false, Committed)
	}
	mustStatus(t, c, aborted, false, Undecided)
	if _, err := c.Commit(context.Background(), newGTRID(), []BranchRef{{RM: rmLong.Name}}, CommitMode{}); !errors.Is(err, ErrLogFull) {
		t.Fatalf("Commit after restart, log still full: %v", err)
	}

	// The resource manager comes back: phase 2 finishes, END records and a
	// checkpoint free the log, and commits are accepted again by themselves.
	sw.up.Store(true)
	deadline := time.Now().Add(20 * time.Second)
	for {
		u := c.Stats().Log
		if u.Used < logSize/2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the log did not drain: %s of %s in use; stats %+v", humanBytes(u.Used), humanBytes(logSize), c.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	r, err := c.Commit(context.Background(), newGTRID(), []BranchRef{{RM: rmLong.Name}}, CommitMode{WaitPhase2: true})
	if err != nil || r.Outcome != Committed || r.Phase2Pending {
		t.Fatalf("Commit after phase 2 caught up: %v %v pending %v", r.Outcome, err, r.Phase2Pending)
	}
	for deadline := time.Now().Add(10 * time.Second); c.Phase2Backlog() != 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("Phase2Backlog %d: phase 2 did not catch up", c.Phase2Backlog())
		}
	}
	st = c.Stats()
	t.Logf("drained: %s of %s in use after %d checkpoints (%d carried, %d finished COMMITs forgotten early)",
		humanBytes(st.Log.Used), humanBytes(logSize), st.Checkpoints, st.Carried, st.ForgotEarly)
}

// TestCheckpointCarriesSurvivors: a checkpoint carries forward what is
// still remembered, so that released segments lose nothing: an unfinished
// COMMIT is driven again after a restart, a finished ABORT (kept for
// MaxTxnAge) is still answered ABORTED and not driven again, and the
// restart replays only the live segments.
func TestCheckpointCarriesSurvivors(t *testing.T) {
	sw := &phase2Switch{}
	opts := circularOptions(t, MinLogSize, sw) // 8 KiB segments
	stuck := newGTRID()
	// Phase 2 of stuck never succeeds; every other one does.
	opts.settle = func(ctx context.Context, rm string, b xid.Branch, commit bool) error {
		if b.GTRID.String() == stuck {
			return errors.New(rmDown)
		}
		return nil
	}
	c := open(t, opts)
	if r, err := c.Commit(context.Background(), stuck, []BranchRef{{RM: rmLong.Name}}, CommitMode{}); err != nil || r.Outcome != Committed {
		t.Fatalf("Commit: %v %v", r.Outcome, err)
	}
	aborted := newGTRID()
	if r, err := c.Abort(context.Background(), aborted, []BranchRef{{RM: rmLong.Name}}); err != nil || r.Outcome != Aborted || r.Phase2Pending {
		t.Fatalf("Abort: %v %v pending %v", r.Outcome, err, r.Phase2Pending)
	}
	first := c.log.Segment()
	for i := 0; c.Stats().Log.First <= first+2; i++ {
		if r, err := c.Commit(context.Background(), newGTRID(), []BranchRef{{RM: rmLong.Name}}, CommitMode{WaitPhase2: true}); err != nil || r.Outcome != Committed {
			t.Fatalf("Commit %d: %v %v", i, r.Outcome, err)
		}
		if i > 100000 {
			t.Fatalf("no segment released: %+v", c.Stats())
		}
	}
	// The counters are updated just after the release the loop saw.
	for deadline := time.Now().Add(10 * time.Second); c.Stats().Carried < 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v: the two survivors were not carried", c.Stats())
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	calls := sw.calls.Load()
	c = open(t, opts)
	st := c.Stats()
	// Only the live segments replay: two, or three when a rotation was in
	// flight at Close (a loaded machine) — never the whole history.
	if st.Log.First <= first || st.Replayed > uint64(SegmentSizeFor(MinLogSize)/40)*3 {
		t.Errorf("restart replayed %d records from segment %d (first written %d)", st.Replayed, st.Log.First, first)
	}
	r := mustStatus(t, c, stuck, false, Committed)
	if !r.Phase2Pending {
		t.Errorf("unfinished COMMIT %s replayed as finished", stuck)
	}
	r = mustStatus(t, c, aborted, false, Aborted)
	if r.Phase2Pending || r.Reason != AbortRequested {
		t.Errorf("finished ABORT replayed as %+v", r)
	}
	time.Sleep(100 * time.Millisecond)
	if sw.calls.Load() != calls {
		t.Errorf("phase 2 was driven again for a finished decision after the restart")
	}
}

// TestReplayAcceptsDuplicates: a CHECKPOINT record repeats a decision;
// replay takes it (and its ended flag), but still refuses a contradiction.
func TestReplayAcceptsDuplicates(t *testing.T) {
	c := &Coordinator{txns: map[xid.GTRID]*txn{}}
	g := xid.New()
	d := decision{gtrid: g, decidedAt: time.Now(), rms: []string{"pg"}}
	at := func(seg uint64) wal.Position { return wal.Position{Segment: seg, Offset: 32} }
	if err := c.apply(at(1), recCommit, d.encode()); err != nil {
		t.Fatal(err)
	}
	cr := carried{decision: d, outcome: Committed}
	if err := c.apply(at(2), recCheckpoint, cr.encode()); err != nil {
		t.Fatalf("duplicate: %v", err)
	}
	if tx := c.txns[g]; tx.seg != 2 || tx.ended {
		t.Fatalf("after CHECKPOINT: seg %d ended %v", tx.seg, tx.ended)
	}
	cr.ended, cr.endedAt = true, time.Now()
	if err := c.apply(at(3), recCheckpoint, cr.encode()); err != nil {
		t.Fatal(err)
	}
	if tx := c.txns[g]; !tx.ended || !tx.endedAt.Equal(cr.endedAt) {
		t.Fatalf("ended flag not replayed")
	}
	g2 := xid.New()
	if err := c.apply(at(3), recCommit, (&decision{gtrid: g2, decidedAt: time.Now()}).encode()); err != nil {
		t.Fatal(err)
	}
	bad := carried{decision: decision{gtrid: g2, decidedAt: time.Now()}, outcome: Aborted}
	if err := c.apply(at(4), recCheckpoint, bad.encode()); err == nil || !strings.Contains(err.Error(), "both COMMIT and ABORT") {
		t.Fatalf("contradicting CHECKPOINT: %v", err)
	}
}
