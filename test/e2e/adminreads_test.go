package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/internal/coord"
)

// GET /in-doubt?gtrid= (what every database holds of a gtrid: the console's
// resolve dialog, tandem resolve --gtrid) is a read, open to every local
// user on a loopback admin listener. Asked in a loop, it must not keep the
// databases scanning back to back: it answers from a scan that started at
// most coord.HoldingsMaxAge ago, so each database is scanned about once per
// HoldingsMaxAge on its account, however often it is asked.
func TestInDoubtHoldingsReadsDoNotHammerTheDatabases(t *testing.T) {
	admin := freeAddr(t)
	startCoordinator(t, coordOpts{extra: []string{"--admin", admin, "--scan-interval", "1h"}})
	scans := func() uint64 {
		t.Helper()
		resp, err := http.Get("http://" + admin + "/waits")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var w struct {
			Coordinator struct {
				Events []struct {
					Event string `json:"event"`
					Count uint64 `json:"count"`
				} `json:"events"`
			} `json:"coordinator"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&w); err != nil {
			t.Fatal(err)
		}
		for _, e := range w.Coordinator.Events {
			if e.Event == "rm recover scan" {
				return e.Count
			}
		}
		return 0
	}
	before := scans()
	start := time.Now()
	const reads = 50
	for range reads {
		resp, err := http.Get("http://" + admin + "/in-doubt?gtrid=0123456789abcdef0123456789abcdef")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /in-doubt?gtrid=: %s %s", resp.Status, b)
		}
	}
	elapsed := time.Since(start)
	got := scans() - before
	// Two databases; one round per HoldingsMaxAge, the first at once, and
	// one more that may have started just before the window closed.
	allowed := 2 * (uint64(elapsed/coord.HoldingsMaxAge) + 2)
	t.Logf("%d reads in %v: %d recover scans (at most %d allowed)", reads, elapsed, got, allowed)
	if got > allowed {
		t.Fatalf("%d reads of GET /in-doubt?gtrid= in %v ran %d recover scans, want at most %d (one round every %v)", reads, elapsed, got, allowed, coord.HoldingsMaxAge)
	}
}
