// Command tandem is Tandem's one binary: the coordinator daemon and the tools
// that talk to it. Run `tandem help` for the list of commands.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// command is one subcommand.
type command struct {
	name    string
	summary string
	usage   string // after "tandem <name> "
	run     func(args []string, stdout, stderr io.Writer) error
}

var commands = map[string]*command{}

func register(c *command) { commands[c.name] = c }

// errUsage makes main print the command's usage and exit 2.
var errUsage = errors.New("usage")

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		if len(args) > 1 {
			if c, ok := commands[args[1]]; ok {
				return runCommand(c, []string{"--help"}, stdout, stderr)
			}
		}
		printHelp(stdout)
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "tandem: unknown command %q\n\n", args[0])
		printHelp(stderr)
		return 2
	}
	return runCommand(c, args[1:], stdout, stderr)
}

func runCommand(c *command, args []string, stdout, stderr io.Writer) int {
	err := c.run(args, stdout, stderr)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	}
	fmt.Fprintf(stderr, "tandem %s: %v\n", c.name, err)
	return 1
}

func printHelp(w io.Writer) {
	fmt.Fprint(w, `Tandem commits one unit of work across PostgreSQL and MySQL/MariaDB atomically.

Usage:
  tandem <command> [flags]

Commands:
`)
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprint(w, `
Run "tandem help <command>" or "tandem <command> --help" for a command's flags.
`)
}

// newFlags returns a flag set whose --help prints the command's usage.
func newFlags(c *command, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("tandem "+c.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: tandem %s %s\n\n%s\n", c.name, c.usage, c.summary)
		printFlags(fs, stderr)
	}
	return fs
}

// printFlags writes a "Flags:" section with fs's defaults, if it has any.
func printFlags(fs *flag.FlagSet, w io.Writer) {
	var b strings.Builder
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(w)
	if b.Len() > 0 {
		fmt.Fprintf(w, "\nFlags:\n%s", b.String())
	}
}

// parse parses flags; errors already printed become errUsage.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	return nil
}

// multiFlag collects a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }
