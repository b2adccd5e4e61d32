package coord

import (
	"context"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// A Commit under a span that records: the decision record's write and each
// phase-2 attempt are its children (here every attempt fails: nothing
// listens where the RMs are); a Commit under no span makes none.
func TestSpansOfATracedCommit(t *testing.T) {
	c := open(t, testOptions(t.TempDir()))
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())

	if _, err := c.Commit(short(t), newGTRID(), both, CommitMode{}); err != nil {
		t.Fatal(err)
	}
	ctx, call := tp.Tracer("test").Start(short(t), "call")
	if _, err := c.Commit(ctx, newGTRID(), both, CommitMode{}); err != nil {
		t.Fatal(err)
	}
	call.End()
	var log sdktrace.ReadOnlySpan
	phase2 := map[string]sdktrace.ReadOnlySpan{}
	deadline := time.Now().Add(5 * time.Second)
	for len(phase2) < 2 && time.Now().Before(deadline) {
		for _, s := range rec.Ended() {
			switch s.Name() {
			case SpanDecisionLog:
				log = s
			case SpanPhase2:
				for _, kv := range s.Attributes() {
					if kv.Key == attrRM {
						phase2[kv.Value.AsString()] = s
					}
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if log == nil || log.Parent().SpanID() != call.SpanContext().SpanID() ||
		!slices.Contains(log.Attributes(), attrDurable.Bool(true)) || !slices.Contains(log.Attributes(), attrOutcome.String("committed")) {
		t.Fatalf("decision log span %v, want a child of the call's span, durable, committed", log)
	}
	for _, name := range []string{"pg", "maria"} {
		s := phase2[name]
		if s == nil {
			t.Fatalf("no phase-2 span for %s", name)
		}
		if s.Parent().SpanID() != call.SpanContext().SpanID() || s.SpanContext().TraceID() != call.SpanContext().TraceID() {
			t.Errorf("phase-2 span of %s is not a child of the call's span", name)
		}
		for _, kv := range []struct {
			k, v string
		}{{"tandem.action", "commit"}, {"tandem.result", "failed"}} {
			if !slices.Contains(s.Attributes(), attrRM.String(name)) || !hasAttr(s, kv.k, kv.v) {
				t.Errorf("phase-2 span of %s: %v, want %s=%s", name, s.Attributes(), kv.k, kv.v)
			}
		}
		if s.Status().Code != codes.Error {
			t.Errorf("phase-2 span of %s: status %v, want Error (the RM is down)", name, s.Status())
		}
	}
	for _, s := range rec.Ended() {
		if s.SpanContext().TraceID() != call.SpanContext().TraceID() {
			t.Errorf("span %s outside the traced call's trace: the untraced Commit made it", s.Name())
		}
	}
}

func hasAttr(s sdktrace.ReadOnlySpan, k, v string) bool {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == k && kv.Value.String() == v {
			return true
		}
	}
	return false
}
