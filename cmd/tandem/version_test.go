package main

import (
	"strings"
	"testing"

	"github.com/tandem-tx/tandem/internal/version"
)

// tandem version and tandem --version print the same line: the version,
// the commit, the date, the Go version and the platform.
func TestVersion(t *testing.T) {
	want := "tandem " + version.Get().String() + "\n"
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		var stdout, stderr strings.Builder
		if code := run(args, &stdout, &stderr); code != 0 || stdout.String() != want || stderr.Len() != 0 {
			t.Errorf("tandem %q: exit %d, stdout %q, stderr %q; want exit 0, stdout %q", args, code, stdout.String(), stderr.String(), want)
		}
	}
	if !strings.Contains(want, " (commit ") {
		t.Errorf("the version line %q has no commit", want)
	}
}
