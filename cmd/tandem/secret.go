package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/tandem-tx/tandem/internal/standby"
)

func init() {
	register(&command{
		name:    "secret",
		summary: "write a new random cluster secret for the standby link (--standby-secret-file)",
		usage: `--out FILE

Writes 32 random bytes, in hexadecimal, to FILE (created with mode 0600; an
existing file is never overwritten). Copy the same file to the primary and
the standby (scp, a secrets manager) and start both with
--standby-secret-file FILE. The secret is never printed.`,
		run: runSecret,
	})
}

func runSecret(args []string, stdout, stderr io.Writer) error {
	fs := newFlags(commands["secret"], stderr)
	out := fs.String("out", "", "file to create (mode 0600)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *out == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "tandem secret: --out FILE is required")
		return errUsage
	}
	s, err := standby.NewSecret()
	if err != nil {
		return err
	}
	f, err := os.OpenFile(*out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%s exists: not overwritten (a coordinator may be using it); remove it first to make a new secret", *out)
	}
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(f, s)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(*out)
		return fmt.Errorf("write %s: %w", *out, err)
	}
	fmt.Fprintf(stdout, "wrote a new standby secret to %s (mode 0600); start both coordinators with --standby-secret-file %s\n", *out, *out)
	return nil
}
