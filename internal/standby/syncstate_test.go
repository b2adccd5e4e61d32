package standby

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func synced(t *testing.T, dir string) bool {
	t.Helper()
	st, err := LoadSyncState(dir)
	if err != nil {
		t.Fatal(err)
	}
	return st.Synchronized
}

// What a standby records of its synchronization, per mode, and what
// promotion does with it: max-protection stays synchronized when the
// stream ends; max-availability is synchronized while connected and caught
// up, and not once the stream ends unannounced (its primary could go on
// unprotected); async is never synchronized while the primary runs, and is
// after the primary's clean stop (final STATE with every record acknowledged).
func TestSyncStateAndPromotion(t *testing.T) {
	for _, tc := range []struct {
		p                       Protection
		whileRunning, afterStop bool
	}{
		{MaxProtection, true, true},
		{MaxAvailability, true, false},
		{MaxPerformance, false, false},
	} {
		t.Run(string(tc.p), func(t *testing.T) {
			p := startPrimary(t, t.TempDir(), tc.p, 2*time.Second)
			dir := t.TempDir()
			r := startStandby(t, dir, p.sh.Addr())
			for i := range 5 {
				if _, err := p.log.Append(1, []byte{byte(i)}); err != nil {
					t.Fatal(err)
				}
			}
			waitFor(t, "the standby caught up", func() bool { return p.sh.Status().LagRecords == 0 && p.sh.Status().Connected })
			if tc.whileRunning {
				waitFor(t, "synchronized", func() bool { return synced(t, dir) })
			} else {
				time.Sleep(100 * time.Millisecond) // a wrong STATE would have arrived
				if synced(t, dir) {
					t.Fatalf("%s: the standby says synchronized while the primary runs", tc.p)
				}
			}
			if err := r.Close(); err != nil {
				t.Fatal(err)
			}
			if got := synced(t, dir); got != tc.afterStop {
				t.Fatalf("%s: after the standby stopped, synchronized = %v, want %v", tc.p, got, tc.afterStop)
			}
			if !tc.afterStop {
				_, err := Promote(dir, PromoteOptions{})
				if !errors.Is(err, ErrNotSynchronized) || !strings.Contains(err.Error(), "--accept-data-loss") {
					t.Fatalf("Promote of a standby that is not synchronized: %v", err)
				}
				if _, ok, _ := UnsynchronizedPromotion(dir); ok {
					t.Fatal("a refused promotion left its mark")
				}
				if _, err := Promote(dir, PromoteOptions{AcceptDataLoss: true}); !errors.Is(err, ErrOldPrimaryMayRun) || !strings.Contains(err.Error(), "--old-primary-stopped") {
					t.Fatalf("Promote with AcceptDataLoss, nothing said of the old primary: %v", err)
				}
				if _, ok, _ := UnsynchronizedPromotion(dir); ok {
					t.Fatal("a refused promotion left its mark")
				}
				if _, err := Promote(dir, PromoteOptions{AcceptDataLoss: true, OldPrimaryStopped: true}); err != nil {
					t.Fatal(err)
				}
				if at, ok, err := UnsynchronizedPromotion(dir); !ok || err != nil || time.Since(at) > time.Minute {
					t.Fatalf("promoted with --accept-data-loss: UnsynchronizedPromotion = %v, %v, %v", at, ok, err)
				}
			} else if _, err := Promote(dir, PromoteOptions{}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// An async standby whose primary stops cleanly gets the final STATE once
// it has every record: synchronized, promotable without the flag.
func TestCleanStopOfTheAsyncPrimarySynchronizesTheStandby(t *testing.T) {
	p := startPrimary(t, t.TempDir(), MaxPerformance, 2*time.Second)
	dir := t.TempDir()
	r := startStandby(t, dir, p.sh.Addr())
	defer r.Close()
	for i := range 50 {
		if _, err := p.log.Append(1, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the standby connected", func() bool { return p.sh.Status().Connected })
	if synced(t, dir) {
		t.Fatal("an async standby says synchronized while its primary runs")
	}
	if err := p.sh.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "synchronized after the clean stop", func() bool { return synced(t, dir) })
}
