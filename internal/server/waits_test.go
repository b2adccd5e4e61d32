package server

import (
	"testing"

	"github.com/tandem-tx/tandem/internal/standby"
)

// Each server has its own wait registry, the one its admin listener serves,
// and every coordinator it runs records into it: the primary's from the
// start, a standby's once promoted (its receiver recorded there before).
func TestEachServerServesItsOwnWaitsAcrossPromotion(t *testing.T) {
	p, sb, _, _ := pair(t)
	if p.Waits() == nil || sb.Waits() == nil || p.Waits() == sb.Waits() {
		t.Fatalf("primary registry %p, standby registry %p: want two distinct registries", p.Waits(), sb.Waits())
	}
	if c := p.Coordinator(); c == nil || c.Waits() != p.Waits() {
		t.Fatalf("the primary's coordinator %v does not record into the server's registry", c)
	}
	before := sb.Waits()
	if _, err := sb.Promote(standby.PromoteOptions{}); err != nil {
		t.Fatalf("promote: %v", err)
	}
	if sb.Waits() != before {
		t.Fatal("promotion replaced the server's registry: /waits would lose the standby's totals")
	}
	if c := sb.Coordinator(); c == nil || c.Waits() != before {
		t.Fatalf("the promoted coordinator %v does not record into the server's registry", c)
	}
}
