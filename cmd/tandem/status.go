package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tandem-tx/tandem/api"
	"github.com/tandem-tx/tandem/internal/addrhint"
	"github.com/tandem-tx/tandem/internal/server"
	"github.com/tandem-tx/tandem/internal/tlsconf"
)

func init() {
	register(&command{
		name:    "status",
		summary: "show the coordinator's health, or the outcome of one global transaction",
		usage: `[--coordinator ADDR] [--resolve] [--tls-ca FILE [--tls-cert FILE --tls-key FILE]] [GTRID]
       tandem status --in-doubt --admin ADDR

A coordinator that requires a token: set TANDEM_AUTH_TOKEN_FILE to its file.
One that serves TLS: --tls-ca (and a client certificate for mutual TLS).
Without GTRID: whether the coordinator can decide, which databases it reaches,
and how many decided transactions still wait for phase 2. Exits non-zero when
the coordinator is not ready (a database refused its login: fix the DSN) or
cannot reach a database.
With GTRID: COMMITTED, ABORTED or UNDECIDED, and phase 2 on each branch.
--resolve settles an UNDECIDED gtrid by writing ABORT (the first decision wins).
A transaction decided at a commit point (its prepared branches name it) is
answered from that database's decision table; --resolve takes its key there.
--resolve never writes ABORT for a branch this coordinator does not own
(another cluster's, or a legacy unowned name without serve --adopt-unowned)
nor for a gtrid that began before its log was born: it refuses, and
--in-doubt lists such branches with their owner, reason and age; settle
them with tandem resolve.`,
		run: runStatus,
	})
}

// dialCoordinator connects to a coordinator's API, over TLS when tf names
// any file. The shared token, if the coordinator requires one, comes from
// $TANDEM_AUTH_TOKEN_FILE.
func dialCoordinator(addr string, tf tlsconf.Files) (api.CoordinatorClient, func(), error) {
	if err := addrhint.CheckAPIAddr(addr); err != nil {
		return nil, nil, err
	}
	cfg, err := tlsconf.Client(tf)
	if err != nil {
		return nil, nil, err
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if cfg != nil {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(cfg))}
	}
	if f := os.Getenv("TANDEM_AUTH_TOKEN_FILE"); f != "" {
		tok, err := server.ReadTokenFile(f)
		if err != nil {
			return nil, nil, err
		}
		opts = append(opts, grpc.WithPerRPCCredentials(api.TokenCredentials(tok)))
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("coordinator address %q: %w", addr, err)
	}
	return api.NewCoordinatorClient(conn), func() { _ = conn.Close() }, nil
}

func runStatus(args []string, stdout, stderr io.Writer) error {
	fs := newFlags(commands["status"], stderr)
	addr := fs.String("coordinator", "127.0.0.1:7070", "coordinator gRPC address")
	resolve := fs.Bool("resolve", false, "abort the gtrid if it is undecided")
	timeout := fs.Duration("timeout", 5*time.Second, "give up after this long")
	inDoubt := fs.Bool("in-doubt", false, "list the prepared branches the coordinator never settles by itself, with owner, reason and age: another coordinator cluster's (foreign owner), legacy unowned names (unless serve --adopt-unowned), and its own of gtrids that began before its log was born or before a promotion with --accept-data-loss; needs --admin")
	admin := fs.String("admin", "", "the coordinator's admin address, for --in-doubt")
	af := addAdminFlags(fs, nil)
	if err := parse(fs, args); err != nil {
		return err
	}
	if *inDoubt {
		if *admin == "" {
			return errors.New("--in-doubt needs --admin (the coordinator's tandem serve --admin address)")
		}
		ac, err := af.client("")
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		defer cancel()
		return listInDoubt(ctx, ac, *admin, stdout)
	}
	if fs.NArg() > 0 && addrhint.LooksLikeAddr(fs.Arg(0)) {
		return fmt.Errorf("%q is an address, not a gtrid: to ask the coordinator there, run tandem status --coordinator %s [GTRID]", fs.Arg(0), fs.Arg(0))
	}
	cli, closeFn, err := dialCoordinator(*addr, *af.tls)
	if err != nil {
		return err
	}
	defer closeFn()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	if fs.NArg() == 0 {
		h, err := cli.Health(ctx, &api.HealthRequest{})
		if err != nil {
			return fmt.Errorf("cannot reach the coordinator at %s: %w", *addr, addrhint.Wrap(*addr, err))
		}
		fmt.Fprintf(tw, "coordinator\t%s\tserving=%v\tversion=%s\tunfinished=%d\n", *addr, h.Serving, h.Version, h.Unfinished)
		if h.Message != "" {
			fmt.Fprintf(tw, "\t%s\n", h.Message)
		}
		var down []string
		for _, r := range h.Rms {
			state := "reachable"
			if !r.Reachable {
				state = "UNREACHABLE: " + r.Error
				down = append(down, r.Name)
			}
			fmt.Fprintf(tw, "rm %s\t%s\t%s\n", r.Name, r.Driver, state)
		}
		tw.Flush()
		switch {
		case !h.Serving:
			return fmt.Errorf("the coordinator at %s is not ready (see above)", *addr)
		case len(down) > 0:
			return fmt.Errorf("the coordinator at %s cannot reach rm %s: phase 2 and recovery retry; commits that involve it leave their branches pending",
				*addr, strings.Join(down, ", "))
		}
		return nil
	}
	s, err := cli.Status(ctx, &api.StatusRequest{Gtrid: fs.Arg(0), Resolve: *resolve})
	if err != nil {
		return addrhint.Wrap(*addr, err)
	}
	fmt.Fprintf(tw, "gtrid\t%s\n", fs.Arg(0))
	fmt.Fprintf(tw, "outcome\t%s\n", s.Outcome)
	if s.DecidedUnixNano != 0 {
		fmt.Fprintf(tw, "decided\t%s\n", time.Unix(0, s.DecidedUnixNano).UTC().Format(time.RFC3339Nano))
	}
	if s.Message != "" {
		fmt.Fprintf(tw, "message\t%s\n", s.Message)
	}
	for _, b := range s.Branches {
		line := fmt.Sprintf("branch %s\t%s\tattempts=%d", b.Rm, b.State, b.Attempts)
		if b.LastError != "" {
			line += "\tlast error: " + b.LastError
		}
		fmt.Fprintln(tw, line)
	}
	return nil
}
