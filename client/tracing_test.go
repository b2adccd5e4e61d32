package client

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"

	"github.com/tandem-tx/tandem/api"
	"github.com/tandem-tx/tandem/internal/rm"
)

// traced returns a tracer provider that records every span, and its recorder.
func traced() (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	rec := tracetest.NewSpanRecorder()
	return sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)), rec
}

// spanTree renders the ended spans of one trace as "name{attrs}" lines,
// each under its parent, children sorted: a stable picture to compare.
func spanTree(spans []sdktrace.ReadOnlySpan, keys ...attribute.Key) string {
	children := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
	ids := map[trace.SpanID]bool{}
	for _, s := range spans {
		ids[s.SpanContext().SpanID()] = true
	}
	var roots []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if p := s.Parent().SpanID(); ids[p] {
			children[p] = append(children[p], s)
		} else {
			roots = append(roots, s)
		}
	}
	var b strings.Builder
	var walk func(ss []sdktrace.ReadOnlySpan, depth int)
	walk = func(ss []sdktrace.ReadOnlySpan, depth int) {
		lines := make([]string, len(ss))
		for i, s := range ss {
			var attrs []string
			for _, kv := range s.Attributes() {
				if len(keys) == 0 || slices.Contains(keys, kv.Key) {
					attrs = append(attrs, string(kv.Key)+"="+kv.Value.String())
				}
			}
			slices.Sort(attrs)
			lines[i] = s.Name() + "{" + strings.Join(attrs, " ") + "}"
		}
		order := make([]int, len(ss))
		for i := range order {
			order[i] = i
		}
		slices.SortFunc(order, func(a, b int) int { return strings.Compare(lines[a], lines[b]) })
		for _, i := range order {
			fmt.Fprintf(&b, "%s%s\n", strings.Repeat("  ", depth), lines[i])
			walk(children[ss[i].SpanContext().SpanID()], depth+1)
		}
	}
	walk(roots, 0)
	return b.String()
}

// shown are the attributes the trees below compare (not the gtrid, which
// changes).
var shown = []attribute.Key{AttrPath, AttrOutcome, AttrCommitPoint, AttrRM, AttrDecidedBy, AttrAction, AttrCalls}

func wantTree(t *testing.T, spans []sdktrace.ReadOnlySpan, want string) {
	t.Helper()
	if got := spanTree(spans, shown...); got != want {
		t.Errorf("spans:\n%s\nwant:\n%s", got, want)
	}
}

// A commit-point transaction is one span with a child per phase: pg's
// prepare, the decision at maria (its commit), pg's phase 2. The
// transaction's span is a child of the application's span (BeginContext)
// and names the gtrid.
func TestSpansOfACommitPointTransaction(t *testing.T) {
	tp, rec := traced()
	c := newClient(t, Config{RMs: twoRMs, Defaults: CommitOptions{DecideAt: DecideAuto}, TracerProvider: tp})
	ctx, app := tp.Tracer("app").Start(context.Background(), "request")
	tx := c.BeginContext(ctx)
	pgConn, _ := fakeConnTo(t)
	myConn, _ := fakeConnTo(t)
	bp, _ := tx.Branch(ctx, "pg", pgConn)
	bm, _ := tx.Branch(ctx, "maria", myConn)
	if _, err := bm.ExecContext(ctx, "UPDATE b SET v = 2"); err != nil {
		t.Fatal(err)
	}
	if _, err := bp.ExecContext(ctx, "UPDATE a SET v = 1"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	app.End()
	if err := c.Begin().Rollback(context.Background()); err != nil {
		t.Fatal(err)
	}
	var mine []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.SpanContext().TraceID() == app.SpanContext().TraceID() {
			mine = append(mine, s)
		}
	}
	wantTree(t, mine, `request{}
  tandem.tx{tandem.commit_point=maria tandem.outcome=committed tandem.path=commit-point}
    tandem.decision{tandem.decided_by=commit-point tandem.rm=maria}
    tandem.phase2{tandem.action=commit tandem.rm=pg}
    tandem.prepare{tandem.rm=pg}
`)
	for _, s := range mine {
		if s.Name() == SpanTx && !slices.Contains(s.Attributes(), AttrGTRID.String(tx.GTRID().String())) {
			t.Errorf("tandem.tx attributes %v lack tandem.gtrid=%s", s.Attributes(), tx.GTRID())
		}
	}
	// The rolled-back transaction (Begin: no parent) is a trace of its own.
	var rolled int
	for _, s := range rec.Ended() {
		if s.Name() == SpanTx && slices.Contains(s.Attributes(), AttrOutcome.String("rolled-back")) {
			rolled++
		}
	}
	if rolled != 1 {
		t.Errorf("%d tandem.tx spans with tandem.outcome=rolled-back, want 1", rolled)
	}
}

// Decided by the coordinator: the Commit RPC is tandem.decision, a client
// span whose context the call carries as a W3C traceparent; maria's branch,
// bound to the session, is committed by the client after the decision.
func TestSpansOfATwoPhaseTransaction(t *testing.T) {
	var mu sync.Mutex
	var parents []string
	f := &fakeCoordinator{commit: func(*api.CommitRequest) (*api.CommitResponse, error) {
		return &api.CommitResponse{Outcome: api.Outcome_COMMITTED}, nil
	}}
	tp, rec := traced()
	c := newClient(t, Config{Coordinator: startCoordinator(t, &traceparentFake{fakeCoordinator: f, mu: &mu, seen: &parents}), TracerProvider: tp})
	tx, _, _ := twoBranches(t, c)
	if _, err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantTree(t, rec.Ended(), `tandem.tx{tandem.coordinator_calls=1 tandem.outcome=committed tandem.path=two-phase}
  tandem.decision{tandem.coordinator_calls=1 tandem.decided_by=coordinator tandem.outcome=committed}
  tandem.phase2{tandem.action=commit tandem.rm=maria}
  tandem.prepare{tandem.rm=maria}
  tandem.prepare{tandem.rm=pg}
`)
	var decision sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == SpanDecision {
			decision = s
		}
	}
	if decision.SpanKind() != trace.SpanKindClient {
		t.Errorf("tandem.decision kind %v, want client", decision.SpanKind())
	}
	want := fmt.Sprintf("00-%s-%s-01", decision.SpanContext().TraceID(), decision.SpanContext().SpanID())
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(parents, []string{want}) {
		t.Errorf("traceparent of the Commit calls %q, want [%s] (tandem.decision's context)", parents, want)
	}
}

// traceparentFake records the traceparent of each Commit call.
type traceparentFake struct {
	*fakeCoordinator
	mu   *sync.Mutex
	seen *[]string
}

func (f *traceparentFake) Commit(ctx context.Context, req *api.CommitRequest) (*api.CommitResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	f.mu.Lock()
	*f.seen = append(*f.seen, strings.Join(md.Get("traceparent"), ","))
	f.mu.Unlock()
	return f.fakeCoordinator.Commit(ctx, req)
}

// The commit point's connection breaks during its commit: taking the key
// (with its pool) is a span of its own. The fake pool cannot run the
// key's transaction, so the outcome is unknown: both spans say so with an
// error status.
func TestSpanOfTakingTheKey(t *testing.T) {
	pool, _ := fakePool(t)
	tp, rec := traced()
	c := newClient(t, Config{RMs: []RM{{Name: "pg", Driver: "postgres"}, {Name: "maria", Driver: "mysql", DB: pool}},
		Defaults: CommitOptions{DecideAt: DecideAuto}, TracerProvider: tp})
	tx, _, maria := twoBranches(t, c)
	insert := cpDecision(rm.MySQL, tx.GTRID(), "maria", "pg")[0]
	maria.mu.Lock()
	maria.fail[insert] = driver.ErrBadConn
	maria.mu.Unlock()
	if _, err := tx.Commit(context.Background()); !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("Commit = %v, want ErrOutcomeUnknown (the fake pool cannot take the key)", err)
	}
	wantTree(t, rec.Ended(), `tandem.tx{tandem.commit_point=maria tandem.outcome=unknown tandem.path=commit-point}
  tandem.decision{tandem.decided_by=commit-point tandem.rm=maria}
  tandem.prepare{tandem.rm=pg}
  tandem.take_key{tandem.rm=maria}
`)
	for _, s := range rec.Ended() {
		if s.Name() != SpanPrepare && s.Status().Code != codes.Error {
			t.Errorf("%s status %v, want Error", s.Name(), s.Status())
		}
	}
}

// Without a tracer provider, a transaction's span is the global no-op one:
// it does not record, so the phases make no span (they test tx.rec), and
// starting it costs three small allocations (the no-op span, boxed twice,
// and its context).
func TestNoProviderCostsThreeAllocations(t *testing.T) {
	c := newClient(t, Config{})
	tx := c.Begin()
	if tx.rec || tx.span.IsRecording() {
		t.Fatal("the transaction's span records with no provider set")
	}
	if n := testing.AllocsPerRun(100, func() { tx.startTxSpan(context.Background()) }); n > 3 {
		t.Errorf("starting a transaction's span with no provider: %v allocations, want at most 3", n)
	}
}

// The SDK imports the OpenTelemetry API only: the SDK and the exporters
// are the application's choice.
func TestClientImportsOnlyTheOpenTelemetryAPI(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/tandem-tx/tandem/client").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "go.opentelemetry.io/otel/sdk") || strings.HasPrefix(p, "go.opentelemetry.io/otel/exporters") {
			t.Errorf("package client depends on %s", p)
		}
	}
}
