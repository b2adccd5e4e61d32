package client

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tandem-tx/tandem/api"
)

// roleFake is a coordinator with a role: serving (the primary) or not (a
// standby, demoted or fenced one, which refuses Commit, Abort and Status
// with FAILED_PRECONDITION, with the tandem-not-primary trailer when hint).
// commit and status, when set, answer a serving fake's calls.
type roleFake struct {
	api.UnimplementedCoordinatorServer
	serving atomic.Bool
	hint    bool
	epoch   int
	cluster string        // named in Health when set
	slow    time.Duration // Health answers after this long
	commit  func(*api.CommitRequest) (*api.CommitResponse, error)
	status  func(*api.StatusRequest) (*api.StatusResponse, error)

	mu                      sync.Mutex
	commits, aborts, health int
	statuses                []*api.StatusRequest
}

func (f *roleFake) refuse(ctx context.Context) error {
	if f.hint {
		_ = grpc.SetTrailer(ctx, metadata.Pairs(api.MetadataNotPrimary, "standby"))
	}
	return status.Error(codes.FailedPrecondition, "this coordinator is a standby of the primary at 127.0.0.1:7072 (epoch 1): it decides nothing")
}

func (f *roleFake) Commit(ctx context.Context, req *api.CommitRequest) (*api.CommitResponse, error) {
	f.mu.Lock()
	f.commits++
	f.mu.Unlock()
	if !f.serving.Load() {
		return nil, f.refuse(ctx)
	}
	if f.commit == nil {
		return &api.CommitResponse{Outcome: api.Outcome_COMMITTED}, nil
	}
	return f.commit(req)
}

func (f *roleFake) Abort(ctx context.Context, req *api.AbortRequest) (*api.AbortResponse, error) {
	f.mu.Lock()
	f.aborts++
	f.mu.Unlock()
	if !f.serving.Load() {
		return nil, f.refuse(ctx)
	}
	return &api.AbortResponse{Outcome: api.Outcome_ABORTED}, nil
}

func (f *roleFake) Status(ctx context.Context, req *api.StatusRequest) (*api.StatusResponse, error) {
	f.mu.Lock()
	f.statuses = append(f.statuses, req)
	f.mu.Unlock()
	if !f.serving.Load() {
		return nil, f.refuse(ctx)
	}
	if f.status == nil {
		return &api.StatusResponse{Outcome: api.Outcome_UNDECIDED}, nil
	}
	return f.status(req)
}

func (f *roleFake) Health(context.Context, *api.HealthRequest) (*api.HealthResponse, error) {
	f.mu.Lock()
	f.health++
	f.mu.Unlock()
	time.Sleep(f.slow)
	msg := "role=standby"
	if f.serving.Load() {
		msg = "role=primary"
	}
	// Every coordinator names its cluster (an identity: 32 hex digits).
	msg += " cluster=" + clusterHex(f.cluster)
	{
		msg += " epoch=" + strconv.Itoa(f.epoch)
	}
	return &api.HealthResponse{Serving: f.serving.Load(), Message: msg}, nil
}

type fakeCounts struct {
	commits, aborts, health, statuses int
	resolves                          int
}

func (f *roleFake) counts() fakeCounts {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := fakeCounts{commits: f.commits, aborts: f.aborts, health: f.health, statuses: len(f.statuses)}
	for _, s := range f.statuses {
		if s.Resolve {
			n.resolves++
		}
	}
	return n
}

func serveFake(t *testing.T, f api.CoordinatorServer) (addr string, stop func()) {
	t.Helper()
	s := grpc.NewServer()
	api.RegisterCoordinatorServer(s, f)
	lis := listenLoopback(t)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return lis.Addr().String(), s.Stop
}

// logBuffer is a Logger whose lines the test reads.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func followClient(t *testing.T, addrs ...string) (*Client, *logBuffer) {
	t.Helper()
	lb := &logBuffer{}
	c := newClient(t, Config{Coordinators: addrs, Logger: slog.New(slog.NewTextHandler(lb, nil)), DecisionTimeout: 2 * time.Second})
	return c, lb
}

// A standby's refusal moves the client to the primary: the Commit is sent
// there and commits; the move is logged once; the next transactions go
// straight to the primary, with no probe and no call to the standby (the
// client remembers where the primary is). With and without the server's
// not-primary trailer (the probe alone finds the primary).
func TestCommitFollowsThePrimary(t *testing.T) {
	for _, hint := range []bool{true, false} {
		t.Run(map[bool]string{true: "trailer", false: "probe_only"}[hint], func(t *testing.T) {
			sb, pr := &roleFake{hint: hint}, &roleFake{hint: hint, epoch: 2}
			pr.serving.Store(true)
			sbAddr, _ := serveFake(t, sb)
			prAddr, _ := serveFake(t, pr)
			c, logs := followClient(t, sbAddr, prAddr)
			if c.CurrentCoordinator() != sbAddr {
				t.Fatalf("CurrentCoordinator() = %s before any call, want the first configured, %s", c.CurrentCoordinator(), sbAddr)
			}
			tx, pg, maria := twoBranches(t, c)
			res, err := tx.Commit(context.Background())
			if err != nil {
				t.Fatalf("Commit: %v", err)
			}
			g, x := tx.GTRID(), xaOwned(tx.GTRID())
			wantLog(t, "pg", pg, "BEGIN", "UPDATE a SET v = 1", "PREPARE TRANSACTION "+pgGID(g))
			wantLog(t, "maria", maria, "XA START "+x, "UPDATE b SET v = 2", "XA END "+x, "XA PREPARE "+x, "XA COMMIT "+x)
			if c.CurrentCoordinator() != prAddr {
				t.Errorf("CurrentCoordinator() = %s, want the primary %s", c.CurrentCoordinator(), prAddr)
			}
			if n := sb.counts(); n.commits != 1 {
				t.Errorf("the standby got %d Commits, want 1", n.commits)
			}
			if n := pr.counts(); n.commits != 1 || n.statuses != 0 {
				t.Errorf("the primary got %d Commits and %d Status, want 1 and 0 (the refusal wrote nothing: no need to ask)", n.commits, n.statuses)
			}
			if res.CoordinatorCalls != 2 {
				t.Errorf("CoordinatorCalls = %d, want 2 (the refused Commit and the one that committed)", res.CoordinatorCalls)
			}
			want := "coordinator moved from " + sbAddr + " to " + prAddr
			if got := strings.Count(logs.String(), want); got != 1 {
				t.Errorf("the log says %q %d times, want once:\n%s", want, got, logs.String())
			}
			sbBefore, prBefore := sb.counts(), pr.counts()
			for range 3 {
				tx, _, _ := twoBranches(t, c)
				if _, err := tx.Commit(context.Background()); err != nil {
					t.Fatalf("Commit after the move: %v", err)
				}
			}
			if sb.counts() != sbBefore {
				t.Errorf("the standby was called again after the move: %+v, then %+v", sbBefore, sb.counts())
			}
			if n := pr.counts(); n.commits != prBefore.commits+3 || n.health != prBefore.health {
				t.Errorf("the primary: %+v after 3 more commits (from %+v), want 3 more Commits and no probe", n, prBefore)
			}
		})
	}
}

// The old primary took the Commit and died before answering (UNAVAILABLE:
// the decision may be in its log and shipped). The promoted standby is
// asked Status without resolve, and its answer is the outcome: COMMITTED
// commits MariaDB's branch here (after a Commit there, idempotent, whose
// answer waits for the new primary's own standby); ABORTED rolls it back,
// with no Commit sent; UNDECIDED sends the Commit there. Nothing is ever
// rolled back on a guess, and nothing asks Status with resolve.
func TestOutcomeCaughtInAFailoverIsSettledByTheNewPrimary(t *testing.T) {
	for _, tc := range []struct {
		name       string
		status     api.Outcome
		commit     api.Outcome
		wantCommit int
		wantErr    error
		mariaLast  string
	}{
		{"committed", api.Outcome_COMMITTED, api.Outcome_COMMITTED, 1, nil, "XA COMMIT "},
		{"aborted", api.Outcome_ABORTED, 0, 0, ErrAborted, "XA ROLLBACK "},
		{"undecided", api.Outcome_UNDECIDED, api.Outcome_COMMITTED, 1, nil, "XA COMMIT "},
		{"undecided_then_abort_won", api.Outcome_UNDECIDED, api.Outcome_ABORTED, 1, ErrAborted, "XA ROLLBACK "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := &roleFake{hint: true}
			old.serving.Store(true)
			old.commit = func(*api.CommitRequest) (*api.CommitResponse, error) {
				old.serving.Store(false) // demoted or dead right after
				return nil, status.Error(codes.Unavailable, "connection reset")
			}
			nu := &roleFake{hint: true, epoch: 2}
			nu.serving.Store(true)
			nu.status = func(*api.StatusRequest) (*api.StatusResponse, error) {
				return &api.StatusResponse{Outcome: tc.status}, nil
			}
			nu.commit = func(*api.CommitRequest) (*api.CommitResponse, error) {
				return &api.CommitResponse{Outcome: tc.commit}, nil
			}
			oldAddr, _ := serveFake(t, old)
			nuAddr, _ := serveFake(t, nu)
			c, logs := followClient(t, oldAddr, nuAddr)
			tx, pg, maria := twoBranches(t, c)
			_, err := tx.Commit(context.Background())
			if tc.wantErr == nil && err != nil || tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("Commit: %v, want %v", err, tc.wantErr)
			}
			g, x := tx.GTRID(), xaOwned(tx.GTRID())
			wantLog(t, "pg", pg, "BEGIN", "UPDATE a SET v = 1", "PREPARE TRANSACTION "+pgGID(g))
			wantLog(t, "maria", maria, "XA START "+x, "UPDATE b SET v = 2", "XA END "+x, "XA PREPARE "+x, tc.mariaLast+x)
			n := nu.counts()
			if n.statuses != 1 || n.resolves != 0 || n.commits != tc.wantCommit || n.aborts != 0 {
				t.Errorf("the new primary got %+v; want 1 Status without resolve, %d Commit, no Abort", n, tc.wantCommit)
			}
			if o := old.counts(); o.aborts != 0 || o.resolves != 0 {
				t.Errorf("the old primary got %+v: nothing may abort", o)
			}
			if !strings.Contains(logs.String(), "coordinator moved from "+oldAddr+" to "+nuAddr) {
				t.Errorf("no move logged:\n%s", logs.String())
			}
		})
	}
}

// While no coordinator serves (the primary killed, the standby not yet
// promoted), a Commit whose first attempt went unanswered keeps probing
// with backoff; once the standby is promoted it asks it and commits there,
// within the DecisionTimeout.
func TestCommitWaitsForThePromotion(t *testing.T) {
	old := &roleFake{hint: true}
	old.serving.Store(true)
	oldAddr, stopOld := serveFake(t, old)
	old.commit = func(*api.CommitRequest) (*api.CommitResponse, error) {
		go stopOld() // killed with the call in flight
		return nil, status.Error(codes.Unavailable, "connection reset")
	}
	nu := &roleFake{hint: true, epoch: 2}
	nuAddr, _ := serveFake(t, nu)
	c, _ := followClient(t, oldAddr, nuAddr)
	tx, _, maria := twoBranches(t, c)
	time.AfterFunc(500*time.Millisecond, func() { nu.serving.Store(true) })
	if _, err := tx.Commit(context.Background()); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	x := xaOwned(tx.GTRID())
	if l := maria.log(); l[len(l)-1] != "XA COMMIT "+x {
		t.Errorf("maria: %q, want its branch committed", l)
	}
	n := nu.counts()
	if n.statuses != 1 || n.resolves != 0 || n.commits != 1 {
		t.Errorf("the promoted standby got %+v; want 1 Status (no resolve) then 1 Commit", n)
	}
	// Probes are bounded: a refusal is answered by backoff, not a storm.
	if n.health > 40 {
		t.Errorf("%d Health probes of the standby in 0.5 s of waiting", n.health)
	}
}

// Past the DecisionTimeout with no coordinator serving, a Commit whose
// first attempt went unanswered is an *OutcomeUnknownError naming the
// gtrid; nothing is rolled back, and MariaDB's session is let go for the
// coordinator to settle.
func TestNoPrimaryBeforeTheDecisionTimeoutIsUnknown(t *testing.T) {
	old := &roleFake{hint: true}
	old.serving.Store(true)
	old.commit = func(*api.CommitRequest) (*api.CommitResponse, error) {
		old.serving.Store(false)
		return nil, status.Error(codes.Unavailable, "connection reset")
	}
	sb := &roleFake{hint: true}
	oldAddr, _ := serveFake(t, old)
	sbAddr, _ := serveFake(t, sb)
	lb := &logBuffer{}
	c := newClient(t, Config{Coordinators: []string{oldAddr, sbAddr}, Logger: slog.New(slog.NewTextHandler(lb, nil)), DecisionTimeout: 400 * time.Millisecond})
	tx, pg, maria := twoBranches(t, c)
	_, err := tx.Commit(context.Background())
	var ou *OutcomeUnknownError
	if !errors.As(err, &ou) || ou.GTRID != tx.GTRID() || !strings.Contains(err.Error(), tx.GTRID().String()) {
		t.Fatalf("Commit: %v, want an *OutcomeUnknownError naming the gtrid", err)
	}
	g, x := tx.GTRID(), xaOwned(tx.GTRID())
	wantLog(t, "pg", pg, "BEGIN", "UPDATE a SET v = 1", "PREPARE TRANSACTION "+pgGID(g))
	wantLog(t, "maria", maria, "XA START "+x, "UPDATE b SET v = 2", "XA END "+x, "XA PREPARE "+x)
	if n := sb.counts(); n.aborts != 0 || n.resolves != 0 {
		t.Errorf("the standby got %+v: nothing may abort", n)
	}
}

// Every attempt refused by coordinators that are not the primary (nothing
// written anywhere) until the DecisionTimeout: no decision exists, so the
// branches are rolled back and the error says no coordinator served.
func TestOnlyStandbysRollsBack(t *testing.T) {
	a, b := &roleFake{hint: true}, &roleFake{hint: true}
	aAddr, _ := serveFake(t, a)
	bAddr, _ := serveFake(t, b)
	// Long enough for the refusals to be heard on a busy machine: an
	// attempt cut short by the DecisionTimeout leaves the outcome unknown.
	c := newClient(t, Config{Coordinators: []string{aAddr, bAddr}, DecisionTimeout: 3 * time.Second})
	tx, pg, _ := twoBranches(t, c)
	_, err := tx.Commit(context.Background())
	if !errors.Is(err, ErrAborted) || !strings.Contains(err.Error(), "no coordinator served as the primary; nothing was decided") {
		t.Fatalf("Commit: %v, want ErrAborted saying no coordinator served", err)
	}
	g := tx.GTRID()
	wantLog(t, "pg", pg, "BEGIN", "UPDATE a SET v = 1", "PREPARE TRANSACTION "+pgGID(g), "ROLLBACK PREPARED "+pgGID(g))
	if n := a.counts(); n.commits < 2 {
		t.Errorf("the first coordinator got %d Commits, want retries while waiting for a primary", n.commits)
	}
}

// Many transactions refused at once by the old primary move the client
// once: one "moved" line, and a bounded number of probes.
func TestConcurrentRefusalsMoveOnce(t *testing.T) {
	sb, pr := &roleFake{hint: true}, &roleFake{hint: true, epoch: 2}
	pr.serving.Store(true)
	sbAddr, _ := serveFake(t, sb)
	prAddr, _ := serveFake(t, pr)
	c, logs := followClient(t, sbAddr, prAddr)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		tx, _, _ := twoBranches(t, c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := tx.Commit(context.Background()); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("Commit: %v", err)
	}
	if got := strings.Count(logs.String(), "coordinator moved"); got != 1 {
		t.Errorf("%d moves logged, want 1:\n%s", got, logs.String())
	}
	if n := pr.counts(); n.health > 2 {
		t.Errorf("the primary's Health was probed %d times for one move", n.health)
	}
}

// Status and the Abort of a branch the client could not roll back follow
// the primary too; Status never resolves unless asked.
func TestStatusFollowsThePrimary(t *testing.T) {
	sb, pr := &roleFake{hint: true}, &roleFake{hint: true, epoch: 3}
	pr.serving.Store(true)
	pr.status = func(*api.StatusRequest) (*api.StatusResponse, error) {
		return &api.StatusResponse{Outcome: api.Outcome_COMMITTED}, nil
	}
	sbAddr, _ := serveFake(t, sb)
	prAddr, _ := serveFake(t, pr)
	c, _ := followClient(t, sbAddr, prAddr)
	tx := c.Begin()
	st, err := c.Status(context.Background(), tx.GTRID(), false)
	if err != nil || st.Outcome != api.Outcome_COMMITTED {
		t.Fatalf("Status = %v, %v; want COMMITTED from the primary", st, err)
	}
	if n := pr.counts(); n.statuses != 1 || n.resolves != 0 {
		t.Errorf("the primary got %+v", n)
	}
}

// Config: Coordinator and Coordinators combine, Coordinator first, each
// address once; a bad address in either is refused.
func TestCoordinatorsConfig(t *testing.T) {
	c := newClient(t, Config{Coordinator: "127.0.0.1:1", Coordinators: []string{"127.0.0.1:2", "127.0.0.1:1", "127.0.0.1:3"}})
	if got := c.addrList(); got != "127.0.0.1:1, 127.0.0.1:2, 127.0.0.1:3" {
		t.Errorf("addresses %q", got)
	}
	if c.CurrentCoordinator() != "127.0.0.1:1" {
		t.Errorf("CurrentCoordinator() = %q", c.CurrentCoordinator())
	}
	if _, err := New(Config{RMs: []RM{{Name: "pg", Driver: "postgres"}}, Coordinators: []string{"127.0.0.1:1", "localhost"}}); err == nil || !strings.Contains(err.Error(), "no port") {
		t.Errorf("New with a portless address in Coordinators: %v", err)
	}
}

// A standby promoted with --accept-data-loss may lack the old primary's
// decision: it answers Status UNDECIDED and refuses the Commit with
// INTERNAL (outcome unknown: an operator settles gtrids from before the
// promotion). The SDK then reports the outcome unknown and touches no
// branch: it never commits what the old primary may have aborted, nor
// rolls back what it may have committed.
func TestUnknowableAfterAnUnsynchronizedPromotionStaysUnknown(t *testing.T) {
	old := &roleFake{hint: true}
	old.serving.Store(true)
	old.commit = func(*api.CommitRequest) (*api.CommitResponse, error) {
		old.serving.Store(false)
		return nil, status.Error(codes.Unavailable, "connection reset")
	}
	nu := &roleFake{hint: true, epoch: 2}
	nu.serving.Store(true)
	nu.commit = func(*api.CommitRequest) (*api.CommitResponse, error) {
		return nil, status.Error(codes.Internal, "coord: decision outcome unknown: gtrid began before this coordinator was promoted with --accept-data-loss")
	}
	oldAddr, _ := serveFake(t, old)
	nuAddr, _ := serveFake(t, nu)
	c, _ := followClient(t, oldAddr, nuAddr)
	tx, pg, maria := twoBranches(t, c)
	_, err := tx.Commit(context.Background())
	if !errors.Is(err, ErrOutcomeUnknown) || errors.Is(err, ErrAborted) || !strings.Contains(err.Error(), "accept-data-loss") {
		t.Fatalf("Commit: %v, want ErrOutcomeUnknown carrying the new primary's reason", err)
	}
	g, x := tx.GTRID(), xaOwned(tx.GTRID())
	wantLog(t, "pg", pg, "BEGIN", "UPDATE a SET v = 1", "PREPARE TRANSACTION "+pgGID(g))
	wantLog(t, "maria", maria, "XA START "+x, "UPDATE b SET v = 2", "XA END "+x, "XA PREPARE "+x)
	if n := nu.counts(); n.statuses != 1 || n.resolves != 0 || n.commits != 1 || n.aborts != 0 {
		t.Errorf("the new primary got %+v; want 1 Status without resolve, 1 Commit, no Abort", n)
	}
}

// With PostgreSQL branches only (none the client settles), a COMMITTED
// answer to Status on the new primary is the outcome: no Commit is sent
// (the new primary's phase 2 commits the branches), and the SDK touches
// none of them.
func TestCommittedStatusEndsAPostgresOnlyCommit(t *testing.T) {
	old := &roleFake{hint: true}
	old.serving.Store(true)
	old.commit = func(*api.CommitRequest) (*api.CommitResponse, error) {
		old.serving.Store(false)
		return nil, status.Error(codes.Unavailable, "connection reset")
	}
	nu := &roleFake{hint: true, epoch: 2}
	nu.serving.Store(true)
	nu.status = func(*api.StatusRequest) (*api.StatusResponse, error) {
		return &api.StatusResponse{Outcome: api.Outcome_COMMITTED, Phase2Pending: true}, nil
	}
	oldAddr, _ := serveFake(t, old)
	nuAddr, _ := serveFake(t, nu)
	c := newClient(t, Config{Coordinators: []string{oldAddr, nuAddr},
		RMs: []RM{{Name: "pg", Driver: "postgres"}, {Name: "pg2", Driver: "postgres"}}})
	ctx := context.Background()
	tx := c.Begin()
	var dbs []*fakeDB
	for _, rm := range []string{"pg", "pg2"} {
		conn, db := fakeConnTo(t)
		b, err := tx.Branch(ctx, rm, conn)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.ExecContext(ctx, "UPDATE a SET v = 1"); err != nil {
			t.Fatal(err)
		}
		dbs = append(dbs, db)
	}
	res, err := tx.Commit(ctx)
	if err != nil || !res.Phase2Pending || res.CoordinatorCalls != 2 {
		t.Fatalf("Commit = %+v, %v; want committed, phase 2 pending, 2 calls (Commit to the old primary, Status to the new)", res, err)
	}
	if n := nu.counts(); n.statuses != 1 || n.resolves != 0 || n.commits != 0 {
		t.Errorf("the new primary got %+v; want 1 Status without resolve and no Commit", n)
	}
	for i, rm := range []string{"pg", "pg2"} {
		gid := pgOwned(tx.GTRID(), rm)
		wantLog(t, rm, dbs[i], "BEGIN", "UPDATE a SET v = 1", "PREPARE TRANSACTION "+gid)
	}
}

// Two coordinators say serving (a superseded primary not fenced yet, and
// the promoted one): the client moves to the higher epoch.
func TestMoveToTheHighestEpoch(t *testing.T) {
	sb := &roleFake{hint: true}
	stale, promoted := &roleFake{hint: true, epoch: 1}, &roleFake{hint: true, epoch: 2}
	stale.serving.Store(true)
	promoted.serving.Store(true)
	sbAddr, _ := serveFake(t, sb)
	staleAddr, _ := serveFake(t, stale)
	promotedAddr, _ := serveFake(t, promoted)
	c, _ := followClient(t, sbAddr, staleAddr, promotedAddr)
	tx, _, _ := twoBranches(t, c)
	if _, err := tx.Commit(context.Background()); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if c.CurrentCoordinator() != promotedAddr || stale.counts().commits != 0 || promoted.counts().commits != 1 {
		t.Errorf("the client uses %s (stale %+v, promoted %+v); want the epoch-2 primary %s", c.CurrentCoordinator(), stale.counts(), promoted.counts(), promotedAddr)
	}
}

// A coordinator of another cluster in the list (Health's cluster=) is never
// moved to, whatever its epoch: its Commit would be decided apart from this
// cluster's log, and its Status could say ABORTED of what this cluster
// committed.
func TestAnotherClustersCoordinatorIsNeverFollowed(t *testing.T) {
	sb := &roleFake{hint: true, cluster: "a", epoch: 1}
	foreign := &roleFake{hint: true, cluster: "z", epoch: 99}
	primary := &roleFake{hint: true, cluster: "a", epoch: 2}
	foreign.serving.Store(true)
	primary.serving.Store(true)
	sbAddr, _ := serveFake(t, sb)
	foreignAddr, _ := serveFake(t, foreign)
	primaryAddr, _ := serveFake(t, primary)
	c, _ := followClient(t, sbAddr, foreignAddr, primaryAddr)
	tx, _, _ := twoBranches(t, c)
	if _, err := tx.Commit(context.Background()); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if n := foreign.counts(); n.commits != 0 || c.CurrentCoordinator() != primaryAddr {
		t.Errorf("the client uses %s and sent cluster z's coordinator %d Commits; want cluster a's primary %s and none", c.CurrentCoordinator(), n.commits, primaryAddr)
	}
}

// Once the client moved to a primary of epoch 2, it never goes back to one
// that still says serving at epoch 1 (a superseded primary not fenced yet).
func TestNeverBackToASupersededEpoch(t *testing.T) {
	sb := &roleFake{hint: true, cluster: "a", epoch: 1}
	promoted := &roleFake{hint: true, cluster: "a", epoch: 2}
	stale := &roleFake{hint: true, cluster: "a", epoch: 1}
	promoted.serving.Store(true)
	stale.serving.Store(true)
	sbAddr, _ := serveFake(t, sb)
	promotedAddr, stopPromoted := serveFake(t, promoted)
	staleAddr, _ := serveFake(t, stale)
	c, err := New(Config{RMs: twoRMs, Coordinators: []string{sbAddr, promotedAddr, staleAddr}, DecisionTimeout: 3 * time.Second, // generous: a busy machine
		Defaults: CommitOptions{DecideAt: DecideAtCoordinator}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	tx, _, _ := twoBranches(t, c)
	if _, err := tx.Commit(context.Background()); err != nil || c.CurrentCoordinator() != promotedAddr {
		t.Fatalf("Commit = %v on %s; want committed on the epoch-2 primary", err, c.CurrentCoordinator())
	}
	stopPromoted()
	tx, _, _ = twoBranches(t, c)
	_, _ = tx.Commit(context.Background())
	if n := stale.counts(); n.commits != 0 {
		t.Errorf("a Commit went back to the superseded epoch-1 primary (%d)", n.commits)
	}
}

// A probe cut short by the caller's context moves nowhere: the coordinator
// not heard yet may be the primary of a newer epoch.
func TestAProbeCutShortMovesNowhere(t *testing.T) {
	sb := &roleFake{hint: true, cluster: "a", epoch: 1}
	stale := &roleFake{hint: true, cluster: "a", epoch: 1}
	promoted := &roleFake{hint: true, cluster: "a", epoch: 2, slow: 600 * time.Millisecond}
	stale.serving.Store(true)
	promoted.serving.Store(true)
	sbAddr, _ := serveFake(t, sb)
	staleAddr, _ := serveFake(t, stale)
	promotedAddr, _ := serveFake(t, promoted)
	c, _ := followClient(t, sbAddr, staleAddr, promotedAddr)
	tx, _, _ := twoBranches(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
	defer cancel()
	_, _ = tx.Commit(ctx)
	if c.CurrentCoordinator() == staleAddr || stale.counts().commits != 0 {
		t.Errorf("moved to the stale primary on a probe cut short (uses %s, stale got %d Commits)", c.CurrentCoordinator(), stale.counts().commits)
	}
}

// clusterHex is the identity a roleFake of cluster name says: the fakes'
// one (fakeCluster) for "", else one made of the name.
func clusterHex(name string) string {
	if name == "" {
		return fakeCluster.String()
	}
	h := hex.EncodeToString([]byte(name))
	return strings.Repeat("0", 32-len(h)) + h
}
