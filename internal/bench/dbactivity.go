package bench

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/tandem-tx/tandem/internal/rm"
)

// Database session activity: where the databases' time goes, sampled.
//
// The client's waits say how long a statement took ("rm commit" at the
// commit point: 0.65 ms); they cannot say what the server did meanwhile.
// While a workload's slices run, a sampler asks each database every
// DBConfig.ActivityEvery what every session of the bench's database is
// doing — the statement (classified: the decision's INSERT, XA PREPARE,
// COMMIT PREPARED, …) and what it waits on — and counts the pairs. A
// pair's samples × the interval estimate the session-seconds spent in it
// (as Oracle's Active Session History does): the decision's time at
// MariaDB split into lock waits, the commit's log flush (binlog group
// commit, redo) and the rest.
//
// PostgreSQL: pg_stat_activity, state 'active' with its wait_event_type
// and wait_event (none: on CPU), and 'idle in transaction' (the server
// waits for the client). MariaDB/MySQL: information_schema.PROCESSLIST's
// STATE for sessions running a statement, INNODB_TRX's 'LOCK WAIT' above
// it, and sleeping sessions inside a transaction ('idle in transaction').
// The sampler's own session is left out; every other session on the
// bench's database counts (the in-process coordinator's phase 2 too).

// DBActivity is one (statement, wait) pair's samples on one RM during a
// workload's slices.
type DBActivity struct {
	RM        string `json:"rm"`
	Statement string `json:"statement"`
	Wait      string `json:"wait"`
	Samples   uint64 `json:"samples"`
	// Seconds estimates the session-seconds: Samples × the interval.
	Seconds float64 `json:"seconds"`
	// Share of this RM's samples in this workload.
	Share float64 `json:"share"`
	// PerTxnMs: Seconds ÷ the workload's committed transactions, in ms.
	PerTxnMs float64 `json:"per_txn_ms"`
}

type activityKey struct{ rm, stmt, wait string }

type activitySource struct {
	rm    string
	drv   rm.Driver
	conn  *sql.Conn
	query string
}

// activitySampler samples between start and stop.
type activitySampler struct {
	every   time.Duration
	sources []*activitySource
	mu      sync.Mutex
	counts  map[activityKey]uint64
	rounds  map[string]uint64 // samples taken per RM
	stopc   chan struct{}
	done    chan struct{}
	warn    []string
}

const pgActivityQuery = `SELECT COALESCE(query, ''), COALESCE(state, ''), COALESCE(wait_event_type, ''), COALESCE(wait_event, '')
FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()
AND state IN ('active', 'idle in transaction', 'idle in transaction (aborted)')`

const myActivityQuery = `SELECT COALESCE(p.INFO, ''), COALESCE(p.COMMAND, ''), COALESCE(p.STATE, ''), COALESCE(t.trx_state, '')
FROM information_schema.PROCESSLIST p LEFT JOIN information_schema.INNODB_TRX t ON t.trx_mysql_thread_id = p.ID
WHERE p.ID <> CONNECTION_ID() AND p.DB = DATABASE() AND (p.COMMAND <> 'Sleep' OR t.trx_id IS NOT NULL)`

// myActivityQueryNoTrx is myActivityQuery for an account without the
// PROCESS privilege (INNODB_TRX needs it; PROCESSLIST shows the account's
// own sessions without it): no lock waits, no sessions idle in a
// transaction.
const myActivityQueryNoTrx = `SELECT COALESCE(INFO, ''), COALESCE(COMMAND, ''), COALESCE(STATE, ''), ''
FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND DB = DATABASE() AND COMMAND <> 'Sleep'`

// openActivity takes one connection per RM for the sampler; an RM whose
// sessions cannot be read is left out with a warning.
func openActivity(ctx context.Context, rms []*benchRM, every time.Duration) *activitySampler {
	a := &activitySampler{every: every, counts: map[activityKey]uint64{}, rounds: map[string]uint64{}}
	for _, r := range rms {
		conn, err := r.db.Conn(ctx)
		if err == nil {
			q := pgActivityQuery
			if r.Driver == rm.MySQL {
				q = myActivityQuery
			}
			src := &activitySource{rm: r.Name, drv: r.Driver, conn: conn, query: q}
			_, err = src.read(ctx)
			if err != nil && r.Driver == rm.MySQL && strings.Contains(err.Error(), "PROCESS privilege") {
				src.query = myActivityQueryNoTrx
				if _, err = src.read(ctx); err == nil {
					a.warn = append(a.warn, fmt.Sprintf("rm %q: session activity without InnoDB lock waits and without sessions idle in a transaction: "+
						"the account lacks the PROCESS privilege that INNODB_TRX needs (GRANT PROCESS ON *.* TO it; scripts/db grants it)", r.Name))
				}
			}
			if err == nil {
				a.sources = append(a.sources, src)
				continue
			}
			conn.Close()
		}
		a.warn = append(a.warn, fmt.Sprintf("rm %q: no session activity in this report: %v", r.Name, err))
	}
	return a
}

func (a *activitySampler) close() {
	for _, s := range a.sources {
		s.conn.Close()
	}
}

// start samples until stop.
func (a *activitySampler) start() {
	if a == nil || len(a.sources) == 0 {
		return
	}
	a.stopc, a.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(a.done)
		t := time.NewTicker(a.every)
		defer t.Stop()
		for {
			select {
			case <-a.stopc:
				return
			case <-t.C:
			}
			for _, s := range a.sources {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				keys, err := s.read(ctx)
				cancel()
				if err != nil {
					continue
				}
				a.mu.Lock()
				a.rounds[s.rm]++
				for _, k := range keys {
					a.counts[k]++
				}
				a.mu.Unlock()
			}
		}
	}()
}

// stop ends the sampling and returns what it counted since start.
func (a *activitySampler) stop() (map[activityKey]uint64, map[string]uint64) {
	if a == nil || a.stopc == nil {
		return nil, nil
	}
	close(a.stopc)
	<-a.done
	a.stopc = nil
	a.mu.Lock()
	defer a.mu.Unlock()
	counts, rounds := a.counts, a.rounds
	a.counts, a.rounds = map[activityKey]uint64{}, map[string]uint64{}
	return counts, rounds
}

func (s *activitySource) read(ctx context.Context) ([]activityKey, error) {
	rows, err := s.conn.QueryContext(ctx, s.query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []activityKey
	for rows.Next() {
		var q, a, b, c string
		if err := rows.Scan(&q, &a, &b, &c); err != nil {
			return nil, err
		}
		k := activityKey{rm: s.rm, stmt: statementClass(q)}
		if s.drv == rm.MySQL {
			k.wait = myWait(a, b, c)
		} else {
			k.wait = pgWait(a, b, c)
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// pgWait names a PostgreSQL session's state: its wait event, "CPU" when
// active without one, or idle in transaction (waiting for its client).
func pgWait(state, typ, event string) string {
	switch {
	case strings.HasPrefix(state, "idle in transaction"):
		return "idle in transaction (client)"
	case typ == "" && event == "":
		return "CPU"
	}
	return typ + ":" + event
}

// myWait names a MariaDB session's state: an InnoDB lock wait, its
// PROCESSLIST STATE while running a statement, or idle in transaction.
func myWait(command, state, trx string) string {
	switch {
	case trx == "LOCK WAIT":
		return "InnoDB lock wait"
	case command == "Sleep":
		return "idle in transaction (client)"
	case state == "":
		return "running (no state)"
	}
	return state
}

// statementClass names what a session runs, from its text: the
// statements Tandem sends by their role, the application's by verb.
func statementClass(q string) string {
	s := strings.ToLower(strings.TrimSpace(q))
	switch {
	case s == "":
		return "(between statements)"
	case strings.Contains(s, "tandem_decision") && strings.Contains(s, "insert into"):
		return "decision (INSERT 'C' + commit)"
	case strings.Contains(s, "tandem_decision") && strings.HasPrefix(s, "delete"):
		return "decision table DELETE"
	case strings.Contains(s, "tandem_decision"):
		return "decision table read"
	case strings.HasPrefix(s, "xa end") && strings.Contains(s, "xa prepare"), strings.HasPrefix(s, "xa prepare"):
		return "XA PREPARE"
	case strings.HasPrefix(s, "xa commit") && strings.Contains(s, "one phase"):
		return "XA COMMIT ONE PHASE"
	case strings.HasPrefix(s, "xa commit"):
		return "XA COMMIT"
	case strings.HasPrefix(s, "xa rollback"):
		return "XA ROLLBACK"
	case strings.HasPrefix(s, "xa end"):
		return "XA END"
	case strings.HasPrefix(s, "xa start"):
		return "XA START (+ statement)"
	case strings.HasPrefix(s, "xa recover"), strings.Contains(s, "pg_prepared_xacts"):
		return "recover scan"
	case strings.HasPrefix(s, "prepare transaction"):
		return "PREPARE TRANSACTION"
	case strings.HasPrefix(s, "commit prepared"):
		return "COMMIT PREPARED"
	case strings.HasPrefix(s, "rollback prepared"):
		return "ROLLBACK PREPARED"
	case strings.HasPrefix(s, "commit"), strings.HasPrefix(s, "end"):
		return "COMMIT"
	case strings.HasPrefix(s, "rollback"):
		return "ROLLBACK"
	}
	verb, _, _ := strings.Cut(s, " ")
	return strings.ToUpper(verb) + " (application)"
}

// activityResults turns one workload's counts into rows, largest first.
func activityResults(counts map[activityKey]uint64, every time.Duration, txns uint64) []DBActivity {
	perRM := map[string]uint64{}
	for k, n := range counts {
		perRM[k.rm] += n
	}
	var out []DBActivity
	for k, n := range counts {
		d := DBActivity{RM: k.rm, Statement: k.stmt, Wait: k.wait, Samples: n, Seconds: round(float64(n)*every.Seconds(), 4)}
		if perRM[k.rm] > 0 {
			d.Share = round(float64(n)/float64(perRM[k.rm]), 4)
		}
		if txns > 0 {
			d.PerTxnMs = round(d.Seconds*1000/float64(txns), 4)
		}
		out = append(out, d)
	}
	slices.SortFunc(out, func(x, y DBActivity) int {
		if x.RM != y.RM {
			return strings.Compare(x.RM, y.RM)
		}
		if x.Samples != y.Samples {
			if x.Samples > y.Samples {
				return -1
			}
			return 1
		}
		return strings.Compare(x.Statement+x.Wait, y.Statement+y.Wait)
	})
	return out
}

// maxActivityRows bounds the rows printed per workload and RM.
const maxActivityRows = 12

func writeDBActivity(w io.Writer, results []DBResult, every time.Duration) error {
	for _, x := range results {
		if len(x.DBActivity) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n== %s: database sessions, sampled every %s (session-seconds ≈ samples × interval)\n", x.Workload, every)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "rm\tstatement\twait\tsamples\tshare\tms/txn\t\n")
		shown := map[string]int{}
		for _, a := range x.DBActivity {
			if shown[a.RM]++; shown[a.RM] > maxActivityRows {
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%.1f%%\t%.3f\t\n", a.RM, a.Statement, a.Wait, a.Samples, 100*a.Share, a.PerTxnMs)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}
