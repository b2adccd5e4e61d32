package waits

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// MaxHandlerInterval bounds Handler's ?interval=.
const MaxHandlerInterval = time.Minute

// Handler serves the wait table of r (the SDK's: waits.Client, or a
// client.Config.Waits) for an application to mount, so that where a
// running service's transactions spend their time can be read as `tandem
// waits` reads a coordinator's:
//
//	http.Handle("/debug/tandem/waits", waits.Handler(waits.Client))
//	curl 'http://127.0.0.1:8080/debug/tandem/waits?interval=10s'
//
// GET prints the table of `tandem waits` (totals since the process
// started); ?interval=D (at most MaxHandlerInterval) only the waits during
// the next D, two snapshots subtracted; ?json=1 the same as JSON
// (JSONSnapshot, the client side of the coordinator's GET /waits), with
// ?buckets=1 the histograms. It reads memory only and answers every
// request itself: mount it where the application's other debug endpoints
// are, behind the same access control.
func Handler(r *Registry) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed: GET the wait table", http.StatusMethodNotAllowed)
			return
		}
		q := req.URL.Query()
		var interval time.Duration
		if s := q.Get("interval"); s != "" {
			d, err := time.ParseDuration(s)
			if err != nil || d <= 0 || d > MaxHandlerInterval {
				http.Error(w, fmt.Sprintf("interval %q: give a duration above 0 and at most %s, e.g. interval=10s", s, MaxHandlerInterval), http.StatusBadRequest)
				return
			}
			interval = d
		}
		asJSON, buckets := flag(q.Get("json")), flag(q.Get("buckets"))
		snap := r.Snapshot()
		title := "since the process started"
		if interval > 0 {
			t := time.NewTimer(interval)
			select {
			case <-t.C:
			case <-req.Context().Done():
				t.Stop()
				return
			}
			snap = r.Snapshot().Sub(snap)
			title = "during the last " + interval.String()
		}
		w.Header().Set("Cache-Control", "no-store")
		if asJSON {
			w.Header().Set("Content-Type", "application/json")
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			_ = enc.Encode(snap.JSON(buckets, false))
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "%s (this process's Tandem SDK), %s:\n", r.Side(), title)
		_ = snap.WriteTable(w)
	})
}

func flag(s string) bool {
	b, err := strconv.ParseBool(s)
	return err == nil && b
}
