package tlsconf

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tandem-tx/tandem/internal/testcerts"
)

func TestFiles(t *testing.T) {
	dir := t.TempDir()
	f := testcerts.NewCA(t, "ca").WriteFiles(t, dir, "srv", "127.0.0.1")
	junk := filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(junk, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err := Server(Files{}); c != nil || err != nil {
		t.Fatalf("no files: %v %v, want plaintext", c, err)
	}
	if c, err := Client(Files{}); c != nil || err != nil {
		t.Fatalf("no files: %v %v, want plaintext", c, err)
	}
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"server without key", second(Server(Files{Cert: f.Cert})), "both a certificate and its key"},
		{"server CA only", second(Server(Files{CA: f.CA})), "both a certificate and its key"},
		{"client cert without key", second(Client(Files{Cert: f.Cert})), "both the certificate and its key"},
		{"junk CA", second(Client(Files{CA: junk})), "holds no PEM certificate"},
		{"missing CA", second(Server(Files{Cert: f.Cert, Key: f.Key, CA: filepath.Join(dir, "none")})), "no such file"},
		{"key of another file", second(Server(Files{Cert: f.Cert, Key: f.CA})), f.Cert},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, c.err, c.want)
		}
	}
	s, err := Server(Files{Cert: f.Cert, Key: f.Key})
	if err != nil || MutualTLS(s) || s.MinVersion != tls.VersionTLS12 {
		t.Fatalf("server: %+v %v", s, err)
	}
	s, err = Server(Files{Cert: f.Cert, Key: f.Key, CA: f.CA})
	if err != nil || !MutualTLS(s) {
		t.Fatalf("server with a client CA: %v, mutual %v", err, MutualTLS(s))
	}
}

func second(_ *tls.Config, err error) error { return err }
