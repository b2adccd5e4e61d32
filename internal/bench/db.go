package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/tandem-tx/tandem/client"
	"github.com/tandem-tx/tandem/internal/config"
	"github.com/tandem-tx/tandem/internal/decision"
	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/internal/server"
	"github.com/tandem-tx/tandem/waits"
)

// DBRM is one resource manager the database benchmark uses.
type DBRM struct {
	Name   string
	Driver rm.Driver
	DSN    string
}

// DBConfig configures DB, the workloads of `tandem bench` against real
// databases (docs/field-reports.md §1's unit of work: one insert on each of two RMs).
type DBConfig struct {
	// Workloads: one, or two to compare (run interleaved in slices; the
	// report's Ratio is TPS of the second ÷ TPS of the first).
	Workloads []string
	// RMs: exactly two. 1pc and plain use OneRM (default the first).
	RMs   []DBRM
	OneRM string
	// Threads is the number of concurrent clients, each with its own
	// connection to each RM.
	Threads int
	// Duration of measured time per workload, unless Txns > 0: then each
	// workload runs that many transactions.
	Duration time.Duration
	Txns     int
	// Slice is how long one interleaved slice runs (default: 1s, or a
	// quarter of Duration if shorter; with Txns, a tenth of them).
	Slice time.Duration
	// Warmup transactions per thread and workload before measuring.
	Warmup int
	// TxnTimeout bounds one transaction (default 30s): one that takes longer
	// (a coordinator or database gone) counts as an error, so that a run
	// always ends.
	TxnTimeout time.Duration
	// AuthToken is the external coordinator's shared token, if it requires one.
	AuthToken string
	// DecideAt: where the xa and oltp workloads decide (client.DecideAt;
	// default coordinator). With auto or rm the bench makes the decision
	// table on both databases, and a commit point decides where one
	// qualifies.
	DecideAt client.DecideAt
	// CommitPoint, when set, names the RM that may be the commit point (the
	// other is client.RM.NeverCommitPoint); "" lets auto choose.
	CommitPoint string
	// Visibility of the xa and oltp workloads' commits (client.Visibility;
	// zero: the coordinator's default, sync).
	Visibility client.Visibility
	// MayTakeOver: with Visibility async, the xa and oltp workloads let the
	// coordinator take their MariaDB branches over while its standby lags
	// (client.CommitOptions.MayTakeOver); a worker then reopens the
	// sessions its commits ended.
	MayTakeOver bool
	// Coordinator is an external coordinator's gRPC address; "" starts one
	// in this process (with its decision log in a temporary directory under
	// Dir) that the clients reach over gRPC on loopback.
	Coordinator string
	// Admin: with an external Coordinator, its admin address, to read its
	// wait events; for the in-process one, an address to serve /waits and
	// /metrics on during the run ("" for none).
	Admin string
	// Dir: where the in-process coordinator's log goes (default ".").
	Dir string
	// CoordConns is the in-process coordinator's pool size per RM (config
	// max_conns); 0 sizes it as an operator would for the load: 16 (the
	// coordinator's default), or Threads/4 if larger. Phase 2 of every
	// PostgreSQL branch goes through this pool.
	CoordConns int
	// CoordNoSync makes the in-process coordinator skip fdatasync of its
	// decision log: an experiment that shows what the fdatasync costs. Never
	// durable; the report says so.
	CoordNoSync bool
	// OLTPRows is the size of the oltp table on each RM.
	OLTPRows int
	// Standby configures the xa-standby workload's coordinator pair.
	Standby StandbyConfig
	// Trace: keep the full trace (client and coordinator waits) of this
	// many transactions per workload, in Report.Traces.
	Trace int
	// Slowest: keep the client trace of this many of each workload's
	// slowest measured transactions, in DBResult.Slowest (the tail, wait
	// by wait).
	Slowest int
	// NoDBCounters leaves out the databases' own sync counters (and the
	// wait after the run for the late ones; see dbcounters.go).
	NoDBCounters bool
	// ActivityEvery is how often the databases' sessions are sampled
	// during the measured slices (dbactivity.go); 0 or less: not at all.
	ActivityEvery time.Duration
	// PGDriver is how the workloads talk to PostgreSQL: PGDriverSQL
	// (database/sql over pgx's stdlib driver; the SDK's Tx.Branch),
	// PGDriverPgx (pgx natively; the SDK's Tx.BranchPgx), or PGDriverAuto
	// (the default: each workload the one measured faster for it,
	// AutoPGDriver). A workload named with a suffix, "xa@pgx" or "xa@sql",
	// uses that one instead, so that --compare xa@sql,xa@pgx measures the
	// two against each other.
	PGDriver string
	// Progress, if not nil, gets a line every few seconds.
	Progress io.Writer
	// Logger receives the in-process coordinator's log (default: errors to stderr).
	Logger *slog.Logger
}

// The workloads.
const (
	WorkloadSQL     = "sql"      // one insert on each RM, two independent local commits (not atomic)
	WorkloadRaw2PC  = "raw2pc"   // the same, with the databases' own 2PC driven by the benchmark: no coordinator, no log
	WorkloadXA      = "xa"       // the same as one global transaction through the SDK and the coordinator
	WorkloadOnePC   = "1pc"      // one insert on one RM through the SDK (one-phase commit)
	WorkloadPlain   = "plain"    // the same insert as a plain local commit, without the SDK
	WorkloadOLTP    = "oltp"     // sysbench-like: 4 point reads, an update, a delete and an insert on each RM, as a global transaction
	WorkloadOLTPSQL = "oltp-sql" // the same statements with two independent local commits: the baseline of oltp
	// WorkloadXAStandby is xa against a second in-process coordinator that
	// ships its decision log to a standby (DBConfig.Standby).
	WorkloadXAStandby = "xa-standby"
)

// PostgreSQL drivers (DBConfig.PGDriver).
const (
	PGDriverSQL  = "sql"
	PGDriverPgx  = "pgx"
	PGDriverAuto = "auto"
)

// DefaultPGDriver is DBConfig.PGDriver's default.
const DefaultPGDriver = PGDriverAuto

// AutoPGDriver is the driver PGDriverAuto gives a workload: pgx natively
// where it measured faster than database/sql in interleaved runs on the
// development machine — 1pc (pgx ÷ sql 1.00–1.02 in the quiet 30 s runs,
// above 1 in 6 runs of 7) and oltp (1.02 and 1.05 at 2 threads, 1.00 at
// 16) — and database/sql where it did not: xa (0.95–1.05, median 0.99 at 2
// threads). Each baseline takes the driver of the SDK workload it is the
// baseline of (plain of 1pc, oltp-sql of oltp; sql and raw2pc of xa), so
// that --compare of the two never measures a driver along with Tandem.
// README, "pgx natively against database/sql", has the runs.
func AutoPGDriver(workload string) string {
	switch workload {
	case WorkloadOnePC, WorkloadPlain, WorkloadOLTP, WorkloadOLTPSQL:
		return PGDriverPgx
	}
	return PGDriverSQL
}

// splitWorkload splits "xa@pgx" into its workload and PostgreSQL driver
// (def when there is no suffix; AutoPGDriver's choice when def is auto).
func splitWorkload(spec, def string) (name, driver string) {
	if name, driver, ok := strings.Cut(spec, "@"); ok {
		return name, driver
	}
	if def == PGDriverAuto {
		return spec, AutoPGDriver(spec)
	}
	return spec, def
}

// Workloads lists them with a line each, for --help.
var Workloads = []struct{ Name, Summary string }{
	{WorkloadSQL, "one insert on each of two RMs, two independent local commits in parallel (not atomic): the Oracle report's baseline"},
	{WorkloadRaw2PC, "the same inserts with the databases' own 2PC driven directly (prepare both, commit both; MariaDB's on its own session): no coordinator, no log — the floor of any XA transaction manager"},
	{WorkloadXA, "the same inserts as one global transaction through the SDK and the coordinator"},
	{WorkloadOnePC, "one insert on one RM through the SDK (one-phase commit, no coordinator)"},
	{WorkloadPlain, "the same single insert as a plain local commit without the SDK: the baseline of 1pc"},
	{WorkloadOLTP, "sysbench-like: an update, 4 point reads, a delete and an insert on each RM, as one global transaction"},
	{WorkloadOLTPSQL, "the same statements with two independent local commits (not atomic): the baseline of oltp"},
	{WorkloadXAObserved, "xa with every transaction traced (OpenTelemetry SDK, always sampled, spans batched and dropped) and the client's metrics scraped every second: compare with xa for the overhead of observing"},
	{WorkloadXAStandby, "xa against a second in-process coordinator that ships its decision log to a standby in this process (--standby sync|async, through a proxy adding --standby-rtt): compare with xa"},
}

// DefaultDBConfig returns the defaults of `tandem bench`.
func DefaultDBConfig() DBConfig {
	return DBConfig{Threads: 2, Duration: 10 * time.Second, Warmup: 5, OLTPRows: 10000, TxnTimeout: 30 * time.Second, PGDriver: DefaultPGDriver}
}

func (c *DBConfig) validate() error {
	if c.DecideAt == "" {
		c.DecideAt = client.DecideAtCoordinator
	}
	if c.CommitPoint != "" && (len(c.RMs) != 2 || (c.CommitPoint != c.RMs[0].Name && c.CommitPoint != c.RMs[1].Name)) {
		return fmt.Errorf("--commit-point %q names no resource manager of the run", c.CommitPoint)
	}
	if _, err := client.ParseDecideAt(string(c.DecideAt)); err != nil {
		return err
	}
	switch {
	case len(c.Workloads) == 0 || len(c.Workloads) > 2:
		return errors.New("give one workload, or two to compare")
	case len(c.Workloads) == 2 && c.Workloads[0] == c.Workloads[1]:
		return fmt.Errorf("--compare %s,%s compares a workload with itself", c.Workloads[0], c.Workloads[1])
	case len(c.RMs) != 2:
		return fmt.Errorf("need exactly two resource managers, got %d", len(c.RMs))
	case c.RMs[0].Name == c.RMs[1].Name:
		return fmt.Errorf("the two resource managers are both named %q", c.RMs[0].Name)
	case c.Threads < 1 || c.Threads > 4096:
		return fmt.Errorf("threads %d must be between 1 and 4096", c.Threads)
	case c.Txns < 0:
		return fmt.Errorf("txns %d is negative", c.Txns)
	case c.Slowest < 0 || c.Slowest > 1000:
		return fmt.Errorf("--slowest %d: keep between 0 and 1000 transactions", c.Slowest)
	case c.Txns == 0 && c.Duration <= 0:
		return errors.New("give a positive duration or a number of transactions")
	case c.OLTPRows < 100:
		return fmt.Errorf("oltp rows %d: need at least 100", c.OLTPRows)
	}
	if c.PGDriver == "" {
		c.PGDriver = DefaultPGDriver
	}
	if c.PGDriver != PGDriverSQL && c.PGDriver != PGDriverPgx && c.PGDriver != PGDriverAuto {
		return fmt.Errorf("--pg-driver %q: use auto, sql or pgx", c.PGDriver)
	}
	for _, spec := range c.Workloads {
		w, driver := splitWorkload(spec, c.PGDriver)
		if !slices.ContainsFunc(Workloads, func(x struct{ Name, Summary string }) bool { return x.Name == w }) {
			return fmt.Errorf("unknown workload %q: use sql, raw2pc, xa, 1pc, plain, oltp, oltp-sql or xa-standby, optionally with @sql or @pgx", spec)
		}
		if driver != PGDriverSQL && driver != PGDriverPgx {
			return fmt.Errorf("workload %q: PostgreSQL driver %q: use @sql or @pgx", spec, driver)
		}
	}
	if len(c.Workloads) == 2 {
		a, da := splitWorkload(c.Workloads[0], c.PGDriver)
		b, db := splitWorkload(c.Workloads[1], c.PGDriver)
		if a == b && da == db {
			return fmt.Errorf("--compare %s,%s compares a workload with itself", c.Workloads[0], c.Workloads[1])
		}
	}
	if err := c.validateStandby(); err != nil {
		return err
	}
	for _, r := range c.RMs {
		if r.DSN == "" {
			return fmt.Errorf("rm %q has no DSN (set TANDEM_PG_DSN and TANDEM_MYSQL_DSN: eval \"$(scripts/db env)\", or pass --rm)", r.Name)
		}
	}
	if c.OneRM == "" {
		c.OneRM = c.RMs[0].Name
	}
	if c.TxnTimeout <= 0 {
		c.TxnTimeout = 30 * time.Second
	}
	if c.OneRM != c.RMs[0].Name && c.OneRM != c.RMs[1].Name {
		return fmt.Errorf("--one %q is not one of the two resource managers", c.OneRM)
	}
	return nil
}

// DB runs the workloads and reports. It creates its tables (tandem_bench,
// tandem_bench_oltp) on both RMs if needed and empties tandem_bench.
func DB(ctx context.Context, cfg DBConfig) (*DBReport, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	env, err := openEnv(ctx, &cfg)
	if err != nil {
		return nil, err
	}
	defer env.close()
	return env.run(ctx)
}

// env is one run's shared state.
type env struct {
	cfg     *DBConfig
	rms     [2]*benchRM
	one     int // index of the RM of 1pc and plain
	srv     *server.Server
	coordAt string
	logDir  string
	sb      *standbyPair // xa-standby's coordinator pair
	sbDir   string
	sbAt    string // its primary's gRPC address
	fs      FSInfo
	// nextID: the last tandem_bench id used. It starts at the run's start
	// in nanoseconds, above every id an earlier run used (fewer than one a
	// nanosecond): an earlier run's rows may appear after setup emptied the
	// table, when whoever resolves the branches it left prepared commits
	// them, and ids counted from 1 met them (lock waits, duplicate keys).
	nextID   atomic.Int64
	workers  []*worker
	inProc   bool
	warnings []string
	counters *dbCounters      // nil with NoDBCounters
	activity *activitySampler // nil without ActivityEvery
}

// benchRM is one RM: its pool and its SQL.
type benchRM struct {
	DBRM
	db      *sql.DB
	dialect rm.Dialect
	pgxCfg  *pgx.ConnConfig // PostgreSQL when a workload runs over pgx natively
}

func (r *benchRM) ph(i int) string { // placeholder of the i-th argument
	if r.Driver == rm.Postgres {
		return fmt.Sprintf("$%d", i)
	}
	return "?"
}

func openEnv(ctx context.Context, cfg *DBConfig) (_ *env, err error) {
	e := &env{cfg: cfg}
	e.nextID.Store(time.Now().UnixNano())
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	for i, r := range cfg.RMs {
		d, derr := rm.DialectFor(r.Driver)
		if derr != nil {
			return nil, fmt.Errorf("bench: rm %q: %w", r.Name, derr)
		}
		dsn := r.DSN
		if r.Driver == rm.MySQL {
			// One round trip for XA START + statement and XA END + XA PREPARE.
			mc, perr := mysql.ParseDSN(dsn)
			if perr != nil {
				return nil, fmt.Errorf("bench: rm %q: bad DSN: %s", r.Name, rm.Redact(perr.Error(), ""))
			}
			mc.MultiStatements, mc.InterpolateParams = true, true
			dsn = mc.FormatDSN()
		}
		db, oerr := sql.Open(d.SQLDriverName(), dsn)
		if oerr != nil {
			return nil, fmt.Errorf("bench: rm %q: %w", r.Name, oerr)
		}
		db.SetMaxOpenConns(cfg.Threads + 8)
		db.SetMaxIdleConns(cfg.Threads + 8)
		e.rms[i] = &benchRM{DBRM: r, db: db, dialect: d}
		e.rms[i].DSN = dsn
		if r.Driver == rm.Postgres && e.usesPgx() {
			pc, perr := pgx.ParseConfig(dsn)
			if perr != nil {
				return nil, fmt.Errorf("bench: rm %q: bad DSN for pgx: %s", r.Name, rm.Redact(perr.Error(), ""))
			}
			pc.RuntimeParams["lock_timeout"] = "10s" // as reconnect sets on the database/sql connections
			e.rms[i].pgxCfg = pc
		}
		if r.Name == cfg.OneRM {
			e.one = i
		}
	}
	if err := e.setup(ctx); err != nil {
		return nil, err
	}
	if !cfg.NoDBCounters {
		e.counters = openCounters(ctx, e.rms[:])
	}
	if cfg.ActivityEvery > 0 {
		e.activity = openActivity(ctx, e.rms[:], cfg.ActivityEvery)
		e.warnings = append(e.warnings, e.activity.warn...)
	}
	if err := e.startCoordinator(); err != nil {
		return nil, err
	}
	for i := range cfg.Threads {
		w, werr := e.newWorker(ctx, i)
		if werr != nil {
			return nil, werr
		}
		e.workers = append(e.workers, w)
	}
	return e, nil
}

func (e *env) close() {
	for _, w := range e.workers {
		w.close() // also lets go of any MariaDB branch a failed transaction left prepared
	}
	if e.activity != nil {
		e.activity.close()
	}
	keepLog := false
	if e.srv != nil {
		keepLog = drainAndStop(e.srv)
	}
	if e.logDir != "" {
		removeOrKeep(e.logDir, filepath.Join(e.logDir, "data"), keepLog)
	}
	if e.sb != nil {
		keepLog = e.sb.close()
	}
	if e.sbDir != "" {
		removeOrKeep(e.sbDir, filepath.Join(e.sbDir, "primary"), keepLog)
	}
	for _, r := range e.rms {
		if r != nil {
			_ = r.db.Close()
		}
	}
}

func (e *env) needs(ws ...string) bool {
	return slices.ContainsFunc(e.cfg.Workloads, func(spec string) bool {
		w, _ := splitWorkload(spec, e.cfg.PGDriver)
		return slices.Contains(ws, w)
	})
}

// usesPgx reports whether a workload of the run talks to PostgreSQL over pgx natively.
func (e *env) usesPgx() bool {
	return slices.ContainsFunc(e.cfg.Workloads, func(spec string) bool {
		_, d := splitWorkload(spec, e.cfg.PGDriver)
		return d == PGDriverPgx
	})
}

// startCoordinator starts the in-process coordinator when the run needs
// one and no external one is given, and xa-standby's coordinator pair.
func (e *env) startCoordinator() error {
	needXA, needPair := e.needs(WorkloadXA, WorkloadOLTP, WorkloadXAObserved), e.needs(WorkloadXAStandby)
	if !needXA && !needPair {
		return nil
	}
	if e.cfg.Coordinator != "" {
		e.coordAt = e.cfg.Coordinator
		return nil // validate refused xa-standby with --coordinator
	}
	parent := e.cfg.Dir
	if parent == "" {
		parent = "."
	}
	logger := e.cfg.Logger
	if logger == nil {
		// Errors only: phase-2 retries cut short when the run stops are expected.
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	}
	if e.cfg.CoordConns <= 0 {
		e.cfg.CoordConns = max(16, e.cfg.Threads/4)
	}
	rms := map[string]config.RM{}
	for _, r := range e.rms {
		rms[r.Name] = config.RM{Driver: string(r.Driver), DSN: r.DSN, MaxConns: e.cfg.CoordConns}
	}
	cfg := config.Config{Listen: "127.0.0.1:0", RMs: rms}
	if needXA && needPair {
		// Two coordinators on the same RMs each see the other's prepared
		// branches in their in-doubt scans: neither may take one for an
		// orphan during the run.
		cfg.OrphanTimeout = time.Hour
	}
	mkdir := func(prefix string) (string, error) {
		dir, err := os.MkdirTemp(parent, prefix)
		if err != nil {
			return "", fmt.Errorf("bench: a directory for the in-process coordinator's log under %s: %w", parent, err)
		}
		if abs, aerr := filepath.Abs(dir); aerr == nil {
			dir = abs
		}
		if e.fs.Type == "" {
			if fs, err := fsInfo(dir); err == nil {
				e.fs = fs
				if noDurableSync(fs.Type) {
					e.warnings = append(e.warnings, fmt.Sprintf("the in-process coordinator's log is on %s, where fdatasync makes nothing durable: use --dir on a real disk", fs.Type))
				}
			}
		}
		return dir, nil
	}
	e.inProc = true
	if e.cfg.CoordNoSync {
		e.warnings = append(e.warnings, "EXPERIMENT: the in-process coordinator does not fdatasync its decision log (--unsafe-coordinator-nosync): decisions are not durable")
	}
	if needXA {
		dir, err := mkdir(".tandem-bench-coordinator-")
		if err != nil {
			return err
		}
		e.logDir = dir
		c := cfg
		c.DataDir = filepath.Join(dir, "data")
		srv, err := server.Start(c, server.Options{Logger: logger, Admin: e.cfg.Admin, NoSync: e.cfg.CoordNoSync})
		if err != nil {
			return fmt.Errorf("bench: start the in-process coordinator: %w", err)
		}
		e.srv, e.coordAt = srv, srv.Addr()
	}
	if needPair {
		dir, err := mkdir(".tandem-bench-standby-")
		if err != nil {
			return err
		}
		e.sbDir = dir
		sb, err := startStandbyPair(dir, cfg, e.cfg.Standby, e.cfg.CoordNoSync, logger)
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		e.sb, e.sbAt = sb, sb.primary.Addr()
		if e.coordAt == "" {
			e.coordAt = e.sbAt
		}
	}
	return nil
}

// setup creates the tables, empties tandem_bench, fills tandem_bench_oltp,
// and rolls back prepared branches a crashed earlier run left behind.
func (e *env) setup(ctx context.Context) error {
	for _, r := range e.rms {
		stmts := []string{
			"CREATE TABLE IF NOT EXISTS tandem_bench (id bigint PRIMARY KEY, v varchar(64) NOT NULL)",
			"CREATE TABLE IF NOT EXISTS tandem_bench_oltp (id int PRIMARY KEY, k int NOT NULL, c varchar(120) NOT NULL, pad varchar(60) NOT NULL)",
		}
		if err := e.cleanupPrepared(ctx, r); err != nil {
			return err
		}
		if e.cfg.DecideAt != client.DecideAtCoordinator {
			if err := decision.Ensure(ctx, r.db, r.Driver); err != nil {
				return fmt.Errorf("bench: rm %q: %w", r.Name, err)
			}
			if err := decision.AddIDCheck(ctx, r.db, r.Driver); err != nil {
				return fmt.Errorf("bench: rm %q: %w", r.Name, err)
			}
		}
		stmts = append(stmts, "DELETE FROM tandem_bench")
		for _, s := range stmts {
			if _, err := r.db.ExecContext(ctx, s); err != nil {
				return fmt.Errorf("bench: rm %q: %s: %w", r.Name, s, err)
			}
		}
		if !e.needs(WorkloadOLTP, WorkloadOLTPSQL) {
			continue
		}
		var n, maxID int
		if err := r.db.QueryRowContext(ctx, "SELECT count(*), coalesce(max(id), 0) FROM tandem_bench_oltp").Scan(&n, &maxID); err != nil {
			return fmt.Errorf("bench: rm %q: count tandem_bench_oltp: %w", r.Name, err)
		}
		if n == e.cfg.OLTPRows && maxID == e.cfg.OLTPRows {
			continue
		}
		if _, err := r.db.ExecContext(ctx, "DELETE FROM tandem_bench_oltp"); err != nil {
			return fmt.Errorf("bench: rm %q: %w", r.Name, err)
		}
		for lo := 1; lo <= e.cfg.OLTPRows; lo += 1000 {
			var b strings.Builder
			b.WriteString("INSERT INTO tandem_bench_oltp (id, k, c, pad) VALUES ")
			for id := lo; id < lo+1000 && id <= e.cfg.OLTPRows; id++ {
				if id > lo {
					b.WriteByte(',')
				}
				fmt.Fprintf(&b, "(%d, %d, '%s', '%s')", id, rand.IntN(e.cfg.OLTPRows)+1, filler(id, 119), filler(id*7, 59))
			}
			if _, err := r.db.ExecContext(ctx, b.String()); err != nil {
				return fmt.Errorf("bench: rm %q: fill tandem_bench_oltp: %w", r.Name, err)
			}
		}
	}
	return nil
}

// cleanupPrepared rolls back the benchmark's own raw2pc branches (format
// rawFormatID / prefix "bench:") left prepared by a run that died.
func (e *env) cleanupPrepared(ctx context.Context, r *benchRM) error {
	var ids []string
	if r.Driver == rm.Postgres {
		rows, err := r.db.QueryContext(ctx, "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE 'bench:%'")
		if err != nil {
			return fmt.Errorf("bench: rm %q: %w", r.Name, err)
		}
		for rows.Next() {
			var g string
			if rows.Scan(&g) == nil {
				ids = append(ids, "ROLLBACK PREPARED '"+g+"'")
			}
		}
		rows.Close()
	} else {
		rows, err := r.db.QueryContext(ctx, "XA RECOVER")
		if err != nil {
			return fmt.Errorf("bench: rm %q: XA RECOVER: %w", r.Name, err)
		}
		for rows.Next() {
			var f int64
			var gl, bl int
			var data []byte
			if rows.Scan(&f, &gl, &bl, &data) == nil && f == rawFormatID && gl+bl <= len(data) {
				ids = append(ids, fmt.Sprintf("XA ROLLBACK '%s','%s',%d", data[:gl], data[gl:gl+bl], rawFormatID))
			}
		}
		rows.Close()
	}
	for _, s := range ids {
		_, _ = r.db.ExecContext(ctx, s) // a branch still bound to a live session refuses: leave it
	}
	return nil
}

func filler(seed, n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	x := uint32(seed)*2654435761 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = alphabet[x%uint32(len(alphabet))]
	}
	return string(b)
}

// worker is one client thread: its own connection to each RM, kept for the
// whole run and used by every workload in turn.
type worker struct {
	e     *env
	id    int
	conns [2]*sql.Conn
	// pgc: a pgx connection of its own to each PostgreSQL RM, when a
	// workload runs over pgx natively; native: the running one does.
	pgc    [2]*pgx.Conn
	native bool
	rng    *rand.Rand
	acct   *waits.Trace // reused for every transaction: the unaccounted share
	// per-transaction counters, set by the workload
	trips [2]int
	calls int
	reg   *waits.Registry // the running workload's client registry
}

func (e *env) newWorker(ctx context.Context, id int) (*worker, error) {
	w := &worker{e: e, id: id, rng: rand.New(rand.NewPCG(uint64(id)+1, uint64(time.Now().UnixNano()))), acct: waits.NewTrace("")}
	if err := w.reconnect(ctx); err != nil {
		return nil, err
	}
	return w, nil
}

// reconnect (re)opens the worker's connections, with lock timeouts so that a
// lock wait can never hang the run.
func (w *worker) reconnect(ctx context.Context) error {
	w.close()
	for i, r := range w.e.rms {
		if err := w.openConn(ctx, i); err != nil {
			return err
		}
		if r.pgxCfg != nil {
			pc, err := pgx.ConnectConfig(ctx, r.pgxCfg)
			if err != nil {
				return fmt.Errorf("bench: rm %q: connect with pgx: %w", r.Name, err)
			}
			w.pgc[i] = pc
		}
	}
	return nil
}

// openConn opens the worker's database/sql connection to RM i.
func (w *worker) openConn(ctx context.Context, i int) error {
	r := w.e.rms[i]
	c, err := r.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("bench: rm %q: connect: %w", r.Name, err)
	}
	set := "SET lock_timeout = '10s'"
	if r.Driver == rm.MySQL {
		set = "SET SESSION innodb_lock_wait_timeout = 10"
	}
	if _, err := c.ExecContext(ctx, set); err != nil {
		c.Close()
		return fmt.Errorf("bench: rm %q: %s: %w", r.Name, set, err)
	}
	w.conns[i] = c
	return nil
}

// reopenEnded replaces the connections whose sessions a Commit ended
// (client.Result.EndedSessions): the coordinator took their branches over.
func (w *worker) reopenEnded(ctx context.Context, names []string) error {
	for _, name := range names {
		for i, r := range w.e.rms {
			if r.Name == name && w.conns[i] != nil {
				_ = w.conns[i].Close()
				w.conns[i] = nil
				if err := w.openConn(ctx, i); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func (w *worker) close() {
	for i, c := range w.conns {
		if c != nil {
			_ = c.Close()
			w.conns[i] = nil
		}
	}
	for i, c := range w.pgc {
		if c != nil {
			closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = c.Close(closeCtx)
			cancel()
			w.pgc[i] = nil
		}
	}
}

// wlState is one workload's accumulated results over its slices.
type wlState struct {
	name    string // the workload
	label   string // as given: the workload, maybe with "@pgx" or "@sql"
	driver  string // PostgreSQL's: PGDriverSQL or PGDriverPgx
	native  bool   // PostgreSQL over pgx natively
	run     txnFunc
	cli     *client.Client // SDK workloads
	reg     *waits.Registry
	coord   waits.Snapshot // coordinator waits during this workload's slices
	hist    Histogram
	txns    uint64
	errs    uint64
	lastErr error
	elapsed time.Duration
	trips   [2]uint64
	calls   uint64
	latency time.Duration // sum over committed transactions
	uncov   time.Duration // sum of latency not covered by a named client wait
	traced  atomic.Int64
	mu      sync.Mutex
	traces  []waits.JSONTrace
	slow    slowest       // under mu
	dbc     counterSample // the databases' counters over this workload's slices
	slices  []SliceResult
	act     map[activityKey]uint64 // the databases' sessions sampled during its slices
	obs     *observer              // xa-observed's tracing and scraping
	// sliceHist: the latencies of the slice running now (SliceResult.P99ms).
	sliceHist Histogram
}

// txnFunc runs one transaction on w; tr gets its waits.
type txnFunc func(ctx context.Context, w *worker, st *wlState, tr *waits.Trace, traceCoord bool) error

func (e *env) newState(ctx context.Context, spec string) (*wlState, error) {
	name, driver := splitWorkload(spec, e.cfg.PGDriver)
	st := &wlState{name: name, label: spec, driver: driver, native: driver == PGDriverPgx, reg: waits.NewRegistry(waits.SideClient), slow: slowest{n: e.cfg.Slowest}}
	switch name {
	case WorkloadSQL:
		st.run = txnSQL
	case WorkloadRaw2PC:
		st.run = txnRaw2PC
	case WorkloadPlain:
		st.run = txnPlain
	case WorkloadXA, WorkloadXAStandby, WorkloadXAObserved:
		st.run = txnXA
	case WorkloadOnePC:
		st.run = txnOnePC
	case WorkloadOLTP:
		st.run = txnOLTP
	case WorkloadOLTPSQL:
		st.run = txnOLTPSQL
	}
	if name == WorkloadXA || name == WorkloadOnePC || name == WorkloadOLTP || name == WorkloadXAStandby || name == WorkloadXAObserved {
		cfg := client.Config{Coordinator: e.coordAt, Waits: st.reg, Defaults: client.CommitOptions{DecideAt: e.cfg.DecideAt, Visibility: e.cfg.Visibility, MayTakeOver: e.cfg.MayTakeOver}}
		if name == WorkloadXAObserved {
			st.obs = observe(&cfg)
		}
		if name == WorkloadXAStandby {
			cfg.Coordinator = e.sbAt
		}
		if !e.inProc {
			cfg.AuthToken = e.cfg.AuthToken
		}
		for _, r := range e.rms {
			cfg.RMs = append(cfg.RMs, client.RM{Name: r.Name, Driver: string(r.Driver), MultiStatements: r.Driver == rm.MySQL, DB: r.db,
				NeverCommitPoint: e.cfg.CommitPoint != "" && e.cfg.CommitPoint != r.Name})
		}
		cli, err := client.New(cfg)
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		st.cli = cli
		if st.obs != nil {
			if err := st.obs.start(cli); err != nil {
				return nil, fmt.Errorf("bench: %w", err)
			}
		}
	}
	return st, nil
}

// coordWaits reads the wait totals of workload's coordinator: in-process,
// the registry of the coordinator its client commits through (for
// xa-standby, the standby pair's primary and standby together); otherwise
// from the external coordinator's admin listener (ok false without one).
func (e *env) coordWaits(ctx context.Context, workload string) (waits.Snapshot, bool) {
	if e.inProc {
		if e.sb != nil && (workload == WorkloadXAStandby || e.srv == nil) {
			return e.sb.primary.Waits().Snapshot().Add(e.sb.standby.Waits().Snapshot()), true
		}
		if e.srv != nil {
			return e.srv.Waits().Snapshot(), true
		}
		return waits.Snapshot{}, false
	}
	if e.cfg.Admin == "" || e.coordAt == "" {
		return waits.Snapshot{}, false
	}
	s, err := fetchAdminWaits(ctx, e.cfg.Admin, e.cfg.AuthToken)
	if err != nil {
		e.warnings = append(e.warnings, err.Error())
		e.cfg.Admin = "" // do not try again
		return waits.Snapshot{}, false
	}
	return s, true
}

// run warms up, then runs the workloads in interleaved slices.
func (e *env) run(ctx context.Context) (*DBReport, error) {
	cfg := e.cfg
	var states []*wlState
	for _, name := range cfg.Workloads {
		st, err := e.newState(ctx, name)
		if err != nil {
			return nil, err
		}
		if st.cli != nil {
			defer st.cli.Close()
		}
		if st.obs != nil {
			defer st.obs.close()
		}
		states = append(states, st)
	}
	// Warm-up: connections, plans, the coordinator's pools; then forget it.
	for _, st := range states {
		if cfg.Warmup > 0 {
			var budget atomic.Int64
			budget.Store(int64(cfg.Warmup * cfg.Threads))
			if err := e.slice(ctx, st, time.Time{}, &budget, false); err != nil {
				return nil, err
			}
		}
		*st = wlState{name: st.name, label: st.label, driver: st.driver, native: st.native, run: st.run, cli: st.cli, reg: st.reg, slow: slowest{n: e.cfg.Slowest}}
		st.reg.Reset()
	}
	if e.counters != nil {
		// The warm-up's syncs on the bench's own sessions stay out of the first slice.
		e.counters.flushSessions(ctx, e.workers)
	}
	if e.sb != nil {
		// Measure from a standby that has everything the warm-up wrote.
		if err := e.sb.waitCaughtUp(30 * time.Second); err != nil {
			return nil, err
		}
	}

	slice := cfg.Slice
	if slice <= 0 {
		slice = min(time.Second, cfg.Duration/4)
	}
	perSliceTxns := int64(0)
	if cfg.Txns > 0 {
		perSliceTxns = int64(max(cfg.Txns/10, cfg.Threads, 1))
		if len(states) == 1 {
			perSliceTxns = int64(cfg.Txns)
		}
	}
	before := sampleMachine()
	start := time.Now()
	lastProgress := start
	if e.counters.lagging() {
		e.warnCounterAttribution(states, slice)
	}
	var lastCounts counterSample // the reading after the last slice
	var lastCoordEnd time.Time   // the end of the last slice of a workload committing through a coordinator
	for {
		active := 0
		for _, st := range states {
			var budget *atomic.Int64
			var stopAt time.Time
			if cfg.Txns > 0 {
				left := int64(cfg.Txns) - int64(st.txns+st.errs)
				if left <= 0 {
					continue
				}
				budget = new(atomic.Int64)
				budget.Store(min(left, perSliceTxns))
			} else {
				left := cfg.Duration - st.elapsed
				if left <= slice/10 {
					continue
				}
				stopAt = time.Now().Add(min(left, slice))
			}
			active++
			c0, haveCoord := e.coordWaits(ctx, st.name)
			sampling := e.sb != nil && st.name == WorkloadXAStandby
			if sampling {
				e.sb.startSampling(lagSampleInterval)
			}
			var counts0 counterSample
			if e.counters != nil {
				counts0 = e.counters.sample(ctx)
			}
			t0, txns0, errs0 := time.Now(), st.txns, st.errs
			st.sliceHist = Histogram{}
			e.activity.start()
			if err := e.slice(ctx, st, stopAt, budget, true); err != nil {
				e.activity.stop()
				return nil, err
			}
			took := time.Since(t0)
			if counts, _ := e.activity.stop(); counts != nil {
				if st.act == nil {
					st.act = map[activityKey]uint64{}
				}
				for k, n := range counts {
					st.act[k] += n
				}
			}
			st.elapsed += took
			st.slices = append(st.slices, SliceResult{StartS: round(t0.Sub(start).Seconds(), 3), Seconds: round(took.Seconds(), 4),
				Txns: st.txns - txns0, Errors: st.errs - errs0, P99ms: ms(st.sliceHist.Quantile(0.99))})
			if sampling {
				e.sb.stopSampling()
			}
			e.settle(st.name)
			if e.counters != nil {
				e.counters.flushSessions(ctx, e.workers)
				lastCounts = e.counters.sample(ctx)
				st.dbc = st.dbc.plus(e.counters.delta(counts0, lastCounts))
				if commitsThroughCoordinator(st.name) {
					lastCoordEnd = time.Now()
				}
			}
			if c1, ok := e.coordWaits(ctx, st.name); ok && haveCoord {
				st.coord = st.coord.Add(c1.Sub(c0))
			}
			if cfg.Progress != nil && time.Since(lastProgress) >= 2*time.Second {
				lastProgress = time.Now()
				var parts []string
				for _, s := range states {
					parts = append(parts, fmt.Sprintf("%s %d txns %.0f TPS", s.label, s.txns, float64(s.txns)/max(s.elapsed.Seconds(), 1e-9)))
				}
				fmt.Fprintf(cfg.Progress, "bench: %5.1fs  %s\n", time.Since(start).Seconds(), strings.Join(parts, " | "))
			}
		}
		if active == 0 {
			break
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	machine := machineUse(before, sampleMachine())
	late, err := e.lateCounts(ctx, states, lastCounts, lastCoordEnd)
	if err != nil {
		return nil, err
	}
	rep := e.report(states, machine)
	rep.DBCountersLate = late
	return rep, nil
}

// warnCounterAttribution says when PostgreSQL's late counts (see
// dbcounters.go) may land in the other workload's figures.
func (e *env) warnCounterAttribution(states []*wlState, slice time.Duration) {
	n := 0
	for _, st := range states {
		if commitsThroughCoordinator(st.name) {
			n++
		}
	}
	switch {
	case n == 2:
		e.warnings = append(e.warnings, "both workloads commit through a coordinator: the PostgreSQL WAL counts its sessions publish a slice late may land in the other workload's slice where they share one (xa and oltp), and those left after the last slice are in neither's figures (db_counters_late)")
	case n == 1 && len(states) == 2 && e.cfg.Txns == 0 && slice >= 10*time.Second:
		e.warnings = append(e.warnings, "slices of 10 s or more: the PostgreSQL WAL counts the coordinator's sessions hold at the end of a slice are published after 10 s idle, which may fall in the other workload's slice")
	}
}

// commitsThroughCoordinator: the workload's phase 2 on PostgreSQL runs on a
// coordinator's sessions, which the bench cannot make publish their counts.
func commitsThroughCoordinator(workload string) bool {
	return workload == WorkloadXA || workload == WorkloadOLTP || workload == WorkloadXAStandby || workload == WorkloadXAObserved
}

// lateCounts waits, after the run, for the counts the coordinator's
// PostgreSQL sessions still hold (see dbcounters.go) and adds them to the
// workload that commits through a coordinator; with two such workloads they
// belong to neither, and are returned to be reported apart.
func (e *env) lateCounts(ctx context.Context, states []*wlState, last counterSample, lastCoordEnd time.Time) ([]DBCounter, error) {
	if !e.counters.lagging() || lastCoordEnd.IsZero() {
		return nil, nil
	}
	wait := time.Until(lastCoordEnd.Add(coordIdleFlush))
	if e.cfg.Progress != nil && wait > 0 {
		fmt.Fprintf(e.cfg.Progress, "bench: waiting %.0fs for the coordinator's PostgreSQL sessions to publish their last WAL counts (--db-counters=false skips this)\n", wait.Seconds())
	}
	select {
	case <-time.After(wait):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	d := e.counters.onlyLagging(e.counters.delta(last, e.counters.sample(ctx)))
	var coord []*wlState
	for _, st := range states {
		if commitsThroughCoordinator(st.name) {
			coord = append(coord, st)
		}
	}
	if e.cfg.Progress != nil {
		parts := []string{"nothing"}
		if late := e.counters.lateResults(d); late != nil {
			parts = parts[:0]
			for _, x := range late {
				parts = append(parts, fmt.Sprintf("%s %s %d", x.RM, x.Counter, x.Total))
			}
		}
		fmt.Fprintf(e.cfg.Progress, "bench: arrived after the last slice: %s\n", strings.Join(parts, ", "))
	}
	if len(coord) == 1 {
		coord[0].dbc = coord[0].dbc.plus(d)
		return nil, nil
	}
	return e.counters.lateResults(d), nil
}

// lagSampleInterval is how often xa-standby's slices sample the primary's
// standby status.
const lagSampleInterval = 100 * time.Millisecond

// settle waits, unmeasured, for the coordinator that ran the workload just
// measured to finish its trailing work (phase 2; the standby's copy), so that
// it lands in this workload's coordinator waits and not in the next slice.
func (e *env) settle(workload string) {
	const limit = 5 * time.Second
	if workload == WorkloadXAStandby {
		e.sb.settle(limit)
		return
	}
	if e.srv == nil {
		return
	}
	deadline := time.Now().Add(limit)
	for phase2Backlog(e.srv) > 0 && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
	}
}

// slice runs st on every worker until stopAt or until the budget is spent.
func (e *env) slice(ctx context.Context, st *wlState, stopAt time.Time, budget *atomic.Int64, measure bool) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var fatal error
	for _, w := range e.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var h Histogram
			var txns, errs uint64
			var trips [2]uint64
			var calls uint64
			var lat, uncov time.Duration
			var lastErr error
			slow := slowest{n: e.cfg.Slowest}
			for ctx.Err() == nil {
				if budget != nil {
					if budget.Add(-1) < 0 {
						break
					}
				} else if !time.Now().Before(stopAt) {
					break
				}
				tr, keep := w.acct, false
				if measure && st.traced.Load() < int64(e.cfg.Trace) && st.traced.Add(1) <= int64(e.cfg.Trace) {
					tr, keep = waits.NewTrace(""), true
				}
				tr.Reset("")
				w.trips, w.calls, w.reg, w.native = [2]int{}, 0, st.reg, st.native
				t0 := time.Now()
				tctx, cancel := context.WithTimeout(ctx, e.cfg.TxnTimeout)
				err := st.run(tctx, w, st, tr, keep)
				cancel()
				t1 := time.Now()
				tr.Finish()
				if err != nil {
					if ctx.Err() != nil {
						break
					}
					errs++
					lastErr = err
					if rerr := w.reconnect(ctx); rerr != nil {
						mu.Lock()
						fatal = rerr
						mu.Unlock()
						return
					}
					continue
				}
				d := t1.Sub(t0)
				h.Record(d)
				txns++
				trips[0] += uint64(w.trips[0])
				trips[1] += uint64(w.trips[1])
				calls += uint64(w.calls)
				lat += d
				uncov += d - tr.Covered(waits.SideClient, t0, t1)
				if keep {
					st.mu.Lock()
					st.traces = append(st.traces, tr.JSON())
					st.mu.Unlock()
				}
				if measure {
					slow.offer(d, tr)
				}
			}
			st.mu.Lock()
			st.slow.merge(&slow)
			st.hist.Merge(&h)
			st.sliceHist.Merge(&h)
			st.txns += txns
			st.errs += errs
			if lastErr != nil {
				st.lastErr = lastErr
			}
			st.trips[0] += trips[0]
			st.trips[1] += trips[1]
			st.calls += calls
			st.latency += lat
			st.uncov += uncov
			st.mu.Unlock()
		}()
	}
	wg.Wait()
	if fatal != nil {
		return fatal
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if st.txns == 0 && st.errs > 0 {
		return fmt.Errorf("bench: workload %s: every transaction failed; the last: %w", st.label, st.lastErr)
	}
	return nil
}

// machineUseT is the CPU used during a run, in percent of all CPUs: by this
// process (own; -1 when unknown), and by every other, the databases included
// (others).
type machineUseT struct{ own, others float64 }

// machineUse returns the CPU used between samples a and b.
func machineUse(a, b machineSample) machineUseT {
	others := othersCPU(a, b, runtime.NumCPU())
	own := -1.0
	if a.ok && b.ok {
		if wall := b.at.Sub(a.at).Seconds(); wall > 0 {
			own = (b.ownCPU - a.ownCPU).Seconds() / (wall * float64(runtime.NumCPU())) * 100
		}
	}
	return machineUseT{own: own, others: others}
}
