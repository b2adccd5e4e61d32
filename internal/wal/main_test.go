package wal

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind (a writer
// or pipeline that Close did not stop).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// rec is a replayed or appended record.
type rec struct {
	pos     Position
	typ     Type
	payload []byte
}

func (r rec) String() string { return fmt.Sprintf("%s type %d %d bytes", r.pos, r.typ, len(r.payload)) }

// openLog opens a log and returns it with the records replayed.
func openLog(t testing.TB, opts Options) (*Log, []rec) {
	t.Helper()
	var got []rec
	l, err := Open(opts, func(pos Position, typ Type, payload []byte) error {
		got = append(got, rec{pos, typ, bytes.Clone(payload)})
		return nil
	})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return l, got
}

// reopen closes l and opens the log again, returning the replayed records.
func reopen(t testing.TB, l *Log, opts Options) (*Log, []rec) {
	t.Helper()
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	return openLog(t, opts)
}

// payloadFor returns a deterministic n-byte payload for record i whose last
// byte is never zero, so that zeroing any part of it changes the record.
func payloadFor(i, n int) []byte {
	p := make([]byte, n)
	for j := range p {
		p[j] = byte(i*31 + j*7 + 1)
	}
	if n > 0 && p[n-1] == 0 {
		p[n-1] = 1
	}
	return p
}

func mustAppend(t testing.TB, l *Log, typ Type, payload []byte) rec {
	t.Helper()
	pos, err := l.Append(typ, payload)
	if err != nil {
		t.Fatalf("Append(type %d, %d bytes): %v", typ, len(payload), err)
	}
	return rec{pos, typ, bytes.Clone(payload)}
}

// sameRecords fails t unless got and want hold the same records in order.
func sameRecords(t testing.TB, got, want []rec) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("replayed %d records, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.pos != w.pos || g.typ != w.typ || !bytes.Equal(g.payload, w.payload) {
			t.Fatalf("record %d: got %v, want %v", i, g, w)
		}
	}
}

func segPath(dir string, seq uint64) string { return filepath.Join(dir, segmentName(seq)) }

// patchFile overwrites part of a file.
func patchFile(t testing.TB, path string, off int64, data []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(data, off); err != nil {
		t.Fatal(err)
	}
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, filePerm); err != nil {
		t.Fatal(err)
	}
}
