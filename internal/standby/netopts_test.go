package standby

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/internal/wal"
)

func TestNetOptionsAreChecked(t *testing.T) {
	base := ShipperConfig{Listen: "127.0.0.1:0", Transport: Async, Protection: MaxPerformance, Identity: testID(), Logger: quiet}
	for _, tc := range []struct {
		name string
		mod  func(*ShipperConfig)
		want string
	}{
		{"MaxSend past MaxFrame", func(c *ShipperConfig) { c.MaxSend = MaxFrame + 1 }, "MaxSend"},
		{"negative MaxSend", func(c *ShipperConfig) { c.MaxSend = -1 }, "MaxSend"},
		{"negative buffer", func(c *ShipperConfig) { c.SendBuffer = -1 }, "socket buffer"},
	} {
		cfg := base
		tc.mod(&cfg)
		sh, err := NewShipper(cfg)
		if err == nil {
			sh.Close()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: NewShipper = %v, want an error about %s", tc.name, err, tc.want)
		}
	}
	if _, err := OpenReceiver(ReceiverConfig{Primary: "127.0.0.1:1", Dir: t.TempDir(), NetOptions: NetOptions{ReceiveBuffer: -5}}); err == nil {
		t.Error("OpenReceiver took a negative receive buffer")
	}
}

// A catching-up standby gets its backlog in RECORDS frames of at most
// MaxSend bytes (one record per frame at least), every record once, in
// order.
func TestMaxSendBoundsFrames(t *testing.T) {
	const maxSend = 4096
	sh, err := NewShipper(ShipperConfig{Listen: "127.0.0.1:0", Transport: Async, Protection: MaxPerformance, Identity: testID(), Logger: quiet, MaxSend: maxSend})
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close()
	l, err := wal.Open(wal.Options{Dir: t.TempDir(), SegmentSize: 64 << 10, NoSync: true, OnWrite: sh.Written}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	big := strings.Repeat("b", 3*maxSend)
	var want []string
	for i := range 300 {
		p := fmt.Sprintf("r%03d %s", i, strings.Repeat("x", 100))
		if i == 150 {
			p = big // larger than MaxSend: a frame of its own
		}
		if _, err := l.Append(1, []byte(p)); err != nil {
			t.Fatal(err)
		}
		want = append(want, p)
	}
	c, br, w := dialShipper(t, sh.Addr(), nil)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := writeFrame(w, kindHello, hello{cluster: testID().Cluster, epoch: testID().Epoch}.encode()); err != nil {
		t.Fatal(err)
	}
	if kind, _, err := readFrame(br, nil, anyKind); err != nil || kind != kindWelcome {
		t.Fatalf("WELCOME: kind %d, %v", kind, err)
	}
	var got []string
	var at wal.Position
	frames := 0
	for len(got) < len(want) {
		kind, b, err := readFrame(br, nil, anyKind)
		if err != nil {
			t.Fatal(err)
		}
		if kind != kindRecords {
			continue
		}
		recs, err := decodeRecords(b, at)
		if err != nil {
			t.Fatal(err)
		}
		frames++
		if len(b) > maxSend && len(recs) > 1 {
			t.Errorf("a RECORDS frame of %d bytes with %d records: MaxSend is %d", len(b), len(recs), maxSend)
		}
		for _, r := range recs {
			got = append(got, string(r.payload))
		}
		at = recs[len(recs)-1].pos
		if err := writeFrame(w, kindAck, encodePos(at)); err != nil {
			t.Fatal(err)
		}
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("records differ: got %d, want %d", len(got), len(want))
	}
	if frames < 300*120/maxSend {
		t.Errorf("%d frames for %d bytes: MaxSend %d not used", frames, 300*120, maxSend)
	}
}
