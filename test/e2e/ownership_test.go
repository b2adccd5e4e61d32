package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/api"
	"github.com/tandem-tx/tandem/internal/standby"
	"github.com/tandem-tx/tandem/xid"
)

// clusterOf reads the cluster a primary names in Health (cluster=…): the
// owner its clients name their branches with.
func clusterOf(t *testing.T, c *coordinator) xid.Owner {
	t.Helper()
	msg := healthMessage(c)
	m := regexp.MustCompile(`cluster=([0-9a-f]{32})`).FindStringSubmatch(msg)
	if m == nil {
		t.Fatalf("Health does not name the cluster: %q", msg)
	}
	o, err := xid.ParseOwner(m[1])
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// prepareOwnedAndDie prepares a new gtrid's branches on both databases
// under owner's names, as a client of this version does (the zero owner:
// legacy names, as an SDK from before owners did), then the client
// disappears (its sessions close without a Commit).
func prepareOwnedAndDie(t *testing.T, table string, id int, owner xid.Owner) xid.GTRID {
	t.Helper()
	ctx := context.Background()
	g := xid.New()
	pg, _ := sql.Open("pgx", pgDSN)
	my, _ := sql.Open("mysql", myDSN)
	defer pg.Close()
	defer my.Close()
	pc, err := pg.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mc, err := my.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pgb, myb := xid.Branch{GTRID: g, RM: "pg", Owner: owner}, xid.Branch{GTRID: g, RM: "maria", Owner: owner}
	for _, s := range []string{"BEGIN", "INSERT INTO " + table + " VALUES (" + itoa(id) + ", 'x')", "PREPARE TRANSACTION '" + pgb.PostgresGID() + "'"} {
		if _, err := pc.ExecContext(ctx, s); err != nil {
			t.Fatal(s, err)
		}
	}
	for _, s := range []string{"XA START " + myb.MySQLXID(), "INSERT INTO " + table + " VALUES (" + itoa(id) + ", 'x')",
		"XA END " + myb.MySQLXID(), "XA PREPARE " + myb.MySQLXID()} {
		if _, err := mc.ExecContext(ctx, s); err != nil {
			t.Fatal(s, err)
		}
	}
	_ = pc.Raw(func(any) error { return errBadConn })
	_ = mc.Raw(func(any) error { return errBadConn })
	return g
}

// preparedAnyName lists the branches of g still prepared on both
// databases, under any of Tandem's names (owned or legacy).
func preparedAnyName(t *testing.T, d dbs, g xid.GTRID) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	rows, err := d.pg.QueryContext(ctx, "SELECT gid FROM pg_prepared_xacts WHERE "+xid.PostgresScanPredicate+" AND gid LIKE '%"+g.String()+"%'")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		_ = rows.Scan(&s)
		out = append(out, "pg "+s)
	}
	rows.Close()
	rows, err = d.my.QueryContext(ctx, "XA RECOVER")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var f int64
		var a, b int
		var data []byte
		_ = rows.Scan(&f, &a, &b, &data)
		if strings.Contains(string(data), g.String()) {
			out = append(out, fmt.Sprintf("maria %d %s", f, data))
		}
	}
	rows.Close()
	return out
}

// rollbackAnyName rolls back whatever branch of g is still prepared, under
// any of Tandem's names (a failed run must not leave row locks on the
// table the next run drops).
func rollbackAnyName(t *testing.T, d dbs, g xid.GTRID) {
	ctx := context.Background()
	var gids, xids []string
	if rows, err := d.pg.QueryContext(ctx, "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE '%"+g.String()+"%'"); err == nil {
		for rows.Next() {
			var s string
			_ = rows.Scan(&s)
			gids = append(gids, s)
		}
		rows.Close()
	}
	for _, s := range gids {
		t.Logf("rolling back %s, left prepared", s)
		_, _ = d.pg.ExecContext(ctx, "ROLLBACK PREPARED '"+s+"'")
	}
	if rows, err := d.my.QueryContext(ctx, "XA RECOVER"); err == nil {
		for rows.Next() {
			var f int64
			var a, b int
			var data []byte
			_ = rows.Scan(&f, &a, &b, &data)
			if strings.Contains(string(data), g.String()) && a+b <= len(data) {
				xids = append(xids, fmt.Sprintf("'%s','%s',%d", data[:a], data[a:a+b], f))
			}
		}
		rows.Close()
	}
	for _, x := range xids {
		t.Logf("rolling back %s, left prepared", x)
		_, _ = d.my.ExecContext(ctx, "XA ROLLBACK "+x)
	}
}

type inDoubtEntry struct {
	GTRID      string    `json:"gtrid"`
	RM         string    `json:"rm"`
	Owner      string    `json:"owner"`
	Reason     string    `json:"reason"`
	AgeSeconds float64   `json:"age_seconds"`
	FirstSeen  time.Time `json:"first_seen"`
}

func inDoubtList(t *testing.T, admin string) []inDoubtEntry {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/in-doubt")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		InDoubt []inDoubtEntry `json:"in_doubt"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("GET /in-doubt: %s: %v", resp.Status, err)
	}
	return out.InDoubt
}

// Issue 21's first failure, through the real binary. Coordinator A decides
// COMMIT for one gtrid and is killed before phase 2; another gtrid of A's
// is prepared and left undecided. Coordinator B, with an empty data
// directory and a short orphan timeout, is started over the same databases
// (an ephemeral volume, a second deployment, a staging copy): it must
// never decide, roll back or commit A's branches — before owners were
// honoured it presumed abort for both after its orphan timeout, splitting
// the one A had committed — and lists them, with their owner. A, started
// again, settles both: the COMMIT from its log, the orphan presumed
// aborted. With owned names (an SDK of this version) B lists them as
// foreign; with legacy names (an SDK from before owners) as unowned, and
// A settles them because its operator says they are its own
// (--adopt-unowned: an in-place upgrade).
func TestASecondCoordinatorNeverSettlesAnotherClustersBranches(t *testing.T) {
	t.Run("owned names", func(t *testing.T) { secondCoordinator(t, false) })
	t.Run("legacy names", func(t *testing.T) { secondCoordinator(t, true) })
}

func secondCoordinator(t *testing.T, legacy bool) {
	d := openDBs(t)
	d.rollbackLeftovers(t)
	d.table(t, "e2e_owner")
	adminA, adminB := freeAddr(t), freeAddr(t)
	extraA := []string{"--admin", adminA, "--max-clock-skew", "1s"}
	if legacy {
		extraA = append(extraA, "--adopt-unowned")
	}
	a := startCoordinator(t, coordOpts{failpoints: "after-commit-record=kill", extra: extraA})
	owner := clusterOf(t, a)
	wantOwner, wantReason := owner.String(), "foreign-owner"
	if legacy {
		owner, wantOwner, wantReason = xid.Owner{}, "", "unowned-legacy-name"
	}
	idA, ok, err := standby.LoadIdentity(a.dataDir)
	if err != nil || !ok || idA.Born.IsZero() {
		t.Fatalf("A's data directory has no identity with a birth: %+v %v %v", idA, ok, err)
	}
	// A presumes abort only for gtrids begun after its birth (plus the
	// allowed clock skew, 1s here).
	eventually(t, 5*time.Second, "A's birth plus the clock skew past", func() bool { return time.Now().After(idA.Born.Add(1100 * time.Millisecond)) })
	committed := prepareOwnedAndDie(t, "e2e_owner", 1, owner)
	orphan := prepareOwnedAndDie(t, "e2e_owner", 2, owner)
	byHand := prepareOwnedAndDie(t, "e2e_owner", 3, owner) // settled on B by an operator
	t.Cleanup(func() { rollbackAnyName(t, d, committed); rollbackAnyName(t, d, orphan); rollbackAnyName(t, d, byHand) })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := a.api().Commit(ctx, &api.CommitRequest{Gtrid: committed.String(), Branches: []*api.Branch{{Rm: "pg"}, {Rm: "maria"}}}); err == nil {
		t.Fatal("A answered the Commit: its failpoint should have killed it after the COMMIT record")
	}
	<-a.exited
	if !strings.Contains(a.out.String(), "failpoint after-commit-record: SIGKILL") {
		t.Fatalf("A did not die at the failpoint:\n%s", a.out.String())
	}
	for _, g := range []xid.GTRID{committed, orphan, byHand} {
		if left := preparedAnyName(t, d, g); len(left) != 2 {
			t.Fatalf("after A's crash %s has %v prepared, want both branches", g, left)
		}
	}

	const orphanTimeout, scanInterval = 500 * time.Millisecond, 200 * time.Millisecond
	b := startCoordinator(t, coordOpts{extra: []string{"--admin", adminB, "--orphan-timeout", orphanTimeout.String()}})
	if clusterOf(t, b) == owner {
		t.Fatal("B, with an empty data directory, has A's cluster identity")
	}
	// Until B has listed every branch for well past its orphan timeout
	// (many scans), no branch of A's may move, and B decides nothing.
	bAPI := b.api() // one connection for every poll (the API caps those held)
	eventually(t, 30*time.Second, "B listing A's six branches ("+wantReason+"), past its orphan timeout", func() bool {
		for _, g := range []xid.GTRID{committed, orphan, byHand} {
			if left := preparedAnyName(t, d, g); len(left) != 2 {
				t.Fatalf("B settled A's branches of %s: prepared now %v, want both\n%s", g, left, b.out.String())
			}
			st, err := bAPI.Status(context.Background(), &api.StatusRequest{Gtrid: g.String()})
			if err != nil || st.Outcome != api.Outcome_UNDECIDED {
				t.Fatalf("B's Status of A's gtrid %s = %v, %v; want UNDECIDED: B must decide nothing for it\n%s", g, st, err, b.out.String())
			}
		}
		n := 0
		for _, e := range inDoubtList(t, adminB) {
			if e.Owner == wantOwner && e.Reason == wantReason && time.Since(e.FirstSeen) > orphanTimeout+5*scanInterval {
				n++
			}
		}
		return n == 6
	})
	if pg, my := d.count(t, d.pg, "e2e_owner", 1), d.count(t, d.my, "e2e_owner", 1); pg != 0 || my != 0 {
		t.Fatalf("B committed A's branch: rows pg=%d maria=%d", pg, my)
	}
	code, metrics := httpGet(t, "http://"+adminB+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics on B: %d %s", code, metrics)
	}
	for _, want := range []string{`tandem_in_doubt_branches_by_reason{reason="` + wantReason + `"} 6`, "tandem_in_doubt_branches 6"} {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("B's /metrics lacks %q", want)
		}
	}
	if wantForeign := map[bool]string{false: "tandem_foreign_branches 6\n", true: "tandem_foreign_branches 0\n"}[legacy]; !strings.Contains(metrics, wantForeign) {
		t.Errorf("B's /metrics lacks %q", wantForeign)
	}
	list, err := tandemCmd(t, "status", "--in-doubt", "--admin", adminB)
	t.Logf("tandem status --in-doubt on B:\n%s", list)
	if err != nil || !strings.Contains(list, committed.String()) || !strings.Contains(list, owner.Short()) || !strings.Contains(list, strings.Split(wantReason, "-")[0]) {
		t.Fatalf("tandem status --in-doubt on B: %v\n%s\nwant %s listed (%s) with owner %s", err, list, committed, wantReason, owner.Short())
	}
	st, err := b.api().Status(context.Background(), &api.StatusRequest{Gtrid: committed.String(), Resolve: true})
	if err == nil {
		t.Fatalf("B's Status --resolve of A's gtrid answered %v, want a refusal", st)
	}
	if left := preparedAnyName(t, d, committed); len(left) != 2 {
		t.Fatalf("B's Status --resolve settled A's branches: prepared now %v", left)
	}
	// An operator settles one of A's gtrids on B by hand (A gone for good,
	// say): tandem resolve, with B's admin token.
	show, err := tandemCmd(t, "resolve", "--admin", adminB, "--data-dir", b.dataDir, "--gtrid", byHand.String())
	if strings.Count(show, "PREPARED") != 2 {
		t.Fatalf("tandem resolve --gtrid %s on B: %v\n%s\nwant PREPARED on both databases", byHand, err, show)
	}
	if out, err := tandemCmd(t, "resolve", "--admin", adminB, "--data-dir", b.dataDir, "--gtrid", byHand.String(), "--abort"); err != nil {
		t.Fatalf("tandem resolve --abort %s on B: %v\n%s", byHand, err, out)
	}
	eventually(t, 10*time.Second, "B's operator's abort of "+byHand.String()+" rolled back both branches", func() bool { return len(preparedAnyName(t, d, byHand)) == 0 })
	if left := preparedAnyName(t, d, committed); len(left) != 2 {
		t.Fatalf("resolving %s by hand touched %s: prepared now %v", byHand, committed, left)
	}
	b.stop()

	a.restart() // no failpoint now
	eventually(t, 20*time.Second, "A settles its branches", func() bool {
		return len(preparedAnyName(t, d, committed)) == 0 && len(preparedAnyName(t, d, orphan)) == 0
	})
	if pg, my := d.count(t, d.pg, "e2e_owner", 1), d.count(t, d.my, "e2e_owner", 1); pg != 1 || my != 1 {
		t.Fatalf("A's COMMIT: rows pg=%d maria=%d, want 1 and 1\n%s", pg, my, a.out.String())
	}
	for id := 2; id <= 3; id++ {
		if pg, my := d.count(t, d.pg, "e2e_owner", id), d.count(t, d.my, "e2e_owner", id); pg != 0 || my != 0 {
			t.Fatalf("row %d (A's orphan, or aborted by hand on B): pg=%d maria=%d, want rolled back\n%s", id, pg, my, a.out.String())
		}
	}
	if _, err := os.Stat(filepath.Join(b.dataDir, standby.IdentityFile)); err != nil {
		t.Errorf("B's data directory has no identity: %v", err)
	}
}

// TestInDoubtListIsAsOfTheMomentAsked: the operator's list of in-doubt
// branches is what the databases hold when it is asked for, not what the
// last periodic scan saw. After a promotion with --accept-data-loss the
// operator lists them at once; a list from the scan before the old
// primary's clients finished preparing said "no in-doubt branches" while
// three were about to be (TestRunningPrimaryIsFencedByAPromotion, loaded).
func TestInDoubtListIsAsOfTheMomentAsked(t *testing.T) {
	d := openDBs(t)
	d.rollbackLeftovers(t)
	d.table(t, "e2e_indoubt_now")
	admin := freeAddr(t)
	startCoordinator(t, coordOpts{extra: []string{"--admin", admin, "--scan-interval", "1h"}})
	if out, err := tandemCmd(t, "status", "--in-doubt", "--admin", admin); err != nil || !strings.Contains(out, "no in-doubt branches") {
		t.Fatalf("tandem status --in-doubt before any branch: %v\n%s", err, out)
	}
	foreign := xid.Owner{0xf0, 0x0e, 0x19, 0x17}
	g := prepareOwnedAndDie(t, "e2e_indoubt_now", 1, foreign)
	t.Cleanup(func() { rollbackAnyName(t, d, g) })
	out, err := tandemCmd(t, "status", "--in-doubt", "--admin", admin)
	t.Logf("tandem status --in-doubt:\n%s", out)
	if err != nil || strings.Count(out, g.String()) != 2 || !strings.Contains(out, "as of a scan of every database") {
		t.Fatalf("tandem status --in-doubt right after a foreign branch was prepared (scan interval 1h): %v\n%s\nwant both branches of %s, as of a scan just made", err, out, g)
	}
	var resp struct {
		ScannedAt    time.Time `json:"scanned_at"`
		ScanComplete bool      `json:"scan_complete"`
	}
	hr, err := http.Get("http://" + admin + "/in-doubt")
	if err != nil {
		t.Fatal(err)
	}
	defer hr.Body.Close()
	if err := json.NewDecoder(hr.Body).Decode(&resp); err != nil {
		t.Fatalf("GET /in-doubt: %s: %v", hr.Status, err)
	}
	if !resp.ScanComplete || time.Since(resp.ScannedAt) > time.Minute {
		t.Errorf("GET /in-doubt: scanned_at %v, scan_complete %v; want the last complete scan, just now", resp.ScannedAt, resp.ScanComplete)
	}
}
