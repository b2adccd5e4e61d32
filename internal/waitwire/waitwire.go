// Package waitwire is how the coordinator hands its waits of one traced
// Commit back to the client: the gRPC metadata keys and the encoding of the
// spans. It is a detail of the protocol between the SDK and the coordinator,
// kept out of the public waits package.
//
// The client sends api.MetadataTrace ("1") with a Commit; the coordinator
// answers with its waits for that gtrid, Encode'd, in the trailer
// api.MetadataTraceTrailer. Times travel as nanoseconds since the Unix
// epoch, so that they line up with the client's clock on one machine; across
// machines, clock skew shifts them.
package waitwire

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/tandem-tx/tandem/waits"
)

type wireSpan struct {
	Side   string `json:"s"`
	Event  string `json:"e"`
	Detail string `json:"d,omitempty"`
	Start  int64  `json:"t"`
	Dur    int64  `json:"n"`
}

// Encode encodes spans for the coordinator's reply to a traced Commit.
func Encode(spans []waits.Span) []byte {
	w := make([]wireSpan, len(spans))
	for i, s := range spans {
		w[i] = wireSpan{s.Side, s.Event.String(), s.Detail, s.Start.UnixNano(), int64(s.Dur)}
	}
	b, _ := json.Marshal(w) // plain strings and integers: cannot fail
	return b
}

// Decode decodes Encode's output. Spans of events this process does not know
// are skipped rather than defined, so that a coordinator cannot grow the
// client's event table.
func Decode(b []byte) ([]waits.Span, error) {
	var w []wireSpan
	if err := json.Unmarshal(b, &w); err != nil {
		return nil, fmt.Errorf("waitwire: bad trace from the coordinator: %w", err)
	}
	out := make([]waits.Span, 0, len(w))
	for _, s := range w {
		e, ok := waits.Lookup(s.Event)
		if !ok {
			continue
		}
		out = append(out, waits.Span{Side: s.Side, Event: e, Detail: s.Detail, Start: time.Unix(0, s.Start), Dur: time.Duration(s.Dur)})
	}
	return out, nil
}
