package service

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/tandem-tx/tandem/api"
	"github.com/tandem-tx/tandem/internal/coord"
	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/xid"
)

// A client that asks for the early decision reads the durable COMMIT in the
// reply's headers, whether the coordinator drives a branch itself (the
// header then comes before the reply) or the client settles every branch
// (the header then comes with the reply: nothing of the coordinator's lies
// between them). Under visibility sync and async alike.
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
		srv := grpc.NewServer()
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
			if r, err := c.Status(context.Background(), g, false); err != nil || r.Outcome != coord.Committed {
				t.Errorf("Status after the Commit: %+v, %v; want COMMITTED", r, err)
			}
		}
	}
}
