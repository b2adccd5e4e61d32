package e2e

import (
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// A decision log written by a newer Tandem (a higher format version in a
// segment header, with a valid checksum) stops the start with an error that
// says so and names the file; nothing is changed on disk.
func TestLogFromANewerVersionIsRefused(t *testing.T) {
	c := startCoordinator(t, coordOpts{})
	c.stop()
	segs, _ := filepath.Glob(filepath.Join(c.dataDir, "log", "*.wal"))
	sort.Strings(segs)
	if len(segs) == 0 {
		t.Fatal("no segment")
	}
	data, err := os.ReadFile(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	// Segment header record: 8-byte frame header, then magic(8) version(2) flags(2) seq(8).
	n := int(data[4]) | int(data[5])<<8 | int(data[6])<<16
	binary.LittleEndian.PutUint16(data[8+8:], 99)
	seq := binary.LittleEndian.Uint64(data[8+12:])
	var seed [8]byte
	binary.LittleEndian.PutUint64(seed[:], seq)
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	h.Write(seed[:])
	h.Write(data[4:8])
	h.Write(data[8 : 8+n])
	binary.LittleEndian.PutUint32(data[0:4], h.Sum32())
	if err := os.WriteFile(segs[0], data, 0o600); err != nil {
		t.Fatal(err)
	}
	out, code := serveOnce(t, "--data-dir", c.dataDir, "--rm", "pg=postgres:"+pgDSN)
	if code == 0 || !strings.Contains(out, "newer") || !strings.Contains(out, filepath.Base(segs[0])) {
		t.Fatalf("log from a newer version: exit %d, output:\n%s", code, out)
	}
	after, _ := os.ReadFile(segs[0])
	if string(after) != string(data) {
		t.Fatal("the refused start changed the segment file")
	}
	assertNoStackTrace(t, out)
}

// A data directory that cannot be created or written stops the start with a
// message naming it.
func TestUnusableDataDirIsReported(t *testing.T) {
	file := filepath.Join(t.TempDir(), "plain-file")
	os.WriteFile(file, []byte("x"), 0o600)
	dir := filepath.Join(file, "data")
	out, code := serveOnce(t, "--data-dir", dir, "--rm", "pg=postgres:"+pgDSN)
	if code == 0 || !strings.Contains(out, dir) || !strings.Contains(out, "not a directory") {
		t.Fatalf("unusable data dir: exit %d, output:\n%s", code, out)
	}
	assertNoStackTrace(t, out)
}
