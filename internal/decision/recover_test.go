package decision

import (
	"os"
	"strings"
	"testing"

	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/xid"
)

// A branch prepared under a commit-point name is listed by the recover scan
// with its commit point, and the scan of a coordinator that predates commit
// points (PostgreSQL gid LIKE 'tandem:%'; MySQL format ID TAND) does not
// match it.
func TestRecoverSeesCommitPointBranches(t *testing.T) {
	forEachDB(t, func(t *testing.T, e *dbEnv) {
		ctx := testCtx(t)
		dsn := map[rm.Driver]string{rm.Postgres: "TANDEM_PG_DSN", rm.MySQL: "TANDEM_MYSQL_DSN"}[e.d]
		name := "dcp" + randHex(t) // this test's own RM name: the scan lists only its branches
		c, err := rm.Open(rm.Config{Name: name, Driver: e.d, DSN: os.Getenv(dsn)})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		b := xid.Branch{GTRID: xid.New(), RM: name, CommitPoint: "maria"}
		conn, err := e.db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		exec := func(s string) {
			t.Helper()
			if _, err := conn.ExecContext(ctx, s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		ins := "INSERT INTO " + e.scratch + " (id) VALUES ('" + b.GTRID.String() + "')"
		var oldScan string
		if e.d == rm.Postgres {
			exec("BEGIN")
			exec(ins)
			exec("PREPARE TRANSACTION '" + b.PostgresGID() + "'")
			defer exec("ROLLBACK PREPARED '" + b.PostgresGID() + "'")
			oldScan = "SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE 'tandem:%' AND gid LIKE '%" + b.GTRID.String() + "%'"
		} else {
			x := b.MySQLXID()
			exec("XA START " + x)
			exec(ins)
			exec("XA END " + x)
			exec("XA PREPARE " + x)
			defer exec("XA ROLLBACK " + x) // same session: MariaDB binds the branch to it
		}
		found, err := c.Recover(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(found) != 1 || found[0].Branch != b {
			t.Fatalf("Recover = %+v, want the one branch %+v", found, b)
		}
		if e.d == rm.Postgres {
			var n int
			if err := e.db.QueryRowContext(ctx, oldScan).Scan(&n); err != nil || n != 0 {
				t.Fatalf("the old scan matched %d GIDs (%v), want 0", n, err)
			}
		} else {
			rows, err := e.db.QueryContext(ctx, "XA RECOVER")
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			for rows.Next() {
				var f int64
				var gl, bl int
				var data []byte
				if err := rows.Scan(&f, &gl, &bl, &data); err != nil {
					t.Fatal(err)
				}
				if strings.Contains(string(data), b.GTRID.String()) && f == xid.FormatID {
					t.Fatalf("the branch has the old format ID %d", f)
				}
			}
		}
	})
}
