package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tandem-tx/tandem/api"
	"github.com/tandem-tx/tandem/client"
	"github.com/tandem-tx/tandem/xid"
)

// Every malformed request is refused with INVALID_ARGUMENT and a message
// that says what is wrong, and nothing is decided for its gtrid.
func TestBadRequestsAreRefusedClearly(t *testing.T) {
	c := startCoordinator(t, coordOpts{})
	cli := c.api()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g := xid.New().String()
	pg := []*api.Branch{{Rm: "pg"}}
	cases := []struct {
		name string
		req  *api.CommitRequest
		want string
	}{
		{"unknown RM", &api.CommitRequest{Gtrid: g, Branches: []*api.Branch{{Rm: "oracle"}}}, `unknown resource manager "oracle": this coordinator knows maria, pg`},
		{"malformed gtrid", &api.CommitRequest{Gtrid: "not-a-gtrid", Branches: pg}, "want 32 lowercase hex digits"},
		{"upper-case gtrid", &api.CommitRequest{Gtrid: strings.ToUpper(g), Branches: pg}, "want 0-9 or a-f"},
		{"oversize gtrid", &api.CommitRequest{Gtrid: strings.Repeat("a", 10_000), Branches: pg}, "got 10000 characters"},
		{"empty gtrid", &api.CommitRequest{Gtrid: "", Branches: pg}, "got 0 characters"},
		{"empty branch list", &api.CommitRequest{Gtrid: g}, "branch list is empty"},
		{"duplicate branch", &api.CommitRequest{Gtrid: g, Branches: []*api.Branch{{Rm: "pg"}, {Rm: "pg"}}}, `"pg" is listed twice`},
		{"too many branches", &api.CommitRequest{Gtrid: g, Branches: make65()}, "more than the maximum of 64"},
	}
	for _, tc := range cases {
		_, err := cli.Commit(ctx, tc.req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.want) {
			t.Errorf("%s: got %v; want INVALID_ARGUMENT containing %q", tc.name, err, tc.want)
		}
	}
	// A request larger than any legitimate one is refused before it is decoded.
	if _, err := cli.Commit(ctx, &api.CommitRequest{Gtrid: strings.Repeat("a", 100_000), Branches: pg}); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a 100 kB request: %v, want RESOURCE_EXHAUSTED", err)
	}
	// Nothing was decided for g.
	st, err := cli.Status(ctx, &api.StatusRequest{Gtrid: g})
	if err != nil || st.Outcome != api.Outcome_UNDECIDED {
		t.Fatalf("Status after refused requests = %v, %v; want UNDECIDED", st, err)
	}
	if _, err := cli.Status(ctx, &api.StatusRequest{Gtrid: "zz"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("Status of a malformed gtrid = %v, want INVALID_ARGUMENT", err)
	}

	// A branch that was never prepared: the decision stands (COMMIT is
	// durable) and the reply says plainly that the RM did not know the branch.
	never := xid.New().String()
	resp, err := cli.Commit(ctx, &api.CommitRequest{Gtrid: never, Branches: pg})
	if err != nil || resp.Outcome != api.Outcome_COMMITTED || len(resp.Branches) != 1 || resp.Branches[0].State != api.BranchState_NOT_FOUND {
		t.Fatalf("Commit of a never-prepared branch = %v, %v; want COMMITTED with the branch NOT_FOUND", resp, err)
	}
	if !strings.Contains(resp.Branches[0].LastError, "never prepared") {
		t.Errorf("NOT_FOUND branch error %q does not explain", resp.Branches[0].LastError)
	}

	// Abort after Commit is refused; Commit after Abort answers ABORTED.
	_, err = cli.Abort(ctx, &api.AbortRequest{Gtrid: never, Branches: pg})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "cannot be aborted") {
		t.Errorf("Abort after Commit = %v, want FAILED_PRECONDITION", err)
	}
	ab := xid.New().String()
	if r, err := cli.Abort(ctx, &api.AbortRequest{Gtrid: ab, Branches: pg}); err != nil || r.Outcome != api.Outcome_ABORTED {
		t.Fatalf("Abort = %v, %v", r, err)
	}
	if r, err := cli.Commit(ctx, &api.CommitRequest{Gtrid: ab, Branches: pg}); err != nil || r.Outcome != api.Outcome_ABORTED {
		t.Errorf("Commit after Abort = %v, %v; want ABORTED", r, err)
	}
	// Status with resolve aborts only what it can prove undecided: a gtrid
	// nothing holds prepared is left alone (it may have committed and been
	// forgotten) ...
	unknown := xid.New().String()
	if r, err := cli.Status(ctx, &api.StatusRequest{Gtrid: unknown, Resolve: true}); err != nil || r.Outcome != api.Outcome_UNDECIDED || !strings.Contains(r.Message, "nothing was written") {
		t.Fatalf("Status resolve of a gtrid nothing holds = %v, %v; want UNDECIDED, nothing written", r, err)
	}
	// ... one prepared on PostgreSQL is in doubt: Status says where, resolve
	// aborts it and rolls the branch back, and a later Commit agrees.
	res := xid.New()
	d := openDBs(t)
	pgConn, err := d.pg.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer pgConn.Close()
	// Named after this coordinator's cluster, as its clients name the
	// branches it decides: a legacy (unowned) name is only listed.
	for _, q := range []string{"BEGIN", "PREPARE TRANSACTION '" + xid.Branch{GTRID: res, RM: "pg", Owner: clusterOf(t, c)}.PostgresGID() + "'"} {
		if _, err := pgConn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if r, err := cli.Status(ctx, &api.StatusRequest{Gtrid: res.String()}); err != nil || r.Outcome != api.Outcome_UNDECIDED || !strings.Contains(r.Message, "prepared on pg") {
		t.Fatalf("Status of a prepared gtrid = %v, %v; want UNDECIDED saying it is prepared on pg", r, err)
	}
	if r, err := cli.Status(ctx, &api.StatusRequest{Gtrid: res.String(), Resolve: true}); err != nil || r.Outcome != api.Outcome_ABORTED {
		t.Fatalf("Status resolve of a prepared gtrid = %v, %v; want ABORTED", r, err)
	}
	if r, err := cli.Commit(ctx, &api.CommitRequest{Gtrid: res.String(), Branches: pg}); err != nil || r.Outcome != api.Outcome_ABORTED {
		t.Errorf("Commit after resolve = %v, %v; want ABORTED", r, err)
	}
	eventually(t, 10*time.Second, "the resolved branch rolled back", func() bool { return len(d.preparedFor(t, res.String())) == 0 })
}

func make65() []*api.Branch {
	out := make([]*api.Branch, 65)
	for i := range out {
		out[i] = &api.Branch{Rm: "pg"}
	}
	return out
}

// serveOnce runs `tandem serve` expecting it to exit, and returns its output.
func serveOnce(t *testing.T, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, tandemBin, append([]string{"serve", "--listen", freeAddr(t)}, args...)...)
	out, _ := cmd.CombinedOutput()
	return string(out), cmd.ProcessState.ExitCode()
}

func assertNoStackTrace(t *testing.T, out string) {
	t.Helper()
	if strings.Contains(out, "goroutine ") || strings.Contains(out, "panic:") {
		t.Fatalf("output has a stack trace:\n%s", out)
	}
}

// Configuration errors stop the start with a message that names the RM and
// never shows the password.
func TestBadConfigurationIsReportedClearly(t *testing.T) {
	dir := t.TempDir()
	out, code := serveOnce(t, "--data-dir", dir, "--rm", "pg=postgres:postgres://tandem:Sekr1tPw@127.0.0.1:notaport/tandem")
	if code == 0 || !strings.Contains(out, `rm "pg": bad DSN for driver postgres`) {
		t.Fatalf("malformed DSN: exit %d, output:\n%s", code, out)
	}
	if strings.Contains(out, "Sekr1tPw") {
		t.Fatalf("the password appears in the output:\n%s", out)
	}
	assertNoStackTrace(t, out)

	out, code = serveOnce(t, "--data-dir", dir, "--rm", "pg=oracle:whatever")
	if code == 0 || !strings.Contains(out, `unknown driver "oracle"`) {
		t.Fatalf("unknown driver: exit %d, output:\n%s", code, out)
	}
	out, code = serveOnce(t, "--data-dir", dir)
	if code == 0 || !strings.Contains(out, "no resource managers") {
		t.Fatalf("no RM: exit %d, output:\n%s", code, out)
	}
	cfg := filepath.Join(dir, "bad.yaml")
	os.WriteFile(cfg, []byte("listen: 127.0.0.1:0\norphan_timout: 5s\n"), 0o600)
	out, code = serveOnce(t, "--config", cfg)
	if code == 0 || !strings.Contains(out, "orphan_timout") || !strings.Contains(out, "not found") {
		t.Fatalf("unknown config key: exit %d, output:\n%s", code, out)
	}
}

// A DSN that cannot connect does not stop the coordinator: it starts, names
// the unreachable RM in its log and in Health, and retries.
func TestUnreachableRMAtStartIsNamed(t *testing.T) {
	c := startCoordinator(t, coordOpts{rms: []string{"pg=postgres:" + pgDSN, "maria=mysql:tandem:Sekr1tPw@tcp(127.0.0.1:1)/tandem"}})
	h, err := c.api().Health(context.Background(), &api.HealthRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var maria *api.RMHealth
	for _, r := range h.Rms {
		if r.Name == "maria" {
			maria = r
		}
	}
	if maria == nil || maria.Reachable || !strings.Contains(maria.Error, `rm "maria"`) || !strings.Contains(maria.Error, "connection refused") {
		t.Fatalf("Health for the unreachable RM = %v", maria)
	}
	out := c.out.String()
	if !strings.Contains(out, "resource manager unreachable at start") || !strings.Contains(out, "rm=maria") {
		t.Fatalf("the log does not name the unreachable RM:\n%s", out)
	}
	if strings.Contains(out+maria.Error, "Sekr1tPw") {
		t.Fatal("the password appears in the log or in Health")
	}
	assertNoStackTrace(t, out)
}

// A corrupted record in the middle of the decision log stops the start with
// an error naming the file and offset; a second coordinator on the same data
// directory is refused, naming the first.
func TestCorruptLogAndSharedDataDirAreRefused(t *testing.T) {
	c := startCoordinator(t, coordOpts{})
	other, code := serveOnce(t, "--data-dir", c.dataDir, "--rm", "pg=postgres:"+pgDSN)
	if code == 0 || !strings.Contains(other, "in use by another coordinator") || !strings.Contains(other, "pid ") {
		t.Fatalf("second coordinator on the same data dir: exit %d, output:\n%s", code, other)
	}
	// Started twice by the same command (same port too): the data directory
	// is the cause worth naming, not the port.
	other, code = serveOnce(t, "--data-dir", c.dataDir, "--rm", "pg=postgres:"+pgDSN, "--listen", c.addr)
	if code == 0 || !strings.Contains(other, "in use by another coordinator") || strings.Contains(other, "address already in use") {
		t.Fatalf("second coordinator on the same data dir and port: exit %d, output:\n%s\nwant the data directory named, not the port", code, other)
	}
	ctx := context.Background()
	for i := 0; i < 6; i++ { // six ABORT records
		if _, err := c.api().Abort(ctx, &api.AbortRequest{Gtrid: xid.New().String()}); err != nil {
			t.Fatal(err)
		}
	}
	c.stop()
	segs, _ := filepath.Glob(filepath.Join(c.dataDir, "log", "*.wal"))
	sort.Strings(segs)
	if len(segs) == 0 {
		t.Fatal("no log segment found")
	}
	data, err := os.ReadFile(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	// Records: a 32-byte segment header, then 40-byte ABORT records. Flip a
	// payload byte of the third record.
	off := 32 + 2*40 + 12
	data[off] ^= 0x40
	if err := os.WriteFile(segs[0], data, 0o600); err != nil {
		t.Fatal(err)
	}
	out, code := serveOnce(t, "--data-dir", c.dataDir, "--rm", "pg=postgres:"+pgDSN)
	if code == 0 || !strings.Contains(out, filepath.Base(segs[0])) || !strings.Contains(out, "offset") {
		t.Fatalf("corrupted log: exit %d, output:\n%s", code, out)
	}
	assertNoStackTrace(t, out)
}

// A wrong password in an RM's DSN is not an outage: the coordinator says
// in its log what to change, reports itself not ready (Health, tandem
// status's exit code), and refuses commits that involve that RM — nothing
// written, the SDK rolls its branches back — instead of deciding COMMIT and
// leaving a PostgreSQL branch prepared with its locks until someone fixes it.
func TestWrongPasswordIsNotAnOutage(t *testing.T) {
	const pw = "Wr0ngPassw0rd7"
	c := startCoordinator(t, coordOpts{rms: []string{"pg=postgres:" + withPassword(t, pgDSN, pw), "maria=mysql:" + myDSN}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h, err := c.api().Health(ctx, &api.HealthRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if h.Serving || !strings.Contains(h.Message, `rm "pg" is misconfigured`) || !strings.Contains(h.Message, "fix the DSN") {
		t.Fatalf("Health with a wrong pg password: serving=%v message %q; want not serving, saying what to fix", h.Serving, h.Message)
	}
	out, err := exec.Command(tandemBin, "status", "--coordinator", c.addr).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "not ready") || !strings.Contains(string(out), "password authentication failed") {
		t.Fatalf("tandem status with a misconfigured RM: err %v, output:\n%s\nwant a non-zero exit saying not ready and why", err, out)
	}

	d := openDBs(t)
	d.table(t, "wrongpw")
	cli := c.client(t)
	pgConn, myConn := conns(t, d)
	tx := cli.Begin()
	bp, _ := tx.Branch(ctx, "pg", pgConn)
	bm, _ := tx.Branch(ctx, "maria", myConn)
	if _, err := bp.ExecContext(ctx, "INSERT INTO wrongpw (id, v) VALUES (1, 1)"); err != nil {
		t.Fatal(err)
	}
	if _, err := bm.ExecContext(ctx, "INSERT INTO wrongpw (id, v) VALUES (1, 1)"); err != nil {
		t.Fatal(err)
	}
	_, err = tx.Commit(ctx)
	if !errors.Is(err, client.ErrAborted) || !strings.Contains(err.Error(), `rm "pg" is misconfigured`) {
		t.Fatalf("Commit involving the misconfigured RM: %v, want ErrAborted naming the RM", err)
	}
	if left := d.preparedFor(t, tx.GTRID().String()); len(left) != 0 {
		t.Fatalf("branches left prepared after the refusal: %v", left)
	}
	if d.count(t, d.pg, "wrongpw", 1) != 0 || d.count(t, d.my, "wrongpw", 1) != 0 {
		t.Fatal("a refused transaction's rows are visible")
	}
	log := c.out.String()
	if !strings.Contains(log, "resource manager misconfigured") || !strings.Contains(log, "rm=pg") {
		t.Fatalf("the log does not say which RM to fix:\n%s", log)
	}
	if strings.Contains(log+h.Message+string(out)+err.Error(), pw) {
		t.Fatal("the password appears in the log, Health, status or the error")
	}
	// Said once, then at most once a minute: the in-doubt scan runs every
	// 200 ms here and must not repeat it on each pass.
	time.Sleep(1500 * time.Millisecond)
	if n := strings.Count(c.out.String(), "resource manager misconfigured"); n > 2 {
		t.Errorf("the misconfigured RM was logged %d times in about 2 s of scans every 200 ms, want it once (then at most every minute)", n)
	}
}

// The usual address mistakes get a sentence saying what was probably
// meant, not a bare transport error: the admin port given as the
// coordinator, a host without a port, an address where the gtrid goes.
func TestWrongAddressesAreExplained(t *testing.T) {
	admin := freeAddr(t)
	c := startCoordinator(t, coordOpts{extra: []string{"--admin", admin}})
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"status", "--coordinator", admin}, "admin listener"},
		{[]string{"status", "--coordinator", "localhost"}, `did you mean "localhost:7070"`},
		{[]string{"status", "--coordinator", c.addr, c.addr}, "is an address, not a gtrid"},
	} {
		out, err := exec.Command(tandemBin, tc.args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("tandem %s: err %v, output %q; want a failure saying %q", strings.Join(tc.args, " "), err, out, tc.want)
		}
	}
}
