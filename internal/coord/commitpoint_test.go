package coord

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dtable "github.com/tandem-tx/tandem/internal/decision"
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

// fakeTables is decisionTables in memory: one table per RM name.
type fakeTables struct {
	mu        sync.Mutex
	rows      map[string]map[xid.GTRID]dtable.Outcome
	pending   map[xid.GTRID]bool // Resolve answers ErrPending (the commit point's transaction holds the key)
	old       map[xid.GTRID]bool // Rows lists only these (older than its olderThan)
	lookups   int
	resolves  int
	ensured   map[string]int
	ensureErr error
	keep      time.Duration // SweepAborts' last keep
	olderThan time.Duration // Rows' last olderThan
	forgotten map[string][]xid.GTRID
}

func newFakeTables() *fakeTables {
	return &fakeTables{rows: map[string]map[xid.GTRID]dtable.Outcome{}, pending: map[xid.GTRID]bool{}, old: map[xid.GTRID]bool{},
		ensured: map[string]int{}, forgotten: map[string][]xid.GTRID{}}
}

func (f *fakeTables) set(rmName string, g xid.GTRID, o dtable.Outcome) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rows[rmName] == nil {
		f.rows[rmName] = map[xid.GTRID]dtable.Outcome{}
	}
	f.rows[rmName][g] = o
}

func (f *fakeTables) get(rmName string, g xid.GTRID) (dtable.Outcome, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	o, ok := f.rows[rmName][g]
	return o, ok
}

func (f *fakeTables) Ensure(_ context.Context, rmName string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ensured[rmName]++
	return f.ensureErr
}

func (f *fakeTables) Lookup(_ context.Context, rmName string, g xid.GTRID) (dtable.Outcome, bool, error) {
	f.mu.Lock()
	f.lookups++
	f.mu.Unlock()
	o, ok := f.get(rmName, g)
	return o, ok, nil
}

func (f *fakeTables) Resolve(_ context.Context, rmName string, g xid.GTRID, _ time.Duration) (dtable.Outcome, error) {
	f.mu.Lock()
	f.resolves++
	pending := f.pending[g]
	f.mu.Unlock()
	if pending {
		return 0, dtable.ErrPending
	}
	if o, ok := f.get(rmName, g); ok {
		return o, nil
	}
	f.set(rmName, g, dtable.Aborted)
	return dtable.Aborted, nil
}

func (f *fakeTables) SweepAborts(_ context.Context, rmName string, keep time.Duration) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keep = keep
	return 0, nil
}

func (f *fakeTables) Rows(_ context.Context, rmName string, olderThan time.Duration) ([]dtable.Row, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.olderThan = olderThan
	var out []dtable.Row
	for g, o := range f.rows[rmName] {
		if !f.old[g] {
			continue
		}
		out = append(out, dtable.Row{GTRID: g, Outcome: o})
	}
	return out, nil
}

func (f *fakeTables) Forget(_ context.Context, rmName string, gs []xid.GTRID) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var n int64
	for _, g := range gs {
		if f.rows[rmName][g] == dtable.Committed {
			delete(f.rows[rmName], g)
			f.forgotten[rmName] = append(f.forgotten[rmName], g)
			n++
		}
	}
	return n, nil
}

// settleLog records the settle seam's calls and answers them.
type settleLog struct {
	mu       sync.Mutex
	calls    map[xid.Branch][]bool // commit?
	notFound map[xid.Branch]bool   // answer ErrBranchNotFound
	held     map[xid.Branch]bool   // the prepared seam's answer
}

func newSettleLog() *settleLog {
	return &settleLog{calls: map[xid.Branch][]bool{}, notFound: map[xid.Branch]bool{}, held: map[xid.Branch]bool{}}
}

func (s *settleLog) settle(_ context.Context, _ string, b xid.Branch, commit bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[b] = append(s.calls[b], commit)
	if s.notFound[b] {
		return rm.ErrBranchNotFound
	}
	return nil
}

func (s *settleLog) prepared(_ context.Context, _ string, b xid.Branch) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held[b], nil
}

func (s *settleLog) got(b xid.Branch) []bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]bool(nil), s.calls[b]...)
}

// cpOptions are test options with fake decision tables, settle and prepared
// seams, and RMs whose recover scans list nothing unless scans says so.
func cpOptions(t *testing.T, f *fakeTables, s *settleLog, scans func(string) ([]rm.InDoubt, error)) (Options, *logBuf) {
	opts := testOptions(t.TempDir())
	opts.OrphanTimeout = time.Minute
	opts.decisions = f
	opts.settle = s.settle
	opts.prepared = s.prepared
	if scans == nil {
		scans = func(string) ([]rm.InDoubt, error) { return nil, nil }
	}
	opts.recover = func(_ context.Context, name string) ([]rm.InDoubt, error) { return scans(name) }
	logs := &logBuf{}
	opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
	return opts, logs
}

// openCP opens a coordinator and waits for the scan it runs at start, so
// that the test's own calls do not interleave with it.
func openCP(t *testing.T, opts Options) *Coordinator {
	c := open(t, opts)
	if err := c.ScanNow(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c
}

// A prepared branch named with a commit point is settled from the commit
// point's decision table, never from this coordinator's log:
//   - a committed 'C' (or 'A') row settles it at once, first time seen;
//   - no row: nothing before the orphan timeout; after it the key is taken
//     (Resolve): 'A' recorded there, the branch rolled back;
//   - the key held by the commit point's open transaction (ErrPending): left
//     for the next scan, then settled by what the commit point committed;
//   - a commit point not configured here: left alone, said once a minute;
//   - MariaDB "not found" while a recover scan lists it: held by the
//     client's session, tried again; settled once the scan no longer lists it.
//
// Nothing is written to the log, and InDoubt never lists them.
func TestCommitPointBranchRecovery(t *testing.T) {
	f, s := newFakeTables(), newSettleLog()
	opts, logs := cpOptions(t, f, s, nil)
	opts.OrphanTimeout = 10 * time.Second // the three scans below fall within a minute: one complaint
	c := openCP(t, opts)
	now := time.Now()
	br := func(g xid.GTRID, rmName, cp string) xid.Branch {
		return xid.Branch{GTRID: g, RM: rmName, CommitPoint: cp}
	}
	committed, aborted, orphan, pending, unknown, held := xid.New(), xid.New(), xid.New(), xid.New(), xid.New(), xid.New()
	f.set("maria", committed, dtable.Committed)
	f.set("maria", aborted, dtable.Aborted)
	f.pending[pending] = true
	bHeld := br(held, "maria", "pg")
	f.set("pg", held, dtable.Committed)
	s.notFound[bHeld], s.held[bHeld] = true, true

	scan := func(at time.Time, bs ...xid.Branch) {
		for _, b := range bs {
			c.settleInDoubt(rm.InDoubt{Branch: b}, at)
		}
	}
	all := []xid.Branch{br(committed, "pg", "maria"), br(aborted, "pg", "maria"), br(orphan, "pg", "maria"),
		br(pending, "pg", "maria"), br(unknown, "pg", "elsewhere"), bHeld}
	scan(now, all...)
	for _, b := range all {
		if got := s.got(b); len(got) != 0 {
			t.Errorf("gtrid %s settled %v at first sight, want left to its client for a quarter of the orphan timeout", b.GTRID, got)
		}
	}
	f.mu.Lock()
	reads := f.lookups
	f.mu.Unlock()
	if reads != 0 {
		t.Errorf("%d decision-table reads at first sight, want none", reads)
	}
	scan(now.Add(opts.OrphanTimeout/4+time.Second), all...)
	if got := s.got(all[0]); len(got) != 1 || !got[0] {
		t.Errorf("'C' row: settle calls %v, want one commit after the grace", got)
	}
	if got := s.got(all[1]); len(got) != 1 || got[0] {
		t.Errorf("'A' row: settle calls %v, want one rollback after the grace", got)
	}
	for _, b := range all[2:5] {
		if got := s.got(b); len(got) != 0 {
			t.Errorf("gtrid %s (cp %s) settled %v before the orphan timeout, want left alone", b.GTRID, b.CommitPoint, got)
		}
	}
	f.mu.Lock()
	resolves := f.resolves
	f.mu.Unlock()
	if resolves != 0 {
		t.Errorf("%d Resolve calls before the orphan timeout, want 0 (the key is not taken early)", resolves)
	}
	if got := s.got(bHeld); len(got) != 1 || !got[0] {
		t.Errorf("MariaDB branch: settle calls %v, want one commit attempt", got)
	}

	// Past the orphan timeout.
	later := now.Add(opts.OrphanTimeout + time.Second)
	scan(later, all[2:]...)
	if got := s.got(all[2]); len(got) != 1 || got[0] {
		t.Errorf("orphan: settle calls %v, want one rollback after the orphan timeout", got)
	}
	if o, ok := f.get("maria", orphan); !ok || o != dtable.Aborted {
		t.Errorf("orphan: decision row %v %v, want 'A' recorded at the commit point (the key taken)", o, ok)
	}
	if got := s.got(all[3]); len(got) != 0 {
		t.Errorf("pending: settle calls %v, want none while the commit point's transaction holds the key", got)
	}
	if got := s.got(all[4]); len(got) != 0 {
		t.Errorf("unknown commit point: settle calls %v, want none (never guessed)", got)
	}
	// The commit point's transaction commits after all; the client's
	// session that held the MariaDB branch goes away.
	f.mu.Lock()
	delete(f.pending, pending)
	f.mu.Unlock()
	f.set("maria", pending, dtable.Committed)
	s.mu.Lock()
	s.held[bHeld] = false
	s.mu.Unlock()
	scan(later.Add(time.Second), all[3:]...)
	if got := s.got(all[3]); len(got) != 1 || !got[0] {
		t.Errorf("pending, then committed: settle calls %v, want one commit", got)
	}
	if got := s.got(bHeld); len(got) != 3 || !got[2] {
		t.Errorf("MariaDB branch released by its session: settle calls %v, want a commit attempt at each of the three scans", got)
	}
	if n := strings.Count(logs.String(), "held by its client's session"); n != 2 {
		t.Errorf("the MariaDB branch was reported held %d times, want 2 (then settled)", n)
	}

	c.mu.Lock()
	n := len(c.txns)
	c.mu.Unlock()
	if n != 0 {
		t.Errorf("%d decisions in the coordinator's log, want none: commit-point decisions live in the databases", n)
	}
	if got := c.InDoubt(); len(got) != 0 {
		t.Errorf("InDoubt = %+v, want none (a commit-point branch is not an operator's to settle)", got)
	}
	out := logs.String()
	if n := strings.Count(out, "not configured on this coordinator"); n != 1 {
		t.Errorf("the unconfigured commit point was logged %d times over three scans, want once (rate-limited):\n%s", n, out)
	}
	if !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "not configured") {
		t.Errorf("no error saying the commit point is not configured:\n%s", out)
	}
}

// The scan settles commit-point branches it lists (several at once), and
// an ordinary orphan is still presumed aborted in the log: the commit-point
// path is for commit-point branches only.
func TestScanSettlesCommitPointBranches(t *testing.T) {
	f, s := newFakeTables(), newSettleLog()
	var gs []xid.GTRID
	for range 20 {
		g := xid.New()
		gs = append(gs, g)
		f.set("maria", g, dtable.Committed)
	}
	ord := xid.New()
	var mu sync.Mutex
	listed := true
	opts, _ := cpOptions(t, f, s, func(name string) ([]rm.InDoubt, error) {
		mu.Lock()
		defer mu.Unlock()
		if name != "pg" || !listed {
			return nil, nil
		}
		out := []rm.InDoubt{{Branch: xid.Branch{GTRID: ord, RM: "pg"}}}
		for _, g := range gs {
			out = append(out, rm.InDoubt{Branch: xid.Branch{GTRID: g, RM: "pg", CommitPoint: "maria"}})
		}
		return out, nil
	})
	opts.OrphanTimeout = time.Millisecond
	c := openCP(t, opts)
	time.Sleep(5 * time.Millisecond)
	if err := c.ScanNow(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, g := range gs {
		if got := s.got(xid.Branch{GTRID: g, RM: "pg", CommitPoint: "maria"}); len(got) == 0 || !got[0] {
			t.Fatalf("gtrid %s: settle calls %v, want commit", g, got)
		}
	}
	c.mu.Lock()
	ordT, cpT := c.txns[ord], c.txns[gs[0]]
	c.mu.Unlock()
	if ordT == nil || ordT.outcome != Aborted {
		t.Errorf("an ordinary orphan: %v, want presumed ABORTED in the log", ordT)
	}
	if cpT != nil {
		t.Errorf("a commit-point gtrid has a decision in the log: %v", cpT)
	}
}

// Status of a gtrid with no record here whose prepared branch names a
// commit point answers from that commit point's table; with resolve it
// takes the key and settles the branch. A commit point not configured here
// is named, nothing taken.
func TestStatusOfCommitPointGTRID(t *testing.T) {
	f, s := newFakeTables(), newSettleLog()
	committed, undecided, unknown := xid.New(), xid.New(), xid.New()
	f.set("maria", committed, dtable.Committed)
	branches := map[xid.GTRID]xid.Branch{
		committed: {GTRID: committed, RM: "pg", CommitPoint: "maria"},
		undecided: {GTRID: undecided, RM: "pg", CommitPoint: "maria"},
		unknown:   {GTRID: unknown, RM: "pg", CommitPoint: "elsewhere"},
	}
	var listing atomic.Bool
	opts, _ := cpOptions(t, f, s, func(name string) ([]rm.InDoubt, error) {
		if name != "pg" || !listing.Load() {
			return nil, nil
		}
		var out []rm.InDoubt
		for _, b := range branches {
			out = append(out, rm.InDoubt{Branch: b})
		}
		return out, nil
	})
	opts.InDoubtBefore = time.Now().Add(time.Hour) // an unsynchronized promotion changes nothing for them
	c := openCP(t, opts)
	listing.Store(true)
	r := mustStatus(t, c, committed.String(), false, Committed)
	if !strings.Contains(r.Message, "commit point maria") || len(s.got(branches[committed])) != 0 {
		t.Errorf("Status = %q, settle calls %v: want the commit point named and nothing settled without resolve", r.Message, s.got(branches[committed]))
	}
	r = mustStatus(t, c, undecided.String(), false, Undecided)
	if !strings.Contains(r.Message, "no decision there yet") {
		t.Errorf("Status of an undecided commit-point gtrid: %q", r.Message)
	}
	if _, ok := f.get("maria", undecided); ok {
		t.Fatalf("Status without resolve recorded a decision")
	}
	r = mustStatus(t, c, undecided.String(), true, Aborted)
	if o, ok := f.get("maria", undecided); !ok || o != dtable.Aborted {
		t.Errorf("Status --resolve: decision row %v %v, want 'A' (the key taken)", o, ok)
	}
	if got := s.got(branches[undecided]); len(got) != 1 || got[0] || r.Phase2Pending {
		t.Errorf("Status --resolve: settle calls %v, pending %v: want the branch rolled back", got, r.Phase2Pending)
	}
	r = mustStatus(t, c, unknown.String(), true, Undecided)
	if !strings.Contains(r.Message, "not configured") {
		t.Errorf("Status --resolve with an unconfigured commit point: %q", r.Message)
	}
	c.mu.Lock()
	n := len(c.txns)
	c.mu.Unlock()
	if n != 0 {
		t.Errorf("%d decisions written to the log, want none", n)
	}
}

// The sweep deletes 'A' rows older than MaxTxnAge + 10 min, and forgets the
// 'C' rows of gtrids with no branch prepared anywhere, only after a
// complete scan.
func TestSweepForgetsOnlyUnpreparedCommits(t *testing.T) {
	f, s := newFakeTables(), newSettleLog()
	gone, stillPrepared, abort := xid.New(), xid.New(), xid.New()
	f.set("maria", gone, dtable.Committed)
	f.set("maria", stillPrepared, dtable.Committed)
	f.set("maria", abort, dtable.Aborted)
	f.old[gone], f.old[stillPrepared], f.old[abort] = true, true, true
	var down atomic.Bool
	opts, _ := cpOptions(t, f, s, func(name string) ([]rm.InDoubt, error) {
		if down.Load() && name == "maria" {
			return nil, errors.New("maria is down")
		}
		if name == "pg" {
			return []rm.InDoubt{{Branch: xid.Branch{GTRID: stillPrepared, RM: "pg", CommitPoint: "maria"}}}, nil
		}
		return nil, nil
	})
	opts.MaxTxnAge = 30 * time.Minute
	opts.OrphanTimeout = 10 * time.Second
	down.Store(true)
	c := open(t, opts)
	st, err := c.SweepNow(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Complete || st.CommitsForgotten != 0 {
		t.Fatalf("sweep with an RM down: %+v, want incomplete and nothing forgotten", st)
	}
	if _, ok := f.get("maria", gone); !ok {
		t.Fatalf("a 'C' row was forgotten without a complete scan")
	}
	down.Store(false)
	st, err = c.SweepNow(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !st.Complete || st.CommitsForgotten != 1 {
		t.Errorf("sweep: %+v, want complete, one 'C' forgotten", st)
	}
	if _, ok := f.get("maria", gone); ok {
		t.Errorf("the 'C' row of a gtrid with no prepared branch was kept")
	}
	if _, ok := f.get("maria", stillPrepared); !ok {
		t.Errorf("the 'C' row of a gtrid with a branch still prepared was forgotten")
	}
	if _, ok := f.get("maria", abort); !ok {
		t.Errorf("an 'A' row was forgotten (only SweepAborts deletes them, after the keep time)")
	}
	f.mu.Lock()
	keep, older := f.keep, f.olderThan
	f.mu.Unlock()
	// Kept past the SDK's longest commit point (1h), whatever this
	// coordinator's MaxTxnAge (shorter here): a late commit point is
	// refused by the 'A' row until its own age check refuses it.
	if keep != max(opts.MaxTxnAge, time.Hour)+10*time.Minute || older != forgetAfterOrphans*opts.OrphanTimeout {
		t.Errorf("SweepAborts keep %s, Rows olderThan %s: want max(MaxTxnAge, 1h)+10m and %d orphan timeouts", keep, older, forgetAfterOrphans)
	}
}

// Open creates the decision table on every RM that answers; a failure is a
// warning naming the RM and tandem init-rm, not a failed start.
func TestOpenEnsuresTheDecisionTable(t *testing.T) {
	f, s := newFakeTables(), newSettleLog()
	f.ensureErr = errors.New("permission denied for schema public")
	opts, logs := cpOptions(t, f, s, nil)
	c := openCP(t, opts) // the RMs at port 1 do not answer Open's ping: the sweep tries
	if _, err := c.SweepNow(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	pg, maria := f.ensured["pg"], f.ensured["maria"]
	f.mu.Unlock()
	if pg == 0 || maria == 0 {
		t.Errorf("Ensure calls pg %d maria %d, want both tried", pg, maria)
	}
	out := logs.String()
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "tandem init-rm --rm pg=") || !strings.Contains(out, "permission denied") {
		t.Errorf("no warning naming the RM, the cause and tandem init-rm:\n%s", out)
	}
	f.mu.Lock()
	f.ensureErr = nil
	f.mu.Unlock()
	for range 2 {
		if _, err := c.SweepNow(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	f.mu.Lock()
	pg2 := f.ensured["pg"]
	f.mu.Unlock()
	if pg2 != pg+1 {
		t.Errorf("Ensure on pg called %d more times over two sweeps after it succeeded, want exactly 1 (then remembered)", pg2-pg)
	}
}
