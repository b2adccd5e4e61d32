// Package tlsconf builds the TLS configurations of Tandem's listeners and
// clients from PEM files: a certificate and its key, and a CA that
// authenticates the other side. TLS 1.2 is the oldest version accepted.
//
// A listener (the gRPC API and the admin HTTP listener of tandem serve):
//
//	cfg, err := tlsconf.Server(tlsconf.Files{Cert: "srv.crt", Key: "srv.key", CA: "clients-ca.crt"})
//	// with CA set, a client must present a certificate that CA signed (mutual TLS)
//
// A client (the SDK's Config.TLS, the tandem CLI's --tls-ca/--tls-cert/--tls-key):
//
//	cfg, err := tlsconf.Client(tlsconf.Files{CA: "ca.crt", Cert: "client.crt", Key: "client.key"})
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// Files names the PEM files of one side of a TLS connection. Empty fields
// are not used.
type Files struct {
	// Cert and Key: this side's certificate (chain) and private key; both
	// or neither.
	Cert, Key string
	// CA authenticates the other side. On a server: clients must present
	// a certificate signed by it (mutual TLS); empty: clients are not asked
	// for one. On a client: the server's certificate must be signed by it;
	// empty: the system's roots.
	CA string
}

// Empty reports whether no file is named.
func (f Files) Empty() bool { return f.Cert == "" && f.Key == "" && f.CA == "" }

// Server is the configuration of a listener; nil (and no error) when f is
// empty. A server needs Cert and Key.
func Server(f Files) (*tls.Config, error) {
	if f.Empty() {
		return nil, nil
	}
	if f.Cert == "" || f.Key == "" {
		return nil, errors.New("tls: a server needs both a certificate and its key")
	}
	pair, err := loadPair(f.Cert, f.Key)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}
	if f.CA != "" {
		pool, err := loadPool(f.CA)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// Client is the configuration of a client; nil (and no error) when f is
// empty, meaning plaintext. Cert and Key (both or neither) are presented
// to a server that asks for a client certificate.
func Client(f Files) (*tls.Config, error) {
	if f.Empty() {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.CA != "" {
		pool, err := loadPool(f.CA)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	switch {
	case f.Cert != "" && f.Key != "":
		pair, err := loadPair(f.Cert, f.Key)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{pair}
	case f.Cert != "" || f.Key != "":
		return nil, errors.New("tls: a client certificate needs both the certificate and its key")
	}
	return cfg, nil
}

// MutualTLS reports whether cfg makes clients prove who they are with a
// certificate the server verifies.
func MutualTLS(cfg *tls.Config) bool {
	return cfg != nil && cfg.ClientAuth == tls.RequireAndVerifyClientCert
}

func loadPair(cert, key string) (tls.Certificate, error) {
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("tls: certificate %s with key %s: %w", cert, key, err)
	}
	return pair, nil
}

func loadPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tls: CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("tls: CA file %s holds no PEM certificate", path)
	}
	return pool, nil
}
