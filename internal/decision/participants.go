package decision

import (
	"fmt"
	"sort"
	"strings"

	"github.com/tandem-tx/tandem/xid"
)

// Participant is one resource manager that held a prepared branch of a
// committed gtrid: its name (the branch's bqual) and the id of the decision
// table its database has (ReadID), which is how a sweeper knows that the RM
// it reaches under that name is the same database.
type Participant struct {
	RM    string
	Table xid.Owner
}

func (p Participant) String() string { return p.RM + "=" + p.Table.String() }

// FormatParticipants writes ps as the participants column holds them:
// "rm=<32 hex digits>", comma-separated, sorted. An empty list is "".
// A zero Table is written as 32 zeros: "id not known", which no sweeper
// matches, so the row is kept.
func FormatParticipants(ps []Participant) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	sort.Strings(s)
	return strings.Join(s, ",")
}

// ParseParticipants reads a participants column. "" is no participants (a
// row written before participants were recorded, or an 'A' row).
func ParseParticipants(s string) ([]Participant, error) {
	if s == "" {
		return nil, nil
	}
	var out []Participant
	for _, f := range strings.Split(s, ",") {
		name, id, ok := strings.Cut(f, "=")
		if !ok {
			return nil, fmt.Errorf("%w participant %q: want rm=<32 hex digits>", xid.ErrMalformed, f)
		}
		if err := xid.ValidateRMName(name); err != nil {
			return nil, fmt.Errorf("participant %q: %w", f, err)
		}
		var o xid.Owner
		if id != (xid.Owner{}).String() {
			var err error
			if o, err = xid.ParseOwner(id); err != nil {
				return nil, fmt.Errorf("participant %q: %w", f, err)
			}
		}
		out = append(out, Participant{RM: name, Table: o})
	}
	return out, nil
}
