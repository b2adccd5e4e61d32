package rm

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/tandem-tx/tandem/waits"
	"github.com/tandem-tx/tandem/xid"
)

// fakeDB is a database/sql driver that answers the statements a Conn sends
// without a database: Exec records the statement and returns execErr[stmt];
// every query returns rows (after gate, if set, is closed).
type fakeDB struct {
	mu      sync.Mutex
	execs   []string
	execErr map[string]error
	cols    []string
	rows    [][]driver.Value
	gate    chan struct{}
	queries atomic.Int32
	// answer, when set, answers each query by its text instead of cols/rows.
	answer func(query string) ([]string, [][]driver.Value)
}

var (
	fakeMu  sync.Mutex
	fakeDBs = map[string]*fakeDB{}
	fakeSeq int
)

func init() { sql.Register("rmfake", fakeDriver{}) }

type fakeDriver struct{}

func (fakeDriver) Open(name string) (driver.Conn, error) {
	fakeMu.Lock()
	defer fakeMu.Unlock()
	db := fakeDBs[name]
	if db == nil {
		return nil, errors.New("fake: no such database " + name)
	}
	return fakeConn{db}, nil
}

type fakeConn struct{ db *fakeDB }

func (c fakeConn) Prepare(string) (driver.Stmt, error) { return nil, errors.New("fake: no Prepare") }
func (c fakeConn) Close() error                        { return nil }
func (c fakeConn) Begin() (driver.Tx, error)           { return nil, errors.New("fake: no Begin") }

func (c fakeConn) ExecContext(_ context.Context, q string, _ []driver.NamedValue) (driver.Result, error) {
	c.db.mu.Lock()
	defer c.db.mu.Unlock()
	c.db.execs = append(c.db.execs, q)
	if err := c.db.execErr[q]; err != nil {
		return nil, err
	}
	return driver.RowsAffected(0), nil
}

func (c fakeConn) QueryContext(ctx context.Context, q string, _ []driver.NamedValue) (driver.Rows, error) {
	c.db.queries.Add(1)
	if c.db.gate != nil {
		select {
		case <-c.db.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	c.db.mu.Lock()
	defer c.db.mu.Unlock()
	if c.db.answer != nil {
		cols, rows := c.db.answer(q)
		return &fakeRows{cols: cols, rows: rows}, nil
	}
	return &fakeRows{cols: c.db.cols, rows: c.db.rows}, nil
}

type fakeRows struct {
	cols []string
	rows [][]driver.Value
}

func (r *fakeRows) Columns() []string { return r.cols }
func (r *fakeRows) Close() error      { return nil }
func (r *fakeRows) Next(dest []driver.Value) error {
	if len(r.rows) == 0 {
		return io.EOF
	}
	copy(dest, r.rows[0])
	r.rows = r.rows[1:]
	return nil
}

// fakeConnFor returns a Conn named name speaking d over a new fakeDB.
func fakeConnFor(t *testing.T, name string, d Dialect, db *fakeDB) *Conn {
	t.Helper()
	fakeMu.Lock()
	fakeSeq++
	key := name + "-" + strings.Repeat("x", fakeSeq)
	fakeDBs[key] = db
	fakeMu.Unlock()
	pool, err := sql.Open("rmfake", key)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	return &Conn{name: name, dialect: d, db: pool, waits: waits.NewRegistry(waits.SideCoordinator)}
}

func xaRow(formatID int64, gtrid, bqual string) []driver.Value {
	return []driver.Value{formatID, int64(len(gtrid)), int64(len(bqual)), []byte(gtrid + bqual)}
}

func TestSettleMapsNotFound(t *testing.T) {
	b := xid.Branch{GTRID: mustGTRID(t, gtridHex), RM: "maria"}
	d := mysqlDialect{}
	db := &fakeDB{execErr: map[string]error{
		d.CommitPrepared(b):   &mysql.MySQLError{Number: 1397, Message: "XAER_NOTA: Unknown XID"},
		d.RollbackPrepared(b): &mysql.MySQLError{Number: 1614, Message: "XAER_DUPID"},
	}}
	c := fakeConnFor(t, "maria", d, db)
	ctx := context.Background()

	if err := c.CommitPrepared(ctx, b); !errors.Is(err, ErrBranchNotFound) {
		t.Errorf("CommitPrepared of an unknown XID: %v, want ErrBranchNotFound", err)
	}
	err := c.RollbackPrepared(ctx, b)
	if err == nil || errors.Is(err, ErrBranchNotFound) || !strings.Contains(err.Error(), `rm "maria": rollback prepared`) {
		t.Errorf("RollbackPrepared with another error: %v", err)
	}
	var myErr *mysql.MySQLError
	if !errors.As(err, &myErr) || myErr.Number != 1614 {
		t.Errorf("RollbackPrepared: the database error is not in the chain: %v", err)
	}
	other := xid.Branch{GTRID: b.GTRID, RM: "other"}
	if err := c.CommitPrepared(ctx, other); err != nil {
		t.Errorf("CommitPrepared: %v", err)
	}
	want := []string{d.CommitPrepared(b), d.RollbackPrepared(b), d.CommitPrepared(other)}
	db.mu.Lock()
	defer db.mu.Unlock()
	check(t, "statements sent", db.execs, want)
}

func TestRecoverKeepsOnlyThisRMsTandemBranches(t *testing.T) {
	g := mustGTRID(t, gtridHex)
	t.Run("mysql", func(t *testing.T) {
		db := &fakeDB{cols: []string{"formatID", "gtrid_length", "bqual_length", "data"}, rows: [][]driver.Value{
			xaRow(xid.FormatID, gtridHex, "maria"),
			xaRow(xid.FormatID, gtridHex, "other"),                  // another RM name on the same database
			xaRow(1, gtridHex, "maria"),                             // not Tandem's format ID
			xaRow(xid.FormatID, strings.ToUpper(gtridHex), "maria"), // not a Tandem gtrid
			xaRow(xid.CommitPointFormatID, gtridHex+"pg", "maria"),  // decided by commit point pg
			xaRow(xid.CommitPointFormatID, gtridHex+"pg", "other"),  // another RM name
			xaRow(xid.CommitPointFormatID, gtridHex, "maria"),       // commit-point format without a commit point
		}}
		c := fakeConnFor(t, "maria", mysqlDialect{}, db)
		got, err := c.Recover(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		check(t, "Recover", got, []InDoubt{{Branch: xid.Branch{GTRID: g, RM: "maria"}}, {Branch: xid.Branch{GTRID: g, RM: "maria", CommitPoint: "pg"}}})
	})
	t.Run("postgres", func(t *testing.T) {
		at := int64(0) // prepared just now by the database's clock (its age)
		db := &fakeDB{cols: []string{"gid", "age_us"}, rows: [][]driver.Value{
			{"tandem:" + gtridHex + ":pg", at},
			{"tandem:" + gtridHex + ":pg2", at},
			{"someone-else:" + gtridHex + ":pg", at},
			{"tandem:nothex:pg", at},
			{"tandemcp:" + gtridHex + ":pg:maria", at},
			{"tandemcp:" + gtridHex + ":pg2:maria", at},
			{"tandemcp:" + gtridHex + ":pg", at},
		}}
		c := fakeConnFor(t, "pg", postgresDialect{}, db)
		before := time.Now()
		got, err := c.Recover(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for i := range got {
			if got[i].PreparedAt.Before(before) || got[i].PreparedAt.After(time.Now()) {
				t.Errorf("Recover: %v prepared at %s, want the time of the scan (age 0)", got[i].Branch, got[i].PreparedAt)
			}
			got[i].PreparedAt = time.Time{}
		}
		check(t, "Recover", got, []InDoubt{{Branch: xid.Branch{GTRID: g, RM: "pg"}}, {Branch: xid.Branch{GTRID: g, RM: "pg", CommitPoint: "maria"}}})
	})
}

func TestIsPreparedSharesScans(t *testing.T) {
	g := mustGTRID(t, gtridHex)
	held := xid.Branch{GTRID: g, RM: "maria"}
	gone := xid.Branch{GTRID: xid.New(), RM: "maria"}
	db := &fakeDB{
		cols: []string{"formatID", "gtrid_length", "bqual_length", "data"},
		rows: [][]driver.Value{xaRow(xid.FormatID, gtridHex, "maria")},
		gate: make(chan struct{}),
	}
	c := fakeConnFor(t, "maria", mysqlDialect{}, db)
	since := time.Now()
	const callers = 8
	var wg sync.WaitGroup
	results := make([]bool, callers)
	errs := make([]error, callers)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := held
			if i%2 == 1 {
				b = gone
			}
			results[i], errs[i] = c.IsPrepared(context.Background(), b, since)
		}()
	}
	// Let the callers pile up behind the first scan, then let it finish.
	deadline := time.Now().Add(5 * time.Second)
	for db.queries.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	close(db.gate)
	wg.Wait()
	for i := range callers {
		if errs[i] != nil || results[i] != (i%2 == 0) {
			t.Errorf("caller %d: IsPrepared = %v, %v; want %v", i, results[i], errs[i], i%2 == 0)
		}
	}
	if n := db.queries.Load(); n != 1 {
		t.Errorf("%d concurrent callers ran %d scans, want 1", callers, n)
	}
	// A caller that needs a scan started after the last one gets a fresh one.
	if ok, err := c.IsPrepared(context.Background(), held, time.Now()); !ok || err != nil {
		t.Errorf("IsPrepared after the scan: %v, %v", ok, err)
	}
	if n := db.queries.Load(); n != 2 {
		t.Errorf("scans = %d, want 2: a later since must not reuse an older scan", n)
	}
	// A cached scan that is recent enough answers without a query.
	if ok, err := c.IsPrepared(context.Background(), gone, since); ok || err != nil {
		t.Errorf("IsPrepared from the cache: %v, %v", ok, err)
	}
	if n := db.queries.Load(); n != 2 {
		t.Errorf("scans = %d, want 2: an old enough cached scan must be reused", n)
	}
}

func TestIsPreparedHonoursContext(t *testing.T) {
	db := &fakeDB{cols: []string{"formatID", "gtrid_length", "bqual_length", "data"}, gate: make(chan struct{})}
	defer close(db.gate)
	c := fakeConnFor(t, "maria", mysqlDialect{}, db)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := c.IsPrepared(ctx, xid.Branch{GTRID: xid.New(), RM: "maria"}, time.Now())
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("IsPrepared with a scan that never answers: %v, want DeadlineExceeded", err)
	}
}

// A shared scan is not lost to the others when the caller that started it
// leaves: an unauthenticated GET /in-doubt?gtrid= on a loopback admin
// listener, closed at once, must not make a concurrent phase-2 check or
// Resolve fail with "context canceled". The waiter goes round for a scan of
// its own.
func TestIsPreparedOutlivesTheCallerThatStartedTheScan(t *testing.T) {
	g := mustGTRID(t, gtridHex)
	held := xid.Branch{GTRID: g, RM: "maria"}
	db := &fakeDB{
		cols: []string{"formatID", "gtrid_length", "bqual_length", "data"},
		rows: [][]driver.Value{xaRow(xid.FormatID, gtridHex, "maria")},
		gate: make(chan struct{}),
	}
	c := fakeConnFor(t, "maria", mysqlDialect{}, db)
	since := time.Now()
	starter, leave := context.WithCancel(context.Background())
	starterDone := make(chan error, 1)
	go func() {
		_, err := c.IsPrepared(starter, held, since)
		starterDone <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for db.queries.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	type answer struct {
		ok  bool
		err error
	}
	waiter := make(chan answer, 1)
	go func() {
		ok, err := c.IsPrepared(context.Background(), held, since)
		waiter <- answer{ok, err}
	}()
	time.Sleep(20 * time.Millisecond) // the waiter joins the starter's scan
	leave()
	if err := <-starterDone; !errors.Is(err, context.Canceled) {
		t.Errorf("the caller that left: %v, want context.Canceled", err)
	}
	close(db.gate) // the databases answer again
	select {
	case a := <-waiter:
		if a.err != nil || !a.ok {
			t.Fatalf("a caller that stayed: IsPrepared = %v, %v; want true, nil (a scan of its own)", a.ok, a.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a caller that stayed got no answer in 5 s")
	}
}
