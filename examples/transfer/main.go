// Command transfer moves money between accounts kept in two databases — one
// half of the accounts in PostgreSQL, the other half in MariaDB/MySQL — with
// one global transaction per transfer, and proves that none was lost.
//
// Each transfer debits a PostgreSQL account, credits a MariaDB account (or
// the reverse), and writes the transfer's gtrid into a journal table on both
// sides, in one global transaction through Tandem. At the end it checks:
//
//   - the total of all balances is unchanged (atomicity);
//   - the journals on both sides hold the same gtrids, and every transfer the
//     client saw as committed is in both (nothing acknowledged was lost);
//   - no prepared branch in Tandem's format is left on either database.
//
// It exits non-zero when a check fails.
//
// With no flags it reads TANDEM_PG_DSN and TANDEM_MYSQL_DSN, creates its
// tables (tandem_demo_accounts and tandem_demo_transfer_journal on both
// databases, marked with a comment: a later reset drops only tables that
// carry it, never a table of the same name it did not create), starts a coordinator in this process that its workers reach over
// gRPC on loopback, runs for 10 seconds with 8 workers, and prints what it did.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/tandem-tx/tandem/client"
	"io"
	"os"
	"os/signal"
	"time"
)

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "transfer:", err)
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep, err := Run(ctx, cfg, os.Stdout)
	if rep != nil {
		rep.Print(os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "transfer:", err)
		os.Exit(1)
	}
}

// parseFlags reads the command line into a Config.
func parseFlags(args []string, output io.Writer) (Config, error) {
	cfg := defaultConfig()
	fs := flag.NewFlagSet("transfer", flag.ContinueOnError)
	fs.SetOutput(output)
	fs.IntVar(&cfg.Workers, "workers", cfg.Workers, "concurrent workers, each on its own pair of connections")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "how long to run (ignored with --transfers)")
	fs.IntVar(&cfg.Transfers, "transfers", 0, "stop after this many committed transfers in all (0: run for --duration)")
	fs.IntVar(&cfg.Accounts, "accounts", cfg.Accounts, "accounts on each database")
	fs.StringVar(&cfg.Coordinator, "coordinator", "", "address of a running coordinator, or the addresses of a primary and its standbys separated by commas: the client follows whichever serves (default: start one in this process)")
	fs.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "decision log directory of the in-process coordinator")
	fs.StringVar(&cfg.PGDSN, "pg", os.Getenv("TANDEM_PG_DSN"), "PostgreSQL DSN (default $TANDEM_PG_DSN)")
	fs.StringVar(&cfg.MySQLDSN, "mysql", os.Getenv("TANDEM_MYSQL_DSN"), "MariaDB/MySQL DSN (default $TANDEM_MYSQL_DSN)")
	fs.BoolVar(&cfg.Reset, "reset", true, "recreate the tables and balances before running (off with --check-only)")
	fs.StringVar(&cfg.AckFile, "acked", "", "append the gtrid of every transfer acknowledged as committed to this file")
	fs.StringVar(&cfg.Prefix, "prefix", "tandem_demo_", "prefix of the demo's table names (PREFIXaccounts, PREFIXtransfer_journal); a reset drops only tables this demo created")
	fs.StringVar(&cfg.PGName, "rm-pg", "pg", "the PostgreSQL resource manager's name (the coordinator's --rm name)")
	fs.StringVar(&cfg.MariaName, "rm-maria", "maria", "the MariaDB resource manager's name")
	fs.Func("decide-at", "where each transfer is decided: auto (default: MariaDB's own commit, with a decision row, when its decision table exists), coordinator, or rm", func(v string) error {
		d, err := client.ParseDecideAt(v)
		cfg.DecideAt = d
		return err
	})
	fs.StringVar(&cfg.PGDriver, "pg-driver", DefaultPGDriver, "how the workers talk to PostgreSQL: pgx (natively, client.Tx.BranchPgx) or sql (database/sql, client.Tx.Branch)")
	fs.DurationVar(&cfg.ClockSkew, "clock-skew", 0, "stamp gtrids with a clock this far off (e.g. 30s, -1h): a test of the coordinator's --max-clock-skew; never split, refused when too far ahead")
	fs.StringVar(&cfg.OTLPEndpoint, "otlp-endpoint", "", "send the spans of every transfer (and of the in-process coordinator) over OTLP/gRPC, in plaintext, to HOST:PORT, e.g. localhost:4317 (an OpenTelemetry Collector or Jaeger)")
	fs.BoolVar(&cfg.NoCheck, "no-check", false, "skip the checks at the end (when other clients still run, as in the chaos test)")
	fs.BoolVar(&cfg.ResetOnly, "reset-only", false, "recreate the tables and balances, then exit: no transfers, no checks")
	fs.BoolVar(&cfg.CheckOnly, "check-only", false, "run no transfers; check the invariants (with --acked: those transfers must be present). Never recreates the tables")
	fs.Float64Var(&cfg.Hostile, "hostile", 0, "fraction (0 to 1) of transfers that send a statement ending the transaction on MariaDB (DDL, COMMIT, compound statements, …: "+describeHostile(len(hostileStatements("")))+"), ignore its error and commit: none may be acknowledged, and the checks must pass")
	fs.Int64Var(&cfg.InitialBalance, "initial-balance", cfg.InitialBalance, "balance of every account at reset; the total must stay accounts × 2 × this")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: transfer [flags]\n\nMoves money between PostgreSQL and MariaDB accounts in global transactions and checks that none is lost.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q (flags only; see --help)", fs.Arg(0))
	}
	// A check never destroys what it checks: with --check-only the tables
	// are left as they are, and asking for a reset as well is refused.
	if cfg.CheckOnly && cfg.ResetOnly {
		return cfg, errors.New("--check-only --reset-only: a check never recreates the tables it checks; choose one")
	}
	if cfg.ResetOnly {
		cfg.Reset = true
	}
	if cfg.CheckOnly {
		resetSet := false
		fs.Visit(func(f *flag.Flag) { resetSet = resetSet || f.Name == "reset" })
		if resetSet && cfg.Reset {
			return cfg, errors.New("--check-only --reset: a check never recreates the tables it checks (that would wipe the journal); run the check alone, or reset without --check-only")
		}
		cfg.Reset = false
	}
	return cfg, nil
}

func defaultConfig() Config {
	return Config{Workers: 8, Duration: 10 * time.Second, Accounts: 1000, DataDir: ".tandem/transfer-coordinator", Reset: true, InitialBalance: 1000}
}
