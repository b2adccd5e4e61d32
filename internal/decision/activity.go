package decision

import (
	"context"
	"database/sql"
	"time"

	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/waits"
)

// ActivityLag is how far behind the database's clock Activity reads: a
// row's decided_at is stamped at its INSERT and the row is seen only once
// its transaction commits, so rows are counted once they are ActivityLag
// old (a commit point slower than that between INSERT and COMMIT is not
// counted: it is rare and its transaction is reported by the SDK's own
// metrics either way).
const ActivityLag = 2 * time.Second

// Activity is what a decision table recorded between two reads: the
// commits decided at this commit point ('C' rows) and the aborts recorded by
// recoverers ('A' rows), and for the commits the time from the commit
// point's transaction's begin to its decision (decided_at − began_at,
// waits buckets).
type Activity struct {
	Commits, Aborts uint64
	BeganToDecided  waits.EventStats
}

// ActivityCursor is where the previous Activity read stopped, in the
// database's own clock and text form ("" before the first read).
type ActivityCursor string

// ReadActivity counts the rows decided after cursor and at least
// ActivityLag ago by the database's clock, and returns them with the
// cursor for the next read. The first read (cursor "") counts nothing: it
// only sets the cursor. Rows are never lost between reads (each read's
// window starts where the last ended), as long as they outlive the read
// interval plus ActivityLag (ForgetMinAge keeps 'C' rows 30 s). One
// aggregate query: at most a row per outcome and histogram bucket comes
// back, whatever the number of commits. It scans the rows of the table
// (there is no index on decided_at: the commit path pays for none).
func ReadActivity(ctx context.Context, q rm.Querier, d rm.Driver, cursor ActivityCursor) (Activity, ActivityCursor, error) {
	return defaultTable.readActivity(ctx, q, d, cursor)
}

func (t table) readActivity(ctx context.Context, q rm.Querier, d rm.Driver, cursor ActivityCursor) (Activity, ActivityCursor, error) {
	lagUS := "2000000"
	var query string
	if d == rm.MySQL {
		upto := "UTC_TIMESTAMP(6) - INTERVAL " + lagUS + " MICROSECOND"
		query = "WITH b AS (SELECT " + upto + " AS upto), " +
			"r AS (SELECT outcome, GREATEST(TIMESTAMPDIFF(MICROSECOND, began_at, decided_at), 0) AS us FROM " + t.name + ", b " +
			"WHERE ? <> '' AND decided_at > ? AND decided_at <= b.upto) " +
			"SELECT CAST(b.upto AS CHAR), NULL, 0, 0, 0, 0 FROM b UNION ALL " +
			"SELECT NULL, outcome, IF(us <= 1, 0, LEAST(CEIL(LOG2(CEIL(us))), 26)) AS bk, COUNT(*), SUM(us), MAX(us) FROM r GROUP BY outcome, bk"
	} else {
		upto := "clock_timestamp() - interval '" + lagUS + " microseconds'"
		query = "WITH b AS (SELECT " + upto + " AS upto), " +
			"r AS (SELECT outcome, GREATEST(EXTRACT(EPOCH FROM (decided_at - began_at)) * 1000000, 0)::float8 AS us FROM " + t.name + ", b " +
			"WHERE $1 <> '' AND decided_at > NULLIF($2, '')::timestamptz AND decided_at <= b.upto) " +
			"SELECT b.upto::text, NULL, 0, 0, 0::float8, 0::float8 FROM b UNION ALL " +
			"SELECT NULL, outcome, CASE WHEN us <= 1 THEN 0 ELSE LEAST(ceil(log(2, ceil(us)::numeric)), 26)::int END AS bk, count(*), sum(us), max(us) FROM r GROUP BY outcome, bk"
	}
	since := string(cursor)
	if since == "" && d == rm.MySQL {
		since = "1970-01-01 00:00:01" // never compared (the first test is false): a valid DATETIME all the same
	}
	rows, err := q.QueryContext(ctx, query, string(cursor), since)
	if err != nil {
		return Activity{}, cursor, t.explain("read the decisions since the last read", err)
	}
	defer rows.Close()
	var a Activity
	next := cursor
	for rows.Next() {
		var upto, outcome sql.NullString
		var bucket int
		var n int64
		var sum, mx float64
		if err := rows.Scan(&upto, &outcome, &bucket, &n, &sum, &mx); err != nil {
			return Activity{}, cursor, t.explain("read the decisions since the last read", err)
		}
		if upto.Valid {
			next = ActivityCursor(upto.String)
			continue
		}
		switch outcome.String {
		case "C":
			a.Commits += uint64(n)
			s := &a.BeganToDecided
			s.Count += uint64(n)
			s.Total += time.Duration(sum * 1000)
			s.Max = max(s.Max, time.Duration(mx*1000))
			s.Buckets[min(max(bucket, 0), waits.NumBuckets-1)] += uint64(n)
		case "A":
			a.Aborts += uint64(n)
		}
	}
	if err := rows.Err(); err != nil {
		return Activity{}, cursor, t.explain("read the decisions since the last read", err)
	}
	if next == "" {
		return Activity{}, cursor, t.explain("read the decisions since the last read", sql.ErrNoRows)
	}
	return a, next, nil
}

// TableState is a decision table at one moment: its 'C' and 'A' rows, how
// old the oldest 'C' row is, and how many 'C' rows are older than
// ForgetMinAge — those the SDK would have forgotten by now unless a
// participant still holds its branch prepared or the client died before
// forgetting (the coordinator's sweep collects them).
type TableState struct {
	CRows, ARows int64
	OldestC      time.Duration
	CKept        int64
}

// ReadState reads the table's state in one aggregate query (a scan of the
// table, as ReadActivity's).
func ReadState(ctx context.Context, q rm.Querier, d rm.Driver) (TableState, error) {
	return defaultTable.readState(ctx, q, d)
}

func (t table) readState(ctx context.Context, q rm.Querier, d rm.Driver) (TableState, error) {
	query := "SELECT count(*) FILTER (WHERE outcome = 'C'), count(*) FILTER (WHERE outcome = 'A'), " +
		"COALESCE(EXTRACT(EPOCH FROM clock_timestamp() - min(decided_at) FILTER (WHERE outcome = 'C')), 0)::float8, " +
		"count(*) FILTER (WHERE outcome = 'C' AND " + t.olderThan(d, ForgetMinAge) + ") FROM " + t.name
	if d == rm.MySQL {
		query = "SELECT COALESCE(SUM(outcome = 'C'), 0), COALESCE(SUM(outcome = 'A'), 0), " +
			"COALESCE(TIMESTAMPDIFF(MICROSECOND, MIN(IF(outcome = 'C', decided_at, NULL)), UTC_TIMESTAMP(6)), 0) / 1000000, " +
			"COALESCE(SUM(outcome = 'C' AND " + t.olderThan(d, ForgetMinAge) + "), 0) FROM " + t.name
	}
	var s TableState
	var oldest float64
	if err := queryRow(ctx, q, query, &s.CRows, &s.ARows, &oldest, &s.CKept); err != nil {
		return TableState{}, t.explain("read the decision table's state", err)
	}
	s.OldestC = time.Duration(max(oldest, 0) * float64(time.Second))
	return s, nil
}
