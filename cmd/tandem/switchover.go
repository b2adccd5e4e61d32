package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/tandem-tx/tandem/internal/server"
)

func init() {
	register(&command{
		name:    "switchover",
		summary: "hand the primary role to the standby with no loss; the old primary becomes its standby",
		usage: `--primary-admin ADDR --standby-admin ADDR [--timeout D] [--admin-token-file FILE | --primary-token-file FILE --standby-token-file FILE] [--tls-ca FILE ...]

A planned role change, through both coordinators' admin listeners (--admin):
  1. the primary refuses new calls (UNAVAILABLE: retry on the new primary),
     lets the calls in flight finish, closes its coordinator, and waits
     until the standby has acknowledged every record of its log;
  2. the standby is promoted: the cluster's epoch goes up by one, it replays
     its copy of the log, drives phase 2 of every unfinished COMMIT, scans
     the databases for in-doubt branches, and serves decisions;
  3. the old primary's log is moved aside (DATA_DIR/reseeded-<time>/) and
     it follows the new primary as its standby (on the new primary's
     --standby-listen, which the standby must have been started with).
If step 1 or 2 fails, the old primary serves as the primary again.
No acknowledged decision is lost: the standby has every record before it
is promoted. Clients must then send Commit to the new primary's --listen.
Both role changes need the coordinators' admin tokens (DATA_DIR/admin.token
on each host): one file for both (--admin-token-file, TANDEM_ADMIN_TOKEN_FILE:
start both coordinators with that --admin-token-file), or one each.`,
		run: runSwitchover,
	})
}

func runSwitchover(args []string, stdout, stderr io.Writer) error {
	fs := newFlags(commands["switchover"], stderr)
	primary := fs.String("primary-admin", "", "the primary's admin address (its tandem serve --admin)")
	stby := fs.String("standby-admin", "", "the standby's admin address")
	follow := fs.String("follow", "", "the address the old primary follows the new one at (default: the standby's --standby-listen)")
	timeout := fs.Duration("timeout", 60*time.Second, "give up (and resume the old primary) after this long")
	primaryTok := fs.String("primary-token-file", "", "the primary's admin token (default: --admin-token-file)")
	standbyTok := fs.String("standby-token-file", "", "the standby's admin token (default: --admin-token-file)")
	af := addAdminFlags(fs, nil)
	if err := parse(fs, args); err != nil {
		return err
	}
	if *primary == "" || *stby == "" {
		return fmt.Errorf("--primary-admin and --standby-admin are both required (the coordinators' tandem serve --admin addresses)")
	}
	pc, err := af.client(*primaryTok)
	if err != nil {
		return err
	}
	sc, err := af.client(*standbyTok)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	var ps, ss server.RoleStatus
	if err := pc.call(ctx, http.MethodGet, *primary, "/standby", &ps); err != nil {
		return err
	}
	if err := sc.call(ctx, http.MethodGet, *stby, "/standby", &ss); err != nil {
		return err
	}
	switch {
	case ps.Role != server.RolePrimary.String():
		return fmt.Errorf("%s is a %s, not a primary", *primary, ps.Role)
	case ss.Role != server.RoleStandby.String():
		return fmt.Errorf("%s is a %s, not a standby", *stby, ss.Role)
	case ps.Cluster != ss.Cluster:
		return fmt.Errorf("the primary is of cluster %s, the standby of cluster %s: not a pair", ps.Cluster, ss.Cluster)
	case !ps.Connected || !ss.Connected:
		return fmt.Errorf("the standby is not connected to the primary (primary says connected=%v, standby says %v): a switchover needs it following", ps.Connected, ss.Connected)
	}
	to := *follow
	if to == "" {
		to = ss.StandbyListen
	}
	if to == "" {
		return fmt.Errorf("the standby at %s has no --standby-listen, so the old primary could not follow it afterwards: restart the standby with --standby-listen ADDR (or pass --follow ADDR)", *stby)
	}
	start := time.Now()
	fmt.Fprintf(stdout, "switchover: primary %s (epoch %d, at %s) → standby %s (at %s, lag %d records)\n", *primary, ps.Epoch, ps.PrimaryAt, *stby, ss.StandbyAt, ps.LagRecords)
	var h server.Handover
	if err := pc.call(ctx, http.MethodPost, *primary, "/role/demote", &h); err != nil {
		return fmt.Errorf("step 1, demote the primary: %w", err)
	}
	fmt.Fprintf(stdout, "1. the primary handed over: its log ends at %s, the standby has it all (%s)\n", h.Position, h.StandbyAt)
	var pr struct {
		Epoch uint64 `json:"epoch"`
	}
	if err := sc.call(ctx, http.MethodPost, *stby, "/role/promote", &pr); err != nil {
		rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer rcancel()
		// Resume the old primary only if the standby certainly did not
		// take the new epoch: otherwise two coordinators could decide.
		var now server.RoleStatus
		if serr := sc.call(rctx, http.MethodGet, *stby, "/standby", &now); serr != nil || now.Role != server.RoleStandby.String() || now.Epoch != h.Epoch {
			return fmt.Errorf("step 2, promote the standby: %w; the standby's state is uncertain (role %q, epoch %d, %v), so the old primary stays demoted: if the standby is the primary now (epoch %d), run tandem follow --admin %s --primary %s; if not, POST /role/resume on %s",
				err, now.Role, now.Epoch, serr, h.Epoch+1, *primary, to, *primary)
		}
		if rerr := pc.call(rctx, http.MethodPost, *primary, "/role/resume", nil); rerr != nil {
			return fmt.Errorf("step 2, promote the standby: %w; and resuming the old primary failed too: %v (start one of them as the primary by hand)", err, rerr)
		}
		return fmt.Errorf("step 2, promote the standby: %w; the old primary serves again", err)
	}
	fmt.Fprintf(stdout, "2. %s is the primary now, epoch %d\n", *stby, pr.Epoch)
	if err := pc.call(ctx, http.MethodPost, *primary, "/role/follow?primary="+url.QueryEscape(to), nil); err != nil {
		return fmt.Errorf("step 3, the old primary to follow %s: %w (the switchover itself is done; re-seed the old primary by hand: tandem reseed, then tandem serve --standby-of %s)", to, err, to)
	}
	for {
		var st server.RoleStatus
		if err := pc.call(ctx, http.MethodGet, *primary, "/standby", &st); err == nil && st.Role == server.RoleStandby.String() && st.Connected {
			fmt.Fprintf(stdout, "3. %s follows the new primary at %s as its standby\n", *primary, to)
			break
		}
		select {
		case <-ctx.Done():
			fmt.Fprintf(stdout, "3. %s was told to follow %s but is not connected yet (see its log)\n", *primary, to)
			return nil
		case <-time.After(50 * time.Millisecond):
		}
	}
	fmt.Fprintf(stdout, "switchover done in %v\n", time.Since(start).Round(time.Millisecond))
	return nil
}
