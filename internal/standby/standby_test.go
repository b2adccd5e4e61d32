package standby

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/internal/wal"
	"github.com/tandem-tx/tandem/waits"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// testID is a primary's identity; its birth is shipped to its standbys,
// which keep it (the tests compare whole identities).
func testID() Identity {
	born := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	return Identity{Cluster: ClusterID{1, 2, 3}, Epoch: 3, Born: born, Made: born}
}

// primary is a decision log whose writes go through a Shipper.
type primary struct {
	log *wal.Log
	sh  *Shipper
}

func startPrimary(t *testing.T, dir string, p Protection, netTimeout time.Duration) *primary {
	t.Helper()
	tr := Sync
	if p == MaxPerformance {
		tr = Async
	}
	sh, err := NewShipper(ShipperConfig{Listen: "127.0.0.1:0", Transport: tr, Protection: p, NetTimeout: netTimeout, Identity: testID(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	l, err := wal.Open(wal.Options{Dir: dir, SegmentSize: 64 << 10, NoSync: true, OnWrite: sh.Written}, func(pos wal.Position, typ wal.Type, b []byte) error { sh.Replayed(pos, typ, b); return nil })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sh.Close(); l.Close() })
	return &primary{log: l, sh: sh}
}

func startStandby(t *testing.T, dir, addr string) *Receiver {
	t.Helper()
	r, err := OpenReceiver(ReceiverConfig{Primary: addr, Dir: dir, SegmentSize: 64 << 10, NoSync: true, NetTimeout: 2 * time.Second, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// standbyRecords reads the records (not the MARKs) of a closed standby's log.
func standbyRecords(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	l, err := wal.Open(wal.Options{Dir: filepath.Join(dir, "log"), SegmentSize: 64 << 10, NoSync: true}, func(_ wal.Position, typ wal.Type, p []byte) error {
		if typ != RecMark {
			out = append(out, string(p))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	return out
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Under max-protection every Append returns only once the standby has the
// record on disk, and the standby's log holds every record in order.
func TestSyncEveryAcknowledgedRecordIsOnTheStandby(t *testing.T) {
	p := startPrimary(t, t.TempDir(), MaxProtection, time.Second)
	sdir := t.TempDir()
	r := startStandby(t, sdir, p.sh.Addr())
	var wg sync.WaitGroup
	var mu sync.Mutex
	var want []string
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				payload := fmt.Sprintf("g%d-%d", g, i)
				pos, err := p.log.Append(1, []byte(payload))
				if err != nil {
					t.Error(err)
					return
				}
				if got := r.Position(); got.Less(pos) {
					t.Errorf("Append of %s at %s returned, the standby has only %s", payload, pos, got)
				}
				mu.Lock()
				want = append(want, payload)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	st := p.sh.Status()
	if !st.Protected || st.LagRecords != 0 || !st.Connected {
		t.Errorf("status after the load: %+v", st)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	got := standbyRecords(t, sdir)
	if len(got) != len(want) {
		t.Fatalf("standby has %d records, want %d", len(got), len(want))
	}
	seen := map[string]bool{}
	for _, g := range got {
		seen[g] = true
	}
	for _, w := range want {
		if !seen[w] {
			t.Fatalf("acknowledged record %s is not on the standby", w)
		}
	}
}

// A standby started late (or down for a while) catches up from what the
// primary kept, including what the primary replayed at its start; a
// restarted standby goes on from its own position without duplicates.
func TestCatchUp(t *testing.T) {
	pdir := t.TempDir()
	p := startPrimary(t, pdir, MaxPerformance, time.Second)
	for i := range 500 {
		if _, err := p.log.Append(1, []byte(fmt.Sprintf("a%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	p.sh.Close()
	p.log.Close()
	p = startPrimary(t, pdir, MaxPerformance, time.Second) // replays 500
	sdir := t.TempDir()
	r := startStandby(t, sdir, p.sh.Addr())
	for i := range 300 {
		if _, err := p.log.Append(1, []byte(fmt.Sprintf("b%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	caughtUp := func() bool { st := p.sh.Status(); return st.Connected && st.LagRecords == 0 }
	waitFor(t, "the standby to catch up", caughtUp)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if _, err := p.log.Append(1, []byte(fmt.Sprintf("c%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	// The primary notices the closed connection by itself, shortly.
	waitFor(t, "the primary to see the standby gone, 100 records behind", func() bool {
		st := p.sh.Status()
		return !st.Connected && st.LagRecords == 100 && st.LagBytes > 0 && st.LagSeconds > 0
	})
	r = startStandby(t, sdir, p.sh.Addr())
	waitFor(t, "the restarted standby to catch up", caughtUp)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	got := standbyRecords(t, sdir)
	var want []string
	for i := range 500 {
		want = append(want, fmt.Sprintf("a%d", i))
	}
	for i := range 300 {
		want = append(want, fmt.Sprintf("b%d", i))
	}
	for i := range 100 {
		want = append(want, fmt.Sprintf("c%d", i))
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("standby log: %d records %v..., want %d", len(got), got[:min(5, len(got))], len(want))
	}
}

// max-availability: without the standby, a commit waits the net timeout,
// then the primary carries on unprotected and says so; once the standby is
// back and caught up, it is protected again.
func TestMaxAvailabilityGoesOnAndComesBack(t *testing.T) {
	p := startPrimary(t, t.TempDir(), MaxAvailability, 300*time.Millisecond)
	// waited: the commits that waited for the standby (the shipper records
	// each wait).
	waited := func() uint64 { return p.sh.cfg.Waits.Snapshot().Get(waits.StandbySyncAck).Count }
	start := time.Now()
	if _, err := p.log.Append(1, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Errorf("the first commit without a standby took %v, want about the net timeout", d)
	}
	if n := waited(); n != 1 {
		t.Errorf("the first commit without a standby: %d waits for it recorded, want 1", n)
	}
	start = time.Now()
	for i := range 50 {
		if _, err := p.log.Append(1, []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	if n := waited() - 1; n != 0 {
		t.Errorf("%d of 50 unprotected commits waited for the standby (50 took %v): they must not", n, time.Since(start))
	}
	if st := p.sh.Status(); st.Protected || st.LagRecords != 51 || st.Unprotected == 0 {
		t.Errorf("status unprotected: %+v", st)
	}
	sdir := t.TempDir()
	r := startStandby(t, sdir, p.sh.Addr())
	defer r.Close()
	waitFor(t, "the standby to catch up", func() bool { st := p.sh.Status(); return st.Connected && st.LagRecords == 0 })
	// The next flush sees it caught up: protected again.
	if _, err := p.log.Append(1, []byte("y")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "protected again", func() bool { return p.sh.Status().Protected })
}

// dialShipper dials a shipper and runs the dialling side's handshake.
func dialShipper(t *testing.T, addr string, auth *Auth) (net.Conn, *bufio.Reader, *bufio.Writer) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	br, bw := bufio.NewReader(c), bufio.NewWriter(c)
	if err := dialAuth(br, bw, auth); err != nil {
		c.Close()
		t.Fatal(err)
	}
	return c, br, bw
}

// fakePrimary accepts standbys, runs the accepting side's handshake (no
// secret), reads the opening frame, then does what do says.
func fakePrimary(t *testing.T, do func(w *bufio.Writer, c net.Conn)) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r, w := bufio.NewReader(c), bufio.NewWriter(c)
				if acceptAuth(r, w, nil) != nil {
					return
				}
				if _, _, err := readFrame(r, nil, anyKind); err != nil {
					return
				}
				do(w, c)
				time.Sleep(50 * time.Millisecond)
			}()
		}
	}()
	return lis.Addr().String()
}

func goodRecords() []byte {
	return encodeRecords(nil, []record{{pos: wal.Position{Segment: 1, Offset: 32}, typ: 1, payload: []byte("decision")}})
}

func TestBadStreamsAreRefusedAndNothingIsWritten(t *testing.T) {
	other := testID()
	other.Cluster[0] = 9
	older := testID()
	older.Epoch = 2
	frame := func(kind byte, payload []byte) []byte {
		var b bytes.Buffer
		w := bufio.NewWriter(&b)
		writeFrame(w, kind, payload)
		return b.Bytes()
	}
	welcomeOK := frame(kindWelcome, welcome{cluster: testID().Cluster, epoch: testID().Epoch}.encode())
	recs := frame(kindRecords, goodRecords())
	badCRC := bytes.Clone(recs)
	badCRC[len(badCRC)-1] ^= 1
	outOfOrder := frame(kindRecords, encodeRecords(nil, []record{
		{pos: wal.Position{Segment: 1, Offset: 64}, typ: 1, payload: []byte("a")},
		{pos: wal.Position{Segment: 1, Offset: 32}, typ: 1, payload: []byte("b")}}))
	cases := []struct {
		name, want string
		send       []byte
	}{
		{"garbage", "unknown frame kind", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")},
		{"truncated frame", "truncated frame", append(bytes.Clone(welcomeOK), recs[:len(recs)-3]...)},
		{"bad checksum", "checksum mismatch", append(bytes.Clone(welcomeOK), badCRC...)},
		{"records out of order", "out of order", append(bytes.Clone(welcomeOK), outOfOrder...)},
		{"unknown cluster", "belongs to cluster", append(frame(kindWelcome, welcome{cluster: other.Cluster, epoch: other.Epoch}.encode()), recs...)},
		{"older epoch", "older than this standby's epoch 3", append(frame(kindWelcome, welcome{cluster: older.Cluster, epoch: older.Epoch}.encode()), recs...)},
		{"refused", "refused by the peer: go away", frame(kindRefuse, []byte("go away"))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			addr := fakePrimary(t, func(w *bufio.Writer, c net.Conn) { c.Write(tc.send) })
			dir := t.TempDir()
			if err := SaveIdentity(dir, testID()); err != nil {
				t.Fatal(err)
			}
			r := startStandby(t, dir, addr)
			waitFor(t, "an error", func() bool { return r.LastError() != nil })
			err := r.LastError()
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
			r.Close()
			if got := standbyRecords(t, dir); len(got) != 0 {
				t.Errorf("the standby wrote %d records from a refused stream", len(got))
			}
			if id, _, _ := LoadIdentity(dir); id != testID() {
				t.Errorf("identity changed to %+v", id)
			}
		})
	}
}

// The primary refuses a standby of another cluster, one of a newer epoch
// (this primary is superseded), one ahead of it, and garbage; it goes on
// serving afterwards.
func TestShipperRefusesBadStandbys(t *testing.T) {
	p := startPrimary(t, t.TempDir(), MaxPerformance, time.Second)
	if _, err := p.log.Append(1, []byte("x")); err != nil {
		t.Fatal(err)
	}
	other := testID()
	other.Cluster[0] = 9
	newer := testID()
	newer.Epoch = 4
	cases := []struct {
		name, want string
		hello      []byte
	}{
		{"other cluster", "belongs to cluster", hello{cluster: other.Cluster, epoch: 1}.encode()},
		{"newer epoch", "is at epoch 4, this primary at epoch 3", hello{cluster: newer.Cluster, epoch: newer.Epoch}.encode()},
		{"ahead", "diverged", hello{cluster: testID().Cluster, epoch: 3, pos: wal.Position{Segment: 99}}.encode()},
		{"older epoch with records", "tandem reseed --data-dir", hello{cluster: testID().Cluster, epoch: 2, pos: wal.Position{Segment: 1, Offset: 32}}.encode()},
		{"bad version", "protocol version", append([]byte{7}, make([]byte, 40)...)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, br, w := dialShipper(t, p.sh.Addr(), nil)
			defer c.Close()
			writeFrame(w, kindHello, tc.hello)
			_, _, err := readFrame(br, nil, anyKind)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want a refusal saying %q", err, tc.want)
			}
		})
	}
	c, err := net.Dial("tcp", p.sh.Addr())
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("\x00\x01garbage that is no frame at all"))
	if _, err := io.ReadAll(c); err != nil {
		t.Log(err)
	}
	c.Close()
	r := startStandby(t, t.TempDir(), p.sh.Addr())
	defer r.Close()
	waitFor(t, "a good standby after the bad ones", func() bool { st := p.sh.Status(); return st.Connected && st.LagRecords == 0 })
}

func TestParseMode(t *testing.T) {
	for _, tc := range []struct{ tr, p, wantT, wantP, err string }{
		{"", "", "async", "max-performance", ""},
		{"sync", "", "sync", "max-availability", ""},
		{"", "max-protection", "sync", "max-protection", ""},
		{"async", "max-protection", "", "", "needs transport sync"},
		{"arch", "", "arch", "max-performance", ""},
		{"arch", "max-performance", "arch", "max-performance", ""},
		{"arch", "max-availability", "", "", "needs transport sync"},
		{"sync", "max-performance", "", "", "never waits for the standby"},
		{"tcp", "", "", "", "use sync or async, or arch"},
	} {
		tr, p, err := ParseMode(tc.tr, tc.p)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseMode(%q, %q) = %v, want error %q", tc.tr, tc.p, err, tc.err)
			}
			continue
		}
		if err != nil || string(tr) != tc.wantT || string(p) != tc.wantP {
			t.Errorf("ParseMode(%q, %q) = %s %s %v", tc.tr, tc.p, tr, p, err)
		}
	}
}

// A primary asks its peer for its epoch at start: a newer one of the same
// cluster fences it, with an error naming the peer; anything else does not.
func TestCheckPeerFences(t *testing.T) {
	p := startPrimary(t, t.TempDir(), MaxPerformance, time.Second) // epoch 3
	old := testID()
	old.Epoch = 2
	_, _, err := CheckPeer(p.sh.Addr(), old, nil, time.Second)
	if !errors.Is(err, ErrFenced) || !strings.Contains(err.Error(), p.sh.Addr()) || !strings.Contains(err.Error(), "epoch 3") {
		t.Fatalf("CheckPeer from epoch 2 = %v, want ErrFenced naming %s and epoch 3", err, p.sh.Addr())
	}
	if info, reached, err := CheckPeer(p.sh.Addr(), testID(), nil, time.Second); err != nil || !reached || !strings.Contains(info, "epoch 3") {
		t.Errorf("CheckPeer from the same epoch = %q, %v", info, err)
	}
	newer := testID()
	newer.Epoch = 4
	if _, reached, err := CheckPeer(p.sh.Addr(), newer, nil, time.Second); err != nil || !reached {
		t.Errorf("CheckPeer from a newer epoch = %v, want nil (the peer is the superseded one)", err)
	}
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := lis.Addr().String()
	lis.Close()
	if info, reached, err := CheckPeer(addr, old, nil, 200*time.Millisecond); err != nil || reached || !strings.Contains(info, "not reachable") {
		t.Errorf("CheckPeer of nobody = %q, %v", info, err)
	}
}

// standbyMarks reads the MARK records of a closed standby's log.
func standbyMarks(t *testing.T, dir string) []hello {
	t.Helper()
	var out []hello
	l, err := wal.Open(wal.Options{Dir: filepath.Join(dir, "log"), SegmentSize: 64 << 10, NoSync: true}, func(_ wal.Position, typ wal.Type, p []byte) error {
		if typ == RecMark {
			m, err := decodeHello(p)
			if err != nil {
				return err
			}
			out = append(out, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	return out
}

// A promoted standby's log holds its own MARK records; as a primary it must
// not ship them (replayed or written), and a standby must never write one
// it receives: after a crash it would take the foreign MARK's position for
// its own.
func TestMarksAreNeitherShippedNorWritten(t *testing.T) {
	foreign := hello{cluster: ClusterID{7}, epoch: 99, pos: wal.Position{Segment: 77, Offset: 77}}.encode()
	pdir := t.TempDir()
	p := startPrimary(t, pdir, MaxPerformance, time.Second)
	var want []string
	for i := range 200 {
		if _, err := p.log.Append(1, []byte(fmt.Sprintf("a%d", i))); err != nil {
			t.Fatal(err)
		}
		want = append(want, fmt.Sprintf("a%d", i))
		if _, err := p.log.AppendNoWait(RecMark, foreign); err != nil {
			t.Fatal(err)
		}
	}
	p.sh.Close()
	p.log.Close()
	p = startPrimary(t, pdir, MaxPerformance, time.Second) // replays the MARKs
	var last wal.Position
	for i := range 100 {
		if _, err := p.log.AppendNoWait(RecMark, foreign); err != nil {
			t.Fatal(err)
		}
		pos, err := p.log.Append(1, []byte(fmt.Sprintf("b%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, fmt.Sprintf("b%d", i))
		last = pos
	}
	if _, err := p.log.Append(RecMark, foreign); err != nil { // the last record: a MARK
		t.Fatal(err)
	}
	if st := p.sh.Status(); st.PrimaryAt != last.String() {
		t.Errorf("the primary's position is %s, want %s: the last record that is shipped", st.PrimaryAt, last)
	}
	sdir := t.TempDir()
	r := startStandby(t, sdir, p.sh.Addr())
	waitFor(t, "the standby to catch up", func() bool { return r.Position() == last && p.sh.Acked() == last })
	if st := p.sh.Status(); st.LagRecords != 0 || st.StandbyAt != last.String() {
		t.Errorf("status after catch-up: %+v", st)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if got := standbyRecords(t, sdir); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("standby records: %d, want %d (%v...)", len(got), len(want), got[:min(4, len(got))])
	}
	for _, m := range standbyMarks(t, sdir) {
		if m.epoch != testID().Epoch || m.cluster != testID().Cluster {
			t.Fatalf("the standby's log holds a foreign MARK: %+v", m)
		}
	}
	r = startStandby(t, sdir, "127.0.0.1:1")
	if got := r.Position(); got != last {
		t.Errorf("reopened standby at %s, want %s", got, last)
	}
	r.Close()
}

// A MARK in a RECORDS frame (a primary that ships them) is not written;
// the records around it are, and the standby's position is the frame's
// last.
func TestReceiverDoesNotWriteAShippedMark(t *testing.T) {
	foreign := hello{cluster: ClusterID{7}, epoch: 99, pos: wal.Position{Segment: 77, Offset: 77}}.encode()
	recs := encodeRecords(nil, []record{
		{pos: wal.Position{Segment: 1, Offset: 32}, typ: 1, payload: []byte("x")},
		{pos: wal.Position{Segment: 1, Offset: 64}, typ: RecMark, payload: foreign},
		{pos: wal.Position{Segment: 1, Offset: 128}, typ: 1, payload: []byte("y")},
		{pos: wal.Position{Segment: 1, Offset: 160}, typ: RecMark, payload: foreign},
	})
	addr := fakePrimary(t, func(w *bufio.Writer, c net.Conn) {
		writeFrame(w, kindWelcome, welcome{cluster: testID().Cluster, epoch: testID().Epoch}.encode())
		writeFrame(w, kindRecords, recs)
		readFrame(c, nil, anyKind) // the ACK
	})
	dir := t.TempDir()
	r := startStandby(t, dir, addr)
	want := wal.Position{Segment: 1, Offset: 160}
	waitFor(t, "the frame to be written", func() bool { return r.Position() == want })
	r.Close()
	if got := standbyRecords(t, dir); strings.Join(got, ",") != "x,y" {
		t.Errorf("standby records %q, want x,y", got)
	}
	for _, m := range standbyMarks(t, dir) {
		if m.epoch == 99 {
			t.Fatalf("the standby wrote the shipped MARK %+v", m)
		}
	}
}

// startPrimaryAt is startPrimary with another identity.
func startPrimaryAt(t *testing.T, dir string, id Identity) *primary {
	t.Helper()
	sh, err := NewShipper(ShipperConfig{Listen: "127.0.0.1:0", Transport: Async, Protection: MaxPerformance, NetTimeout: time.Second, Identity: id, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	l, err := wal.Open(wal.Options{Dir: dir, SegmentSize: 64 << 10, NoSync: true, OnWrite: sh.Written}, func(pos wal.Position, typ wal.Type, b []byte) error { sh.Replayed(pos, typ, b); return nil })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sh.Close(); l.Close() })
	return &primary{log: l, sh: sh}
}

// A standby whose log holds records refuses a primary of a newer epoch (a
// promoted coordinator: its positions are unrelated), and the primary
// refuses it too; both name tandem reseed. Once re-seeded (empty), it
// adopts the new epoch and copies the new primary's whole log.
func TestNewerEpochNeedsAReseed(t *testing.T) {
	p := startPrimary(t, t.TempDir(), MaxPerformance, time.Second) // epoch 3
	for i := range 50 {
		if _, err := p.log.Append(1, []byte(fmt.Sprintf("old%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	sdir := t.TempDir()
	r := startStandby(t, sdir, p.sh.Addr())
	waitFor(t, "the standby to catch up", func() bool { st := p.sh.Status(); return st.Connected && st.LagRecords == 0 })
	r.Close()
	oldPos := r.Position()

	// The primary side: a HELLO of an older epoch with a position.
	newer := testID()
	newer.Epoch = 4
	p4 := startPrimaryAt(t, t.TempDir(), newer)
	for i := range 20 {
		if _, err := p4.log.Append(1, []byte(fmt.Sprintf("new%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	r = startStandby(t, sdir, p4.sh.Addr())
	waitFor(t, "a refusal", func() bool { return r.LastError() != nil })
	err := r.LastError()
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "tandem reseed") || !strings.Contains(err.Error(), "older primary") {
		t.Errorf("the epoch-4 primary's refusal: %v", err)
	}
	r.Close()

	// The standby side: a WELCOME of a newer epoch to a standby with records.
	addr := fakePrimary(t, func(w *bufio.Writer, c net.Conn) {
		writeFrame(w, kindWelcome, welcome{cluster: newer.Cluster, epoch: newer.Epoch}.encode())
		writeFrame(w, kindRecords, encodeRecords(nil, []record{{pos: wal.Position{Segment: 9, Offset: 32}, typ: 1, payload: []byte("skipped?")}}))
	})
	r = startStandby(t, sdir, addr)
	waitFor(t, "a rejection", func() bool { return r.LastError() != nil })
	err = r.LastError()
	if !errors.Is(err, errRejected) || !strings.Contains(err.Error(), "newer than this standby's epoch 3") || !strings.Contains(err.Error(), ReseedCommand(sdir)) {
		t.Errorf("the standby's rejection: %v", err)
	}
	if got := r.Position(); got != oldPos {
		t.Errorf("position moved from %s to %s", oldPos, got)
	}
	if _, err := Reseed(sdir); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("Reseed of a running standby's directory = %v, want a refusal (in use)", err)
	}
	r.Close()
	if id, _, _ := LoadIdentity(sdir); id != testID() {
		t.Errorf("identity changed to %+v", id)
	}
	if got := standbyRecords(t, sdir); len(got) != 50 || got[0] != "old0" {
		t.Fatalf("the standby's log changed: %d records", len(got))
	}

	moved, err := Reseed(sdir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(filepath.Base(moved), "reseeded-") || filepath.Dir(moved) != sdir {
		t.Errorf("moved to %s", moved)
	}
	if got := standbyRecords(t, moved); len(got) != 50 {
		t.Errorf("the log moved aside holds %d records, want 50", len(got))
	}
	if id, ok, _ := LoadIdentity(moved); !ok || id != testID() {
		t.Errorf("the identity moved aside: %+v %v", id, ok)
	}
	if _, ok, _ := LoadIdentity(sdir); ok {
		t.Error("the identity is still in place")
	}
	r = startStandby(t, sdir, p4.sh.Addr())
	waitFor(t, "the re-seeded standby to catch up", func() bool { st := p4.sh.Status(); return st.Connected && st.LagRecords == 0 })
	r.Close()
	if id, _, _ := LoadIdentity(sdir); id != newer {
		t.Errorf("the re-seeded standby's identity is %+v, want %+v", id, newer)
	}
	if got := standbyRecords(t, sdir); len(got) != 20 || got[0] != "new0" {
		t.Errorf("the re-seeded standby holds %d records (%v...), want new0..new19", len(got), got[:min(3, len(got))])
	}
	if _, err := Reseed(t.TempDir()); err == nil || !strings.Contains(err.Error(), "nothing to re-seed") {
		t.Errorf("Reseed of an empty directory = %v", err)
	}
}

// An empty standby (it has an identity, no records yet) adopts a newer
// epoch of its cluster.
func TestEmptyStandbyAdoptsANewerEpoch(t *testing.T) {
	newer := testID()
	newer.Epoch = 7
	p := startPrimaryAt(t, t.TempDir(), newer)
	if _, err := p.log.Append(1, []byte("x")); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := SaveIdentity(dir, testID()); err != nil {
		t.Fatal(err)
	}
	r := startStandby(t, dir, p.sh.Addr())
	waitFor(t, "the standby to catch up", func() bool { st := p.sh.Status(); return st.Connected && st.LagRecords == 0 })
	r.Close()
	if id, _, _ := LoadIdentity(dir); id != newer {
		t.Errorf("identity %+v, want %+v", id, newer)
	}
}

// WaitStandby (what phase 2 waits on before touching a branch) returns only
// once the standby acknowledged the records durable at the call, in the
// async transport too; without a standby, async goes on after the net
// timeout (unprotected: promoting the standby then needs
// --accept-data-loss) and max-protection waits for as long as it is asked.
func TestWaitStandbyCoversTheDecisionInEveryTransport(t *testing.T) {
	p := startPrimary(t, t.TempDir(), MaxPerformance, time.Minute)
	r := startStandby(t, t.TempDir(), p.sh.Addr())
	defer r.Close()
	waitFor(t, "the standby connected", func() bool { return p.sh.Status().Connected })
	for i := range 20 {
		pos, err := p.log.Append(1, []byte(fmt.Sprint("decision ", i)))
		if err != nil {
			t.Fatal(err)
		}
		if err := p.sh.WaitStandby(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := p.sh.Acked(); got.Less(pos) {
			t.Fatalf("WaitStandby returned with the standby at %s, before the decision at %s", got, pos)
		}
	}

	alone := startPrimary(t, t.TempDir(), MaxPerformance, 200*time.Millisecond)
	if _, err := alone.log.Append(1, []byte("x")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := alone.sh.WaitStandby(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Logf("async without a standby: went on after %v", time.Since(start))
	if st := alone.sh.Status(); st.Unprotected == 0 {
		t.Errorf("async went on without its standby but does not say unprotected: %+v", st)
	}

	strict := startPrimary(t, t.TempDir(), MaxProtection, 100*time.Millisecond)
	go func() { _, _ = strict.log.Append(1, []byte("x")) }() // stalls: no standby
	waitFor(t, "the record written", func() bool { return strict.sh.Status().PrimaryAt != (wal.Position{}).String() })
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := strict.sh.WaitStandby(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("max-protection without a standby: WaitStandby = %v, want the context's deadline", err)
	}
}
