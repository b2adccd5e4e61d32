package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/internal/server"
	"github.com/tandem-tx/tandem/waits"
)

// `tandem waits --interval` against a real admin handler: the interval's
// Max. Wait is exact for a wait that is the largest ever, and the upper
// bound of its bucket for one below an older maximum — never 0 for an
// event waited on during the interval.
func TestWaitsIntervalMaxIsTheIntervalsBound(t *testing.T) {
	for _, k := range []string{"TANDEM_TLS_CA", "TANDEM_TLS_CERT", "TANDEM_TLS_KEY", "TANDEM_ADMIN_TOKEN_FILE", "TANDEM_AUTH_TOKEN_FILE"} {
		t.Setenv(k, "")
	}
	for _, asJSON := range []bool{false, true} {
		reg := waits.NewRegistry(waits.SideCoordinator)
		reg.Record(waits.RMRoundtrip, 8*time.Millisecond) // the all-time max, before the interval
		admin := server.AdminHandler(reg)
		var calls atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			admin.ServeHTTP(w, r)
			if r.URL.Path == "/waits" && calls.Add(1) == 1 {
				// Waited on between the two samples.
				reg.Record(waits.RMRoundtrip, 3*time.Millisecond) // bucket ≤ 4.096 ms, below the older 8 ms
				reg.Record(waits.RMPrepare, 20*time.Millisecond)  // the largest ever: exact
			}
		}))
		args := []string{"--admin", strings.TrimPrefix(srv.URL, "http://"), "--interval", "1ms", "--side", "coordinator"}
		if asJSON {
			args = append(args, "--json")
		}
		var out, errOut strings.Builder
		err := runWaits(args, &out, &errOut)
		srv.Close()
		if err != nil {
			t.Fatalf("tandem waits %v: %v\n%s", args, err, errOut.String())
		}
		if calls.Load() != 2 {
			t.Fatalf("%d GET /waits, want 2", calls.Load())
		}
		want := map[string]float64{"rm roundtrip": 0.004096, "rm prepare": 0.020}
		if asJSON {
			var got map[string]waits.JSONSnapshot
			if err := json.Unmarshal([]byte(out.String()), &got); err != nil {
				t.Fatalf("--json: %v\n%s", err, out.String())
			}
			for _, e := range got[waits.SideCoordinator].Events {
				if w, ok := want[e.Event]; ok && (e.Count != 1 || e.MaxS != w) {
					t.Errorf("--json %s: count %d, max_s %v; want 1, %v", e.Event, e.Count, e.MaxS, w)
				}
			}
			continue
		}
		rows := map[string]string{"rm roundtrip": "0.0041", "rm prepare": "0.0200"}
		for ev, max := range rows {
			found := false
			for _, line := range strings.Split(out.String(), "\n") {
				line = strings.TrimSpace(line)
				if !strings.HasPrefix(line, ev+" ") {
					continue
				}
				found = true
				// Event, Times Waited, Max. Wait (s), Total Waited (s), Avg (ms).
				f := strings.Fields(strings.TrimPrefix(line, ev))
				if len(f) != 4 || f[0] != "1" || f[1] != max {
					t.Errorf("%s row %q: want 1 wait, Max. Wait %s", ev, line, max)
				}
			}
			if !found {
				t.Errorf("no %s row:\n%s", ev, out.String())
			}
		}
	}
}
