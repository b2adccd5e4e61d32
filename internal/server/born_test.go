package server

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/internal/config"
	"github.com/tandem-tx/tandem/internal/standby"
)

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// An upgrade: a data directory whose identity has no birth (an older
// Tandem) and which holds a decision log gets born=now at start, and the
// coordinator says that gtrids that began before now are listed, not
// presumed aborted; its cluster is kept. A fresh directory is born at its
// first start with its cluster (made with the log), silently.
func TestAnIdentityWithoutABirthIsBornAtStartAndSaysSo(t *testing.T) {
	dir := t.TempDir()
	first := startRoleIn(t, dir, StandbyOptions{}) // makes a log (and an identity)
	if err := first.Stop(time.Second); err != nil {
		t.Fatal(err)
	}
	made, ok, err := standby.LoadIdentity(dir)
	if err != nil || !ok || !made.MadeWithLog() {
		t.Fatalf("a fresh directory's identity: %+v %v %v, want one made with its log", made, ok, err)
	}
	old := standby.Identity{Cluster: made.Cluster, Epoch: 2} // as an older Tandem wrote it
	if err := standby.SaveIdentity(dir, old); err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuf{}
	before := time.Now()
	s, err := Start(config.Config{Listen: "127.0.0.1:0", DataDir: dir, RMs: unreachableRMs()},
		Options{Logger: slog.New(slog.NewTextHandler(logs, nil)), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(time.Second) })
	got, _, err := standby.LoadIdentity(dir)
	if err != nil || got.Cluster != old.Cluster || got.Epoch != 2 || got.Born.Before(before) || got.MadeWithLog() {
		t.Fatalf("the upgraded identity: %+v %v; want cluster and epoch kept, born at this start, not made with the log", got, err)
	}
	if !strings.Contains(logs.String(), "no recorded birth") || !strings.Contains(logs.String(), "never presumed aborted") {
		t.Errorf("the start does not say that the birth was set and what it means:\n%s", logs.String())
	}
}

// An identity that outlived its log (a lost volume, a copied cluster file):
// the log made now knows nothing before now, so born is set again, and the
// owner no longer counts as made with the log (the clock-skew margin
// applies to its branches).
func TestAnIdentityWithoutItsLogIsBornAgain(t *testing.T) {
	dir := t.TempDir()
	long := time.Now().Add(-time.Hour).UTC()
	id := standby.Identity{Epoch: 1, Born: long, Made: long}
	id.Cluster[0] = 7
	if err := standby.SaveIdentity(dir, id); err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuf{}
	before := time.Now()
	s, err := Start(config.Config{Listen: "127.0.0.1:0", DataDir: dir, RMs: unreachableRMs()},
		Options{Logger: slog.New(slog.NewTextHandler(logs, nil)), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(time.Second) })
	got, _, err := standby.LoadIdentity(dir)
	if err != nil || got.Cluster != id.Cluster || got.Born.Before(before) || got.MadeWithLog() {
		t.Fatalf("identity after a start without its log: %+v %v; want the cluster kept, born again now, not made with the log", got, err)
	}
	if !strings.Contains(logs.String(), "no decision log") {
		t.Errorf("the start does not say the log was missing:\n%s", logs.String())
	}
}
