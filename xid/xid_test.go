package xid

import (
	"errors"
	"fmt"
	"strings"
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

func TestCommitPointNamesRoundTrip(t *testing.T) {
	g, err := Parse("0000019a8f3c2b1e5d0c7a9b3e41f2aa")
	if err != nil {
		t.Fatal(err)
	}
	b := Branch{GTRID: g, RM: "pg", CommitPoint: "maria"}
	if want := "tandemcp:0000019a8f3c2b1e5d0c7a9b3e41f2aa:pg:maria"; b.PostgresGID() != want {
		t.Errorf("PostgresGID = %s, want %s", b.PostgresGID(), want)
	}
	if want := "'0000019a8f3c2b1e5d0c7a9b3e41f2aamaria','pg',1413566019"; b.MySQLXID() != want {
		t.Errorf("MySQLXID = %s, want %s", b.MySQLXID(), want)
	}
	// The old forms stay byte-identical.
	old := Branch{GTRID: g, RM: "pg"}
	if want := "tandem:0000019a8f3c2b1e5d0c7a9b3e41f2aa:pg"; old.PostgresGID() != want {
		t.Errorf("old PostgresGID = %s, want %s", old.PostgresGID(), want)
	}
	if want := "'0000019a8f3c2b1e5d0c7a9b3e41f2aa','pg',1413566020"; old.MySQLXID() != want {
		t.Errorf("old MySQLXID = %s, want %s", old.MySQLXID(), want)
	}
	if got, ok := ParsePostgresGID(b.PostgresGID()); !ok || got != b {
		t.Errorf("ParsePostgresGID(%q) = %+v, %v", b.PostgresGID(), got, ok)
	}
	if got, ok := ParsePostgresGID(old.PostgresGID()); !ok || got != old || got.CommitPoint != "" {
		t.Errorf("ParsePostgresGID(%q) = %+v, %v", old.PostgresGID(), got, ok)
	}
	// Longest names: 32 + 32 characters fill XA's 64-byte gtrid.
	long := Branch{GTRID: g, RM: "r234567890123456789012345678901z", CommitPoint: "c234567890123456789012345678901z"}
	for _, x := range []Branch{b, long} {
		data := []byte(x.GTRID.String() + x.CommitPoint + x.RM)
		got, ok := ParseMySQLXID(CommitPointFormatID, 32+len(x.CommitPoint), len(x.RM), data)
		if !ok || got != x {
			t.Errorf("ParseMySQLXID(%s) = %+v, %v", data, got, ok)
		}
	}
	if n := 32 + len(long.CommitPoint); n > 64 {
		t.Errorf("gtrid part is %d bytes, XA allows 64", n)
	}
	data := []byte(g.String() + "pg")
	if got, ok := ParseMySQLXID(FormatID, 32, 2, data); !ok || got != old {
		t.Errorf("ParseMySQLXID(old) = %+v, %v", got, ok)
	}
}

func TestCommitPointNamesRejectMalformed(t *testing.T) {
	g := "0000019a8f3c2b1e5d0c7a9b3e41f2aa"
	for _, gid := range []string{
		"tandemcp:" + g,                    // no rm
		"tandemcp:" + g + ":pg",            // no cp
		"tandemcp:" + g + ":pg:",           // empty cp
		"tandemcp:" + g + ":pg:Maria",      // bad cp
		"tandemcp:" + g + ":pg:maria:x",    // extra part (':' is not a name character)
		"tandemcp:" + g + "::maria",        // empty rm
		"tandemcp:zz:pg:maria",             // bad gtrid
		"tandemcp:" + g[:31] + ":pg:maria", // short gtrid
		"tandem:" + g + ":pg:maria",        // old prefix, cp-shaped rest
		"tandemcp" + g + ":pg:maria",       // no colon after prefix
	} {
		if b, ok := ParsePostgresGID(gid); ok {
			t.Errorf("ParsePostgresGID(%q) = %+v, want not ok", gid, b)
		}
	}
	type row struct {
		f          int64
		gl, bl     int
		data, what string
	}
	for _, r := range []row{
		{CommitPointFormatID, 32, 2, g + "pg", "TANC with no cp"},
		{CommitPointFormatID, 33, 2, g + "_pg", "cp starting with _"},
		{CommitPointFormatID, 37, 2, g + "MARIApg", "upper-case cp"},
		{CommitPointFormatID, 37, 0, g + "maria", "no bqual"},
		{CommitPointFormatID, 37, 3, g + "mariapg", "lengths do not add up"},
		{CommitPointFormatID, 37, 2, "0000019a8f3c2b1e5d0c7a9b3e41f2aZmariapg", "bad gtrid"},
		{CommitPointFormatID, 31, 2, g[:31] + "pg", "short gtrid part"},
		{FormatID, 37, 2, g + "mariapg", "TAND with a cp"},
		{FormatID + 2, 37, 2, g + "mariapg", "foreign format"},
	} {
		if b, ok := ParseMySQLXID(r.f, r.gl, r.bl, []byte(r.data)); ok {
			t.Errorf("ParseMySQLXID %s = %+v, want not ok", r.what, b)
		}
	}
}

func TestOwnedNamesRoundTripAndFitXA(t *testing.T) {
	g, owner := New(), NewOwner()
	long := "abcdefghijklmnopqrstuvwxyz012345" // 32 characters: the longest RM name
	for _, b := range []Branch{
		{GTRID: g, RM: "pg", Owner: owner},
		{GTRID: g, RM: "pg", CommitPoint: "maria", Owner: owner},
		{GTRID: g, RM: long, CommitPoint: long, Owner: owner},
		{GTRID: g, RM: "pg"},
		{GTRID: g, RM: "pg", CommitPoint: "maria"},
	} {
		gid := b.PostgresGID()
		if got, ok := ParsePostgresGID(gid); !ok || got != b {
			t.Errorf("ParsePostgresGID(%q) = %+v, %v; want %+v", gid, got, ok, b)
		}
		if b.Owned() != (strings.HasPrefix(gid, OwnedPrefix) || strings.HasPrefix(gid, OwnedCommitPointPrefix)) {
			t.Errorf("%q: owned %v but its prefix says otherwise", gid, b.Owned())
		}
		// The MySQL form, as XA RECOVER returns it: format, lengths, data.
		x := b.MySQLXID()
		q := strings.Split(x, "'")
		gtrid, bqual := q[1], q[3]
		if len(gtrid) > 64 || len(bqual) > 64 {
			t.Errorf("%s: gtrid %d / bqual %d bytes, XA allows 64 each", x, len(gtrid), len(bqual))
		}
		var format int64
		if _, err := fmt.Sscan(strings.TrimPrefix(q[4], ","), &format); err != nil {
			t.Fatal(err)
		}
		got, ok := ParseMySQLXID(format, len(gtrid), len(bqual), []byte(gtrid+bqual))
		if !ok || got != b {
			t.Errorf("ParseMySQLXID(%s) = %+v, %v; want %+v", x, got, ok, b)
		}
	}
}

func TestOwnedNamesRejectForgeries(t *testing.T) {
	g, owner := New(), NewOwner()
	for _, gid := range []string{
		"tandem2:" + g.String() + ":pg",                                    // owner missing
		"tandem2:" + g.String() + ":pg:" + strings.ToUpper(owner.String()), // upper case
		"tandem2:" + g.String() + ":pg:" + strings.Repeat("0", 32),         // the zero owner
		"tandem2:" + g.String() + ":pg:" + owner.String() + ":x",           // extra part
		"tandemcp2:" + g.String() + ":pg:maria",                            // owner missing
		"tandemcp2:" + g.String() + ":pg:maria:" + owner.String()[:31],     // short owner
	} {
		if b, ok := ParsePostgresGID(gid); ok {
			t.Errorf("ParsePostgresGID(%q) = %+v, want refused", gid, b)
		}
	}
	bad := owner.String()[:31] + "pg" // 33 bytes, but the owner part is short
	if b, ok := ParseMySQLXID(OwnedFormatID, 32, len(bad), []byte(g.String()+bad)); ok {
		t.Errorf("ParseMySQLXID accepted a short owner: %+v", b)
	}
	if b, ok := ParseMySQLXID(OwnedFormatID, 32, 2, []byte(g.String()+"pg")); ok {
		t.Errorf("ParseMySQLXID accepted an owned format with no owner: %+v", b)
	}
}
