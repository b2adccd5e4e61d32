package e2e

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/tandem-tx/tandem/api"
	"github.com/tandem-tx/tandem/client"
)

// An API on a non-loopback address without authentication is refused at start.
func TestUnauthenticatedAPIOffLoopbackIsRefused(t *testing.T) {
	_, port, _ := strings.Cut(freeAddr(t), ":")
	cmd := exec.Command(tandemBin, "serve", "--listen", "0.0.0.0:"+port, "--data-dir", t.TempDir(), "--rm", "pg=postgres:"+pgDSN)
	out, _ := cmd.CombinedOutput()
	if cmd.ProcessState.ExitCode() == 0 || !strings.Contains(string(out), "--listen 0.0.0.0:"+port) || !strings.Contains(string(out), "without authentication: anyone who reaches the coordinator API") ||
		!strings.Contains(string(out), "--auth-token-file") {
		t.Fatalf("exit %d, output:\n%s", cmd.ProcessState.ExitCode(), out)
	}
}

// With a token, every call must carry it; the SDK and tandem status do.
func TestAuthTokenIsRequired(t *testing.T) {
	tokFile := filepath.Join(t.TempDir(), "token")
	token := "0123456789abcdef0123456789abcdef"
	os.WriteFile(tokFile, []byte(token+"\n"), 0o600)
	c := startCoordinatorAuth(t, tokFile)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tok := range []string{"", "wrong-token-wrong-token-wrong"} {
		opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
		if tok != "" {
			opts = append(opts, grpc.WithPerRPCCredentials(api.TokenCredentials(tok)))
		}
		conn, _ := grpc.NewClient(c.addr, opts...)
		_, err := api.NewCoordinatorClient(conn).Health(ctx, &api.HealthRequest{})
		conn.Close()
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("Health with token %q = %v, want UNAUTHENTICATED", tok, err)
		}
	}
	d := openDBs(t)
	d.table(t, "e2e_auth")
	cli, err := client.New(client.Config{Coordinator: c.addr, AuthToken: token,
		RMs:      []client.RM{{Name: "pg", Driver: "postgres"}, {Name: "maria", Driver: "mysql", MultiStatements: true}},
		Defaults: client.CommitOptions{DecideAt: client.DecideAtCoordinator}})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	pc, mc := conns(t, d)
	tx := insertBoth(t, ctx, cli, pc, mc, "e2e_auth", 1)
	if res, err := tx.Commit(ctx); err != nil || res.Path != client.PathTwoPhase {
		t.Fatalf("Commit with the token = %+v, %v", res, err)
	}
	st := exec.Command(tandemBin, "status", "--coordinator", c.addr)
	st.Env = append(os.Environ(), "TANDEM_AUTH_TOKEN_FILE="+tokFile)
	if out, err := st.CombinedOutput(); err != nil || !strings.Contains(string(out), "serving=true") {
		t.Fatalf("tandem status with the token file: %v\n%s", err, out)
	}
}

func startCoordinatorAuth(t *testing.T, tokFile string) *coordinator {
	t.Helper()
	c := &coordinator{t: t, addr: freeAddr(t), dataDir: t.TempDir()}
	c.args = []string{"serve", "--listen", c.addr, "--data-dir", c.dataDir, "--admin", "", "--auth-token-file", tokFile,
		"--rm", "pg=postgres:" + pgDSN, "--rm", "maria=mysql:" + myDSN}
	c.launch()
	t.Cleanup(c.stop)
	// Health needs the token: wait for the listener instead.
	eventually(t, 30*time.Second, "the coordinator listening on "+c.addr, func() bool {
		select {
		case <-c.exited:
			t.Fatalf("coordinator exited:\n%s", c.out.String())
		default:
		}
		conn, err := net.DialTimeout("tcp", c.addr, time.Second)
		if err != nil {
			return false
		}
		conn.Close()
		return true
	})
	return c
}

// A DSN password never appears in the coordinator's log, its errors, its
// metrics, /waits, Health or tandem status — with one RM whose password is
// wrong (authentication fails) and one that is unreachable.
func TestPasswordsNeverShown(t *testing.T) {
	const pw = "Zq8SecretPw9X"
	badPG := withPassword(t, pgDSN, pw)
	badMy := "tandem:" + pw + "@tcp(127.0.0.1:1)/tandem"
	admin := freeAddr(t)
	c := startCoordinator(t, coordOpts{rms: []string{"pg=postgres:" + badPG, "maria=mysql:" + badMy}, extra: []string{"--admin", admin}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var all strings.Builder
	// Exercise the failing paths: a commit refused because pg refuses the
	// login, one whose phase 2 fails on maria, a scan.
	_, refused := c.api().Commit(ctx, &api.CommitRequest{Gtrid: newGTRIDString(), Branches: []*api.Branch{{Rm: "pg"}, {Rm: "maria"}}})
	if status.Code(refused) != codes.FailedPrecondition {
		t.Fatalf("Commit with a branch on a misconfigured RM: %v, want FAILED_PRECONDITION", refused)
	}
	resp, err := c.api().Commit(ctx, &api.CommitRequest{Gtrid: newGTRIDString(), Branches: []*api.Branch{{Rm: "maria"}},
		Options: &api.CommitOptions{Visibility: api.Visibility_ASYNC}})
	if err != nil {
		t.Fatal(err)
	}
	all.WriteString(refused.Error())
	h, err := c.api().Health(ctx, &api.HealthRequest{})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(700 * time.Millisecond) // a few phase-2 retries and scans log their errors
	all.WriteString(c.out.String())
	all.WriteString(resp.String())
	all.WriteString(h.String())
	for _, path := range []string{"/metrics", "/waits"} {
		r, err := http.Get("http://" + admin + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		all.Write(b)
	}
	out, _ := exec.Command(tandemBin, "status", "--coordinator", c.addr).CombinedOutput()
	all.Write(out)
	bad, _ := exec.Command(tandemBin, "serve", "--listen", freeAddr(t), "--data-dir", t.TempDir(), "--rm", "pg=postgres:postgres://tandem:"+pw+"@127.0.0.1:notaport/x").CombinedOutput()
	all.Write(bad)
	if !strings.Contains(all.String(), "password authentication failed") || !strings.Contains(all.String(), "connection refused") {
		t.Fatalf("the failing paths were not exercised:\n%s", all.String())
	}
	if strings.Contains(all.String(), pw) {
		i := strings.Index(all.String(), pw)
		t.Fatalf("the password appears in the output: …%s…", all.String()[max(0, i-200):min(len(all.String()), i+50)])
	}
}
