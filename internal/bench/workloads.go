package bench

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/tandem-tx/tandem/client"
	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/waits"
	"github.com/tandem-tx/tandem/xid"
)

// rawFormatID is the XA format of raw2pc's branches ("BENC"), and "bench:"
// the prefix of its PostgreSQL GIDs: never Tandem's, so that a coordinator's
// in-doubt scan leaves them alone.
const rawFormatID = 0x42454E43

// Every workload's statements, one round trip each, are timed as the SDK
// times its own: "rm roundtrip" for a statement (the first one carries the
// begin), "rm prepare", "rm commit" (a local commit), "rm commit prepared".

// rt runs one round trip to RM i, timed as event ev.
func (w *worker) rt(tr *waits.Trace, i int, ev waits.Event, f func() error) error {
	w.trips[i]++
	start := time.Now()
	err := f()
	d := w.reg.Since(ev, start)
	tr.Add(waits.SideClient, ev, w.e.rms[i].Name, start, d)
	if err != nil {
		return fmt.Errorf("rm %q: %w", w.e.rms[i].Name, err)
	}
	return nil
}

// pgxOn reports whether RM i's statements go over pgx natively in the
// running workload.
func (w *worker) pgxOn(i int) bool { return w.native && w.pgc[i] != nil }

// exec runs q on RM i (pgx natively or database/sql, as the running
// workload does) and returns the rows it affected.
func (w *worker) exec(ctx context.Context, i int, q string, args ...any) (int64, error) {
	if w.pgxOn(i) {
		tag, err := w.pgc[i].Exec(ctx, q, args...)
		return tag.RowsAffected(), err
	}
	res, err := w.conns[i].ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	n, _ := res.RowsAffected()
	return n, nil
}

// execSQL is exec as one round trip for rt.
func (w *worker) execSQL(ctx context.Context, i int, q string, args ...any) func() error {
	return func() error {
		_, err := w.exec(ctx, i, q, args...)
		return err
	}
}

// queryRow reads one row of q on RM i into dest.
func (w *worker) queryRow(ctx context.Context, i int, q string, args []any, dest ...any) error {
	if w.pgxOn(i) {
		return w.pgc[i].QueryRow(ctx, q, args...).Scan(dest...)
	}
	return w.conns[i].QueryRowContext(ctx, q, args...).Scan(dest...)
}

// sendBatch sends b on PostgreSQL RM i in one round trip: on its pgx
// connection, natively or under database/sql.
func (w *worker) sendBatch(ctx context.Context, i int, b *pgx.Batch) error {
	if w.pgxOn(i) {
		return w.pgc[i].SendBatch(ctx, b).Close()
	}
	return w.conns[i].Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return errors.New("not a pgx connection")
		}
		return sc.Conn().SendBatch(ctx, b).Close()
	})
}

func (r *benchRM) insertSQL() string {
	return "INSERT INTO tandem_bench (id, v) VALUES (" + r.ph(1) + ", " + r.ph(2) + ")"
}

// beginInsert begins a transaction on RM i with begin and inserts row id, in
// one round trip: a pgx batch on PostgreSQL, a multi-statement on MySQL, as
// the SDK does.
func (w *worker) beginInsert(ctx context.Context, tr *waits.Trace, i int, begin string, id int64) error {
	r := w.e.rms[i]
	v := "row " + strconv.FormatInt(id, 10)
	return w.rt(tr, i, waits.RMRoundtrip, func() error {
		if r.Driver == rm.Postgres {
			var b pgx.Batch
			b.Queue(begin)
			b.Queue(r.insertSQL(), id, v)
			return w.sendBatch(ctx, i, &b)
		}
		_, err := w.exec(ctx, i, begin+"; "+r.insertSQL(), id, v)
		return err
	})
}

func plainBegin(r *benchRM) string {
	if r.Driver == rm.MySQL {
		return "START TRANSACTION"
	}
	return "BEGIN"
}

// parallel2 runs f(0) on a new goroutine and f(1) on this one.
func parallel2(f func(i int) error) error {
	var wg sync.WaitGroup
	var err0 error
	wg.Add(1)
	go func() {
		defer wg.Done()
		err0 = f(0)
	}()
	err1 := f(1)
	wg.Wait()
	return errors.Join(err0, err1)
}

// txnSQL: one insert on each RM, then two independent local commits in
// parallel. 4 round trips.
func txnSQL(ctx context.Context, w *worker, _ *wlState, tr *waits.Trace, _ bool) error {
	id := w.e.nextID.Add(1)
	for i, r := range w.e.rms {
		if err := w.beginInsert(ctx, tr, i, plainBegin(r), id); err != nil {
			return err
		}
	}
	return parallel2(func(i int) error {
		return w.rt(tr, i, waits.RMCommit, w.execSQL(ctx, i, "COMMIT"))
	})
}

// txnPlain: one insert on the 1pc RM as a local commit. 2 round trips.
func txnPlain(ctx context.Context, w *worker, _ *wlState, tr *waits.Trace, _ bool) error {
	i := w.e.one
	if err := w.beginInsert(ctx, tr, i, plainBegin(w.e.rms[i]), w.e.nextID.Add(1)); err != nil {
		return err
	}
	return w.rt(tr, i, waits.RMCommit, w.execSQL(ctx, i, "COMMIT"))
}

// rawBranch is the SQL of one raw2pc branch.
type rawBranch struct{ begin, prepare, commit, rollback string }

func rawSQL(r *benchRM, g xid.GTRID) rawBranch {
	if r.Driver == rm.Postgres {
		gid := "'bench:" + hex.EncodeToString(g[:]) + ":" + r.Name + "'"
		return rawBranch{"BEGIN", "PREPARE TRANSACTION " + gid, "COMMIT PREPARED " + gid, "ROLLBACK PREPARED " + gid}
	}
	x := fmt.Sprintf("'%s','%s',%d", hex.EncodeToString(g[:]), r.Name, rawFormatID)
	return rawBranch{"XA START " + x, "XA END " + x + "; XA PREPARE " + x, "XA COMMIT " + x, "XA ROLLBACK " + x}
}

// txnRaw2PC: the databases' own two-phase commit, driven here: insert on
// each RM, prepare both in parallel, commit both in parallel, each on the
// session that prepared it (MariaDB's prepared branch is bound to it). No
// coordinator, no decision log: a crash between the commits breaks
// atomicity. 6 round trips.
func txnRaw2PC(ctx context.Context, w *worker, _ *wlState, tr *waits.Trace, _ bool) error {
	id := w.e.nextID.Add(1)
	g := xid.New()
	var br [2]rawBranch
	for i, r := range w.e.rms {
		br[i] = rawSQL(r, g)
		if err := w.beginInsert(ctx, tr, i, br[i].begin, id); err != nil {
			return err
		}
	}
	var prepared [2]bool
	err := parallel2(func(i int) error {
		err := w.rt(tr, i, waits.RMPrepare, w.execSQL(ctx, i, br[i].prepare))
		prepared[i] = err == nil
		return err
	})
	if err != nil {
		for i := range 2 {
			if prepared[i] {
				_, _ = w.exec(context.WithoutCancel(ctx), i, br[i].rollback)
			}
		}
		return err
	}
	return parallel2(func(i int) error {
		return w.rt(tr, i, waits.RMCommitPrepared, w.execSQL(ctx, i, br[i].commit))
	})
}

// sdkResult copies a committed transaction's round trips into w.
func (w *worker) sdkResult(res client.Result) {
	for _, rt := range res.RoundTrips {
		for i, r := range w.e.rms {
			if r.Name == rt.RM {
				w.trips[i] += rt.N
			}
		}
	}
	w.calls += res.CoordinatorCalls
}

// txnXA: one insert on each RM as one global transaction through the SDK:
// statements pipelined with the begin, prepares in parallel, one Commit RPC.
func txnXA(ctx context.Context, w *worker, st *wlState, tr *waits.Trace, traceCoord bool) error {
	all := make([]int, len(w.e.rms))
	for i := range all {
		all[i] = i
	}
	return sdkInserts(ctx, w, st, tr, traceCoord, all)
}

// txnOnePC: one insert on one RM through the SDK: one-phase commit.
func txnOnePC(ctx context.Context, w *worker, st *wlState, tr *waits.Trace, traceCoord bool) error {
	return sdkInserts(ctx, w, st, tr, traceCoord, []int{w.e.one})
}

// sdkInserts runs one insert on each of the given RMs in one transaction
// through the SDK and commits it; the SDK picks the commit path.
func sdkInserts(ctx context.Context, w *worker, st *wlState, tr *waits.Trace, traceCoord bool, rms []int) error {
	id := w.e.nextID.Add(1)
	v := "row " + strconv.FormatInt(id, 10)
	tx := st.cli.Begin()
	tx.SetTrace(tr, traceCoord)
	for _, i := range rms {
		r := w.e.rms[i]
		b, err := w.branch(ctx, tx, i)
		if err == nil {
			_, err = b.exec(ctx, r.insertSQL(), id, v)
		}
		if err != nil {
			_ = tx.Rollback(ctx)
			return err
		}
	}
	res, err := tx.Commit(ctx)
	if err != nil {
		return err
	}
	w.sdkResult(res)
	return w.reopenEnded(ctx, res.EndedSessions)
}

// oltpIDs picks one transaction's rows on one RM: the updated row u and the
// deleted-and-reinserted row d (u < d: locked in ascending order), and 4 rows to read.
func (w *worker) oltpIDs() (u, d int, reads [4]int) {
	n := w.e.cfg.OLTPRows
	u, d = w.rng.IntN(n)+1, w.rng.IntN(n-1)+1
	if d >= u {
		d++
	}
	if d < u {
		u, d = d, u
	}
	for i := range reads {
		reads[i] = w.rng.IntN(n) + 1
	}
	return u, d, reads
}

// txnOLTPSQL: txnOLTP's statements on each RM, committed as two independent
// local transactions in parallel (not atomic): what oltp costs without 2PC.
func txnOLTPSQL(ctx context.Context, w *worker, _ *wlState, tr *waits.Trace, _ bool) error {
	n := w.e.cfg.OLTPRows
	for i, r := range w.e.rms {
		u, d, reads := w.oltpIDs()
		begin := plainBegin(r)
		err := w.rt(tr, i, waits.RMRoundtrip, func() error {
			if r.Driver == rm.Postgres {
				var b pgx.Batch
				b.Queue(begin)
				b.Queue("UPDATE tandem_bench_oltp SET k = k + 1 WHERE id = $1", u)
				return w.sendBatch(ctx, i, &b)
			}
			_, err := w.exec(ctx, i, begin+"; UPDATE tandem_bench_oltp SET k = k + 1 WHERE id = ?", u)
			return err
		})
		for _, id := range reads {
			if err != nil {
				break
			}
			err = w.rt(tr, i, waits.RMRoundtrip, func() error {
				var s string
				return w.queryRow(ctx, i, "SELECT c FROM tandem_bench_oltp WHERE id = "+r.ph(1), []any{id}, &s)
			})
		}
		var deleted int64
		if err == nil {
			err = w.rt(tr, i, waits.RMRoundtrip, func() error {
				var err error
				deleted, err = w.exec(ctx, i, "DELETE FROM tandem_bench_oltp WHERE id = "+r.ph(1), d)
				return err
			})
		}
		if err == nil && deleted > 0 {
			err = w.rt(tr, i, waits.RMRoundtrip, w.execSQL(ctx, i, "INSERT INTO tandem_bench_oltp (id, k, c, pad) VALUES ("+r.ph(1)+", "+r.ph(2)+", "+r.ph(3)+", "+r.ph(4)+")",
				d, w.rng.IntN(n)+1, filler(d, 119), filler(d*7, 59)))
		}
		if err != nil {
			return err // the worker reconnects: the databases roll back
		}
	}
	return parallel2(func(i int) error {
		return w.rt(tr, i, waits.RMCommit, w.execSQL(ctx, i, "COMMIT"))
	})
}

// txnOLTP: on each RM in turn, an update (which carries the begin), 4 point
// reads, then a delete and an insert of the same row (the row set stays the
// same; the insert is skipped when the delete found the row gone), as one
// global transaction. Each transaction locks its rows in
// ascending id order on each RM, and always works on the RMs in the same
// order, so it can deadlock with no other (not even across the two RMs).
func txnOLTP(ctx context.Context, w *worker, st *wlState, tr *waits.Trace, traceCoord bool) error {
	n := w.e.cfg.OLTPRows
	tx := st.cli.Begin()
	tx.SetTrace(tr, traceCoord)
	fail := func(err error) error {
		_ = tx.Rollback(ctx)
		return err
	}
	for i, r := range w.e.rms {
		b, err := w.branch(ctx, tx, i)
		if err != nil {
			return fail(err)
		}
		u, d, reads := w.oltpIDs()
		if _, err := b.exec(ctx, "UPDATE tandem_bench_oltp SET k = k + 1 WHERE id = "+r.ph(1), u); err != nil {
			return fail(err)
		}
		for _, id := range reads {
			var c string
			if err := b.queryRow(ctx, "SELECT c FROM tandem_bench_oltp WHERE id = "+r.ph(1), []any{id}, &c); err != nil {
				return fail(err)
			}
		}
		deleted, err := b.exec(ctx, "DELETE FROM tandem_bench_oltp WHERE id = "+r.ph(1), d)
		if err != nil {
			return fail(err)
		}
		if deleted == 0 {
			// A concurrent transaction deleted and re-inserted this row while
			// this one waited for its lock: the row is there, leave it.
			continue
		}
		if _, err := b.exec(ctx, "INSERT INTO tandem_bench_oltp (id, k, c, pad) VALUES ("+r.ph(1)+", "+r.ph(2)+", "+r.ph(3)+", "+r.ph(4)+")",
			d, w.rng.IntN(n)+1, filler(d, 119), filler(d*7, 59)); err != nil {
			return fail(err)
		}
	}
	res, err := tx.Commit(ctx)
	if err != nil {
		return err
	}
	w.sdkResult(res)
	return w.reopenEnded(ctx, res.EndedSessions)
}

// sdkBranch is a branch of the SDK, over database/sql or pgx natively.
type sdkBranch interface {
	exec(ctx context.Context, q string, args ...any) (int64, error)
	queryRow(ctx context.Context, q string, args []any, dest ...any) error
}

// branch enlists RM i in tx: over pgx natively (Tx.BranchPgx) when the
// running workload does, else over database/sql (Tx.Branch).
func (w *worker) branch(ctx context.Context, tx *client.Tx, i int) (sdkBranch, error) {
	name := w.e.rms[i].Name
	if w.pgxOn(i) {
		b, err := tx.BranchPgx(ctx, name, w.pgc[i])
		return pgxBranch{b}, err
	}
	b, err := tx.Branch(ctx, name, w.conns[i])
	return sqlBranch{b}, err
}

type sqlBranch struct{ b *client.Branch }

func (s sqlBranch) exec(ctx context.Context, q string, args ...any) (int64, error) {
	res, err := s.b.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	n, _ := res.RowsAffected()
	return n, nil
}

func (s sqlBranch) queryRow(ctx context.Context, q string, args []any, dest ...any) error {
	return s.b.QueryRowContext(ctx, q, args...).Scan(dest...)
}

type pgxBranch struct{ b *client.PgxBranch }

func (p pgxBranch) exec(ctx context.Context, q string, args ...any) (int64, error) {
	tag, err := p.b.Exec(ctx, q, args...)
	return tag.RowsAffected(), err
}

func (p pgxBranch) queryRow(ctx context.Context, q string, args []any, dest ...any) error {
	return p.b.QueryRow(ctx, q, args...).Scan(dest...)
}
