package client

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// closedAddr is a loopback address where nothing listens.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// syncBuffer is a bytes.Buffer safe for the SDK's logger.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// With no coordinator listening and a context without a deadline, Commit
// must not retry forever in silence: after Config.DecisionTimeout it
// returns an unknown outcome that names the coordinator's address, what was
// tried and who settles the branches — and rolls nothing back. While it
// retries it says so in the SDK's logger.
func TestCommitWithoutADeadlineGivesUpAfterTheDecisionTimeout(t *testing.T) {
	addr := closedAddr(t)
	var logs syncBuffer
	c := newClient(t, Config{Coordinator: addr, DecisionTimeout: 1500 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	knownCluster(c) // learnt before the coordinator went away
	tx, pg, _ := twoBranches(t, c)
	done := make(chan error, 1)
	go func() {
		_, err := tx.Commit(context.Background())
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Commit with no coordinator and no deadline still running after 10s (DecisionTimeout 1.5s)")
	}
	if !errors.Is(err, ErrOutcomeUnknown) || errors.Is(err, ErrAborted) {
		t.Fatalf("Commit: %v, want ErrOutcomeUnknown", err)
	}
	for _, want := range []string{addr, "attempts", "orphan timeout", "nothing was rolled back"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	g := tx.GTRID()
	wantLog(t, "pg", pg, "BEGIN", "UPDATE a SET v = 1", "PREPARE TRANSACTION "+pgGID(g))
	if !strings.Contains(logs.String(), "coordinator unreachable") || !strings.Contains(logs.String(), addr) {
		t.Errorf("the SDK's logger did not say the coordinator is unreachable: %q", logs.String())
	}
}

// The usual address mistakes are named: a host without a port is refused
// by New with the probable address; the admin listener (HTTP/1.1) given as
// the coordinator makes Commit's unknown outcome say so.
func TestWrongCoordinatorAddressesAreExplained(t *testing.T) {
	if _, err := New(Config{Coordinator: "localhost", RMs: []RM{{Name: "pg", Driver: "postgres"}}}); err == nil || !strings.Contains(err.Error(), `did you mean "localhost:7070"`) {
		t.Fatalf("New with a host and no port: %v", err)
	}
	admin := httptest.NewServer(http.NotFoundHandler())
	defer admin.Close()
	addr := strings.TrimPrefix(admin.URL, "http://")
	// Long enough for an attempt to get the listener's answer on a busy
	// machine: the error names what the attempts heard.
	c := newClient(t, Config{Coordinator: addr, DecisionTimeout: 3 * time.Second})
	knownCluster(c)
	tx, _, _ := twoBranches(t, c)
	_, err := tx.Commit(context.Background())
	if !errors.Is(err, ErrOutcomeUnknown) || !strings.Contains(err.Error(), "admin listener") {
		t.Fatalf("Commit against an HTTP/1.1 listener: %v, want an unknown outcome that names the admin listener", err)
	}
}
