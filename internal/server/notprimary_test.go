package server

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tandem-tx/tandem/api"
)

// A coordinator that is not the primary refuses Commit, Abort and Status
// with the api.MetadataNotPrimary trailer naming its role (the client's
// sign that nothing was written and it may go to the primary); the
// primary's own answers carry no such trailer.
func TestNotPrimaryTrailer(t *testing.T) {
	p, sb, _, _ := pair(t)
	for _, what := range []string{"Commit", "Abort", "Status"} {
		md, err := callFor(t, p, what)
		if v := md.Get(api.MetadataNotPrimary); len(v) != 0 || status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s on the primary: %v, trailer %v; want its own refusal (a bad gtrid), no not-primary trailer", what, err, v)
		}
		md, err = callFor(t, sb, what)
		if v := md.Get(api.MetadataNotPrimary); len(v) != 1 || v[0] != "standby" || status.Code(err) != codes.FailedPrecondition {
			t.Errorf("%s on the standby: %v, trailer %v; want FAILED_PRECONDITION with %s: standby", what, err, v, api.MetadataNotPrimary)
		}
	}
	if _, err := p.Demote(context.Background()); err != nil {
		t.Fatal(err)
	}
	md, err := callFor(t, p, "Commit")
	if v := md.Get(api.MetadataNotPrimary); len(v) != 1 || v[0] != "demoted" || status.Code(err) != codes.FailedPrecondition {
		t.Errorf("Commit on the demoted primary: %v, trailer %v; want FAILED_PRECONDITION with %s: demoted", err, v, api.MetadataNotPrimary)
	}
}

// callFor makes one call (what) to s's gRPC API with a bad gtrid, and
// returns its trailer.
func callFor(t *testing.T, s *Server, what string) (metadata.MD, error) {
	t.Helper()
	conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cli := api.NewCoordinatorClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var md metadata.MD
	switch what {
	case "Commit":
		_, err = cli.Commit(ctx, &api.CommitRequest{Gtrid: "x"}, grpc.Trailer(&md))
	case "Abort":
		_, err = cli.Abort(ctx, &api.AbortRequest{Gtrid: "x"}, grpc.Trailer(&md))
	case "Status":
		_, err = cli.Status(ctx, &api.StatusRequest{Gtrid: "x"}, grpc.Trailer(&md))
	}
	return md, err
}

// A primary handing over in a switchover refuses new calls (UNAVAILABLE:
// retry on the new primary) before anything is written, and says so in
// the trailer ("closing").
func TestNotPrimaryTrailerWhileHandingOver(t *testing.T) {
	p, _, _, cancel, demoted := demoteFrozen(t)
	defer func() { cancel(); <-demoted }()
	md, err := callFor(t, p, "Commit")
	if v := md.Get(api.MetadataNotPrimary); len(v) != 1 || v[0] != "closing" || status.Code(err) != codes.Unavailable {
		t.Errorf("Commit on a primary handing over: %v, trailer %v; want UNAVAILABLE with %s: closing", err, v, api.MetadataNotPrimary)
	}
}
