package coord

import (
	"bytes"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/xid"
)

func gtridOf(t testing.TB, s string) xid.GTRID {
	t.Helper()
	g, err := xid.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// sameDecision compares two decisions: times by instant, no branches equal to nil.
func sameDecision(a, b decision) bool {
	return a.gtrid == b.gtrid && a.decidedAt.Equal(b.decidedAt) && a.reason == b.reason &&
		len(a.rms) == len(b.rms) && (len(a.rms) == 0 || slices.Equal(a.rms, b.rms))
}

func TestDecisionRoundTrip(t *testing.T) {
	g := gtridOf(t, "0000019a8f3c2b1e5d0c7a9b3e41f2aa")
	many := make([]string, MaxBranches)
	for i := range many {
		many[i] = "rm-" + strings.Repeat("x", i%29)
	}
	tests := []struct {
		name string
		d    decision
	}{
		{"commit, no branches", decision{gtrid: g, decidedAt: time.Unix(1700000000, 123456789)}},
		{"commit, one branch", decision{gtrid: g, decidedAt: time.Unix(1700000000, 1), rms: []string{"pg"}}},
		{"commit, two branches", decision{gtrid: g, decidedAt: time.Unix(1700000000, 0), rms: []string{"pg", "maria"}}},
		{"abort requested", decision{gtrid: g, decidedAt: time.Unix(1, 0), reason: AbortRequested, rms: []string{"maria"}}},
		{"abort orphan", decision{gtrid: g, decidedAt: time.Unix(0, 0), reason: AbortOrphan, rms: []string{"a", "b", "c"}}},
		{"abort resolved, no branches", decision{gtrid: g, decidedAt: time.Unix(2000000000, 999999999), reason: AbortResolved}},
		{"abort too old", decision{gtrid: g, decidedAt: time.Unix(-5, 0), reason: AbortTooOld, rms: []string{strings.Repeat("z", xid.MaxRMNameLen)}}},
		{"max branches", decision{gtrid: xid.New(), decidedAt: time.Now(), rms: many}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.d.encode()
			want := 27
			for _, r := range tc.d.rms {
				want += 1 + len(r)
			}
			if len(p) != want {
				t.Errorf("encoded %d bytes, want %d", len(p), want)
			}
			got, err := decodeDecision(p)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if !sameDecision(got, tc.d) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, tc.d)
			}
		})
	}
}

// TestDecisionLayout pins the on-disk bytes: changing them needs a new recordVersion.
func TestDecisionLayout(t *testing.T) {
	d := decision{
		gtrid:     gtridOf(t, "0000019a8f3c2b1e5d0c7a9b3e41f2aa"),
		decidedAt: time.Unix(0, 0x0102030405060708),
		reason:    AbortOrphan,
		rms:       []string{"pg", "maria"},
	}
	want := "01" + "0000019a8f3c2b1e5d0c7a9b3e41f2aa" + "0807060504030201" + "02" + "02" +
		"02" + hex.EncodeToString([]byte("pg")) + "05" + hex.EncodeToString([]byte("maria"))
	if got := hex.EncodeToString(d.encode()); got != want {
		t.Fatalf("encode:\n got %s\nwant %s", got, want)
	}
	end := encodeEnd(d.gtrid)
	if got, want := hex.EncodeToString(end), "01"+"0000019a8f3c2b1e5d0c7a9b3e41f2aa"; got != want {
		t.Fatalf("encodeEnd:\n got %s\nwant %s", got, want)
	}
}

func TestDecodeDecisionRejects(t *testing.T) {
	valid := (&decision{gtrid: xid.New(), decidedAt: time.Now(), reason: AbortRequested, rms: []string{"pg", "maria"}}).encode()
	// Every proper prefix is a truncated record.
	for n := 0; n < len(valid); n++ {
		if _, err := decodeDecision(valid[:n]); !errors.Is(err, errBadRecord) {
			t.Errorf("decode of the first %d of %d bytes: %v, want errBadRecord", n, len(valid), err)
		}
	}
	bad := map[string][]byte{
		"trailing byte":          append(slices.Clone(valid), 0),
		"trailing branch":        append(slices.Clone(valid), 2, 'p', 'g'),
		"n larger than branches": func() []byte { p := slices.Clone(valid); p[26]++; return p }(),
		"name longer than rest":  func() []byte { p := slices.Clone(valid); p[27] = 200; return p }(),
		"n smaller than content": func() []byte { p := slices.Clone(valid); p[26]--; return p }(),
		"oversized":              append(slices.Clone(valid), make([]byte, 1<<16)...),
	}
	for name, p := range bad {
		if _, err := decodeDecision(p); !errors.Is(err, errBadRecord) {
			t.Errorf("%s: %v, want errBadRecord", name, err)
		}
	}
	for _, v := range []byte{0, recordVersion + 1, 0xff} {
		p := slices.Clone(valid)
		p[0] = v
		_, err := decodeDecision(p)
		if !errors.Is(err, errBadRecord) || !strings.Contains(err.Error(), "version") {
			t.Errorf("payload version %d: %v, want errBadRecord naming the version", v, err)
		}
	}
}

func TestEndRoundTripAndRejects(t *testing.T) {
	g := xid.New()
	p := encodeEnd(g)
	got, err := decodeEnd(p)
	if err != nil || got != g {
		t.Fatalf("decodeEnd(encodeEnd(%s)) = %s, %v", g, got, err)
	}
	bad := map[string][]byte{
		"empty":     nil,
		"truncated": p[:16],
		"oversized": append(slices.Clone(p), 0),
		"newer":     append([]byte{recordVersion + 1}, p[1:]...),
		"version 0": append([]byte{0}, p[1:]...),
		"decision":  (&decision{gtrid: g, decidedAt: time.Now()}).encode(),
	}
	for name, b := range bad {
		if _, err := decodeEnd(b); !errors.Is(err, errBadRecord) {
			t.Errorf("decodeEnd %s: %v, want errBadRecord", name, err)
		}
	}
}

// FuzzDecodeDecision: the decoder never panics, rejects with errBadRecord,
// and what it accepts is exactly what the encoder writes for the decoded
// decision (so decode(encode(d)) == d for every decision it can produce).
func FuzzDecodeDecision(f *testing.F) {
	g := gtridOf(f, "0000019a8f3c2b1e5d0c7a9b3e41f2aa")
	for _, d := range []decision{
		{gtrid: g, decidedAt: time.Unix(0, 0)},
		{gtrid: g, decidedAt: time.Unix(1700000000, 5), rms: []string{"pg"}},
		{gtrid: g, decidedAt: time.Unix(1700000000, 5), reason: AbortTooOld, rms: []string{"pg", "maria", "x"}},
	} {
		f.Add(d.encode())
	}
	f.Add([]byte{})
	f.Add([]byte{recordVersion})
	f.Add(append([]byte{recordVersion + 1}, make([]byte, 26)...))
	f.Add(append(append([]byte{recordVersion}, make([]byte, 25)...), 3, 1, 'a'))

	f.Fuzz(func(t *testing.T, p []byte) {
		d, err := decodeDecision(p)
		if err != nil {
			if !errors.Is(err, errBadRecord) {
				t.Fatalf("error does not match errBadRecord: %v", err)
			}
			return
		}
		enc := d.encode()
		if !bytes.Equal(enc, p) {
			t.Fatalf("accepted bytes are not the encoding of what was decoded:\n in %x\nout %x", p, enc)
		}
		again, err := decodeDecision(enc)
		if err != nil {
			t.Fatalf("decode(encode(d)): %v", err)
		}
		if !sameDecision(again, d) {
			t.Fatalf("decode(encode(d)) = %+v, want %+v", again, d)
		}
		if g, err := decodeEnd(p); err == nil {
			t.Fatalf("a %d-byte decision also decodes as END %s", len(p), g)
		}
	})
}

// FuzzDecodeEnd: no panic; accepted exactly when the payload is an encoded END.
func FuzzDecodeEnd(f *testing.F) {
	f.Add(encodeEnd(gtridOf(f, "0000019a8f3c2b1e5d0c7a9b3e41f2aa")))
	f.Add([]byte{})
	f.Add([]byte{recordVersion + 1, 1})
	f.Fuzz(func(t *testing.T, p []byte) {
		g, err := decodeEnd(p)
		if err != nil {
			if !errors.Is(err, errBadRecord) {
				t.Fatalf("error does not match errBadRecord: %v", err)
			}
			return
		}
		if !bytes.Equal(encodeEnd(g), p) {
			t.Fatalf("accepted %x, which is not encodeEnd(%s)", p, g)
		}
	})
}

func sameCarried(a, b carried) bool {
	return sameDecision(a.decision, b.decision) && a.outcome == b.outcome && a.ended == b.ended &&
		(!a.ended || a.endedAt.Equal(b.endedAt))
}

func TestCarriedRoundTrip(t *testing.T) {
	g := gtridOf(t, "0000019a8f3c2b1e5d0c7a9b3e41f2aa")
	for _, c := range []carried{
		{decision: decision{gtrid: g, decidedAt: time.Unix(1700000000, 7), rms: []string{"pg", "maria"}}, outcome: Committed},
		{decision: decision{gtrid: g, decidedAt: time.Unix(1700000000, 7)}, outcome: Committed, ended: true, endedAt: time.Unix(1700000001, 9)},
		{decision: decision{gtrid: g, decidedAt: time.Unix(5, 0), reason: AbortOrphan, rms: []string{"maria"}}, outcome: Aborted},
		{decision: decision{gtrid: g, decidedAt: time.Unix(5, 0), reason: AbortRequested}, outcome: Aborted, ended: true, endedAt: time.Unix(6, 0)},
	} {
		p := c.encode()
		if want := 8 + int64(len(p)+7)&^7; carriedSize(c.rms) != want {
			t.Errorf("%+v: encoded %d bytes, carriedSize says %d with header and padding", c, len(p), carriedSize(c.rms))
		}
		got, err := decodeCarried(p)
		if err != nil || !sameCarried(got, c) {
			t.Fatalf("round trip of %+v: %+v, %v", c, got, err)
		}
	}
}

func TestDecodeCarriedRejects(t *testing.T) {
	good := (&carried{decision: decision{gtrid: xid.New(), decidedAt: time.Unix(1, 0), rms: []string{"pg"}}, outcome: Committed}).encode()
	mod := func(f func(p []byte) []byte) []byte { return f(bytes.Clone(good)) }
	for _, tc := range []struct {
		name, want string
		p          []byte
	}{
		{"empty", "at least", nil},
		{"newer version", "newer Tandem", mod(func(p []byte) []byte { p[0] = checkpointVersion + 1; return p })},
		{"outcome 0", "outcome 0", mod(func(p []byte) []byte { p[17] = 0; return p })},
		{"unknown flag", "unknown flags", mod(func(p []byte) []byte { p[18] = 2; return p })},
		{"end time without flag", "no ended flag", mod(func(p []byte) []byte { p[27] = 1; return p })},
		{"truncated branch", "truncated", good[:len(good)-1]},
		{"trailing", "trailing", append(bytes.Clone(good), 0)},
	} {
		_, err := decodeCarried(tc.p)
		if !errors.Is(err, errBadRecord) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want errBadRecord saying %q", tc.name, err, tc.want)
		}
	}
}

// FuzzDecodeCarried: no panic; what is accepted re-encodes to the same bytes.
func FuzzDecodeCarried(f *testing.F) {
	g := gtridOf(f, "0000019a8f3c2b1e5d0c7a9b3e41f2aa")
	f.Add((&carried{decision: decision{gtrid: g, decidedAt: time.Unix(9, 0), rms: []string{"pg"}}, outcome: Committed}).encode())
	f.Add((&carried{decision: decision{gtrid: g, decidedAt: time.Unix(9, 0)}, outcome: Aborted, ended: true, endedAt: time.Unix(10, 0)}).encode())
	f.Add([]byte{checkpointVersion})
	f.Fuzz(func(t *testing.T, p []byte) {
		c, err := decodeCarried(p)
		if err != nil {
			if !errors.Is(err, errBadRecord) {
				t.Fatalf("error does not match errBadRecord: %v", err)
			}
			return
		}
		if enc := c.encode(); !bytes.Equal(enc, p) {
			t.Fatalf("accepted bytes are not the encoding of what was decoded:\n in %x\nout %x", p, enc)
		}
	})
}
