// Command golden prints, as JSON, the SQL that the Go package
// internal/decision sends and the branch names package xid makes, for fixed
// inputs, so that the Python client's tests (clients/python/tests/
// test_golden.py) can check that the Python client sends the same text.
// Statements that Go only executes (Resolve, Forget, Ensure, ReadID,
// CheckDurable) are captured through a database/sql driver that records
// every statement and answers as a real database would on the path chosen.
//
//	go run ./clients/python/tests/golden
package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tandem-tx/tandem/internal/decision"
	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/xid"
)

// The fixed inputs, repeated in test_golden.py.
const (
	gtridHex = "000001a2193110aa0123456789abcdef"
	otherHex = "000001a2193110bb00000000000000ff"
	tableHex = "6f1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e"
	partHex  = "00112233445566778899aabbccddeeff"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "golden:", err)
		os.Exit(1)
	}
}

func run(out io.Writer) error {
	g, err := xid.Parse(gtridHex)
	if err != nil {
		return err
	}
	other, _ := xid.Parse(otherHex)
	table, _ := xid.ParseOwner(tableHex)
	part, _ := xid.ParseOwner(partHex)
	res := map[string]any{}
	for _, d := range []rm.Driver{rm.Postgres, rm.MySQL} {
		x := ""
		if d == rm.MySQL {
			x = xid.CommitPointSelf(g, "maria", table).MySQLXID()
		}
		r := map[string]any{
			"begin":    decision.BeginStatements(d, x),
			"begin_nx": decision.BeginStatements(d, ""),
			"commit": decision.CommitStatements(d, decision.Commit{GTRID: g, Table: table, MaxAge: time.Hour,
				Participants: []decision.Participant{{RM: "pg2", Table: part}, {RM: "maria", Table: table}, {RM: "x", Table: xid.Owner{}}},
				Forget:       []xid.GTRID{g, other}, XA: x}),
			"commit_young": decision.CommitStatements(d, decision.Commit{GTRID: g, Table: table, MaxAge: 200 * time.Millisecond}),
			"commit_checked": decision.CommitStatements(d, decision.Commit{GTRID: g, Table: table, TableChecked: true, MaxAge: time.Hour,
				Participants: []decision.Participant{{RM: "pg2", Table: part}}, XA: x}),
			"id_checked":  decision.IDCheckedQuery(d),
			"commit_zero": decision.CommitStatements(d, decision.Commit{GTRID: g, MaxAge: 2 * time.Hour}),
			"ddl":         decision.DDL(d),
		}
		ctx := context.Background()
		rec, db := open(d)
		// The key's insert meets a row: rolled back, then the row is read.
		if _, err := decision.Resolve(ctx, db, d, g, table, 2*time.Second); err != nil {
			return fmt.Errorf("%s resolve: %w", d, err)
		}
		r["resolve"] = rec.take()
		if _, err := decision.Forget(ctx, db, d, []xid.GTRID{g, other}); err != nil {
			return fmt.Errorf("%s forget: %w", d, err)
		}
		r["forget"] = rec.take()
		if _, err := decision.ReadID(ctx, db, d); err != nil {
			return fmt.Errorf("%s read id: %w", d, err)
		}
		r["read_id"] = rec.take()
		if err := decision.CheckDurable(ctx, db, d); err != nil {
			return fmt.Errorf("%s check durable: %w", d, err)
		}
		r["durable"] = rec.take()
		_ = db.Close()
		res[string(d)] = r
	}
	var names []map[string]string
	for _, b := range []xid.Branch{
		{GTRID: g, RM: "pg"},
		{GTRID: g, RM: "pg", Owner: table},
		{GTRID: g, RM: "pg", CommitPoint: "maria", Owner: table},
		{GTRID: g, RM: "pg", CommitPoint: "maria"},
		xid.CommitPointSelf(g, "maria", table),
		{GTRID: g, RM: "maria", Owner: part},
	} {
		names = append(names, map[string]string{"rm": b.RM, "cp": b.CommitPoint, "owner": ownerString(b.Owner),
			"pg": b.PostgresGID(), "my": b.MySQLXID()})
	}
	res["names"] = names
	res["participants"] = decision.FormatParticipants([]decision.Participant{{RM: "pg2", Table: part}, {RM: "maria", Table: table}, {RM: "x"}})
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(res)
}

func ownerString(o xid.Owner) string {
	if o.IsZero() {
		return ""
	}
	return o.String()
}

// recorder is a database/sql driver that records every statement it is
// sent (a transaction's begin, commit and rollback as <begin>, <commit>,
// <rollback>) and answers: the decision key's INSERT with a duplicate key,
// every query with one row that suits it.
type recorder struct {
	d     rm.Driver
	mu    sync.Mutex
	stmts []string
}

func (r *recorder) add(s string) {
	r.mu.Lock()
	r.stmts = append(r.stmts, s)
	r.mu.Unlock()
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.stmts
	r.stmts = nil
	return out
}

var (
	regMu sync.Mutex
	recs  = map[string]*recorder{}
	seq   int
)

func init() { sql.Register("golden", goldenDriver{}) }

func open(d rm.Driver) (*recorder, *sql.DB) {
	regMu.Lock()
	seq++
	name := fmt.Sprintf("%s-%d", d, seq)
	r := &recorder{d: d}
	recs[name] = r
	regMu.Unlock()
	db, _ := sql.Open("golden", name)
	db.SetMaxOpenConns(1)
	return r, db
}

type goldenDriver struct{}

func (goldenDriver) Open(name string) (driver.Conn, error) {
	regMu.Lock()
	defer regMu.Unlock()
	r := recs[name]
	if r == nil {
		return nil, errors.New("golden: no recorder " + name)
	}
	return &conn{r: r}, nil
}

type conn struct{ r *recorder }

func (c *conn) Prepare(string) (driver.Stmt, error) { return nil, errors.New("golden: no Prepare") }
func (c *conn) Close() error                        { return nil }
func (c *conn) Begin() (driver.Tx, error)           { c.r.add("<begin>"); return tx{c.r}, nil }

func (c *conn) BeginTx(context.Context, driver.TxOptions) (driver.Tx, error) { return c.Begin() }

type tx struct{ r *recorder }

func (t tx) Commit() error   { t.r.add("<commit>"); return nil }
func (t tx) Rollback() error { t.r.add("<rollback>"); return nil }

func (c *conn) ExecContext(_ context.Context, q string, _ []driver.NamedValue) (driver.Result, error) {
	c.r.add(q)
	if strings.Contains(q, "'A'") && strings.HasPrefix(q, "INSERT INTO "+decision.TableName) {
		if c.r.d == rm.MySQL {
			return nil, &mysql.MySQLError{Number: 1062, Message: "Duplicate entry"}
		}
		return nil, &pgconn.PgError{Severity: "ERROR", Code: "23505", Message: "duplicate key value"}
	}
	return driver.RowsAffected(1), nil
}

func (c *conn) QueryContext(_ context.Context, q string, _ []driver.NamedValue) (driver.Rows, error) {
	c.r.add(q)
	switch {
	case strings.HasPrefix(q, "SHOW fsync"):
		return &rows{cols: []string{"fsync"}, vals: []driver.Value{"on"}}, nil
	case strings.Contains(q, "@@GLOBAL.innodb_flush_log_at_trx_commit"):
		return &rows{cols: []string{"a", "b", "c"}, vals: []driver.Value{int64(1), int64(1), int64(1)}}, nil
	case strings.Contains(q, " LEFT JOIN ") && c.r.d == rm.Postgres:
		return &rows{cols: []string{"id", "outcome", "ds", "is"}, vals: []driver.Value{tableHex, "C", "public", "public"}}, nil
	case strings.Contains(q, " LEFT JOIN "):
		return &rows{cols: []string{"id", "outcome"}, vals: []driver.Value{tableHex, "C"}}, nil
	case c.r.d == rm.Postgres:
		return &rows{cols: []string{"id", "ds", "is"}, vals: []driver.Value{tableHex, "public", "public"}}, nil
	}
	return &rows{cols: []string{"id"}, vals: []driver.Value{tableHex}}, nil
}

type rows struct {
	cols []string
	vals []driver.Value
	done bool
}

func (r *rows) Columns() []string { return r.cols }
func (r *rows) Close() error      { return nil }
func (r *rows) Next(dest []driver.Value) error {
	if r.done {
		return io.EOF
	}
	r.done = true
	copy(dest, r.vals)
	return nil
}
