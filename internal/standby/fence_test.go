package standby

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// A PROBE (the periodic fencing check of --peer) never displaces the
// primary's standby, and a probe from a newer epoch of the same cluster
// fences the primary through OnFenced.
func TestProbeNeverDisplacesTheStandbyAndANewerEpochFences(t *testing.T) {
	var mu sync.Mutex
	var fencedBy []error
	sh, err := NewShipper(ShipperConfig{Listen: "127.0.0.1:0", Transport: Async, Protection: MaxPerformance, NetTimeout: time.Second,
		Identity: testID(), Logger: quiet, OnFenced: func(err error) { mu.Lock(); fencedBy = append(fencedBy, err); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close()
	r := startStandby(t, t.TempDir(), sh.Addr())
	defer r.Close()
	waitFor(t, "the standby connected", func() bool { return sh.Status().Connected })
	peer := sh.Status().Standby
	for range 5 {
		if _, _, err := CheckPeer(sh.Addr(), testID(), nil, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if st := sh.Status(); !st.Connected || st.Standby != peer {
		t.Fatalf("after 5 probes the primary's standby is %q (connected %v), want still %q", st.Standby, st.Connected, peer)
	}
	mu.Lock()
	n := len(fencedBy)
	mu.Unlock()
	if n != 0 {
		t.Fatalf("probes of the same epoch fenced the primary: %v", fencedBy)
	}
	newer := testID()
	newer.Epoch++
	if _, reached, err := CheckPeer(sh.Addr(), newer, nil, time.Second); err != nil || !reached {
		t.Fatalf("a probe from a newer epoch: %v", err)
	}
	// OnFenced runs on a goroutine of its own (claims are coalesced): wait for it.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		n = len(fencedBy)
		mu.Unlock()
		if n > 0 {
			break
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(fencedBy) != 1 || !errors.Is(fencedBy[0], ErrFenced) || !strings.Contains(fencedBy[0].Error(), "epoch 4") {
		t.Fatalf("after a probe from epoch 4, OnFenced got %v, want one ErrFenced naming epoch 4", fencedBy)
	}
}
