// Package cli holds what Tandem's two command-line programs, tandem and
// tandem-bench, share: flag sets whose --help prints a usage line and a
// "Flags:" section, the parse convention (an error already printed by the
// flag package becomes ErrUsage) and the exit codes that follow from a
// command's error. It has no dependencies beyond the standard library, so
// either program can import it without pulling in the other's packages.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// ErrUsage is returned by a command whose usage error has already been
// printed; ExitCode turns it into exit status 2 without printing more.
var ErrUsage = errors.New("usage")

// NewFlagSet returns a flag set named name that reports errors to stderr
// and whose --help (Usage) calls head, then writes the flags section.
func NewFlagSet(name string, stderr io.Writer, head func(w io.Writer)) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		head(stderr)
		PrintFlags(fs, stderr)
	}
	return fs
}

// PrintFlags writes a "Flags:" section with fs's defaults, if it has any.
func PrintFlags(fs *flag.FlagSet, w io.Writer) {
	var b strings.Builder
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(w)
	if b.Len() > 0 {
		fmt.Fprintf(w, "\nFlags:\n%s", b.String())
	}
}

// Parse parses args into fs. flag.ErrHelp is returned as is; any other
// error, which the flag package has already printed with the usage, becomes
// ErrUsage.
func Parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return ErrUsage
	}
	return nil
}

// ExitCode is the exit status for a command's error: 0 for nil and for
// flag.ErrHelp (help was asked for and printed), 2 for ErrUsage (already
// printed), and 1 for any other error, which it writes to stderr after
// prefix (the command's name, e.g. "tandem serve").
func ExitCode(err error, prefix string, stderr io.Writer) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, ErrUsage):
		return 2
	}
	fmt.Fprintf(stderr, "%s: %v\n", prefix, err)
	return 1
}

// MultiFlag collects a repeatable string flag, in the order given.
type MultiFlag []string

// String joins the values with commas (flag.Value).
func (m *MultiFlag) String() string { return strings.Join(*m, ",") }

// Set adds one value (flag.Value): the flag may be repeated.
func (m *MultiFlag) Set(v string) error { *m = append(*m, v); return nil }
