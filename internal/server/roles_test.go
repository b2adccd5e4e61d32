package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tandem-tx/tandem/api"
	"github.com/tandem-tx/tandem/internal/config"
	"github.com/tandem-tx/tandem/internal/standby"
)

// The role controller's transitions, without databases: the RMs point at a
// closed port (nothing here commits anything), the standby link runs on
// loopback between two servers in this process.

// startRole starts a server in a fresh data directory: a primary shipping
// on so.Listen, or with so.Of a standby.
func startRole(t *testing.T, so StandbyOptions) *Server {
	t.Helper()
	return startRoleIn(t, t.TempDir(), so)
}

func startRoleIn(t *testing.T, dir string, so StandbyOptions) *Server {
	t.Helper()
	if so.NetTimeout == 0 {
		so.NetTimeout = 2 * time.Second
	}
	s, err := Start(config.Config{Listen: "127.0.0.1:0", DataDir: dir, RMs: unreachableRMs()},
		Options{Logger: quietLog, NoSync: true, Standby: so})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(time.Second) })
	return s
}

// pair starts a primary shipping on a free address and a standby of it
// (which will ship on a free address of its own once promoted), and waits
// until the standby has everything.
func pair(t *testing.T) (p, sb *Server, pListen, sListen string) {
	t.Helper()
	pListen, sListen = freeAddr(t), freeAddr(t)
	p = startRole(t, StandbyOptions{Listen: pListen, Protection: "max-protection"})
	sb = startRole(t, StandbyOptions{Of: pListen, Listen: sListen, Protection: "max-protection"})
	waitSynchronized(t, p)
	waitUntil(t, "the standby to be synchronized", func() bool { st, _ := sb.StandbyStatus(); return st.Synchronized })
	return p, sb, pListen, sListen
}

func waitSynchronized(t *testing.T, p *Server) {
	t.Helper()
	waitUntil(t, "the standby to have every record", func() bool {
		st, _ := p.StandbyStatus()
		return st.Connected && st.LagRecords == 0 && st.StandbyAt == st.PrimaryAt
	})
}

func healthOf(t *testing.T, s *Server) *api.HealthResponse {
	t.Helper()
	h, err := s.svc.Health(context.Background(), &api.HealthRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// A switchover: the primary demotes (its standby has every record), the
// standby is promoted (a newer epoch), the old primary follows it; calls to
// the demoted one are refused, the new primary serves.
func TestSwitchoverTransitions(t *testing.T) {
	p, sb, _, sListen := pair(t)
	h, err := p.Demote(context.Background())
	if err != nil {
		t.Fatalf("demote: %v", err)
	}
	if p.Role() != RoleDemoted || p.Coordinator() != nil {
		t.Fatalf("after demote: role %s, coordinator %v; want demoted, none", p.Role(), p.Coordinator())
	}
	if h.Position != h.StandbyAt || h.Position == "" {
		t.Fatalf("handover %+v: the standby does not have the last record", h)
	}
	if _, err := p.svc.Commit(context.Background(), &api.CommitRequest{}); err == nil || !strings.Contains(err.Error(), "handed over") {
		t.Fatalf("Commit on the demoted primary: %v; want a refusal saying it handed over", err)
	}
	if hr := healthOf(t, p); hr.Serving || !strings.Contains(hr.Message, "DEMOTED") {
		t.Fatalf("Health of the demoted primary: %+v", hr)
	}
	if _, err := p.Demote(context.Background()); !errors.Is(err, ErrRole) {
		t.Fatalf("demoting twice: %v; want ErrRole", err)
	}

	id, err := sb.Promote(standby.PromoteOptions{})
	if err != nil {
		t.Fatalf("promote: %v", err)
	}
	if id.Epoch != h.Epoch+1 {
		t.Fatalf("promoted to epoch %d; the old primary was at %d", id.Epoch, h.Epoch)
	}
	if sb.Role() != RolePrimary || sb.Coordinator() == nil || sb.StandbyListenAddr() != sListen {
		t.Fatalf("after promote: role %s, coordinator %v, shipping on %q", sb.Role(), sb.Coordinator(), sb.StandbyListenAddr())
	}
	if hr := healthOf(t, sb); !hr.Serving {
		t.Fatalf("Health of the new primary: %+v", hr)
	}

	if err := p.Follow(sListen); err != nil {
		t.Fatalf("follow: %v", err)
	}
	if p.Role() != RoleStandby {
		t.Fatalf("after follow: role %s", p.Role())
	}
	waitSynchronized(t, sb)
	// The primary's word that the standby holds everything (a STATE frame)
	// arrives after the last ACK: promoting before it would be refused.
	waitUntil(t, "the standby to be told it is synchronized", func() bool {
		st, _ := p.StandbyStatus()
		return st.Synchronized
	})
	st, _ := p.StandbyStatus()
	if st.Epoch != id.Epoch {
		t.Fatalf("the old primary follows at epoch %d; the new primary is at %d", st.Epoch, id.Epoch)
	}
	if _, err := p.Promote(standby.PromoteOptions{}); err != nil {
		t.Fatalf("promoting the old primary back: %v", err)
	}
}

// Resume: a demoted primary whose switchover did not happen serves again;
// a standby, a primary and a fenced primary do not resume.
func TestResumeAfterDemote(t *testing.T) {
	p, sb, _, _ := pair(t)
	if err := p.Resume(); !errors.Is(err, ErrRole) {
		t.Fatalf("a primary resumed: %v", err)
	}
	if err := sb.Resume(); !errors.Is(err, ErrRole) {
		t.Fatalf("a standby resumed: %v", err)
	}
	if _, err := p.Demote(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := p.Resume(); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if p.Role() != RolePrimary || p.Coordinator() == nil {
		t.Fatalf("after resume: role %s", p.Role())
	}
	if hr := healthOf(t, p); !hr.Serving {
		t.Fatalf("Health after resume: %+v", hr)
	}
	waitSynchronized(t, p)
}

// Wrong-role changes are refused with ErrRole and change nothing.
func TestTransitionsRefusedForTheRole(t *testing.T) {
	p, sb, pListen, _ := pair(t)
	if _, err := p.Promote(standby.PromoteOptions{}); !errors.Is(err, ErrRole) {
		t.Errorf("promoting a primary: %v", err)
	}
	if _, err := sb.Demote(context.Background()); !errors.Is(err, ErrRole) {
		t.Errorf("demoting a standby: %v", err)
	}
	if err := p.Follow(pListen); !errors.Is(err, ErrRole) {
		t.Errorf("a primary followed: %v", err)
	}
	if err := sb.Follow(pListen); !errors.Is(err, ErrRole) {
		t.Errorf("a standby followed: %v", err)
	}
	alone := startRole(t, StandbyOptions{})
	if _, err := alone.Demote(context.Background()); !errors.Is(err, ErrRole) {
		t.Errorf("demoting a primary without a standby: %v", err)
	}
	if p.Role() != RolePrimary || sb.Role() != RoleStandby || alone.Role() != RolePrimary {
		t.Fatalf("roles after refused changes: %s %s %s", p.Role(), sb.Role(), alone.Role())
	}
}

// Fencing: a primary whose --peer is promoted (a failover) learns the new
// epoch from the promoted standby's PROBE and stops deciding; it says who
// superseded it and can follow it.
func TestFencedByThePromotedPeer(t *testing.T) {
	pListen, sListen := freeAddr(t), freeAddr(t)
	p := startRole(t, StandbyOptions{Listen: pListen, Peer: sListen, Protection: "max-protection"})
	sb := startRole(t, StandbyOptions{Of: pListen, Listen: sListen, Peer: pListen, Protection: "max-protection"})
	waitSynchronized(t, p)
	waitUntil(t, "the standby to be synchronized", func() bool { st, _ := sb.StandbyStatus(); return st.Synchronized })
	if _, err := sb.Promote(standby.PromoteOptions{}); err != nil {
		t.Fatalf("promote: %v", err)
	}
	waitUntil(t, "the old primary to be fenced", func() bool { return p.Role() == RoleFenced })
	if p.Coordinator() != nil || p.StandbyListenAddr() != "" {
		t.Fatalf("a fenced primary kept its coordinator or shipper")
	}
	_, err := p.svc.Commit(context.Background(), &api.CommitRequest{})
	if err == nil || !strings.Contains(err.Error(), sListen) {
		t.Fatalf("Commit on the fenced primary: %v; want a refusal naming the new primary %s", err, sListen)
	}
	if err := p.Resume(); !errors.Is(err, ErrRole) {
		t.Fatalf("a fenced primary resumed: %v", err)
	}
	if err := p.Follow(sListen); err != nil {
		t.Fatalf("follow: %v", err)
	}
	waitSynchronized(t, sb)
}

// A failed promotion: a standby that never received a log has nothing to
// promote; with --accept-data-loss --old-primary-stopped it gets past the
// checks, the promotion itself fails, and it follows its primary again.
func TestFailedPromotionFollowsAgain(t *testing.T) {
	nowhere := freeAddr(t)
	sb := startRole(t, StandbyOptions{Of: nowhere})
	if _, err := sb.Promote(standby.PromoteOptions{}); !errors.Is(err, ErrRole) {
		t.Fatalf("promoting an unsynchronized standby without --accept-data-loss: %v; want ErrRole", err)
	}
	_, err := sb.Promote(standby.PromoteOptions{AcceptDataLoss: true, OldPrimaryStopped: true})
	if err == nil || !strings.Contains(err.Error(), "no cluster identity") {
		t.Fatalf("promoting a standby without a log: %v; want the promotion to fail (no cluster identity)", err)
	}
	if sb.Role() != RoleStandby || sb.Coordinator() != nil {
		t.Fatalf("after a failed promotion: role %s", sb.Role())
	}
	if st, ok := sb.StandbyStatus(); !ok || st.Standby != nowhere {
		t.Fatalf("after a failed promotion the standby follows %q (%v); want %s", st.Standby, ok, nowhere)
	}
}

// A promotion that took the new epoch but could not open the coordinator
// (another process holds the data directory's LOCK) leaves the server
// demoted, saying why and how to restart; it does not resume (its log is
// the new epoch's), and it can follow a primary.
func TestPromotionWhoseCoordinatorDoesNotOpen(t *testing.T) {
	pListen, dir := freeAddr(t), t.TempDir()
	p := startRole(t, StandbyOptions{Listen: pListen, Protection: "max-protection"})
	sb := startRoleIn(t, dir, StandbyOptions{Of: pListen, Listen: freeAddr(t), Protection: "max-protection"})
	waitSynchronized(t, p)
	waitUntil(t, "the standby to be synchronized", func() bool { st, _ := sb.StandbyStatus(); return st.Synchronized })
	lock, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	id, err := sb.Promote(standby.PromoteOptions{})
	if err == nil || !strings.Contains(err.Error(), "taken, but the coordinator did not open") {
		t.Fatalf("promote with the data directory locked: %v; want the coordinator not opened", err)
	}
	if sb.Role() != RoleDemoted || sb.Coordinator() != nil {
		t.Fatalf("after the failed promotion: role %s", sb.Role())
	}
	if st, _ := sb.StandbyStatus(); st.Epoch != id.Epoch || st.Role != "demoted" {
		t.Fatalf("status after the failed promotion: %+v; want demoted at epoch %d", st, id.Epoch)
	}
	if hr := healthOf(t, sb); hr.Serving || !strings.Contains(hr.Message, "could not open the coordinator") || !strings.Contains(hr.Message, dir) {
		t.Fatalf("Health after the failed promotion: %+v", hr)
	}
	if err := sb.Resume(); !errors.Is(err, ErrRole) {
		t.Fatalf("resume after a failed promotion: %v; want ErrRole", err)
	}
	if err := sb.Follow(pListen); err != nil {
		t.Fatalf("follow after a failed promotion: %v", err)
	}
	if sb.Role() != RoleStandby {
		t.Fatalf("after follow: %s", sb.Role())
	}
}

// freezer is a TCP proxy the test can stop forwarding through, without
// closing the connections: a standby that stays connected and acknowledges
// nothing.
type freezer struct {
	lis    net.Listener
	mu     sync.Mutex
	frozen bool
	thaw   chan struct{}
}

func newFreezer(t *testing.T, to string) *freezer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{lis: lis, thaw: make(chan struct{})}
	t.Cleanup(func() { lis.Close(); f.set(false) })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", to)
			if err != nil {
				c.Close()
				continue
			}
			go f.pipe(c, u)
			go f.pipe(u, c)
		}
	}()
	return f
}

func (f *freezer) set(frozen bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.frozen && !frozen {
		close(f.thaw)
		f.thaw = make(chan struct{})
	}
	f.frozen = frozen
}

func (f *freezer) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		for {
			f.mu.Lock()
			frozen, thaw := f.frozen, f.thaw
			f.mu.Unlock()
			if !frozen {
				break
			}
			<-thaw
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				return
			}
			return
		}
	}
}

// demoteFrozen starts a primary (async) whose standby is connected through a
// frozen proxy, writes a record the standby cannot acknowledge, and starts
// a Demote; it returns once the Demote refuses new calls (it then waits
// for the standby). demoted delivers the Demote's error.
func demoteFrozen(t *testing.T) (p *Server, pListen string, ctx context.Context, cancel context.CancelFunc, demoted chan error) {
	t.Helper()
	pListen = freeAddr(t)
	p = startRole(t, StandbyOptions{Listen: pListen, NetTimeout: 2 * time.Second})
	f := newFreezer(t, pListen)
	startRole(t, StandbyOptions{Of: f.lis.Addr().String()})
	waitSynchronized(t, p)
	f.set(true)
	// A record the frozen standby cannot acknowledge (async: appending it
	// does not wait for the standby).
	if err := p.Coordinator().SwitchLogSegment(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	demoted = make(chan error, 1)
	go func() { _, err := p.Demote(ctx); demoted <- err }()
	waitUntil(t, "new calls to be refused (the demote began)", func() bool {
		select {
		case err := <-demoted:
			t.Fatalf("the demote ended before waiting for the standby: %v", err)
		default:
		}
		_, err := p.svc.Commit(context.Background(), &api.CommitRequest{})
		return err != nil && strings.Contains(err.Error(), "switchover in progress")
	})
	return p, pListen, ctx, cancel, demoted
}

// While a Demote waits for its standby's acknowledgement, the role can be
// read (Role, Coordinator, the standby address, Health, the status of GET
// /standby): the wait holds no lock others need. Cancelling the Demote's
// context ends the wait: the switchover is abandoned and the coordinator
// serves as the primary again.
func TestRoleReadableWhileDemoteWaits(t *testing.T) {
	p, _, _, cancel, demoted := demoteFrozen(t)
	defer cancel()
	read := make(chan string, 1)
	go func() {
		r := p.Role()
		_ = p.Coordinator()
		_ = p.StandbyListenAddr()
		st, _ := p.StandbyStatus()
		h, err := p.svc.Health(context.Background(), &api.HealthRequest{})
		read <- fmt.Sprint(r, " ", st.Role, " ", h.GetMessage(), err)
	}()
	select {
	case got := <-read:
		t.Logf("read while the demote waits: %s", got)
	case err := <-demoted:
		t.Fatalf("the demote ended (%v) before the role could be read: the reads waited for it", err)
	}
	cancel()
	err := <-demoted
	if err == nil || !strings.Contains(err.Error(), "serves as the primary again") && !strings.Contains(err.Error(), "cancelled") {
		t.Fatalf("a cancelled demote: %v; want the switchover abandoned", err)
	}
	if p.Role() != RolePrimary || p.Coordinator() == nil {
		t.Fatalf("after an abandoned demote: role %s", p.Role())
	}
}

// Stop during a Demote that waits for its standby: the Demote gives up and
// does not reopen the primary (its --standby-listen address is free once
// Stop returned), and no goroutine of the controller is left.
func TestStopDuringDemote(t *testing.T) {
	p, pListen, _, cancel, demoted := demoteFrozen(t)
	defer cancel()
	start := time.Now()
	if err := p.Stop(time.Second); err != nil {
		t.Logf("stop: %v", err)
	}
	t.Logf("Stop returned after %v", time.Since(start))
	// Demote returned before Stop did: Stop takes the role-change lock,
	// which the Demote holds to its end.
	if !p.roles.change.TryLock() {
		t.Fatalf("Stop returned while the Demote still ran (it holds the role-change lock)")
	}
	p.roles.change.Unlock()
	// The test's goroutine that called it hands its error over a moment
	// later, later still on a busy machine.
	select {
	case err := <-demoted:
		if err == nil || !strings.Contains(err.Error(), "stopping") {
			t.Fatalf("the demote stopped by Stop: %v; want it abandoned for the stop", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the Demote still ran 30 s after Stop returned")
	}
	if r := p.Role(); r != RoleStopped {
		t.Fatalf("role after Stop: %s", r)
	}
	if n := p.runningGoroutines(); n != 0 {
		t.Fatalf("%d goroutines of the controller still run after Stop", n)
	}
	l, err := net.Listen("tcp", pListen)
	if err != nil {
		t.Fatalf("the primary's --standby-listen address is held after Stop (reopened?): %v", err)
	}
	l.Close()
	if _, err := p.Demote(context.Background()); !errors.Is(err, errStopped) {
		t.Fatalf("a role change after Stop: %v; want errStopped", err)
	}
	if _, ok := p.StandbyStatus(); ok {
		t.Fatalf("a stopped server reports a standby status")
	}
}

// Stop returns only after every goroutine the controller started ended:
// the --peer check of a primary, and a promoted standby's attempts to tell
// its (stopped, unreachable) old primary of the new epoch, which would
// otherwise go on for 30 s.
func TestStopEndsTheControllersGoroutines(t *testing.T) {
	pListen, sListen := freeAddr(t), freeAddr(t)
	p := startRole(t, StandbyOptions{Listen: pListen, Peer: sListen, Protection: "max-protection"})
	sb := startRole(t, StandbyOptions{Of: pListen, Listen: sListen, Peer: pListen, Protection: "max-protection"})
	waitSynchronized(t, p)
	waitUntil(t, "the standby to be synchronized", func() bool { st, _ := sb.StandbyStatus(); return st.Synchronized })
	if n := p.runningGoroutines(); n != 1 {
		t.Fatalf("a primary with --peer runs %d goroutines of the controller; want 1 (the peer check)", n)
	}
	if err := p.Stop(time.Second); err != nil {
		t.Fatal(err)
	}
	if n := p.runningGoroutines(); n != 0 {
		t.Fatalf("%d goroutines of the controller still run after Stop", n)
	}
	if _, err := sb.Promote(standby.PromoteOptions{}); err != nil {
		t.Fatalf("promote after the primary stopped: %v", err)
	}
	if n := sb.runningGoroutines(); n != 2 {
		t.Fatalf("the promoted standby runs %d goroutines of the controller; want 2 (the peer check, telling the old primary)", n)
	}
	start := time.Now()
	if err := sb.Stop(time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("Stop returned after %v", time.Since(start))
	if n := sb.runningGoroutines(); n != 0 {
		t.Fatalf("%d goroutines of the controller still run after Stop", n)
	}
}

// Roles are an enum with the names GET /standby, Health and the /role/*
// bodies have always used.
func TestRoleNames(t *testing.T) {
	for _, r := range []Role{RolePrimary, RoleStandby, RoleDemoted, RoleFenced, RoleStopped} {
		if got, ok := ParseRole(r.String()); !ok || got != r {
			t.Errorf("ParseRole(%q) = %v, %v", r.String(), got, ok)
		}
		b, err := json.Marshal(map[string]any{"role": r})
		if want := `{"role":"` + r.String() + `"}`; err != nil || string(b) != want {
			t.Errorf("JSON of %s: %s, %v; want %s", r, b, err, want)
		}
	}
	for _, name := range []string{"", "none", "PRIMARY", "leader"} {
		if r, ok := ParseRole(name); ok {
			t.Errorf("ParseRole(%q) = %s; want no role", name, r)
		}
	}
}

// A primary without a standby link whose data directory has a cluster
// identity (a standby promoted without --standby-listen, or a primary
// restarted without it) names its cluster and epoch in Health, so that a
// client following the primary can tell it from another cluster's
// coordinator and from a superseded primary. A fresh data directory gets an
// identity at its first start (born then), and Health names it too: clients
// name their branches with the cluster (xid.Owner).
func TestHealthNamesTheClusterWithoutAStandbyLink(t *testing.T) {
	dir := t.TempDir()
	id := standby.Identity{Epoch: 3}
	id.Cluster[0], id.Cluster[15] = 0xab, 0xcd
	if err := standby.SaveIdentity(dir, id); err != nil {
		t.Fatal(err)
	}
	p := startRoleIn(t, dir, StandbyOptions{})
	want := "role=primary cluster=" + id.Cluster.String() + " epoch=3"
	if msg := healthOf(t, p).GetMessage(); !strings.Contains(msg, want) {
		t.Errorf("Health's message %q does not name %q", msg, want)
	}
	freshDir := t.TempDir()
	before := time.Now()
	fresh := startRoleIn(t, freshDir, StandbyOptions{})
	made, ok, err := standby.LoadIdentity(freshDir)
	if err != nil || !ok || made.Cluster.IsZero() || made.Born.Before(before) {
		t.Fatalf("a fresh data directory's identity after the first start: %+v %v %v; want a cluster, born at the start", made, ok, err)
	}
	if msg, want := healthOf(t, fresh).GetMessage(), "role=primary cluster="+made.Cluster.String()+" epoch=1"; !strings.Contains(msg, want) {
		t.Errorf("a fresh primary's Health %q does not name %q", msg, want)
	}
}
