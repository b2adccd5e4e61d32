package coord

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/xid"
)

// preparedDBs is the resource managers' prepared branches, by exact name,
// for the coordinator's recover, prepared and settle seams: settling a
// name that is not prepared answers rm.ErrBranchNotFound, as a database
// does.
type preparedDBs struct {
	mu      sync.Mutex
	held    map[xid.Branch]bool
	settled map[xid.Branch][]bool // every call that found its branch: commit or not
	tried   []xid.Branch          // every name a settle call was made with
}

func newPreparedDBs(bs ...xid.Branch) *preparedDBs {
	p := &preparedDBs{held: map[xid.Branch]bool{}, settled: map[xid.Branch][]bool{}}
	for _, b := range bs {
		p.held[b] = true
	}
	return p
}

func (p *preparedDBs) recover(_ context.Context, rmName string) ([]rm.InDoubt, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []rm.InDoubt
	for b := range p.held {
		if b.RM == rmName {
			out = append(out, rm.InDoubt{Branch: b})
		}
	}
	return out, nil
}

func (p *preparedDBs) prepared(_ context.Context, _ string, b xid.Branch) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held[b], nil
}

func (p *preparedDBs) settle(_ context.Context, _ string, b xid.Branch, commit bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tried = append(p.tried, b)
	if !p.held[b] {
		return rm.ErrBranchNotFound
	}
	delete(p.held, b)
	p.settled[b] = append(p.settled[b], commit)
	return nil
}

func (p *preparedDBs) outcome(b xid.Branch) []bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]bool(nil), p.settled[b]...)
}

func (p *preparedDBs) triedNames() []xid.Branch {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]xid.Branch(nil), p.tried...)
}

// ownerOptions are test options for a coordinator of cluster ours whose
// resource managers hold dbs' branches, with an orphan timeout short
// enough that the second scan of a branch is past it.
func ownerOptions(t *testing.T, ours xid.Owner, dbs *preparedDBs) Options {
	opts := testOptions(t.TempDir())
	opts.Owner = ours
	opts.OrphanTimeout = time.Nanosecond
	opts.recover, opts.prepared, opts.settle = dbs.recover, dbs.prepared, dbs.settle
	return opts
}

// scanTwice runs two in-doubt scans: the first sees every branch, the
// second finds it past the orphan timeout.
func scanTwice(t *testing.T, c *Coordinator) {
	t.Helper()
	for range 2 {
		if err := c.ScanNow(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

func decided(c *Coordinator, g xid.GTRID) *txn {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.txns[g]
}

func listed(c *Coordinator, b xid.Branch) (InDoubtBranch, bool) {
	for _, ib := range c.InDoubt() {
		if ib.GTRID == b.GTRID.String() && ib.RM == b.RM && ib.Owner == map[bool]string{true: b.Owner.String()}[b.Owned()] {
			return ib, true
		}
	}
	return InDoubtBranch{}, false
}

// The failure of issue 21: a second coordinator with an empty log over the
// same databases presumed abort for another cluster's prepared branches
// (one of which that cluster had decided COMMIT). A branch owned by
// another cluster is never settled, however long it stays prepared and
// whatever this log says of its gtrid; it is listed with its owner and
// age; Status --resolve refuses it.
func TestForeignBranchesAreNeverSettled(t *testing.T) {
	ours, theirs := xid.NewOwner(), xid.NewOwner()
	g, decidedHere := xid.New(), xid.New()
	foreign := xid.Branch{GTRID: g, RM: "pg", Owner: theirs}
	foreignDecided := xid.Branch{GTRID: decidedHere, RM: "pg", Owner: theirs}
	dbs := newPreparedDBs(foreign, foreignDecided)
	c := open(t, ownerOptions(t, ours, dbs))
	// This log holds a COMMIT for decidedHere (a confused client asked
	// both clusters): the other cluster's branch is still not this log's.
	if _, err := c.decide(context.Background(), decidedHere, Committed, 0, []BranchRef{{RM: "pg"}}); err != nil {
		t.Fatal(err)
	}
	scanTwice(t, c)
	scanTwice(t, c)
	if tr := decided(c, g); tr != nil {
		t.Fatalf("another cluster's branch was decided %s here by presumption", tr.outcome)
	}
	for _, b := range []xid.Branch{foreign, foreignDecided} {
		if got := dbs.outcome(b); len(got) != 0 {
			t.Fatalf("another cluster's branch %s was settled here (commit=%v)", b.PostgresGID(), got)
		}
	}
	for _, name := range dbs.triedNames() {
		if name.Owner == theirs {
			t.Fatalf("phase 2 or the scan called COMMIT/ROLLBACK PREPARED on another cluster's branch %s", name.PostgresGID())
		}
	}
	for _, b := range []xid.Branch{foreign, foreignDecided} {
		ib, ok := listed(c, b)
		if !ok {
			t.Fatalf("InDoubt = %+v: the foreign branch %s is not listed", c.InDoubt(), b.PostgresGID())
		}
		if ib.Reason != ReasonForeign || ib.Owner != theirs.String() || ib.OwnerShort != theirs.Short() || ib.AgeSeconds < 0 || ib.Began.IsZero() {
			t.Errorf("listed as %+v, want reason %s, owner %s, an age", ib, ReasonForeign, theirs)
		}
	}
	if n := c.InDoubtByReason()[ReasonForeign]; n != 2 {
		t.Errorf("InDoubtByReason[foreign] = %d, want 2", n)
	}
	var in *InputError
	if _, err := c.Status(context.Background(), g.String(), true); !errors.As(err, &in) || !strings.Contains(err.Error(), "foreign owner") {
		t.Errorf("Status --resolve of another cluster's gtrid = %v, want a refusal naming the foreign owner", err)
	}
	if tr := decided(c, g); tr != nil {
		t.Fatalf("Status --resolve wrote %s", tr.outcome)
	}
	r, err := c.Status(context.Background(), g.String(), false)
	if err != nil || r.Outcome != Undecided || !strings.Contains(r.Message, "never presumed aborted") || strings.Contains(r.Message, "rolls it back") {
		t.Errorf("Status of another cluster's gtrid = %+v, %v; want UNDECIDED, saying it is never presumed aborted here", r, err)
	}
}

// Its own branches a coordinator settles as before: per the decision in
// its log, or presumed aborted past the orphan timeout (ABORT first). The
// calls name the branch with its owner; a legacy name (an SDK from before
// owners existed) is tried only when the owned one is not found.
func TestOwnBranchesAreSettled(t *testing.T) {
	ours := xid.NewOwner()
	orphan, committed, legacyCommitted := xid.New(), xid.New(), xid.New()
	own := func(g xid.GTRID) xid.Branch { return xid.Branch{GTRID: g, RM: "pg", Owner: ours} }
	legacy := xid.Branch{GTRID: legacyCommitted, RM: "pg"}
	dbs := newPreparedDBs(own(orphan), own(committed), legacy)
	c := open(t, ownerOptions(t, ours, dbs))
	for _, g := range []xid.GTRID{committed, legacyCommitted} {
		if _, err := c.Commit(short(t), g.String(), []BranchRef{{RM: "pg"}}, CommitMode{WaitPhase2: true}); err != nil {
			t.Fatal(err)
		}
	}
	scanTwice(t, c)
	if tr := decided(c, orphan); tr == nil || tr.outcome != Aborted || tr.reason != AbortOrphan {
		t.Fatalf("own orphan: %v, want presumed ABORTED by the scan", tr)
	}
	// Phase 2 runs apart from the scan: wait until each decision ended.
	for _, g := range []xid.GTRID{orphan, committed, legacyCommitted} {
		waitFor(t, c, "phase 2 of "+g.String()+" ended", func() bool { return c.txns[g] != nil && c.txns[g].ended })
	}
	if got := dbs.outcome(own(orphan)); len(got) != 1 || got[0] {
		t.Errorf("own orphan's branch: calls %v, want one rollback under its owned name", got)
	}
	if got := dbs.outcome(own(committed)); len(got) != 1 || !got[0] {
		t.Errorf("own committed branch: calls %v, want one commit under its owned name", got)
	}
	if got := dbs.outcome(legacy); len(got) != 1 || !got[0] {
		t.Errorf("a committed branch with a legacy name: calls %v, want one commit (a client from before owners existed)", got)
	}
	if l := c.InDoubt(); len(l) != 0 {
		t.Errorf("InDoubt = %+v, want none", l)
	}
}

// Legacy names carry no owner: without --adopt-unowned they are listed and
// never presumed aborted; with it they are the coordinator's own.
func TestUnownedBranchesAreListedUnlessAdopted(t *testing.T) {
	for _, adopt := range []bool{false, true} {
		ours := xid.NewOwner()
		b := xid.Branch{GTRID: xid.New(), RM: "pg"}
		dbs := newPreparedDBs(b)
		opts := ownerOptions(t, ours, dbs)
		opts.AdoptUnowned = adopt
		c := open(t, opts)
		scanTwice(t, c)
		tr := decided(c, b.GTRID)
		ib, isListed := listed(c, b)
		switch {
		case !adopt && tr != nil:
			t.Errorf("without --adopt-unowned an unowned branch was decided %s by presumption", tr.outcome)
		case !adopt && (!isListed || ib.Reason != ReasonUnowned || ib.OwnerShort != "unowned" || ib.Owner != ""):
			t.Errorf("without --adopt-unowned: listed %v as %+v, want reason %s", isListed, ib, ReasonUnowned)
		case adopt && (tr == nil || tr.outcome != Aborted):
			t.Errorf("with --adopt-unowned an unowned orphan: %v, want presumed ABORTED", tr)
		case adopt && isListed:
			t.Errorf("with --adopt-unowned an unowned orphan is listed: %+v", ib)
		}
		if adopt && tr != nil {
			// Phase 2 runs apart from the scan: wait until the ABORT ended.
			waitFor(t, c, "phase 2 of the adopted orphan ended", func() bool { return c.txns[b.GTRID] != nil && c.txns[b.GTRID].ended })
			if got := dbs.outcome(b); len(got) != 1 || got[0] {
				t.Errorf("adopted orphan: calls %v, want one rollback", got)
			}
		} else if got := dbs.outcome(b); len(got) != 0 {
			t.Errorf("unadopted unowned branch settled: %v", got)
		}
	}
}

// A coordinator's log knows nothing from before it was born: its own (or
// adopted) branch of a gtrid that began before (less the clock skew) is
// listed, never presumed aborted; a decision for it in the log still
// settles it. A gtrid begun after is an ordinary orphan.
func TestBirthBoundary(t *testing.T) {
	ours := xid.NewOwner()
	born := time.Now().Add(-time.Minute)
	old, withinSkew, oldDecided, young := xid.NewAt(0, born.Add(-time.Hour/2)), xid.NewAt(0, born.Add(5*time.Second)), xid.NewAt(0, born.Add(-time.Minute)), xid.New()
	own := func(g xid.GTRID) xid.Branch { return xid.Branch{GTRID: g, RM: "pg", Owner: ours} }
	oldUnowned := xid.Branch{GTRID: xid.NewAt(0, born.Add(-time.Minute)), RM: "pg"}
	dbs := newPreparedDBs(own(old), own(withinSkew), own(oldDecided), own(young), oldUnowned)
	opts := ownerOptions(t, ours, dbs)
	opts.Born, opts.MaxClockSkew, opts.AdoptUnowned = born, 10*time.Second, true
	c := open(t, opts)
	if _, err := c.ResolveInDoubt(short(t), oldDecided.String(), true); err != nil {
		t.Fatal(err)
	}
	scanTwice(t, c)
	for _, b := range []xid.Branch{own(old), own(withinSkew), oldUnowned} {
		if tr := decided(c, b.GTRID); tr != nil {
			t.Errorf("%s began before the log was born and was decided %s by presumption", b.PostgresGID(), tr.outcome)
		}
		if ib, ok := listed(c, b); !ok || ib.Reason != ReasonBeforeBirth {
			t.Errorf("%s: listed %v as %+v, want reason %s", b.PostgresGID(), ok, ib, ReasonBeforeBirth)
		}
		var in *InputError
		if _, err := c.Status(context.Background(), b.GTRID.String(), true); !errors.As(err, &in) {
			t.Errorf("Status --resolve of %s = %v, want a refusal", b.PostgresGID(), err)
		}
	}
	if got := dbs.outcome(own(oldDecided)); len(got) != 1 || !got[0] {
		t.Errorf("a gtrid from before birth settled by hand: calls %v, want one commit", got)
	}
	if tr := decided(c, young); tr == nil || tr.outcome != Aborted {
		t.Errorf("an orphan begun after birth: %v, want presumed ABORTED", tr)
	}
	if n := c.InDoubtByReason()[ReasonBeforeBirth]; n != 3 {
		t.Errorf("InDoubtByReason[before birth] = %d, want 3", n)
	}
}

// Branches named with a commit point go to the commit point's recovery
// (cprecover.go), whatever their owner: the ownership rules of
// coordinator-decided branches do not list or settle them.
func TestCommitPointBranchesGoToTheirTable(t *testing.T) {
	ours := xid.NewOwner()
	cp := xid.Branch{GTRID: xid.New(), RM: "pg", CommitPoint: "maria", Owner: xid.NewOwner()}
	dbs := newPreparedDBs(cp)
	opts := ownerOptions(t, ours, dbs)
	opts.OrphanTimeout = time.Hour // left to its client: nothing is read or taken
	c := open(t, opts)
	scanTwice(t, c)
	c.mu.Lock()
	_, inCP := c.cpSeen[cp]
	_, inSeen := c.seen[cp]
	c.mu.Unlock()
	if !inCP || inSeen {
		t.Errorf("a commit-point branch: in cpSeen %v, in seen %v; want handed to the commit point's recovery only", inCP, inSeen)
	}
	if l := c.InDoubt(); len(l) != 0 {
		t.Errorf("InDoubt lists a commit-point branch: %+v", l)
	}
}

// An operator settles another cluster's branch by hand (its coordinator is
// gone for good): ResolveInDoubt writes the choice here and settles the
// branch by its own name.
func TestResolveSettlesAForeignBranchByHand(t *testing.T) {
	ours, theirs := xid.NewOwner(), xid.NewOwner()
	b := xid.Branch{GTRID: xid.New(), RM: "pg", Owner: theirs}
	dbs := newPreparedDBs(b)
	c := open(t, ownerOptions(t, ours, dbs))
	r, err := c.ResolveInDoubt(short(t), b.GTRID.String(), true)
	if err != nil || r.Outcome != Committed || r.Phase2Pending {
		t.Fatalf("ResolveInDoubt = %+v, %v; want COMMITTED, nothing pending", r, err)
	}
	if got := dbs.outcome(b); len(got) != 1 || !got[0] {
		t.Errorf("the foreign branch: calls %v, want one commit under its own name", got)
	}
}

// An owner made together with the log (a fresh data directory) cannot name
// a branch from before the log's birth: the clock-skew margin does not
// apply to branches named with it, so a fresh coordinator presumes abort
// for its own orphans from its first second. An adopted unowned branch
// keeps the margin (anyone may have begun it).
func TestBirthBoundaryOfAnOwnerMadeWithTheLog(t *testing.T) {
	ours := xid.NewOwner()
	born := time.Now().Add(-5 * time.Second)
	justAfter := xid.NewAt(0, born.Add(time.Second))
	before := xid.NewAt(0, born.Add(-time.Second))
	own := func(g xid.GTRID) xid.Branch { return xid.Branch{GTRID: g, RM: "pg", Owner: ours} }
	unowned := xid.Branch{GTRID: xid.NewAt(0, born.Add(time.Second)), RM: "pg"}
	dbs := newPreparedDBs(own(justAfter), own(before), unowned)
	opts := ownerOptions(t, ours, dbs)
	opts.Born, opts.MaxClockSkew, opts.OwnerMadeWithLog, opts.AdoptUnowned = born, 10*time.Second, true, true
	c := open(t, opts)
	scanTwice(t, c)
	if tr := decided(c, justAfter); tr == nil || tr.outcome != Aborted {
		t.Errorf("own orphan begun 1s after a fresh log's birth: %v, want presumed ABORTED", tr)
	}
	for _, b := range []xid.Branch{own(before), unowned} {
		if tr := decided(c, b.GTRID); tr != nil {
			t.Errorf("%s: decided %s by presumption, want listed", b.PostgresGID(), tr.outcome)
		}
		if ib, ok := listed(c, b); !ok || ib.Reason != ReasonBeforeBirth {
			t.Errorf("%s: listed %v as %+v, want %s", b.PostgresGID(), ok, ib, ReasonBeforeBirth)
		}
	}
}
