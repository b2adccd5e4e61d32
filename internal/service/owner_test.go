package service

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tandem-tx/tandem/api"
	"github.com/tandem-tx/tandem/internal/coord"
	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/xid"
)

// A Commit or Abort whose branches are named after another cluster than
// this coordinator's is refused with FAILED_PRECONDITION before anything is
// written: a COMMIT here could never reach those branches (their names are
// the other cluster's), and the other cluster would roll them back as
// orphans — a COMMIT acknowledged and lost. Found by reading: a client that
// learnt cluster A's id, whose coordinator address then served cluster B (a
// new deployment with an empty data directory), had its Commit decided by B.
func TestCommitNamingAnotherClusterIsRefused(t *testing.T) {
	ours, theirs := xid.NewOwner(), xid.NewOwner()
	c, err := coord.Open(coord.Options{Dir: t.TempDir(), NoSync: true, ScanInterval: time.Hour, Owner: ours,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		RMs:    []rm.Config{{Name: "pg", Driver: rm.Postgres, DSN: "postgres://u:p@127.0.0.1:1/db"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := New(c, Defaults{AsyncVisibility: true})
	with := func(o xid.Owner) context.Context {
		return metadata.NewIncomingContext(context.Background(), metadata.Pairs(api.MetadataOwner, o.String()))
	}
	g := xid.New().String()
	req := &api.CommitRequest{Gtrid: g, Branches: []*api.Branch{{Rm: "pg"}}}
	_, err = s.Commit(with(theirs), req)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), theirs.String()) || !strings.Contains(err.Error(), "nothing was written") {
		t.Fatalf("Commit naming another cluster = %v, want FAILED_PRECONDITION naming it, nothing written", err)
	}
	if r, err := c.Status(context.Background(), g, false); err != nil || r.Outcome != coord.Undecided {
		t.Fatalf("after the refused Commit: %+v, %v; want UNDECIDED (nothing written)", r, err)
	}
	if _, err := s.Abort(with(theirs), &api.AbortRequest{Gtrid: g, Branches: []*api.Branch{{Rm: "pg"}}}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("Abort naming another cluster = %v, want FAILED_PRECONDITION", err)
	}
	if r, err := c.Status(context.Background(), g, false); err != nil || r.Outcome != coord.Undecided {
		t.Fatalf("after the refused Abort: %+v, %v; want UNDECIDED", r, err)
	}
	// Its own owner, and no owner at all (a client from before owners), are decided.
	for _, ctx := range []context.Context{with(ours), context.Background()} {
		r, err := s.Commit(ctx, &api.CommitRequest{Gtrid: xid.New().String(), Branches: []*api.Branch{{Rm: "pg"}}})
		if err != nil || r.GetOutcome() != api.Outcome_COMMITTED {
			t.Fatalf("Commit naming this cluster (or none) = %v, %v; want COMMITTED", r, err)
		}
	}
	if _, err := s.Commit(metadata.NewIncomingContext(context.Background(), metadata.Pairs(api.MetadataOwner, "not-hex")), req); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a malformed owner = %v, want INVALID_ARGUMENT", err)
	}
}
