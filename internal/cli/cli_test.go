package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"testing"
)

func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code int
		out  string
	}{
		{nil, 0, ""},
		{flag.ErrHelp, 0, ""},
		{fmt.Errorf("wrapped: %w", ErrUsage), 2, ""},
		{errors.New("disk full"), 1, "tandem x: disk full\n"},
	} {
		var b strings.Builder
		if code := ExitCode(tc.err, "tandem x", &b); code != tc.code || b.String() != tc.out {
			t.Errorf("ExitCode(%v) = %d, printed %q; want %d, %q", tc.err, code, b.String(), tc.code, tc.out)
		}
	}
}

func TestParseAndUsage(t *testing.T) {
	var stderr strings.Builder
	fs := NewFlagSet("tandem x", &stderr, func(w io.Writer) { fmt.Fprintln(w, "Usage: tandem x [--rm R]...") })
	var rms MultiFlag
	fs.Var(&rms, "rm", "a resource manager")
	if err := Parse(fs, []string{"--rm", "a", "--rm", "b"}); err != nil || strings.Join(rms, " ") != "a b" {
		t.Fatalf("Parse: %v, rms %q; want nil, [a b]", err, rms)
	}
	if err := Parse(fs, []string{"--nosuch"}); !errors.Is(err, ErrUsage) {
		t.Fatalf("an unknown flag: %v, want ErrUsage", err)
	}
	stderr.Reset()
	if err := Parse(fs, []string{"--help"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v, want flag.ErrHelp", err)
	}
	if got := stderr.String(); !strings.HasPrefix(got, "Usage: tandem x [--rm R]...\n\nFlags:\n") || !strings.Contains(got, "a resource manager") {
		t.Fatalf("--help printed %q", got)
	}
}
