package rm

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // registers database/sql driver "pgx"
	"github.com/tandem-tx/tandem/waits"
	"github.com/tandem-tx/tandem/xid"
)

// Config names one resource manager the coordinator drives.
type Config struct {
	Name   string
	Driver Driver
	DSN    string
	// MaxConns caps the coordinator's pool to this database (default 16).
	MaxConns int
	// Waits receives the connection's wait events (phase 2 settles, recover
	// scans): the coordinator passes its own registry. Nil: a new one.
	Waits *waits.Registry
}

// Conn is the coordinator's pooled connection to one resource manager. It is
// safe for concurrent use. Every method is idempotent.
type Conn struct {
	name    string
	dialect Dialect
	db      *sql.DB
	secret  string // the DSN's password, scrubbed from every error
	scans   preparedScans
	cfgErr  atomic.Pointer[ConfigError] // the last configuration refusal, until a call succeeds
	waits   *waits.Registry
}

// Open checks the configuration and prepares a pool. It does not connect:
// a database that is down at start is reported by Ping and retried by phase 2
// and recovery, so the coordinator can start while a database is down.
func Open(cfg Config) (*Conn, error) {
	if err := xid.ValidateRMName(cfg.Name); err != nil {
		return nil, err
	}
	d, err := DialectFor(cfg.Driver)
	if err != nil {
		return nil, fmt.Errorf("rm %q: %w", cfg.Name, err)
	}
	secret, err := checkDSN(cfg.Driver, cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("rm %q: bad DSN for driver %s: %s", cfg.Name, cfg.Driver, Redact(err.Error(), secret))
	}
	db, err := sql.Open(d.SQLDriverName(), cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("rm %q: %s", cfg.Name, Redact(err.Error(), secret))
	}
	n := cfg.MaxConns
	if n <= 0 {
		n = 16
	}
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	db.SetConnMaxIdleTime(5 * time.Minute)
	reg := cfg.Waits
	if reg == nil {
		reg = waits.NewRegistry(waits.SideCoordinator)
	}
	return &Conn{name: cfg.Name, dialect: d, db: db, secret: secret, waits: reg}, nil
}

// checkDSN parses a DSN with its driver's own parser and returns its password.
func checkDSN(d Driver, dsn string) (password string, err error) {
	if strings.TrimSpace(dsn) == "" {
		return "", errors.New("the DSN is empty")
	}
	switch d {
	case Postgres:
		c, err := pgx.ParseConfig(dsn)
		if err != nil {
			return guessPassword(dsn), err
		}
		return c.Password, nil
	case MySQL:
		c, err := mysql.ParseDSN(dsn)
		if err != nil {
			return guessPassword(dsn), err
		}
		return c.Passwd, nil
	}
	return "", fmt.Errorf("unknown driver %q", d)
}

var userinfoPassword = regexp.MustCompile(`^(?:[a-z]+://)?[^:@/]*:([^@]*)@`)

func guessPassword(dsn string) string {
	// "postgres://u@h" without a password would match as user "postgres",
	// password "//u": that is a scheme, not a password.
	if m := userinfoPassword.FindStringSubmatch(dsn); m != nil && !strings.HasPrefix(m[1], "//") {
		return m[1]
	}
	return ""
}

// Redact replaces every occurrence of secret in s with "xxxxx".
func Redact(s, secret string) string {
	if secret == "" {
		return s
	}
	return strings.ReplaceAll(s, secret, "xxxxx")
}

// Name is the resource manager's configured name.
func (c *Conn) Name() string { return c.name }

// Dialect is the SQL this resource manager speaks.
func (c *Conn) Dialect() Dialect { return c.dialect }

// Close closes the pool.
func (c *Conn) Close() error { return c.db.Close() }

// DB is the pool itself, for statements outside a branch's life (the
// commit point's decision table, package decision). Errors from it are not
// redacted or observed: the caller wraps them with Redact.
func (c *Conn) DB() *sql.DB { return c.db }

// Redact strips the DSN's password from s.
func (c *Conn) Redact(s string) string { return Redact(s, c.secret) }

// Ping checks that the database answers.
func (c *Conn) Ping(ctx context.Context) error {
	return c.wrap("ping", c.db.PingContext(ctx))
}

// CommitPrepared commits a prepared branch. ErrBranchNotFound means the
// database does not know it: never prepared, or already settled. The call,
// waiting for a pooled connection included, is a "rm commit prepared" wait
// in the Config's Waits registry.
func (c *Conn) CommitPrepared(ctx context.Context, b xid.Branch) error {
	return c.settle(ctx, waits.RMCommitPrepared, b, c.dialect.CommitPrepared(b))
}

// RollbackPrepared rolls back a prepared branch; ErrBranchNotFound as for
// CommitPrepared. It is a "rm rollback prepared" wait.
func (c *Conn) RollbackPrepared(ctx context.Context, b xid.Branch) error {
	return c.settle(ctx, waits.RMRollbackPrepared, b, c.dialect.RollbackPrepared(b))
}

func (c *Conn) settle(ctx context.Context, ev waits.Event, b xid.Branch, stmt string) error {
	start := time.Now()
	_, err := c.db.ExecContext(ctx, stmt)
	c.waits.SinceTx(ev, start, b.GTRID, c.name)
	if err != nil && c.dialect.IsNotFound(err) {
		return ErrBranchNotFound
	}
	return c.wrap(strings.TrimPrefix(ev.String(), "rm "), err) // "commit prepared: ..."
}

// Recover lists this database's prepared branches in Tandem's format whose
// bqual is this resource manager's name. (Two names configured for one
// database each see only their own branches.) The scan is a "rm recover
// scan" wait in the Config's Waits registry.
func (c *Conn) Recover(ctx context.Context) ([]InDoubt, error) {
	start := time.Now()
	all, err := c.dialect.Recover(ctx, c.db)
	c.waits.Since(waits.RMRecoverScan, start)
	if err != nil {
		return nil, c.wrap("recover scan", err)
	}
	c.observe(nil)
	mine := all[:0]
	for _, d := range all {
		if d.Branch.RM == c.name {
			mine = append(mine, d)
		}
	}
	return mine, nil
}

// wrap names the resource manager and strips the password from err's text.
func (c *Conn) wrap(what string, err error) error {
	c.observe(err)
	if err == nil {
		return nil
	}
	if c.secret != "" && strings.Contains(err.Error(), c.secret) {
		return fmt.Errorf("rm %q: %s: %s", c.name, what, Redact(err.Error(), c.secret))
	}
	return fmt.Errorf("rm %q: %s: %w", c.name, what, err)
}
