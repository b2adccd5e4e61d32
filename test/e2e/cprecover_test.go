package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/internal/decision"
	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/xid"
)

// Recovery of commit-point transactions by real coordinators on the real
// databases: the PostgreSQL branch is prepared by hand as
// tandemcp2:<gtrid>:pg:maria:<maria's table id>, the MariaDB commit point's
// transaction is run by hand (decision.BeginStatements, the write,
// decision.CommitStatements naming maria's table id and pg as participant).

// tableID reads the decision-table id of db.
func tableID(t *testing.T, db *sql.DB, d rm.Driver) xid.Owner {
	t.Helper()
	id, err := decision.ReadID(context.Background(), db, d)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// cpPrepare writes id on PostgreSQL in a transaction prepared as the
// branch of g whose commit point is maria.
func cpPrepare(t *testing.T, d dbs, table string, g xid.GTRID, id int) {
	t.Helper()
	ctx := context.Background()
	c, err := d.pg.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	gid := xid.Branch{GTRID: g, RM: "pg", CommitPoint: "maria", Owner: tableID(t, d.my, rm.MySQL)}.PostgresGID()
	for _, s := range []string{"BEGIN", fmt.Sprintf("INSERT INTO %s (id, v) VALUES (%d, 'x')", table, id), "PREPARE TRANSACTION '" + gid + "'"} {
		if _, err := c.ExecContext(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// cpBegin begins the commit point's transaction on MariaDB and writes id in
// it, on a session of its own that the caller holds.
func cpBegin(t *testing.T, d dbs, table string, id int) *sql.Conn {
	t.Helper()
	ctx := context.Background()
	c, err := d.my.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	for _, s := range append(decision.BeginStatements(rm.MySQL, ""), fmt.Sprintf("INSERT INTO %s (id, v) VALUES (%d, 'x')", table, id)) {
		if _, err := c.ExecContext(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	return c
}

// cpCommit sends the commit point's decision and COMMIT in one round trip.
func cpCommit(t *testing.T, d dbs, c *sql.Conn, g xid.GTRID) error {
	_, err := c.ExecContext(context.Background(), strings.Join(decision.CommitStatements(rm.MySQL, cpDecision(t, d, g)), "; "))
	return err
}

// cpDecision is the commit point's decision for g: maria's table, pg the
// participant.
func cpDecision(t *testing.T, d dbs, g xid.GTRID) decision.Commit {
	return decision.Commit{GTRID: g, Table: tableID(t, d.my, rm.MySQL), MaxAge: time.Hour,
		Participants: []decision.Participant{{RM: "pg", Table: tableID(t, d.pg, rm.Postgres)}}}
}

// cpSetup makes a fresh table and the decision tables, with nothing left
// prepared by earlier tests.
func cpSetup(t *testing.T, table string) dbs {
	t.Helper()
	d := openDBs(t)
	d.rollbackLeftovers(t)
	d.table(t, table)
	ctx := context.Background()
	if err := decision.Ensure(ctx, d.pg, rm.Postgres); err != nil {
		t.Fatal(err)
	}
	if err := decision.Ensure(ctx, d.my, rm.MySQL); err != nil {
		t.Fatal(err)
	}
	return d
}

// Two coordinators (two tandem serve processes, their own data
// directories) recover the same in-doubt set at once: N gtrids, each with a
// PostgreSQL branch prepared naming maria as its commit point; half have a
// committed 'C' row on MariaDB (with the MariaDB write), half nothing. In
// the end every gtrid is committed on both databases or on neither, with
// exactly one decision row, and nothing is left prepared.
func TestTwoCoordinatorsRecoverCommitPointBranches(t *testing.T) {
	const table, n = "cp_two_recoverers", 24
	d := cpSetup(t, table)
	a := startCoordinator(t, coordOpts{})
	b := startCoordinator(t, coordOpts{})
	gs := make([]xid.GTRID, n)
	for i := range gs {
		gs[i] = xid.New()
		cpPrepare(t, d, table, gs[i], i)
		if i%2 == 0 {
			if err := cpCommit(t, d, cpBegin(t, d, table, i), gs[i]); err != nil {
				t.Fatalf("commit point of gtrid %d: %v", i, err)
			}
		}
	}
	start := time.Now()
	eventually(t, 30*time.Second, "every commit-point branch settled", func() bool { return len(d.prepared(t)) == 0 })
	t.Logf("all %d settled in %s by two coordinators (orphan timeout 2s)", n, time.Since(start).Round(time.Millisecond))
	for i, g := range gs {
		pg, my := d.count(t, d.pg, table, i), d.count(t, d.my, table, i)
		row := decisionRow(t, d.my, g.String(), true)
		want, wantRow := 0, "A"
		if i%2 == 0 {
			want, wantRow = 1, "C"
		}
		if pg != want || my != want {
			t.Errorf("gtrid %d (%s): rows pg %d maria %d, want %d on both", i, g, pg, my, want)
		}
		if row != wantRow {
			t.Errorf("gtrid %d (%s): decision row %q, want %q", i, g, row, wantRow)
		}
		if pr := decisionRow(t, d.pg, g.String(), false); pr != "" {
			t.Errorf("gtrid %d: a decision row %q on PostgreSQL, which is not its commit point", i, pr)
		}
	}
	for _, c := range []*coordinator{a, b} {
		out := c.out.String()
		t.Logf("coordinator %s: %d settled per the table, %d orphans rolled back after taking the key", c.addr,
			strings.Count(out, "settled a commit-point branch"), strings.Count(out, "rolled back an orphaned commit-point branch"))
		if strings.Contains(out, "aborting an orphaned prepared branch") {
			t.Errorf("coordinator %s presumed a commit-point branch aborted in its own log:\n%s", c.addr, out)
		}
	}
}

// A late committer: the MariaDB commit point's transaction stays open past
// the orphan timeout (its client stopped) while its PostgreSQL branch is
// prepared. The coordinator takes the key ('A') and rolls PostgreSQL back;
// when the commit point resumes, its decision INSERT meets the key and the
// COMMIT never runs: the write is never visible anywhere.
//
// And a commit point that inserted its 'C' but has not committed yet holds
// the key: the coordinator waits (ErrPending) and, once it commits, commits
// the prepared branch.
func TestLateCommitPointCannotCommit(t *testing.T) {
	const table = "cp_late"
	d := cpSetup(t, table)
	late, slow := xid.New(), xid.New()
	lateConn := cpBegin(t, d, table, 1)
	cpPrepare(t, d, table, late, 1)
	slowConn := cpBegin(t, d, table, 2)
	cpPrepare(t, d, table, slow, 2)
	ctx := context.Background()
	// slow: the 'C' inserted, the COMMIT held back. A smaller lock wait
	// keeps the recoverer's Resolve from waiting long on it.
	stmts := decision.CommitStatements(rm.MySQL, cpDecision(t, d, slow))
	if stmts[len(stmts)-1] != "COMMIT" {
		t.Fatalf("CommitStatements ends with %q, want COMMIT", stmts[len(stmts)-1])
	}
	for _, s := range stmts[:len(stmts)-1] {
		if _, err := slowConn.ExecContext(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	// Committed rows old enough to forget, more than the table holds
	// besides: the coordinator's first sweep deletes them while the slow
	// commit point's 'C' is uncommitted. (Its DELETE waited for that row
	// while the locks it held blocked the coordinator's own 'A' for the
	// late gtrid: CI saw this test time out.)
	forgettable := cpOldCommits(t, d, max(8, 2*countRows(t, d.my, decision.TableName)))
	c := startCoordinator(t, coordOpts{})
	defer func() {
		if true {
			t.Logf("coordinator:\n%s", c.out.String())
		}
	}()
	eventually(t, 30*time.Second, "the late transaction's branch rolled back", func() bool {
		return len(d.preparedFor(t, late.String())) == 0
	})
	if row := decisionRow(t, d.my, late.String(), true); row != "A" {
		t.Fatalf("decision row of the late gtrid: %q, want 'A' (the coordinator took the key)", row)
	}
	// The coordinator has tried the slow gtrid past its orphan timeout too,
	// and met the key held by the open commit point.
	eventually(t, 30*time.Second, "the coordinator meets the held key", func() bool {
		return strings.Contains(c.out.String(), "the commit point's transaction is still open")
	})
	if got := d.preparedFor(t, slow.String()); len(got) != 1 {
		t.Fatalf("slow gtrid: prepared %v, want its PostgreSQL branch still prepared while the key is held", got)
	}

	// The late commit point resumes: refused, and rolled back.
	err := cpCommit(t, d, lateConn, late)
	why, refused := decision.Refused(err)
	if !refused || why != decision.RefusedDuplicate {
		t.Fatalf("the late commit point's decision: %v (refused %v %q), want refused as a duplicate", err, refused, why)
	}
	if _, err := lateConn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if pg, my := d.count(t, d.pg, table, 1), d.count(t, d.my, table, 1); pg != 0 || my != 0 {
		t.Errorf("late gtrid: rows pg %d maria %d, want 0 on both", pg, my)
	}

	// The sweep's DELETEs never wait longer than their bound for the slow
	// commit point's lock (they gave up after their 1 s, or did not wait).
	if out := c.out.String(); strings.Contains(out, "could not forget committed decisions") && strings.Contains(out, "context deadline exceeded") {
		t.Errorf("the coordinator's forget waited out its whole call timeout with a commit point open:\n%s", out)
	}

	// ... and forgot the old rows meanwhile, the slow commit point open.
	eventually(t, 30*time.Second, "the old committed rows forgotten while a commit point is open", func() bool {
		return countRows(t, d.my, decision.TableName+" WHERE gtrid IN "+quoted(forgettable)) == 0
	})

	// The slow commit point commits: the coordinator commits PostgreSQL.
	if _, err := slowConn.ExecContext(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the slow transaction's branch committed", func() bool {
		return len(d.preparedFor(t, slow.String())) == 0
	})
	if pg, my := d.count(t, d.pg, table, 2), d.count(t, d.my, table, 2); pg != 1 || my != 1 {
		t.Errorf("slow gtrid: rows pg %d maria %d, want 1 on both", pg, my)
	}
	if row := decisionRow(t, d.my, slow.String(), true); row != "C" {
		t.Errorf("decision row of the slow gtrid: %q, want 'C'", row)
	}
}

// cpOldCommits writes n committed decision rows on MariaDB two hours old,
// whose one participant is PostgreSQL holding nothing: a coordinator's
// sweep forgets them.
func cpOldCommits(t *testing.T, d dbs, n int) []xid.GTRID {
	t.Helper()
	parts := decision.FormatParticipants([]decision.Participant{{RM: "pg", Table: tableID(t, d.pg, rm.Postgres)}})
	gs := make([]xid.GTRID, n)
	for i := range gs {
		gs[i] = xid.New()
		if _, err := d.my.Exec("INSERT INTO "+decision.TableName+" (gtrid, outcome, began_at, decided_at, participants) VALUES (?, 'C', "+
			"UTC_TIMESTAMP(6) - INTERVAL 2 HOUR, UTC_TIMESTAMP(6) - INTERVAL 2 HOUR, ?)", gs[i].String(), parts); err != nil {
			t.Fatal(err)
		}
	}
	return gs
}

// quoted is gs as an SQL list: ('g1','g2',…).
func quoted(gs []xid.GTRID) string {
	q := make([]string, len(gs))
	for i, g := range gs {
		q[i] = "'" + g.String() + "'"
	}
	return "(" + strings.Join(q, ",") + ")"
}

// countRows is how many rows table holds.
func countRows(t *testing.T, db *sql.DB, table string) int {
	t.Helper()
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM " + table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// tandem status GTRID of a commit-point transaction answers from the commit
// point's table; --resolve takes the key and rolls the branch back. The
// coordinator's orphan timeout is long: only the operator's call settles.
func TestStatusOfCommitPointTransaction(t *testing.T) {
	const table = "cp_status"
	d := cpSetup(t, table)
	undecided, committed := xid.New(), xid.New()
	cpPrepare(t, d, table, undecided, 1)
	cpPrepare(t, d, table, committed, 2)
	mc := cpBegin(t, d, table, 2)
	c := startCoordinator(t, coordOpts{extra: []string{"--orphan-timeout", "1h", "--scan-interval", "1h", "--commit-point-settle-after", "1h"}})
	status := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(tandemBin, append([]string{"status", "--coordinator", c.addr}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("tandem status %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	out := status(undecided.String())
	if !strings.Contains(out, "UNDECIDED") || !strings.Contains(out, "commit point maria") {
		t.Errorf("status of an undecided commit-point gtrid:\n%s", out)
	}
	if row := decisionRow(t, d.my, undecided.String(), true); row != "" {
		t.Fatalf("status without --resolve recorded %q", row)
	}
	out = status("--resolve", undecided.String())
	if !strings.Contains(out, "ABORTED") {
		t.Errorf("status --resolve:\n%s", out)
	}
	if row := decisionRow(t, d.my, undecided.String(), true); row != "A" {
		t.Errorf("after status --resolve the decision row is %q, want 'A'", row)
	}
	if got := d.preparedFor(t, undecided.String()); len(got) != 0 {
		t.Errorf("after status --resolve still prepared: %v", got)
	}
	if err := cpCommit(t, d, mc, committed); err != nil {
		t.Fatal(err)
	}
	out = status(committed.String())
	if !strings.Contains(out, "COMMITTED") {
		t.Errorf("status of a committed commit-point gtrid:\n%s", out)
	}
	out = status("--resolve", committed.String())
	if !strings.Contains(out, "COMMITTED") || len(d.preparedFor(t, committed.String())) != 0 || d.count(t, d.pg, table, 2) != 1 {
		t.Errorf("status --resolve of a committed gtrid: want COMMITTED and the branch committed:\n%s", out)
	}
}

// A dead client's commit-point branch — prepared, no decision row, its
// client gone — holds its row locks for seconds, not for the orphan timeout
// (issue 21 item 8: 61-68 s before): the coordinator takes the commit
// point's key after --commit-point-settle-after (default 5 s) and rolls the
// branch back, whatever the orphan timeout and scan interval. A client
// that decides after that is refused (its 'C' meets the 'A').
func TestDeadClientsCommitPointBranchGoesInSeconds(t *testing.T) {
	const table = "cp_dead_client"
	d := cpSetup(t, table)
	// One branch left before the start, so that the coordinator's first
	// scan sees commit points in use (its scan then runs every
	// --commit-point-settle-after).
	warm := xid.New()
	cpPrepare(t, d, table, warm, 1)
	c := startCoordinator(t, coordOpts{extra: []string{"--orphan-timeout", "1h", "--scan-interval", "30s"}})
	defer func() {
		if t.Failed() {
			t.Logf("coordinator:\n%s", c.out.String())
		}
	}()
	eventually(t, 60*time.Second, "the first dead client's branch rolled back", func() bool { return len(d.preparedFor(t, warm.String())) == 0 })
	g := xid.New()
	late := cpBegin(t, d, table, 2)
	cpPrepare(t, d, table, g, 2)
	start := time.Now()
	// Deadline: twice the settle time plus a lock wait and slack, far below
	// the orphan timeout (1h) and the scan interval (30s).
	eventually(t, 20*time.Second, "the dead client's branch rolled back", func() bool { return len(d.preparedFor(t, g.String())) == 0 })
	t.Logf("a prepared commit-point branch with no decision row was rolled back %s after it was prepared (--commit-point-settle-after 5s default, --scan-interval 30s, --orphan-timeout 1h)",
		time.Since(start).Round(100*time.Millisecond))
	if row := decisionRow(t, d.my, g.String(), true); row != "A" {
		t.Fatalf("decision row %q, want 'A' (the coordinator took the key)", row)
	}
	if pg := d.count(t, d.pg, table, 2); pg != 0 {
		t.Fatalf("PostgreSQL has the dead client's row: %d", pg)
	}
	err := cpCommit(t, d, late, g)
	if why, refused := decision.Refused(err); !refused || why != decision.RefusedDuplicate {
		t.Fatalf("a decision after the key was taken: %v, want refused as a duplicate", err)
	}
	if _, err := late.ExecContext(context.Background(), "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if my := d.count(t, d.my, table, 2); my != 0 {
		t.Fatalf("MariaDB has the refused commit point's row")
	}
}

// idOf reads the decision-table id through dsn.
func idOf(t *testing.T, driver, dsn string) string {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	d := rm.Postgres
	if driver == "mysql" {
		d = rm.MySQL
	}
	id, err := decision.ReadID(context.Background(), db, d)
	if err != nil {
		t.Fatal(err)
	}
	return id.String()
}

// tandem init-rm creates the decision table where it is missing (a fresh
// PostgreSQL schema, a fresh MariaDB database), says "exists" the second
// time, and reports CheckDurable's verdict; with no RM it fails, saying so.
func TestInitRM(t *testing.T) {
	d := openDBs(t)
	ctx := context.Background()
	name := fmt.Sprintf("tandem_initrm_%d", time.Now().UnixNano()%1e9)
	if _, err := d.pg.ExecContext(ctx, "CREATE SCHEMA "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = d.pg.ExecContext(ctx, "DROP SCHEMA "+name+" CASCADE") })
	if _, err := d.my.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = d.my.ExecContext(ctx, "DROP DATABASE "+name) })
	pgFresh := pgDSN + "&search_path=" + name
	if !strings.Contains(pgDSN, "?") {
		pgFresh = pgDSN + "?search_path=" + name
	}
	myFresh := strings.Replace(myDSN, "/tandem?", "/"+name+"?", 1)
	if myFresh == myDSN {
		t.Skipf("cannot point the MariaDB DSN at another database: %q has no /tandem?", "…")
	}
	run := func(args ...string) (string, error) {
		cmd := exec.Command(tandemBin, append([]string{"init-rm"}, args...)...)
		cmd.Env = append(cmd.Environ(), "PGFRESH="+pgFresh, "MYFRESH="+myFresh)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out0 := func(t *testing.T, run func(...string) (string, error)) string {
		t.Helper()
		out, err := run("--rm", "pg=postgres:${PGFRESH}", "--rm", "maria=mysql:${MYFRESH}")
		if err != nil {
			t.Fatalf("init-rm: %v\n%s", err, out)
		}
		return out
	}
	want := map[string]string{}
	for _, r := range []struct {
		name string
		db   *sql.DB
		d    rm.Driver
	}{{"pg", d.pg, rm.Postgres}, {"maria", d.my, rm.MySQL}} {
		want[r.name] = "commit point: yes"
		if why := decision.CheckDurable(ctx, r.db, r.d); why != nil {
			want[r.name] = "commit point: NO"
		}
	}
	ids := map[string]string{}
	idRE := regexp.MustCompile(`\bid ([0-9a-f]{32})\b`)
	for i, verb := range []string{"created", "exists"} {
		out, err := run("--rm", "pg=postgres:${PGFRESH}", "--rm", "maria=mysql:${MYFRESH}")
		if err != nil {
			t.Fatalf("run %d: %v\n%s", i, err, out)
		}
		for _, r := range []string{"pg", "maria"} {
			line := ""
			for _, l := range strings.Split(out, "\n") {
				if strings.HasPrefix(l, "rm "+r+" ") {
					line = l
				}
			}
			if !strings.Contains(line, "table "+verb) || !strings.Contains(line, want[r]) {
				t.Errorf("run %d, rm %s: %q, want \"table %s\" and %q\n%s", i, r, line, verb, want[r], out)
			}
			m := idRE.FindStringSubmatch(line)
			switch {
			case m == nil:
				t.Errorf("run %d, rm %s: %q prints no table id", i, r, line)
			case ids[r] != "" && ids[r] != m[1]:
				t.Errorf("rm %s: the id changed between runs: %s, then %s", r, ids[r], m[1])
			default:
				ids[r] = m[1]
			}
		}
	}
	if got := idOf(t, "pgx", pgFresh); got != ids["pg"] {
		t.Errorf("pg: init-rm printed id %s, the table holds %s", ids["pg"], got)
	}
	if got := idOf(t, "mysql", myFresh); got != ids["maria"] {
		t.Errorf("maria: init-rm printed id %s, the table holds %s", ids["maria"], got)
	}
	var n int
	if err := d.pg.QueryRowContext(ctx, "SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename = 'tandem_decision'", name).Scan(&n); err != nil || n != 1 {
		t.Errorf("PostgreSQL schema %s: %d decision tables (%v), want 1", name, n, err)
	}
	if err := d.my.QueryRowContext(ctx, "SELECT count(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = 'tandem_decision'", name).Scan(&n); err != nil || n != 1 {
		t.Errorf("MariaDB database %s: %d decision tables (%v), want 1", name, n, err)
	}
	// Anyone who may write the table can decide transactions: init-rm says
	// who else may (here PUBLIC, on PostgreSQL).
	if strings.Contains(out0(t, run), "WARNING: also writable") {
		t.Errorf("a fresh table reported as writable by others")
	}
	if _, err := d.pg.ExecContext(ctx, "GRANT INSERT ON "+name+".tandem_decision TO PUBLIC"); err != nil {
		t.Fatal(err)
	}
	if got := out0(t, run); !strings.Contains(got, "WARNING: also writable by PUBLIC") {
		t.Errorf("init-rm after GRANT INSERT TO PUBLIC does not warn:\n%s", got)
	}
	if _, err := d.pg.ExecContext(ctx, "REVOKE INSERT ON "+name+".tandem_decision FROM PUBLIC"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.pg.ExecContext(ctx, "GRANT DELETE ON "+name+".tandem_decision_id TO PUBLIC"); err != nil {
		t.Fatal(err)
	}
	if got := out0(t, run); !strings.Contains(got, "WARNING: also writable by PUBLIC") {
		t.Errorf("init-rm after GRANT DELETE ON the id table TO PUBLIC does not warn:\n%s", got)
	}
	out, err := run()
	if err == nil || !strings.Contains(out, "no resource managers") {
		t.Errorf("init-rm with no RM: %v\n%s\nwant a failure naming --rm", err, out)
	}
}
