package decision

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"time"

	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/xid"
)

// ForgetBatch is the most gtrids one Forget statement deletes; Forget splits
// longer lists. Well under MariaDB's in_predicate_conversion_threshold
// (1000 by default): an IN list that long becomes a subquery, and the
// DELETE then scans the whole table, locking every row it reads (so it
// waits for any open commit point's uncommitted 'C', FORCE INDEX or not).
const ForgetBatch = 256

// Forget deletes the 'C' rows of gs (gtrids whose every other branch is
// committed) that are at least ForgetMinAge old by the database's clock;
// younger ones are left (forget them again later). It never deletes an 'A'
// row (SweepAborts does, after the keep time). It returns how many rows it
// deleted.
func Forget(ctx context.Context, db *sql.DB, d rm.Driver, gs []xid.GTRID) (int64, error) {
	return defaultTable.forget(ctx, db, d, gs)
}

func (t table) forget(ctx context.Context, db *sql.DB, d rm.Driver, gs []xid.GTRID) (int64, error) {
	var n int64
	for len(gs) > 0 {
		batch := gs[:min(len(gs), ForgetBatch)]
		gs = gs[len(batch):]
		for _, g := range batch {
			if err := checkGTRID(g); err != nil {
				return n, err
			}
		}
		k, err := execBounded(ctx, db, d, gcLockWait, t.forgetStatement(d, batch))
		if err != nil {
			return n, t.explainGC("forget committed decisions", err)
		}
		n += k[0]
	}
	return n, nil
}

// gcLockWait bounds how long a forget or a sweep waits for a lock, a row's
// or the table's (execBounded). Its DELETE holds the locks it has taken
// while it waits, and those can block a commit point's or a recoverer's
// INSERT of a neighbouring key (InnoDB locks gaps); rows it could not
// delete now are deleted by a later sweep.
const gcLockWait = time.Second

// explainGC is explain, and says what a lock wait timeout means here.
func (t table) explainGC(what string, err error) error {
	if isLockTimeout(err) {
		return fmt.Errorf("decision: %s: a lock on %s was not granted within %s (a row held by an open commit point, or the table by LOCK TABLES or DDL); a later sweep deletes the rows: %w", what, t.name, gcLockWait, err)
	}
	return t.explain(what, err)
}

// SweepAborts deletes the 'A' rows older than keep by the database's clock,
// and returns how many. keep must be at least the maximum transaction age
// that CommitStatements enforces (plus a margin for the database's clock
// stepping back): a younger 'A' row may still be what refuses a late commit
// point.
func SweepAborts(ctx context.Context, db *sql.DB, d rm.Driver, keep time.Duration) (int64, error) {
	return defaultTable.sweepAborts(ctx, db, d, keep)
}

func (t table) sweepAborts(ctx context.Context, db *sql.DB, d rm.Driver, keep time.Duration) (int64, error) {
	// Never one DELETE that scans the table: on InnoDB it locks every row
	// it reads, so it would wait (up to the lock wait timeout) for any
	// commit point's uncommitted 'C' while its own locks block every
	// INSERT meanwhile. The candidates are read without locks (a
	// consistent read never sees an uncommitted row), then deleted by
	// primary key, the predicate checked again.
	old := "outcome = 'A' AND decided_at < " + t.ago(d, keep)
	var n int64
	for {
		gs, err := t.gtrids(ctx, db, "SELECT gtrid FROM "+t.name+" WHERE "+old+" ORDER BY gtrid LIMIT "+strconv.Itoa(ForgetBatch))
		if err != nil || len(gs) == 0 {
			return n, err
		}
		k, err := execBounded(ctx, db, d, gcLockWait, t.deleteByKey(d, old+" AND gtrid IN "+inList(gs)))
		if err != nil {
			return n, t.explainGC("sweep old abort decisions", err)
		}
		n += k[0]
		if len(gs) < ForgetBatch {
			return n, nil
		}
	}
}

// gtrids runs query, which lists gtrids.
func (t table) gtrids(ctx context.Context, db *sql.DB, query string) ([]xid.GTRID, error) {
	rs, err := db.QueryContext(ctx, query)
	if err != nil {
		return nil, t.explain("sweep old abort decisions", err)
	}
	defer rs.Close()
	var out []xid.GTRID
	for rs.Next() {
		var s string
		if err := rs.Scan(&s); err != nil {
			return nil, t.explain("sweep old abort decisions", err)
		}
		g, err := xid.Parse(s)
		if err != nil {
			return nil, fmt.Errorf("decision: sweep old abort decisions: row %q in %s is not a gtrid: the table was written by something else; inspect it", s, t.name)
		}
		out = append(out, g)
	}
	if err := rs.Err(); err != nil {
		return nil, t.explain("sweep old abort decisions", err)
	}
	return out, nil
}

// ago is the SQL for "the database's clock minus age".
func (table) ago(d rm.Driver, age time.Duration) string {
	us := strconv.FormatInt(max(age.Microseconds(), 0), 10)
	if d == rm.MySQL {
		return "UTC_TIMESTAMP(6) - INTERVAL " + us + " MICROSECOND"
	}
	return "clock_timestamp() - interval '" + us + " microseconds'"
}

// Row is one decision.
type Row struct {
	GTRID     xid.GTRID
	Outcome   Outcome
	BeganAt   time.Time // UTC
	DecidedAt time.Time // UTC
	// Participants is the participants column as stored ("" for 'A' rows
	// and rows written before participants were recorded): read it with
	// ParseParticipants.
	Participants string
}

// RowsLimit is the most rows one Rows or RowsAfter call returns, in gtrid
// order; read the next page with RowsAfter the last gtrid returned.
const RowsLimit = 10000

// Rows lists the decisions recorded more than olderThan ago by the
// database's clock, oldest gtrid first, at most RowsLimit: the 'C' rows a
// client that died before forgetting them left (collect them once their
// prepared branches are settled) and the 'A' rows SweepAborts will delete.
func Rows(ctx context.Context, q rm.Querier, d rm.Driver, olderThan time.Duration) ([]Row, error) {
	return defaultTable.rowsAfter(ctx, q, d, olderThan, xid.GTRID{})
}

// RowsAfter is Rows from the first gtrid greater than after (the zero gtrid:
// from the start), in the table's key order, which is the order of
// GTRID.String: the page after a page of RowsLimit rows. A page shorter than
// RowsLimit is the end of the table.
func RowsAfter(ctx context.Context, q rm.Querier, d rm.Driver, olderThan time.Duration, after xid.GTRID) ([]Row, error) {
	return defaultTable.rowsAfter(ctx, q, d, olderThan, after)
}

func (t table) rows(ctx context.Context, q rm.Querier, d rm.Driver, olderThan time.Duration) ([]Row, error) {
	return t.rowsAfter(ctx, q, d, olderThan, xid.GTRID{})
}

func (t table) rowsAfter(ctx context.Context, q rm.Querier, d rm.Driver, olderThan time.Duration, after xid.GTRID) ([]Row, error) {
	cols := "began_at, decided_at"
	if d == rm.MySQL {
		cols = "CAST(began_at AS CHAR), CAST(decided_at AS CHAR)" // text whatever the DSN's parseTime and loc
	}
	where := "decided_at < " + t.ago(d, olderThan)
	if !after.IsZero() {
		// The key's collation ("C", ascii_bin) compares bytes: the order of
		// the lowercase hex GTRID.String.
		where += " AND gtrid > " + literal(after)
	}
	rs, err := q.QueryContext(ctx, "SELECT gtrid, outcome, participants, "+cols+" FROM "+t.name+
		" WHERE "+where+" ORDER BY gtrid LIMIT "+strconv.Itoa(RowsLimit))
	if err != nil {
		return nil, t.explain("list decisions", err)
	}
	defer rs.Close()
	var out []Row
	for rs.Next() {
		var g, o string
		var r Row
		if d == rm.MySQL {
			var began, decided string
			if err := rs.Scan(&g, &o, &r.Participants, &began, &decided); err != nil {
				return nil, t.explain("list decisions", err)
			}
			if r.BeganAt, err = time.Parse(myTimeLayout, began); err == nil {
				r.DecidedAt, err = time.Parse(myTimeLayout, decided)
			}
			if err != nil {
				return nil, fmt.Errorf("decision: list decisions: a time in %s: %w", t.name, err)
			}
		} else if err := rs.Scan(&g, &o, &r.Participants, &r.BeganAt, &r.DecidedAt); err != nil {
			return nil, t.explain("list decisions", err)
		}
		id, err := xid.Parse(g)
		if err != nil || len(o) != 1 || (Outcome(o[0]) != Committed && Outcome(o[0]) != Aborted) {
			return nil, fmt.Errorf("decision: list decisions: row (%q, %q) in %s is not a decision: the table was written by something else; inspect it", g, o, t.name)
		}
		r.GTRID, r.Outcome = id, Outcome(o[0])
		r.BeganAt, r.DecidedAt = r.BeganAt.UTC(), r.DecidedAt.UTC()
		out = append(out, r)
	}
	if err := rs.Err(); err != nil {
		return nil, t.explain("list decisions", err)
	}
	return out, nil
}

// myTimeLayout is how MySQL/MariaDB write a DATETIME(6).
const myTimeLayout = "2006-01-02 15:04:05.999999"
