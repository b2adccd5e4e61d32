// Package testcerts makes a certificate authority and the certificates it
// signs at run time (crypto/x509, ECDSA P-256), for tests of TLS and mutual
// TLS. Nothing it makes is meant to leave a test: keys are kept in memory or
// written 0600 under the test's temporary directory.
//
//	ca := testcerts.NewCA(t, "tandem test CA")
//	srv := ca.WriteFiles(t, t.TempDir(), "server", "127.0.0.1", "localhost")
//	// srv.Cert, srv.Key, srv.CA: PEM files for --tls-cert, --tls-key, --tls-ca
//	cfg := &tls.Config{RootCAs: ca.Pool()}
package testcerts

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority made for one test.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	// PEM is the CA certificate, PEM-encoded (what --tls-ca and
	// --tls-client-ca files hold).
	PEM []byte
}

// NewCA makes a self-signed CA valid for a day.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatalf("testcerts: CA certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("testcerts: parse the CA certificate: %v", err)
	}
	return &CA{Cert: cert, Key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Pool is a pool holding only this CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Issue makes a certificate signed by the CA for name, valid for a day, for
// both server and client authentication. hosts are its subject alternative
// names: IP addresses or DNS names. It returns the certificate and its key,
// PEM-encoded.
func (ca *CA) Issue(t testing.TB, name string, hosts ...string) (certPEM, keyPEM []byte) {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		t.Fatalf("testcerts: certificate for %s: %v", name, err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("testcerts: key for %s: %v", name, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
}

// TLSCert is Issue as a tls.Certificate (for tls.Config.Certificates).
func (ca *CA) TLSCert(t testing.TB, name string, hosts ...string) tls.Certificate {
	t.Helper()
	c, k := ca.Issue(t, name, hosts...)
	pair, err := tls.X509KeyPair(c, k)
	if err != nil {
		t.Fatalf("testcerts: key pair for %s: %v", name, err)
	}
	return pair
}

// Files are PEM files written by WriteFiles.
type Files struct {
	CA   string // the CA's certificate
	Cert string // the issued certificate
	Key  string // its private key (mode 0600)
}

// WriteFiles issues a certificate for name and hosts (see Issue) and writes
// it, its key and the CA certificate into dir as NAME.crt, NAME.key and
// ca.crt.
func (ca *CA) WriteFiles(t testing.TB, dir, name string, hosts ...string) Files {
	t.Helper()
	c, k := ca.Issue(t, name, hosts...)
	f := Files{CA: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, name+".crt"), Key: filepath.Join(dir, name+".key")}
	for _, w := range []struct {
		path string
		data []byte
		mode os.FileMode
	}{{f.CA, ca.PEM, 0o644}, {f.Cert, c, 0o644}, {f.Key, k, 0o600}} {
		if err := os.WriteFile(w.path, w.data, w.mode); err != nil {
			t.Fatalf("testcerts: %v", err)
		}
	}
	return f
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("testcerts: key: %v", err)
	}
	return k
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		t.Fatalf("testcerts: serial: %v", err)
	}
	return n
}
