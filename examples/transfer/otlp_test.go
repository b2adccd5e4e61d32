package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/tandem-tx/tandem/client"
)

// receiver is an OTLP/gRPC trace receiver that keeps, for each span, its
// service, name, trace id, id and parent id.
type receiver struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []struct{ service, name, trace, id, parent string }
}

func (r *receiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, struct{ service, name, trace, id, parent string }{service, s.GetName(),
					hex.EncodeToString(s.GetTraceId()), hex.EncodeToString(s.GetSpanId()), hex.EncodeToString(s.GetParentSpanId())})
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// --otlp-endpoint: every transfer is a trace sent over OTLP — the
// application's "transfer" span, the transaction's span under it, and,
// decided by the in-process coordinator, the coordinator's Commit span
// (service tandem-coordinator) under the client's decision span.
func TestTransferExportsTraces(t *testing.T) {
	cfg := dbConfig(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{}
	s := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(s, r)
	go func() { _ = s.Serve(lis) }()
	defer s.Stop()

	cfg.Workers, cfg.Transfers, cfg.Accounts, cfg.DataDir = 2, 10, 20, t.TempDir()
	cfg.Prefix = fmt.Sprintf("o%d_", os.Getpid())
	t.Cleanup(func() { dropTables(t, cfg.Prefix) })
	cfg.PGName, cfg.MariaName = fmt.Sprintf("opg%d", os.Getpid()), fmt.Sprintf("omaria%d", os.Getpid())
	cfg.DecideAt, cfg.OTLPEndpoint = client.DecideAtCoordinator, lis.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := Run(ctx, cfg, io.Discard); err != nil {
		t.Fatal(err)
	}
	// Run shut the providers down: every span was sent before it returned.
	r.mu.Lock()
	defer r.mu.Unlock()
	byID := map[string]struct{ service, name, trace, id, parent string }{}
	count := map[string]int{}
	for _, sp := range r.spans {
		byID[sp.id] = sp
		count[sp.service+" "+sp.name]++
	}
	for _, k := range []string{"transfer transfer", "transfer " + client.SpanTx, "transfer " + client.SpanDecision, "tandem-coordinator tandem.coordinator.Commit"} {
		if count[k] < cfg.Transfers {
			t.Errorf("%d spans %q, want at least %d (one per committed transfer); all: %v", count[k], k, cfg.Transfers, count)
		}
	}
	for _, sp := range r.spans {
		switch sp.name {
		case client.SpanTx:
			if p := byID[sp.parent]; p.name != "transfer" || p.trace != sp.trace {
				t.Errorf("tandem.tx's parent is %q, want the application's transfer span", p.name)
			}
		case "tandem.coordinator.Commit":
			if p := byID[sp.parent]; p.name != client.SpanDecision || p.service != "transfer" || p.trace != sp.trace {
				t.Errorf("the coordinator's Commit span's parent is %q of %q, want the client's tandem.decision", p.name, p.service)
			}
		}
	}
}
