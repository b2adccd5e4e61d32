package decision

import (
	"database/sql"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/tandem-tx/tandem/internal/rm"
)

// adminDB opens the administrator's connection named by env (an account
// that may create roles and read every grant), or skips: scripts/db's
// databases have one through their sockets (TANDEM_PG_ADMIN_DSN, e.g.
// "host=.tandem/pg/run port=55432 user=postgres dbname=tandem";
// TANDEM_MYSQL_ADMIN_DSN, e.g. "root@unix(.tandem/mariadb/run/mariadb.sock)/tandem").
func adminDB(t *testing.T, e *dbEnv) *sql.DB {
	t.Helper()
	env, driver := "TANDEM_PG_ADMIN_DSN", "pgx"
	if e.d == rm.MySQL {
		env, driver = "TANDEM_MYSQL_ADMIN_DSN", "mysql"
	}
	dsn := os.Getenv(env)
	if dsn == "" {
		t.Skipf("%s not set: the grants of other accounts need an administrator to make", env)
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// OtherWriters lists PUBLIC when either table is granted to it, and says
// nothing for tables only their owner writes.
func TestOtherWritersSeesPublic(t *testing.T) {
	forEachDB(t, func(t *testing.T, e *dbEnv) {
		if e.d != rm.Postgres {
			t.Skip("PostgreSQL: MariaDB has no PUBLIC")
		}
		ctx := testCtx(t)
		w, err := e.tab.otherWriters(ctx, e.db, e.d, nil)
		if err != nil || len(w.Others) != 0 || w.Partial != "" {
			t.Fatalf("fresh tables: %+v %v, want nobody else", w, err)
		}
		if _, err := e.db.ExecContext(ctx, "GRANT UPDATE ON "+e.tab.id+" TO PUBLIC"); err != nil {
			t.Fatal(err)
		}
		w, err = e.tab.otherWriters(ctx, e.db, e.d, nil)
		if err != nil || !slices.Equal(w.Others, []string{"PUBLIC"}) {
			t.Fatalf("after GRANT UPDATE ON the id table TO PUBLIC: %+v %v, want PUBLIC", w, err)
		}
	})
}

// Another account granted a write on either table is listed, unless
// allowed; on MariaDB a user that may not read the mysql schema gets its
// own grants and a Partial note.
func TestOtherWritersSeesOtherAccounts(t *testing.T) {
	forEachDB(t, func(t *testing.T, e *dbEnv) {
		ctx := testCtx(t)
		if e.d == rm.MySQL {
			w, err := e.tab.otherWriters(ctx, e.db, e.d, nil)
			if err != nil {
				t.Fatal(err)
			}
			if w.Partial == "" {
				t.Logf("this user reads the mysql schema: %+v", w)
			} else if !strings.Contains(w.Partial, "administrator") {
				t.Errorf("Partial %q does not say what to do", w.Partial)
			}
		}
		admin := adminDB(t, e)
		role := "tandem_w" + randHex(t)
		create, grant, drop := "CREATE ROLE "+role, "GRANT DELETE ON "+e.tab.name+" TO "+role, "DROP ROLE "+role
		want := role
		if e.d == rm.MySQL {
			create, grant, drop = "CREATE USER '"+role+"'@'%'", "GRANT INSERT ON "+e.tab.id+" TO '"+role+"'@'%'", "DROP USER '"+role+"'@'%'"
			want = "'" + role + "'@'%'"
		}
		for _, s := range []string{create, grant} {
			if _, err := admin.ExecContext(ctx, s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		t.Cleanup(func() {
			if e.d == rm.Postgres {
				_, _ = admin.Exec("REVOKE ALL ON " + e.tab.name + " FROM " + role)
			}
			if _, err := admin.Exec(drop); err != nil {
				t.Errorf("%s: %v", drop, err)
			}
		})
		// As the administrator would run init-rm: it reads every grant.
		w, err := e.tab.otherWriters(ctx, admin, e.d, nil)
		if err != nil || !slices.Contains(w.Others, want) || w.Partial != "" {
			t.Fatalf("OtherWriters after granting %s: %+v %v, want it listed, nothing partial", role, w, err)
		}
		if e.d == rm.MySQL && !slices.ContainsFunc(w.Others, func(s string) bool { return strings.HasPrefix(s, "'tandem'@") }) {
			t.Errorf("the tandem user (ALL on the database) is not listed: %v", w.Others)
		}
		w, err = e.tab.otherWriters(ctx, admin, e.d, []string{role, "tandem"})
		if err != nil || slices.Contains(w.Others, want) || slices.ContainsFunc(w.Others, func(s string) bool { return strings.Contains(s, "tandem'@") || s == "tandem" }) {
			t.Fatalf("OtherWriters with %s and tandem allowed: %+v %v, want neither listed", role, w, err)
		}
	})
}

// On MariaDB TRUNCATE TABLE needs the DROP privilege, and DROP TABLE loses
// every row as surely as a DELETE: an account with DROP on either table (or
// the database) may wipe the decisions, and is listed. (PostgreSQL's
// TRUNCATE is its own privilege, listed already.)
func TestOtherWritersSeesMariaDBDrop(t *testing.T) {
	forEachDB(t, func(t *testing.T, e *dbEnv) {
		if e.d != rm.MySQL {
			t.Skip("MariaDB: its TRUNCATE is the DROP privilege")
		}
		ctx := testCtx(t)
		admin := adminDB(t, e)
		user := "tandem_d" + randHex(t)
		for _, s := range []string{"CREATE USER '" + user + "'@'%'", "GRANT SELECT, DROP ON " + e.tab.name + " TO '" + user + "'@'%'"} {
			if _, err := admin.ExecContext(ctx, s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		t.Cleanup(func() {
			if _, err := admin.Exec("DROP USER '" + user + "'@'%'"); err != nil {
				t.Errorf("drop user: %v", err)
			}
		})
		w, err := e.tab.otherWriters(ctx, admin, e.d, nil)
		if err != nil || !slices.Contains(w.Others, "'"+user+"'@'%'") {
			t.Fatalf("OtherWriters after GRANT SELECT, DROP ON %s (TRUNCATE TABLE deletes every decision): %+v %v, want '%s'@'%%' listed", e.tab.name, w, err, user)
		}
	})
}
