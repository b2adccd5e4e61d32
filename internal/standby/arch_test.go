package standby

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/internal/wal"
)

const archSegSize = 8 << 10

// archPrimary is a decision log whose writes go through an arch Shipper.
func archPrimary(t *testing.T, conns int) *primary {
	t.Helper()
	sh, err := NewShipper(ShipperConfig{Listen: "127.0.0.1:0", Transport: Arch, Protection: MaxPerformance, NetTimeout: 2 * time.Second,
		Identity: testID(), Logger: quiet, MaxConnections: conns, MaxSend: 2 << 10})
	if err != nil {
		t.Fatal(err)
	}
	l, err := wal.Open(wal.Options{Dir: t.TempDir(), SegmentSize: archSegSize, NoSync: true, OnWrite: sh.Written}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sh.Close(); l.Close() })
	return &primary{log: l, sh: sh}
}

// appendN appends n records and returns their payloads and positions.
func (p *primary) appendN(t *testing.T, prefix string, n int) ([]string, []wal.Position) {
	t.Helper()
	var out []string
	var pos []wal.Position
	for i := range n {
		s := fmt.Sprintf("%s%05d %s", prefix, i, strings.Repeat("p", 100))
		at, err := p.log.Append(1, []byte(s))
		if err != nil {
			t.Fatal(err)
		}
		out, pos = append(out, s), append(pos, at)
	}
	return out, pos
}

// lastBefore is the last of pos in a segment before seg.
func lastBefore(pos []wal.Position, seg uint64) (wal.Position, int) {
	var last wal.Position
	n := 0
	for _, p := range pos {
		if p.Segment < seg {
			last, n = p, n+1
		}
	}
	return last, n
}

// Only completed segments are shipped: the live segment's records reach
// the standby once the primary's log has moved past it; Status counts
// them as lag meanwhile.
func TestArchShipsOnlyCompletedSegments(t *testing.T) {
	p := archPrimary(t, 1)
	want, pos := p.appendN(t, "a", 300) // about 4 segments
	live := p.log.Segment()
	done, n := lastBefore(pos, live)
	if live < 3 || n == len(want) {
		t.Fatalf("the test needs a few completed segments and a live one: live %d, %d of %d records completed", live, n, len(want))
	}
	sdir := t.TempDir()
	r := startStandby(t, sdir, p.sh.Addr())
	waitFor(t, "the completed segments on the standby", func() bool { return r.Position() == done && p.sh.Acked() == done })
	time.Sleep(200 * time.Millisecond) // nothing more comes: the rest is in the live segment
	if got := r.Position(); got != done {
		t.Fatalf("the standby is at %s, past the completed segments (%s): it got records of the live segment %d", got, done, live)
	}
	st := p.sh.Status()
	if st.LagRecords != len(want)-n || st.LagBytes <= 0 || st.LagSeconds <= 0 || !st.Connected || st.Connections != 1 || st.Transport != "arch" {
		t.Errorf("status with the live segment unshipped (%d records): %+v", len(want)-n, st)
	}
	// The log moves on: the segment that was live is complete.
	more, pos2 := p.appendN(t, "b", 150)
	want = append(want, more...)
	pos = append(pos, pos2...)
	done2, n2 := lastBefore(pos, p.log.Segment())
	if n2 <= len(want)-len(more) {
		t.Fatalf("the log did not move past segment %d", live)
	}
	waitFor(t, "the next completed segments", func() bool { return r.Position() == done2 })
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if got := standbyRecords(t, sdir); strings.Join(got, ",") != strings.Join(want[:n2], ",") {
		t.Fatalf("the standby holds %d records, want the %d of the completed segments, in order", len(got), n2)
	}
}

// linkProxy forwards TCP connections to target; each connection's bytes
// from the primary are counted, and may be slowed (delay per 4 KiB) or cut
// after a number of bytes.
type linkProxy struct {
	lis    net.Listener
	target string
	mu     sync.Mutex
	down   []*atomic.Int64 // bytes forwarded to the standby, by connection in accept order
	delay  func(i int) time.Duration
	cut    func(i int) int64 // close connection i after this many bytes (0: never)
}

func newLinkProxy(t *testing.T, target string, delay func(i int) time.Duration, cut func(i int) int64) *linkProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if cut == nil {
		cut = func(int) int64 { return 0 }
	}
	p := &linkProxy{lis: lis, target: target, delay: delay, cut: cut}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			i := len(p.down)
			n := &atomic.Int64{}
			p.down = append(p.down, n)
			delay, cut := p.delay(i), p.cut(i)
			p.mu.Unlock()
			go func() { io.Copy(u, c); u.Close(); c.Close() }()
			go func() {
				defer c.Close()
				defer u.Close()
				buf := make([]byte, 4<<10)
				for {
					k, err := u.Read(buf)
					if k > 0 {
						if cut > 0 && n.Load()+int64(k) > cut {
							k = int(cut - n.Load())
							c.Write(buf[:k])
							n.Add(int64(k))
							return
						}
						time.Sleep(delay)
						if _, err := c.Write(buf[:k]); err != nil {
							return
						}
						n.Add(int64(k))
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return p
}

func (p *linkProxy) counts() []int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]int64, len(p.down))
	for i, n := range p.down {
		out[i] = n.Load()
	}
	return out
}

// archCatchUp ships a backlog of about 40 segments to a standby through
// prx and checks that the standby holds exactly the completed segments'
// records, in order.
func archCatchUp(t *testing.T, p *primary, prx func(addr string) string) (*Receiver, string) {
	t.Helper()
	want, pos := p.appendN(t, "r", 3000)
	done, n := lastBefore(pos, p.log.Segment())
	sdir := t.TempDir()
	r := startStandby(t, sdir, prx(p.sh.Addr()))
	waitFor(t, "the standby to catch up", func() bool { return r.Position() == done && p.sh.Acked() == done })
	st := p.sh.Status()
	if st.LagRecords != len(want)-n {
		t.Errorf("after catch-up the primary counts %d records of lag, want %d (the live segment's)", st.LagRecords, len(want)-n)
	}
	r.Close()
	if got := standbyRecords(t, sdir); strings.Join(got, ",") != strings.Join(want[:n], ",") {
		t.Fatalf("the standby holds %d records, want the %d of the completed segments, in order, once each", len(got), n)
	}
	return r, sdir
}

// untilExercised runs an arch scenario until it exercised what the test
// checks (which connection carries which segment depends on scheduling: on
// a loaded machine the first connection may send the whole backlog before
// the others join), at most 5 times. run returns "" when it was exercised,
// else what happened instead.
func untilExercised(t *testing.T, run func() string) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		why := run()
		if why == "" {
			return
		}
		if attempt == 5 {
			t.Fatalf("in %d runs the scenario never happened: %s", attempt, why)
		}
		t.Logf("run %d: %s; again", attempt, why)
	}
}

// Every one of the MaxConnections connections carries segments.
func TestArchConnectionsAllCarryData(t *testing.T) {
	untilExercised(t, func() string {
		p := archPrimary(t, 4)
		var prx *linkProxy
		archCatchUp(t, p, func(addr string) string {
			// The first connection slower: the others have joined
			// before it could send the whole backlog alone.
			prx = newLinkProxy(t, addr, func(i int) time.Duration {
				if i == 0 {
					return 10 * time.Millisecond
				}
				return 2 * time.Millisecond
			}, nil)
			return prx.lis.Addr().String()
		})
		c := prx.counts()
		if len(c) < 4 {
			t.Fatalf("the standby opened %d connections, want 4", len(c))
		}
		for i, n := range c[:4] {
			if n < archSegSize/2 {
				return fmt.Sprintf("connection %d carried %d bytes, less than a segment (all: %v)", i, n, c)
			}
		}
		return ""
	})
}

// Segments that arrive out of order (the first connection is slow) are
// held and applied in order.
func TestArchOutOfOrderArrivalIsAppliedInOrder(t *testing.T) {
	untilExercised(t, func() string {
		p := archPrimary(t, 3)
		var prx *linkProxy
		r, _ := archCatchUp(t, p, func(addr string) string {
			prx = newLinkProxy(t, addr, func(i int) time.Duration {
				if i == 0 {
					return 30 * time.Millisecond
				}
				return 0
			}, nil)
			return prx.lis.Addr().String()
		})
		r.mu.Lock()
		ahead := r.maxAhead
		r.mu.Unlock()
		if ahead == 0 {
			return fmt.Sprintf("no segment arrived ahead of its turn (connections: %v): reordering was not tested", prx.counts())
		}
		return ""
	})
}

// A connection dropped in the middle of a segment: the segment is sent
// again (on another connection, or on the same one dialled again), and the
// standby ends up with every record once, in order. The first connection
// dropping ends the session; the next one goes on from the standby's
// position.
func TestArchDroppedConnectionIsRecovered(t *testing.T) {
	for _, tc := range []struct {
		name string
		conn int
	}{{"a further connection", 1}, {"the first connection", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			// In the middle of the connection's first segment.
			const cut = archSegSize / 2
			var c []int64
			untilExercised(t, func() string {
				p := archPrimary(t, 3)
				var prx *linkProxy
				archCatchUp(t, p, func(addr string) string {
					prx = newLinkProxy(t, addr, func(int) time.Duration { return time.Millisecond }, func(i int) int64 {
						if i == tc.conn {
							return cut
						}
						return 0
					})
					return prx.lis.Addr().String()
				})
				if c = prx.counts(); len(c) <= tc.conn || c[tc.conn] != cut {
					return fmt.Sprintf("connections carried %v bytes: connection %d was not cut at %d", c, tc.conn, cut)
				}
				return ""
			})
			if tc.conn == 0 && len(c) < 4 {
				t.Errorf("connections: %v: want a new session after the first connection was cut", c)
			}
		})
	}
}

// Under arch, a decision waiting for the standby (WaitStandby, before phase
// 2) makes the shipper switch the primary's log segment after ArchLag, so
// that its segment is shipped: the wait ends with the standby holding it,
// long before the net timeout would let the primary go on unprotected.
func TestArchLagSwitchesTheSegmentForAWaitingDecision(t *testing.T) {
	sh, err := NewShipper(ShipperConfig{Listen: "127.0.0.1:0", Transport: Arch, Protection: MaxPerformance, NetTimeout: 5 * time.Second,
		ArchLag: 100 * time.Millisecond, Identity: testID(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	l, err := wal.Open(wal.Options{Dir: t.TempDir(), SegmentSize: archSegSize, NoSync: true, OnWrite: sh.Written}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sh.Close(); l.Close() })
	switches := 0
	sh.SetSwitcher(func() error {
		switches++
		if _, err := l.Switch(); err != nil {
			return err
		}
		_, err := l.Append(1, []byte("after a switch"))
		return err
	})
	r := startStandby(t, t.TempDir(), sh.Addr())
	defer r.Close()
	waitFor(t, "the standby connected", func() bool { return sh.Status().Connected })
	pos, err := l.Append(1, []byte("decision"))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sh.WaitStandby(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("the decision's segment was shipped after %v (%d switches)", time.Since(start).Round(time.Millisecond), switches)
	if got := sh.Acked(); got.Less(pos) {
		t.Fatalf("WaitStandby returned with the standby at %s, before the decision at %s", got, pos)
	}
	if st := sh.Status(); st.Unprotected != 0 {
		t.Errorf("the wait ended by the net timeout (unprotected), not by a segment switch: %+v", st)
	}
}
