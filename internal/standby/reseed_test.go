package standby

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// Each re-seed moves the old log aside; a standby re-seeded at every
// switchover must not fill its disk with them: only the newest
// KeepReseeded directories stay.
func TestReseedKeepsOnlyTheNewestCopies(t *testing.T) {
	dir := t.TempDir()
	var moved []string
	for i := 0; i < 5; i++ {
		if err := os.WriteFile(filepath.Join(dir, IdentityFile), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		to, err := Reseed(dir)
		if err != nil {
			t.Fatalf("Reseed %d: %v", i, err)
		}
		moved = append(moved, filepath.Base(to))
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "reseeded-") {
			left = append(left, e.Name())
		}
	}
	sort.Strings(left)
	want := moved[len(moved)-KeepReseeded:]
	if strings.Join(left, ",") != strings.Join(want, ",") {
		t.Fatalf("after 5 re-seeds the data directory keeps %v, want the newest %d: %v", left, KeepReseeded, want)
	}
}
