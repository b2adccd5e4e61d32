package server

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tandem-tx/tandem/internal/setting"
	"github.com/tandem-tx/tandem/internal/tlsconf"
)

// AuthMetadataKey carries the shared token on every call: "authorization: Bearer <token>".
const AuthMetadataKey = "authorization"

// AdminTokenName is the admin token's file in the data directory, unless
// Options.AdminTokenFile (tandem serve --admin-token-file) names another.
const AdminTokenName = "admin.token"

// DefaultAdminTokenFile is where a coordinator with data directory dataDir
// keeps its admin token by default.
func DefaultAdminTokenFile(dataDir string) string { return filepath.Join(dataDir, AdminTokenName) }

// ReadTokenFile reads a shared token from a file (surrounding white space
// ignored). The token itself never goes on a command line.
func ReadTokenFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < 16 {
		return "", fmt.Errorf("token file %s: the token has %d characters; use at least 16 (e.g. openssl rand -hex 32)", path, len(tok))
	}
	return tok, nil
}

// LoadOrCreateToken reads the token in path or, when the file does not
// exist, makes one: 32 random bytes in hex, written to a new file of mode
// 0600 (its directory made 0700 if missing) and synced. created says which.
// Two processes racing to create it end with the same token.
func LoadOrCreateToken(path string) (tok string, created bool, err error) {
	tok, err = ReadTokenFile(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return tok, false, err
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", false, fmt.Errorf("token file %s: %w", path, err)
	}
	tok = hex.EncodeToString(b[:])
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", false, fmt.Errorf("token file: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		tok, err = ReadTokenFile(path) // made by another process meanwhile
		return tok, false, err
	}
	if err != nil {
		return "", false, fmt.Errorf("token file: %w", err)
	}
	_, err = f.WriteString(tok + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return "", false, fmt.Errorf("token file %s: %w", path, err)
	}
	return tok, true, nil
}

// IsLoopback reports whether addr (host:port) is a loopback address
// ("localhost" included): a listener there accepts only local connections.
func IsLoopback(addr string) bool { return isLoopback(addr) }

// isLoopback reports whether a listen address accepts only local connections.
// An empty host (":7070") listens on every interface.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	return isLoopbackHost(host)
}

func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkExposure refuses, before anything listens, an API or an admin
// listener that strangers could use: off loopback, the API needs
// authentication (a token or mutual TLS) and both need TLS, unless the
// operator said, in so many words, that the network is trusted.
func checkExposure(listen string, o Options) error {
	var errs []error
	if !isLoopback(listen) {
		if o.AuthToken == "" && !tlsconf.MutualTLS(o.TLS) && !o.InsecureNoAuth {
			errs = append(errs, setting.Refuse(setting.Listen, listen, ErrNotAuthenticated))
		}
		if o.TLS == nil && !o.InsecureNoTLS {
			errs = append(errs, plaintextErr(setting.Listen, listen, "transactions and the auth token"))
		}
	}
	if o.Admin != "" && !isLoopback(o.Admin) && o.TLS == nil && !o.InsecureNoTLS {
		errs = append(errs, plaintextErr(setting.Admin, o.Admin, "the admin token (which allows role changes)"))
	}
	return errors.Join(errs...)
}

// Refusals of a listener off loopback (checkExposure), each wrapped in a
// *setting.Error naming the listen address's setting.
var (
	// ErrNotAuthenticated: the coordinator API with neither a token nor
	// mutual TLS (and no InsecureNoAuth).
	ErrNotAuthenticated = errors.New("server: refused off loopback without authentication: anyone who reaches the coordinator API could decide transactions")
	// ErrPlaintext: a listener without TLS (and no InsecureNoTLS).
	ErrPlaintext = errors.New("server: refused off loopback in plaintext: anyone on the path could read and alter its traffic")
)

func plaintextErr(s setting.Name, addr, exposed string) error {
	return setting.Refuse(s, addr, fmt.Errorf("%w, %s included", ErrPlaintext, exposed))
}

// tokenInterceptor rejects calls that do not carry the shared token.
func tokenInterceptor(token string) grpc.UnaryServerInterceptor {
	want := []byte("Bearer " + token)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		got := md.Get(AuthMetadataKey)
		if len(got) != 1 || subtle.ConstantTimeCompare([]byte(got[0]), want) != 1 {
			return nil, status.Error(codes.Unauthenticated, "missing or wrong auth token: send \"authorization: Bearer <token>\" (client.Config.AuthToken; tandem status reads the file TANDEM_AUTH_TOKEN_FILE names)")
		}
		return handler(ctx, req)
	}
}

// streamTokenInterceptor is tokenInterceptor for the stream form of calls
// (the SDK reads Commit's early decision through it).
func streamTokenInterceptor(token string) grpc.StreamServerInterceptor {
	unary := tokenInterceptor(token)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		_, err := unary(ss.Context(), nil, nil, func(context.Context, any) (any, error) { return nil, nil })
		if err != nil {
			return err
		}
		return handler(srv, ss)
	}
}
