package standby

import (
	"errors"
	"github.com/tandem-tx/tandem/internal/wal"
	"path/filepath"
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

// A standby that was synchronized under a max-protection primary, and then
// follows that primary restarted with the arch transport (max-performance,
// which acts on decisions before the standby has them), records at once
// that it is not synchronized: no STATE frame travels on arch connections,
// and the word of the max-protection primary must not outlive its mode.
func TestArchStandbyOfAFormerMaxProtectionPrimaryIsNotSynchronized(t *testing.T) {
	pdir, sdir := t.TempDir(), t.TempDir()
	p := startPrimary(t, pdir, MaxProtection, 2*time.Second)
	r := startStandby(t, sdir, p.sh.Addr())
	for i := range 5 {
		if _, err := p.log.Append(1, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "synchronized under max-protection", func() bool { return synced(t, sdir) })
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	p.sh.Close()
	p.log.Close()

	sh, err := NewShipper(ShipperConfig{Listen: "127.0.0.1:0", Transport: Arch, Protection: MaxPerformance, NetTimeout: 2 * time.Second, Identity: testID(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	l, err := wal.Open(wal.Options{Dir: pdir, SegmentSize: 64 << 10, NoSync: true, OnWrite: sh.Written}, func(pos wal.Position, typ wal.Type, b []byte) error { sh.Replayed(pos, typ, b); return nil })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sh.Close(); l.Close() })
	r = startStandby(t, sdir, sh.Addr())
	defer r.Close()
	waitFor(t, "the standby connected over arch", func() bool { return sh.Status().Connected })
	waitFor(t, "the arch standby no longer synchronized", func() bool { return !synced(t, sdir) })
	if _, err := Promote(sdir, PromoteOptions{}); !errors.Is(err, ErrNotSynchronized) {
		t.Fatalf("Promote of an arch standby without --accept-data-loss: %v, want ErrNotSynchronized", err)
	}
}

// shipperIn is a primary whose shipper notes its max-protection promise in
// dir (ShipperConfig.Dir), its log in dir/log.
func shipperIn(t *testing.T, dir string, tr Transport, p Protection, netTimeout time.Duration) *primary {
	t.Helper()
	sh, err := NewShipper(ShipperConfig{Listen: "127.0.0.1:0", Transport: tr, Protection: p, NetTimeout: netTimeout, Identity: testID(), Logger: quiet, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	l, err := wal.Open(wal.Options{Dir: filepath.Join(dir, "log"), SegmentSize: 64 << 10, NoSync: true, OnWrite: sh.Written}, func(pos wal.Position, typ wal.Type, b []byte) error { sh.Replayed(pos, typ, b); return nil })
	if err != nil {
		sh.Close()
		t.Fatal(err)
	}
	return &primary{log: l, sh: sh}
}

// A primary that told its standby it runs max-protection, restarted as
// async max-performance while that standby is away: an append (a decision
// made durable) is not done until a standby has heard the new mode, however
// long past the net timeout; once one has, the standby no longer trusts
// max-protection, the promise is gone, and the primary's own mode applies
// (an append returns with no standby at all).
func TestDowngradeFromMaxProtectionWaitsUntilAStandbyHearsIt(t *testing.T) {
	pdir, sdir := t.TempDir(), t.TempDir()
	p := shipperIn(t, pdir, Sync, MaxProtection, 2*time.Second)
	if ok, err := HasMaxProtectionPromise(pdir); ok || err != nil {
		t.Fatalf("a max-protection shipper noted a promise before telling any standby: %v, %v", ok, err)
	}
	r := startStandby(t, sdir, p.sh.Addr())
	if _, err := p.log.Append(1, []byte("decided under max-protection")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "synchronized under max-protection", func() bool { return synced(t, sdir) })
	if ok, err := HasMaxProtectionPromise(pdir); !ok || err != nil {
		t.Fatalf("a max-protection shipper that told its standby noted no promise: %v, %v", ok, err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	p.sh.Close()
	p.log.Close()
	if st, _ := LoadSyncState(sdir); !st.Synchronized || !st.MaxProtection {
		t.Fatalf("the standby of a max-protection primary, disconnected: %+v; want synchronized, max-protection", st)
	}

	// The arch transport cannot make the standby hear the new mode first.
	if _, err := NewShipper(ShipperConfig{Listen: "127.0.0.1:0", Transport: Arch, Protection: MaxPerformance, Identity: testID(), Logger: quiet, Dir: pdir}); !errors.Is(err, ErrMaxProtectionPromised) ||
		!strings.Contains(err.Error(), "--transport async") || !strings.Contains(err.Error(), "--standby-lost") {
		t.Fatalf("an arch shipper while a max-protection promise is owed: %v; want refused, naming --transport async and --standby-lost", err)
	}
	p = shipperIn(t, pdir, Async, MaxPerformance, 100*time.Millisecond)
	defer func() { p.sh.Close(); p.log.Close() }()
	if !p.sh.Status().Downgrading {
		t.Fatal("Status does not say the primary is downgrading from max-protection")
	}
	done := make(chan error, 1)
	go func() { _, err := p.log.Append(1, []byte("decided after the downgrade")); done <- err }()
	select {
	case err := <-done:
		t.Fatalf("the append returned (%v) with no standby having heard the new mode: a standby promoted now would lack it", err)
	case <-time.After(10 * 100 * time.Millisecond): // ten net timeouts
	}
	r = startStandby(t, sdir, p.sh.Addr())
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the append still waits after a standby connected")
	}
	if st, _ := LoadSyncState(sdir); st.MaxProtection || st.Synchronized {
		t.Fatalf("the standby that heard the new mode records %+v; want not max-protection, not synchronized (async)", st)
	}
	waitFor(t, "the promise withdrawn", func() bool { ok, _ := HasMaxProtectionPromise(pdir); return !ok })
	if p.sh.Status().Downgrading {
		t.Fatal("Status still says downgrading")
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := p.log.Append(1, []byte("decided without a standby, as async does")); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("after the downgrade was heard, an async append waited %s for a standby", d)
	}
}
