package decision

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/xid"
)

func TestRefusedTellsTheCases(t *testing.T) {
	for _, c := range []struct {
		err error
		ok  bool
		why string
	}{
		{nil, false, ""},
		{io.ErrUnexpectedEOF, false, ""},
		{&pgconn.PgError{Code: "23505"}, true, RefusedDuplicate},
		{fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: "23505"}), true, RefusedDuplicate},
		{&pgconn.PgError{Code: "23502", ColumnName: "began_at"}, true, RefusedTooOld},
		{&pgconn.PgError{Code: "23502", ColumnName: "id"}, false, ""}, // an application's NOT NULL
		{&pgconn.PgError{Code: "55P03"}, false, ""},
		{&pgconn.PgError{Code: "40001"}, false, ""},
		{&mysql.MySQLError{Number: 1062, Message: "Duplicate entry 'x' for key 'PRIMARY'"}, true, RefusedDuplicate},
		{&mysql.MySQLError{Number: 1048, Message: "Column 'began_at' cannot be null"}, true, RefusedTooOld},
		{&mysql.MySQLError{Number: 1048, Message: "Column 'id' cannot be null"}, false, ""},
		{&mysql.MySQLError{Number: 1205}, false, ""},
		{mysql.ErrInvalidConn, false, ""},
	} {
		why, ok := Refused(c.err)
		if ok != c.ok || why != c.why {
			t.Errorf("Refused(%v) = %q %v, want %q %v", c.err, why, ok, c.why, c.ok)
		}
	}
}

func TestStatementShapes(t *testing.T) {
	g := xid.New()
	f := []xid.GTRID{xid.New(), xid.New()}
	for _, d := range []rm.Driver{rm.Postgres, rm.MySQL} {
		s := CommitStatements(d, g, time.Minute, nil)
		if s[len(s)-1] != "COMMIT" {
			t.Errorf("%s: the last statement is %q, want COMMIT", d, s[len(s)-1])
		}
		if d == rm.Postgres && s[0] != "SET LOCAL synchronous_commit = on" {
			t.Errorf("%s: the first statement is %q, want synchronous_commit forced on", d, s[0])
		}
		ins := s[len(s)-2]
		if !strings.HasPrefix(ins, "INSERT INTO "+TableName+" ") || !strings.Contains(ins, "'"+g.String()+"', 'C'") || !strings.Contains(ins, "60000000") {
			t.Errorf("%s: insert %q does not record C for %s with a 60 s age", d, ins, g)
		}
		for _, st := range s {
			if strings.HasPrefix(st, "DELETE") {
				t.Errorf("%s: a DELETE with nothing to forget: %q", d, st)
			}
		}
		s = CommitStatements(d, g, time.Minute, f)
		del := s[len(s)-2]
		if want := "DELETE FROM " + TableName + " WHERE outcome = 'C' AND gtrid IN ('" + f[0].String() + "','" + f[1].String() + "')"; del != want {
			t.Errorf("%s: forget = %q, want %q", d, del, want)
		}
		if !strings.Contains(DDL(d), "CREATE TABLE IF NOT EXISTS "+TableName+" ") {
			t.Errorf("%s: DDL %q", d, DDL(d))
		}
	}
}

func TestZeroGTRIDIsRefused(t *testing.T) {
	if _, err := Resolve(t.Context(), nil, rm.Postgres, xid.GTRID{}, time.Second); err == nil {
		t.Fatal("Resolve of the zero gtrid: no error")
	}
	if _, err := Forget(t.Context(), nil, []xid.GTRID{{}}); err == nil {
		t.Fatal("Forget of the zero gtrid: no error")
	}
	if !errors.Is(fmt.Errorf("x: %w", ErrPending), ErrPending) {
		t.Fatal("ErrPending does not survive wrapping")
	}
}
