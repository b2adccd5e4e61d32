package main

import (
	"fmt"
	"io"

	"github.com/tandem-tx/tandem/internal/config"
	"github.com/tandem-tx/tandem/internal/standby"
)

func init() {
	register(&command{
		name:    "reseed",
		summary: "make a stopped standby's (or superseded primary's) data directory an empty standby's: its log is moved aside, then copied anew",
		usage: `--data-dir DIR

Use it when a standby must copy a primary's decision log from the start:
  - the standby refuses its primary because the primary is of a newer epoch
    (a failover promoted another coordinator: its log positions are its own,
    unrelated to the ones this standby copied), or of another cluster;
  - the primary refuses the standby ("diverged", or "an older primary's
    log");
  - an old primary fenced by a promotion ("FENCED") is to become the new
    primary's standby.
Step by step:
  1. stop the standby (or the old primary);
  2. tandem reseed --data-dir DIR
     DIR/log and DIR/cluster are moved into DIR/reseeded-<UTC time>/
     (an old primary's log there may hold decisions the new primary never
     received: check it, or copy it elsewhere: only the newest two
     reseeded-* copies are kept, older ones are removed);
  3. tandem serve --data-dir DIR --standby-of PRIMARY ...
     The standby adopts the primary's cluster and epoch and copies its
     whole log.
It refuses while a process holds the log (a running standby or
coordinator). Never run it on the data directory of the primary in service.`,
		run: runReseed,
	})
}

func runReseed(args []string, stdout, stderr io.Writer) error {
	fs := newFlags(commands["reseed"], stderr)
	dir := fs.String("data-dir", config.DefaultDataDir, "the data directory to re-seed")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "tandem reseed: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return errUsage
	}
	to, err := standby.Reseed(*dir)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "re-seeded %s: its decision log and cluster identity are in %s (nothing deleted)\nstart it as a standby: tandem serve --data-dir %s --standby-of PRIMARY ... (it copies the primary's whole log)\n",
		*dir, to, *dir)
	return nil
}
