package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/tandem-tx/tandem/client"
	"github.com/tandem-tx/tandem/internal/config"
	"github.com/tandem-tx/tandem/internal/server"
	"github.com/tandem-tx/tandem/xid"
)

// Config of one run.
type Config struct {
	Workers        int
	Duration       time.Duration
	Transfers      int
	Accounts       int
	InitialBalance int64
	Coordinator    string // one address, or several of one cluster separated by commas
	DataDir        string
	PGDSN          string
	MySQLDSN       string
	// Reset recreates the tables and balances before the run. It cannot be
	// combined with CheckOnly.
	Reset bool
	// AckFile, if set, gets one line per transfer acknowledged as committed
	// (its gtrid), appended as soon as Commit returns: a checker can verify
	// them even if this process is killed.
	AckFile string
	// ResetOnly recreates the tables and balances and returns: no
	// transfers, no checks (a nil Report).
	ResetOnly bool
	// CheckOnly skips the workers and only checks the invariants, counting
	// the gtrids in AckFile as acknowledged.
	CheckOnly bool
	// NoCheck skips the end-of-run checks.
	NoCheck bool
	// ClockSkew shifts the SDK's clock (client.Config.Now): the chaos run's
	// client with a skewed clock.
	ClockSkew time.Duration
	// DecideAt is where transfers are decided (client.DecideAt; "" is auto:
	// MariaDB's commit with its decision row, once the coordinator has
	// made the decision table).
	DecideAt client.DecideAt
	// Prefix is put before the table names (accounts, transfer_journal), so
	// that several runs can share the databases.
	Prefix string
	// PGName and MariaName are the resource managers' names (default pg and
	// maria). The checks count only prepared branches of these names.
	PGName, MariaName string
	// Log receives the in-process coordinator's log (default: discarded).
	Log io.Writer
	// Hostile is the fraction (0 to 1) of transfers that send, on their
	// MariaDB branch after their writes, one statement that would end the
	// transaction (hostile.go), ignore its error and commit anyway. None of
	// them may be acknowledged (a violation), and the checks must pass.
	Hostile float64
	// PGDriver is how the workers talk to PostgreSQL: "pgx" (each worker
	// its own *pgx.Conn, client.Tx.BranchPgx) or "sql" (database/sql over
	// pgx's stdlib driver, client.Tx.Branch). Default: DefaultPGDriver.
	PGDriver string
	// OTLPEndpoint, when set, is where the spans of the transfers (and of
	// the in-process coordinator) are sent over OTLP/gRPC: HOST:PORT,
	// plaintext (otlp.go).
	OTLPEndpoint string
	// tracer makes each transfer's span (nil: none); set by Run.
	tracer trace.Tracer
}

// DefaultPGDriver is Config.PGDriver's default: database/sql, because pgx
// natively did not measure faster on a transfer's commit path (tandem bench
// --compare xa@sql,xa@pgx --decide-at auto --threads 8, both orders: 1.003
// and 1.006, within the noise; README, "pgx natively against database/sql").
const DefaultPGDriver = "sql"

// names are the tables and resource managers of one run.
type names struct {
	accounts, journal, pg, maria string
}

func (c Config) names() names {
	n := names{accounts: c.Prefix + "accounts", journal: c.Prefix + "transfer_journal", pg: c.PGName, maria: c.MariaName}
	if n.pg == "" {
		n.pg = "pg"
	}
	if n.maria == "" {
		n.maria = "maria"
	}
	return n
}

// Report is what a run did and what it checked.
type Report struct {
	Workers   int
	Committed int64
	Aborted   int64 // rolled back (insufficient funds, conflicts, a database down)
	Unknown   int64 // outcome unknown to the client at the time
	Pending   int64 // committed with phase 2 still pending at the reply
	// AtCommitPoint: committed transfers decided by a database's own commit
	// (client.PathCommitPoint); the others by the coordinator.
	AtCommitPoint int64
	// HostileSent counts transfers that sent a hostile statement;
	// HostileCommitted those of them acknowledged as committed (must be 0).
	HostileSent, HostileCommitted int64
	// HostileAcked are up to 5 of the statements those transfers sent.
	HostileAcked  []string
	hostileMu     sync.Mutex
	Elapsed       time.Duration
	Total, Want   int64
	JournalPG     int
	JournalMySQL  int
	Dangling      int
	Violations    []string
	CoordinatorAt string
}

// TPS is committed transfers per second.
func (r *Report) TPS() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Committed) / r.Elapsed.Seconds()
}

// Print writes the report for a person.
func (r *Report) Print(w io.Writer) {
	if r.Workers > 0 {
		fmt.Fprintf(w, "transfer: %d workers, %s, coordinator %s\n", r.Workers, r.Elapsed.Round(time.Millisecond), r.CoordinatorAt)
		fmt.Fprintf(w, "  committed %d (%.1f TPS), aborted %d, outcome unknown %d, phase 2 pending at reply %d\n",
			r.Committed, r.TPS(), r.Aborted, r.Unknown, r.Pending)
		fmt.Fprintf(w, "  decided by a database's own commit (commit point) %d, by the coordinator %d\n", r.AtCommitPoint, r.Committed-r.AtCommitPoint)
		if r.HostileSent > 0 {
			fmt.Fprintf(w, "  sent a statement that ends the transaction on MariaDB %d, of them acknowledged as committed %d (want 0)\n", r.HostileSent, r.HostileCommitted)
		}
	} else {
		fmt.Fprintln(w, "transfer: check only")
	}
	if r.Want == 0 {
		return // not checked
	}
	fmt.Fprintf(w, "  total balance %d (want %d); journal rows: postgres %d, mariadb %d; prepared branches left: %d\n",
		r.Total, r.Want, r.JournalPG, r.JournalMySQL, r.Dangling)
	if len(r.Violations) == 0 {
		fmt.Fprintln(w, "  checks: OK (total unchanged, journals match, every acknowledged transfer present, nothing left prepared)")
		return
	}
	for _, v := range r.Violations {
		fmt.Fprintln(w, "  VIOLATION:", v)
	}
}

// Run sets up, runs the workers, and checks the invariants. It returns an
// error when a check fails or the setup cannot be done.
func Run(ctx context.Context, cfg Config, progress io.Writer) (*Report, error) {
	if cfg.PGDSN == "" || cfg.MySQLDSN == "" {
		return nil, errors.New("need a PostgreSQL and a MariaDB DSN: set TANDEM_PG_DSN and TANDEM_MYSQL_DSN (eval \"$(scripts/db env)\") or pass --pg and --mysql")
	}
	if cfg.CheckOnly && (cfg.Reset || cfg.ResetOnly) {
		return nil, errors.New("CheckOnly with Reset: a check never recreates the tables it checks (that would wipe the journal); turn Reset off")
	}
	if cfg.Hostile < 0 || cfg.Hostile > 1 {
		return nil, fmt.Errorf("--hostile %v: a fraction from 0 to 1", cfg.Hostile)
	}
	if cfg.Workers < 1 || cfg.Accounts < 1 {
		return nil, errors.New("--workers and --accounts must be at least 1")
	}
	if cfg.PGDriver == "" {
		cfg.PGDriver = DefaultPGDriver
	}
	if cfg.PGDriver != "sql" && cfg.PGDriver != "pgx" {
		return nil, fmt.Errorf("--pg-driver %q: use sql or pgx", cfg.PGDriver)
	}
	pg, err := sql.Open("pgx", cfg.PGDSN)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	defer pg.Close()
	my, err := sql.Open("mysql", cfg.MySQLDSN)
	if err != nil {
		return nil, fmt.Errorf("mariadb: %w", err)
	}
	defer my.Close()
	pg.SetMaxOpenConns(cfg.Workers + 4)
	my.SetMaxOpenConns(cfg.Workers + 4)
	if cfg.Reset || cfg.ResetOnly {
		if err := setup(ctx, pg, my, cfg); err != nil {
			return nil, err
		}
	}
	if cfg.ResetOnly {
		n := cfg.names()
		fmt.Fprintf(progress, "transfer: tables %s and %s recreated on both databases, %d accounts on each\n", n.accounts, n.journal, cfg.Accounts)
		return nil, nil
	}
	want := 2 * int64(cfg.Accounts) * cfg.InitialBalance
	rep := &Report{Workers: cfg.Workers, Want: want, CoordinatorAt: cfg.Coordinator}
	var committedIDs sync.Map
	if cfg.CheckOnly {
		if err := loadAcks(cfg.AckFile, &committedIDs); err != nil {
			return nil, err
		}
		rep.Workers, rep.CoordinatorAt = 0, "none (check only)"
		return rep, check(ctx, cfg.names(), pg, my, rep, &committedIDs)
	}
	var acks *os.File
	if cfg.AckFile != "" {
		var err error
		if acks, err = os.OpenFile(cfg.AckFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
			return nil, fmt.Errorf("acknowledgement file: %w", err)
		}
		defer acks.Close()
	}
	var clientTP, coordTP trace.TracerProvider // nil: no spans
	if cfg.OTLPEndpoint != "" {
		tp, err := otlpProvider(ctx, cfg.OTLPEndpoint, "transfer")
		if err != nil {
			return nil, err
		}
		defer shutdown(tp) // after the client and the coordinator stopped: the last spans are sent
		clientTP, cfg.tracer = tp, tp.Tracer("transfer")
		if cfg.Coordinator == "" {
			ctp, err := otlpProvider(ctx, cfg.OTLPEndpoint, "tandem-coordinator")
			if err != nil {
				return nil, err
			}
			defer shutdown(ctp)
			coordTP = ctp
		}
	}
	if cfg.Coordinator == "" {
		logw := cfg.Log
		if logw == nil {
			logw = io.Discard
		}
		srv, err := server.Start(config.Config{
			Listen: "127.0.0.1:0", DataDir: cfg.DataDir,
			RMs: map[string]config.RM{cfg.names().pg: {Driver: "postgres", DSN: cfg.PGDSN}, cfg.names().maria: {Driver: "mysql", DSN: cfg.MySQLDSN}},
		}, server.Options{Logger: slog.New(slog.NewTextHandler(logw, nil)), TracerProvider: coordTP})
		if err != nil {
			return nil, fmt.Errorf("start the in-process coordinator: %w", err)
		}
		defer srv.Stop(5 * time.Second)
		rep.CoordinatorAt = srv.Addr() + " (in-process)"
		cfg.Coordinator = srv.Addr()
	}
	cliCfg := client.Config{
		Coordinators: coordinatorList(cfg.Coordinator),
		RMs: []client.RM{{Name: cfg.names().pg, Driver: "postgres", DB: pg},
			{Name: cfg.names().maria, Driver: "mysql", MultiStatements: true, DB: my}},
		Defaults:       client.CommitOptions{DecideAt: cfg.DecideAt},
		TracerProvider: clientTP,
	}
	if skew := cfg.ClockSkew; skew != 0 {
		cliCfg.Now = func() time.Time { return time.Now().Add(skew) }
	}
	if progress != nil {
		cliCfg.Logger = slog.New(newOutageLine(progress)) // "coordinator unreachable at ADDR, retrying (N s)", once a second
	}
	cli, err := client.New(cliCfg)
	if err != nil {
		return nil, err
	}
	defer cli.Close()

	runCtx := ctx
	if cfg.Transfers == 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, cfg.Duration)
		defer cancel()
	}
	var (
		budget    atomic.Int64
		wg        sync.WaitGroup
		workerErr = make(chan error, cfg.Workers)
	)
	budget.Store(int64(cfg.Transfers))
	start := time.Now()
	stopProgress := startProgress(progress, rep, start)
	for w := 0; w < cfg.Workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := worker(runCtx, cli, pg, my, cfg, rep, &committedIDs, &budget, acks); err != nil {
				workerErr <- err
			}
		}()
	}
	wg.Wait()
	stopProgress()
	rep.Elapsed = time.Since(start)
	close(workerErr)
	for err := range workerErr {
		return rep, err
	}
	if rep.HostileCommitted > 0 {
		rep.Violations = append(rep.Violations, fmt.Sprintf("%d transfers that sent a statement ending the transaction on MariaDB were acknowledged as committed, e.g. %q", rep.HostileCommitted, rep.HostileAcked))
	}
	if cfg.NoCheck {
		rep.Want = 0
		if len(rep.Violations) > 0 {
			return rep, fmt.Errorf("transfer: %s", strings.Join(rep.Violations, "; "))
		}
		return rep, nil
	}
	return rep, check(ctx, cfg.names(), pg, my, rep, &committedIDs)
}

func startProgress(w io.Writer, rep *Report, start time.Time) func() {
	if w == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				c := atomic.LoadInt64(&rep.Committed)
				fmt.Fprintf(w, "  ... %s: %d committed (%.0f TPS), %d aborted\n", time.Since(start).Round(time.Second), c,
					float64(c)/time.Since(start).Seconds(), atomic.LoadInt64(&rep.Aborted))
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// worker runs transfers until ctx ends or the transfer budget is spent. A
// connection that breaks (a database restarted) is replaced, and the worker
// carries on: every failed transfer is counted, none is retried blindly.
func worker(ctx context.Context, cli *client.Client, pg, my *sql.DB, cfg Config, rep *Report, ids *sync.Map, budget *atomic.Int64, acks *os.File) error {
	var c conns
	defer c.close()
	rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	var hostile []string
	if cfg.Hostile > 0 {
		hostile = hostileStatements(cfg.Prefix)
	}
	for ctx.Err() == nil {
		if !c.open() {
			if err := c.reconnect(ctx, pg, my, cfg); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				time.Sleep(200 * time.Millisecond) // a database is down: try again
				continue
			}
		}
		if cfg.Transfers > 0 && budget.Add(-1) < 0 {
			return nil
		}
		a, b := rng.IntN(cfg.Accounts)+1, rng.IntN(cfg.Accounts)+1
		amount := int64(rng.IntN(100) + 1)
		if rng.IntN(2) == 0 {
			amount = -amount // from MariaDB to PostgreSQL
		}
		// The run's end stops new transfers; one in flight gets its own deadline.
		txCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		var span trace.Span
		if cfg.tracer != nil {
			// The application's span; the transaction's is its child.
			txCtx, span = cfg.tracer.Start(txCtx, "transfer", trace.WithAttributes(
				attribute.Int("transfer.from", a), attribute.Int("transfer.to", b), attribute.Int64("transfer.amount", amount)))
		}
		tx := cli.BeginContext(txCtx)
		var bad string
		if hostile != nil && rng.Float64() < cfg.Hostile {
			bad = hostile[rng.IntN(len(hostile))]
			atomic.AddInt64(&rep.HostileSent, 1)
		}
		res, err := transfer(txCtx, cfg.names(), tx, c, a, b, amount, bad)
		if span != nil {
			span.End()
		}
		cancel()
		if err == nil && bad != "" {
			atomic.AddInt64(&rep.HostileCommitted, 1)
			rep.hostileMu.Lock()
			if len(rep.HostileAcked) < 5 {
				rep.HostileAcked = append(rep.HostileAcked, bad)
			}
			rep.hostileMu.Unlock()
		}
		switch {
		case err == nil:
			if acks != nil {
				_, _ = acks.WriteString(tx.GTRID().String() + "\n")
			}
			atomic.AddInt64(&rep.Committed, 1)
			if res.Phase2Pending {
				atomic.AddInt64(&rep.Pending, 1)
			}
			if res.Path == client.PathCommitPoint {
				atomic.AddInt64(&rep.AtCommitPoint, 1)
			}
			ids.Store(tx.GTRID().String(), true)
		case errors.Is(err, client.ErrOutcomeUnknown):
			atomic.AddInt64(&rep.Unknown, 1)
		default:
			_ = tx.Rollback(context.WithoutCancel(ctx))
			atomic.AddInt64(&rep.Aborted, 1)
			if cfg.Transfers > 0 {
				budget.Add(1) // only committed transfers count
			}
		}
		if err != nil && c.broken() {
			c.close()
		}
	}
	return nil
}

// conns are one worker's connections: MariaDB's through database/sql,
// PostgreSQL's through database/sql (pc) or pgx natively (px).
type conns struct {
	pc *sql.Conn
	px *pgx.Conn
	mc *sql.Conn
}

func (c *conns) open() bool { return c.mc != nil && (c.pc != nil || c.px != nil) }

func (c *conns) close() {
	if c.pc != nil {
		c.pc.Close()
	}
	if c.px != nil {
		_ = c.px.Close(context.Background())
	}
	if c.mc != nil {
		c.mc.Close()
	}
	*c = conns{}
}

// reconnect replaces the worker's connections.
func (c *conns) reconnect(ctx context.Context, pg, my *sql.DB, cfg Config) error {
	c.close()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var err error
	if cfg.PGDriver == "pgx" {
		c.px, err = pgx.Connect(cctx, cfg.PGDSN)
	} else {
		c.pc, err = pg.Conn(cctx)
	}
	if err != nil {
		return fmt.Errorf("postgres connection: %w", err)
	}
	if c.mc, err = my.Conn(cctx); err != nil {
		c.close()
		return fmt.Errorf("mariadb connection: %w", err)
	}
	return nil
}

// broken reports whether a connection no longer answers.
func (c *conns) broken() bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if c.px != nil && c.px.Ping(ctx) != nil {
		return true
	}
	return (c.pc != nil && c.pc.PingContext(ctx) != nil) || c.mc.PingContext(ctx) != nil
}

// loadAcks reads an acknowledgement file written by earlier runs.
func loadAcks(path string, ids *sync.Map) error {
	if path == "" {
		return nil
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("acknowledgement file: %w", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if len(line) == 32 {
			ids.Store(line, true)
		}
	}
	return nil
}

// transfer moves amount from PostgreSQL account a to MariaDB account b (or
// back, for a negative amount) and journals it on both sides.
//
// A non-empty hostile is sent on the MariaDB branch after the writes, its
// error ignored, before the commit (Config.Hostile).
func transfer(ctx context.Context, n names, tx *client.Tx, c conns, a, b int, amount int64, hostile string) (client.Result, error) {
	pgExec, err := enlistPG(ctx, tx, n.pg, c)
	if err != nil {
		return client.Result{}, err
	}
	mb, err := tx.Branch(ctx, n.maria, c.mc)
	if err != nil {
		return client.Result{}, err
	}
	g := tx.GTRID().String()
	rows, err := pgExec(ctx, "UPDATE "+n.accounts+" SET balance = balance - $1 WHERE id = $2 AND balance - $1 >= 0", amount, a)
	if err != nil {
		return client.Result{}, err
	}
	if rows != 1 {
		return client.Result{}, errInsufficient
	}
	res, err := mb.ExecContext(ctx, "UPDATE "+n.accounts+" SET balance = balance + ? WHERE id = ? AND balance + ? >= 0", amount, b, amount)
	if err != nil {
		return client.Result{}, err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return client.Result{}, errInsufficient
	}
	if _, err := pgExec(ctx, "INSERT INTO "+n.journal+" (gtrid, amount) VALUES ($1, $2)", g, amount); err != nil {
		return client.Result{}, err
	}
	if _, err := mb.ExecContext(ctx, "INSERT INTO "+n.journal+" (gtrid, amount) VALUES (?, ?)", g, amount); err != nil {
		return client.Result{}, err
	}
	if hostile != "" {
		_, _ = mb.ExecContext(ctx, hostile) // a careless application: the error is ignored
	}
	return tx.Commit(ctx)
}

// enlistPG enlists the worker's PostgreSQL connection — over pgx natively
// (Tx.BranchPgx) or database/sql (Tx.Branch) — and returns how to run a
// statement on the branch and count the rows it changed.
func enlistPG(ctx context.Context, tx *client.Tx, rm string, c conns) (func(ctx context.Context, q string, args ...any) (int64, error), error) {
	if c.px != nil {
		pb, err := tx.BranchPgx(ctx, rm, c.px)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, q string, args ...any) (int64, error) {
			tag, err := pb.Exec(ctx, q, args...)
			return tag.RowsAffected(), err
		}, nil
	}
	pb, err := tx.Branch(ctx, rm, c.pc)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, q string, args ...any) (int64, error) {
		res, err := pb.ExecContext(ctx, q, args...)
		if err != nil {
			return 0, err
		}
		return res.RowsAffected()
	}, nil
}

var errInsufficient = errors.New("insufficient funds")

// demoMark is the comment the demo puts on every table it creates; a reset
// drops only tables that carry it.
const demoMark = "created by tandem examples/transfer"

// checkOwned refuses to go on when one of the demo's table names is taken
// by a table the demo did not create (no demoMark comment): a reset would
// drop someone's data. comment answers (exists, comment) for a table.
func checkOwned(ctx context.Context, where string, n names, comment func(ctx context.Context, table string) (bool, string, error)) error {
	for _, tbl := range []string{n.accounts, n.journal} {
		exists, c, err := comment(ctx, tbl)
		if err != nil {
			return fmt.Errorf("%s: look at table %s before the reset: %w", where, tbl, err)
		}
		if exists && c != demoMark {
			return fmt.Errorf("%s: table %s exists and was not created by this demo (it lacks the comment %q): it is left as it is; "+
				"pick another --prefix for the demo's tables", where, tbl, demoMark)
		}
	}
	return nil
}

func setup(ctx context.Context, pg, my *sql.DB, cfg Config) error {
	n := cfg.names()
	if err := checkOwned(ctx, "postgres", n, func(ctx context.Context, tbl string) (bool, string, error) {
		var exists bool
		var c string
		err := pg.QueryRowContext(ctx, "SELECT to_regclass($1) IS NOT NULL, COALESCE(obj_description(to_regclass($1), 'pg_class'), '')", tbl).Scan(&exists, &c)
		return exists, c, err
	}); err != nil {
		return err
	}
	if err := checkOwned(ctx, "mariadb", n, func(ctx context.Context, tbl string) (bool, string, error) {
		var c string
		err := my.QueryRowContext(ctx, "SELECT table_comment FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?", tbl).Scan(&c)
		if errors.Is(err, sql.ErrNoRows) {
			return false, "", nil
		}
		return err == nil, c, err
	}); err != nil {
		return err
	}
	for _, s := range []string{
		"DROP TABLE IF EXISTS " + n.accounts, "DROP TABLE IF EXISTS " + n.journal,
		"CREATE TABLE " + n.accounts + " (id int PRIMARY KEY, balance bigint NOT NULL CHECK (balance >= 0))",
		"CREATE TABLE " + n.journal + " (gtrid char(32) PRIMARY KEY, amount bigint NOT NULL)",
		"COMMENT ON TABLE " + n.accounts + " IS '" + demoMark + "'",
		"COMMENT ON TABLE " + n.journal + " IS '" + demoMark + "'",
		fmt.Sprintf("INSERT INTO %s SELECT g, %d FROM generate_series(1, %d) g", n.accounts, cfg.InitialBalance, cfg.Accounts),
	} {
		if _, err := pg.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("postgres setup %q: %w", s, err)
		}
	}
	for _, s := range append([]string{
		"DROP TABLE IF EXISTS " + n.accounts, "DROP TABLE IF EXISTS " + n.journal,
		"CREATE TABLE " + n.accounts + " (id int PRIMARY KEY, balance bigint NOT NULL, CHECK (balance >= 0)) ENGINE=InnoDB COMMENT='" + demoMark + "'",
		"CREATE TABLE " + n.journal + " (gtrid char(32) PRIMARY KEY, amount bigint NOT NULL) ENGINE=InnoDB COMMENT='" + demoMark + "'",
		fmt.Sprintf("INSERT INTO %s (id, balance) SELECT seq, %d FROM seq_1_to_%d", n.accounts, cfg.InitialBalance, cfg.Accounts),
	}, hostileSetup(cfg.Prefix)...) {
		if _, err := my.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("mariadb setup %q: %w", s, err)
		}
	}
	return nil
}

func totalBalance(ctx context.Context, n names, pg, my *sql.DB) (int64, error) {
	var a, b int64
	if err := pg.QueryRowContext(ctx, "SELECT COALESCE(SUM(balance), 0) FROM "+n.accounts).Scan(&a); err != nil {
		return 0, fmt.Errorf("postgres: sum of balances: %w", err)
	}
	if err := my.QueryRowContext(ctx, "SELECT COALESCE(SUM(balance), 0) FROM "+n.accounts).Scan(&b); err != nil {
		return 0, fmt.Errorf("mariadb: sum of balances: %w", err)
	}
	return a + b, nil
}

// check verifies the invariants after the run. Prepared branches left by
// transfers whose outcome was still pending get a grace period to settle.
func check(ctx context.Context, nm names, pg, my *sql.DB, rep *Report, acked *sync.Map) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := danglingBranches(ctx, nm, pg, my)
		if err != nil {
			return err
		}
		rep.Dangling = n
		if n == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	total, err := totalBalance(ctx, nm, pg, my)
	if err != nil {
		return err
	}
	rep.Total = total
	pgIDs, err := journal(ctx, nm, pg)
	if err != nil {
		return fmt.Errorf("postgres journal: %w", err)
	}
	myIDs, err := journal(ctx, nm, my)
	if err != nil {
		return fmt.Errorf("mariadb journal: %w", err)
	}
	rep.JournalPG, rep.JournalMySQL = len(pgIDs), len(myIDs)
	if total != rep.Want {
		rep.Violations = append(rep.Violations, fmt.Sprintf("total balance is %d, want %d", total, rep.Want))
	}
	if rep.Dangling != 0 {
		rep.Violations = append(rep.Violations, fmt.Sprintf("%d prepared branches left on the databases", rep.Dangling))
	}
	var onlyOne []string
	for id := range pgIDs {
		if !myIDs[id] {
			onlyOne = append(onlyOne, id+" (postgres only)")
		}
	}
	for id := range myIDs {
		if !pgIDs[id] {
			onlyOne = append(onlyOne, id+" (mariadb only)")
		}
	}
	if len(onlyOne) > 0 {
		sort.Strings(onlyOne)
		rep.Violations = append(rep.Violations, fmt.Sprintf("%d transfers committed on one side only, e.g. %s", len(onlyOne), onlyOne[0]))
	}
	missing := 0
	acked.Range(func(k, _ any) bool {
		if !pgIDs[k.(string)] || !myIDs[k.(string)] {
			missing++
		}
		return true
	})
	if missing > 0 {
		rep.Violations = append(rep.Violations, fmt.Sprintf("%d transfers acknowledged as committed are missing", missing))
	}
	if len(rep.Violations) > 0 {
		return fmt.Errorf("%d invariant violations", len(rep.Violations))
	}
	return nil
}

// danglingBranches counts the prepared branches of this run's resource
// managers on both databases, named with a commit point (tandemcp:...,
// format TANC) or not (tandem:..., format TAND).
func danglingBranches(ctx context.Context, nm names, pg, my *sql.DB) (int, error) {
	var n int
	gids, err := pg.QueryContext(ctx, "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE 'tandem%'")
	if err != nil {
		return 0, fmt.Errorf("postgres: pg_prepared_xacts: %w", err)
	}
	defer gids.Close()
	for gids.Next() {
		var gid string
		if err := gids.Scan(&gid); err != nil {
			return 0, fmt.Errorf("postgres: pg_prepared_xacts: %w", err)
		}
		if b, ok := xid.ParsePostgresGID(gid); ok && b.RM == nm.pg {
			n++
		}
	}
	if err := gids.Err(); err != nil {
		return 0, fmt.Errorf("postgres: pg_prepared_xacts: %w", err)
	}
	rows, err := my.QueryContext(ctx, "XA RECOVER")
	if err != nil {
		return 0, fmt.Errorf("mariadb: XA RECOVER: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var f int64
		var gl, bl int
		var data []byte
		if err := rows.Scan(&f, &gl, &bl, &data); err != nil {
			return 0, err
		}
		if b, ok := xid.ParseMySQLXID(f, gl, bl, data); ok && b.RM == nm.maria {
			n++
		}
	}
	return n, rows.Err()
}

func journal(ctx context.Context, n names, db *sql.DB) (map[string]bool, error) {
	rows, err := db.QueryContext(ctx, "SELECT gtrid FROM "+n.journal)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	m := map[string]bool{}
	for rows.Next() {
		var g string
		if err := rows.Scan(&g); err != nil {
			return nil, err
		}
		m[g] = true
	}
	return m, rows.Err()
}

// coordinatorList splits --coordinator's comma-separated addresses (the
// coordinators of one cluster: the client follows whichever is the primary).
func coordinatorList(s string) []string {
	var addrs []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	return addrs
}
