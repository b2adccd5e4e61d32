package main

import (
	"fmt"
	"io"

	"github.com/tandem-tx/tandem/internal/benchhtml"
)

// htmlUsage is the help of every sub-benchmark's --html flag.
const htmlUsage = "also write the report as one self-contained HTML page (charts, no network needed to open it) to this file"

// writeHTML writes a sub-benchmark's --html page to path (nothing when
// path is ""): write renders it for the command line `prog name args`.
func writeHTML(path, name string, args []string, stderr io.Writer, write func(io.Writer, benchhtml.Run) error) error {
	if path == "" {
		return nil
	}
	run := benchhtml.Run{Command: append([]string{prog, name}, args...)}
	n, err := benchhtml.WriteFile(path, func(w io.Writer) error { return write(w, run) })
	if err != nil {
		return fmt.Errorf("the report is above, but the HTML page is not written: %w", err)
	}
	fmt.Fprintf(stderr, "%s %s: HTML report written to %s (%d KB)\n", prog, name, path, (n+1023)/1024)
	return nil
}
