//go:build !linux

package fileutil

import "os"

// Fdatasync flushes f to stable storage (fsync where fdatasync is not
// available).
func Fdatasync(f *os.File) error { return f.Sync() }

// TryLock does nothing: advisory locking is implemented on Linux only.
func TryLock(*os.File) error { return nil }
