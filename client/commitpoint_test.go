package client

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tandem-tx/tandem/api"
	"github.com/tandem-tx/tandem/internal/decision"
	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/xid"
)

// cpClient is a client whose transactions are decided at a commit point
// where one qualifies (the fakes answer as durable databases with the
// decision table).
func cpClient(t *testing.T, rms ...RM) *Client {
	t.Helper()
	if rms == nil {
		rms = twoRMs
	}
	return newClient(t, Config{RMs: rms, Defaults: CommitOptions{DecideAt: DecideAuto}})
}

const (
	tableCheck = "SELECT gtrid FROM tandem_decision WHERE 1 = 0"
)

// The first read of a decision table's id (and, on MariaDB, of whether the
// table checks it itself).
var (
	idQuery   = decision.IDCheckedQuery(rm.Postgres)
	idQueryMy = decision.IDCheckedQuery(rm.MySQL)
)

// cpGID is the name of rmName's branch prepared under commit point cp
// (whose table is a fake's: fakeTableID).
func cpGID(g xid.GTRID, rmName, cp string) string {
	return "'" + xid.Branch{GTRID: g, RM: rmName, CommitPoint: cp, Owner: fakeTableID}.PostgresGID() + "'"
}

// cpDecision is what the commit point cp sends to decide g with the
// participants (named with fakeTableID).
func cpDecision(d rm.Driver, g xid.GTRID, cp string, participants ...string) []string {
	c := decision.Commit{GTRID: g, Table: fakeTableID, MaxAge: time.Hour}
	for _, p := range participants {
		c.Participants = append(c.Participants, decision.Participant{RM: p, Table: fakeTableID})
	}
	if d == rm.MySQL {
		c.XA = xid.CommitPointSelf(g, cp, fakeTableID).MySQLXID()
	}
	return decision.CommitStatements(d, c)
}

// With a MariaDB writer and a PostgreSQL writer, MariaDB is the commit
// point: it begins as a plain transaction and never prepares; PostgreSQL
// prepares under a name that says so; MariaDB records COMMIT and commits;
// PostgreSQL commits. No coordinator call (the client has no coordinator).
// A second transaction does not check the RMs again.
func TestCommitPointOnMariaDB(t *testing.T) {
	c := cpClient(t)
	ctx := context.Background()
	for i := range 2 {
		tx, pg, maria := twoBranches(t, c)
		res, err := tx.Commit(ctx)
		if err != nil {
			t.Fatalf("Commit: %v", err)
		}
		if res.Path != PathCommitPoint || res.CommitPoint != "maria" || res.CoordinatorCalls != 0 || res.Phase2Pending {
			t.Errorf("result %+v, want the commit-point path at maria, no coordinator call, nothing pending", res)
		}
		g := tx.GTRID()
		var checks []string
		if i == 0 {
			checks = []string{"SHOW fsync", tableCheck, idQuery}
		}
		wantLog(t, "pg", pg, append(checks, "BEGIN", "UPDATE a SET v = 1",
			"PREPARE TRANSACTION "+cpGID(g, "pg", "maria"), "COMMIT PREPARED "+cpGID(g, "pg", "maria"))...)
		checks = nil
		if i == 0 {
			checks = []string{"SELECT @@GLOBAL.innodb_flush_log_at_trx_commit, @@GLOBAL.sync_binlog, @@GLOBAL.log_bin", tableCheck, idQueryMy}
		}
		want := append(checks, decision.BeginStatements(rm.MySQL, xid.CommitPointSelf(g, "maria", fakeTableID).MySQLXID())...) //nolint:gocritic // checks is not used again
		want = append(want, "UPDATE b SET v = 2")
		want = append(want, cpDecision(rm.MySQL, g, "maria", "pg")...)
		wantLog(t, "maria", maria, want...)
	}
}

// The commit point's INSERT refused by the database (a recoverer took the
// key first): the commit point did not commit, so everything rolls back
// and the error says why.
func TestCommitPointRefusedRollsBack(t *testing.T) {
	c := cpClient(t)
	ctx := context.Background()
	tx, pg, maria := twoBranches(t, c)
	g := tx.GTRID()
	insert := cpDecision(rm.MySQL, g, "maria", "pg")[0]
	maria.mu.Lock()
	maria.fail[insert] = &mysql.MySQLError{Number: 1062, Message: "Duplicate entry"}
	maria.mu.Unlock()
	_, err := tx.Commit(ctx)
	if !errors.Is(err, ErrAborted) {
		t.Fatalf("Commit = %v, want ErrAborted", err)
	}
	if got := pg.log(); got[len(got)-1] != "ROLLBACK PREPARED "+cpGID(g, "pg", "maria") {
		t.Errorf("pg's last statement %q, want the prepared branch rolled back", got[len(got)-1])
	}
	if got, x := maria.log(), xid.CommitPointSelf(g, "maria", fakeTableID).MySQLXID(); got[len(got)-1] != "XA ROLLBACK "+x {
		t.Errorf("maria's last statement %q, want XA ROLLBACK of the commit point's own branch", got[len(got)-1])
	}
}

// The commit point's connection breaks during its commit: the COMMIT may
// have happened. Without a pool to take the key with, the outcome is
// unknown, and nothing is rolled back or committed.
func TestCommitPointBrokenCallIsUnknownAndTouchesNothing(t *testing.T) {
	c := cpClient(t)
	ctx := context.Background()
	tx, pg, maria := twoBranches(t, c)
	g := tx.GTRID()
	insert := cpDecision(rm.MySQL, g, "maria", "pg")[0]
	maria.mu.Lock()
	maria.fail[insert] = driver.ErrBadConn
	maria.mu.Unlock()
	_, err := tx.Commit(ctx)
	if !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("Commit = %v, want ErrOutcomeUnknown", err)
	}
	for _, s := range pg.log() {
		if s == "ROLLBACK PREPARED "+cpGID(g, "pg", "maria") || s == "COMMIT PREPARED "+cpGID(g, "pg", "maria") {
			t.Errorf("pg got %q after an unknown outcome", s)
		}
	}
}

// decide-at coordinator: MariaDB begins as an XA branch, as before.
func TestDecideAtCoordinatorKeepsXA(t *testing.T) {
	c := newClient(t, Config{Defaults: CommitOptions{DecideAt: DecideAtCoordinator}})
	tx, _, maria := twoBranches(t, c)
	if got := maria.log(); got[0] != "XA START "+xaID(tx.GTRID()) {
		t.Errorf("maria's first statement %q, want XA START", got[0])
	}
	_ = tx.Rollback(context.Background())
}

// twoPostgresWriters begins a transaction of c writing RMs pga and pgb.
func twoPostgresWriters(t *testing.T, c *Client) (tx *Tx, a, b *fakeDB) {
	t.Helper()
	ctx := context.Background()
	tx = c.Begin()
	ca, a := fakeConnTo(t)
	cb, b := fakeConnTo(t)
	for _, w := range []struct {
		rm   string
		conn *sql.Conn
		stmt string
	}{{"pga", ca, "UPDATE a SET v = 1"}, {"pgb", cb, "UPDATE b SET v = 1"}} {
		br, err := tx.Branch(ctx, w.rm, w.conn)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := br.ExecContext(ctx, w.stmt); err != nil {
			t.Fatal(err)
		}
	}
	return tx, a, b
}

// Two PostgreSQL writers: the stronger RM is the commit point; the other
// prepares named with it.
func TestCommitPointOnPostgresByStrength(t *testing.T) {
	c := cpClient(t, RM{Name: "pga", Driver: "postgres"}, RM{Name: "pgb", Driver: "postgres", CommitPointStrength: 5})
	ctx := context.Background()
	tx, a, b := twoPostgresWriters(t, c)
	res, err := tx.Commit(ctx)
	if err != nil || res.CommitPoint != "pgb" {
		t.Fatalf("Commit = %+v, %v; want decided at pgb", res, err)
	}
	g := tx.GTRID()
	wantLog(t, "pga", a, "SHOW fsync", tableCheck, idQuery, "BEGIN", "UPDATE a SET v = 1",
		"PREPARE TRANSACTION "+cpGID(g, "pga", "pgb"), "COMMIT PREPARED "+cpGID(g, "pga", "pgb"))
	want := []string{"SHOW fsync", tableCheck, idQuery, "BEGIN", "UPDATE b SET v = 1"}
	wantLog(t, "pgb", b, append(want, cpDecision(rm.Postgres, g, "pgb", "pga")...)...)
}

// A MariaDB branch alone, begun as the commit point's own XA branch,
// commits in one phase (XA COMMIT … ONE PHASE).
func TestCommitPointAloneCommitsOnePhase(t *testing.T) {
	c := cpClient(t)
	ctx := context.Background()
	tx := c.Begin()
	conn, db := fakeConnTo(t)
	b, _ := tx.Branch(ctx, "maria", conn)
	if _, err := b.ExecContext(ctx, "UPDATE b SET v = 2"); err != nil {
		t.Fatal(err)
	}
	res, err := tx.Commit(ctx)
	if err != nil || res.Path != PathOnePhase {
		t.Fatalf("Commit = %+v, %v", res, err)
	}
	if got, x := db.log(), xid.CommitPointSelf(tx.GTRID(), "maria", fakeTableID).MySQLXID(); got[len(got)-1] != "XA COMMIT "+x+" ONE PHASE" {
		t.Errorf("last statement %q, want XA COMMIT … ONE PHASE", got[len(got)-1])
	}
}

// MariaDB cannot be the commit point (NeverCommitPoint): its XA branch is
// named at XA START with the PostgreSQL branch enlisted beside it, which
// becomes the commit point; MariaDB prepares and is committed after
// PostgreSQL's decision.
func TestCommitPointPinnedOnPostgres(t *testing.T) {
	c := cpClient(t, RM{Name: "pg", Driver: "postgres"}, RM{Name: "maria", Driver: "mysql", NeverCommitPoint: true})
	ctx := context.Background()
	tx, pg, maria := twoBranches(t, c)
	res, err := tx.Commit(ctx)
	if err != nil || res.Path != PathCommitPoint || res.CommitPoint != "pg" {
		t.Fatalf("Commit = %+v, %v; want decided at pg", res, err)
	}
	g := tx.GTRID()
	x := xid.Branch{GTRID: g, RM: "maria", CommitPoint: "pg", Owner: fakeTableID}.MySQLXID()
	wantLog(t, "maria", maria, idQueryMy, "XA START "+x, "UPDATE b SET v = 2", "XA END "+x, "XA PREPARE "+x, "XA COMMIT "+x)
	want := []string{"SHOW fsync", tableCheck, idQuery, "BEGIN", "UPDATE a SET v = 1"}
	wantLog(t, "pg", pg, append(want, cpDecision(rm.Postgres, g, "pg", "maria")...)...)
}

// Decided rows are forgotten in batches: nothing until forgetBatch are
// pending, then at most forgetMax in one commit; a batch given back (the
// commit carrying it failed) is sent again; past forgetKeep the oldest are
// dropped from memory.
func TestForgetBatches(t *testing.T) {
	var s cpState
	later := time.Now().Add(forgetAfter + time.Hour)
	s.addForget(xid.New())
	if got := s.takeForget(time.Now()); got != nil {
		t.Fatalf("took %d rows younger than decision.ForgetMinAge", len(got))
	}
	s.forget, s.forgetAt = nil, nil
	for range forgetBatch - 1 {
		s.addForget(xid.New())
	}
	if got := s.takeForget(later); got != nil {
		t.Fatalf("took %d rows below the batch size", len(got))
	}
	s.addForget(xid.New())
	got := s.takeForget(later)
	if len(got) != forgetBatch {
		t.Fatalf("took %d, want %d", len(got), forgetBatch)
	}
	s.giveBack(got)
	if again := s.takeForget(later); len(again) != forgetBatch || again[0] != got[0] {
		t.Fatalf("after giving back, took %d starting %v, want the same %d", len(again), again, forgetBatch)
	}
	for range forgetKeep + 10 {
		s.addForget(xid.New())
	}
	if len(s.forget) != forgetKeep {
		t.Fatalf("kept %d, want at most %d", len(s.forget), forgetKeep)
	}
	if n := len(s.takeForget(later)); n != forgetMax {
		t.Fatalf("took %d, want at most %d", n, forgetMax)
	}
}

// A MaxTxnAge past what coordinators keep abort decisions for would let a
// late commit point commit once its 'A' is swept: refused at New.
func TestMaxTxnAgeIsBoundedByTheCoordinatorsKeep(t *testing.T) {
	_, err := New(Config{RMs: twoRMs, MaxTxnAge: 2 * time.Hour})
	if err == nil || !strings.Contains(err.Error(), "MaxTxnAge") {
		t.Fatalf("New with MaxTxnAge 2h = %v, want refused", err)
	}
	if _, err := New(Config{RMs: twoRMs, MaxTxnAge: decision.MaxCommitPointAge}); err != nil {
		t.Fatalf("New with MaxTxnAge %s: %v", decision.MaxCommitPointAge, err)
	}
}

// PostgreSQL can answer after the commit point's COMMIT ran: a FATAL
// (57P01, the backend told to terminate) ends the session once the commit
// is done. That error is the server's, yet the decision may be COMMIT: the
// other branch must not be rolled back. Without a pool to take the key with,
// the outcome is unknown and the prepared branch is left alone.
func TestCommitPointFatalAfterCommitIsNotARollback(t *testing.T) {
	c := cpClient(t, RM{Name: "pga", Driver: "postgres"}, RM{Name: "pgb", Driver: "postgres", CommitPointStrength: 5})
	ctx := context.Background()
	tx, a, b := twoPostgresWriters(t, c)
	b.mu.Lock()
	b.fail["COMMIT"] = &pgconn.PgError{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command"}
	b.mu.Unlock()
	_, err := tx.Commit(ctx)
	if !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("Commit = %v, want ErrOutcomeUnknown", err)
	}
	g := tx.GTRID()
	for _, s := range a.log() {
		if s == "ROLLBACK PREPARED "+cpGID(g, "pga", "pgb") {
			t.Errorf("SPLIT risk: pga got %q after the commit point's COMMIT may have run", s)
		}
	}
}

// An ERROR (not FATAL) in the commit point's round trip means its
// transaction did not commit (the simple protocol skips the rest, and a
// failed COMMIT rolls back): everything rolls back at once, even without a
// pool to take the key with.
func TestCommitPointErrorAtCommitRollsBack(t *testing.T) {
	c := cpClient(t, RM{Name: "pga", Driver: "postgres"}, RM{Name: "pgb", Driver: "postgres", CommitPointStrength: 5})
	ctx := context.Background()
	tx, a, b := twoPostgresWriters(t, c)
	b.mu.Lock()
	b.fail["COMMIT"] = &pgconn.PgError{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: "23503", Message: "insert or update violates foreign key constraint"}
	b.mu.Unlock()
	_, err := tx.Commit(ctx)
	if !errors.Is(err, ErrAborted) {
		t.Fatalf("Commit = %v, want ErrAborted", err)
	}
	g := tx.GTRID()
	if got := a.log(); got[len(got)-1] != "ROLLBACK PREPARED "+cpGID(g, "pga", "pgb") {
		t.Errorf("pga's last statement %q, want its prepared branch rolled back", got[len(got)-1])
	}
}

// rmsFake answers Health listing the RMs it knows, and counts the calls.
type rmsFake struct {
	fakeCoordinator
	rms    []string
	down   map[string]string // RMs it knows but cannot reach, and why
	health atomic.Int32
}

func (f *rmsFake) Health(context.Context, *api.HealthRequest) (*api.HealthResponse, error) {
	f.health.Add(1)
	h := &api.HealthResponse{Serving: true, Message: fakeHealthMessage}
	for _, r := range f.rms {
		why, down := f.down[r]
		h.Rms = append(h.Rms, &api.RMHealth{Name: r, Reachable: !down, Error: why})
	}
	return h, nil
}

// A commit point's transaction writing an RM the coordinator does not know
// (its scan would never recover the branch) rolls back before anything is
// prepared, naming the RM; with RMs it knows the commit point decides, and
// the coordinator's answer is asked once.
func TestCommitPointRefusesAnRMTheCoordinatorDoesNotKnow(t *testing.T) {
	f := &rmsFake{rms: []string{"maria"}}
	c := newClient(t, Config{Coordinator: startCoordinator(t, f), Defaults: CommitOptions{DecideAt: DecideAuto}})
	ctx := context.Background()
	tx, pg, _ := twoBranches(t, c)
	_, err := tx.Commit(ctx)
	if !errors.Is(err, ErrAborted) || !strings.Contains(err.Error(), `does not know resource manager "pg"`) {
		t.Fatalf("Commit = %v, want ErrAborted naming pg", err)
	}
	for _, st := range pg.log() {
		if strings.HasPrefix(st, "PREPARE") {
			t.Errorf("pg got %q: a branch nobody would recover was prepared", st)
		}
	}
	f.rms = []string{"maria", "pg"}
	c.coordRMs.next.Store(0) // the operator added pg; the 5 s wait is not this test's
	for range 2 {
		tx, _, _ := twoBranches(t, c)
		res, err := tx.Commit(ctx)
		if err != nil || res.Path != PathCommitPoint || res.CoordinatorCalls != 0 {
			t.Fatalf("Commit = %+v, %v; want decided at the commit point", res, err)
		}
	}
	if n := f.health.Load(); n != 2 {
		t.Errorf("Health asked %d times, want 2 (once refused, once known, then kept)", n)
	}
}

// A commit point deciding a transaction that writes an RM the coordinator
// knows but cannot reach (Health: reachable=false, a wrong password in its
// DSN) commits, and is counted and warned about (rate-limited): the
// coordinator could not recover that branch were the client to die.
func TestCommitPointWithAnRMTheCoordinatorCannotReachIsCountedAndWarned(t *testing.T) {
	f := &rmsFake{rms: []string{"maria", "pg"}, down: map[string]string{"pg": "password authentication failed"}}
	var logs syncBuffer
	c := newClient(t, Config{Coordinator: startCoordinator(t, f), Defaults: CommitOptions{DecideAt: DecideAuto},
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	ctx := context.Background()
	for range 3 {
		tx, _, _ := twoBranches(t, c)
		res, err := tx.Commit(ctx)
		if err != nil || res.Path != PathCommitPoint {
			t.Fatalf("Commit = %+v, %v; want decided at the commit point", res, err)
		}
	}
	if n := c.Stats().UnrecoverableDecisions; n != 3 {
		t.Errorf("Stats().UnrecoverableDecisions = %d, want 3", n)
	}
	if n := strings.Count(logs.String(), "cannot reach resource manager pg"); n != 1 {
		t.Errorf("%d warnings about pg, want 1 (rate-limited):\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "password authentication failed") {
		t.Errorf("the warning does not say what the coordinator said: %s", logs.String())
	}
}
