package main

import (
	"fmt"
	"io"

	"github.com/tandem-tx/tandem/internal/version"
)

func init() {
	register(&command{name: "version", summary: "print the version, the git commit and the build date (also: tandem --version)", usage: "",
		run: func(args []string, stdout, stderr io.Writer) error {
			if err := parse(newFlags(commands["version"], stderr), args); err != nil {
				return err
			}
			fmt.Fprintln(stdout, version.Line("tandem"))
			return nil
		}})
}
