package rm

import (
	"errors"
	"fmt"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrMisconfigured matches a *ConfigError.
var ErrMisconfigured = errors.New("rm: misconfigured")

// ConfigError is a database's refusal of the coordinator's login or of the
// database it names: a wrong password or user, a database that does not
// exist, a missing privilege. Unlike an outage, it does not heal by
// retrying: an operator must change the DSN (or the database's grants).
type ConfigError struct {
	RM  string
	Err error // the database's answer, password scrubbed
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("rm %q is misconfigured: its database refused the coordinator (%v): fix the DSN of rm %q "+
		"(user, password, database name) or the database's grants, then restart the coordinator; "+
		"it is checked again at every in-doubt scan", e.RM, e.Err, e.RM)
}
func (e *ConfigError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrMisconfigured) true.
func (e *ConfigError) Is(target error) bool { return target == ErrMisconfigured }

// isConfigError reports whether err is the database refusing the login,
// the database name or a privilege (as opposed to an outage or a statement
// error): PostgreSQL's SQLSTATE class 28 (invalid authorization) and 3D000
// (no such database); MySQL/MariaDB's access-denied and unknown-database
// errors.
func isConfigError(err error) bool {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return len(pg.Code) == 5 && (pg.Code[:2] == "28" || pg.Code == "3D000")
	}
	var my *mysql.MySQLError
	if errors.As(err, &my) {
		switch my.Number {
		case 1044, // access denied to database
			1045, // access denied for user (password)
			1049, // unknown database
			1227, // access denied: needs a privilege (XA RECOVER on MySQL 8)
			1698: // access denied (unix socket / plugin auth)
			return true
		}
	}
	return false
}

// observe records the outcome of a call to the database: a configuration
// refusal is kept until a later call gets in (it succeeds, or the database
// answers with an error of another kind); an outage leaves it as is.
func (c *Conn) observe(err error) {
	var pg *pgconn.PgError
	var my *mysql.MySQLError
	switch {
	case err == nil:
		c.cfgErr.Store(nil)
	case isConfigError(err):
		c.cfgErr.Store(&ConfigError{RM: c.name, Err: errors.New(Redact(err.Error(), c.secret))})
	case errors.As(err, &pg), errors.As(err, &my):
		c.cfgErr.Store(nil) // logged in: the database answered the statement
	}
}

// Misconfigured returns the database's last configuration refusal (a
// *ConfigError), or nil once a later call succeeded or when there was none.
func (c *Conn) Misconfigured() error {
	if e := c.cfgErr.Load(); e != nil {
		return e
	}
	return nil
}
