package fileutil

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

func TestWriteFileDurablyReplacesWhole(t *testing.T) {
	dir := t.TempDir()
	for _, body := range []string{"first\n", "second, longer\n"} {
		if err := WriteFileDurably(dir, "f", body, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(dir, "f"))
		if err != nil || string(got) != body {
			t.Fatalf("read %q, %v; want %q", got, err, body)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "f.tmp")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the temporary file is left: %v", err)
	}
}

func TestTryLockRefusesASecondHolder(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("advisory locks on Linux only")
	}
	path := filepath.Join(t.TempDir(), "LOCK")
	a, _ := os.Create(path)
	defer a.Close()
	b, _ := os.Open(path)
	defer b.Close()
	if err := TryLock(a); err != nil {
		t.Fatal(err)
	}
	if err := TryLock(b); !errors.Is(err, ErrLocked) {
		t.Fatalf("second TryLock = %v, want ErrLocked", err)
	}
	a.Close()
	if err := TryLock(b); err != nil {
		t.Fatalf("TryLock after the holder closed = %v", err)
	}
}

func TestFdatasyncAndSyncDir(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "x"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("x"); err != nil {
		t.Fatal(err)
	}
	if err := Fdatasync(f); err != nil {
		t.Fatal(err)
	}
	if err := SyncDir(dir); err != nil {
		t.Fatal(err)
	}
	if err := SyncDir(filepath.Join(dir, "missing")); err == nil {
		t.Error("SyncDir of a missing directory succeeded")
	}
}
