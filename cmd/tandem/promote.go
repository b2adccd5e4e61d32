package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"time"

	"github.com/tandem-tx/tandem/internal/config"
	"github.com/tandem-tx/tandem/internal/standby"
	"github.com/tandem-tx/tandem/internal/wal"
)

func init() {
	register(&command{
		name:    "promote",
		summary: "make a standby the primary (failover): a running one (--admin) or a stopped one's data directory",
		usage: `--admin ADDR [--data-dir DIR | --admin-token-file FILE] [--tls-ca FILE ...] [--accept-data-loss [--old-primary-stopped]] | --data-dir DIR [--accept-data-loss --old-primary-stopped]

A running standby (its tandem serve --admin address):
  tandem promote --admin 127.0.0.1:7081 --data-dir /b
The role change needs the standby's admin token: DIR/admin.token of its
data directory (or --admin-token-file, TANDEM_ADMIN_TOKEN_FILE).
It stops following, bumps the cluster's epoch, replays its copy of the log,
drives phase 2 of every COMMIT without END, scans every database for
in-doubt branches, and serves decisions (and ships to a standby of its own
on its --standby-listen). It tells the old primary, if reachable, that it is
superseded: a primary that learns of a newer epoch stops deciding and
settling ("FENCED").

A stopped standby, step by step:
  1. stop the standby (tandem serve --standby-of ...), e.g. with SIGTERM;
  2. tandem promote --data-dir DIR      (the cluster's epoch goes up by one)
  3. tandem serve --data-dir DIR --rm ... [--standby-listen ADDR ...]
     It replays the copied decision log, drives phase 2 of every COMMIT
     without END and scans every database for in-doubt branches, as any
     primary does at start.
A standby that is not synchronized with its primary (async or arch
transport; max-availability cut from its primary, or stopped, before the
primary was lost) is refused: it may lack decisions the old primary acted
on. --accept-data-loss promotes it anyway: those decisions are lost, and the
new primary never presumes abort for a prepared branch of a gtrid that began
before the promotion and is not in its log: tandem status --in-doubt lists
them, tandem resolve settles each after showing what every database holds.
With --accept-data-loss the old primary must also be known not to decide
any more: a running standby reaches it during the promotion (the new epoch
fences it), or you say it is stopped with --old-primary-stopped (killed,
powered off, or cut off from the databases). An old primary cut off by a
partition goes on deciding, and two primaries deciding for the same
databases can split a transaction; without either, the promotion is refused.

The old primary, if it comes back, is of an older epoch: a standby that
follows the new primary refuses its stream, and it refuses a standby of a
newer epoch ("FENCED" in its log).`,
		run: runPromote,
	})
}

func runPromote(args []string, stdout, stderr io.Writer) error {
	fs := newFlags(commands["promote"], stderr)
	dir := fs.String("data-dir", "", "a stopped standby's data directory; with --admin, the running standby's (where its admin token is) (default "+config.DefaultDataDir+")")
	admin := fs.String("admin", "", "a running standby's admin address (its tandem serve --admin)")
	af := addAdminFlags(fs, dir)
	acceptLoss := fs.Bool("accept-data-loss", false, "promote a standby that is not synchronized with its primary (async or arch transport, or cut from it): decisions it never received are lost, and the prepared branches of gtrids it cannot know are listed as in doubt (tandem status --in-doubt) for you to settle (tandem resolve) instead of being rolled back")
	oldStopped := fs.Bool("old-primary-stopped", false, "with --accept-data-loss: you made sure the old primary is stopped (killed, powered off, or cut off from the databases); "+
		"needed unless a running standby reaches the old primary during the promotion (it then fences it): two coordinators deciding for the same databases can split a transaction")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *oldStopped && !*acceptLoss {
		return fmt.Errorf("--old-primary-stopped goes with --accept-data-loss (a synchronized standby needs neither)")
	}
	if *admin != "" {
		ac, err := af.client("")
		if err != nil {
			return err
		}
		var out struct {
			Cluster string `json:"cluster"`
			Epoch   uint64 `json:"epoch"`
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		path := "/role/promote"
		if *acceptLoss {
			path += "?accept-data-loss=1"
		}
		if *oldStopped {
			path += "&old-primary-stopped=1"
		}
		if err := ac.call(ctx, http.MethodPost, *admin, path, &out); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "promoted the standby at %s: cluster %s, epoch %d; it serves decisions now\n", *admin, out.Cluster, out.Epoch)
		if *acceptLoss {
			fmt.Fprintf(stdout, "if it was not synchronized, decisions it never received are lost and gtrids from before the promotion are never presumed aborted: list them with tandem status --in-doubt --admin %s, settle each with tandem resolve\n", *admin)
		}
		return nil
	}
	if *dir == "" {
		*dir = config.DefaultDataDir
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
	id, err := standby.Promote(*dir, standby.PromoteOptions{AcceptDataLoss: *acceptLoss, OldPrimaryStopped: *oldStopped})
	if err != nil {
		return err
	}
	if at, ok, _ := standby.UnsynchronizedPromotion(*dir); ok && *acceptLoss {
		fmt.Fprintf(stdout, "promoted WITHOUT being synchronized (--accept-data-loss): decisions the old primary made after this standby's last copy are lost; "+
			"prepared branches of gtrids that began before %s and are not in the log are never presumed aborted: list them with tandem status --in-doubt and settle each with tandem resolve\n",
			at.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(stdout, "promoted %s: cluster %s, epoch %d\nstart it as the primary: tandem serve --data-dir %s --rm ... (it replays the log and settles every in-doubt branch)\n",
		*dir, id.Cluster, id.Epoch, *dir)
	return nil
}
