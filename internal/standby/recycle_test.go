package standby

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/internal/wal"
)

// decisions is a model of the coordinator's use of its log: C commits, E
// ends, K carries a still-unfinished decision forward at a checkpoint.
type decisions struct {
	live map[string]bool   // unfinished
	seg  map[string]uint64 // segment of the latest record of each unfinished one
}

func (d *decisions) apply(p string) {
	kind, g, _ := strings.Cut(p, " ")
	g, _, _ = strings.Cut(g, " ")
	switch kind {
	case "C", "K":
		d.live[g] = true
	case "E":
		delete(d.live, g)
	}
}

func (d *decisions) unfinished() []string {
	var out []string
	for g := range d.live {
		out = append(out, g)
	}
	slices.Sort(out)
	return out
}

func segFiles(t *testing.T, dir string) (live, free int) {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, "log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		switch filepath.Ext(e.Name()) {
		case ".wal":
			live++
		case ".free":
			free++
		}
	}
	return live, free
}

// The primary's checkpoints (carry the unfinished decisions forward, then
// Release and Released) make the standby release its own segments: its
// segment files stay bounded over thousands of records and a restart of
// the standby, and its log, replayed as a promoted standby's would be,
// still holds every unfinished decision.
func TestStandbyRecyclesItsLog(t *testing.T) {
	const segSize = 16 << 10
	pdir := t.TempDir()
	sh, err := NewShipper(ShipperConfig{Listen: "127.0.0.1:0", Transport: Async, Protection: MaxPerformance, NetTimeout: time.Second, Identity: testID(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close()
	l, err := wal.Open(wal.Options{Dir: pdir, SegmentSize: segSize, MaxSize: 8 * segSize, NoSync: true, OnWrite: sh.Written}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	sdir := t.TempDir()
	openStandby := func() *Receiver {
		r, err := OpenReceiver(ReceiverConfig{Primary: sh.Addr(), Dir: sdir, SegmentSize: segSize, LogSize: 8 * segSize, NoSync: true, NetTimeout: 2 * time.Second, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := openStandby()
	model := &decisions{live: map[string]bool{}, seg: map[string]uint64{}}
	pad := strings.Repeat("x", 60)
	var last wal.Position
	maxLive, maxFree, checkpoints, primaryLive := 0, 0, 0, 0
	checkpoint := func() {
		cur := l.Segment()
		for _, g := range model.unfinished() {
			if model.seg[g] < cur {
				pos, err := l.AppendNoWait(1, []byte("K "+g+" "+pad))
				if err != nil {
					t.Fatal(err)
				}
				model.seg[g] = pos.Segment // a lower bound, as in coord
			}
		}
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
		last = parsePos(t, sh.Status().PrimaryAt)
		if err := l.Release(cur); err != nil {
			t.Fatal(err)
		}
		sh.Released(cur)
		checkpoints++
	}
	const n = 6000
	for i := range n {
		g := fmt.Sprintf("g%05d", i)
		pos, err := l.Append(1, []byte("C "+g+" "+pad))
		if err != nil {
			t.Fatal(err)
		}
		model.apply("C " + g)
		model.seg[g] = pos.Segment
		last = pos
		if i%7 != 0 && i >= 20 { // one in 7 stays unfinished for good
			e := fmt.Sprintf("g%05d", i-20)
			if model.live[e] && (i-20)%7 != 0 {
				if last, err = l.Append(1, []byte("E "+e)); err != nil {
					t.Fatal(err)
				}
				model.apply("E " + e)
				delete(model.seg, e)
			}
		}
		if i%300 == 299 {
			checkpoint()
			waitFor(t, "the standby to catch up and act on the RELEASE notice", func() bool {
				r.tmu.Lock()
				defer r.tmu.Unlock()
				return r.acted == l.Usage().First
			})
			lv, fr := segFiles(t, sdir)
			maxLive, maxFree = max(maxLive, lv), max(maxFree, fr)
			u := l.Usage()
			primaryLive = max(primaryLive, int(u.Current-u.First+1))
		}
		if i == n/2 {
			if err := r.Close(); err != nil {
				t.Fatal(err)
			}
			r = openStandby()
		}
	}
	checkpoint()
	waitFor(t, "the standby to catch up", func() bool { return r.Position() == last })
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	pu := l.Usage()
	st := l.Stats()
	t.Logf("primary: %d rotations, at most %d live segments (now %d-%d); standby: at most %d live and %d free segment files over %d checkpoints",
		st.Rotations, primaryLive, pu.First, pu.Current, maxLive, maxFree, checkpoints)
	if st.Rotations < 50 {
		t.Fatalf("the primary rotated only %d times: the test does not exercise recycling", st.Rotations)
	}
	// The standby keeps about as many live segments as the primary (its
	// MARKs take a little room, and its segments do not line up with the
	// primary's), and released files only while they fit in LogSize.
	if maxLive > primaryLive+2 || maxFree > 8 {
		t.Errorf("the standby's log grew to %d live and %d free segment files (the primary's: at most %d live)", maxLive, maxFree, primaryLive)
	}
	// Replay the standby's log as a promoted standby's coordinator would.
	promoted := &decisions{live: map[string]bool{}}
	lg, err := wal.Open(wal.Options{Dir: filepath.Join(sdir, "log"), SegmentSize: segSize, NoSync: true}, func(_ wal.Position, typ wal.Type, p []byte) error {
		if typ != RecMark {
			promoted.apply(string(p))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	lg.Close()
	want := model.unfinished()
	if got := promoted.unfinished(); !slices.Equal(got, want) {
		t.Fatalf("the standby's log replays %d unfinished decisions, want %d", len(got), len(want))
	}
	if len(want) < n/7 {
		t.Fatalf("only %d unfinished decisions: the test checks too little", len(want))
	}
	r, err = OpenReceiver(ReceiverConfig{Primary: "127.0.0.1:1", Dir: sdir, SegmentSize: segSize, NoSync: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got := r.Position(); got != last {
		t.Errorf("the reopened standby is at %s, want %s", got, last)
	}
}

func parsePos(t *testing.T, s string) wal.Position {
	t.Helper()
	var p wal.Position
	if _, err := fmt.Sscanf(s, "%d:%d", &p.Segment, &p.Offset); err != nil {
		t.Fatalf("position %q: %v", s, err)
	}
	return p
}

// The RELEASE notice comes after the records up to its position (sync and
// async), so that a standby can act on it as soon as it arrives.
func TestReleaseNoticeFollowsItsRecords(t *testing.T) {
	p := startPrimary(t, t.TempDir(), MaxPerformance, time.Second)
	for i := range 2000 {
		if _, err := p.log.AppendNoWait(1, []byte(fmt.Sprintf("r%d %s", i, strings.Repeat("x", 60)))); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.log.Sync(); err != nil {
		t.Fatal(err)
	}
	cur := p.log.Segment()
	if cur < 2 {
		t.Fatalf("the log did not rotate (segment %d)", cur)
	}
	if err := p.log.Release(cur); err != nil {
		t.Fatal(err)
	}
	p.sh.Released(cur)
	at := parsePos(t, p.sh.Status().PrimaryAt)
	c, br, w := dialShipper(t, p.sh.Addr(), nil)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := writeFrame(w, kindHello, hello{cluster: testID().Cluster, epoch: testID().Epoch}.encode()); err != nil {
		t.Fatal(err)
	}
	if kind, _, err := readFrame(br, nil, anyKind); err != nil || kind != kindWelcome {
		t.Fatalf("WELCOME: %d %v", kind, err)
	}
	var have wal.Position
	for {
		kind, b, err := readFrame(br, nil, anyKind)
		if err != nil {
			t.Fatal(err)
		}
		if kind == kindRelease {
			n, err := decodeRelease(b)
			if err != nil {
				t.Fatal(err)
			}
			if n.before != cur || n.at != at {
				t.Errorf("RELEASE %+v, want before %d at %s", n, cur, at)
			}
			if have.Less(n.at) {
				t.Fatalf("RELEASE (valid at %s) came when the records sent reach only %s", n.at, have)
			}
			return
		}
		if kind == kindState {
			continue
		}
		recs, err := decodeRecords(b, have)
		if err != nil {
			t.Fatal(err)
		}
		have = recs[len(recs)-1].pos
		writeFrame(w, kindAck, encodePos(have))
	}
}
