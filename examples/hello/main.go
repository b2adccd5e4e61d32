// Command hello writes one row to PostgreSQL and one to MariaDB/MySQL in a
// single global transaction through a Tandem coordinator: both rows commit,
// or neither does. It is the README's first program, in full.
//
// Start the databases and a coordinator first (see the README), then:
//
//	eval "$(scripts/db env)"   # TANDEM_PG_DSN and TANDEM_MYSQL_DSN
//	go run ./examples/hello
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	_ "github.com/go-sql-driver/mysql" // database/sql driver "mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/tandem-tx/tandem/client"
)

// Config is what hello needs: where the databases and the coordinator are,
// and the resource-manager names the coordinator was started with (its
// --rm NAME=...): the SDK and the coordinator must use the same names.
type Config struct {
	PGDSN, MySQLDSN string
	Coordinator     string
	PGName          string
	MariaName       string
	// DecideAt: "auto" (default: MariaDB's own commit decides, with its
	// decision row, when its decision table exists), "coordinator" or "rm".
	DecideAt client.DecideAt
}

func main() {
	cfg := Config{}
	flag.StringVar(&cfg.PGDSN, "pg", os.Getenv("TANDEM_PG_DSN"), "PostgreSQL DSN (default $TANDEM_PG_DSN)")
	flag.StringVar(&cfg.MySQLDSN, "mysql", os.Getenv("TANDEM_MYSQL_DSN"),
		"MariaDB/MySQL DSN, with multiStatements=true&interpolateParams=true (default $TANDEM_MYSQL_DSN)")
	flag.StringVar(&cfg.Coordinator, "coordinator", "127.0.0.1:7070", "the coordinator's gRPC address")
	flag.StringVar(&cfg.PGName, "rm-pg", "pg", "the coordinator's name for the PostgreSQL database (its --rm pg=...)")
	flag.StringVar(&cfg.MariaName, "rm-maria", "maria", "the coordinator's name for the MariaDB database (its --rm maria=...)")
	decideAt := flag.String("decide-at", "auto", "where the transaction is decided: auto, coordinator or rm")
	flag.Parse()
	var err error
	if cfg.DecideAt, err = client.ParseDecideAt(*decideAt); err != nil {
		fmt.Fprintln(os.Stderr, "hello:", err)
		os.Exit(2)
	}
	if cfg.PGDSN == "" || cfg.MySQLDSN == "" {
		fmt.Fprintln(os.Stderr, `hello: set TANDEM_PG_DSN and TANDEM_MYSQL_DSN (eval "$(scripts/db env)"), or pass -pg and -mysql`)
		os.Exit(2)
	}
	// Every call gets a deadline: nothing here can wait forever.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := Run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "hello:", err)
		os.Exit(1)
	}
}

// Run creates the table tandem_hello on both databases if it is missing,
// inserts one row into each in one global transaction, and prints what
// happened and what each database now holds for it.
func Run(ctx context.Context, cfg Config, out io.Writer) error {
	pgDB, err := sql.Open("pgx", cfg.PGDSN)
	if err != nil {
		return fmt.Errorf("PostgreSQL DSN: %w", err)
	}
	defer pgDB.Close()
	myDB, err := sql.Open("mysql", cfg.MySQLDSN)
	if err != nil {
		return fmt.Errorf("MariaDB DSN: %w", err)
	}
	defer myDB.Close()
	for _, db := range []*sql.DB{pgDB, myDB} {
		if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS tandem_hello (id BIGINT PRIMARY KEY, note VARCHAR(100))"); err != nil {
			return fmt.Errorf("create table tandem_hello: %w", err)
		}
	}

	cli, err := client.New(client.Config{
		Coordinator: cfg.Coordinator, // contacted only when two or more branches wrote and no commit point qualifies
		RMs: []client.RM{
			{Name: cfg.PGName, Driver: "postgres", DB: pgDB},
			{Name: cfg.MariaName, Driver: "mysql", MultiStatements: true, DB: myDB},
		},
		Defaults: client.CommitOptions{DecideAt: cfg.DecideAt},
	})
	if err != nil {
		return err
	}
	defer cli.Close()

	// The application's own connections: each branch runs on one.
	pc, err := pgDB.Conn(ctx)
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer pc.Close()
	mc, err := myDB.Conn(ctx)
	if err != nil {
		return fmt.Errorf("connect to MariaDB: %w", err)
	}
	defer mc.Close()

	id := time.Now().UnixNano()
	res, err := cli.RunInTx(ctx, func(tx *client.Tx) error {
		pg, err := tx.Branch(ctx, cfg.PGName, pc) // no round trip yet: the branch begins with its first statement
		if err != nil {
			return err
		}
		maria, err := tx.Branch(ctx, cfg.MariaName, mc)
		if err != nil {
			return err
		}
		note := "hello from " + tx.GTRID().String()
		if _, err := pg.ExecContext(ctx, "INSERT INTO tandem_hello (id, note) VALUES ($1, $2)", id, note); err != nil {
			return err
		}
		_, err = maria.ExecContext(ctx, "INSERT INTO tandem_hello (id, note) VALUES (?, ?)", id, note)
		return err
	})
	switch {
	case errors.Is(err, client.ErrAborted):
		return fmt.Errorf("rolled back on both databases (safe to run again): %w", err)
	case errors.Is(err, client.ErrOutcomeUnknown):
		// Never half-committed; its message names the gtrid to ask about
		// (tandem status GTRID) once the coordinator is reachable.
		return err
	case err != nil:
		return err
	}
	where := ""
	if res.CommitPoint != "" {
		where = " at " + res.CommitPoint
	}
	fmt.Fprintf(out, "committed %s (%s%s, %d coordinator calls)\n", res.GTRID, res.Path, where, res.CoordinatorCalls)

	for _, q := range []struct {
		name string
		db   *sql.DB
		stmt string
	}{
		{"postgres", pgDB, "SELECT note FROM tandem_hello WHERE id = $1"},
		{"mariadb ", myDB, "SELECT note FROM tandem_hello WHERE id = ?"},
	} {
		var note string
		if err := q.db.QueryRowContext(ctx, q.stmt, id).Scan(&note); err != nil {
			return fmt.Errorf("read the row back from %s: %w", q.name, err)
		}
		fmt.Fprintf(out, "  %s: %q\n", q.name, note)
	}
	return nil
}
