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
// tables, starts a coordinator in this process that its workers reach over
// gRPC on loopback, runs for 10 seconds with 8 workers, and prints what it did.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"
)

func main() {
	cfg := defaultConfig()
	flag.IntVar(&cfg.Workers, "workers", cfg.Workers, "concurrent workers, each on its own pair of connections")
	flag.DurationVar(&cfg.Duration, "duration", cfg.Duration, "how long to run (ignored with --transfers)")
	flag.IntVar(&cfg.Transfers, "transfers", 0, "stop after this many committed transfers in all (0: run for --duration)")
	flag.IntVar(&cfg.Accounts, "accounts", cfg.Accounts, "accounts on each database")
	flag.StringVar(&cfg.Coordinator, "coordinator", "", "address of a running coordinator (default: start one in this process)")
	flag.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "decision log directory of the in-process coordinator")
	flag.StringVar(&cfg.PGDSN, "pg", os.Getenv("TANDEM_PG_DSN"), "PostgreSQL DSN (default $TANDEM_PG_DSN)")
	flag.StringVar(&cfg.MySQLDSN, "mysql", os.Getenv("TANDEM_MYSQL_DSN"), "MariaDB/MySQL DSN (default $TANDEM_MYSQL_DSN)")
	flag.BoolVar(&cfg.Reset, "reset", true, "recreate the tables and balances before running")
	flag.StringVar(&cfg.AckFile, "acked", "", "append the gtrid of every transfer acknowledged as committed to this file")
	flag.StringVar(&cfg.Prefix, "prefix", "", "prefix of the table names (accounts, transfer_journal), to keep runs apart")
	flag.StringVar(&cfg.PGName, "rm-pg", "pg", "the PostgreSQL resource manager's name (the coordinator's --rm name)")
	flag.StringVar(&cfg.MariaName, "rm-maria", "maria", "the MariaDB resource manager's name")
	flag.BoolVar(&cfg.NoCheck, "no-check", false, "skip the checks at the end (when other clients still run, as in the chaos test)")
	flag.BoolVar(&cfg.CheckOnly, "check-only", false, "run no transfers; check the invariants (with --acked: those transfers must be present)")
	flag.Int64Var(&cfg.InitialBalance, "initial-balance", cfg.InitialBalance, "balance of every account at reset; the total must stay accounts × 2 × this")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "Usage: transfer [flags]\n\nMoves money between PostgreSQL and MariaDB accounts in global transactions and checks that none is lost.\n\nFlags:\n")
		flag.PrintDefaults()
	}
	flag.Parse()

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

func defaultConfig() Config {
	return Config{Workers: 8, Duration: 10 * time.Second, Accounts: 1000, DataDir: ".tandem/transfer-coordinator", Reset: true, InitialBalance: 1000}
}
