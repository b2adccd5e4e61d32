package api

import "context"

// TokenCredentials sends a coordinator's shared token on every call
// ("authorization: Bearer <token>"). Use it with grpc.WithPerRPCCredentials.
// It does not require TLS: the token guards against strangers on the
// network, not against eavesdroppers; put TLS in front for that.
type TokenCredentials string

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (t TokenCredentials) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials.
func (TokenCredentials) RequireTransportSecurity() bool { return false }
