package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/tandem-tx/tandem/internal/server"
	"github.com/tandem-tx/tandem/waits"
)

func init() {
	register(&command{
		name:    "waits",
		summary: "show where a running coordinator's time went: its wait events, sorted by total time",
		usage: `[--admin ADDR] [--interval D] [--side coordinator|client|all] [--json]

Reads GET /waits from the coordinator's admin listener (tandem serve --admin,
default ` + defaultAdmin + `) and prints one table per side:

  Event waited on          Times Waited  Max. Wait (s)  Total Waited (s)  Avg (ms)
  rm commit prepared               1001         0.0081            0.6120     0.611

Totals are since the coordinator started; with --interval, only the waits of
the next interval (two samples, subtracted; Max. Wait is then exact if the
largest wait ever fell in the interval, else within a factor of 2). The
client side is the SDK's table in the coordinator's process: empty for
"tandem serve", filled when the coordinator is embedded in the application.
Every event is described in the README ("Wait events"). A coordinator that
listens off loopback wants a token: the admin token (--admin-token-file) or
the API's (TANDEM_AUTH_TOKEN_FILE); with TLS, --tls-ca.`,
		run: runWaits,
	})
}

func runWaits(args []string, stdout, stderr io.Writer) error {
	fs := newFlags(commands["waits"], stderr)
	addr := fs.String("admin", defaultAdmin, "the coordinator's admin HTTP address")
	interval := fs.Duration("interval", 0, "show only the waits during this interval (e.g. 10s), instead of since start")
	side := fs.String("side", "all", "coordinator, client or all")
	asJSON := fs.Bool("json", false, "print JSON (the /waits body, or the interval's delta) instead of tables")
	timeout := fs.Duration("timeout", 5*time.Second, "give up on one request after this long")
	af := addAdminFlags(fs, nil)
	if err := parse(fs, args); err != nil {
		return err
	}
	ac, err := af.client("")
	if err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "tandem waits: unexpected argument %q\n", fs.Arg(0))
		return errUsage
	}
	switch *side {
	case "all", waits.SideCoordinator, waits.SideClient:
	default:
		fmt.Fprintf(stderr, "tandem waits: --side %q: use coordinator, client or all\n", *side)
		return errUsage
	}
	get := func() (server.WaitsResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		defer cancel()
		return fetchWaits(ctx, ac, *addr)
	}
	first, err := get()
	if err != nil {
		return err
	}
	coordSnap, clientSnap := waits.FromJSON(first.Coordinator), waits.FromJSON(first.Client)
	title := "since the coordinator started"
	if *interval > 0 {
		time.Sleep(*interval)
		second, err := get()
		if err != nil {
			return err
		}
		coordSnap = waits.FromJSON(second.Coordinator).Sub(coordSnap)
		clientSnap = waits.FromJSON(second.Client).Sub(clientSnap)
		title = "during the last " + interval.String()
	}
	if *asJSON {
		out := map[string]waits.JSONSnapshot{}
		if *side != waits.SideClient {
			out[waits.SideCoordinator] = coordSnap.JSON(false, false)
		}
		if *side != waits.SideCoordinator {
			out[waits.SideClient] = clientSnap.JSON(false, false)
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	if *side != waits.SideClient {
		fmt.Fprintf(stdout, "coordinator %s, %s:\n", *addr, title)
		if err := coordSnap.WriteTable(stdout); err != nil {
			return err
		}
	}
	if *side != waits.SideCoordinator && (*side == waits.SideClient || clientSnap.Total() > 0) {
		fmt.Fprintf(stdout, "\nclient (SDK in the coordinator's process), %s:\n", title)
		return clientSnap.WriteTable(stdout)
	}
	return nil
}

// fetchWaits reads GET /waits?buckets=1 from an admin listener: with the
// histograms, so that an interval's Max. Wait can be bounded by its own
// waits (Snapshot.Sub) rather than by the all-time maximum.
func fetchWaits(ctx context.Context, ac *adminClient, addr string) (server.WaitsResponse, error) {
	var out server.WaitsResponse
	err := ac.call(ctx, http.MethodGet, addr, "/waits?buckets=1", &out)
	return out, err
}
