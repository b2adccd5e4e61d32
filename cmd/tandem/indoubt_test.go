package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A listing whose scan could not read a database says so and fails: a
// script must not take it for "nothing in doubt".
func TestInDoubtListingOfAnIncompleteScanFails(t *testing.T) {
	for _, c := range []struct {
		name, body string
		wantErr    bool
		want       []string
	}{
		{"complete, empty", `{"in_doubt":[],"scanned_at":"2026-11-26T10:00:00Z","scan_complete":true}`, false,
			[]string{"no in-doubt branches", "as of a scan of every database that began at 2026-11-26T10:00:00Z"}},
		{"incomplete, empty", `{"in_doubt":[],"scanned_at":"2026-11-26T10:00:00Z","scan_complete":false,"unread_rms":["maria"]}`, true,
			[]string{"no in-doubt branches", "could NOT read maria"}},
		{"incomplete, one listed", `{"in_doubt":[{"gtrid":"000001a21854a3fcb49bbcbf5ada31d8","rm":"pg","owner_short":"f00e1917","why":"foreign owner"}],` +
			`"scanned_at":"2026-11-26T10:00:00Z","scan_complete":false,"unread_rms":["maria"]}`, true,
			[]string{"000001a21854a3fcb49bbcbf5ada31d8", "could NOT read maria"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/in-doubt" {
					http.NotFound(w, r)
					return
				}
				_, _ = w.Write([]byte(c.body))
			}))
			defer srv.Close()
			var out strings.Builder
			err := listInDoubt(context.Background(), &adminClient{http: srv.Client(), scheme: "http"}, strings.TrimPrefix(srv.URL, "http://"), &out)
			if (err != nil) != c.wantErr || (err != nil && !strings.Contains(err.Error(), "incomplete")) {
				t.Errorf("error %v, want one: %v", err, c.wantErr)
			}
			for _, w := range c.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
}
