package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/tandem-tx/tandem/internal/config"
)

func init() {
	register(&command{
		name:    "follow",
		summary: "make a running demoted or fenced coordinator the standby of the new primary",
		usage: `--admin ADDR --primary ADDR [--data-dir DIR | --admin-token-file FILE] [--tls-ca FILE ...]

After a failover the old primary, if it kept running, is FENCED: it decides
and settles nothing. This makes it the new primary's standby without a
restart: its decision log and cluster identity are moved aside
(DATA_DIR/reseeded-<time>/; its records are superseded by the new primary's)
and it copies the new primary's log from the start.
  tandem follow --admin 127.0.0.1:7071 --primary 127.0.0.1:7082 --data-dir /a
It needs the coordinator's admin token: DIR/admin.token of its data
directory (or --admin-token-file, TANDEM_ADMIN_TOKEN_FILE).
--primary is the new primary's --standby-listen address.
A stopped one: "tandem reseed --data-dir DIR", then tandem serve --standby-of ADDR.`,
		run: runFollow,
	})
}

func runFollow(args []string, stdout, stderr io.Writer) error {
	fs := newFlags(commands["follow"], stderr)
	admin := fs.String("admin", "", "the fenced or demoted coordinator's admin address (its tandem serve --admin)")
	primary := fs.String("primary", "", "the new primary's --standby-listen address")
	dir := fs.String("data-dir", "", "the coordinator's data directory, where its admin token is (default "+config.DefaultDataDir+")")
	af := addAdminFlags(fs, dir)
	if err := parse(fs, args); err != nil {
		return err
	}
	if *admin == "" || *primary == "" {
		return errors.New("--admin and --primary are both required")
	}
	ac, err := af.client("")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := ac.call(ctx, http.MethodPost, *admin, "/role/follow?primary="+url.QueryEscape(*primary), nil); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "the coordinator at %s follows %s as its standby (its old log was moved aside)\n", *admin, *primary)
	return nil
}
