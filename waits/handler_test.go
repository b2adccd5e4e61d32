package waits

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func get(t *testing.T, h http.Handler, target string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
	b, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(b)
}

// The handler prints the table `tandem waits` prints, the delta of an
// interval (with the interval's real maximum), JSON, and refuses bad
// input with a message that says what to send.
func TestHandlerPrintsTheWaitTable(t *testing.T) {
	r := NewRegistry(SideClient)
	r.Record(RMPrepare, 2*time.Millisecond)
	r.Record(RMPrepare, 4*time.Millisecond)
	h := Handler(r)

	code, body := get(t, h, "/debug/tandem/waits")
	var want strings.Builder
	_ = r.Snapshot().WriteTable(&want)
	if code != 200 || !strings.Contains(body, "since the process started") || !strings.Contains(body, want.String()) {
		t.Fatalf("GET: %d\n%s\nwant the table:\n%s", code, body, want.String())
	}

	go func() {
		time.Sleep(100 * time.Millisecond)
		r.Record(RMPrepare, 3*time.Millisecond)
	}()
	code, body = get(t, h, "/debug/tandem/waits?interval=300ms")
	if code != 200 || !strings.Contains(body, "during the last 300ms") {
		t.Fatalf("GET ?interval=300ms: %d\n%s", code, body)
	}
	var row []string
	for _, l := range strings.Split(body, "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "rm prepare") {
			row = strings.Fields(strings.TrimPrefix(l, "rm prepare"))
		}
	}
	// The interval's maximum is bounded (Snapshot.Sub): its 3 ms wait is
	// in the (2.048, 4.096] ms bucket and the largest ever was 4 ms.
	if len(row) != 4 || row[0] != "1" || row[1] != "0.0040" || row[2] != "0.0030" {
		t.Errorf("the interval's rm prepare row = %q, want 1 wait, max 0.0040 s (bounded), total 0.0030 s\n%s", row, body)
	}

	code, body = get(t, h, "/debug/tandem/waits?json=1&buckets=1")
	var js JSONSnapshot
	if code != 200 || json.Unmarshal([]byte(body), &js) != nil || len(js.Events) != 1 || js.Events[0].Count != 3 || len(js.BucketsLeS) != NumBuckets {
		t.Errorf("GET ?json=1&buckets=1: %d %+v\n%s", code, js, body)
	}

	for _, bad := range []string{"?interval=forever", "?interval=-1s", "?interval=2h"} {
		if code, body := get(t, h, "/debug/tandem/waits"+bad); code != 400 || !strings.Contains(body, "interval=10s") {
			t.Errorf("GET %s: %d %q, want 400 saying what to send", bad, code, body)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/debug/tandem/waits", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d, want 405", rec.Code)
	}
}
