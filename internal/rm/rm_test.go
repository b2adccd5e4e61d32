package rm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tandem-tx/tandem/waits"
	"github.com/tandem-tx/tandem/xid"
)

const secret = "Sekr1tPw"

func mustGTRID(t testing.TB, s string) xid.GTRID {
	t.Helper()
	g, err := xid.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

const gtridHex = "0000019a8f3c2b1e5d0c7a9b3e41f2aa"

func TestOpenRejectsBadConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want []string // all in the error
	}{
		{"pg bad port", Config{Name: "pg", Driver: Postgres, DSN: "postgres://u:" + secret + "@127.0.0.1:notaport/db"}, []string{`rm "pg"`, "bad DSN"}},
		{"pg bad sslmode", Config{Name: "pg", Driver: Postgres, DSN: "postgres://u:" + secret + "@127.0.0.1:1/db?sslmode=bogus"}, []string{`rm "pg"`, "bad DSN"}},
		{"pg bad url", Config{Name: "pg", Driver: Postgres, DSN: "postgres://u:" + secret + "@[::1/db"}, []string{`rm "pg"`, "bad DSN"}},
		{"pg keyword/value", Config{Name: "pg", Driver: Postgres, DSN: "host=127.0.0.1 port=bogus user=u password=" + secret}, []string{`rm "pg"`, "bad DSN"}},
		// No password to hide: the error must show the DSN as it is, not mangled.
		{"pg no password", Config{Name: "pg", Driver: Postgres, DSN: "postgres://u@127.0.0.1:notaport/db"}, []string{`rm "pg"`, "postgres://u@127.0.0.1:notaport/db"}},
		{"pg empty", Config{Name: "pg", Driver: Postgres, DSN: "  "}, []string{`rm "pg"`, "empty"}},
		{"mysql bad bool", Config{Name: "maria", Driver: MySQL, DSN: "u:" + secret + "@tcp(127.0.0.1:1)/db?parseTime=maybe"}, []string{`rm "maria"`, "bad DSN"}},
		{"mysql unterminated", Config{Name: "maria", Driver: MySQL, DSN: "u:" + secret + "@tcp(127.0.0.1:1/db"}, []string{`rm "maria"`, "bad DSN"}},
		{"mysql no slash", Config{Name: "maria", Driver: MySQL, DSN: "u:" + secret + "@tcp(127.0.0.1:1)"}, []string{`rm "maria"`, "bad DSN"}},
		{"mysql empty", Config{Name: "maria", Driver: MySQL, DSN: ""}, []string{`rm "maria"`, "empty"}},
		{"unknown driver", Config{Name: "ora", Driver: "oracle", DSN: "x"}, []string{`rm "ora"`, `"oracle"`}},
		{"bad name", Config{Name: "Bad Name", Driver: Postgres, DSN: "postgres://u@127.0.0.1:1/db"}, []string{`"Bad Name"`}},
		{"empty name", Config{Name: "", Driver: Postgres, DSN: "postgres://u@127.0.0.1:1/db"}, []string{"resource manager name"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Open(tc.cfg)
			if err == nil {
				c.Close()
				t.Fatalf("Open(%+v): no error", tc.cfg)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Open: %v; want it to contain %q", err, w)
				}
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("Open: the error shows the password: %v", err)
			}
		})
	}
}

func TestOpenMakesNoConnection(t *testing.T) {
	for _, cfg := range []Config{
		{Name: "pg", Driver: Postgres, DSN: "postgres://u:" + secret + "@127.0.0.1:1/db"},
		{Name: "maria", Driver: MySQL, DSN: "u:" + secret + "@tcp(127.0.0.1:1)/db"},
	} {
		c, err := Open(cfg)
		if err != nil {
			t.Fatalf("Open(%s): %v (a database that is down must not fail Open)", cfg.Name, err)
		}
		if c.Name() != cfg.Name || c.Dialect().Driver() != cfg.Driver {
			t.Errorf("Open(%s): name %q driver %q", cfg.Name, c.Name(), c.Dialect().Driver())
		}
		err = c.Ping(context.Background())
		if err == nil {
			t.Errorf("Ping(%s) of port 1 succeeded", cfg.Name)
		} else {
			if !strings.Contains(err.Error(), fmt.Sprintf("rm %q", cfg.Name)) {
				t.Errorf("Ping(%s): error does not name the RM: %v", cfg.Name, err)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("Ping(%s): error shows the password: %v", cfg.Name, err)
			}
		}
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
}

func TestRedact(t *testing.T) {
	tests := []struct{ s, secret, want string }{
		{"no secret here", "", "no secret here"},
		{"pw=abc and again abc", "abc", "pw=xxxxx and again xxxxx"},
		{"nothing to hide", "abc", "nothing to hide"},
		{"", "abc", ""},
	}
	for _, tc := range tests {
		if got := Redact(tc.s, tc.secret); got != tc.want {
			t.Errorf("Redact(%q, %q) = %q, want %q", tc.s, tc.secret, got, tc.want)
		}
	}
}

func TestGuessPassword(t *testing.T) {
	tests := map[string]string{
		"postgres://u:pw@h/db":   "pw",
		"postgresql://u:pw@h/db": "pw",
		"u:pw@tcp(h:3306)/db":    "pw",
		"postgres://u@h/db":      "",
		"host=h user=u":          "",
		"":                       "",
	}
	for dsn, want := range tests {
		if got := guessPassword(dsn); got != want {
			t.Errorf("guessPassword(%q) = %q, want %q", dsn, got, want)
		}
	}
}

func TestWrapRedactsAndKeepsTheChain(t *testing.T) {
	c := &Conn{name: "pg", secret: secret}
	if c.wrap("x", nil) != nil {
		t.Fatal("wrap(nil) != nil")
	}
	err := c.wrap("ping", fmt.Errorf("auth failed for password %s: %w", secret, io.EOF))
	if strings.Contains(err.Error(), secret) || !strings.Contains(err.Error(), `rm "pg": ping:`) {
		t.Errorf("wrap: %v", err)
	}
	err = c.wrap("ping", io.ErrUnexpectedEOF)
	if !errors.Is(err, io.ErrUnexpectedEOF) || !strings.Contains(err.Error(), `rm "pg": ping:`) {
		t.Errorf("wrap without a secret in the text lost the cause or the name: %v", err)
	}
}

func TestParseDriver(t *testing.T) {
	for in, want := range map[string]Driver{
		"postgres": Postgres, "postgresql": Postgres, "pgx": Postgres,
		"mysql": MySQL, "mariadb": MySQL,
	} {
		got, err := ParseDriver(in)
		if err != nil || got != want {
			t.Errorf("ParseDriver(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "oracle", "Postgres", "MYSQL"} {
		if d, err := ParseDriver(in); err == nil {
			t.Errorf("ParseDriver(%q) = %q, want an error", in, d)
		}
	}
	if d, err := DialectFor("oracle"); err == nil || d != nil {
		t.Errorf("DialectFor(oracle) = %v, %v; want an error", d, err)
	}
}

func TestPostgresDialectSQL(t *testing.T) {
	d, err := DialectFor(Postgres)
	if err != nil {
		t.Fatal(err)
	}
	b := xid.Branch{GTRID: mustGTRID(t, gtridHex), RM: "pg"}
	gid := "'tandem:" + gtridHex + ":pg'"
	check(t, "Driver", d.Driver(), Postgres)
	check(t, "SQLDriverName", d.SQLDriverName(), "pgx")
	check(t, "Begin", d.Begin(b), "BEGIN")
	check(t, "Prepare", d.Prepare(b), []string{"PREPARE TRANSACTION " + gid})
	check(t, "CommitOnePhase", d.CommitOnePhase(b), []string{"COMMIT"})
	check(t, "RollbackActive", d.RollbackActive(b), []string{"ROLLBACK"})
	check(t, "CommitPrepared", d.CommitPrepared(b), "COMMIT PREPARED "+gid)
	check(t, "RollbackPrepared", d.RollbackPrepared(b), "ROLLBACK PREPARED "+gid)
	check(t, "ReadOnlyQuery", d.ReadOnlyQuery(), "SELECT txid_current_if_assigned() IS NULL")
	check(t, "SessionBound", d.SessionBound(), false)
}

func TestMySQLDialectSQL(t *testing.T) {
	d, err := DialectFor(MySQL)
	if err != nil {
		t.Fatal(err)
	}
	b := xid.Branch{GTRID: mustGTRID(t, gtridHex), RM: "maria"}
	x := "'" + gtridHex + "','maria',1413566020"
	check(t, "Driver", d.Driver(), MySQL)
	check(t, "SQLDriverName", d.SQLDriverName(), "mysql")
	check(t, "Begin", d.Begin(b), "XA START "+x)
	check(t, "Prepare", d.Prepare(b), []string{"XA END " + x, "XA PREPARE " + x})
	check(t, "CommitOnePhase", d.CommitOnePhase(b), []string{"XA END " + x, "XA COMMIT " + x + " ONE PHASE"})
	check(t, "RollbackActive", d.RollbackActive(b), []string{"XA END " + x, "XA ROLLBACK " + x})
	check(t, "CommitPrepared", d.CommitPrepared(b), "XA COMMIT "+x)
	check(t, "RollbackPrepared", d.RollbackPrepared(b), "XA ROLLBACK "+x)
	check(t, "ReadOnlyQuery", d.ReadOnlyQuery(), "")
	check(t, "SessionBound", d.SessionBound(), true)
}

func check(t *testing.T, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s = %#v, want %#v", what, got, want)
	}
}

func TestIsNotFound(t *testing.T) {
	pgNotFound := &pgconn.PgError{Code: "42704", Message: "prepared transaction with identifier \"x\" does not exist"}
	myNotFound := &mysql.MySQLError{Number: 1397, Message: "XAER_NOTA: Unknown XID"}
	errs := map[string]error{
		"nil":             nil,
		"plain":           errors.New("prepared transaction does not exist 42704 1397"),
		"pg 42704":        pgNotFound,
		"pg 42704 deep":   fmt.Errorf("rm: %w", fmt.Errorf("exec: %w", pgNotFound)),
		"pg other":        &pgconn.PgError{Code: "42P01"},
		"pg empty":        &pgconn.PgError{},
		"mysql 1397":      myNotFound,
		"mysql 1397 deep": fmt.Errorf("rm: %w", myNotFound),
		"mysql other":     &mysql.MySQLError{Number: 1399},
		"mysql empty":     &mysql.MySQLError{},
		"branch notfound": ErrBranchNotFound,
		"canceled":        context.Canceled,
	}
	wantTrue := map[Driver]map[string]bool{
		Postgres: {"pg 42704": true, "pg 42704 deep": true},
		MySQL:    {"mysql 1397": true, "mysql 1397 deep": true},
	}
	for drv, yes := range wantTrue {
		d, _ := DialectFor(drv)
		for name, err := range errs {
			if got := d.IsNotFound(err); got != yes[name] {
				t.Errorf("%s IsNotFound(%s: %v) = %v, want %v", drv, name, err, got, yes[name])
			}
		}
	}
}

// A connection records its waits in the registry its Config names (the
// coordinator's), and in one of its own without one.
func TestConnRecordsIntoTheConfiguredRegistry(t *testing.T) {
	reg := waits.NewRegistry(waits.SideCoordinator)
	mine, err := Open(Config{Name: "pg", Driver: Postgres, DSN: "postgres://u:p@127.0.0.1:1/db", Waits: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Close()
	other, err := Open(Config{Name: "pg", Driver: Postgres, DSN: "postgres://u:p@127.0.0.1:1/db"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Port 1: nothing listens, each call fails, and still counts as a wait.
	_, _ = mine.Recover(ctx)
	_ = mine.CommitPrepared(ctx, xid.Branch{GTRID: xid.New(), RM: "pg"})
	_, _ = other.Recover(ctx)
	s := reg.Snapshot()
	if n := s.Get(waits.RMRecoverScan).Count; n != 1 {
		t.Errorf("configured registry: %d %q waits, want 1 (other's must not land here)", n, waits.RMRecoverScan)
	}
	if n := s.Get(waits.RMCommitPrepared).Count; n != 1 {
		t.Errorf("configured registry: %d %q waits, want 1", n, waits.RMCommitPrepared)
	}
	if n := other.waits.Snapshot().Get(waits.RMRecoverScan).Count; n != 1 {
		t.Errorf("default registry: %d %q waits, want 1", n, waits.RMRecoverScan)
	}
}
