package service

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tandem-tx/tandem/api"
	"github.com/tandem-tx/tandem/internal/coord"
	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/xid"
)

var (
	fuzzOnce sync.Once
	fuzzSvc  *Service
)

// fuzzService is one coordinator for the whole fuzz run, with unreachable
// resource managers (phase 2 stays pending; no database is needed).
func fuzzService(t testing.TB) *Service {
	fuzzOnce.Do(func() {
		dir, err := osMkdirTemp()
		if err != nil {
			t.Fatal(err)
		}
		c, err := coord.Open(coord.Options{Dir: dir, NoSync: true, ScanInterval: time.Hour,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			RMs: []rm.Config{{Name: "pg", Driver: rm.Postgres, DSN: "postgres://u:p@127.0.0.1:1/db"},
				{Name: "maria", Driver: rm.MySQL, DSN: "u:p@tcp(127.0.0.1:1)/db"}}})
		if err != nil {
			t.Fatal(err)
		}
		fuzzSvc = New(c, Defaults{})
	})
	return fuzzSvc
}

// The request handlers never panic; every refusal is INVALID_ARGUMENT or
// FAILED_PRECONDITION with a message; a refused Commit of a valid gtrid that
// was never decided leaves it UNDECIDED (nothing was written).
func FuzzRequestHandlers(f *testing.F) {
	g := xid.New().String()
	for _, seed := range []struct {
		gtrid, branches string
		dur, vis        int32
		resolve         bool
	}{
		{g, "pg,maria", 1, 1, false}, {g, "", 0, 0, true}, {"", "pg", 0, 0, false}, {"zz", "pg", 2, 2, false},
		{g, "pg,pg", 0, 0, false}, {g, "oracle", 0, 0, false}, {strings.Repeat("a", 4096), "pg", 0, 0, false},
		{g, strings.Repeat("pg,", 70), 0, 0, false}, {strings.ToUpper(g), "maria", 99, -1, true},
		{"00000000000000000000000000000000", "pg", 0, 0, false}, {g, "p\x00g", 0, 0, false},
	} {
		f.Add(seed.gtrid, seed.branches, seed.dur, seed.vis, seed.resolve)
	}
	f.Fuzz(func(t *testing.T, gtrid, branchList string, dur, vis int32, resolve bool) {
		s := fuzzService(t)
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		var bs []*api.Branch
		if branchList != "" {
			for _, name := range strings.Split(branchList, ",") {
				bs = append(bs, &api.Branch{Rm: name, ClientSettles: len(name)%2 == 0})
			}
		}
		_, valid := xid.Parse(gtrid)
		wasDecided := false
		if valid == nil {
			st, err := s.Status(ctx, &api.StatusRequest{Gtrid: gtrid})
			if err != nil {
				t.Fatalf("Status(%q): %v", gtrid, err)
			}
			wasDecided = st.Outcome != api.Outcome_UNDECIDED
		}
		opts := &api.CommitOptions{Durability: api.Durability(dur), Visibility: api.Visibility(vis)}
		_, cerr := s.Commit(ctx, &api.CommitRequest{Gtrid: gtrid, Branches: bs, Options: opts})
		checkRefusal(t, "Commit", cerr)
		if cerr != nil && valid == nil && !wasDecided {
			st, err := s.Status(ctx, &api.StatusRequest{Gtrid: gtrid})
			if err != nil || st.Outcome != api.Outcome_UNDECIDED {
				t.Fatalf("a refused Commit (%v) left gtrid %s %v, %v", cerr, gtrid, st, err)
			}
		}
		_, aerr := s.Abort(ctx, &api.AbortRequest{Gtrid: gtrid, Branches: bs})
		checkRefusal(t, "Abort", aerr)
		_, serr := s.Status(ctx, &api.StatusRequest{Gtrid: gtrid, Resolve: resolve})
		if serr != nil && status.Code(serr) != codes.InvalidArgument {
			// resolve of an old gtrid with unreachable RMs may say it cannot resolve
			if !strings.Contains(serr.Error(), "cannot resolve") {
				t.Fatalf("Status: unexpected error %v", serr)
			}
		}
	})
}

func checkRefusal(t *testing.T, call string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	switch status.Code(err) {
	case codes.InvalidArgument, codes.FailedPrecondition:
		if status.Convert(err).Message() == "" {
			t.Fatalf("%s refused without a message", call)
		}
	default:
		t.Fatalf("%s: unexpected error %v", call, err)
	}
}
