package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

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

// coordConn is a connection to one coordinator's API.
type coordConn struct {
	api.CoordinatorClient
	addr string
	conn *grpc.ClientConn
}

// dialCoordinator connects to a coordinator's API, over TLS when tf names
// any file. The shared token, if the coordinator requires one, comes from
// $TANDEM_AUTH_TOKEN_FILE. No connection is made before the first call.
func dialCoordinator(addr string, tf tlsconf.Files) (*coordConn, error) {
	if err := addrhint.CheckAPIAddr(addr); err != nil {
		return nil, err
	}
	cfg, err := tlsconf.Client(tf)
	if err != nil {
		return nil, err
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if cfg != nil {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(cfg))}
	}
	if f := os.Getenv("TANDEM_AUTH_TOKEN_FILE"); f != "" {
		tok, err := server.ReadTokenFile(f)
		if err != nil {
			return nil, err
		}
		opts = append(opts, grpc.WithPerRPCCredentials(api.TokenCredentials(tok)))
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("coordinator address %q: %w", addr, err)
	}
	return &coordConn{CoordinatorClient: api.NewCoordinatorClient(conn), addr: addr, conn: conn}, nil
}

// Close closes the connection.
func (c *coordConn) Close() { _ = c.conn.Close() }

// unreachable explains err, from a call that had timeout, when the call
// never got a connection to the coordinator: what happened, at which
// address, what it means for the command (so, e.g. "the outcome of G is not
// known here"; "" for nothing), and what to do (then, appended to the
// advice; "" for nothing). It returns nil when the call had a connection:
// err then came from the coordinator or from a call cut short, for the
// caller to report.
func (c *coordConn) unreachable(err error, timeout time.Duration, so, then string) error {
	code := status.Code(err)
	if (code != codes.Unavailable && code != codes.DeadlineExceeded) || c.conn.GetState() == connectivity.Ready {
		return nil
	}
	lead := "cannot reach the coordinator at " + c.addr
	if so != "" {
		lead += ", so " + so
	}
	if h := addrhint.Explain(c.addr, err); h != "" {
		return fmt.Errorf("%s: %w (%s)", lead, err, h)
	}
	if perr := probe(c.addr, min(timeout, 2*time.Second)); perr != nil {
		return fmt.Errorf("%s: nothing accepts connections there (%v). Start tandem serve there, or pass --coordinator with its --listen address (default 127.0.0.1:%s)%s",
			lead, perr, addrhint.DefaultAPIPort, then)
	}
	return fmt.Errorf("%s: %w. Something accepts connections there but no gRPC connection was made: "+
		"pass --coordinator with the coordinator's --listen address; one that serves TLS wants --tls-ca (and, with --tls-client-ca, --tls-cert and --tls-key)%s", lead, err, then)
}

// probe dials addr (HOST:PORT) over TCP to tell "nothing listens there"
// from a failed gRPC handshake; the connection is closed at once. Targets
// in gRPC's own syntax are not probed (nil).
func probe(addr string, timeout time.Duration) error {
	if _, _, err := net.SplitHostPort(addr); err != nil || strings.Contains(addr, "/") {
		return nil
	}
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return err
	}
	return conn.Close()
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
	cli, err := dialCoordinator(*addr, *af.tls)
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	if fs.NArg() == 0 {
		h, err := cli.Health(ctx, &api.HealthRequest{})
		if err != nil {
			if uerr := cli.unreachable(err, *timeout, "", ""); uerr != nil {
				return uerr
			}
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
	g := fs.Arg(0)
	s, err := cli.Status(ctx, &api.StatusRequest{Gtrid: g, Resolve: *resolve})
	if err != nil {
		then := ""
		if *resolve {
			then = "; then run tandem status --resolve " + g + " again (twice is safe: the first decision wins)"
		}
		if uerr := cli.unreachable(err, *timeout, "the outcome of "+g+" is not known here", then); uerr != nil {
			return uerr
		}
		if status.Code(err) == codes.DeadlineExceeded {
			what := "its outcome"
			if *resolve {
				what = "whether it wrote ABORT"
			}
			return fmt.Errorf("the coordinator at %s did not answer about %s within %s (--timeout), so %s is not known here: run tandem status %s again: %w",
				*addr, g, *timeout, what, g, err)
		}
		return addrhint.Wrap(*addr, err)
	}
	fmt.Fprintf(tw, "gtrid\t%s\n", g)
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
