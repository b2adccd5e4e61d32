package xid

import (
	"errors"
	"testing"
	"time"
)

func TestNewIsTimeOrderedAndParses(t *testing.T) {
	t0 := time.UnixMilli(1_700_000_000_123)
	a, b := NewAt(7, t0), NewAt(7, t0.Add(time.Millisecond))
	if a.String() >= b.String() {
		t.Fatalf("gtrids do not sort by time: %s then %s", a, b)
	}
	if a.Shard() != 7 || !a.Time().Equal(t0) {
		t.Fatalf("shard %d time %v, want 7 %v", a.Shard(), a.Time(), t0)
	}
	if a == NewAt(7, t0) {
		t.Fatal("two gtrids made at the same millisecond are equal: random part missing")
	}
	p, err := Parse(a.String())
	if err != nil || p != a {
		t.Fatalf("Parse(%s) = %v, %v", a, p, err)
	}
}

func TestParseRejects(t *testing.T) {
	for _, s := range []string{"", "abc", "0000019A8F3C2B1E5D0C7A9B3E41F2AA", "0000019a8f3c2b1e5d0c7a9b3e41f2a", "0000019a8f3c2b1e5d0c7a9b3e41f2aaa",
		"0000019a8f3c2b1e5d0c7a9b3e41f2ag", "00000000000000000000000000000000", "tandem:x"} {
		if _, err := Parse(s); !errors.Is(err, ErrMalformed) {
			t.Errorf("Parse(%q) error = %v, want ErrMalformed", s, err)
		}
	}
}

func TestRMNames(t *testing.T) {
	for _, ok := range []string{"pg", "maria", "orders_db", "a-1", "0x"} {
		if err := ValidateRMName(ok); err != nil {
			t.Errorf("ValidateRMName(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "PG", "_x", "-x", "a b", "a:b", "a'b", "abcdefghijklmnopqrstuvwxyz0123456"} {
		if err := ValidateRMName(bad); err == nil {
			t.Errorf("ValidateRMName(%q) accepted", bad)
		}
	}
}

func TestDatabaseNamesRoundTrip(t *testing.T) {
	b := Branch{GTRID: New(), RM: "pg"}
	got, ok := ParsePostgresGID(b.PostgresGID())
	if !ok || got != b {
		t.Fatalf("ParsePostgresGID(%q) = %v, %v", b.PostgresGID(), got, ok)
	}
	for _, foreign := range []string{"other", "tandem:zz:pg", "tandem:" + b.GTRID.String(), "tandem:" + b.GTRID.String() + ":P G"} {
		if _, ok := ParsePostgresGID(foreign); ok {
			t.Errorf("ParsePostgresGID(%q) claimed a foreign GID", foreign)
		}
	}
	data := []byte(b.GTRID.String() + "maria")
	m, ok := ParseMySQLXID(FormatID, 32, 5, data)
	if !ok || m.GTRID != b.GTRID || m.RM != "maria" {
		t.Fatalf("ParseMySQLXID = %v, %v", m, ok)
	}
	if _, ok := ParseMySQLXID(1, 32, 5, data); ok {
		t.Error("ParseMySQLXID accepted another format ID")
	}
	if want := "'" + b.GTRID.String() + "','pg',1413566020"; b.MySQLXID() != want {
		t.Errorf("MySQLXID = %s, want %s", b.MySQLXID(), want)
	}
}
