package service

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"

	"github.com/tandem-tx/tandem/api"
	"github.com/tandem-tx/tandem/internal/coord"
	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/xid"
)

// headerTiming is a server stats handler and interceptor that records
// whether the response headers went out while the handler still ran (sent
// on their own) or after it returned (with the reply).
type headerTiming struct {
	mu            sync.Mutex
	running       bool
	headerEarly   bool
	headerWritten bool
}

func (h *headerTiming) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (h *headerTiming) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (h *headerTiming) HandleConn(context.Context, stats.ConnStats) {}
func (h *headerTiming) HandleRPC(_ context.Context, s stats.RPCStats) {
	if _, ok := s.(*stats.OutHeader); ok {
		h.mu.Lock()
		h.headerWritten, h.headerEarly = true, h.running
		h.mu.Unlock()
	}
}

func (h *headerTiming) intercept(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	h.mu.Lock()
	h.running, h.headerWritten, h.headerEarly = true, false, false
	h.mu.Unlock()
	resp, err := next(ctx, req)
	h.mu.Lock()
	h.running = false
	h.mu.Unlock()
	return resp, err
}

// A client that asks for the early decision reads the durable COMMIT in the
// reply's headers, under visibility sync and async alike. When the reply
// waits for the coordinator's own phase 2 (visibility sync, a branch the
// coordinator settles), the header goes out on its own before it;
// otherwise nothing lies between the decision and the reply, so the header
// goes out with the reply (one write, and the decision made once).
func TestEarlyDecisionIsInTheHeaders(t *testing.T) {
	for _, async := range []bool{false, true} {
		c, err := coord.Open(coord.Options{Dir: t.TempDir(), NoSync: true, ScanInterval: time.Hour,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			RMs: []rm.Config{{Name: "pg", Driver: rm.Postgres, DSN: "postgres://u:p@127.0.0.1:1/db"},
				{Name: "maria", Driver: rm.MySQL, DSN: "u:p@tcp(127.0.0.1:1)/db"}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		timing := &headerTiming{}
		srv := grpc.NewServer(grpc.StatsHandler(timing), grpc.UnaryInterceptor(timing.intercept))
		api.RegisterCoordinatorServer(srv, New(c, Defaults{AsyncVisibility: async}))
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = srv.Serve(lis) }()
		t.Cleanup(srv.Stop)
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		for _, pgSettledByClient := range []bool{true, false} {
			g := xid.New().String()
			req := &api.CommitRequest{Gtrid: g, Branches: []*api.Branch{{Rm: "maria", ClientSettles: true}, {Rm: "pg", ClientSettles: pgSettledByClient}}}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			ctx = metadata.AppendToOutgoingContext(ctx, api.MetadataEarlyDecision, "1")
			stream, err := conn.NewStream(ctx, &grpc.StreamDesc{StreamName: "Commit"}, api.Coordinator_Commit_FullMethodName)
			if err != nil {
				t.Fatal(err)
			}
			if err := stream.SendMsg(req); err != nil {
				t.Fatal(err)
			}
			_ = stream.CloseSend()
			md, err := stream.Header()
			if err != nil {
				t.Fatal(err)
			}
			if v := md.Get(api.MetadataDecision); len(v) != 1 || v[0] != api.Outcome_COMMITTED.String() {
				t.Errorf("async %v, pg settled by the client %v: decision header %q, want COMMITTED", async, pgSettledByClient, v)
			}
			resp := new(api.CommitResponse)
			if err := stream.RecvMsg(resp); err != nil || resp.GetOutcome() != api.Outcome_COMMITTED {
				t.Errorf("async %v, pg settled by the client %v: reply %v, %v; want COMMITTED", async, pgSettledByClient, resp, err)
			}
			cancel()
			timing.mu.Lock()
			written, early := timing.headerWritten, timing.headerEarly
			timing.mu.Unlock()
			if wantEarly := !async && !pgSettledByClient; !written || early != wantEarly {
				t.Errorf("async %v, pg settled by the client %v: header written %v, before the handler returned %v; want it before only under visibility sync with a branch the coordinator settles",
					async, pgSettledByClient, written, early)
			}
			if r, err := c.Status(context.Background(), g, false); err != nil || r.Outcome != coord.Committed {
				t.Errorf("Status after the Commit: %+v, %v; want COMMITTED", r, err)
			}
		}
	}
}
