package addrhint

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckAPIAddr(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:7070":     "",
		"dns:///coord:7070":  "",
		"unix:///tmp/t.sock": "",
		"localhost":          `did you mean "localhost:7070"`,
		"10.0.0.5":           `did you mean "10.0.0.5:7070"`,
		"[::1]":              `did you mean "[::1]:7070"`,
		"a:b:c":              "want HOST:PORT",
	} {
		err := CheckAPIAddr(addr)
		if (err == nil) != (want == "") || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("CheckAPIAddr(%q) = %v, want %q", addr, err, want)
		}
	}
}

func TestExplain(t *testing.T) {
	http1 := errors.New(`rpc error: code = Unavailable desc = connection error: desc = "error reading server preface: http2: failed reading the frame payload: http2: frame too large, note that the frame header looked like an HTTP/1.1 header"`)
	if h := Explain("127.0.0.1:7071", http1); !strings.Contains(h, "admin listener") || !strings.Contains(h, "127.0.0.1:7070") {
		t.Errorf("Explain(HTTP/1 answer) = %q", h)
	}
	if h := Explain("coord", errors.New("dial tcp 127.0.0.1:443: connect: connection refused")); !strings.Contains(h, "lacks its port") {
		t.Errorf("Explain(:443) = %q", h)
	}
	if h := Explain("x:1", errors.New("connection refused")); h != "" {
		t.Errorf("Explain(plain refusal) = %q, want nothing", h)
	}
	if err := Wrap("x:1", http1); !errors.Is(err, http1) {
		t.Errorf("Wrap lost the cause")
	}
	for s, want := range map[string]bool{"127.0.0.1:7070": true, "coord.example:7070": true, "[::1]:7070": true,
		"0000019a8f3c2b1e5d0c7a9b3e41f2aa": false, "abc": false} {
		if LooksLikeAddr(s) != want {
			t.Errorf("LooksLikeAddr(%q) = %v", s, !want)
		}
	}
}
