package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/tandem-tx/tandem/internal/console"
	"github.com/tandem-tx/tandem/internal/coord"
	"github.com/tandem-tx/tandem/internal/metrics"
	"github.com/tandem-tx/tandem/waits"
)

// The console (package console) on the admin listener:
//
//	GET /                     the page; /console/* its scripts and styles (no token needed: no data)
//	GET /console/data?since=T the sampler's ring: one sample a second for the last five minutes
//	                          (only those after unix millisecond T with since)
//	GET /unfinished?limit=N   unfinished and in-doubt transactions, oldest first, at most N of each
//	                          (read from the coordinator at most once a second: unfinishedEvery)
//
// The data endpoints are reads, exactly as open or closed as /waits (the
// admin guard, admin.go); the page's resolve button uses POST
// /in-doubt/resolve, which needs the admin token.

// Limits of the console's endpoints.
const (
	consoleSampleEvery  = time.Second
	unfinishedDefault   = 50
	unfinishedMax       = 200
	consoleLastErrorMax = 300 // characters of a branch's last error shown
	// unfinishedBranchesMax bounds the branches one /unfinished lists in
	// all (coord.MaxBranches is 64 a transaction).
	unfinishedBranchesMax = 1000
	// unfinishedEvery: GET /unfinished walks the coordinator's transactions
	// at most this often, whoever asks (everyCache).
	unfinishedEvery = time.Second
)

// consoleRoutes registers the console's page and data endpoints on mux.
func (s *Server) consoleRoutes(mux *http.ServeMux, sampler *console.Sampler) {
	console.Register(mux)
	mux.HandleFunc("GET /console/data", func(w http.ResponseWriter, r *http.Request) {
		var since int64
		if v := r.URL.Query().Get("since"); v != "" {
			t, err := strconv.ParseInt(v, 10, 64)
			if err != nil || t < 0 || len(v) > 19 {
				http.Error(w, "since must be a unix time in milliseconds (a non-negative integer)", http.StatusBadRequest)
				return
			}
			since = t
		}
		_, standby := s.StandbyStatus()
		writeJSON(w, ConsoleData{IntervalS: consoleSampleEvery.Seconds(), Capacity: console.DefaultCapacity,
			Role: s.Role().String(), Standby: standby, Samples: sampler.Since(since)})
	})
	// One walk of the coordinator's transactions a second at most, whoever
	// asks (everyCache): the largest list, cut per request.
	walk := &everyCache[unfinishedWalk]{every: unfinishedEvery, read: s.walkUnfinished}
	mux.HandleFunc("GET /unfinished", func(w http.ResponseWriter, r *http.Request) {
		limit := unfinishedDefault
		if v := r.URL.Query().Get("limit"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > unfinishedMax {
				http.Error(w, fmt.Sprintf("limit must be an integer from 0 to %d", unfinishedMax), http.StatusBadRequest)
				return
			}
			limit = n
		}
		writeJSON(w, walk.get().response(limit, time.Now()))
	})
}

// ConsoleData is the body of GET /console/data.
type ConsoleData struct {
	IntervalS float64 `json:"interval_s"` // between samples
	Capacity  int     `json:"capacity"`   // samples kept
	Role      string  `json:"role"`
	// Standby: the process has a standby role (GET /standby answers).
	Standby bool             `json:"standby"`
	Samples []console.Sample `json:"samples"` // oldest first
}

// UnfinishedResponse is the body of GET /unfinished.
type UnfinishedResponse struct {
	Role            string `json:"role"`
	UnfinishedTotal int    `json:"unfinished_total"`
	// Unfinished: the oldest, at most limit of them and fewer when their
	// branches would pass 1000.
	Unfinished   []UnfinishedJSON      `json:"unfinished"`
	InDoubtTotal int                   `json:"in_doubt_total"` // branches
	InDoubt      []coord.InDoubtBranch `json:"in_doubt"`
}

// UnfinishedJSON is one decided transaction whose phase 2 has not ended.
type UnfinishedJSON struct {
	GTRID     string       `json:"gtrid"`
	Outcome   string       `json:"outcome"`
	DecidedAt time.Time    `json:"decided_at"`
	AgeS      float64      `json:"age_s"`
	Branches  []BranchJSON `json:"branches"`
}

// BranchJSON is one branch's phase-2 progress.
type BranchJSON struct {
	RM            string `json:"rm"`
	State         string `json:"state"` // pending (not acknowledged), done, not found
	Attempts      uint32 `json:"attempts"`
	LastError     string `json:"last_error,omitempty"`
	ClientSettles bool   `json:"client_settles,omitempty"`
}

// unfinishedWalk is one walk of the coordinator's transactions: the oldest
// unfinishedMax unfinished ones, and every in-doubt branch.
type unfinishedWalk struct {
	role    string
	list    []coord.UnfinishedTxn
	total   int
	inDoubt []coord.InDoubtBranch
}

func (s *Server) walkUnfinished() unfinishedWalk {
	wk := unfinishedWalk{role: s.Role().String()}
	if c := s.Coordinator(); c != nil {
		wk.list, wk.total = c.Unfinished(unfinishedMax)
		wk.inDoubt = c.InDoubt()
	}
	return wk
}

// response is the body of GET /unfinished?limit=limit from wk.
func (wk unfinishedWalk) response(limit int, now time.Time) UnfinishedResponse {
	out := UnfinishedResponse{Role: wk.role, UnfinishedTotal: wk.total, InDoubtTotal: len(wk.inDoubt),
		Unfinished: unfinishedJSON(wk.list[:min(len(wk.list), limit)], now), InDoubt: []coord.InDoubtBranch{}}
	out.InDoubt = append(out.InDoubt, wk.inDoubt[:min(len(wk.inDoubt), limit)]...)
	return out
}

// unfinishedJSON converts list, oldest first, stopping before the
// transaction that would take the branches listed past
// unfinishedBranchesMax: with each last error cut at consoleLastErrorMax
// characters, that bounds the answer (about 1.5 KB a branch at most).
func unfinishedJSON(list []coord.UnfinishedTxn, now time.Time) []UnfinishedJSON {
	out := []UnfinishedJSON{}
	branches := 0
	for _, t := range list {
		if branches+len(t.Branches) > unfinishedBranchesMax {
			break
		}
		branches += len(t.Branches)
		u := UnfinishedJSON{GTRID: t.GTRID, Outcome: t.Outcome, DecidedAt: t.DecidedAt, AgeS: now.Sub(t.DecidedAt).Seconds(), Branches: []BranchJSON{}}
		for _, b := range t.Branches {
			e := b.LastError
			if r := []rune(e); len(r) > consoleLastErrorMax {
				e = string(r[:consoleLastErrorMax]) + "…"
			}
			u.Branches = append(u.Branches, BranchJSON{RM: b.RM, State: b.State.String(), Attempts: b.Attempts, LastError: e, ClientSettles: b.ClientSettles})
		}
		out = append(out, u)
	}
	return out
}

// consoleReading is what the console's sampler reads every second.
func (s *Server) consoleReading() console.Reading {
	counter := func(outcome string) uint64 {
		v, _ := metrics.CounterValue("tandem_commit_outcomes_total", "outcome", outcome)
		return v
	}
	r := console.Reading{At: time.Now(),
		Committed: counter("committed") + counter("committed_phase2_pending"), Aborted: counter("aborted"),
		Refused: counter("refused"), Unknown: counter("unknown"),
		Coordinator: s.waits.Snapshot(), Client: waits.Client.Snapshot()}
	if c := s.Coordinator(); c != nil {
		r.HasLog = true
		r.LogUsed, r.LogLimit = c.LogSpace()
		r.LogAppends = c.Stats().LogAppends
		r.Backlog = c.Phase2Backlog()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		for _, t := range c.CommitPoints(ctx) {
			r.CommitPoints = append(r.CommitPoints, console.CommitPoint{RM: t.RM, Commits: t.Commits, Aborts: t.Aborts,
				BeganToDecided: t.BeganToDecided, CRows: t.State.CRows, ARows: t.State.ARows, CKept: t.State.CKept,
				OldestC: t.State.OldestC, Err: t.Err})
			s.countCommitPoint(t)
		}
		cancel()
	}
	if st, ok := s.StandbyStatus(); ok {
		r.HasStandby = true
		r.LagBytes, r.LagSeconds, r.LagRecords = st.LagBytes, st.LagSeconds, int64(st.LagRecords)
	}
	return r
}

// countCommitPoint brings /metrics's commit-point counters
// (tandem_commit_point_decisions_total{rm,outcome}) up to t's totals.
func (s *Server) countCommitPoint(t coord.CommitPointTotals) {
	for _, o := range []struct {
		outcome string
		n       uint64
	}{{"committed", t.Commits}, {"aborted", t.Aborts}} {
		c := metrics.Counter(MetricCommitPointDecisions, "Decisions recorded in each resource manager's decision table (commits decided at a commit point; aborts recorded by a recoverer), read by the primary about 2 s after they were made.",
			"rm", t.RM, "outcome", o.outcome)
		if v := c.Value(); o.n > v {
			c.Add(o.n - v)
		}
	}
}

// startConsole starts the sampler; the returned function stops it and
// waits for it.
func (s *Server) startConsole(sampler *console.Sampler) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		sampler.Run(ctx, consoleSampleEvery, s.consoleReading)
	}()
	return func() { cancel(); <-done }
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
