package client

import (
	"context"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/xid"
)

// After a broken decision call the client takes the key only within
// keyHorizon (a third of decision.ForgetMinAge) of sending its decision: a
// key taken after the 'C' row could have been forgotten would record abort
// for a transaction committed everywhere. Past it, no key is taken and the
// outcome is unknown (an error, never Aborted).
func TestNoKeyIsTakenPastTheHorizon(t *testing.T) {
	pool, db := fakePool(t)
	c := cpClient(t, RM{Name: "pg", Driver: "postgres"}, RM{Name: "maria", Driver: "mysql", DB: pool})
	info, _ := c.rmNamed("maria")
	start := time.Now()
	_, err := c.resolveByKey(context.Background(), info, xid.New(), fakeTableID, time.Now().Add(-keyHorizon))
	if err == nil {
		t.Fatal("resolveByKey past the horizon answered an outcome")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("resolveByKey past the horizon took %s", d)
	}
	if l := db.log(); len(l) != 0 {
		t.Errorf("statements sent to take the key past the horizon: %q", l)
	}
	if keyHorizon*3 > 30*time.Second {
		t.Errorf("keyHorizon %s is not well before decision.ForgetMinAge", keyHorizon)
	}
}
