package coord

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/xid"
)

// Both resource managers point at port 1, where nothing listens: Open works
// (it does not connect), every phase-2 call fails, and the coordinator keeps
// retrying in the background until Close.
var (
	rmPG    = rm.Config{Name: "pg", Driver: rm.Postgres, DSN: "postgres://u:p@127.0.0.1:1/db"}
	rmMaria = rm.Config{Name: "maria", Driver: rm.MySQL, DSN: "u:p@tcp(127.0.0.1:1)/db"}
	both    = []BranchRef{{RM: "pg"}, {RM: "maria"}}
)

func testOptions(dir string) Options {
	return Options{
		Dir:          dir,
		NoSync:       true,
		RMs:          []rm.Config{rmPG, rmMaria},
		ScanInterval: time.Hour,
		Logger:       slog.New(slog.DiscardHandler),
	}
}

// open opens a coordinator that the test closes at its end.
func open(t *testing.T, opts Options) *Coordinator {
	t.Helper()
	c, err := Open(opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newGTRID() string { return xid.New().String() }

// short is a context for calls that would otherwise wait Phase2Wait for
// resource managers that never answer.
func short(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	t.Cleanup(cancel)
	return ctx
}

func mustCommit(t *testing.T, c *Coordinator, g string, want Outcome) Report {
	t.Helper()
	r, err := c.Commit(context.Background(), g, both, CommitMode{})
	if err != nil {
		t.Fatalf("Commit(%s): %v", g, err)
	}
	if r.Outcome != want {
		t.Fatalf("Commit(%s) = %s (%s), want %s", g, r.Outcome, r.Message, want)
	}
	return r
}

func mustStatus(t *testing.T, c *Coordinator, g string, resolve bool, want Outcome) Report {
	t.Helper()
	r, err := c.Status(context.Background(), g, resolve)
	if err != nil {
		t.Fatalf("Status(%s, resolve=%v): %v", g, resolve, err)
	}
	if r.Outcome != want {
		t.Fatalf("Status(%s, resolve=%v) = %s (%s), want %s", g, resolve, r.Outcome, r.Message, want)
	}
	return r
}

func TestCommitIsFinal(t *testing.T) {
	c := open(t, testOptions(t.TempDir()))
	g := newGTRID()
	first := mustCommit(t, c, g, Committed)
	if !first.Phase2Pending {
		t.Errorf("Commit with both databases down: Phase2Pending = false")
	}
	if len(first.Branches) != 2 {
		t.Errorf("Commit report has %d branches, want 2", len(first.Branches))
	}
	again := mustCommit(t, c, g, Committed)
	if !again.DecidedAt.Equal(first.DecidedAt) {
		t.Errorf("a repeated Commit decided again: %s, first %s", again.DecidedAt, first.DecidedAt)
	}
	_, err := c.Abort(short(t), g, both)
	if !errors.Is(err, ErrAlreadyCommitted) {
		t.Fatalf("Abort after Commit: %v, want ErrAlreadyCommitted", err)
	}
	mustStatus(t, c, g, true, Committed)
}

func TestAbortThenCommit(t *testing.T) {
	c := open(t, testOptions(t.TempDir()))
	g := newGTRID()
	r, err := c.Abort(short(t), g, both)
	if err != nil {
		t.Fatalf("Abort: %v", err)
	}
	if r.Outcome != Aborted || r.Reason != AbortRequested {
		t.Fatalf("Abort = %s reason %d, want ABORTED by request", r.Outcome, r.Reason)
	}
	r = mustCommit(t, c, g, Aborted)
	if r.Reason != AbortRequested {
		t.Errorf("Commit after Abort: reason %v, want the Abort's", r.Reason)
	}
	// Abort again is answered, not refused.
	if r, err := c.Abort(short(t), g, both); err != nil || r.Outcome != Aborted {
		t.Errorf("second Abort: %v, %v", r.Outcome, err)
	}
}

func TestStatusResolvesAnUnknownGTRID(t *testing.T) {
	c := open(t, heldEverywhere(testOptions(t.TempDir())))
	g := newGTRID()
	r := mustStatus(t, c, g, false, Undecided)
	if r.Message == "" {
		t.Errorf("Undecided Status has no message")
	}
	mustStatus(t, c, g, false, Undecided) // Status without resolve writes nothing
	r = mustStatus(t, c, g, true, Aborted)
	if r.Reason != AbortResolved {
		t.Errorf("resolved reason = %d, want AbortResolved", r.Reason)
	}
	mustStatus(t, c, g, false, Aborted)
	mustCommit(t, c, g, Aborted)
}

// Many goroutines race Commit against Status(resolve): exactly one decision
// wins and every caller sees it.
func TestCommitRacesResolve(t *testing.T) {
	c := open(t, heldEverywhere(testOptions(t.TempDir())))
	const rounds, callers = 30, 16
	seen := map[Outcome]int{}
	for range rounds {
		g := newGTRID()
		outcomes := make([]Outcome, callers)
		errs := make([]error, callers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				var r Report
				if i%2 == 0 {
					r, errs[i] = c.Commit(context.Background(), g, both, CommitMode{})
				} else {
					r, errs[i] = c.Status(context.Background(), g, true)
				}
				outcomes[i] = r.Outcome
			}()
		}
		close(start)
		wg.Wait()
		for i := range callers {
			if errs[i] != nil {
				t.Fatalf("caller %d: %v", i, errs[i])
			}
			if outcomes[i] != outcomes[0] || outcomes[i] == Undecided {
				t.Fatalf("gtrid %s: callers saw %v", g, outcomes)
			}
		}
		mustStatus(t, c, g, false, outcomes[0])
		seen[outcomes[0]]++
	}
	t.Logf("outcomes over %d rounds: %v", rounds, seen)
}

func TestInvalidInput(t *testing.T) {
	c := open(t, testOptions(t.TempDir()))
	g := newGTRID()
	tooMany := make([]BranchRef, MaxBranches+1)
	for i := range tooMany {
		tooMany[i] = BranchRef{RM: "pg"}
	}
	tests := []struct {
		name  string
		gtrid string
		rms   []BranchRef
		field string
		abort bool // also refused by Abort
	}{
		{"short gtrid", "abc", both, "gtrid", true},
		{"uppercase gtrid", strings.ToUpper(g), both, "gtrid", true},
		{"zero gtrid", strings.Repeat("0", 32), both, "gtrid", true},
		{"no branches", g, nil, "branches", false},
		{"unknown rm", g, []BranchRef{{RM: "pg"}, {RM: "oracle"}}, "branches", true},
		{"duplicate rm", g, []BranchRef{{RM: "pg"}, {RM: "maria"}, {RM: "pg"}}, "branches", true},
		{"too many branches", g, tooMany, "branches", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var ie *InputError
			_, err := c.Commit(context.Background(), tc.gtrid, tc.rms, CommitMode{})
			if !errors.As(err, &ie) || ie.Field != tc.field {
				t.Errorf("Commit: %v, want an InputError on %s", err, tc.field)
			}
			_, err = c.Abort(short(t), tc.gtrid, tc.rms)
			if tc.abort && (!errors.As(err, &ie) || ie.Field != tc.field) {
				t.Errorf("Abort: %v, want an InputError on %s", err, tc.field)
			}
		})
	}
	var ie *InputError
	if _, err := c.Status(context.Background(), "nothex", true); !errors.As(err, &ie) || ie.Field != "gtrid" {
		t.Errorf("Status with a bad gtrid: %v, want an InputError", err)
	}
	// Abort may list no branches, and the refused Commits wrote nothing for g
	// before it (Abort decides it now, not a refused Commit earlier).
	r, err := c.Abort(short(t), g, nil)
	if err != nil || r.Outcome != Aborted || r.Reason != AbortRequested {
		t.Errorf("Abort without branches after refused requests: %v reason %d, %v", r.Outcome, r.Reason, err)
	}
}

func TestReplayKeepsDecisions(t *testing.T) {
	dir := t.TempDir()
	c, err := Open(heldEverywhere(testOptions(dir)))
	if err != nil {
		t.Fatal(err)
	}
	committed, aborted, resolved := newGTRID(), newGTRID(), newGTRID()
	before := mustCommit(t, c, committed, Committed)
	abortReport, err := c.Abort(short(t), aborted, []BranchRef{{RM: "pg"}})
	if err != nil || abortReport.Outcome != Aborted {
		t.Fatalf("Abort: %v %v", abortReport.Outcome, err)
	}
	mustStatus(t, c, resolved, true, Aborted)
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	c = open(t, testOptions(dir))
	r := mustStatus(t, c, committed, false, Committed)
	if !r.Phase2Pending {
		t.Errorf("a COMMIT without END replayed with Phase2Pending = false")
	}
	if !r.DecidedAt.Equal(before.DecidedAt) {
		t.Errorf("replayed DecidedAt %s, want %s", r.DecidedAt, before.DecidedAt)
	}
	if got := branchNames(r); got != "maria,pg" && got != "pg,maria" {
		t.Errorf("replayed branches %q, want pg and maria", got)
	}
	r = mustStatus(t, c, aborted, false, Aborted)
	if r.Reason != AbortRequested || !r.DecidedAt.Equal(abortReport.DecidedAt) {
		t.Errorf("replayed abort: reason %d decided %s; want %d %s", r.Reason, r.DecidedAt, AbortRequested, abortReport.DecidedAt)
	}
	r = mustStatus(t, c, resolved, false, Aborted)
	if r.Reason != AbortResolved {
		t.Errorf("replayed resolve: reason %d", r.Reason)
	}
	mustCommit(t, c, committed, Committed)
	mustCommit(t, c, aborted, Aborted)
	mustCommit(t, c, resolved, Aborted)
	if _, err := c.Abort(short(t), committed, nil); !errors.Is(err, ErrAlreadyCommitted) {
		t.Errorf("Abort of a replayed COMMIT: %v, want ErrAlreadyCommitted", err)
	}
	_, _, unfinished := c.Health(short(t))
	if unfinished < 2 {
		t.Errorf("Health: %d unfinished, want at least 2 (the COMMIT and the ABORT on pg)", unfinished)
	}
}

func branchNames(r Report) string {
	var s []string
	for _, b := range r.Branches {
		s = append(s, b.RM)
	}
	return strings.Join(s, ",")
}

func TestSecondOpenOnTheSameDirFails(t *testing.T) {
	dir := t.TempDir()
	first, err := Open(testOptions(dir))
	if err != nil {
		t.Fatal(err)
	}
	second, err := Open(testOptions(dir))
	if err == nil {
		second.Close()
		first.Close()
		t.Fatal("a second Open on the same Dir succeeded")
	}
	if !strings.Contains(err.Error(), "in use by another coordinator") {
		t.Errorf("second Open: %v", err)
	}
	// The refused Open did not disturb the first.
	g := newGTRID()
	mustCommit(t, first, g, Committed)
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	// Once the first is closed, the directory can be opened again.
	c := open(t, testOptions(dir))
	mustStatus(t, c, g, false, Committed)
}

func TestCommitOfAnOldGTRIDAborts(t *testing.T) {
	opts := testOptions(t.TempDir())
	opts.MaxTxnAge = time.Hour
	c := open(t, opts)
	g := xid.NewAt(0, time.Now().Add(-2*time.Hour)).String()
	r := mustCommit(t, c, g, Aborted)
	if r.Reason != AbortTooOld {
		t.Errorf("reason %d, want AbortTooOld", r.Reason)
	}
	if !strings.Contains(r.Message, "max-txn-age") {
		t.Errorf("message %q does not say why", r.Message)
	}
	mustStatus(t, c, g, false, Aborted)
	// A young gtrid still commits.
	mustCommit(t, c, xid.NewAt(0, time.Now().Add(-30*time.Minute)).String(), Committed)
}

// deadlineOnly is a context with a deadline whose Done never closes: a call
// that returns was ended by its own wait, not by the caller's context.
type deadlineOnly struct {
	context.Context
	dl time.Time
}

func (d deadlineOnly) Deadline() (time.Time, bool) { return d.dl, true }

func TestCommitWaitRepliesBeforeTheDeadline(t *testing.T) {
	opts := testOptions(t.TempDir())
	opts.Phase2Wait = time.Hour // only the caller's deadline ends the wait
	c := open(t, opts)
	// 3 s: the reply's margin before the deadline is then its largest,
	// 250 ms (with 300 ms it was 35 ms, less than a busy machine may take
	// to run the replying goroutine).
	start := time.Now()
	dl := start.Add(3 * time.Second)
	type result struct {
		r   Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := c.Commit(deadlineOnly{Context: context.Background(), dl: dl}, newGTRID(), both, CommitMode{WaitPhase2: true})
		done <- result{r, err}
	}()
	var res result
	select {
	case res = <-done:
	case <-time.After(time.Minute):
		t.Fatal("Commit with waitPhase2 and a deadline 3 s away did not return within a minute: it does not reply before the caller's deadline")
	}
	took := time.Since(start)
	r, err := res.r, res.err
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if !time.Now().Before(dl) {
		t.Fatalf("Commit returned after the caller's deadline (took %s)", took)
	}
	if r.Outcome != Committed || !r.Phase2Pending {
		t.Fatalf("Commit = %s pending=%v, want COMMITTED with phase 2 pending", r.Outcome, r.Phase2Pending)
	}
	if took < 2*time.Second {
		t.Errorf("Commit with waitPhase2 replied after %s: it did not wait for phase 2", took)
	}
	if !strings.Contains(r.Message, "pending") {
		t.Errorf("message %q does not say phase 2 is pending", r.Message)
	}
}

func TestCloseTwiceAndAfterClose(t *testing.T) {
	c, err := Open(testOptions(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	mustCommit(t, c, newGTRID(), Committed) // a phase-2 driver is running
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := c.Commit(context.Background(), newGTRID(), both, CommitMode{}); !errors.Is(err, ErrClosed) {
		t.Errorf("Commit after Close: %v, want ErrClosed", err)
	}
	if _, err := c.Status(context.Background(), newGTRID(), true); !errors.Is(err, ErrClosed) {
		t.Errorf("Status(resolve) after Close: %v, want ErrClosed", err)
	}
	if err := c.ScanNow(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("ScanNow after Close: %v, want ErrClosed", err)
	}
}

func TestOpenRejectsBadRMConfig(t *testing.T) {
	for name, rms := range map[string][]rm.Config{
		"none":      nil,
		"duplicate": {rmPG, rmPG},
		"bad dsn":   {{Name: "pg", Driver: rm.Postgres, DSN: "postgres://u:Sekr1t@127.0.0.1:bad/db"}},
		"bad name":  {{Name: "PG", Driver: rm.Postgres, DSN: rmPG.DSN}},
	} {
		opts := testOptions(t.TempDir())
		opts.RMs = rms
		c, err := Open(opts)
		if err == nil {
			c.Close()
			t.Errorf("%s: Open succeeded", name)
			continue
		}
		if strings.Contains(err.Error(), "Sekr1t") {
			t.Errorf("%s: error shows the password: %v", name, err)
		}
	}
}

func TestHealthAndScanWithDatabasesDown(t *testing.T) {
	c := open(t, testOptions(t.TempDir()))
	if got := strings.Join(c.RMNames(), ","); got != "maria,pg" {
		t.Errorf("RMNames = %s, want maria,pg", got)
	}
	serving, rms, unfinished := c.Health(short(t))
	if !serving || unfinished != 0 || len(rms) != 2 {
		t.Fatalf("Health = %v %v %d", serving, rms, unfinished)
	}
	for _, h := range rms {
		if h.Err == nil || !strings.Contains(h.Err.Error(), `rm "`+h.Name+`"`) {
			t.Errorf("Health of %s (port 1): %v, want an error naming it", h.Name, h.Err)
		}
	}
	// A scan whose every database fails still completes.
	if err := c.ScanNow(short(t)); err != nil {
		t.Errorf("ScanNow: %v", err)
	}
}

// An in-doubt scan whose databases fail reads the first-seen table while
// decisions delete from it: run both at once (the race detector checks).
func TestScanWithFailingDatabasesRacesDecisions(t *testing.T) {
	c := open(t, testOptions(t.TempDir()))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := c.ScanNow(context.Background()); err != nil {
				t.Errorf("ScanNow: %v", err)
				return
			}
		}
	}()
	for range 150 {
		mustCommit(t, c, newGTRID(), Committed)
	}
	close(stop)
	wg.Wait()
}
