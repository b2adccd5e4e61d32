package main

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The coordinator's binary links neither the benchmark nor its test proxy:
// they live in tandem-bench (cmd/tandem-bench).
func TestTandemDoesNotLinkTheBenchmark(t *testing.T) {
	for _, tags := range []string{"", "failpoints"} {
		out, err := exec.Command("go", "list", "-tags", tags, "-deps", ".").CombinedOutput()
		if err != nil {
			t.Fatalf("go list -tags %q -deps ./cmd/tandem: %v\n%s", tags, err, out)
		}
		for _, pkg := range strings.Fields(string(out)) {
			if strings.HasSuffix(pkg, "/internal/bench") || strings.HasSuffix(pkg, "/internal/testproxy") ||
				strings.Contains(pkg, "/internal/bench/") || strings.Contains(pkg, "/internal/testproxy/") {
				t.Errorf("go list -tags %q -deps ./cmd/tandem includes %s: move what tandem needs out of it, or the use into cmd/tandem-bench", tags, pkg)
			}
		}
		if !strings.Contains(string(out), "github.com/tandem-tx/tandem/internal/coord") {
			t.Fatalf("go list -tags %q -deps ./cmd/tandem does not list internal/coord; is this the listing of tandem?\n%s", tags, out)
		}
	}
}

// execCall records what the shim asked to exec.
type execCall struct {
	path string
	argv []string
}

// shimIn returns a shim whose executable is dir/tandem, whose PATH is path
// (empty: nothing on it) and whose exec records the call and fails.
func shimIn(dir, path string, calls *[]execCall) benchShim {
	return benchShim{
		executable: func() (string, error) { return filepath.Join(dir, "tandem"), nil },
		lookPath: func(file string) (string, error) {
			if path == "" {
				return "", exec.ErrNotFound
			}
			return filepath.Join(path, file), nil
		},
		exec: func(p string, argv, _ []string) error {
			*calls = append(*calls, execCall{p, argv})
			return errors.New("recorded, not run")
		},
	}
}

func writeExecutable(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"), mode); err != nil {
		t.Fatal(err)
	}
}

func TestBenchShimExecsTheOneNextToTandemFirst(t *testing.T) {
	bin := t.TempDir()
	writeExecutable(t, filepath.Join(bin, "tandem-bench"), 0o755)
	var calls []execCall
	var stderr strings.Builder
	err := shimIn(bin, "/elsewhere", &calls).run([]string{"db", "--compare", "raw2pc,xa"}, &stderr)
	want := []execCall{{filepath.Join(bin, "tandem-bench"), []string{"tandem bench", "db", "--compare", "raw2pc,xa"}}}
	if !reflect.DeepEqual(calls, want) {
		t.Fatalf("exec calls %q, want %q", calls, want)
	}
	if err == nil || !strings.Contains(err.Error(), "recorded, not run") {
		t.Fatalf("a failed exec returned %v, want its error", err)
	}
}

func TestBenchShimFallsBackToPATH(t *testing.T) {
	bin := t.TempDir()
	// Neither a directory nor a file nobody may execute is taken.
	writeExecutable(t, filepath.Join(bin, "tandem-bench"), 0o644)
	other := t.TempDir()
	if err := os.Mkdir(filepath.Join(other, "tandem-bench"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{bin, other} {
		var calls []execCall
		var stderr strings.Builder
		_ = shimIn(dir, "/usr/local/bin", &calls).run([]string{"log", "--help"}, &stderr)
		want := []execCall{{"/usr/local/bin/tandem-bench", []string{"tandem bench", "log", "--help"}}}
		if !reflect.DeepEqual(calls, want) {
			t.Errorf("tandem in %s: exec calls %q, want %q", dir, calls, want)
		}
	}
}

// Without tandem-bench, `tandem bench` says how to build it and exits 2.
func TestBenchShimWithoutTandemBenchSaysHowToBuildIt(t *testing.T) {
	bin := t.TempDir()
	var calls []execCall
	var stderr strings.Builder
	err := shimIn(bin, "", &calls).run([]string{"--compare", "sql,xa"}, &stderr)
	if len(calls) != 0 {
		t.Fatalf("exec called: %q", calls)
	}
	if code := runCommand(&command{name: "bench", run: func([]string, io.Writer, io.Writer) error { return err }}, nil, io.Discard, io.Discard); code != 2 {
		t.Fatalf("exit status %d (err %v), want 2", code, err)
	}
	for _, want := range []string{"tandem-bench not found", "looked in " + bin + " and PATH", "go build -o bin/tandem-bench ./cmd/tandem-bench", "go install ./cmd/tandem-bench"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("message lacks %q:\n%s", want, stderr.String())
		}
	}
}
