package rm

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
)

func TestConfigErrorsAreToldFromOutages(t *testing.T) {
	c, err := Open(Config{Name: "pg", Driver: Postgres, DSN: "postgres://u:s3cret@127.0.0.1:1/db"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	steps := []struct {
		err  error
		want bool // misconfigured after it
	}{
		{errors.New("dial tcp 127.0.0.1:1: connection refused"), false},
		{fmt.Errorf("connect: %w", &pgconn.PgError{Code: "28P01", Message: "password authentication failed for user \"u\" s3cret"}), true},
		{errors.New("dial tcp: connection refused"), true}, // an outage says nothing new: kept
		{&pgconn.PgError{Code: "3D000", Message: "database \"db\" does not exist"}, true},
		{&pgconn.PgError{Code: "42704", Message: "prepared transaction does not exist"}, false}, // logged in
		{&mysql.MySQLError{Number: 1045, Message: "Access denied"}, true},
		{nil, false},
	}
	for i, s := range steps {
		c.observe(s.err)
		got := c.Misconfigured()
		if (got != nil) != s.want {
			t.Fatalf("step %d (%v): Misconfigured() = %v, want misconfigured=%v", i, s.err, got, s.want)
		}
		if got != nil {
			if !errors.Is(got, ErrMisconfigured) || !strings.Contains(got.Error(), "fix the DSN of rm \"pg\"") {
				t.Errorf("step %d: %v does not match ErrMisconfigured or does not say what to fix", i, got)
			}
			if strings.Contains(got.Error(), "s3cret") {
				t.Errorf("step %d: the password leaks: %v", i, got)
			}
		}
	}
}
