package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/xid"
)

var twoRMs = []RM{{Name: "pg", Driver: "postgres"}, {Name: "maria", Driver: "mysql"}}

func TestNewRejectsBadConfig(t *testing.T) {
	tests := []struct {
		name string
		rms  []RM
		want string
	}{
		{"no rms", nil, "Config.RMs is empty"},
		{"duplicate", []RM{{Name: "pg", Driver: "postgres"}, {Name: "pg", Driver: "mysql"}}, `"pg" is declared twice`},
		{"empty name", []RM{{Name: "", Driver: "postgres"}}, "resource manager name"},
		{"uppercase name", []RM{{Name: "PG", Driver: "postgres"}}, `"PG"`},
		{"long name", []RM{{Name: strings.Repeat("a", 33), Driver: "postgres"}}, "resource manager name"},
		{"unknown driver", []RM{{Name: "ora", Driver: "oracle"}}, `"oracle"`},
		{"no driver", []RM{{Name: "pg"}}, `"pg"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(Config{RMs: tc.rms, Coordinator: "127.0.0.1:1"})
			if err == nil {
				c.Close()
				t.Fatal("New succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v; want it to contain %q", err, tc.want)
			}
		})
	}
}

// New, Begin, a Commit without branches, Rollback and Close must not
// contact the coordinator: count the connections a listener receives.
func TestNoNetworkCallWithoutTwoWriters(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	var accepted atomic.Int32
	go func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			conn.Close()
		}
	}()
	c, err := New(Config{Coordinator: lis.Addr().String(), RMs: twoRMs})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	tx := c.Begin()
	res, err := tx.Commit(context.Background())
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if res.CoordinatorCalls != 0 {
		t.Errorf("Result.CoordinatorCalls = %d", res.CoordinatorCalls)
	}
	if err := c.Begin().Rollback(context.Background()); err != nil {
		t.Errorf("Rollback: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	time.Sleep(100 * time.Millisecond)
	if n := accepted.Load(); n != 0 {
		t.Fatalf("the coordinator received %d connections", n)
	}
	if s := c.Stats(); s.CoordinatorCalls != 0 {
		t.Errorf("Stats().CoordinatorCalls = %d", s.CoordinatorCalls)
	}
}

func TestNewWithUnreachableCoordinator(t *testing.T) {
	c, err := New(Config{Coordinator: "127.0.0.1:1", RMs: twoRMs})
	if err != nil {
		t.Fatalf("New with nothing listening at the coordinator address: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func newClient(t *testing.T, cfg Config) *Client {
	t.Helper()
	if cfg.RMs == nil {
		cfg.RMs = twoRMs
	}
	if cfg.Defaults.DecideAt == "" {
		// These tests check the coordinator's path statement by statement;
		// commitpoint_test.go checks the commit point's.
		cfg.Defaults.DecideAt = DecideAtCoordinator
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestBranchUnknownRM(t *testing.T) {
	c := newClient(t, Config{})
	tx := c.Begin()
	b, err := tx.Branch(context.Background(), "oracle", nil)
	if !errors.Is(err, ErrUnknownRM) || b != nil {
		t.Fatalf("Branch(oracle) = %v, %v; want ErrUnknownRM", b, err)
	}
	if !strings.Contains(err.Error(), `"oracle"`) {
		t.Errorf("error does not name the RM: %v", err)
	}
	if _, err := tx.Branch(context.Background(), "pg", nil); err == nil || errors.Is(err, ErrUnknownRM) {
		t.Errorf("Branch(pg, nil conn) = %v; want an error about the connection", err)
	}
}

func TestRollbackFreshTx(t *testing.T) {
	c := newClient(t, Config{})
	tx := c.Begin()
	if err := tx.Rollback(context.Background()); err != nil {
		t.Fatalf("Rollback: %v", err)
	}
	if err := tx.Rollback(context.Background()); err != nil {
		t.Fatalf("second Rollback: %v", err)
	}
	if _, err := tx.Commit(context.Background()); !errors.Is(err, ErrTxDone) {
		t.Fatalf("Commit after Rollback: %v, want ErrTxDone", err)
	}
}

func TestCommitWithoutBranches(t *testing.T) {
	c := newClient(t, Config{Coordinator: "127.0.0.1:1"})
	tx := c.Begin()
	if tx.GTRID().IsZero() {
		t.Fatal("Begin made a zero gtrid")
	}
	if age := time.Since(tx.GTRID().Time()); age < -time.Second || age > time.Minute {
		t.Errorf("gtrid stamped %s ago", age)
	}
	res, err := tx.Commit(context.Background())
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if res.Path != PathLocal || res.GTRID != tx.GTRID() || res.CoordinatorCalls != 0 || res.RMRoundTrips != 0 || res.Phase2Pending {
		t.Errorf("Commit = %+v", res)
	}
	if c.Stats().CoordinatorCalls != 0 {
		t.Errorf("Stats().CoordinatorCalls = %d", c.Stats().CoordinatorCalls)
	}
	res, err = tx.Commit(context.Background())
	if !errors.Is(err, ErrTxDone) || res.GTRID != tx.GTRID() {
		t.Errorf("second Commit = %+v, %v; want ErrTxDone", res, err)
	}
	if err := tx.Rollback(context.Background()); err != nil {
		t.Errorf("Rollback after Commit: %v", err)
	}
	if c.Begin().GTRID() == tx.GTRID() {
		t.Error("two Begins made the same gtrid")
	}
}

func TestStatusWithoutCoordinator(t *testing.T) {
	c := newClient(t, Config{})
	if _, err := c.Status(context.Background(), xid.New(), false); !errors.Is(err, ErrNoCoordinator) {
		t.Fatalf("Status: %v, want ErrNoCoordinator", err)
	}
}

func TestRunInTx(t *testing.T) {
	c := newClient(t, Config{})
	boom := errors.New("boom")
	var inside *Tx
	res, err := c.RunInTx(context.Background(), func(tx *Tx) error { inside = tx; return boom })
	if !errors.Is(err, boom) || res.GTRID != inside.GTRID() {
		t.Errorf("RunInTx with a failing fn = %+v, %v", res, err)
	}
	if _, err := inside.Commit(context.Background()); !errors.Is(err, ErrTxDone) {
		t.Errorf("the failed fn's tx was not rolled back: Commit = %v", err)
	}
	res, err = c.RunInTx(context.Background(), func(tx *Tx) error { return nil })
	if err != nil || res.Path != PathLocal {
		t.Errorf("RunInTx = %+v, %v", res, err)
	}
	func() {
		defer func() {
			if p := recover(); p != "panic in fn" {
				t.Errorf("recovered %v, want the fn's panic", p)
			}
		}()
		_, _ = c.RunInTx(context.Background(), func(tx *Tx) error { inside = tx; panic("panic in fn") })
	}()
	if _, err := inside.Commit(context.Background()); !errors.Is(err, ErrTxDone) {
		t.Errorf("the panicking fn's tx was not rolled back: Commit = %v", err)
	}
}

func TestErrorTypes(t *testing.T) {
	g := xid.New()
	cause := fmt.Errorf("rm %q: %w", "pg", io.ErrUnexpectedEOF)
	var err error = &AbortedError{GTRID: g, Reason: "phase 1 failed", Cause: cause}
	if !errors.Is(err, ErrAborted) || errors.Is(err, ErrOutcomeUnknown) {
		t.Errorf("AbortedError: Is(ErrAborted) %v, Is(ErrOutcomeUnknown) %v", errors.Is(err, ErrAborted), errors.Is(err, ErrOutcomeUnknown))
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) || errors.Unwrap(err) != cause {
		t.Errorf("AbortedError does not unwrap to its cause")
	}
	var ae *AbortedError
	if !errors.As(fmt.Errorf("wrapped: %w", err), &ae) || ae.GTRID != g {
		t.Errorf("errors.As(AbortedError) failed")
	}
	for _, want := range []string{g.String(), "phase 1 failed", "unexpected EOF"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("AbortedError %q does not contain %q", err, want)
		}
	}
	if noCause := (&AbortedError{GTRID: g, Reason: "r"}); errors.Unwrap(noCause) != nil || !errors.Is(noCause, ErrAborted) || strings.HasSuffix(noCause.Error(), ": ") {
		t.Errorf("AbortedError without a cause: %q", noCause)
	}

	err = &OutcomeUnknownError{GTRID: g, Cause: context.DeadlineExceeded}
	if !errors.Is(err, ErrOutcomeUnknown) || errors.Is(err, ErrAborted) {
		t.Errorf("OutcomeUnknownError: wrong sentinels")
	}
	if !errors.Is(err, context.DeadlineExceeded) || errors.Unwrap(err) != context.DeadlineExceeded {
		t.Errorf("OutcomeUnknownError does not unwrap to its cause")
	}
	var ou *OutcomeUnknownError
	if !errors.As(fmt.Errorf("wrapped: %w", err), &ou) || ou.GTRID != g {
		t.Errorf("errors.As(OutcomeUnknownError) failed")
	}
	if !strings.Contains(err.Error(), "tandem status "+g.String()) {
		t.Errorf("OutcomeUnknownError does not say how to ask: %q", err)
	}
}

func TestPathString(t *testing.T) {
	for p, want := range map[Path]string{0: "none", PathLocal: "local", PathOnePhase: "one-phase", PathTwoPhase: "two-phase"} {
		if got := p.String(); got != want {
			t.Errorf("Path(%d).String() = %q, want %q", p, got, want)
		}
	}
}
