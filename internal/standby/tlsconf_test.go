package standby

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
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

// testCA makes a CA and one certificate it signs for 127.0.0.1, written as
// PEM files in dir; it returns the three paths.
func testCA(t *testing.T, dir, name string) (cert, key, ca string) {
	t.Helper()
	write := func(file, typ string, der []byte) string {
		p := filepath.Join(dir, name+"-"+file)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name + " CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name + " coordinator"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kDER, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return write("cert.pem", "CERTIFICATE", der), write("key.pem", "EC PRIVATE KEY", kDER), write("ca.pem", "CERTIFICATE", caDER)
}

func tlsAuth(t *testing.T, cert, key, ca string, secret []byte) *Auth {
	t.Helper()
	srv, cli, err := LoadTLS(cert, key, ca)
	if err != nil {
		t.Fatal(err)
	}
	return &Auth{Secret: secret, ServerTLS: srv, ClientTLS: cli}
}

// Mutual TLS on the standby link (certificates made here): a standby with a
// certificate of the cluster's CA follows the primary, with and without the
// secret inside; one whose certificate another CA signed, and a plaintext
// peer, get nothing.
func TestMutualTLSLink(t *testing.T) {
	dir := t.TempDir()
	cert, key, ca := testCA(t, dir, "cluster")
	oCert, oKey, oCA := testCA(t, dir, "other")
	for _, secret := range [][]byte{nil, testAuth.Secret} {
		auth := tlsAuth(t, cert, key, ca, secret)
		if !auth.Enabled() {
			t.Fatal("TLS alone does not count as authentication")
		}
		p := startSecurePrimary(t, func(c *ShipperConfig) { c.Auth = auth; c.Listen = "127.0.0.1:0" })
		if _, err := p.log.Append(1, []byte("over TLS")); err != nil {
			t.Fatal(err)
		}
		// Another CA's certificate (trusting the cluster's CA, so only the
		// primary's check of the client certificate can refuse it).
		stranger := tlsAuth(t, oCert, oKey, oCA, secret)
		stranger.ClientTLS.RootCAs = auth.ClientTLS.RootCAs
		dir := t.TempDir()
		bad := startSecureStandby(t, dir, p.sh.Addr(), stranger, "")
		waitFor(t, "the stranger's error", func() bool { return bad.LastError() != nil })
		t.Logf("a standby with another CA's certificate: %v", bad.LastError())
		bad.Close()
		if _, ok, _ := LoadIdentity(dir); ok {
			t.Errorf("a standby with another CA's certificate learnt the cluster identity")
		}
		if _, reached, err := CheckPeer(p.sh.Addr(), testID(), stranger, time.Second); reached || err != nil {
			t.Errorf("a probe with another CA's certificate reached the primary (%v)", err)
		}
		c, err := net.Dial("tcp", p.sh.Addr())
		if err != nil {
			t.Fatal(err)
		}
		c.Write(rawFrame(kindHello, hello{}.encode()))
		got, _ := readUntilClosed(c)
		c.Close()
		assertLearntNothing(t, got)

		r := startSecureStandby(t, t.TempDir(), p.sh.Addr(), auth, "")
		waitFor(t, "the TLS standby caught up", func() bool { st := p.sh.Status(); return st.Connected && st.LagRecords == 0 })
		r.Close()
	}
}
