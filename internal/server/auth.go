package server

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// AuthMetadataKey carries the shared token on every call: "authorization: Bearer <token>".
const AuthMetadataKey = "authorization"

// ReadTokenFile reads a shared token from a file (surrounding white space
// ignored). The token itself never goes on a command line.
func ReadTokenFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("auth token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < 16 {
		return "", fmt.Errorf("auth token file %s: the token has %d characters; use at least 16 (e.g. openssl rand -hex 32)", path, len(tok))
	}
	return tok, nil
}

// isLoopback reports whether a listen address accepts only local connections.
// An empty host (":7070") listens on every interface.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkExposure refuses an unauthenticated API on a non-loopback address
// unless the operator said, in so many words, that this is wanted.
func checkExposure(listen, token string, insecure bool) error {
	if token != "" || insecure || isLoopback(listen) {
		return nil
	}
	return fmt.Errorf("server: refusing to serve the coordinator API on %s without authentication: anyone who reaches it could decide transactions. "+
		"Set --auth-token-file (clients send the token), listen on 127.0.0.1, or pass --insecure-no-auth if the network itself is trusted", listen)
}

// tokenInterceptor rejects calls that do not carry the shared token.
func tokenInterceptor(token string) grpc.UnaryServerInterceptor {
	want := []byte("Bearer " + token)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		got := md.Get(AuthMetadataKey)
		if len(got) != 1 || subtle.ConstantTimeCompare([]byte(got[0]), want) != 1 {
			return nil, status.Error(codes.Unauthenticated, "missing or wrong auth token: send \"authorization: Bearer <token>\" (client.Config.AuthToken, tandem status --auth-token-file)")
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
