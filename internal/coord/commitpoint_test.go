package coord

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
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
	mu         sync.Mutex
	rows       map[string]map[xid.GTRID]dtable.Outcome
	pending    map[xid.GTRID]bool // Resolve answers ErrPending (the commit point's transaction holds the key)
	old        map[xid.GTRID]bool // Rows lists only these (older than its olderThan)
	lookups    int
	resolves   int
	ensured    map[string]int
	ensureErr  error
	idChecks   map[string]int // AddIDCheck calls
	idCheckErr error
	keep       time.Duration // SweepAborts' last keep
	olderThan  time.Duration // Rows' last olderThan
	forgotten  map[string][]xid.GTRID
	ids        map[string]xid.Owner // each RM's table id
	parts      map[xid.GTRID]string // the participants column of 'C' rows
	vanish     map[xid.GTRID]bool   // Resolve answers ErrVanished
	resolved   map[xid.GTRID]int    // Resolve calls per gtrid
	veryOld    map[xid.GTRID]bool   // Rows lists only these when asked for rows older than decision.ForgetMinAge
	rowsLimit  int                  // Rows returns at most this many, in gtrid order after its after, as the database does (0: all)
}

func newFakeTables() *fakeTables {
	return &fakeTables{rows: map[string]map[xid.GTRID]dtable.Outcome{}, pending: map[xid.GTRID]bool{}, old: map[xid.GTRID]bool{},
		ensured: map[string]int{}, idChecks: map[string]int{}, forgotten: map[string][]xid.GTRID{},
		ids:   map[string]xid.Owner{"pg": xid.NewOwner(), "maria": xid.NewOwner()},
		parts: map[xid.GTRID]string{}, vanish: map[xid.GTRID]bool{}, resolved: map[xid.GTRID]int{}}
}

// id is RM name's table id.
func (f *fakeTables) id(name string) xid.Owner {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ids[name]
}

// check answers ErrWrongTable as the database would when the caller's
// expected id is not the table's.
func (f *fakeTables) check(name string, table xid.Owner) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !table.IsZero() && f.ids[name] != table {
		return dtable.ErrWrongTable
	}
	return nil
}

func (f *fakeTables) ID(_ context.Context, name string) (xid.Owner, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id, ok := f.ids[name]
	if !ok {
		return id, dtable.ErrNoID
	}
	return id, nil
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

func (f *fakeTables) AddIDCheck(_ context.Context, rmName string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.idChecks[rmName]++
	return f.idCheckErr
}

func (f *fakeTables) Lookup(_ context.Context, rmName string, g xid.GTRID, table xid.Owner) (dtable.Outcome, bool, error) {
	f.mu.Lock()
	f.lookups++
	f.mu.Unlock()
	if err := f.check(rmName, table); err != nil {
		return 0, false, err
	}
	o, ok := f.get(rmName, g)
	return o, ok, nil
}

func (f *fakeTables) Resolve(_ context.Context, rmName string, g xid.GTRID, table xid.Owner, _ time.Duration) (dtable.Outcome, error) {
	f.mu.Lock()
	f.resolves++
	f.resolved[g]++
	pending, vanish := f.pending[g], f.vanish[g]
	f.mu.Unlock()
	if err := f.check(rmName, table); err != nil {
		return 0, err
	}
	if pending {
		return 0, dtable.ErrPending
	}
	if vanish {
		return 0, dtable.ErrVanished
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

func (f *fakeTables) Rows(_ context.Context, rmName string, olderThan time.Duration, after xid.GTRID) ([]dtable.Row, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.olderThan = olderThan
	var out []dtable.Row
	for g, o := range f.rows[rmName] {
		if !f.old[g] || olderThan > dtable.ForgetMinAge && !f.veryOld[g] || !after.IsZero() && g.String() <= after.String() {
			continue
		}
		out = append(out, dtable.Row{GTRID: g, Outcome: o, Participants: f.parts[g]})
	}
	slices.SortFunc(out, func(a, b dtable.Row) int { return strings.Compare(a.GTRID.String(), b.GTRID.String()) })
	if f.rowsLimit > 0 && len(out) > f.rowsLimit {
		out = out[:f.rowsLimit]
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

// setHeld sets the prepared seam's answer for b (and so whether the fake
// databases list it), under the lock the coordinator's scans take.
func (s *settleLog) setHeld(b xid.Branch, held bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held[b] = held
}

// setNotFound makes settling b answer ErrBranchNotFound.
func (s *settleLog) setNotFound(b xid.Branch, v bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.notFound[b] = v
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
	// The tests call the scan's steps themselves, with times of their own: a
	// scan of the coordinator's own in between (one due for commit-point
	// branches, late on a busy machine) forgot what their calls had noted
	// of the branches it did not see listed (failed under load:
	// "MariaDB branch: settle calls [], want one commit attempt").
	opts.manualScans = true
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
//   - nothing before CommitPointSettleAfter (its client settles it);
//   - then a committed 'C' (or 'A') row settles it;
//   - no row: the key is taken (Resolve) once a scan after the read still
//     lists the branch: 'A' recorded there, the branch rolled back;
//   - the key held by the commit point's open transaction (ErrPending): left
//     for the next scan, then settled by what the commit point committed;
//   - a commit point not configured here: held, said once a minute;
//   - MariaDB "not found" while a recover scan lists it: held by the
//     client's session, tried again; settled once the scan no longer lists it.
//
// Nothing is written to the log, and InDoubt never lists them.
func TestCommitPointBranchRecovery(t *testing.T) {
	f, s := newFakeTables(), newSettleLog()
	// The databases list the test's branches: a scan of the coordinator's
	// own (its first one may run late on a busy machine) then keeps their
	// first-seen times, as it would with real databases. Listing nothing
	// made such a scan forget them, and a branch settled at "later" was
	// taken for newly seen (failed under load: "MariaDB branch: settle
	// calls [], want one commit attempt").
	var listMu sync.Mutex
	var listed []xid.Branch
	opts, logs := cpOptions(t, f, s, func(name string) ([]rm.InDoubt, error) {
		listMu.Lock()
		defer listMu.Unlock()
		var out []rm.InDoubt
		for _, b := range listed {
			if b.RM == name {
				out = append(out, rm.InDoubt{Branch: b})
			}
		}
		return out, nil
	})
	opts.CommitPointSettleAfter = 10 * time.Second
	c := openCP(t, opts)
	now := time.Now()
	br := func(g xid.GTRID, rmName, cp string) xid.Branch {
		return xid.Branch{GTRID: g, RM: rmName, CommitPoint: cp, Owner: f.id(cp)}
	}
	committed, aborted, orphan, pending, unknown, held := xid.New(), xid.New(), xid.New(), xid.New(), xid.New(), xid.New()
	f.set("maria", committed, dtable.Committed)
	f.set("maria", aborted, dtable.Aborted)
	f.pending[pending] = true
	bHeld := br(held, "maria", "pg")
	f.set("pg", held, dtable.Committed)
	s.setNotFound(bHeld, true)
	s.setHeld(bHeld, true)
	bOrphan := br(orphan, "pg", "maria")
	s.setHeld(bOrphan, true) // still listed by the re-check before the key is taken

	scan := func(at time.Time, bs ...xid.Branch) {
		for _, b := range bs {
			c.settleInDoubt(rm.InDoubt{Branch: b}, at)
		}
	}
	all := []xid.Branch{br(committed, "pg", "maria"), br(aborted, "pg", "maria"), bOrphan,
		br(pending, "pg", "maria"), br(unknown, "pg", "elsewhere"), bHeld}
	listMu.Lock()
	listed = all
	listMu.Unlock()
	scan(now, all...)
	for _, b := range all {
		if got := s.got(b); len(got) != 0 {
			t.Errorf("gtrid %s settled %v at first sight, want left to its client for CommitPointSettleAfter", b.GTRID, got)
		}
	}
	f.mu.Lock()
	reads, resolves := f.lookups, f.resolves
	f.mu.Unlock()
	if reads != 0 || resolves != 0 {
		t.Errorf("%d decision-table reads, %d keys taken at first sight, want none", reads, resolves)
	}
	scan(now.Add(opts.CommitPointSettleAfter/2), all...)
	for _, b := range all {
		if got := s.got(b); len(got) != 0 {
			t.Errorf("gtrid %s settled %v before CommitPointSettleAfter", b.GTRID, got)
		}
	}
	later := now.Add(opts.CommitPointSettleAfter + time.Second)
	scan(later, all...)
	if got := s.got(all[0]); len(got) != 1 || !got[0] {
		t.Errorf("'C' row: settle calls %v, want one commit", got)
	}
	if got := s.got(all[1]); len(got) != 1 || got[0] {
		t.Errorf("'A' row: settle calls %v, want one rollback", got)
	}
	if got := s.got(bOrphan); len(got) != 1 || got[0] {
		t.Errorf("orphan: settle calls %v, want one rollback after CommitPointSettleAfter (%s), not the orphan timeout (%s)", got, opts.CommitPointSettleAfter, opts.OrphanTimeout)
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
	if got := s.got(bHeld); len(got) != 1 || !got[0] {
		t.Errorf("MariaDB branch: settle calls %v, want one commit attempt", got)
	}
	// The commit point's transaction commits after all; the client's
	// session that held the MariaDB branch goes away.
	f.mu.Lock()
	delete(f.pending, pending)
	f.mu.Unlock()
	f.set("maria", pending, dtable.Committed)
	s.setHeld(bHeld, false)
	scan(later.Add(time.Second), all[3:]...)
	if got := s.got(all[3]); len(got) != 1 || !got[0] {
		t.Errorf("pending, then committed: settle calls %v, want one commit", got)
	}
	if got := s.got(bHeld); len(got) != 2 || !got[1] {
		t.Errorf("MariaDB branch released by its session: settle calls %v, want a commit attempt at each of the two scans", got)
	}
	if n := strings.Count(logs.String(), "held by its client's session"); n != 1 {
		t.Errorf("the MariaDB branch was reported held %d times, want 1 (then settled)", n)
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
	if got := c.CommitPointHeld(); len(got) != 1 || got[0].GTRID != unknown.String() || got[0].Reason != ReasonCPNotConfigured {
		t.Errorf("CommitPointHeld = %+v, want the branch whose commit point is not configured", got)
	}
	out := logs.String()
	if n := strings.Count(out, "not configured on this coordinator"); n != 1 {
		t.Errorf("the unconfigured commit point was logged %d times over four scans, want once (rate-limited):\n%s", n, out)
	}
	if !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "not configured") {
		t.Errorf("no error saying the commit point is not configured:\n%s", out)
	}
}

// The database's prepare time shortens a branch's wait only back to the
// scan before the one that first listed it (which did not list it), and not
// at all at the first scan after the start: a database clock far behind
// must not make a live client's branch look old.
func TestCommitPointPrepareTimeIsClamped(t *testing.T) {
	f, s := newFakeTables(), newSettleLog()
	opts, _ := cpOptions(t, f, s, nil)
	opts.CommitPointSettleAfter = 5 * time.Second
	c := openCP(t, opts)               // its start scan listed nothing
	now := time.Now().Add(time.Minute) // later than the start scan
	old := xid.Branch{GTRID: xid.New(), RM: "pg", CommitPoint: "maria", Owner: f.id("maria")}
	s.setHeld(old, true)
	// Prepared 2 h ago by the database's clock; the scan before was the
	// start scan, a minute earlier: the wait counts from there, so it is due.
	c.settleCPBranches([]rm.InDoubt{{Branch: old, PreparedAt: now.Add(-2 * time.Hour)}}, now)
	if got := s.got(old); len(got) != 1 || got[0] {
		t.Errorf("a branch prepared before the previous scan: settle calls %v, want one rollback at first sight", got)
	}
	// One second later: a new branch whose prepare time (a clock behind)
	// says 2 h ago; the scan before was one second ago: not due yet.
	young := xid.Branch{GTRID: xid.New(), RM: "pg", CommitPoint: "maria", Owner: f.id("maria")}
	s.setHeld(young, true)
	c.settleCPBranches([]rm.InDoubt{{Branch: young, PreparedAt: now.Add(-2 * time.Hour)}}, now.Add(time.Second))
	if got := s.got(young); len(got) != 0 {
		t.Errorf("a branch first listed now, the scan before 1 s ago, its prepare time 2 h back: settle calls %v, want none yet", got)
	}
}

// A commit-point branch whose owner is not the id of the table this
// coordinator reaches for its commit point is never settled: no read, no
// key; held (listed with the reason), counted, and an error says so. A
// legacy (unowned) branch is settled by a 'C' row, but without one it is
// held unless AdoptUnowned.
func TestCommitPointBranchOfAnotherTableIsHeld(t *testing.T) {
	f, s := newFakeTables(), newSettleLog()
	opts, logs := cpOptions(t, f, s, nil)
	opts.CommitPointSettleAfter = time.Second
	c := openCP(t, opts)
	now := time.Now()
	other, legacyC, legacyNone := xid.New(), xid.New(), xid.New()
	f.set("maria", other, dtable.Aborted) // would roll it back, if believed
	f.set("maria", legacyC, dtable.Committed)
	bOther := xid.Branch{GTRID: other, RM: "pg", CommitPoint: "maria", Owner: xid.NewOwner()}
	bLegacyC := xid.Branch{GTRID: legacyC, RM: "pg", CommitPoint: "maria"}
	bLegacyNone := xid.Branch{GTRID: legacyNone, RM: "pg", CommitPoint: "maria"}
	s.setHeld(bLegacyNone, true)
	// A legacy branch with an 'A' row: the client may have decided in
	// another table; 'A' here proves nothing.
	legacyA := xid.New()
	f.set("maria", legacyA, dtable.Aborted)
	bLegacyA := xid.Branch{GTRID: legacyA, RM: "pg", CommitPoint: "maria"}
	for _, at := range []time.Time{now, now.Add(2 * time.Second), now.Add(3 * time.Second)} {
		for _, b := range []xid.Branch{bOther, bLegacyC, bLegacyNone, bLegacyA} {
			c.settleInDoubt(rm.InDoubt{Branch: b}, at)
		}
	}
	if got := s.got(bOther); len(got) != 0 {
		t.Errorf("a branch of another decision table: settle calls %v, want none", got)
	}
	if got := s.got(bLegacyC); len(got) == 0 || slices.Contains(got, false) {
		t.Errorf("a legacy branch with a 'C' row: settle calls %v, want commits", got)
	}
	if got := s.got(bLegacyNone); len(got) != 0 {
		t.Errorf("a legacy branch with no row, without AdoptUnowned: settle calls %v, want none", got)
	}
	if got := s.got(bLegacyA); len(got) != 0 {
		t.Errorf("a legacy branch with an 'A' row, without AdoptUnowned: settle calls %v, want none", got)
	}
	f.mu.Lock()
	resolves := f.resolves
	f.mu.Unlock()
	if resolves != 0 {
		t.Errorf("%d keys taken, want none", resolves)
	}
	held := map[string]string{}
	for _, h := range c.CommitPointHeld() {
		held[h.GTRID] = h.Reason
	}
	if held[other.String()] != ReasonCPTableDiffers || held[legacyNone.String()] != ReasonCPUnowned || held[legacyA.String()] != ReasonCPUnowned || len(held) != 3 {
		t.Errorf("CommitPointHeld = %v, want the other table's branch (%s) and the two legacy ones (%s)", held, ReasonCPTableDiffers, ReasonCPUnowned)
	}
	if by := c.CommitPointHeldByReason(); by[ReasonCPTableDiffers] != 1 || by[ReasonCPUnowned] != 2 || by[ReasonCPNotConfigured] != 0 {
		t.Errorf("CommitPointHeldByReason = %v", by)
	}
	out := logs.String()
	if n := strings.Count(out, "ALARM: prepared branches name a decision table"); n != 1 {
		t.Errorf("the other table was alarmed %d times over three scans, want once (rate-limited):\n%s", n, out)
	}
	if !strings.Contains(out, f.id("maria").String()) || !strings.Contains(out, bOther.Owner.String()) {
		t.Errorf("the alarm does not name both ids:\n%s", out)
	}

	// With AdoptUnowned the legacy branch is this coordinator's: the key is
	// taken and it is rolled back.
	f2, s2 := newFakeTables(), newSettleLog()
	opts2, _ := cpOptions(t, f2, s2, nil)
	opts2.CommitPointSettleAfter = time.Second
	opts2.AdoptUnowned = true
	c2 := openCP(t, opts2)
	s2.setHeld(bLegacyNone, true)
	c2.settleInDoubt(rm.InDoubt{Branch: bLegacyNone}, now)
	c2.settleInDoubt(rm.InDoubt{Branch: bLegacyNone}, now.Add(2*time.Second))
	if got := s2.got(bLegacyNone); len(got) != 1 || got[0] {
		t.Errorf("a legacy branch with AdoptUnowned: settle calls %v, want one rollback", got)
	}
	if o, ok := f2.get("maria", legacyNone); !ok || o != dtable.Aborted {
		t.Errorf("a legacy branch with AdoptUnowned: row %v %v, want 'A'", o, ok)
	}
}

// The key is taken only if a scan begun after the read that found no row
// still lists the branch; a row that vanished while the key was taken is an
// unknown outcome: nothing is settled, and the key is not taken again into
// an abort.
func TestCommitPointKeyNeedsTheBranchStillPrepared(t *testing.T) {
	f, s := newFakeTables(), newSettleLog()
	opts, logs := cpOptions(t, f, s, nil)
	opts.CommitPointSettleAfter = time.Second
	c := openCP(t, opts)
	now := time.Now()
	gone, vanished := xid.New(), xid.New()
	bGone := xid.Branch{GTRID: gone, RM: "pg", CommitPoint: "maria", Owner: f.id("maria")}
	bVanished := xid.Branch{GTRID: vanished, RM: "pg", CommitPoint: "maria", Owner: f.id("maria")}
	s.setHeld(bVanished, true)
	f.vanish[vanished] = true
	for _, at := range []time.Time{now, now.Add(2 * time.Second), now.Add(3 * time.Second)} {
		c.settleInDoubt(rm.InDoubt{Branch: bGone}, at)
		c.settleInDoubt(rm.InDoubt{Branch: bVanished}, at)
	}
	f.mu.Lock()
	goneKeys, vanishedKeys := f.resolved[gone], f.resolved[vanished]
	f.mu.Unlock()
	if goneKeys != 0 || len(s.got(bGone)) != 0 {
		t.Errorf("a branch settled meanwhile (no longer listed): %d keys taken, settle calls %v; want none", goneKeys, s.got(bGone))
	}
	if _, ok := f.get("maria", gone); ok {
		t.Errorf("a row was recorded for a branch no longer prepared")
	}
	if len(s.got(bVanished)) != 0 {
		t.Errorf("a vanished row: settle calls %v, want none (outcome unknown)", s.got(bVanished))
	}
	if _, ok := f.get("maria", vanished); ok || vanishedKeys != 1 {
		t.Errorf("a vanished row: %d keys taken (want 1: then the branch is held, the key never taken again), row recorded %v (want none)", vanishedKeys, ok)
	}
	if !strings.Contains(logs.String(), "OUTCOME UNKNOWN") {
		t.Errorf("no log says the outcome is unknown:\n%s", logs.String())
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
	opts.CommitPointSettleAfter = time.Millisecond
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
		committed: {GTRID: committed, RM: "pg", CommitPoint: "maria", Owner: f.id("maria")},
		undecided: {GTRID: undecided, RM: "pg", CommitPoint: "maria", Owner: f.id("maria")},
		unknown:   {GTRID: unknown, RM: "pg", CommitPoint: "elsewhere", Owner: xid.NewOwner()},
	}
	s.setHeld(branches[undecided], true) // the re-check before the key is taken
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

// Reports never guess: once no branch of a commit-point gtrid is prepared
// any more, Status answers from the decision tables — COMMITTED or ABORTED
// at the commit point whose table has the row — never UNDECIDED while a row
// exists; a table with another id is not believed. With no row anywhere it
// answers as for any gtrid. A row that vanished while --resolve took the
// key is an unknown outcome, never an abort.
func TestStatusAnswersFromTheDecisionTables(t *testing.T) {
	f, s := newFakeTables(), newSettleLog()
	committed, aborted, nothing, vanished := xid.New(), xid.New(), xid.New(), xid.New()
	f.set("maria", committed, dtable.Committed)
	f.set("pg", aborted, dtable.Aborted)
	bVanished := xid.Branch{GTRID: vanished, RM: "pg", CommitPoint: "maria", Owner: f.id("maria")}
	s.setHeld(bVanished, true)
	f.vanish[vanished] = true
	legacyA := xid.New()
	f.set("maria", legacyA, dtable.Aborted)
	bLegacyA := xid.Branch{GTRID: legacyA, RM: "pg", CommitPoint: "maria"}
	opts, _ := cpOptions(t, f, s, func(name string) ([]rm.InDoubt, error) {
		if name == "pg" {
			return []rm.InDoubt{{Branch: bVanished}, {Branch: bLegacyA}}, nil
		}
		return nil, nil
	})
	c := openCP(t, opts)
	r := mustStatus(t, c, legacyA.String(), true, Undecided)
	if !strings.Contains(r.Message, "proves nothing") || len(s.got(bLegacyA)) != 0 {
		t.Errorf("Status --resolve of a legacy branch with an 'A' row: %q, settle calls %v; want nothing settled", r.Message, s.got(bLegacyA))
	}
	r = mustStatus(t, c, committed.String(), false, Committed)
	if !strings.Contains(r.Message, "decided at commit point maria") {
		t.Errorf("Status of a committed commit-point gtrid with no branch prepared: %q, want it to name the commit point", r.Message)
	}
	r = mustStatus(t, c, aborted.String(), false, Aborted)
	if !strings.Contains(r.Message, "decided at commit point pg") {
		t.Errorf("Status of an aborted commit-point gtrid: %q", r.Message)
	}
	mustStatus(t, c, committed.String(), true, Committed) // resolve changes nothing: it is decided
	r = mustStatus(t, c, nothing.String(), false, Undecided)
	if strings.Contains(r.Message, "commit point") {
		t.Errorf("Status of an unknown gtrid mentions a commit point: %q", r.Message)
	}
	r = mustStatus(t, c, vanished.String(), true, Undecided)
	if !strings.Contains(r.Message, "OUTCOME UNKNOWN") || len(s.got(bVanished)) != 0 {
		t.Errorf("Status --resolve of a gtrid whose row vanished: %q, settle calls %v; want outcome unknown and nothing settled", r.Message, s.got(bVanished))
	}
	if _, ok := f.get("maria", vanished); ok {
		t.Errorf("a row was recorded after the row vanished")
	}
	// A table whose id changed (another database behind the DSN) is not
	// believed: its row for committed is not read.
	f.mu.Lock()
	f.ids["maria"] = xid.NewOwner()
	f.mu.Unlock()
	opts.Dir = t.TempDir()
	c2 := openCP(t, opts)
	c2.cpst.mu.Lock()
	c2.cpst.ids = map[string]xid.Owner{"maria": xid.NewOwner(), "pg": f.id("pg")}
	c2.cpst.mu.Unlock()
	r, err := c2.Status(context.Background(), committed.String(), false)
	if err != nil || r.Outcome == Committed {
		t.Errorf("Status through a table whose id is not the one read before: %s %q %v, want not COMMITTED", r.Outcome, r.Message, err)
	}
}

// The sweep deletes 'A' rows older than MaxTxnAge + 10 min. A 'C' row older
// than ForgetMinAge is forgotten only when every participant it names is an
// RM here whose table has the id the row names and whose scan lists no
// branch of the gtrid; a row naming an unknown RM or another id is kept,
// counted and alarmed; a legacy row (no participants) only when it is old
// and every RM answered without a branch of it.
func TestSweepForgetsOnlyUnpreparedCommits(t *testing.T) {
	f, s := newFakeTables(), newSettleLog()
	gone, stillPrepared, abort, unknownRM, otherTable, onDown, legacyOld, legacyYoung :=
		xid.New(), xid.New(), xid.New(), xid.New(), xid.New(), xid.New(), xid.New(), xid.New()
	pg, maria := "pg="+f.id("pg").String(), "maria="+f.id("maria").String()
	for g, p := range map[xid.GTRID]string{gone: pg, stillPrepared: pg, unknownRM: pg + ",elsewhere=" + xid.NewOwner().String(),
		otherTable: "pg=" + xid.NewOwner().String(), onDown: maria, legacyOld: "", legacyYoung: ""} {
		f.set("maria", g, dtable.Committed)
		f.parts[g] = p
		f.old[g] = true
	}
	f.veryOld = map[xid.GTRID]bool{legacyOld: true}
	f.set("maria", abort, dtable.Aborted)
	f.old[abort] = true
	var down atomic.Bool
	opts, logs := cpOptions(t, f, s, func(name string) ([]rm.InDoubt, error) {
		if down.Load() && name == "maria" {
			return nil, errors.New("maria is down")
		}
		if name == "pg" {
			return []rm.InDoubt{{Branch: xid.Branch{GTRID: stillPrepared, RM: "pg", CommitPoint: "maria", Owner: f.id("maria")}}}, nil
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
	// (Open's own first sweep may have done the forgetting.)
	f.mu.Lock()
	forgotten := len(f.forgotten["maria"])
	f.mu.Unlock()
	if st.Complete || forgotten != 1 {
		t.Fatalf("sweeps with maria down: %+v, %d forgotten; want incomplete and only the row whose participants (pg) answered forgotten", st, forgotten)
	}
	if _, ok := f.get("maria", gone); ok {
		t.Errorf("the row naming only pg, which answered without a branch of it, was kept")
	}
	if _, ok := f.get("maria", onDown); !ok || st.Kept[KeptUnanswered] != 3 {
		t.Errorf("the row naming maria (down) and the legacy rows: kept %v, counts %v; want them kept as %s", ok, st.Kept, KeptUnanswered)
	}
	down.Store(false)
	st, err = c.SweepNow(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !st.Complete || st.CommitsForgotten != 2 {
		t.Errorf("sweep: %+v, want complete, two more 'C' forgotten (maria's row and the old legacy row)", st)
	}
	for g, want := range map[xid.GTRID]bool{onDown: false, legacyOld: false, stillPrepared: true, unknownRM: true, otherTable: true, legacyYoung: true, abort: true} {
		if _, ok := f.get("maria", g); ok != want {
			t.Errorf("gtrid %s (participants %q): kept %v, want %v", g, f.parts[g], ok, want)
		}
	}
	wantKept := map[string]int{KeptPrepared: 1, KeptUnknownRM: 1, KeptTableDiffers: 1, KeptLegacyYoung: 1}
	for r, n := range c.DecisionRowsKept() {
		if n != wantKept[r] {
			t.Errorf("DecisionRowsKept[%s] = %d, want %d (all: %v)", r, n, wantKept[r], c.DecisionRowsKept())
		}
	}
	out := logs.String()
	for _, r := range []string{KeptUnknownRM, KeptTableDiffers} {
		if !strings.Contains(out, "reason="+r) || !strings.Contains(out, "ALARM") {
			t.Errorf("no alarm for a row kept as %s:\n%s", r, out)
		}
	}
	f.mu.Lock()
	keep := f.keep
	f.mu.Unlock()
	// Kept past the SDK's longest commit point (1h), whatever this
	// coordinator's MaxTxnAge (shorter here): a late commit point is
	// refused by the 'A' row until its own age check refuses it.
	if keep != max(opts.MaxTxnAge, time.Hour)+10*time.Minute {
		t.Errorf("SweepAborts keep %s: want max(MaxTxnAge, 1h)+10m", keep)
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

// Once a decision table exists, Open gives it its reference to its id
// (decision.AddIDCheck); a failure is a warning naming the RM and tandem
// init-rm, not a failed start, and the table counts as ready (decisions
// check the id through the id table meanwhile).
func TestOpenAddsTheIDCheckAndWarnsWhenItCannot(t *testing.T) {
	f, s := newFakeTables(), newSettleLog()
	f.idCheckErr = errors.New("ALTER command denied to user")
	opts, logs := cpOptions(t, f, s, nil)
	c := openCP(t, opts)
	for range 2 {
		if _, err := c.SweepNow(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	f.mu.Lock()
	pg, maria := f.idChecks["pg"], f.idChecks["maria"]
	f.mu.Unlock()
	if pg != 1 || maria != 1 {
		t.Errorf("AddIDCheck calls pg %d maria %d, want one each (after Ensure, then remembered)", pg, maria)
	}
	out := logs.String()
	if !strings.Contains(out, "no reference to its id") || !strings.Contains(out, "tandem init-rm --rm maria=") || !strings.Contains(out, "ALTER command denied") {
		t.Errorf("no warning naming the RM, the cause and tandem init-rm:\n%s", out)
	}
}

// The commit point's own MariaDB branch (its RM is its commit point:
// xid.CommitPointSelf) is never prepared by a client: it is decided by
// INSERT 'C'; XA END; XA COMMIT … ONE PHASE. Seen in the chaos run, MariaDB
// 10.11 killed while that ran came back with it PREPARED (its XA completion
// is not binlog-coordinated in crash recovery): the 'C' row inside it
// invisible, the key locked by it (so taking the key only ever answered
// ErrPending), the other branch already committed by its client — stranded,
// and the acknowledged transfer missing from MariaDB. Such a branch can only
// be the decision COMMIT caught by a crash (its INSERT succeeded and nothing
// can record 'A' while it holds the key): it is committed, and no key is
// taken.
func TestCommitPointOwnBranchLeftPreparedByACrashIsCommitted(t *testing.T) {
	f, s := newFakeTables(), newSettleLog()
	opts, logs := cpOptions(t, f, s, nil)
	opts.CommitPointSettleAfter = time.Second
	c := openCP(t, opts)
	g := xid.New()
	self := xid.CommitPointSelf(g, "maria", f.id("maria"))
	f.pending[g] = true // the prepared branch holds the key: a key-taker only ever waits
	s.setHeld(self, true)
	now := time.Now()
	c.settleInDoubt(rm.InDoubt{Branch: self}, now)
	c.settleInDoubt(rm.InDoubt{Branch: self}, now.Add(2*time.Second))
	if got := s.got(self); len(got) != 1 || !got[0] {
		t.Fatalf("the commit point's own branch left prepared by a crash: settle calls %v, want one commit\n%s", got, logs)
	}
	f.mu.Lock()
	resolves := f.resolves
	f.mu.Unlock()
	if resolves != 0 {
		t.Errorf("%d keys taken for the commit point's own branch, want none: it holds the key itself", resolves)
	}
	// Another table's id: held, never committed here.
	other := xid.CommitPointSelf(xid.New(), "maria", xid.NewOwner())
	s.setHeld(other, true)
	c.settleInDoubt(rm.InDoubt{Branch: other}, now)
	c.settleInDoubt(rm.InDoubt{Branch: other}, now.Add(2*time.Second))
	if got := s.got(other); len(got) != 0 {
		t.Errorf("a commit point's own branch naming another table: settle calls %v, want none", got)
	}
}
