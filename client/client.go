package client

import (
	"context"
	"crypto/tls"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/tandem-tx/tandem/api"
	"github.com/tandem-tx/tandem/internal/decision"
	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/internal/traceprop"
	"github.com/tandem-tx/tandem/waits"
	"github.com/tandem-tx/tandem/xid"
)

// RM declares a resource manager the application uses. Its Name must be the
// one the coordinator is configured with.
type RM struct {
	Name string
	// Driver is "postgres" or "mysql" (MySQL and MariaDB).
	Driver string
	// MultiStatements says the application's connections to this RM accept
	// several statements in one round trip (go-sql-driver/mysql with
	// multiStatements=true&interpolateParams=true). The SDK then sends
	// XA START with the first statement and XA END with XA PREPARE.
	MultiStatements bool
	// NeverCommitPoint keeps this RM from being a transaction's commit point
	// (see DecideAt): its branches are always prepared.
	NeverCommitPoint bool
	// CommitPointStrength breaks ties when several PostgreSQL writers could
	// be the commit point: the highest wins, then the first enlisted.
	CommitPointStrength int
	// DB, when set, is a pool the SDK may use for its own statements on this
	// RM: creating the decision table (tandem_decision) at first use, and,
	// when this RM is the commit point and its connection broke during the
	// commit, taking the decision key to learn the outcome at once. Without
	// it the table must exist (the coordinator creates it at start, or run
	// tandem init-rm), and such an outcome is reported unknown (the
	// coordinator's scan settles the branches).
	DB *sql.DB
}

// Config configures a Client. Creating a client makes no network call.
type Config struct {
	// Coordinator is the coordinator's gRPC address (host:port). It is only
	// contacted when two or more branches of a transaction wrote.
	Coordinator string
	// Coordinators are more addresses of coordinators of the same cluster
	// (the primary and its standbys), so that the client follows the
	// primary through a switchover or a failover with no change to the
	// application. The list the client uses is Coordinator (if set)
	// followed by Coordinators, each address once; Coordinator alone is a
	// one-element list. Calls go to the first until it refuses one because
	// it is not the primary (a standby, demoted or fenced coordinator:
	// FAILED_PRECONDITION) or cannot be reached (UNAVAILABLE); the client
	// then asks every address's Health and moves to the one that serves,
	// logs "coordinator moved from A to B" (Logger), and stays there until
	// the next refusal. A Commit caught in the change is settled on the new
	// primary (see Tx.Commit). Every address must be a coordinator of this
	// cluster, reached with the same TLS, DialOptions and AuthToken.
	Coordinators []string
	RMs          []RM
	// TLS, when set, is used to reach a coordinator that serves TLS (its
	// --tls-cert): RootCAs must trust its certificate (nil: the system's
	// roots), and Certificates holds the client's certificate when the
	// coordinator asks for one (--tls-client-ca, mutual TLS). Nil: plaintext,
	// for a coordinator on loopback.
	TLS *tls.Config
	// DialOptions are added to the connection's options. Without TLS, a
	// non-empty DialOptions replaces the plaintext default, so that it can
	// bring its own transport credentials.
	DialOptions []grpc.DialOption
	// AuthToken is the coordinator's shared token (its --auth-token-file),
	// sent on every call. Empty for a coordinator without authentication.
	AuthToken string
	// Defaults apply to every transaction's Commit unless the transaction sets its own.
	Defaults CommitOptions
	// Waits is where the client records its wait events (README, "Wait
	// events"); nil means the process-wide waits.Client.
	Waits *waits.Registry
	// DecisionTimeout bounds how long a two-phase Commit keeps trying to
	// get the coordinator's decision when its context has no earlier
	// deadline (default 30s; negative: no bound, the context alone). Past
	// it, Commit returns an *OutcomeUnknownError that names the
	// coordinator's address and what was tried. Nothing is rolled back
	// then: the coordinator settles the prepared branches once it is
	// reachable — it commits them if it decided COMMIT, and rolls them back
	// after its orphan timeout if it never received the Commit.
	DecisionTimeout time.Duration
	// Now, when set, replaces time.Now as the clock that stamps each gtrid
	// (a test seam: a client whose clock is skewed). A coordinator refuses
	// a gtrid stamped further ahead than its --max-clock-skew.
	Now func() time.Time
	// Logger, when set, receives the SDK's warnings: while the coordinator
	// cannot be reached, "coordinator unreachable at ADDR, retrying" about
	// once a second; why an RM cannot be a commit point.
	Logger *slog.Logger
	// MaxTxnAge: a commit point refuses to record COMMIT for a transaction
	// that began longer ago than this by its database's clock (default and
	// maximum 1h, decision.MaxCommitPointAge: coordinators keep the abort
	// decisions that refuse a late commit point longer than that).
	MaxTxnAge time.Duration
	// TracerProvider makes the OpenTelemetry spans of each transaction
	// (README, "Traces"; tracing.go): "tandem.tx" from Begin to the end of
	// Commit or Rollback, with a child span per phase and per RM. The
	// calls to the coordinator carry the span's context (a W3C traceparent
	// in the gRPC metadata), so that a coordinator that exports traces
	// (tandem serve --otlp-endpoint) adds its spans to the same trace. Nil:
	// otel.GetTracerProvider(), which makes nothing until the application
	// sets a provider (otel.SetTracerProvider). The SDK uses only the
	// OpenTelemetry API: the application brings the SDK and the exporter.
	// With no provider, the cost per transaction is one call to a no-op
	// tracer (an atomic load and three small allocations) and no per-phase work.
	TracerProvider trace.TracerProvider
}

// DefaultDecisionTimeout is Config.DecisionTimeout's default.
const DefaultDecisionTimeout = 30 * time.Second

// Durability is whether a commit's reply waits for the decision to be
// durable (see the README's "Commit modes").
type Durability = api.Durability

// Visibility is whether a commit's reply waits for every branch to be
// committed (see the README's "Commit modes"). Under VisibilityAsync,
// Commit still returns only once the MariaDB/MySQL branches prepared on the
// application's sessions are committed there, or (CommitOptions.MayTakeOver)
// their sessions ended: a session is never handed back holding a prepared
// branch.
type Visibility = api.Visibility

// Commit modes.
const (
	DurabilityWait   = api.Durability_WAIT
	DurabilityNoWait = api.Durability_NOWAIT
	VisibilitySync   = api.Visibility_SYNC
	VisibilityAsync  = api.Visibility_ASYNC
)

// DecideAt says where a transaction with two or more writers is decided.
type DecideAt string

// Where decisions are made.
const (
	// DecideAuto (the default, also ""): at a commit point when one
	// qualifies — a MariaDB/MySQL writer first (it then never prepares),
	// else a PostgreSQL writer — otherwise at the coordinator. A client
	// with a coordinator asks it once (Health) which RMs it recovers, and
	// rolls back a commit-point transaction writing one it does not know,
	// before anything is prepared (coordrms.go).
	DecideAuto DecideAt = "auto"
	// DecideAtCoordinator: every writer prepares; the coordinator's log
	// holds the decision (one Commit RPC).
	DecideAtCoordinator DecideAt = "coordinator"
	// DecideAtRM: at a commit point, as DecideAuto; when no writer
	// qualifies the coordinator decides, with a warning.
	DecideAtRM DecideAt = "rm"
)

// ParseDecideAt checks a DecideAt from configuration or a flag.
func ParseDecideAt(s string) (DecideAt, error) {
	switch d := DecideAt(s); d {
	case "", DecideAuto:
		return DecideAuto, nil
	case DecideAtCoordinator, DecideAtRM:
		return d, nil
	}
	return "", fmt.Errorf("client: decide-at %q: use auto, coordinator or rm", s)
}

// CommitOptions choose what a two-phase Commit waits for. Zero values take
// the coordinator's defaults (wait, sync) and DecideAuto.
type CommitOptions struct {
	Durability Durability
	Visibility Visibility
	// DecideAt is read when the transaction's first MariaDB/MySQL branch
	// begins (a commit point there begins as its own XA branch, never
	// prepared; another branch as an XA branch named with the commit point)
	// and at Commit.
	DecideAt DecideAt
	// MayTakeOver, with Visibility set to VisibilityAsync on the
	// transaction (a coordinator whose default is async does not count) and
	// decisions at the coordinator: when the coordinator's async standby
	// does not hold a COMMIT within a few milliseconds (a distant or slow
	// standby), the coordinator takes the MariaDB/MySQL branches prepared
	// on the application's sessions over and answers at once; Commit then
	// ends those sessions instead of committing the branches on them (each
	// stays prepared in the database, and the coordinator commits it once
	// its standby holds the decision). The *sql.Conn given to Tx.Branch for
	// such an RM is then done (sql.ErrConnDone, from its Close too, which
	// can be ignored): Result.EndedSessions names those RMs; take a new
	// connection from the pool for the next transaction. Without it, an
	// async Commit with such a branch waits for the standby before it
	// returns.
	MayTakeOver bool
}

type rmInfo struct {
	name            string
	dialect         rm.Dialect
	multiStatements bool
	neverCP         bool
	cpStrength      int
	db              *sql.DB
	cp              cpState
	id              idState // its decision table's id (tableid.go)
}

// Client runs global transactions. It is safe for concurrent use; make one
// per process and share it.
type Client struct {
	cfg Config
	rms map[string]*rmInfo
	// coords are the configured coordinators and the one in use (nil
	// without a coordinator).
	coords *coordinators
	waits  *waits.Registry
	// tracer makes the transactions' spans (tracing.go).
	tracer trace.Tracer

	coordinatorCalls atomic.Uint64
	// tx counts transaction outcomes (metrics.go).
	tx *txCounters
	// coordRMs is which RMs the coordinator said it recovers (coordrms.go).
	coordRMs coordinatorRMs
	// cluster is the coordinators' cluster identity (cluster.go).
	cluster   clusterState
	closeOnce sync.Once
	// background bounds the commits left to goroutines (visibility async
	// at a commit point); closing ends them when the client is closed.
	background slots
	closing    context.Context
	stop       context.CancelFunc
}

// New checks the configuration and returns a client. It makes no network call.
func New(cfg Config) (*Client, error) {
	c := &Client{cfg: cfg, rms: make(map[string]*rmInfo, len(cfg.RMs)), waits: cfg.Waits, background: make(slots, maxBackground), tx: newTxCounters()}
	c.closing, c.stop = context.WithCancel(context.Background())
	if c.cfg.MaxTxnAge <= 0 {
		c.cfg.MaxTxnAge = decision.MaxCommitPointAge
	}
	if c.cfg.MaxTxnAge > decision.MaxCommitPointAge {
		return nil, fmt.Errorf("client: MaxTxnAge %s is longer than %s, the longest coordinators keep the abort decisions that refuse a late commit point: use at most %s",
			cfg.MaxTxnAge, decision.MaxCommitPointAge, decision.MaxCommitPointAge)
	}
	if _, err := ParseDecideAt(string(cfg.Defaults.DecideAt)); err != nil {
		return nil, err
	}
	if c.waits == nil {
		c.waits = waits.Client
	}
	tp := cfg.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider() // forwards to the provider the application sets later, if any
	}
	c.tracer = tp.Tracer(tracerName)
	if len(cfg.RMs) == 0 {
		return nil, errors.New("client: Config.RMs is empty: declare every resource manager the application uses")
	}
	for _, r := range cfg.RMs {
		if err := xid.ValidateRMName(r.Name); err != nil {
			return nil, fmt.Errorf("client: %w", err)
		}
		if _, dup := c.rms[r.Name]; dup {
			return nil, fmt.Errorf("client: resource manager %q is declared twice", r.Name)
		}
		d, err := rm.ParseDriver(r.Driver)
		if err != nil {
			return nil, fmt.Errorf("client: resource manager %q: %w", r.Name, err)
		}
		dialect, _ := rm.DialectFor(d)
		c.rms[r.Name] = &rmInfo{name: r.Name, dialect: dialect, multiStatements: r.MultiStatements,
			neverCP: r.NeverCommitPoint, cpStrength: r.CommitPointStrength, db: r.DB}
	}
	addrs, err := coordinatorAddrs(cfg)
	if err != nil {
		return nil, err
	}
	if len(addrs) > 0 {
		var opts []grpc.DialOption
		switch {
		case cfg.TLS != nil:
			opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(cfg.TLS)))
		case len(cfg.DialOptions) == 0:
			opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
		}
		// Keepalive: a primary whose machine went silent (no reset) would
		// hold a Commit until DecisionTimeout; a ping after 15 s without a
		// byte, given up 5 s later, fails the call UNAVAILABLE so the client
		// moves on. The coordinator allows one ping per 10 s, with or
		// without calls (internal/server/limits.go). DialOptions may override.
		opts = append(opts, grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 15 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true}))
		// Every call carries the trace context of its span, if any (traceprop).
		opts = append(opts, grpc.WithChainUnaryInterceptor(traceprop.UnaryClientInterceptor), grpc.WithChainStreamInterceptor(traceprop.StreamClientInterceptor))
		opts = append(opts, cfg.DialOptions...)
		if cfg.AuthToken != "" {
			opts = append(opts, grpc.WithPerRPCCredentials(api.TokenCredentials(cfg.AuthToken)))
		}
		if c.coords, err = newCoordinators(addrs, opts); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Close releases the connection to the coordinator. Safe to call twice.
func (c *Client) Close() error {
	var err error
	c.closeOnce.Do(func() {
		c.stop() // background commits give up; the coordinator's scan finishes them
		if c.coords != nil {
			err = c.coords.close()
		}
	})
	return err
}

// Stats are the client's counters since New.
type Stats struct {
	// CoordinatorCalls counts RPCs sent to the coordinators (retries and the
	// Health probes that look for the primary included).
	CoordinatorCalls uint64
	// UnrecoverableDecisions counts transactions decided at a commit point
	// while the coordinator said it could not reach one of their RMs (its
	// Health: reachable=false, e.g. a wrong password in its --rm DSN): had
	// this process died, their branches there would have waited until the
	// coordinator reached the RM. Each is also warned about (Config.Logger,
	// at most once every 10 s).
	UnrecoverableDecisions uint64
}

// Stats returns the client's counters.
func (c *Client) Stats() Stats {
	return Stats{CoordinatorCalls: c.coordinatorCalls.Load(), UnrecoverableDecisions: c.coordRMs.unrecoverable.Load()}
}

// Begin starts a global transaction. It makes the gtrid locally: no round
// trip, no shared sequence. Its span ("tandem.tx", Config.TracerProvider)
// is the root of a new trace; BeginContext makes it a child of the
// application's span.
func (c *Client) Begin() *Tx {
	return c.BeginContext(context.Background())
}

// BeginContext is Begin with the transaction's span a child of ctx's span
// (a request's span, say). Only the span is taken from ctx: its deadline
// and cancellation do not apply to the transaction.
func (c *Client) BeginContext(ctx context.Context) *Tx {
	g := xid.New()
	if c.cfg.Now != nil {
		g = xid.NewAt(0, c.cfg.Now())
	}
	t := &Tx{c: c, gtrid: g, opts: c.cfg.Defaults}
	t.startTxSpan(ctx)
	return t
}

// RunInTx runs fn in a new transaction and commits it, or rolls it back when
// fn returns an error or panics (the panic is re-raised after the rollback).
// The transaction's span is a child of ctx's (BeginContext).
func (c *Client) RunInTx(ctx context.Context, fn func(tx *Tx) error) (res Result, err error) {
	tx := c.BeginContext(ctx)
	defer func() {
		if p := recover(); p != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
			panic(p)
		}
	}()
	if err := fn(tx); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return Result{GTRID: tx.gtrid}, err
	}
	return tx.Commit(ctx)
}

// Status asks the coordinator for the outcome of a gtrid (after
// ErrOutcomeUnknown, say). With resolve, an undecided gtrid is aborted.
// It follows the primary as Commit does (Config.Coordinators): a refusal
// from a coordinator that is not the primary, or one that cannot be
// reached, sends it to the one that serves, within ctx and
// Config.DecisionTimeout.
func (c *Client) Status(ctx context.Context, gtrid xid.GTRID, resolve bool) (*api.StatusResponse, error) {
	if c.coords == nil {
		return nil, ErrNoCoordinator
	}
	defer c.waits.Since(waits.CoordinatorStatus, time.Now())
	ctx, cancel := c.decisionContext(ctx)
	defer cancel()
	var resp *api.StatusResponse
	err := c.call(ctx, func(ctx context.Context, ep *endpoint, opts ...grpc.CallOption) error {
		var err error
		resp, err = ep.api.Status(ctx, &api.StatusRequest{Gtrid: gtrid.String(), Resolve: resolve}, opts...)
		return err
	})
	return resp, err
}

// Branch enlists conn as the branch of tx on the named resource manager. A
// second call for the same RM returns the existing branch (one branch per RM
// per global transaction); conn must then be the same connection. Nothing is
// sent to the database until the branch's first statement.
func (t *Tx) Branch(ctx context.Context, rmName string, conn *sql.Conn) (*Branch, error) {
	info, err := t.c.rmNamed(rmName)
	if err != nil {
		return nil, err
	}
	if conn == nil {
		return nil, fmt.Errorf("client: Branch(%q): conn is nil", rmName)
	}
	return t.enlist(info, conn, nil)
}

// warn sends a warning to Config.Logger, if one is set.
func (c *Client) warn(msg string, args ...any) {
	if c.cfg.Logger != nil {
		c.cfg.Logger.Warn(msg, args...)
	}
}
