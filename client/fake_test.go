package client

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tandem-tx/tandem/api"
	"github.com/tandem-tx/tandem/internal/decision"
	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/xid"
)

// fakeDB is a database/sql driver that records every statement and answers
// from a script, so the SDK's statements can be checked without a database.
type fakeDB struct {
	mu       sync.Mutex
	stmts    []string
	fail     map[string]error // statement → error
	rowsFail map[string]error // query → error returned while its rows are read
	tableID  xid.Owner        // its decision table's id; zero: fakeTableID
	// selfChecked: the decision table checks its id itself (answered to
	// decision.IDCheckedQuery).
	selfChecked bool
	readOnly    bool // answer to the read-only query
	// noAutocommit: the session answers @@autocommit 0 (a pool whose DSN
	// turned it off).
	noAutocommit bool
	closed       int // connections closed (a released session)
	// slow: statement → how long it takes before it is logged and answered
	// (a database that answers late).
	slow map[string]time.Duration
}

func (db *fakeDB) log() []string {
	db.mu.Lock()
	defer db.mu.Unlock()
	return append([]string(nil), db.stmts...)
}

var (
	fakeMu  sync.Mutex
	fakeDBs = map[string]*fakeDB{}
	fakeSeq int
)

func init() { sql.Register("clientfake", fakeDriver{}) }

type fakeDriver struct{}

func (fakeDriver) Open(name string) (driver.Conn, error) {
	fakeMu.Lock()
	defer fakeMu.Unlock()
	return &fakeConn{db: fakeDBs[name]}, nil
}

type fakeConn struct{ db *fakeDB }

func (c *fakeConn) Prepare(string) (driver.Stmt, error) { return nil, errors.New("fake: no Prepare") }
func (c *fakeConn) Begin() (driver.Tx, error)           { return nil, errors.New("fake: no Begin") }
func (c *fakeConn) Close() error {
	c.db.mu.Lock()
	c.db.closed++
	c.db.mu.Unlock()
	return nil
}

func (c *fakeConn) run(q string) error {
	c.db.mu.Lock()
	d := c.db.slow[q]
	c.db.mu.Unlock()
	if d > 0 {
		time.Sleep(d)
	}
	c.db.mu.Lock()
	defer c.db.mu.Unlock()
	c.db.stmts = append(c.db.stmts, q)
	return c.db.fail[q]
}

func (c *fakeConn) ExecContext(_ context.Context, q string, _ []driver.NamedValue) (driver.Result, error) {
	if err := c.run(q); err != nil {
		return nil, err
	}
	return driver.RowsAffected(1), nil
}

func (c *fakeConn) QueryContext(_ context.Context, q string, _ []driver.NamedValue) (driver.Rows, error) {
	if err := c.run(q); err != nil {
		return nil, err
	}
	c.db.mu.Lock()
	rerr := c.db.rowsFail[q]
	c.db.mu.Unlock()
	if rerr != nil {
		return &fakeRows{err: rerr}, nil
	}
	if q == "SELECT id FROM "+decision.IDTableName || q == decision.IDCheckedQuery(rm.Postgres) || q == decision.IDCheckedQuery(rm.MySQL) {
		c.db.mu.Lock()
		id, checked := c.db.tableID, c.db.selfChecked
		c.db.mu.Unlock()
		if id.IsZero() {
			id = fakeTableID
		}
		if q == "SELECT id FROM "+decision.IDTableName {
			return &fakeRows{v: id.String()}, nil
		}
		n := int64(0)
		if checked {
			n = 1
		}
		return &fakeRows{vs: []driver.Value{id.String(), n}}, nil
	}
	if q == "SELECT @@autocommit, @@in_transaction" {
		c.db.mu.Lock()
		ac := int64(1)
		if c.db.noAutocommit {
			ac = 0
		}
		c.db.mu.Unlock()
		return &fakeRows{vs: []driver.Value{ac, int64(0)}}, nil
	}
	if strings.Contains(q, "txid_current_if_assigned") {
		c.db.mu.Lock()
		ro := c.db.readOnly
		c.db.mu.Unlock()
		return &fakeRows{v: ro}, nil
	}
	switch {
	case q == "SHOW fsync": // a durable PostgreSQL (decision.CheckDurable)
		return &fakeRows{v: "on"}, nil
	case strings.Contains(q, "innodb_flush_log_at_trx_commit"): // a durable MariaDB
		return &fakeRows{vs: []driver.Value{int64(1), int64(1), int64(1)}}, nil
	case strings.HasPrefix(q, "SELECT gtrid FROM tandem_decision WHERE 1 = 0"): // the decision table exists
		return &fakeRows{done: true}, nil
	}
	return &fakeRows{v: int64(1)}, nil
}

// fakeRows is one row of one column v, or of the columns vs.
type fakeRows struct {
	v    driver.Value
	vs   []driver.Value
	done bool
	err  error // returned by Next
}

func (r *fakeRows) Columns() []string {
	if r.vs != nil {
		return make([]string, len(r.vs))
	}
	return []string{"v"}
}
func (r *fakeRows) Close() error { return nil }
func (r *fakeRows) Next(dest []driver.Value) error {
	if r.err != nil {
		return r.err
	}
	if r.done {
		return io.EOF
	}
	r.done = true
	if r.vs != nil {
		copy(dest, r.vs)
		return nil
	}
	dest[0] = r.v
	return nil
}

// fakePool returns a pool of a new fake database.
func fakePool(t *testing.T) (*sql.DB, *fakeDB) {
	t.Helper()
	db := &fakeDB{fail: map[string]error{}, rowsFail: map[string]error{}}
	fakeMu.Lock()
	fakeSeq++
	key := "db" + strconv.Itoa(fakeSeq)
	fakeDBs[key] = db
	fakeMu.Unlock()
	pool, err := sql.Open("clientfake", key)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	return pool, db
}

// fakeConnTo returns a dedicated connection to a new fake database.
func fakeConnTo(t *testing.T) (*sql.Conn, *fakeDB) {
	t.Helper()
	pool, db := fakePool(t)
	conn, err := pool.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, db
}

func wantLog(t *testing.T, rm string, db *fakeDB, want ...string) {
	t.Helper()
	if got := db.log(); !reflect.DeepEqual(got, want) {
		t.Errorf("statements on %s:\n got %q\nwant %q", rm, got, want)
	}
}

// fakeTableID is every fake database's decision-table id.
var fakeTableID = xid.Owner{0xfa, 0x4e, 1}

func xaID(g xid.GTRID) string { return xid.Branch{GTRID: g, RM: "maria"}.MySQLXID() }

// pgGID names pg's branch prepared for a fake coordinator (owned by fakeCluster).
func pgGID(g xid.GTRID) string { return pgOwned(g, "pg") }

// xaOwned and pgOwned name branches decided by a fake coordinator (owned by fakeCluster).
func xaOwned(g xid.GTRID) string {
	return xid.Branch{GTRID: g, RM: "maria", Owner: fakeCluster}.MySQLXID()
}
func pgOwned(g xid.GTRID, rmName string) string {
	return "'" + xid.Branch{GTRID: g, RM: rmName, Owner: fakeCluster}.PostgresGID() + "'"
}

// twoBranches begins a transaction with a write on pg and one on maria.
func twoBranches(t *testing.T, c *Client) (tx *Tx, pg, maria *fakeDB) {
	t.Helper()
	return twoBranchesWith(t, c, nil)
}

// twoBranchesWith is twoBranches with setup run on the two fake databases
// before the branches touch them (nil: none).
func twoBranchesWith(t *testing.T, c *Client, setup func(pg, maria *fakeDB)) (tx *Tx, pg, maria *fakeDB) {
	t.Helper()
	ctx := context.Background()
	tx = c.Begin()
	pgConn, pg := fakeConnTo(t)
	myConn, maria := fakeConnTo(t)
	if setup != nil {
		setup(pg, maria)
	}
	bp, err := tx.Branch(ctx, "pg", pgConn)
	if err != nil {
		t.Fatal(err)
	}
	bm, err := tx.Branch(ctx, "maria", myConn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bp.ExecContext(ctx, "UPDATE a SET v = 1"); err != nil {
		t.Fatal(err)
	}
	if _, err := bm.ExecContext(ctx, "UPDATE b SET v = 2"); err != nil {
		t.Fatal(err)
	}
	return tx, pg, maria
}

func TestOnePhaseCommit(t *testing.T) {
	for _, multi := range []bool{false, true} {
		t.Run("multistatements="+strconv.FormatBool(multi), func(t *testing.T) {
			c := newClient(t, Config{RMs: []RM{{Name: "pg", Driver: "postgres"}, {Name: "maria", Driver: "mysql", MultiStatements: multi}}})
			ctx := context.Background()
			tx := c.Begin()
			conn, db := fakeConnTo(t)
			b, err := tx.Branch(ctx, "maria", conn)
			if err != nil {
				t.Fatal(err)
			}
			if b.RM() != "maria" {
				t.Errorf("Branch.RM() = %q", b.RM())
			}
			if again, err := tx.Branch(ctx, "maria", conn); err != nil || again != b {
				t.Errorf("second Branch on the same RM and connection = %p, %v; want the first %p", again, err, b)
			}
			other, _ := fakeConnTo(t)
			if _, err := tx.Branch(ctx, "maria", other); err == nil {
				t.Errorf("a second branch on maria on another connection was accepted")
			}
			if len(db.log()) != 0 {
				t.Errorf("Branch sent %q before the first statement", db.log())
			}
			if _, err := b.ExecContext(ctx, "UPDATE t SET v = 1"); err != nil {
				t.Fatal(err)
			}
			res, err := tx.Commit(ctx)
			if err != nil {
				t.Fatalf("Commit: %v", err)
			}
			x := xaID(tx.GTRID())
			if multi {
				wantLog(t, "maria", db, "XA START "+x+"; UPDATE t SET v = 1", "XA END "+x+"; XA COMMIT "+x+" ONE PHASE")
			} else {
				wantLog(t, "maria", db, "XA START "+x, "UPDATE t SET v = 1", "XA END "+x, "XA COMMIT "+x+" ONE PHASE")
			}
			if res.Path != PathOnePhase || res.CoordinatorCalls != 0 || res.RMRoundTrips != len(db.log()) {
				t.Errorf("Commit = %+v", res)
			}
			if _, err := b.ExecContext(ctx, "UPDATE t SET v = 2"); !errors.Is(err, ErrTxDone) {
				t.Errorf("ExecContext after Commit: %v, want ErrTxDone", err)
			}
			if _, err := tx.Branch(ctx, "pg", other); !errors.Is(err, ErrTxDone) {
				t.Errorf("Branch after Commit: %v, want ErrTxDone", err)
			}
		})
	}
}

// A PostgreSQL branch that only read commits locally; the MySQL writer then
// commits in one phase: no coordinator needed.
func TestReadOnlyBranchCommitsLocally(t *testing.T) {
	c := newClient(t, Config{})
	ctx := context.Background()
	tx := c.Begin()
	pgConn, pg := fakeConnTo(t)
	pg.readOnly = true
	myConn, maria := fakeConnTo(t)
	bp, _ := tx.Branch(ctx, "pg", pgConn)
	bm, _ := tx.Branch(ctx, "maria", myConn)
	rows, err := bp.QueryContext(ctx, "SELECT v FROM a")
	if err != nil {
		t.Fatal(err)
	}
	rows.Close()
	if _, err := bm.ExecContext(ctx, "UPDATE b SET v = 2"); err != nil {
		t.Fatal(err)
	}
	res, err := tx.Commit(ctx)
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if res.Path != PathOnePhase || res.CoordinatorCalls != 0 {
		t.Errorf("Commit = %+v, want one-phase without the coordinator", res)
	}
	wantLog(t, "pg", pg, "BEGIN", "SELECT v FROM a", "SELECT txid_current_if_assigned() IS NULL", "COMMIT")
	x := xaID(tx.GTRID())
	wantLog(t, "maria", maria, "XA START "+x, "UPDATE b SET v = 2", "XA END "+x, "XA COMMIT "+x+" ONE PHASE")
}

func TestTwoWritersWithoutCoordinatorRollBack(t *testing.T) {
	c := newClient(t, Config{})
	tx, pg, maria := twoBranches(t, c)
	_, err := tx.Commit(context.Background())
	if !errors.Is(err, ErrAborted) || !errors.Is(err, ErrNoCoordinator) {
		t.Fatalf("Commit: %v, want ErrAborted caused by ErrNoCoordinator", err)
	}
	x := xaID(tx.GTRID())
	wantLog(t, "pg", pg, "BEGIN", "UPDATE a SET v = 1", "ROLLBACK")
	wantLog(t, "maria", maria, "XA START "+x, "UPDATE b SET v = 2", "XA END "+x, "XA ROLLBACK "+x)
	if _, err := tx.Commit(context.Background()); !errors.Is(err, ErrTxDone) {
		t.Errorf("Commit after an aborted Commit: %v, want ErrTxDone", err)
	}
}

func TestFailedStatementAbortsTheTransaction(t *testing.T) {
	c := newClient(t, Config{})
	ctx := context.Background()
	tx := c.Begin()
	conn, db := fakeConnTo(t)
	dup := &mysql.MySQLError{Number: 1062, Message: "Duplicate entry"}
	db.fail["INSERT dup"] = dup
	b, _ := tx.Branch(ctx, "maria", conn)
	if _, err := b.ExecContext(ctx, "INSERT ok"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ExecContext(ctx, "INSERT dup"); !errors.Is(err, dup) {
		t.Fatalf("ExecContext: %v, want the database's error", err)
	}
	if _, err := b.ExecContext(ctx, "INSERT more"); !errors.Is(err, ErrBranchFailed) {
		t.Fatalf("ExecContext after a failure: %v, want ErrBranchFailed", err)
	}
	_, err := tx.Commit(ctx)
	if !errors.Is(err, ErrAborted) || !errors.Is(err, dup) {
		t.Fatalf("Commit: %v, want ErrAborted caused by the failed statement", err)
	}
	x := xaID(tx.GTRID())
	wantLog(t, "maria", db, "XA START "+x, "INSERT ok", "INSERT dup", "XA END "+x, "XA ROLLBACK "+x)
}

func TestRollbackActiveBranches(t *testing.T) {
	c := newClient(t, Config{})
	tx, pg, maria := twoBranches(t, c)
	if err := tx.Rollback(context.Background()); err != nil {
		t.Fatalf("Rollback: %v", err)
	}
	if err := tx.Rollback(context.Background()); err != nil {
		t.Fatalf("second Rollback: %v", err)
	}
	x := xaID(tx.GTRID())
	wantLog(t, "pg", pg, "BEGIN", "UPDATE a SET v = 1", "ROLLBACK")
	wantLog(t, "maria", maria, "XA START "+x, "UPDATE b SET v = 2", "XA END "+x, "XA ROLLBACK "+x)
}

// fakeCoordinator answers Commit from a function and records the requests.
type fakeCoordinator struct {
	api.UnimplementedCoordinatorServer
	mu      sync.Mutex
	commits []*api.CommitRequest
	aborts  []*api.AbortRequest
	commit  func(*api.CommitRequest) (*api.CommitResponse, error)
	// owners are the api.MetadataOwner values of the Commits, in order
	// ("" for none).
	owners []string
	// settlesAny: its Health sends api.MetadataClientSettlesAny.
	settlesAny bool
}

func (f *fakeCoordinator) Commit(ctx context.Context, req *api.CommitRequest) (*api.CommitResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	f.mu.Lock()
	f.commits = append(f.commits, req)
	f.owners = append(f.owners, strings.Join(md.Get(api.MetadataOwner), ","))
	f.mu.Unlock()
	return f.commit(req)
}

// fakeCluster is the cluster every fake coordinator names in its Health.
var fakeCluster = xid.Owner{0xc1, 0x05, 0x7e}

// fakeHealthMessage is a primary's Health message naming fakeCluster.
const fakeHealthMessage = "role=primary cluster=c1057e00000000000000000000000000 epoch=1"

func (f *fakeCoordinator) Health(ctx context.Context, _ *api.HealthRequest) (*api.HealthResponse, error) {
	if f.settlesAny {
		_ = grpc.SetHeader(ctx, metadata.Pairs(api.MetadataClientSettlesAny, "1"))
	}
	return &api.HealthResponse{Serving: true, Message: fakeHealthMessage}, nil
}

func (f *fakeCoordinator) Abort(_ context.Context, req *api.AbortRequest) (*api.AbortResponse, error) {
	f.mu.Lock()
	f.aborts = append(f.aborts, req)
	f.mu.Unlock()
	return &api.AbortResponse{Outcome: api.Outcome_ABORTED}, nil
}

func (f *fakeCoordinator) counts() (commits, aborts int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.commits), len(f.aborts)
}

// startCoordinator serves f on a loopback port for the test's duration.
func startCoordinator(t *testing.T, f api.CoordinatorServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	api.RegisterCoordinatorServer(s, f)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

func TestTwoPhaseCommitted(t *testing.T) {
	f := &fakeCoordinator{commit: func(*api.CommitRequest) (*api.CommitResponse, error) {
		return &api.CommitResponse{Outcome: api.Outcome_COMMITTED}, nil
	}}
	c := newClient(t, Config{Coordinator: startCoordinator(t, f)})
	tx, pg, maria := twoBranches(t, c)
	res, err := tx.Commit(context.Background())
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if res.Path != PathTwoPhase || res.CoordinatorCalls != 1 || res.Phase2Pending {
		t.Errorf("Commit = %+v", res)
	}
	if s := c.Stats(); s.CoordinatorCalls != 2 {
		t.Errorf("Stats().CoordinatorCalls = %d, want 2 (Health, once, for the cluster's identity; Commit)", s.CoordinatorCalls)
	}
	g := tx.GTRID()
	x := xaOwned(g)
	// PostgreSQL's branch is the coordinator's to commit; MariaDB's is bound
	// to this session, so the SDK commits it here after the decision.
	wantLog(t, "pg", pg, "BEGIN", "UPDATE a SET v = 1", "PREPARE TRANSACTION "+pgGID(g))
	wantLog(t, "maria", maria, "XA START "+x, "UPDATE b SET v = 2", "XA END "+x, "XA PREPARE "+x, "XA COMMIT "+x)
	req := f.commits[0]
	if req.Gtrid != g.String() || len(req.Branches) != 2 {
		t.Fatalf("Commit request %v", req)
	}
	settles := map[string]bool{}
	for _, b := range req.Branches {
		settles[b.Rm] = b.ClientSettles
	}
	if !reflect.DeepEqual(settles, map[string]bool{"pg": false, "maria": true}) {
		t.Errorf("Commit request branches (rm → client settles) = %v", settles)
	}
}

func TestTwoPhaseAbortedByTheCoordinator(t *testing.T) {
	f := &fakeCoordinator{commit: func(*api.CommitRequest) (*api.CommitResponse, error) {
		return &api.CommitResponse{Outcome: api.Outcome_ABORTED, Message: "aborted by the in-doubt scan"}, nil
	}}
	c := newClient(t, Config{Coordinator: startCoordinator(t, f)})
	tx, pg, maria := twoBranches(t, c)
	_, err := tx.Commit(context.Background())
	if !errors.Is(err, ErrAborted) || !strings.Contains(err.Error(), "in-doubt scan") {
		t.Fatalf("Commit: %v, want ErrAborted with the coordinator's message", err)
	}
	g := tx.GTRID()
	x := xaOwned(g)
	wantLog(t, "pg", pg, "BEGIN", "UPDATE a SET v = 1", "PREPARE TRANSACTION "+pgGID(g))
	wantLog(t, "maria", maria, "XA START "+x, "UPDATE b SET v = 2", "XA END "+x, "XA PREPARE "+x, "XA ROLLBACK "+x)
}

// A refused Commit wrote no decision: the SDK rolls back every prepared branch itself.
func TestTwoPhaseRefusedRollsBack(t *testing.T) {
	f := &fakeCoordinator{commit: func(*api.CommitRequest) (*api.CommitResponse, error) {
		return nil, status.Error(codes.InvalidArgument, "unknown resource manager")
	}}
	c := newClient(t, Config{Coordinator: startCoordinator(t, f)})
	tx, pg, maria := twoBranches(t, c)
	_, err := tx.Commit(context.Background())
	if !errors.Is(err, ErrAborted) || status.Code(errors.Unwrap(err)) != codes.InvalidArgument {
		t.Fatalf("Commit: %v, want ErrAborted caused by the refusal", err)
	}
	g := tx.GTRID()
	x := xaOwned(g)
	wantLog(t, "pg", pg, "BEGIN", "UPDATE a SET v = 1", "PREPARE TRANSACTION "+pgGID(g), "ROLLBACK PREPARED "+pgGID(g))
	wantLog(t, "maria", maria, "XA START "+x, "UPDATE b SET v = 2", "XA END "+x, "XA PREPARE "+x, "XA ROLLBACK "+x)
	if commits, aborts := f.counts(); commits != 1 || aborts != 0 {
		t.Errorf("coordinator calls: %d Commit, %d Abort; want 1, 0", commits, aborts)
	}
}

// A coordinator that stays unavailable: the SDK retries until its context
// ends, then reports the outcome unknown, touches no prepared branch, and
// lets go of the session-bound one so that the coordinator can settle it.
func TestTwoPhaseCoordinatorUnavailable(t *testing.T) {
	f := &fakeCoordinator{commit: func(*api.CommitRequest) (*api.CommitResponse, error) {
		return nil, status.Error(codes.Unavailable, "shutting down")
	}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := newClient(t, Config{Coordinator: startCoordinator(t, f), DialOptions: endAfterAnswers(3, cancel)})
	tx, pg, maria := twoBranches(t, c)
	res, err := tx.Commit(ctx)
	if !errors.Is(err, ErrOutcomeUnknown) || errors.Is(err, ErrAborted) {
		t.Fatalf("Commit: %v, want ErrOutcomeUnknown", err)
	}
	var ou *OutcomeUnknownError
	if !errors.As(err, &ou) || ou.GTRID != tx.GTRID() {
		t.Errorf("the error does not carry the gtrid: %v", err)
	}
	if commits, _ := f.counts(); commits != 3 || res.CoordinatorCalls != commits {
		t.Errorf("Commit RPCs: %d sent, %d reported; want 3 (retries until the context ended)", commits, res.CoordinatorCalls)
	}
	g := tx.GTRID()
	x := xaOwned(g)
	wantLog(t, "pg", pg, "BEGIN", "UPDATE a SET v = 1", "PREPARE TRANSACTION "+pgGID(g))
	wantLog(t, "maria", maria, "XA START "+x, "UPDATE b SET v = 2", "XA END "+x, "XA PREPARE "+x)
	maria.mu.Lock()
	closed := maria.closed
	maria.mu.Unlock()
	if closed != 1 {
		t.Errorf("the session holding maria's prepared branch was closed %d times, want 1", closed)
	}
	if err := tx.Rollback(context.Background()); err != nil {
		t.Errorf("Rollback after an unknown outcome: %v", err)
	}
	wantLog(t, "pg", pg, "BEGIN", "UPDATE a SET v = 1", "PREPARE TRANSACTION "+pgGID(g))
}

// A prepare the database refuses aborts the transaction before any
// coordinator call.
func TestPrepareFailureRollsBackWithoutTheCoordinator(t *testing.T) {
	f := &fakeCoordinator{commit: func(*api.CommitRequest) (*api.CommitResponse, error) {
		return &api.CommitResponse{Outcome: api.Outcome_COMMITTED}, nil
	}}
	c := newClient(t, Config{Coordinator: startCoordinator(t, f), DialOptions: []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}})
	tx, pg, maria := twoBranches(t, c)
	x := xaOwned(tx.GTRID())
	maria.fail["XA PREPARE "+x] = &mysql.MySQLError{Number: 1402, Message: "XA_RBROLLBACK"}
	_, err := tx.Commit(context.Background())
	if !errors.Is(err, ErrAborted) {
		t.Fatalf("Commit: %v, want ErrAborted", err)
	}
	if commits, aborts := f.counts(); commits != 0 || aborts != 0 {
		t.Errorf("coordinator calls: %d Commit, %d Abort; want none", commits, aborts)
	}
	g := tx.GTRID()
	wantLog(t, "pg", pg, "BEGIN", "UPDATE a SET v = 1", "PREPARE TRANSACTION "+pgGID(g), "ROLLBACK PREPARED "+pgGID(g))
	wantLog(t, "maria", maria, "XA START "+x, "UPDATE b SET v = 2", "XA END "+x, "XA PREPARE "+x, "XA END "+x, "XA ROLLBACK "+x)
}

// knownCluster makes c know its coordinators' cluster (fakeCluster), as
// after a first Health, so that a test can start with the coordinator
// unreachable.
func knownCluster(c *Client) {
	c.cluster.mu.Lock()
	c.cluster.id = fakeCluster
	c.cluster.mu.Unlock()
}
