package client

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tandem-tx/tandem/api"
	"github.com/tandem-tx/tandem/internal/waitwire"
	"github.com/tandem-tx/tandem/waits"
)

// tracingCoordinator answers a traced Commit with one coordinator-side wait
// in the trailer, as the real service does.
type tracingCoordinator struct {
	*fakeCoordinator
	asked bool
}

func (f *tracingCoordinator) Commit(ctx context.Context, req *api.CommitRequest) (*api.CommitResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if len(md.Get(api.MetadataTrace)) > 0 {
		f.asked = true
		span := waits.Span{Side: waits.SideCoordinator, Event: waits.RMCommitPrepared, Detail: "pg", Start: time.Now(), Dur: time.Millisecond}
		_ = grpc.SetTrailer(ctx, metadata.Pairs(api.MetadataTraceTrailer, string(waitwire.Encode([]waits.Span{span}))))
	}
	return f.fakeCoordinator.Commit(ctx, req)
}

func TestTwoPhaseRecordsWaitsAndTrace(t *testing.T) {
	f := &tracingCoordinator{fakeCoordinator: &fakeCoordinator{commit: func(*api.CommitRequest) (*api.CommitResponse, error) {
		return &api.CommitResponse{Outcome: api.Outcome_COMMITTED}, nil
	}}}
	lisAddr := startCoordinatorServer(t, f)
	reg := waits.NewRegistry(waits.SideClient)
	c := newClient(t, Config{Coordinator: lisAddr, Waits: reg})
	ctx := context.Background()
	tx := c.Begin()
	tr := waits.NewTrace("")
	tx.SetTrace(tr, true)
	pgConn, _ := fakeConnTo(t)
	myConn, _ := fakeConnTo(t)
	bp, _ := tx.Branch(ctx, "pg", pgConn)
	bm, _ := tx.Branch(ctx, "maria", myConn)
	if _, err := bp.ExecContext(ctx, "UPDATE a SET v = 1"); err != nil {
		t.Fatal(err)
	}
	if _, err := bm.ExecContext(ctx, "UPDATE b SET v = 2"); err != nil {
		t.Fatal(err)
	}
	res, err := tx.Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The fake drivers take no pipelined begin and no multi-statements:
	// pg BEGIN, UPDATE, PREPARE; maria XA START, UPDATE, XA END, XA PREPARE, XA COMMIT.
	s := reg.Snapshot()
	for ev, want := range map[waits.Event]uint64{
		waits.RMRoundtrip: 4, waits.RMPrepare: 3, waits.RMCommitPrepared: 1, waits.CoordinatorCommit: 1, waits.RMCommit: 0,
	} {
		if got := s.Get(ev).Count; got != want {
			t.Errorf("%s: %d waits, want %d", ev, got, want)
		}
	}
	if res.RMRoundTrips != 8 || len(res.RoundTrips) != 2 || res.RoundTrips[0] != (RMRoundTrips{"pg", 3}) || res.RoundTrips[1] != (RMRoundTrips{"maria", 5}) {
		t.Errorf("round trips: %d %+v", res.RMRoundTrips, res.RoundTrips)
	}
	if !f.asked {
		t.Error("the Commit RPC did not ask for the coordinator's trace")
	}
	spans := tr.Spans()
	if tr.GTRID() != tx.GTRID().String() || len(spans) != 4+3+1+1+1 {
		t.Fatalf("trace %s with %d spans: %+v", tr.GTRID(), len(spans), spans)
	}
	var sawCoord bool
	for i, sp := range spans {
		if i > 0 && sp.Start.Before(spans[i-1].Start) {
			t.Fatal("trace out of order")
		}
		sawCoord = sawCoord || sp.Side == waits.SideCoordinator
	}
	if !sawCoord || spans[0].Event != waits.RMRoundtrip || spans[0].Detail != "pg" || spans[len(spans)-1].Event != waits.RMCommitPrepared {
		t.Errorf("trace: %+v", spans)
	}
	if cov := tr.Covered(waits.SideClient, tr.Begin(), time.Now()); cov <= 0 {
		t.Errorf("client waits cover %v", cov)
	}
}

func TestNoTraceByDefault(t *testing.T) {
	reg := waits.NewRegistry(waits.SideClient)
	c := newClient(t, Config{Waits: reg})
	ctx := context.Background()
	tx := c.Begin()
	conn, _ := fakeConnTo(t)
	b, _ := tx.Branch(ctx, "pg", conn)
	if _, err := b.ExecContext(ctx, "UPDATE a SET v = 1"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := reg.Snapshot().Get(waits.RMCommit).Count; got != 1 {
		t.Errorf("rm commit: %d waits, want 1 (one-phase)", got)
	}
	if tx.trace != nil {
		t.Error("a trace appeared without SetTrace")
	}
}

// startCoordinatorServer serves any CoordinatorServer on loopback.
func startCoordinatorServer(t *testing.T, srv api.CoordinatorServer) string {
	t.Helper()
	s := grpc.NewServer()
	api.RegisterCoordinatorServer(s, srv)
	lis := listenLoopback(t)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

func listenLoopback(t *testing.T) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return lis
}

// earlyCoordinator sends the decision in the response headers, then holds
// its reply until the client has committed MariaDB's branch: the reply can
// only come if the SDK settles its own branch on the early decision.
type earlyCoordinator struct {
	fakeCoordinator
	maria *fakeDB
	x     string
}

func (f *earlyCoordinator) Commit(ctx context.Context, req *api.CommitRequest) (*api.CommitResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if len(md.Get(api.MetadataEarlyDecision)) == 0 {
		return nil, status.Error(codes.FailedPrecondition, "the client did not ask for the early decision")
	}
	if err := grpc.SendHeader(ctx, metadata.Pairs(api.MetadataDecision, "COMMITTED")); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if slices.Contains(f.maria.log(), "XA COMMIT "+f.x) {
			return &api.CommitResponse{Outcome: api.Outcome_COMMITTED}, nil
		}
		time.Sleep(time.Millisecond)
	}
	return nil, status.Error(codes.DeadlineExceeded, "the client did not commit its MariaDB branch before the reply")
}

func TestEarlyDecisionOverlapsTheClientsCommit(t *testing.T) {
	f := &earlyCoordinator{}
	c := newClient(t, Config{Coordinator: startCoordinatorServer(t, f)})
	ctx := context.Background()
	tx := c.Begin()
	pgConn, _ := fakeConnTo(t)
	myConn, maria := fakeConnTo(t)
	f.maria, f.x = maria, xaOwned(tx.GTRID())
	bp, _ := tx.Branch(ctx, "pg", pgConn)
	bm, _ := tx.Branch(ctx, "maria", myConn)
	if _, err := bp.ExecContext(ctx, "UPDATE a SET v = 1"); err != nil {
		t.Fatal(err)
	}
	if _, err := bm.ExecContext(ctx, "UPDATE b SET v = 2"); err != nil {
		t.Fatal(err)
	}
	res, err := tx.Commit(ctx)
	if err != nil || res.Phase2Pending || res.CoordinatorCalls != 1 {
		t.Fatalf("Commit: %+v, %v", res, err)
	}
	x := f.x
	wantLog(t, "maria", maria, "XA START "+x, "UPDATE b SET v = 2", "XA END "+x, "XA PREPARE "+x, "XA COMMIT "+x)
}
