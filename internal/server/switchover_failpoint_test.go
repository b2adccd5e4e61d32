//go:build failpoints

package server

import (
	"context"
	"errors"
	"testing"

	"github.com/tandem-tx/tandem/internal/failpoint"
	"github.com/tandem-tx/tandem/internal/standby"
)

// A switchover of an async pair: the demoted primary's final STATE is what
// makes its standby promotable, and the standby records it a moment after
// the primary sent it. A promotion that comes in that moment (tandem
// switchover sends it as soon as the demotion answers) must wait for it, not
// be refused as "not synchronized" (seen in CI: the Python client's
// switchover test).
func TestSwitchoverOfAnAsyncPairWaitsForTheFinalState(t *testing.T) {
	defer failpoint.Set("standby-before-final-state", "sleep(400ms)")()
	pListen, sListen := freeAddr(t), freeAddr(t)
	p := startRole(t, StandbyOptions{Listen: pListen, Transport: "async"})
	sb := startRole(t, StandbyOptions{Of: pListen, Listen: sListen, Transport: "async"})
	waitSynchronized(t, p)
	if st, _ := sb.StandbyStatus(); st.Synchronized {
		t.Fatalf("an async standby says it is synchronized before any handover: %+v", st)
	}
	if _, err := p.Demote(context.Background()); err != nil {
		t.Fatalf("demote: %v", err)
	}
	id, err := sb.Promote(standby.PromoteOptions{})
	if err != nil {
		t.Fatalf("promote right after the demotion answered: %v", err)
	}
	if sb.Role() != RolePrimary || id.Epoch < 2 {
		t.Fatalf("after promote: role %s, epoch %d", sb.Role(), id.Epoch)
	}
}

// The wait is only for a final STATE: a connected async standby whose
// primary is not handing over is still refused (after the wait), and keeps
// following.
func TestPromotionOfAConnectedAsyncStandbyIsStillRefused(t *testing.T) {
	pListen, sListen := freeAddr(t), freeAddr(t)
	p := startRole(t, StandbyOptions{Listen: pListen, Transport: "async"})
	sb := startRole(t, StandbyOptions{Of: pListen, Listen: sListen, Transport: "async"})
	waitSynchronized(t, p)
	if _, err := sb.Promote(standby.PromoteOptions{}); !errors.Is(err, standby.ErrNotSynchronized) {
		t.Fatalf("promote of a connected async standby: %v; want ErrNotSynchronized", err)
	}
	if sb.Role() != RoleStandby || p.Role() != RolePrimary {
		t.Fatalf("after the refusal: standby %s, primary %s", sb.Role(), p.Role())
	}
}
