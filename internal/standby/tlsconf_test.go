package standby

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/internal/testcerts"
)

// testCA makes a CA and one certificate it signs for 127.0.0.1 (server and
// client authentication), written as PEM files under dir; it returns the
// three paths.
func testCA(t *testing.T, dir, name string) (cert, key, ca string) {
	t.Helper()
	sub := filepath.Join(dir, name)
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	f := testcerts.NewCA(t, name+" CA").WriteFiles(t, sub, name+"-coordinator", "127.0.0.1")
	return f.Cert, f.Key, f.CA
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
