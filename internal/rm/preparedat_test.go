package rm

import (
	"context"
	"database/sql/driver"
	"strings"
	"testing"
	"time"
)

// A branch's PreparedAt is on this process's clock, whatever the database's
// clock says: the coordinator measures a commit-point branch's wait from it,
// and a database clock 2 h behind must not make a branch prepared a moment
// ago look 2 h old (its live client's transaction would be aborted between
// its prepare and its decision).
func TestPostgresPreparedAtIsOnThisClock(t *testing.T) {
	const behind = 2 * time.Hour
	const age = 10 * time.Millisecond // by the database's own clock
	gid := "tandemcp2:" + gtridHex + ":pg:maria:" + strings.Repeat("ab", 16)
	db := &fakeDB{answer: func(q string) ([]string, [][]driver.Value) {
		dbNow := time.Now().Add(-behind)
		prepared := dbNow.Add(-age)
		if strings.Contains(q, "clock_timestamp()") { // asked for the age by its own clock
			return []string{"gid", "age_us"}, [][]driver.Value{{gid, age.Microseconds()}}
		}
		return []string{"gid", "prepared"}, [][]driver.Value{{gid, prepared}}
	}}
	c := fakeConnFor(t, "pg", postgresDialect{}, db)
	before := time.Now()
	got, err := c.Recover(context.Background())
	after := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Branch.GTRID.String() != gtridHex {
		t.Fatalf("Recover = %+v, want the one branch", got)
	}
	if at := got[0].PreparedAt; at.Before(before.Add(-age-time.Second)) || at.After(after) {
		t.Errorf("PreparedAt %s behind this process's clock for a branch prepared %s ago by the database's own clock (which is %s behind): want it within a second",
			before.Sub(at).Round(time.Second), age, behind)
	}
}
