package server

import (
	"bytes"
	"encoding/hex"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/internal/config"
	"github.com/tandem-tx/tandem/internal/standby"
	"github.com/tandem-tx/tandem/internal/testport"
)

// syncBuffer is a log destination tests read while the server writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func freeAddr(t *testing.T) string { return testport.Addr(t) }

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var pairAuth = &standby.Auth{Secret: []byte("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")}

// A claim of a newer epoch, even from a peer that holds the secret, does
// not fence a primary whose --peer (its running standby, which answers
// PROBEs with its own epoch) contradicts it; a claim from a peer without
// the secret is not even heard.
func TestForgedProbeLeavesThePrimaryServing(t *testing.T) {
	rms := map[string]config.RM{"pg": {Driver: "postgres", DSN: "postgres://u:p@127.0.0.1:1/db"}}
	listenA, listenB := freeAddr(t), freeAddr(t)
	var logA syncBuffer
	a, err := Start(config.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), RMs: rms},
		Options{Logger: slog.New(slog.NewTextHandler(&logA, nil)), NoSync: true,
			Standby: StandbyOptions{Listen: listenA, Peer: listenB, Auth: pairAuth, NetTimeout: 2 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop(time.Second)
	b, err := Start(config.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), RMs: rms},
		Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), NoSync: true,
			Standby: StandbyOptions{Of: listenA, Listen: listenB, Peer: listenA, Auth: pairAuth, NetTimeout: 2 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Stop(time.Second)
	waitUntil(t, "the standby connected", func() bool { st, _ := a.StandbyStatus(); return st.Connected })
	st, _ := a.StandbyStatus()
	var id standby.Identity
	copy(id.Cluster[:], mustHex(t, st.Cluster))
	id.Epoch = st.Epoch + 1

	wrong := &standby.Auth{Secret: bytes.Repeat([]byte("x"), 64)}
	if _, reached, _ := standby.CheckPeer(listenA, id, wrong, time.Second); reached {
		t.Errorf("a probe with a wrong secret reached the primary")
	}
	if _, reached, err := standby.CheckPeer(listenA, id, pairAuth, time.Second); !reached || err != nil {
		t.Fatalf("the forged authenticated probe: reached %v, %v", reached, err)
	}
	waitUntil(t, "the primary to weigh the claim", func() bool {
		l := logA.String()
		return strings.Contains(l, "not fenced") || strings.Contains(l, "FENCED")
	})
	if r := a.Role(); r != RolePrimary {
		t.Fatalf("a forged claim of epoch %d made the primary %s:\n%s", id.Epoch, r, logA.String())
	}
	if st, _ := a.StandbyStatus(); !st.Connected {
		t.Errorf("the standby is no longer connected after the forged claim")
	}
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
