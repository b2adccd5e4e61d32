//go:build !linux

package bench

import (
	"fmt"
	"os"
)

func fdatasync(f *os.File) error { return f.Sync() }

// createPreallocated creates path and sets its size and writes zeros over
// it, as the log prepares a segment where it cannot fallocate.
func createPreallocated(path string, size int64) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	err = f.Truncate(size)
	zeros := make([]byte, min(size, 1<<20))
	for off := int64(0); off < size && err == nil; off += int64(len(zeros)) {
		_, err = f.WriteAt(zeros[:min(int64(len(zeros)), size-off)], off)
	}
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("preallocate %s: %w", path, err)
	}
	return f, nil
}
