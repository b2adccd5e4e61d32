package waitwire

import (
	"testing"
	"time"

	"github.com/tandem-tx/tandem/waits"
)

func TestEncodeDecodeRoundTrips(t *testing.T) {
	base := time.Now()
	spans := []waits.Span{
		{Side: waits.SideCoordinator, Event: waits.RMCommitPrepared, Detail: "pg", Start: base, Dur: 3 * time.Millisecond},
		{Side: waits.SideClient, Event: waits.RMPrepare, Detail: "a", Start: base.Add(time.Millisecond), Dur: time.Millisecond},
	}
	back, err := Decode(Encode(spans))
	if err != nil || len(back) != len(spans) {
		t.Fatalf("round trip: %v %+v", err, back)
	}
	for i := range spans {
		if back[i].Side != spans[i].Side || back[i].Event != spans[i].Event || back[i].Detail != spans[i].Detail ||
			!back[i].Start.Equal(spans[i].Start) || back[i].Dur != spans[i].Dur {
			t.Fatalf("span %d: got %+v, want %+v", i, back[i], spans[i])
		}
	}
}

func TestDecodeSkipsUnknownEventsAndRejectsGarbage(t *testing.T) {
	spans, err := Decode([]byte(`[{"s":"coordinator","e":"no such event here","t":1,"n":2},{"s":"coordinator","e":"rm prepare","t":1,"n":2}]`))
	if err != nil || len(spans) != 1 || spans[0].Event != waits.RMPrepare {
		t.Fatalf("got %v %+v, want only the rm prepare span", err, spans)
	}
	if _, ok := waits.Lookup("no such event here"); ok {
		t.Fatal("decoding defined an unknown event")
	}
	if _, err := Decode([]byte("{not json")); err == nil {
		t.Fatal("garbage decoded without an error")
	}
}
