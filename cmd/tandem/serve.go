package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/tandem-tx/tandem/internal/config"
	"github.com/tandem-tx/tandem/internal/fileperm"
	"github.com/tandem-tx/tandem/internal/server"
	"github.com/tandem-tx/tandem/internal/standby"
	"github.com/tandem-tx/tandem/internal/tlsconf"
	"github.com/tandem-tx/tandem/internal/version"
)

func init() {
	register(&command{
		name:    "serve",
		summary: "run the coordinator daemon (gRPC API, decision log, phase 2, recovery)",
		usage: `[--config FILE] [--listen ADDR] [--admin ADDR] [--data-dir DIR] --rm NAME=DRIVER:DSN ...

Examples (the single quotes keep the DSNs, and so the passwords, out of ps:
tandem expands ${VAR} itself):
  tandem serve --rm pg=postgres:'${TANDEM_PG_DSN}' --rm maria=mysql:'${TANDEM_MYSQL_DSN}'
  tandem serve --rm pg=postgres:@/etc/tandem/pg.dsn --rm maria=mysql:@/etc/tandem/maria.dsn
  tandem serve --config tandem.yaml   (rms: pg: {driver: postgres, dsn_file: pg.dsn} ...)

Flags override the config file. On start the decision log is replayed, every
decided transaction whose phase 2 is unfinished is driven again, and every
resource manager is scanned for prepared branches in Tandem's format.
The data directory's identity (DATA_DIR/cluster, made at the first start)
owns the branches this coordinator decides: another cluster's branches (a
second deployment over the same databases) and legacy unowned ones (unless
--adopt-unowned) are listed by "tandem status --in-doubt", never settled
here; nor is a gtrid that began before this log was born presumed aborted.
SIGINT or SIGTERM stops it cleanly; unfinished phase 2 resumes at the next start.

With --otlp-endpoint HOST:PORT (or OTEL_EXPORTER_OTLP_ENDPOINT) the calls
that carry a client's trace context (the SDK's W3C traceparent) are
exported as OpenTelemetry spans over OTLP/gRPC, in the client's trace:
Commit, Abort, Status, the decision log write, phase 2 per resource
manager. Calls without one make no span. See the README's "Traces".

The admin listener (--admin) serves /waits (wait events as JSON, read by
"tandem waits"), /metrics (Prometheus) and /standby (the standby state as
JSON), open to reads on loopback, and the role changes (POST /role/...),
which always need the admin token: DATA_DIR/admin.token, made at the first
start (tandem promote, follow and switchover read it with --data-dir or
--admin-token-file). Off loopback, --listen and --admin need TLS
(--tls-cert, --tls-key; --tls-client-ca for mutual TLS), and the API a
token or mutual TLS; see the README's "Security".

A standby pair (each names the other with --peer, for fencing):
  tandem serve --data-dir /a --standby-listen 127.0.0.1:7072 --peer 127.0.0.1:7082 --protection max-protection --rm ...
  tandem serve --data-dir /b --listen 127.0.0.1:7080 --admin 127.0.0.1:7081 --standby-of 127.0.0.1:7072 \
               --standby-listen 127.0.0.1:7082 --peer 127.0.0.1:7072 --protection max-protection --rm ...
The standby's own --standby-listen, --protection and --peer take effect when
it is promoted. Failover: "tandem promote --admin 127.0.0.1:7081 --data-dir /b"
(or stop it, "tandem promote --data-dir /b", start it without --standby-of).
Switchover: "tandem switchover --primary-admin 127.0.0.1:7071 --standby-admin 127.0.0.1:7081
--primary-token-file /a/admin.token --standby-token-file /b/admin.token".`,
		run: runServe,
	})
}

// defaultAdmin is the admin listener's default address.
const defaultAdmin = "127.0.0.1:7071"

func runServe(args []string, stdout, stderr io.Writer) error {
	cfg, opts, otlpFlag, err := parseServe(args, stderr)
	if err != nil {
		return explain(err)
	}
	tp, err := otlpTracing(otlpFlag, opts.Logger)
	if err != nil {
		return explain(err)
	}
	if tp != nil {
		opts.TracerProvider = tp
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := tp.Shutdown(ctx); err != nil { // sends the spans still batched
				opts.Logger.Warn("exporting the last spans failed", "error", err)
			}
		}()
	}
	s, err := server.Start(cfg, opts)
	if err != nil {
		return explain(err)
	}
	logger := opts.Logger
	cfg.SetDefaults()
	build := version.Get()
	if st, ok := s.StandbyStatus(); ok {
		if st.Role == "standby" {
			logger.Info("tandem standby serving: copying the primary's decision log, deciding nothing", "version", build.Version,
				"commit", build.ShortCommit(), "listen", s.Addr(), "admin", s.AdminAddr(),
				"primary", opts.Standby.Of, "data_dir", cfg.DataDir, "pid", os.Getpid())
		} else {
			logger.Info("shipping the decision log to a standby", "standby_listen", opts.Standby.Listen, "transport", st.Transport,
				"protection", st.Protection, "net_timeout", opts.Standby.NetTimeout, "cluster", st.Cluster, "epoch", st.Epoch)
		}
	}
	logger.Info("tandem coordinator serving", "version", build.Version, "commit", build.ShortCommit(),
		"listen", s.Addr(), "admin", s.AdminAddr(), "data_dir", cfg.DataDir, "rms", cfg.RMNames(), "pid", os.Getpid(),
		"durability", cfg.Durability, "write", cfg.Write, "batch_window", cfg.LogBatchWindow(), "visibility", cfg.Visibility, "log_size", cfg.LogSize.String())

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	select {
	case got := <-sig:
		logger.Info("stopping", "signal", got.String())
	case err := <-s.Done():
		logger.Error("gRPC server stopped", "error", err)
	}
	return s.Stop(10 * time.Second)
}

// serveFlags are tandem serve's flags, as parsed.
type serveFlags struct {
	file, listen, dataDir, admin, adminTokenFile string
	tlsCert, tlsKey, tlsClientCA                 string
	insecureTLS, insecureAuth                    bool
	rms                                          multiFlag
	orphan, scan, p2wait, maxAge, maxSkew        time.Duration
	durability, write, visibility, logSize       string
	batchWindow                                  time.Duration
	cpSettle                                     time.Duration
	tokenFile                                    string
	standbyListen, standbyOf, transport          string
	protection, peer                             string
	netTimeout, archLag                          time.Duration
	maxConns                                     int
	maxSend, sndBuf, rcvBuf                      string
	noDelayOff                                   bool
	adoptUnowned                                 bool
	standbyLost                                  bool
	secretFile                                   string
	standbyTLSCert, standbyTLSKey, standbyTLSCA  string
	logLevel                                     string
	otlpEndpoint                                 string
	// adminSet: --admin was given (else its default is best effort).
	adminSet bool
	set      map[string]bool // the flags given on the command line
}

// define registers the flags on fs.
func (f *serveFlags) define(fs *flag.FlagSet) {
	fs.StringVar(&f.file, "config", "", "YAML configuration file (see the README's configuration reference)")
	fs.StringVar(&f.listen, "listen", "", "gRPC listen address (default "+config.DefaultListen+")")
	fs.StringVar(&f.dataDir, "data-dir", "", "directory of the decision log (default "+config.DefaultDataDir+")")
	fs.StringVar(&f.admin, "admin", defaultAdmin, "admin HTTP address: /waits, /metrics, /standby (open to reads on loopback) and the role changes (always need the admin token); off loopback it needs --tls-cert; \"\" for none. If the default is taken, the coordinator starts without it")
	fs.StringVar(&f.adminTokenFile, "admin-token-file", os.Getenv("TANDEM_ADMIN_TOKEN_FILE"), "file of the admin token that role changes (tandem promote, follow, switchover) need; created (random, mode 0600) if absent (env TANDEM_ADMIN_TOKEN_FILE; default DATA_DIR/"+server.AdminTokenName+")")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "certificate (PEM) of the gRPC API and the admin listener: both then serve TLS only; required off loopback unless --insecure-no-tls")
	fs.StringVar(&f.tlsKey, "tls-key", "", "the certificate's private key (PEM)")
	fs.StringVar(&f.tlsClientCA, "tls-client-ca", "", "CA (PEM) that signs client certificates: API and admin clients must present one (mutual TLS; it authenticates API calls as a token does)")
	fs.BoolVar(&f.insecureTLS, "insecure-no-tls", false, "allow plaintext on a non-loopback --listen or --admin, and a standby link off loopback with --standby-secret-file but no --standby-tls-* (only on a network you trust: tokens, transactions and decisions travel in clear, and a standby link's frames can be forged on the path)")
	fs.Var(&f.rms, "rm", rmFlagHelp)
	fs.DurationVar(&f.orphan, "orphan-timeout", 0, "abort a prepared branch with no decision after this long (default 60s)")
	fs.BoolVar(&f.standbyLost, "standby-lost", false, "withdraw the max-protection promise this data directory's primary made to its standby without that standby hearing of it (it is lost, or will be re-seeded): without it, a primary that last ran max-protection and starts with a weaker --protection waits for a standby as under max-protection until one has heard the new mode, and one started without --standby-listen refuses to start. That standby must then never be promoted without --accept-data-loss")
	fs.BoolVar(&f.adoptUnowned, "adopt-unowned", false, "settle prepared branches with legacy names (no owner: made by an SDK from before owners existed) as this coordinator's own, presuming abort for them after --orphan-timeout like its own; without it they are listed (tandem status --in-doubt), never settled. Only for an in-place upgrade of the one coordinator that decided them: another deployment over the same databases must not adopt them. Gtrids that began before this data directory's log was born are listed either way")
	fs.DurationVar(&f.scan, "scan-interval", 0, "how often to scan every database for in-doubt branches (default 10s)")
	fs.DurationVar(&f.p2wait, "phase2-wait", 0, "longest a Commit waits for phase 2 when the caller set no deadline (default 10s)")
	fs.DurationVar(&f.maxAge, "max-txn-age", 0, "abort a Commit whose transaction began longer ago (default 1h)")
	fs.DurationVar(&f.maxSkew, "max-clock-skew", 0, "refuse a gtrid stamped further in the future than this: the client's clock is ahead (default 10s)")
	fs.DurationVar(&f.cpSettle, "commit-point-settle-after", 0, "roll back a prepared branch decided by a commit point once it has had no decision row this long, taking the commit point's decision key first (a live client's decision then fails, so it is always safe; this bounds how long a dead client's branches hold their locks) (default 5s)")
	fs.StringVar(&f.durability, "durability", "", "default for commits: wait (reply once the decision is on disk) or nowait (once queued; a crash can lose it) (default wait)")
	fs.StringVar(&f.write, "write", "", "decision log writes: immediate (flush at once, group commit) or batch (gather up to --batch-window) (default immediate)")
	fs.DurationVar(&f.batchWindow, "batch-window", 0, "with --write batch: longest a decision waits to share an fdatasync (default 2ms)")
	fs.StringVar(&f.visibility, "visibility", "", "default for commits: sync (reply after phase 2) or async (right after the decision) (default sync)")
	fs.StringVar(&f.logSize, "log-size", "", "decision log size, e.g. 64MiB: circular, in 8 segments; past 80% new commits are throttled, past 90% refused (default 64MiB)")
	fs.StringVar(&f.tokenFile, "auth-token-file", "", "file holding a shared token every API call must carry (off loopback, this or --tls-client-ca is required)")
	fs.BoolVar(&f.insecureAuth, "insecure-no-auth", false, "allow an API without authentication (no token, no client certificate) on a non-loopback address (only on a network you trust)")
	fs.StringVar(&f.standbyListen, "standby-listen", "", "address standbys connect to (e.g. 0.0.0.0:7072; off loopback it needs --standby-secret-file or --standby-tls-*); the decision log is shipped to the standby that authenticates. On a standby: where it answers fencing checks, and serves its own standby once promoted")
	fs.StringVar(&f.standbyOf, "standby-of", "", "run a standby of the primary whose --standby-listen is ADDR: copy its decision log into --data-dir, decide nothing (Commit is refused, naming the primary); \"tandem promote\" makes it a primary")
	fs.StringVar(&f.transport, "transport", "", "with --standby-listen: sync (a decision is acknowledged once the standby has it on disk; one round trip per group commit), async (the stream runs behind, never delays a commit) or arch (only completed log segments are shipped, over --max-connections; max-performance only) (default: from --protection)")
	fs.StringVar(&f.protection, "protection", "", "with --standby-listen: max-performance (async), max-availability (sync; after --net-timeout without the standby, carry on unprotected, loudly) or max-protection (sync; stall rather than acknowledge a decision the standby lacks) (default max-performance, or max-availability with --transport sync)")
	fs.DurationVar(&f.netTimeout, "net-timeout", 10*time.Second, "standby: how long max-availability waits for the standby before going on unprotected; deadline of the handshake and of each write")
	fs.StringVar(&f.peer, "peer", "", "with --standby-listen: the other coordinator's --standby-listen address; at start, and every second while it runs, this primary asks it for its epoch and, if it was promoted since, refuses to start or stops deciding and settling (fencing)")
	fs.DurationVar(&f.archLag, "arch-lag", time.Second, "with --transport arch: the longest a decision waits for its log segment to complete (phase 2 waits for the standby to hold it) before the primary switches segments")
	fs.IntVar(&f.maxConns, "max-connections", 0, "with --transport arch: parallel connections the standby opens to receive completed segments, 1-16 (default 1)")
	fs.StringVar(&f.maxSend, "max-send", "", "largest frame of records sent to the standby in one write, e.g. 4MiB (default 1MiB; larger sends help a long, fat link)")
	fs.StringVar(&f.sndBuf, "socket-send-buffer", "", "SO_SNDBUF of the standby connections, e.g. 16MiB (default: the kernel's autotuning; rule of thumb: 3 x bandwidth x round-trip time)")
	fs.StringVar(&f.rcvBuf, "socket-receive-buffer", "", "SO_RCVBUF of the standby connections (set it on the standby; default: the kernel's autotuning)")
	fs.BoolVar(&f.noDelayOff, "no-tcp-nodelay", false, "turn TCP_NODELAY off on the standby connections (on by default: the sync transport's round trip needs it)")
	fs.StringVar(&f.secretFile, "standby-secret-file", "", "file holding the cluster secret (make one with tandem secret --out FILE; the same file on both coordinators): every standby connection (shipping, fencing checks) starts with a challenge-response over it in both directions, and nothing is sent to a peer that fails it. Required for any standby address off loopback (or the --standby-tls-* flags)")
	fs.StringVar(&f.standbyTLSCert, "standby-tls-cert", "", "PEM certificate of this coordinator for the standby link (mutual TLS, with --standby-tls-key and --standby-tls-ca); it must name the address the peer dials (IP or DNS SAN)")
	fs.StringVar(&f.standbyTLSKey, "standby-tls-key", "", "PEM private key of --standby-tls-cert")
	fs.StringVar(&f.standbyTLSCA, "standby-tls-ca", "", "PEM CA that signs both coordinators' standby certificates")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&f.otlpEndpoint, "otlp-endpoint", "", "export the spans of the calls that carry a client's trace context (Commit, Abort, Status; decision log write; phase 2) over OTLP/gRPC to HOST:PORT or http://HOST:PORT (plaintext) or https://HOST:PORT (TLS), e.g. localhost:4317 (default: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT if set, else no export)")
}

// serveConfig parses tandem serve's arguments into the server's
// configuration (the flags override the config file) and options, with a
// logger on stderr. It starts nothing; the files it reads are the config
// file, the token and the standby link's secret and certificates.
func serveConfig(args []string, stderr io.Writer) (config.Config, server.Options, error) {
	cfg, o, _, err := parseServe(args, stderr)
	return cfg, o, err
}

// parseServe is serveConfig that also returns --otlp-endpoint (checked),
// whose exporter runServe starts.
func parseServe(args []string, stderr io.Writer) (config.Config, server.Options, string, error) {
	var f serveFlags
	fs := newFlags(commands["serve"], stderr)
	f.define(fs)
	if err := parse(fs, args); err != nil {
		return config.Config{}, server.Options{}, "", err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "tandem serve: unexpected argument %q\n", fs.Arg(0))
		return config.Config{}, server.Options{}, "", errUsage
	}
	f.set = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	f.adminSet = f.set["admin"]
	if _, _, err := otlpOptions(f.otlpEndpoint); err != nil {
		return config.Config{}, server.Options{}, "", err
	}
	cfg, o, err := f.build(stderr)
	return cfg, o, f.otlpEndpoint, err
}

// build turns parsed flags into the server's configuration and options.
func (f *serveFlags) build(stderr io.Writer) (config.Config, server.Options, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return config.Config{}, server.Options{}, fmt.Errorf("--log-level %q: use debug, info, warn or error", f.logLevel)
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	cfg, err := loadConfig(f.file, f.rms, logger)
	if err != nil {
		return cfg, server.Options{}, err
	}
	if err := f.override(&cfg); err != nil {
		return cfg, server.Options{}, err
	}
	o := server.Options{Logger: logger, Admin: f.admin, AdminBestEffort: !f.adminSet, AdminTokenFile: f.adminTokenFile,
		InsecureNoAuth: f.insecureAuth, InsecureNoTLS: f.insecureTLS}
	if f.tokenFile != "" {
		if o.AuthToken, err = server.ReadTokenFile(f.tokenFile); err != nil {
			return cfg, o, err
		}
		fileperm.Warn(logger, f.tokenFile, "auth token file")
	}
	if o.Standby, err = f.standbyOptions(cfg.Standby, logger); err != nil {
		return cfg, o, err
	}
	if o.TLS, err = tlsconf.Server(tlsconf.Files{Cert: f.tlsCert, Key: f.tlsKey, CA: f.tlsClientCA}); err != nil {
		return cfg, o, fmt.Errorf("--tls-cert, --tls-key, --tls-client-ca: %w", err)
	}
	return cfg, o, nil
}

// override sets in cfg what the flags set.
func (f *serveFlags) override(cfg *config.Config) error {
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	set(&cfg.Listen, f.listen)
	set(&cfg.DataDir, f.dataDir)
	if f.durability != "" {
		cfg.Durability = config.Durability(f.durability)
	}
	if f.write != "" {
		cfg.Write = config.WriteMode(f.write)
	}
	if f.visibility != "" {
		cfg.Visibility = config.Visibility(f.visibility)
	}
	setD := func(dst *time.Duration, v time.Duration) {
		if v != 0 {
			*dst = v
		}
	}
	if f.adoptUnowned {
		cfg.AdoptUnowned = true
	}
	cfg.StandbyLost = f.standbyLost
	setD(&cfg.OrphanTimeout, f.orphan)
	setD(&cfg.ScanInterval, f.scan)
	setD(&cfg.Phase2Wait, f.p2wait)
	setD(&cfg.MaxTxnAge, f.maxAge)
	setD(&cfg.MaxClockSkew, f.maxSkew)
	setD(&cfg.CommitPointSettleAfter, f.cpSettle)
	setD(&cfg.BatchWindow, f.batchWindow)
	if f.logSize != "" {
		n, err := config.ParseByteSize(f.logSize)
		if err != nil {
			return fmt.Errorf("--log-size: %w", err)
		}
		cfg.LogSize = n
	}
	return nil
}

// standbyOptions are the standby link's options from the flags.
func (f *serveFlags) standbyOptions(file config.Standby, logger *slog.Logger) (server.StandbyOptions, error) {
	str := func(flagVal, fileVal string) string {
		if flagVal != "" {
			return flagVal
		}
		return fileVal
	}
	dur := func(name string, flagVal, fileVal time.Duration) time.Duration {
		if !f.set[name] && fileVal != 0 {
			return fileVal
		}
		return flagVal
	}
	so := server.StandbyOptions{Listen: str(f.standbyListen, file.Listen), Of: str(f.standbyOf, file.Of),
		Transport: str(f.transport, file.Transport), Protection: str(f.protection, file.Protection),
		NetTimeout: dur("net-timeout", f.netTimeout, file.NetTimeout), Peer: str(f.peer, file.Peer),
		ArchLag: dur("arch-lag", f.archLag, file.ArchLag), MaxConnections: f.maxConns, DisableNoDelay: f.noDelayOff}
	if so.MaxConnections == 0 {
		so.MaxConnections = file.MaxConnections
	}
	var err error
	if so.Auth, err = standbyAuth(str(f.secretFile, file.SecretFile), str(f.standbyTLSCert, file.TLSCert), str(f.standbyTLSKey, file.TLSKey),
		str(f.standbyTLSCA, file.TLSCA), logger); err != nil {
		return so, err
	}
	if so.Auth != nil {
		so.Auth.InsecureNoTLS = f.insecureTLS
	}
	for _, b := range []struct {
		flag string
		val  string
		dst  *int
	}{{"--max-send", f.maxSend, &so.MaxSend}, {"--socket-send-buffer", f.sndBuf, &so.SendBuffer}, {"--socket-receive-buffer", f.rcvBuf, &so.ReceiveBuffer}} {
		if b.val == "" {
			continue
		}
		n, err := config.ParseByteSize(b.val)
		if err != nil {
			return so, fmt.Errorf("%s: %w", b.flag, err)
		}
		*b.dst = int(n)
	}
	return so, nil
}

// standbyAuth builds the standby link's authentication from the flags (nil
// when none is set).
func standbyAuth(secretFile, cert, key, ca string, logger *slog.Logger) (*standby.Auth, error) {
	if secretFile == "" && cert == "" && key == "" && ca == "" {
		return nil, nil
	}
	a := &standby.Auth{}
	if secretFile != "" {
		secret, warning, err := standby.LoadSecretFile(secretFile)
		if err != nil {
			return nil, err
		}
		if warning != "" {
			logger.Warn(warning)
		}
		a.Secret = secret
	}
	if cert != "" || key != "" || ca != "" {
		var err error
		if a.ServerTLS, a.ClientTLS, err = standby.LoadTLS(cert, key, ca); err != nil {
			return nil, err
		}
	}
	return a, nil
}
