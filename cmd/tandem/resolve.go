package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"time"

	"github.com/tandem-tx/tandem/internal/config"
)

func init() {
	register(&command{
		name:    "resolve",
		summary: "list and settle in-doubt branches (another cluster's, legacy unowned, or from before this log's birth or a promotion with --accept-data-loss)",
		usage: `--admin ADDR [--gtrid G [--commit | --abort]]

A coordinator never presumes abort for a prepared branch it does not own
(another coordinator cluster's; a legacy unowned name, unless it runs with
--adopt-unowned), nor for one of a gtrid that began before its log was born
or before a promotion with --accept-data-loss (it may lack decisions the
old primary made and acted on), with no decision in its log. It lists them
instead (with owner, age and why), and you settle each one:
  tandem resolve --admin 127.0.0.1:7081                 list the in-doubt branches
  tandem resolve --admin 127.0.0.1:7081 --gtrid G       show what every database holds of G
  tandem resolve --admin 127.0.0.1:7081 --gtrid G --commit   (or --abort)
Branches decided at a commit point (tandemcp2: names, XA format TAC2) are
not this command's: their outcome is the commit point's decision table's,
which tandem status G reads (COMMITTED or ABORTED there, even once no branch
is prepared) and tandem status --resolve G settles by taking its key. A
decision row that vanished while its key was taken is an unknown outcome:
nothing is written, and it is never taken for an abort.
Look at the data first: a database that no longer holds G prepared either
committed or rolled it back, which its tables (not Tandem) can tell. If one
branch of G was committed, commit the others; if one was rolled back, abort.
The choice is written to the decision log and phase 2 settles every branch
still prepared, another cluster's included (by its own name: do this only
when that cluster's coordinator will not come back to settle it). Settling needs the coordinator's admin token, as role changes do: DIR/admin.token
of its data directory (--data-dir, --admin-token-file, TANDEM_ADMIN_TOKEN_FILE).`,
		run: runResolve,
	})
}

func runResolve(args []string, stdout, stderr io.Writer) error {
	fs := newFlags(commands["resolve"], stderr)
	admin := fs.String("admin", "", "the primary's admin address (its tandem serve --admin)")
	gtrid := fs.String("gtrid", "", "the in-doubt gtrid to show or settle")
	commit := fs.Bool("commit", false, "settle the gtrid's prepared branches by committing them")
	abort := fs.Bool("abort", false, "settle the gtrid's prepared branches by rolling them back")
	dir := fs.String("data-dir", "", "the coordinator's data directory, where its admin token is (default "+config.DefaultDataDir+")")
	af := addAdminFlags(fs, dir)
	if err := parse(fs, args); err != nil {
		return err
	}
	ac, err := af.client("")
	if err != nil {
		return err
	}
	if *admin == "" {
		return errors.New("--admin is required (the primary's tandem serve --admin address)")
	}
	if *commit && *abort {
		return errors.New("--commit and --abort exclude each other")
	}
	if (*commit || *abort) && *gtrid == "" {
		return errors.New("--commit and --abort need --gtrid")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if *gtrid == "" {
		return listInDoubt(ctx, ac, *admin, stdout)
	}
	var held struct {
		Prepared map[string]bool `json:"prepared"`
	}
	if err := ac.call(ctx, http.MethodGet, *admin, "/in-doubt?gtrid="+url.QueryEscape(*gtrid), &held); err != nil {
		return err
	}
	names := make([]string, 0, len(held.Prepared))
	for n := range held.Prepared {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(stdout, "gtrid %s:\n", *gtrid)
	somePrepared := false
	for _, n := range names {
		state := "not prepared (committed, rolled back, or never prepared there: look at its data)"
		if held.Prepared[n] {
			state, somePrepared = "PREPARED", true
		}
		fmt.Fprintf(stdout, "  %-12s %s\n", n, state)
	}
	if !somePrepared {
		// A commit point's branches are not this command's: their outcome
		// is a row in the commit point's decision table, which tandem
		// status reads (and --resolve takes, never guessing: a row that
		// vanished is an unknown outcome, not an abort).
		fmt.Fprintf(stdout, "  (branches decided at a commit point are not listed here: tandem status %s answers from the commit point's decision table, "+
			"and tandem status --resolve %s settles them; an abort is never written for a gtrid whose decision row is merely gone)\n", *gtrid, *gtrid)
	}
	if !*commit && !*abort {
		return errors.New("nothing settled: choose --commit or --abort for this gtrid once you know what its committed branches did")
	}
	outcome := "abort"
	if *commit {
		outcome = "commit"
	}
	var out struct {
		Outcome string `json:"outcome"`
		Pending bool   `json:"phase2_pending"`
	}
	if err := ac.call(ctx, http.MethodPost, *admin, "/in-doubt/resolve?gtrid="+url.QueryEscape(*gtrid)+"&outcome="+outcome, &out); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "decided %s for %s (phase 2 pending: %v)\n", out.Outcome, *gtrid, out.Pending)
	return nil
}
