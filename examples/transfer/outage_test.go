package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// During an outage the demo says so once a second, however many workers
// the SDK warns for.
func TestOutageLineOncePerSecond(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(newOutageLine(&buf))
	for i := 0; i < 8; i++ { // eight workers warn at once
		log.Warn("coordinator unreachable at 127.0.0.1:7070, retrying", "gtrid", "g", "attempts", 3, "for", "2s")
	}
	log.Info("not shown")
	if got := strings.TrimSpace(buf.String()); got != "transfer: coordinator unreachable at 127.0.0.1:7070, retrying (2s)" {
		t.Fatalf("output %q", got)
	}
	h := newOutageLine(&buf).(outageLine)
	h.every = 10 * time.Millisecond
	log = slog.New(h)
	buf.Reset()
	log.Warn("coordinator unreachable at x:1, retrying", "for", "1s")
	time.Sleep(20 * time.Millisecond)
	log.Warn("coordinator unreachable at x:1, retrying", "for", "2s")
	if n := strings.Count(buf.String(), "\n"); n != 2 {
		t.Fatalf("two warnings a period apart gave %d lines: %q", n, buf.String())
	}
}
