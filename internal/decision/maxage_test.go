package decision

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/xid"
)

// Coordinators delete 'A' rows MaxCommitPointAge plus a margin after they
// were written (SweepAborts); from then on only the commit point's own age
// check refuses a late 'C'. So the statements themselves never allow a
// transaction older than MaxCommitPointAge, whatever MaxAge a caller passes
// (another SDK, a configuration that forgot the cap): a commit point that
// began 2 h ago, whose prepared branches were rolled back after a key taken
// 1 h 50 min ago and swept since, must not commit.
func TestCommitStatementsCapTheAge(t *testing.T) {
	g := xid.New()
	for _, d := range []rm.Driver{rm.Postgres, rm.MySQL} {
		s := strings.Join(CommitStatements(d, Commit{GTRID: g, Table: xid.NewOwner(), MaxAge: 3 * time.Hour}), "; ")
		if long := strconv.FormatInt((3 * time.Hour).Microseconds(), 10); strings.Contains(s, long) {
			t.Errorf("%s: a MaxAge of 3h is written as it is (%s µs): the age check must never allow more than MaxCommitPointAge (%s), which the sweep of 'A' rows relies on", d, long, MaxCommitPointAge)
		}
		if cap := strconv.FormatInt(MaxCommitPointAge.Microseconds(), 10); !strings.Contains(s, cap) {
			t.Errorf("%s: %q does not check the age against MaxCommitPointAge (%s µs)", d, s, cap)
		}
	}
}
