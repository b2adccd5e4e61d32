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
		{&pgconn.PgError{Code: "23502", ColumnName: "participants"}, true, RefusedWrongTable},
		{&mysql.MySQLError{Number: 1048, Message: "Column 'participants' cannot be null"}, true, RefusedWrongTable},
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
	tab := xid.NewOwner()
	ps := []Participant{{RM: "pg", Table: xid.NewOwner()}, {RM: "maria", Table: xid.NewOwner()}}
	for _, d := range []rm.Driver{rm.Postgres, rm.MySQL} {
		s := CommitStatements(d, Commit{GTRID: g, Table: tab, Participants: ps, MaxAge: time.Minute})
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
		want := "(SELECT '" + FormatParticipants(ps) + "' FROM " + IDTableName + " WHERE id = '" + tab.String() + "')"
		if d == rm.Postgres { // and the id row beside the decision table
			want = "(SELECT '" + FormatParticipants(ps) + "' FROM " + IDTableName + " i WHERE i.id = '" + tab.String() + "' AND " +
				"(SELECT relnamespace FROM pg_class WHERE oid = to_regclass('" + TableName + "')) = (SELECT relnamespace FROM pg_class WHERE oid = i.tableoid))"
		}
		if !strings.Contains(ins, want) {
			t.Errorf("%s: insert %q does not take its participants from the id table: want %s", d, ins, want)
		}
		for _, st := range s {
			if strings.HasPrefix(st, "DELETE") {
				t.Errorf("%s: a DELETE with nothing to forget: %q", d, st)
			}
		}
		s = CommitStatements(d, Commit{GTRID: g, Table: tab, MaxAge: time.Minute, Forget: f})
		del := s[len(s)-2]
		head := "DELETE FROM " + TableName + " WHERE"
		if d == rm.MySQL { // read by the primary key, never a scan
			head = "DELETE d FROM " + TableName + " d FORCE INDEX (PRIMARY) WHERE"
		}
		if want := head + " outcome = 'C' AND gtrid IN ('" + f[0].String() + "','" + f[1].String() + "') AND decided_at < "; !strings.HasPrefix(del, want) ||
			!strings.Contains(del, "30000000") {
			t.Errorf("%s: forget = %q, want %q… with the 30 s ForgetMinAge", d, del, want)
		}
		if ddl := strings.Join(DDL(d), "; "); !strings.Contains(ddl, "CREATE TABLE IF NOT EXISTS "+TableName+" ") || !strings.Contains(ddl, "CREATE TABLE IF NOT EXISTS "+IDTableName+" ") {
			t.Errorf("%s: DDL %q", d, ddl)
		}
	}
	xa := xid.CommitPointSelf(g, "maria", tab).MySQLXID()
	s := CommitStatements(rm.MySQL, Commit{GTRID: g, Table: tab, MaxAge: time.Minute, XA: xa})
	if got := s[len(s)-2:]; got[0] != "XA END "+xa || got[1] != "XA COMMIT "+xa+" ONE PHASE" {
		t.Errorf("MySQL with XA: ends with %q, want XA END and XA COMMIT … ONE PHASE", got)
	}
	if s := CommitStatements(rm.Postgres, Commit{GTRID: g, MaxAge: time.Minute, XA: xa}); s[len(s)-1] != "COMMIT" {
		t.Errorf("PostgreSQL ignores XA: ends with %q", s[len(s)-1])
	}
	if b := BeginStatements(rm.MySQL, xa); b[0] != "XA START "+xa || !strings.HasPrefix(b[1], "SET @tandem_began") {
		t.Errorf("BeginStatements(MySQL, xa) = %q", b)
	}
	if b := BeginStatements(rm.MySQL, ""); b[0] != "START TRANSACTION" {
		t.Errorf("BeginStatements(MySQL, \"\") = %q", b)
	}
}

func TestParticipantsRoundTrip(t *testing.T) {
	a, b := xid.NewOwner(), xid.NewOwner()
	ps := []Participant{{RM: "pg", Table: a}, {RM: "maria", Table: b}, {RM: "x", Table: xid.Owner{}}}
	s := FormatParticipants(ps)
	if want := "maria=" + b.String() + ",pg=" + a.String() + ",x=" + strings.Repeat("0", 32); s != want {
		t.Fatalf("FormatParticipants = %q, want %q", s, want)
	}
	got, err := ParseParticipants(s)
	if err != nil || len(got) != 3 || got[0] != ps[1] || got[1] != ps[0] || got[2] != ps[2] {
		t.Fatalf("ParseParticipants(%q) = %v %v", s, got, err)
	}
	if got, err := ParseParticipants(""); err != nil || got != nil {
		t.Fatalf("ParseParticipants(\"\") = %v %v, want none", got, err)
	}
	for _, bad := range []string{"pg", "pg=xyz", "PG=" + a.String(), "pg=" + a.String() + ",", "pg='" + a.String()} {
		if _, err := ParseParticipants(bad); err == nil {
			t.Errorf("ParseParticipants(%q): no error", bad)
		}
	}
}

func TestZeroGTRIDIsRefused(t *testing.T) {
	if _, err := Resolve(t.Context(), nil, rm.Postgres, xid.GTRID{}, xid.NewOwner(), time.Second); err == nil {
		t.Fatal("Resolve of the zero gtrid: no error")
	}
	if _, err := Forget(t.Context(), nil, rm.Postgres, []xid.GTRID{{}}); err == nil {
		t.Fatal("Forget of the zero gtrid: no error")
	}
	if !errors.Is(fmt.Errorf("x: %w", ErrPending), ErrPending) {
		t.Fatal("ErrPending does not survive wrapping")
	}
}
