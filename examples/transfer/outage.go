package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"
)

// outageLine is the SDK's logger for the demo: the SDK warns while it
// retries an unreachable coordinator (every worker, about once a second
// each); the demo prints one line a second at most, so that its progress
// never just stops during an outage:
//
//	transfer: coordinator unreachable at 127.0.0.1:7070, retrying (3s)
type outageLine struct {
	mu    *sync.Mutex
	w     io.Writer
	last  *time.Time
	every time.Duration
}

func newOutageLine(w io.Writer) slog.Handler {
	return outageLine{mu: new(sync.Mutex), w: w, last: new(time.Time), every: time.Second}
}

func (h outageLine) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h outageLine) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h outageLine) WithGroup(string) slog.Handler                { return h }

func (h outageLine) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r.Time.Sub(*h.last) < h.every {
		return nil
	}
	*h.last = r.Time
	line := "transfer: " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "for" {
			line += " (" + a.Value.String() + ")"
		}
		return true
	})
	_, err := fmt.Fprintln(h.w, line)
	return err
}
