package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/tandem-tx/tandem/internal/benchhtml"
)

// htmlUsage is the help of every sub-benchmark's --html flag.
const htmlUsage = "also write the report as one self-contained HTML page (charts; opens from the file, no network needed) to this file"

// htmlPage is a sub-benchmark's --html file. It is created before the run,
// so that a path that cannot be written fails at once rather than after
// the benchmark, and removed again if the run ends without a report.
type htmlPage struct {
	path    string
	f       *os.File
	written bool
}

// createHTML creates path for the page (nil, nil when path is "").
func createHTML(path string) (*htmlPage, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--html: %w", err)
	}
	return &htmlPage{path: path, f: f}, nil
}

// write renders the page of `prog name args` into the file and closes it.
func (p *htmlPage) write(name string, args []string, stderr io.Writer, render func(io.Writer, benchhtml.Run) error) error {
	if p == nil {
		return nil
	}
	w := bufio.NewWriter(p.f)
	// prog is "tandem bench" through the shim: two words of the command line.
	err := render(w, benchhtml.Run{Command: append(append(strings.Fields(prog), name), args...)})
	if err == nil {
		err = w.Flush()
	}
	st, serr := p.f.Stat()
	if cerr := p.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("--html %s: the report is not written: %w", p.path, err)
	}
	p.written = true
	size := int64(0)
	if serr == nil {
		size = st.Size()
	}
	fmt.Fprintf(stderr, "%s %s: HTML report written to %s (%d KB)\n", prog, name, p.path, (size+1023)/1024)
	return nil
}

// abandon removes the file if no page was written into it.
func (p *htmlPage) abandon() {
	if p != nil && !p.written {
		p.f.Close()
		os.Remove(p.path)
	}
}
