package main

import (
	"fmt"
	"io"

	"github.com/tandem-tx/tandem/internal/service"
)

func init() {
	register(&command{name: "version", summary: "print the version", usage: "", run: func(args []string, stdout, stderr io.Writer) error {
		if err := parse(newFlags(commands["version"], stderr), args); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "tandem", service.Version)
		return nil
	}})
}
