package main

import (
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
SIGINT or SIGTERM stops it cleanly; unfinished phase 2 resumes at the next start.

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
	c := commands["serve"]
	fs := newFlags(c, stderr)
	file := fs.String("config", "", "YAML configuration file (see the README's configuration reference)")
	listen := fs.String("listen", "", "gRPC listen address (default "+config.DefaultListen+")")
	dataDir := fs.String("data-dir", "", "directory of the decision log (default "+config.DefaultDataDir+")")
	admin := fs.String("admin", defaultAdmin, "admin HTTP address: /waits, /metrics, /standby (open to reads on loopback) and the role changes (always need the admin token); off loopback it needs --tls-cert; \"\" for none. If the default is taken, the coordinator starts without it")
	adminTokenFile := fs.String("admin-token-file", os.Getenv("TANDEM_ADMIN_TOKEN_FILE"), "file of the admin token that role changes (tandem promote, follow, switchover) need; created (random, mode 0600) if absent (env TANDEM_ADMIN_TOKEN_FILE; default DATA_DIR/"+server.AdminTokenName+")")
	tlsCert := fs.String("tls-cert", "", "certificate (PEM) of the gRPC API and the admin listener: both then serve TLS only; required off loopback unless --insecure-no-tls")
	tlsKey := fs.String("tls-key", "", "the certificate's private key (PEM)")
	tlsClientCA := fs.String("tls-client-ca", "", "CA (PEM) that signs client certificates: API and admin clients must present one (mutual TLS; it authenticates API calls as a token does)")
	insecureTLS := fs.Bool("insecure-no-tls", false, "allow plaintext on a non-loopback --listen or --admin, and a standby link off loopback with --standby-secret-file but no --standby-tls-* (only on a network you trust: tokens, transactions and decisions travel in clear, and a standby link's frames can be forged on the path)")
	var rms multiFlag
	fs.Var(&rms, "rm", rmFlagHelp)
	orphan := fs.Duration("orphan-timeout", 0, "abort a prepared branch with no decision after this long (default 60s)")
	scan := fs.Duration("scan-interval", 0, "how often to scan every database for in-doubt branches (default 10s)")
	p2wait := fs.Duration("phase2-wait", 0, "longest a Commit waits for phase 2 when the caller set no deadline (default 10s)")
	maxAge := fs.Duration("max-txn-age", 0, "abort a Commit whose transaction began longer ago (default 1h)")
	maxSkew := fs.Duration("max-clock-skew", 0, "refuse a gtrid stamped further in the future than this: the client's clock is ahead (default 10s)")
	durability := fs.String("durability", "", "default for commits: wait (reply once the decision is on disk) or nowait (once queued; a crash can lose it) (default wait)")
	write := fs.String("write", "", "decision log writes: immediate (flush at once, group commit) or batch (gather up to --batch-window) (default immediate)")
	batchWindow := fs.Duration("batch-window", 0, "with --write batch: longest a decision waits to share an fdatasync (default 2ms)")
	visibility := fs.String("visibility", "", "default for commits: sync (reply after phase 2) or async (right after the decision) (default sync)")
	logSize := fs.String("log-size", "", "decision log size, e.g. 64MiB: circular, in 8 segments; past 80% new commits are throttled, past 90% refused (default 64MiB)")
	tokenFile := fs.String("auth-token-file", "", "file holding a shared token every API call must carry (off loopback, this or --tls-client-ca is required)")
	insecure := fs.Bool("insecure-no-auth", false, "allow an API without authentication (no token, no client certificate) on a non-loopback address (only on a network you trust)")
	standbyListen := fs.String("standby-listen", "", "address standbys connect to (e.g. 0.0.0.0:7072; off loopback it needs --standby-secret-file or --standby-tls-*); the decision log is shipped to the standby that authenticates. On a standby: where it answers fencing checks, and serves its own standby once promoted")
	standbyOf := fs.String("standby-of", "", "run a standby of the primary whose --standby-listen is ADDR: copy its decision log into --data-dir, decide nothing (Commit is refused, naming the primary); \"tandem promote\" makes it a primary")
	transport := fs.String("transport", "", "with --standby-listen: sync (a decision is acknowledged once the standby has it on disk; one round trip per group commit), async (the stream runs behind, never delays a commit) or arch (only completed log segments are shipped, over --max-connections; max-performance only) (default: from --protection)")
	protection := fs.String("protection", "", "with --standby-listen: max-performance (async), max-availability (sync; after --net-timeout without the standby, carry on unprotected, loudly) or max-protection (sync; stall rather than acknowledge a decision the standby lacks) (default max-performance, or max-availability with --transport sync)")
	netTimeout := fs.Duration("net-timeout", 10*time.Second, "standby: how long max-availability waits for the standby before going on unprotected; deadline of the handshake and of each write")
	peer := fs.String("peer", "", "with --standby-listen: the other coordinator's --standby-listen address; at start, and every second while it runs, this primary asks it for its epoch and, if it was promoted since, refuses to start or stops deciding and settling (fencing)")
	archLag := fs.Duration("arch-lag", time.Second, "with --transport arch: the longest a decision waits for its log segment to complete (phase 2 waits for the standby to hold it) before the primary switches segments")
	maxConns := fs.Int("max-connections", 0, "with --transport arch: parallel connections the standby opens to receive completed segments, 1-16 (default 1)")
	maxSend := fs.String("max-send", "", "largest frame of records sent to the standby in one write, e.g. 4MiB (default 1MiB; larger sends help a long, fat link)")
	sndBuf := fs.String("socket-send-buffer", "", "SO_SNDBUF of the standby connections, e.g. 16MiB (default: the kernel's autotuning; rule of thumb: 3 x bandwidth x round-trip time)")
	rcvBuf := fs.String("socket-receive-buffer", "", "SO_RCVBUF of the standby connections (set it on the standby; default: the kernel's autotuning)")
	noDelayOff := fs.Bool("no-tcp-nodelay", false, "turn TCP_NODELAY off on the standby connections (on by default: the sync transport's round trip needs it)")
	secretFile := fs.String("standby-secret-file", "", "file holding the cluster secret (make one with tandem secret --out FILE; the same file on both coordinators): every standby connection (shipping, fencing checks) starts with a challenge-response over it in both directions, and nothing is sent to a peer that fails it. Required for any standby address off loopback (or the --standby-tls-* flags)")
	standbyTLSCert := fs.String("standby-tls-cert", "", "PEM certificate of this coordinator for the standby link (mutual TLS, with --standby-tls-key and --standby-tls-ca); it must name the address the peer dials (IP or DNS SAN)")
	standbyTLSKey := fs.String("standby-tls-key", "", "PEM private key of --standby-tls-cert")
	standbyTLSCA := fs.String("standby-tls-ca", "", "PEM CA that signs both coordinators' standby certificates")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "tandem serve: unexpected argument %q\n", fs.Arg(0))
		return errUsage
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level %q: use debug, info, warn or error", *logLevel)
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	cfg, err := loadConfig(*file, rms, logger)
	if err != nil {
		return err
	}
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	set(&cfg.Listen, *listen)
	set(&cfg.DataDir, *dataDir)
	set(&cfg.Durability, *durability)
	set(&cfg.Write, *write)
	set(&cfg.Visibility, *visibility)
	setD := func(dst *time.Duration, v time.Duration) {
		if v != 0 {
			*dst = v
		}
	}
	setD(&cfg.OrphanTimeout, *orphan)
	setD(&cfg.ScanInterval, *scan)
	setD(&cfg.Phase2Wait, *p2wait)
	setD(&cfg.MaxTxnAge, *maxAge)
	setD(&cfg.MaxClockSkew, *maxSkew)
	setD(&cfg.BatchWindow, *batchWindow)
	if *logSize != "" {
		n, err := config.ParseByteSize(*logSize)
		if err != nil {
			return fmt.Errorf("--log-size: %w", err)
		}
		cfg.LogSize = n
	}
	adminSet := false
	fs.Visit(func(f *flag.Flag) { adminSet = adminSet || f.Name == "admin" })
	var token string
	if *tokenFile != "" {
		var err error
		if token, err = server.ReadTokenFile(*tokenFile); err != nil {
			return err
		}
		fileperm.Warn(logger, *tokenFile, "auth token file")
	}
	so := server.StandbyOptions{Listen: *standbyListen, Of: *standbyOf, Transport: *transport, Protection: *protection, NetTimeout: *netTimeout, Peer: *peer, ArchLag: *archLag,
		MaxConnections: *maxConns, DisableNoDelay: *noDelayOff}
	if so.Auth, err = standbyAuth(*secretFile, *standbyTLSCert, *standbyTLSKey, *standbyTLSCA, logger); err != nil {
		return err
	}
	if so.Auth != nil {
		so.Auth.InsecureNoTLS = *insecureTLS
	}
	for _, b := range []struct {
		flag string
		val  string
		dst  *int
	}{{"--max-send", *maxSend, &so.MaxSend}, {"--socket-send-buffer", *sndBuf, &so.SendBuffer}, {"--socket-receive-buffer", *rcvBuf, &so.ReceiveBuffer}} {
		if b.val == "" {
			continue
		}
		n, err := config.ParseByteSize(b.val)
		if err != nil {
			return fmt.Errorf("%s: %w", b.flag, err)
		}
		*b.dst = int(n)
	}
	tlsCfg, err := tlsconf.Server(tlsconf.Files{Cert: *tlsCert, Key: *tlsKey, CA: *tlsClientCA})
	if err != nil {
		return fmt.Errorf("--tls-cert, --tls-key, --tls-client-ca: %w", err)
	}
	s, err := server.Start(cfg, server.Options{Logger: logger, Admin: *admin, AdminBestEffort: !adminSet, AdminTokenFile: *adminTokenFile,
		AuthToken: token, InsecureNoAuth: *insecure, TLS: tlsCfg, InsecureNoTLS: *insecureTLS, Standby: so})
	if err != nil {
		return err
	}
	cfg.SetDefaults()
	if st, ok := s.StandbyStatus(); ok {
		if st.Role == "standby" {
			logger.Info("tandem standby serving: copying the primary's decision log, deciding nothing", "listen", s.Addr(), "admin", s.AdminAddr(),
				"primary", *standbyOf, "data_dir", cfg.DataDir, "pid", os.Getpid())
		} else {
			logger.Info("shipping the decision log to a standby", "standby_listen", *standbyListen, "transport", st.Transport,
				"protection", st.Protection, "net_timeout", *netTimeout, "cluster", st.Cluster, "epoch", st.Epoch)
		}
	}
	logger.Info("tandem coordinator serving", "listen", s.Addr(), "admin", s.AdminAddr(), "data_dir", cfg.DataDir, "rms", cfg.RMNames(), "pid", os.Getpid(),
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
