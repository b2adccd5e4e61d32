package e2e

import (
	"context"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/grpc"

	"github.com/tandem-tx/tandem/client"
	"github.com/tandem-tx/tandem/internal/config"
	"github.com/tandem-tx/tandem/internal/server"
)

// span is one span of either side, for comparing and printing trees.
type span struct {
	side                      string // client, coordinator
	name                      string
	traceID, spanID, parentID string
	attrs                     map[string]string
}

func fromSDK(side string, ss []sdktrace.ReadOnlySpan) []span {
	out := make([]span, 0, len(ss))
	for _, s := range ss {
		a := map[string]string{}
		for _, kv := range s.Attributes() {
			a[string(kv.Key)] = kv.Value.String()
		}
		p := ""
		if s.Parent().IsValid() {
			p = s.Parent().SpanID().String()
		}
		out = append(out, span{side: side, name: s.Name(), traceID: s.SpanContext().TraceID().String(), spanID: s.SpanContext().SpanID().String(), parentID: p, attrs: a})
	}
	return out
}

// otlpCollector is an OTLP/gRPC trace receiver: what a coordinator started
// with --otlp-endpoint exports to.
type otlpCollector struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []span
}

func (c *otlpCollector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				a := map[string]string{}
				for _, kv := range s.GetAttributes() {
					switch v := kv.GetValue().GetValue().(type) {
					case *commonpb.AnyValue_StringValue:
						a[kv.GetKey()] = v.StringValue
					case *commonpb.AnyValue_BoolValue:
						a[kv.GetKey()] = fmt.Sprint(v.BoolValue)
					case *commonpb.AnyValue_IntValue:
						a[kv.GetKey()] = fmt.Sprint(v.IntValue)
					default:
						a[kv.GetKey()] = fmt.Sprint(v)
					}
				}
				for _, kv := range rs.GetResource().GetAttributes() {
					if kv.GetKey() == "service.name" {
						a["service.name"] = kv.GetValue().GetStringValue()
					}
				}
				c.spans = append(c.spans, span{side: "coordinator", name: s.GetName(), traceID: hex.EncodeToString(s.GetTraceId()),
					spanID: hex.EncodeToString(s.GetSpanId()), parentID: hex.EncodeToString(s.GetParentSpanId()), attrs: a})
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (c *otlpCollector) of(traceID string) []span {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []span
	for _, s := range c.spans {
		if s.traceID == traceID {
			out = append(out, s)
		}
	}
	return out
}

func startCollector(t *testing.T) (*otlpCollector, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &otlpCollector{}
	s := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(s, c)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return c, lis.Addr().String()
}

// shownAttrs are the attributes the trees compare (not the gtrid, which
// changes, nor the rpc.* ones).
var shownAttrs = []string{"tandem.path", "tandem.outcome", "tandem.commit_point", "tandem.rm", "tandem.decided_by", "tandem.action",
	"tandem.coordinator_calls", "tandem.durable", "tandem.result", "tandem.phase2_pending"}

// tree renders the spans of one trace, each under its parent, siblings
// sorted, as "side name{attrs}"; with all, every attribute (and ids).
func tree(spans []span, all bool) string {
	ids := map[string]bool{}
	for _, s := range spans {
		ids[s.spanID] = true
	}
	children := map[string][]span{}
	var roots []span
	for _, s := range spans {
		if ids[s.parentID] {
			children[s.parentID] = append(children[s.parentID], s)
		} else {
			roots = append(roots, s)
		}
	}
	line := func(s span) string {
		var attrs []string
		for k, v := range s.attrs {
			if all || slices.Contains(shownAttrs, k) {
				attrs = append(attrs, k+"="+v)
			}
		}
		slices.Sort(attrs)
		l := s.side + " " + s.name + "{" + strings.Join(attrs, " ") + "}"
		if all {
			l += " span=" + s.spanID + " parent=" + s.parentID
		}
		return l
	}
	var b strings.Builder
	var walk func(ss []span, depth int)
	walk = func(ss []span, depth int) {
		slices.SortFunc(ss, func(a, b span) int { return strings.Compare(line(a), line(b)) })
		for _, s := range ss {
			fmt.Fprintf(&b, "%s%s\n", strings.Repeat("  ", depth), line(s))
			walk(children[s.spanID], depth+1)
		}
	}
	walk(roots, 0)
	return b.String()
}

// tracedClient is a client of addr with pools for the commit point's key
// and a tracer provider recording every span.
func tracedClient(t *testing.T, addr string, d dbs) (*client.Client, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	cli, err := client.New(client.Config{Coordinator: addr, TracerProvider: tp,
		RMs: []client.RM{{Name: "pg", Driver: "postgres", DB: d.pg}, {Name: "maria", Driver: "mysql", MultiStatements: true, DB: d.my}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli, rec
}

// writeAndCommit runs one transaction writing id on both databases,
// decided where decideAt says, under the application's span app.
func writeAndCommit(t *testing.T, cli *client.Client, app context.Context, table string, id int, pgConn, myConn *sql.Conn, decideAt client.DecideAt) (*client.Tx, client.Result) {
	t.Helper()
	tx := cli.BeginContext(app)
	tx.SetOptions(client.CommitOptions{DecideAt: decideAt})
	writeBoth(t, app, tx, table, id, pgConn, myConn)
	res, err := tx.Commit(app)
	if err != nil {
		t.Fatal(err)
	}
	return tx, res
}

// traceOf returns the ended client spans of trace id.
func traceOf(rec *tracetest.SpanRecorder, id trace.TraceID) []span {
	var out []span
	for _, s := range fromSDK("client", rec.Ended()) {
		if s.traceID == id.String() {
			out = append(out, s)
		}
	}
	return out
}

// A real coordinator (tandem serve --otlp-endpoint) and real databases: a
// commit-point transaction is a trace of the client's spans alone (no
// coordinator call); a coordinator-decided one is one trace across both
// processes: the coordinator's Commit span is a child of the client's
// tandem.decision, with the decision log write and phase 2 per RM under it.
func TestTraceSpans(t *testing.T) {
	d := openDBs(t)
	d.table(t, "e2e_trace")
	col, colAddr := startCollector(t)
	c := startCoordinator(t, coordOpts{extra: []string{"--otlp-endpoint", colAddr}, env: []string{"OTEL_BSP_SCHEDULE_DELAY=50"}})
	cli, rec := tracedClient(t, c.addr, d)
	app := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("app")
	pgConn, myConn := conns(t, d)

	ctx, req := app.Start(context.Background(), "request")
	tx, res := writeAndCommit(t, cli, ctx, "e2e_trace", 1, pgConn, myConn, client.DecideAuto)
	req.End()
	if res.Path != client.PathCommitPoint || res.CommitPoint != "maria" {
		t.Fatalf("first transaction %+v, want decided at maria's commit point", res)
	}
	cpTrace := traceOf(rec, req.SpanContext().TraceID())
	want := `client request{}
  client tandem.tx{tandem.commit_point=maria tandem.outcome=committed tandem.path=commit-point}
    client tandem.decision{tandem.decided_by=commit-point tandem.rm=maria}
    client tandem.phase2{tandem.action=commit tandem.rm=pg}
    client tandem.prepare{tandem.rm=pg}
`
	if got := tree(cpTrace, false); got != want {
		t.Errorf("commit-point transaction's trace:\n%s\nwant:\n%s", got, want)
	}
	for _, s := range cpTrace {
		if s.name == client.SpanTx && s.attrs["tandem.gtrid"] != tx.GTRID().String() {
			t.Errorf("tandem.tx's tandem.gtrid = %q, want %s", s.attrs["tandem.gtrid"], tx.GTRID())
		}
	}
	t.Logf("trace of a commit-point transaction:\n%s", tree(cpTrace, true))

	ctx, req2 := app.Start(context.Background(), "request")
	tx2, res := writeAndCommit(t, cli, ctx, "e2e_trace", 2, pgConn, myConn, client.DecideAtCoordinator)
	req2.End()
	if res.Path != client.PathTwoPhase {
		t.Fatalf("second transaction %+v, want decided by the coordinator", res)
	}
	id := req2.SpanContext().TraceID()
	want = `client request{}
  client tandem.tx{tandem.coordinator_calls=1 tandem.outcome=committed tandem.path=two-phase}
    client tandem.decision{tandem.coordinator_calls=1 tandem.decided_by=coordinator tandem.outcome=committed}
      coordinator tandem.coordinator.Commit{tandem.outcome=committed tandem.phase2_pending=false}
        coordinator tandem.coordinator.decision_log{tandem.durable=true tandem.outcome=committed}
        coordinator tandem.coordinator.phase2{tandem.action=check tandem.result=settled tandem.rm=maria}
        coordinator tandem.coordinator.phase2{tandem.action=check tandem.result=settled tandem.rm=pg}
    client tandem.phase2{tandem.action=commit tandem.rm=maria}
    client tandem.phase2{tandem.action=commit tandem.rm=pg}
    client tandem.prepare{tandem.rm=maria}
    client tandem.prepare{tandem.rm=pg}
`
	var all []span
	deadline := time.Now().Add(10 * time.Second)
	for {
		all = append(traceOf(rec, id), col.of(id.String())...)
		// The coordinator's first check of maria's branch, which the client
		// commits, may find it still prepared (held): a span of its own,
		// and another attempt follows.
		all = slices.DeleteFunc(all, func(s span) bool { return s.attrs["tandem.result"] == "held" })
		// On a busy machine the client's commit of maria's session-bound
		// branch and the coordinator's phase 2 can meet the other way round:
		// the coordinator then commits it itself (and the client's commit
		// finds it done). Either settles it; the tree is the same.
		for _, s := range all {
			if s.side == "coordinator" && s.name == "tandem.coordinator.phase2" && s.attrs["tandem.rm"] == "maria" && s.attrs["tandem.action"] == "commit" {
				s.attrs["tandem.action"] = "check"
			}
		}
		if got := tree(all, false); got == want {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("coordinator-decided transaction's trace (client and coordinator):\n%s\nwant:\n%s\ncoordinator output:\n%s", got, want, c.out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, s := range all {
		if s.side == "coordinator" && s.attrs["service.name"] != "tandem-coordinator" {
			t.Errorf("coordinator span %s: service.name %q, want tandem-coordinator", s.name, s.attrs["service.name"])
		}
		if s.name == "tandem.coordinator.Commit" && s.attrs["tandem.gtrid"] != tx2.GTRID().String() {
			t.Errorf("coordinator's Commit span: tandem.gtrid %q, want %s", s.attrs["tandem.gtrid"], tx2.GTRID())
		}
	}
	t.Logf("trace of a coordinator-decided transaction:\n%s", tree(all, true))
	if n := len(col.of(req.SpanContext().TraceID().String())); n != 0 {
		t.Errorf("the coordinator exported %d spans in the commit-point transaction's trace (it made no decision there)", n)
	}
}

// An in-process coordinator with its own in-memory exporter: its spans
// join the client's trace (same trace id, the Commit span's parent is the
// client's tandem.decision; Status's is the application's span), and a
// client without a tracer provider sends no trace context, so the
// coordinator makes no span for it.
func TestTraceJoinsClientAndInProcessCoordinator(t *testing.T) {
	d := openDBs(t)
	d.table(t, "e2e_trace_inproc")
	srvRec := tracetest.NewSpanRecorder()
	srvTP := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(srvRec))
	srv, err := server.Start(config.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(),
		RMs: map[string]config.RM{"pg": {Driver: "postgres", DSN: pgDSN}, "maria": {Driver: "mysql", DSN: myDSN}}},
		server.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), NoSync: true, TracerProvider: srvTP})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(5 * time.Second)
	cli, rec := tracedClient(t, srv.Addr(), d)
	pgConn, myConn := conns(t, d)
	app := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("app")
	ctx, req := app.Start(context.Background(), "request")
	tx, _ := writeAndCommit(t, cli, ctx, "e2e_trace_inproc", 1, pgConn, myConn, client.DecideAtCoordinator)
	if _, err := cli.Status(ctx, tx.GTRID(), false); err != nil {
		t.Fatal(err)
	}
	req.End()

	var decision, txSpan span
	for _, s := range fromSDK("client", rec.Ended()) {
		switch s.name {
		case client.SpanDecision:
			decision = s
		case client.SpanTx:
			txSpan = s
		}
	}
	byName := map[string]span{}
	eventually(t, 5*time.Second, "the coordinator's phase-2 spans", func() bool {
		clear(byName)
		for _, s := range fromSDK("coordinator", srvRec.Ended()) {
			byName[s.name+"/"+s.attrs["tandem.rm"]] = s
		}
		return len(byName) == 5
	})
	commit, status := byName["tandem.coordinator.Commit/"], byName["tandem.coordinator.Status/"]
	if commit.traceID != decision.traceID || commit.parentID != decision.spanID || decision.traceID != req.SpanContext().TraceID().String() {
		t.Errorf("coordinator's Commit span: trace %s parent %s; want the client's tandem.decision: trace %s span %s",
			commit.traceID, commit.parentID, decision.traceID, decision.spanID)
	}
	if status.traceID != txSpan.traceID || status.parentID != req.SpanContext().SpanID().String() {
		t.Errorf("coordinator's Status span: trace %s parent %s; want the application's span %s of trace %s",
			status.traceID, status.parentID, req.SpanContext().SpanID(), txSpan.traceID)
	}
	for _, k := range []string{"tandem.coordinator.decision_log/", "tandem.coordinator.phase2/pg", "tandem.coordinator.phase2/maria"} {
		if s, ok := byName[k]; !ok || s.parentID != commit.spanID || s.traceID != commit.traceID {
			t.Errorf("%s: %+v, want a child of the Commit span %s", k, s, commit.spanID)
		}
	}
	all := append(traceOf(rec, req.SpanContext().TraceID()), fromSDK("coordinator", srvRec.Ended())...)
	t.Logf("one trace, client and in-process coordinator:\n%s", tree(all, false))

	// A client without a tracer provider: no traceparent, no span.
	before := len(srvRec.Ended())
	plain, err := client.New(client.Config{Coordinator: srv.Addr(), Defaults: client.CommitOptions{DecideAt: client.DecideAtCoordinator},
		RMs: []client.RM{{Name: "pg", Driver: "postgres"}, {Name: "maria", Driver: "mysql", MultiStatements: true}}})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	tx3 := plain.Begin()
	writeBoth(t, context.Background(), tx3, "e2e_trace_inproc", 3, pgConn, myConn)
	if res, err := tx3.Commit(context.Background()); err != nil || res.Path != client.PathTwoPhase {
		t.Fatalf("untraced transaction: %+v, %v", res, err)
	}
	time.Sleep(200 * time.Millisecond) // phase 2's spans, if any were made, would have ended
	if after := srvRec.Ended(); len(after) != before {
		t.Errorf("the coordinator made %d spans for an untraced client:\n%s", len(after)-before, tree(fromSDK("coordinator", after[before:]), true))
	}
}
