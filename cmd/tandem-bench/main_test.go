package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tandem-tx/tandem/internal/version"
)

// Through `tandem bench` (argv[0] "tandem bench") the messages name that
// command; run directly, tandem-bench.
func TestProgNameFollowsArgv0(t *testing.T) {
	for argv0, want := range map[string]string{
		"tandem bench":          "tandem bench",
		"tandem-bench":          "tandem-bench",
		"/usr/bin/tandem-bench": "tandem-bench",
		"bin/tandem-bench":      "tandem-bench",
	} {
		if got := progName(argv0); got != want {
			t.Errorf("progName(%q) = %q, want %q", argv0, got, want)
		}
	}
}

func TestRunExitStatusAndHelp(t *testing.T) {
	defer func(p string) { prog = p }(prog)
	prog = "tandem-bench"
	for _, tc := range []struct {
		args      []string
		code      int
		out, err  string // substrings of stdout, stderr
		notInHelp string
	}{
		{nil, 0, "Usage: tandem-bench <benchmark>", "", "tandem bench <benchmark>"},
		{[]string{"--help"}, 0, "", "  ship ", ""},
		{[]string{"nosuch"}, 2, "", `tandem-bench: unknown benchmark "nosuch"`, ""},
		{[]string{"log", "--help"}, 0, "", "Usage: tandem-bench log [--dir DIR]", "Example: tandem bench log"},
		{[]string{"log", "extra"}, 2, "", `tandem-bench log: unexpected argument "extra"`, ""},
		{[]string{"ship", "--backlog", "lots"}, 2, "", `tandem-bench ship: --backlog: "lots" is not a size`, ""},
		{[]string{"--workload", "xa", "--compare", "sql,xa"}, 2, "", "tandem-bench: give --workload or --compare, not both", ""},
		{[]string{"db", "--nosuchflag"}, 2, "", "flag provided but not defined: -nosuchflag", ""},
		{[]string{"--version"}, 0, "tandem-bench " + version.Get().String() + "\n", "", ""},
	} {
		var stdout, stderr strings.Builder
		code := run(tc.args, &stdout, &stderr)
		if code != tc.code || !strings.Contains(stdout.String(), tc.out) || !strings.Contains(stderr.String(), tc.err) {
			t.Errorf("tandem-bench %q: exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, stderr with %q",
				tc.args, code, stdout.String(), stderr.String(), tc.code, tc.out, tc.err)
		}
		if tc.notInHelp != "" && strings.Contains(stdout.String()+stderr.String(), tc.notInHelp) {
			t.Errorf("tandem-bench %q names the other command (%q):\n%s%s", tc.args, tc.notInHelp, stdout.String(), stderr.String())
		}
	}
}

// TestLogHTML runs a tiny log bench with --html: the page is written and
// said so; a path that cannot be written fails before the run.
func TestLogHTML(t *testing.T) {
	dir := t.TempDir()
	page := filepath.Join(dir, "log.html")
	var stdout, stderr strings.Builder
	if code := run([]string{"log", "--dir", dir, "--records", "20", "--committers", "1,2", "--html", page}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `id="tandem-bench-data"`) || !strings.Contains(string(b), "--committers 1,2 --html") {
		t.Fatalf("the page has no data block or no command line (%d bytes)", len(b))
	}
	if !strings.Contains(stderr.String(), "HTML report written to "+page) || !strings.Contains(stdout.String(), "decisions/s") {
		t.Fatalf("stdout %q, stderr %q: want the table and the page's path", stdout.String(), stderr.String())
	}

	stdout.Reset()
	stderr.Reset()
	bad := filepath.Join(page, "x.html") // under a file
	if code := run([]string{"log", "--dir", dir, "--records", "20", "--committers", "1", "--html", bad}, &stdout, &stderr); code != 1 ||
		!strings.Contains(stderr.String(), "--html") || strings.Contains(stderr.String(), "bench log: [1/") {
		t.Fatalf("exit %d, stderr %q: want a failure naming --html before any cell ran", code, stderr.String())
	}
}
