// Command tandem is Tandem's binary: the coordinator daemon and the tools
// that talk to it. Run `tandem help` for the list of commands. The
// benchmark is a program of its own, tandem-bench (cmd/tandem-bench), which
// `tandem bench` runs.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/tandem-tx/tandem/internal/cli"
	"github.com/tandem-tx/tandem/internal/version"
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

// errUsage makes main exit 2; the usage error has already been printed.
var errUsage = cli.ErrUsage

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
	if version.IsFlag(args[0]) {
		args = []string{"version"}
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
	return cli.ExitCode(c.run(args, stdout, stderr), "tandem "+c.name, stderr)
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
Run "tandem help <command>" or "tandem <command> --help" for a command's flags,
"tandem --version" for the version.
`)
}

// newFlags returns a flag set whose --help prints the command's usage.
func newFlags(c *command, stderr io.Writer) *flag.FlagSet {
	return cli.NewFlagSet("tandem "+c.name, stderr, func(w io.Writer) {
		fmt.Fprintf(w, "Usage: tandem %s %s\n\n%s\n", c.name, c.usage, c.summary)
	})
}

// parse parses flags; errors already printed become errUsage.
var parse = cli.Parse

// multiFlag collects a repeatable string flag.
type multiFlag = cli.MultiFlag
