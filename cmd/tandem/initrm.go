package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tandem-tx/tandem/internal/decision"
	"github.com/tandem-tx/tandem/internal/rm"
)

func init() {
	register(&command{
		name:    "init-rm",
		summary: "create the decision tables on each database, print their id; say whether it can be a commit point and who else may write them",
		usage: `[--config FILE] [--allow ACCOUNT ...] --rm NAME=DRIVER:DSN ...

Creates the tables tandem_decision and tandem_decision_id (one row: the
table's id, random, made once), if they do not exist, on every resource
manager named (--rm, or rms: in the config file, as for tandem serve), adds
the participants column to a tandem_decision made by an older Tandem, and
reports per database: "created" or "exists", the table's id (every branch
decided at this commit point names it, and every party checks it), and
whether it can be a commit point (its commits are durable: PostgreSQL
fsync=on; MySQL/MariaDB innodb_flush_log_at_trx_commit=1, and sync_binlog=1
with the binary log on), and if not, why.

Whoever may write these tables can decide transactions: it warns when an
account other than the one in the DSN and those named by --allow (the
application's user and the coordinator's; a PostgreSQL role, or a MariaDB
user at any host "app" or at one host "app@10.0.0.%") may INSERT, UPDATE or
DELETE them (PostgreSQL also TRUNCATE; MariaDB also DROP, which TRUNCATE
TABLE needs; PUBLIC, role membership, database and global grants count). On MariaDB every account's grants are read from
the mysql schema, which needs an administrator; run as another user, it
shows that user's own grants and says so.

The coordinator and the SDK create the tables themselves when their
database user may; run this as a user allowed to CREATE TABLE when theirs
may not. Exits non-zero if the tables could not be created somewhere.

  tandem init-rm --allow app --allow tandem_coord --rm pg=postgres:'${TANDEM_PG_DSN}' --rm maria=mysql:'${TANDEM_MYSQL_DSN}'`,
		run: runInitRM,
	})
}

func runInitRM(args []string, stdout, stderr io.Writer) error {
	fs := newFlags(commands["init-rm"], stderr)
	file := fs.String("config", "", "YAML configuration file (its rms: are used)")
	var rms, allow multiFlag
	fs.Var(&rms, "rm", rmFlagHelp)
	fs.Var(&allow, "allow", "an account that may write the decision tables without a warning (repeatable): the application's user, the coordinator's")
	timeout := fs.Duration("timeout", 10*time.Second, "give up on a database after this long")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "tandem init-rm: unexpected argument %q\n", fs.Arg(0))
		return errUsage
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg, err := loadConfig(*file, rms, logger)
	if err != nil {
		return err
	}
	if len(cfg.RMs) == 0 {
		return errors.New("no resource managers: name them with --rm NAME=DRIVER:DSN (or rms: in --config FILE)")
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	rcs, err := cfg.RMConfigs()
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	var failed []string
	for _, rc := range rcs {
		table, point, err := initRM(rc, *timeout, allow)
		if err != nil {
			failed = append(failed, rc.Name)
			fmt.Fprintf(tw, "rm %s\t%s\tFAILED: %s\n", rc.Name, rc.Driver, oneLine(err.Error()))
			continue
		}
		fmt.Fprintf(tw, "rm %s\t%s\ttable %s\t%s\n", rc.Name, rc.Driver, table, point)
	}
	tw.Flush()
	if len(failed) > 0 {
		return fmt.Errorf("the decision table could not be created on %s (see above): fix what it says (a database that does not answer; a user not allowed to CREATE TABLE: run this as one that is) and run it again", strings.Join(failed, ", "))
	}
	return nil
}

// initRM creates the decision tables on one database. table is "created" or
// "exists" and the table's id; point says whether the database can be a
// commit point, and if not why, and who else may write the tables.
func initRM(rc rm.Config, timeout time.Duration, allow []string) (table, point string, err error) {
	conn, err := rm.Open(rc)
	if err != nil {
		return "", "", err
	}
	defer func() { _ = conn.Close() }() // read-only use: nothing to lose
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	d := conn.Dialect().Driver()
	existed, err := tableExists(ctx, conn, d)
	if err != nil {
		return "", "", fmt.Errorf("look for %s: %s", decision.TableName, conn.Redact(err.Error()))
	}
	if err := decision.Ensure(ctx, conn.DB(), d); err != nil {
		return "", "", errors.New(conn.Redact(err.Error()))
	}
	idCheck := decision.AddIDCheck(ctx, conn.DB(), d)
	id, checked, err := decision.ReadIDChecked(ctx, conn.DB(), d)
	if err != nil {
		return "", "", errors.New(conn.Redact(err.Error()))
	}
	table = "created"
	if existed {
		table = "exists"
	}
	table += "\tid " + id.String()
	if d == rm.MySQL && !checked {
		// Decisions still check the id, through the id table (slower).
		table += " (NOTE: the table does not reference its id itself yet: " + oneLine(conn.Redact(fmt.Sprint(idCheck))) + ")"
	}
	point = "commit point: yes"
	if why := decision.CheckDurable(ctx, conn.DB(), d); why != nil {
		point = "commit point: NO: " + oneLine(conn.Redact(why.Error()))
	}
	// Whoever may write the tables can decide transactions.
	if w, err := decision.OtherWriters(ctx, conn.DB(), d, allow); err != nil {
		point += "\tWARNING: could not read who may write the tables: " + oneLine(conn.Redact(err.Error()))
	} else {
		if len(w.Others) > 0 {
			point += "\tWARNING: also writable by " + strings.Join(w.Others, ", ") +
				" — anyone who can write them can decide transactions: keep them to the application's user and the coordinator's (REVOKE the rest, or name them with --allow)"
		}
		if w.Partial != "" {
			point += "\tNOTE: " + w.Partial
		}
	}
	return table, point, nil
}

// tableExists reports whether the decision table (tandem_decision) is where
// CREATE TABLE IF NOT EXISTS would find it: the connection's database
// (MySQL/MariaDB), the current schema — the first schema of the search path
// that exists, where CREATE TABLE makes it — on PostgreSQL (one further on
// the path is not it: a new table is made in the current schema).
func tableExists(ctx context.Context, conn *rm.Conn, d rm.Driver) (bool, error) {
	q := "SELECT coalesce(to_regclass(quote_ident(current_schema()) || '." + decision.TableName + "') IS NOT NULL, false)"
	if d == rm.MySQL {
		q = "SELECT COUNT(*) > 0 FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = '" + decision.TableName + "'"
	}
	var ok bool
	err := conn.DB().QueryRowContext(ctx, q).Scan(&ok)
	return ok, err
}

// oneLine folds a multi-line driver error onto one line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
