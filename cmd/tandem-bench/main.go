// Command tandem-bench measures Tandem on this machine: transactions
// against the real databases (db, also the bare --workload/--compare form),
// the decision log's disk (log) and a standby's catch-up over a simulated
// link (ship). Run `tandem-bench` for the list.
//
// It is a program of its own so that the benchmark and its test proxy are
// not linked into the coordinator's binary. `tandem bench ARGS` runs it
// with the same arguments (see cmd/tandem/bench.go): then argv[0] is
// "tandem bench", and its usage lines and messages say "tandem bench"; run
// directly, they say "tandem-bench". The two forms are the same command.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/tandem-tx/tandem/internal/cli"
	"github.com/tandem-tx/tandem/internal/version"
)

// shimName is the argv[0] that `tandem bench` passes; see the package doc.
const shimName = "tandem bench"

// prog is how this program names itself in usage lines and messages.
var prog = progName(os.Args[0])

func progName(argv0 string) string {
	if argv0 == shimName {
		return shimName
	}
	return "tandem-bench"
}

// subBenchmark is one `tandem-bench NAME`. Add one with registerBench in an
// init func of its own file; `tandem-bench` lists them.
type subBenchmark struct {
	name    string
	summary string
	usage   string // after "tandem-bench <name> "
	help    string // what it does, for --help
	run     func(args []string, stdout, stderr io.Writer) error
}

var benchmarks = map[string]*subBenchmark{}

func registerBench(b *subBenchmark) { benchmarks[b.name] = b }

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	return cli.ExitCode(runBench(args, stdout, stderr), prog, stderr)
}

// runBench dispatches `tandem-bench NAME ...`; without NAME (or with
// --help) it lists the benchmarks.
func runBench(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		printBenchList(stdout)
		return nil
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		printBenchList(stderr)
		return flag.ErrHelp
	}
	if version.IsFlag(args[0]) {
		fmt.Fprintln(stdout, version.Line(prog))
		return nil
	}
	if strings.HasPrefix(args[0], "-") {
		// tandem-bench --workload xa ...: the database benchmark.
		return benchmarks["db"].run(args, stdout, stderr)
	}
	b, ok := benchmarks[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "%s: unknown benchmark %q\n\n", prog, args[0])
		printBenchList(stderr)
		return cli.ErrUsage
	}
	return b.run(args[1:], stdout, stderr)
}

// named rewrites the help texts' "tandem bench" to this program's name.
func named(s string) string { return strings.ReplaceAll(s, shimName, prog) }

func printBenchList(w io.Writer) {
	fmt.Fprintf(w, "Usage: %s <benchmark> [flags]\n\n", prog)
	fmt.Fprint(w, "Measures Tandem on this machine (tandem-bench and tandem bench are the same command).\n\nBenchmarks:\n")
	names := make([]string, 0, len(benchmarks))
	for n := range benchmarks {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, named(benchmarks[n].summary))
	}
	fmt.Fprint(w, named("\nRun \"tandem bench <benchmark> --help\" for a benchmark's flags, \"tandem bench --version\" for the version.\n"+
		"\"tandem bench --workload W\" and \"tandem bench --compare A,B\" are short for \"tandem bench db ...\".\n"))
}

// benchFlags returns the flag set of a sub-benchmark: its --help prints
// "tandem-bench <name>", the usage line, the help text and the flags.
func benchFlags(b *subBenchmark, stderr io.Writer) *flag.FlagSet {
	return cli.NewFlagSet(prog+" "+b.name, stderr, func(w io.Writer) {
		fmt.Fprintf(w, "Usage: %s %s %s\n\nMeasures %s.\n\n%s\n", prog, b.name, b.usage, named(b.summary), named(b.help))
	})
}
