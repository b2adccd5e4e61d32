package standby

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/tandem-tx/tandem/internal/setting"
)

// ErrPartialTLS reports a standby link given some but not all of its
// certificate, key and CA (they come together or not at all).
var ErrPartialTLS = errors.New("standby TLS needs all three: this coordinator's certificate, its key and the CA")

// LoadTLS makes the TLS half of an Auth from PEM files: this coordinator's
// certificate and key, and the CA that signs both coordinators'
// certificates. Both sides present their certificate and verify the
// other's against the CA (mutual TLS, TLS 1.3); the dialling side also
// checks that the certificate names the address it dials (a DNS name or IP
// SAN), as any TLS client does.
func LoadTLS(certFile, keyFile, caFile string) (server, client *tls.Config, err error) {
	if certFile == "" || keyFile == "" || caFile == "" {
		return nil, nil, setting.Refuse(setting.StandbyTLS, "", ErrPartialTLS)
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("standby TLS: load the certificate %s and key %s: %w", certFile, keyFile, err)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, nil, fmt.Errorf("standby TLS: read the CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, nil, fmt.Errorf("standby TLS: %s holds no PEM certificate", caFile)
	}
	server = &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool}
	client = &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}, RootCAs: pool}
	return server, client, nil
}
