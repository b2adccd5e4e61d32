package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// The benchmark is a program of its own, tandem-bench (cmd/tandem-bench),
// so that it and its test proxy are not linked into the coordinator's
// binary. `tandem bench ARGS` execs it with ARGS: the same flags, help,
// output and exit status as `tandem-bench ARGS`.

// benchProgram is the file name of the benchmark program.
const benchProgram = "tandem-bench"

// benchBuildHint says how to get tandem-bench; printed when it is missing.
const benchBuildHint = `The benchmark is a separate program, tandem-bench. Build it next to tandem
from the checkout (as scripts/quickstart does):
  go build -o bin/tandem-bench ./cmd/tandem-bench
or install it on PATH:
  go install ./cmd/tandem-bench    # into $(go env GOPATH)/bin
`

func init() {
	register(&command{
		name:    "bench",
		summary: "measure Tandem on this machine: transactions against the databases (--workload, --compare), the decision log's disk (log), a standby's catch-up (ship); runs tandem-bench",
		usage:   "[<benchmark>] [flags]",
		run: func(args []string, _, stderr io.Writer) error {
			return benchShim{executable: os.Executable, lookPath: exec.LookPath, exec: syscall.Exec}.run(args, stderr)
		},
	})
}

// benchShim finds tandem-bench and replaces this process with it. Its
// fields are the operating system's functions, replaced in tests.
type benchShim struct {
	executable func() (string, error)
	lookPath   func(file string) (string, error)
	exec       func(path string, argv []string, env []string) error
}

// run execs tandem-bench with args and argv[0] "tandem bench" (so that its
// usage lines say "tandem bench"); it returns only if that fails. When
// tandem-bench cannot be found it prints where it looked and how to build
// it, and returns errUsage (exit status 2).
func (s benchShim) run(args []string, stderr io.Writer) error {
	path, tried := s.find()
	if path == "" {
		fmt.Fprintf(stderr, "tandem bench: %s not found (looked in %s)\n\n%s", benchProgram, tried, benchBuildHint)
		return errUsage
	}
	err := s.exec(path, append([]string{"tandem bench"}, args...), os.Environ())
	return fmt.Errorf("running %s: %w", path, err)
}

// find returns the tandem-bench to run, or "" and where it looked. The one
// in this executable's directory comes first: bin/tandem runs
// bin/tandem-bench, built from the same checkout, even if another is on
// PATH.
func (s benchShim) find() (path, tried string) {
	tried = "PATH"
	if self, err := s.executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), benchProgram)
		if isExecutable(p) {
			return p, ""
		}
		tried = filepath.Dir(self) + " and PATH"
	}
	// exec.LookPath refuses one found only through a relative PATH entry
	// such as "." (exec.ErrDot); so does this.
	if p, err := s.lookPath(benchProgram); err == nil {
		return p, ""
	}
	return "", tried
}

// isExecutable reports whether p is a regular file that someone may execute.
func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}
