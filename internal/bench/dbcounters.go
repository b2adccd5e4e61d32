package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/tandem-tx/tandem/internal/rm"
)

// The databases' own sync counters, read before and after every slice and
// summed per workload: how many WAL / redo-log / binlog syncs a committed
// transaction costs the databases (group commit shares one among several).
//
// The counters are server-wide: anything else the servers do during a
// slice (other clients, autovacuum, checkpoints, page flushing) counts too.
//
// PostgreSQL (pg_stat_wal, 14 or later): wal_sync counts the WAL
// fdatasync/fsync calls, wal_write the WAL writes. A session does not
// publish its counts at once: it flushes its statistics to shared memory when
// it goes idle, at most once a second (PGSTAT_MIN_INTERVAL); the counts it
// holds back are flushed at its first idle moment a second or more after its
// last flush, or once it has been idle for 10 s (PGSTAT_IDLE_INTERVAL).
// Measured here: a session that commits 3 times within a second of its last
// flush and then idles shows nothing in pg_stat_wal for 10 s. So:
//   - at the end of every slice (and of the warm-up), each of the bench's own
//     sessions runs SELECT pg_stat_force_next_flush() (PostgreSQL 15): the
//     session flushes everything as it goes idle after that statement, before
//     its reply, so the read that follows sees every sync the workload's own
//     sessions did;
//   - the coordinator's sessions (phase 2 of xa, oltp and xa-standby) cannot
//     be reached: with 1 s slices, each flushes at its first commit of a
//     slice what it held from the previous one, so their counts arrive a
//     slice late, in the same workload's next slice (those sessions work for
//     no other workload, unless two such workloads share one coordinator);
//     the warm-up's land in the first slice; the last slice's are flushed
//     after 10 s idle, so after the last slice the run waits coordIdleFlush
//     and adds what arrived to that workload (or, with two such workloads,
//     reports it apart, attributed to neither). Measured: a whole slice's
//     COMMIT PREPARED syncs arrive in that wait (784 in a 5 s xa run at 767
//     TPS), a tenth of the run's; without it xa would show 1.8 PostgreSQL
//     syncs per transaction instead of 2.0.
//
// A read is its own transaction, so stats_fetch_consistency (cache) never
// serves a stale snapshot.
//
// MariaDB / MySQL (SHOW GLOBAL STATUS): Binlog_group_commits (with
// sync_binlog=1, one binlog fsync each), Binlog_commits, Innodb_os_log_fsyncs
// (gone since MariaDB 10.8) and Innodb_data_fsyncs (since 10.8 it counts the
// redo log's fsyncs too, with the data files'): whichever the server has. They
// are global counters, current at every read.

// coordIdleFlush is how long after the last slice of a workload that commits
// through a coordinator the run waits for that coordinator's PostgreSQL
// sessions to publish their last counts: PostgreSQL's idle flush
// (PGSTAT_IDLE_INTERVAL, 10 s) plus a margin.
const coordIdleFlush = 11 * time.Second

// DBCounter is one database counter over a workload's slices.
type DBCounter struct {
	RM      string  `json:"rm"`
	Source  string  `json:"source"`  // pg_stat_wal, or SHOW GLOBAL STATUS
	Counter string  `json:"counter"` // as the database names it: wal_sync, Binlog_group_commits, …
	Total   uint64  `json:"total"`
	PerTxn  float64 `json:"per_txn"` // Total ÷ committed transactions
}

// counterSource reads one database's cumulative counters.
type counterSource interface {
	// source names where the counters come from (pg_stat_wal, SHOW GLOBAL STATUS).
	source() string
	// names are the counters read returns, in its order.
	names() []string
	// read returns their current values.
	read(ctx context.Context) ([]uint64, error)
	// flush makes session c's counts visible to read (a no-op where they
	// always are).
	flush(ctx context.Context, exec execFunc) error
	// lagging is true where a session the bench cannot flush (the
	// coordinator's) publishes its counts late.
	lagging() bool
}

// counterSample holds one reading of every source: [rm][counter]; a nil row
// is a source without a reading.
type counterSample [][]uint64

// dbCounters reads the sources of a run's RMs and sums the deltas.
type dbCounters struct {
	rms   []string        // the RM of each source
	srcs  []counterSource // one per RM, in the env's order; nil: none
	mu    sync.Mutex
	dead  []string // why a source's figures are void ("" while it is fine)
	warn  []string
	notes []string // what a reader of the figures should know (DBReport.DBCountersNote)
}

// openCounters finds what each RM can report. An RM whose counters cannot be
// read gets none, with a warning.
func openCounters(ctx context.Context, rms []*benchRM) *dbCounters {
	c := &dbCounters{}
	for _, r := range rms {
		var src counterSource
		var err error
		switch r.Driver {
		case rm.Postgres:
			src, err = openPGCounters(ctx, r.db, c.warnf(r.Name))
		case rm.MySQL:
			var m *mysqlCounters
			if m, err = openMySQLCounters(ctx, r.db); err == nil {
				src = m
				if m.note != "" {
					c.notes = append(c.notes, fmt.Sprintf("%s: %s", r.Name, m.note))
				}
			}
		}
		if err != nil {
			c.warn = append(c.warn, fmt.Sprintf("rm %q: no database counters in this report: %v", r.Name, err))
			src = nil
		}
		c.add(r.Name, src)
	}
	return c
}

func (c *dbCounters) warnf(rmName string) func(string) {
	return func(s string) { c.warn = append(c.warn, fmt.Sprintf("rm %q: %s", rmName, s)) }
}

// add appends rmName's source (nil for none).
func (c *dbCounters) add(rmName string, src counterSource) {
	c.rms = append(c.rms, rmName)
	c.srcs = append(c.srcs, src)
	c.dead = append(c.dead, "")
}

// any reports whether some RM has counters.
func (c *dbCounters) any() bool {
	return c != nil && slices.ContainsFunc(c.srcs, func(s counterSource) bool { return s != nil })
}

// lagging reports whether some source publishes late.
func (c *dbCounters) lagging() bool {
	return c != nil && slices.ContainsFunc(c.srcs, func(s counterSource) bool { return s != nil && s.lagging() })
}

// kill voids source i's figures for the whole run, saying why once.
func (c *dbCounters) kill(i int, why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead[i] == "" {
		c.dead[i] = why
		c.warn = append(c.warn, fmt.Sprintf("rm %q: no database counters in this report: %s", c.rms[i], why))
	}
}

func (c *dbCounters) alive(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.srcs[i] != nil && c.dead[i] == ""
}

// sample reads every live source. A failed read voids that source.
func (c *dbCounters) sample(ctx context.Context) counterSample {
	s := make(counterSample, len(c.srcs))
	for i, src := range c.srcs {
		if !c.alive(i) {
			continue
		}
		v, err := src.read(ctx)
		if err == nil && len(v) != len(src.names()) {
			err = fmt.Errorf("read %d counters, want %d", len(v), len(src.names()))
		}
		if err != nil {
			if ctx.Err() == nil {
				c.kill(i, fmt.Sprintf("reading %s: %v", src.source(), err))
			}
			continue
		}
		s[i] = v
	}
	return s
}

// delta is b − a. A counter that went backwards (pg_stat_reset_shared, FLUSH
// STATUS, a server restart) voids its source: the figures would be wrong.
func (c *dbCounters) delta(a, b counterSample) counterSample {
	d := make(counterSample, len(c.srcs))
	for i := range c.srcs {
		if i >= len(a) || i >= len(b) || a[i] == nil || b[i] == nil {
			continue
		}
		row := make([]uint64, len(a[i]))
		for j := range row {
			if b[i][j] < a[i][j] {
				c.kill(i, fmt.Sprintf("%s %s went from %d to %d during the run (reset, or the server restarted)", c.srcs[i].source(), c.srcs[i].names()[j], a[i][j], b[i][j]))
				row = nil
				break
			}
			row[j] = b[i][j] - a[i][j]
		}
		d[i] = row
	}
	return d
}

// plus is s + d, row by row (a nil row of s takes d's).
func (s counterSample) plus(d counterSample) counterSample {
	if len(s) < len(d) {
		s = append(s, make(counterSample, len(d)-len(s))...)
	}
	for i, row := range d {
		if row == nil {
			continue
		}
		if s[i] == nil {
			s[i] = make([]uint64, len(row))
		}
		for j, v := range row {
			s[i][j] += v
		}
	}
	return s
}

// onlyLagging keeps the rows of lagging sources: what arrives after the last
// slice from a current counter (MariaDB's) is not the run's.
func (c *dbCounters) onlyLagging(s counterSample) counterSample {
	out := make(counterSample, len(s))
	for i, row := range s {
		if c.srcs[i] != nil && c.srcs[i].lagging() {
			out[i] = row
		}
	}
	return out
}

// results turns a workload's totals into per-transaction figures, sources in
// RM order, counters in each source's order. Void sources are left out.
func (c *dbCounters) results(total counterSample, txns uint64) []DBCounter {
	var out []DBCounter
	for i, src := range c.srcs {
		if !c.alive(i) {
			continue
		}
		for j, name := range src.names() {
			var v uint64
			if i < len(total) && total[i] != nil {
				v = total[i][j]
			}
			x := DBCounter{RM: c.rms[i], Source: src.source(), Counter: name, Total: v}
			if txns > 0 {
				x.PerTxn = round(float64(v)/float64(txns), 3)
			}
			out = append(out, x)
		}
	}
	return out
}

// lateResults lists the counts of lagging sources that arrived after the
// last slice (Total only), or nil when none did.
func (c *dbCounters) lateResults(late counterSample) []DBCounter {
	var out []DBCounter
	some := false
	for _, x := range c.results(c.onlyLagging(late), 0) {
		if i := slices.Index(c.rms, x.RM); i >= 0 && c.srcs[i].lagging() {
			out = append(out, x)
			some = some || x.Total > 0
		}
	}
	if !some {
		return nil
	}
	return out
}

// flushSessions makes every worker's sessions publish their counts, in
// parallel; outside the measured time. A session that fails is left (a
// broken connection publishes its counts as its backend exits).
func (c *dbCounters) flushSessions(ctx context.Context, workers []*worker) {
	if !c.lagging() {
		return
	}
	var wg sync.WaitGroup
	for _, w := range workers {
		for i, src := range c.srcs {
			if src == nil || !src.lagging() {
				continue
			}
			// The session of each driver the workloads use (database/sql's; pgx's own).
			var sessions []execFunc
			if c := w.conns[i]; c != nil {
				sessions = append(sessions, func(ctx context.Context, q string) error { _, err := c.ExecContext(ctx, q); return err })
			}
			if c := w.pgc[i]; c != nil {
				sessions = append(sessions, func(ctx context.Context, q string) error { _, err := c.Exec(ctx, q); return err })
			}
			for _, exec := range sessions {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_ = src.flush(ctx, exec)
				}()
			}
		}
	}
	wg.Wait()
}

// dbCountersNote is the report's one-line account of the counters.
const dbCountersNote = "server-wide counters, read before and after each slice: other sessions' work during a slice counts too; " +
	"PostgreSQL pg_stat_wal: the bench's sessions publish theirs with pg_stat_force_next_flush() after each slice, " +
	"the coordinator's arrive a slice late, in the workload's next slice (the last slice's were waited for after the run); " +
	"MariaDB SHOW GLOBAL STATUS: current at every read"

// pgCounters reads pg_stat_wal.
type pgCounters struct {
	db       *sql.DB
	canFlush bool
}

func openPGCounters(ctx context.Context, db *sql.DB, warn func(string)) (*pgCounters, error) {
	p := &pgCounters{db: db}
	if _, err := p.read(ctx); err != nil {
		return nil, fmt.Errorf("pg_stat_wal.wal_sync needs PostgreSQL 14 or later: %w", err)
	}
	var method string
	if err := db.QueryRowContext(ctx, "SELECT current_setting('wal_sync_method')").Scan(&method); err == nil && strings.HasPrefix(method, "open_") {
		warn(fmt.Sprintf("wal_sync_method is %s: WAL writes sync themselves and wal_sync stays 0; read wal_write", method))
	}
	if _, err := db.ExecContext(ctx, "SELECT pg_stat_force_next_flush()"); err != nil {
		// PostgreSQL 14: the bench's own sessions publish late too.
		warn(fmt.Sprintf("pg_stat_force_next_flush() (PostgreSQL 15) failed, so the bench's own sessions' WAL counts arrive late, partly in the next slice or never: %v", err))
	} else {
		p.canFlush = true
	}
	return p, nil
}

func (p *pgCounters) source() string  { return "pg_stat_wal" }
func (p *pgCounters) names() []string { return []string{"wal_sync", "wal_write"} }
func (p *pgCounters) lagging() bool   { return true }

func (p *pgCounters) read(ctx context.Context) ([]uint64, error) {
	var s, w int64
	if err := p.db.QueryRowContext(ctx, "SELECT wal_sync, wal_write FROM pg_stat_wal").Scan(&s, &w); err != nil {
		return nil, err
	}
	return []uint64{uint64(s), uint64(w)}, nil
}

func (p *pgCounters) flush(ctx context.Context, exec execFunc) error {
	if !p.canFlush {
		return nil
	}
	return exec(ctx, "SELECT pg_stat_force_next_flush()")
}

// execFunc runs a statement on one of the bench's sessions.
type execFunc func(ctx context.Context, q string) error

// mysqlStatus are the MariaDB/MySQL counters reported, those the server has.
var mysqlStatus = []string{"Binlog_group_commits", "Binlog_commits", "Innodb_os_log_fsyncs", "Innodb_data_fsyncs"}

// mysqlCounters reads SHOW GLOBAL STATUS.
type mysqlCounters struct {
	db    *sql.DB
	which []string
	note  string // what one of them means on this server, if it needs saying
}

func openMySQLCounters(ctx context.Context, db *sql.DB) (*mysqlCounters, error) {
	m := &mysqlCounters{db: db}
	have, err := m.status(ctx)
	if err != nil {
		return nil, err
	}
	for _, n := range mysqlStatus {
		if _, ok := have[n]; ok {
			m.which = append(m.which, n)
		}
	}
	if len(m.which) == 0 {
		return nil, fmt.Errorf("the server has none of %s", strings.Join(mysqlStatus, ", "))
	}
	if _, ok := have["Innodb_os_log_fsyncs"]; !ok {
		if _, ok := have["Innodb_data_fsyncs"]; ok {
			m.note = "no Innodb_os_log_fsyncs (gone since MariaDB 10.8): Innodb_data_fsyncs counts the redo log's fsyncs together with the data files'"
		}
	}
	return m, nil
}

func (m *mysqlCounters) status(ctx context.Context) (map[string]uint64, error) {
	rows, err := m.db.QueryContext(ctx, "SHOW GLOBAL STATUS WHERE Variable_name IN ('"+strings.Join(mysqlStatus, "','")+"')")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	have := map[string]uint64{}
	for rows.Next() {
		var name, val string
		if err := rows.Scan(&name, &val); err != nil {
			return nil, err
		}
		v, err := strconv.ParseUint(val, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s = %q: %w", name, val, err)
		}
		have[name] = v
	}
	return have, rows.Err()
}

func (m *mysqlCounters) source() string                        { return "SHOW GLOBAL STATUS" }
func (m *mysqlCounters) names() []string                       { return m.which }
func (m *mysqlCounters) lagging() bool                         { return false }
func (m *mysqlCounters) flush(context.Context, execFunc) error { return nil }

func (m *mysqlCounters) read(ctx context.Context) ([]uint64, error) {
	have, err := m.status(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]uint64, len(m.which))
	for i, n := range m.which {
		v, ok := have[n]
		if !ok {
			return nil, errors.New(n + " is gone")
		}
		out[i] = v
	}
	return out, nil
}

// note is DBReport.DBCountersNote: how the counters were read, and the notes
// of this run's databases.
func (c *dbCounters) note() string {
	return strings.Join(append([]string{dbCountersNote}, c.notes...), "; ")
}

// writeDBCounters prints the per-transaction table: a row per workload, a
// column per counter; then the counts that arrived after the last slice and
// went to no workload, if any, and the note.
func writeDBCounters(w io.Writer, results []DBResult, late []DBCounter, note string) error {
	type col struct{ rm, counter string }
	var cols []col
	for _, r := range results {
		for _, x := range r.DBCounters {
			if c := (col{x.RM, x.Counter}); !slices.Contains(cols, c) {
				cols = append(cols, c)
			}
		}
	}
	if len(cols) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\ndatabase syncs per committed transaction (server-wide counters: other sessions' work during a slice counts too):")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "workload\t")
	for _, c := range cols {
		fmt.Fprintf(tw, "%s %s\t", c.rm, c.counter)
	}
	fmt.Fprintln(tw)
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t", r.Workload)
		for _, c := range cols {
			i := slices.IndexFunc(r.DBCounters, func(x DBCounter) bool { return x.RM == c.rm && x.Counter == c.counter })
			if i < 0 || r.Txns == 0 {
				fmt.Fprint(tw, "-\t")
				continue
			}
			fmt.Fprintf(tw, "%.3f\t", r.DBCounters[i].PerTxn)
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(late) > 0 {
		var parts []string
		for _, x := range late {
			parts = append(parts, fmt.Sprintf("%s %s %d", x.RM, x.Counter, x.Total))
		}
		fmt.Fprintf(w, "arrived after the last slice, in neither workload's figures (both commit through a coordinator): %s\n", strings.Join(parts, ", "))
	}
	if note != "" {
		fmt.Fprintf(w, "(%s)\n", note)
	}
	return nil
}
