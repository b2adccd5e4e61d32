package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/tandem-tx/tandem/internal/config"
	"github.com/tandem-tx/tandem/internal/server"
	"github.com/tandem-tx/tandem/internal/tlsconf"
)

// addTLSFlags adds --tls-ca, --tls-cert and --tls-key (defaults from
// TANDEM_TLS_CA, TANDEM_TLS_CERT, TANDEM_TLS_KEY): how the command reaches
// a coordinator that serves TLS. With none set it speaks plaintext.
func addTLSFlags(fs *flag.FlagSet) *tlsconf.Files {
	f := &tlsconf.Files{}
	fs.StringVar(&f.CA, "tls-ca", os.Getenv("TANDEM_TLS_CA"), "the CA that signed the coordinator's certificate (env TANDEM_TLS_CA); any --tls-* flag makes the command use TLS (HTTPS for --admin)")
	fs.StringVar(&f.Cert, "tls-cert", os.Getenv("TANDEM_TLS_CERT"), "client certificate, for a coordinator with --tls-client-ca (env TANDEM_TLS_CERT)")
	fs.StringVar(&f.Key, "tls-key", os.Getenv("TANDEM_TLS_KEY"), "the client certificate's key (env TANDEM_TLS_KEY)")
	return f
}

// adminFlags are the flags of a command that calls admin listeners: TLS,
// and where the admin token is.
type adminFlags struct {
	tls       *tlsconf.Files
	tokenFile *string
	dataDir   *string // the coordinator's data directory, if the command has --data-dir
}

func addAdminFlags(fs *flag.FlagSet, dataDir *string) *adminFlags {
	return &adminFlags{tls: addTLSFlags(fs), dataDir: dataDir,
		tokenFile: fs.String("admin-token-file", os.Getenv("TANDEM_ADMIN_TOKEN_FILE"),
			"the coordinator's admin token, which role changes need (env TANDEM_ADMIN_TOKEN_FILE; default DATA_DIR/"+server.AdminTokenName+", with --data-dir or "+config.DefaultDataDir+")")}
}

// tokenPath is where the admin token is read from.
func (a *adminFlags) tokenPath() string {
	if *a.tokenFile != "" {
		return *a.tokenFile
	}
	dir := config.DefaultDataDir
	if a.dataDir != nil && *a.dataDir != "" {
		dir = *a.dataDir
	}
	return server.DefaultAdminTokenFile(dir)
}

// client is an admin client with the token in tokenFile ("" for
// tokenPath()).
func (a *adminFlags) client(tokenFile string) (*adminClient, error) {
	cfg, err := tlsconf.Client(*a.tls)
	if err != nil {
		return nil, err
	}
	if tokenFile == "" {
		tokenFile = a.tokenPath()
	}
	// No proxy: the admin token must go to the coordinator only.
	tr := &http.Transport{Proxy: nil, TLSClientConfig: cfg}
	c := &adminClient{http: &http.Client{Transport: tr}, scheme: "http", tokenFile: tokenFile}
	if cfg != nil {
		c.scheme = "https"
	}
	return c, nil
}

// adminClient calls a coordinator's admin listener (tandem serve --admin).
type adminClient struct {
	http      *http.Client
	scheme    string
	tokenFile string
}

// call sends method path to the admin listener at addr and decodes the
// JSON answer into out. A role change (any method but GET) carries the
// admin token and fails without it; a read carries the admin token if it
// can be read, else the API token of TANDEM_AUTH_TOKEN_FILE, if set (a
// listener off loopback wants one of them), except a read in plaintext from
// a loopback address, which carries none (reads are open there). An answer other than 200 OK is
// an error carrying the coordinator's text.
func (c *adminClient) call(ctx context.Context, method, addr, path string, out any) error {
	url := c.scheme + "://" + addr + path
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return fmt.Errorf("admin address %q: %w", addr, err)
	}
	if method == http.MethodGet && c.scheme == "http" && server.IsLoopback(addr) {
		// Reads are open on a plaintext loopback listener, and nothing
		// proves who answers there (any local user can listen on the port
		// once the coordinator stops): no token goes with them.
		err := c.do(req, out)
		var se *adminStatusError
		if errors.As(err, &se) && se.code == http.StatusUnauthorized {
			return fmt.Errorf("%w (this CLI sends no token in plaintext to a loopback address; a listener on every interface with --insecure-no-tls wants one: call it at its network address)", err)
		}
		return err
	}
	tok, err := server.ReadTokenFile(c.tokenFile)
	if err != nil && method != http.MethodGet {
		return fmt.Errorf("role changes need the coordinator's admin token: %w. It is DATA_DIR/%s on the coordinator's host (made at its first start): "+
			"pass --data-dir DIR or --admin-token-file FILE, or set TANDEM_ADMIN_TOKEN_FILE", err, server.AdminTokenName)
	}
	if err != nil {
		tok = ""
		if f := os.Getenv("TANDEM_AUTH_TOKEN_FILE"); f != "" {
			if tok, err = server.ReadTokenFile(f); err != nil {
				return err
			}
		}
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	return c.do(req, out)
}

// do sends req and decodes the JSON answer into out (see call).
func (c *adminClient) do(req *http.Request, out any) error {
	method, url := req.Method, req.URL.String()
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach the coordinator's admin listener at %s (tandem serve --admin): %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return &adminStatusError{code: resp.StatusCode, msg: fmt.Sprintf("%s %s: %s: %s", method, url, resp.Status, strings.TrimSpace(string(body)))}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("%s %s: bad JSON: %w", method, url, err)
	}
	return nil
}

// adminStatusError is an admin listener's answer other than 200 OK.
type adminStatusError struct {
	code int
	msg  string // method, URL, status and the coordinator's text
}

func (e *adminStatusError) Error() string { return e.msg }
