package main

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/tandem-tx/tandem/internal/config"
	"github.com/tandem-tx/tandem/internal/standby"
	"github.com/tandem-tx/tandem/internal/wal"
)

func init() {
	register(&command{
		name:    "promote",
		summary: "make a stopped standby's data directory a primary's (failover): bump its epoch",
		usage: `--data-dir DIR

Failover, step by step:
  1. stop the standby (tandem serve --standby-of ...), e.g. with SIGTERM;
  2. tandem promote --data-dir DIR      (the cluster's epoch goes up by one)
  3. tandem serve --data-dir DIR --rm ... [--standby-listen ADDR ...]
     It replays the copied decision log, drives phase 2 of every COMMIT
     without END and scans every database for in-doubt branches, as any
     primary does at start.
The old primary, if it comes back, is of an older epoch: a standby that
follows the new primary refuses its stream, and it refuses a standby of a
newer epoch ("FENCED" in its log).`,
		run: runPromote,
	})
}

func runPromote(args []string, stdout, stderr io.Writer) error {
	fs := newFlags(commands["promote"], stderr)
	dir := fs.String("data-dir", config.DefaultDataDir, "the standby's data directory")
	if err := parse(fs, args); err != nil {
		return err
	}
	if _, ok, err := standby.LoadIdentity(*dir); err != nil || !ok {
		if err == nil {
			err = fmt.Errorf("%s has no cluster identity (file %q): it never received a primary's log, there is nothing to promote", *dir, standby.IdentityFile)
		}
		return err
	}
	// The log's lock: a running standby (or coordinator) holds it.
	l, err := wal.Open(wal.Options{Dir: filepath.Join(*dir, "log")}, nil)
	if err != nil {
		var ce *wal.CorruptionError
		if errors.As(err, &ce) {
			return fmt.Errorf("the standby's log in %s is damaged: %w", *dir, err)
		}
		return fmt.Errorf("open the standby's log in %s (stop the standby first): %w", *dir, err)
	}
	if err := l.Close(); err != nil {
		return err
	}
	id, err := standby.Promote(*dir)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "promoted %s: cluster %s, epoch %d\nstart it as the primary: tandem serve --data-dir %s --rm ... (it replays the log and settles every in-doubt branch)\n",
		*dir, id.Cluster, id.Epoch, *dir)
	return nil
}
