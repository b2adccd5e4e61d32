//go:build !linux

package bench

import (
	"fmt"
	"os"
)

func fdatasync(f *os.File) error { return f.Sync() }

// createPreallocated creates path and sets its size, as the log does where
// it cannot fallocate.
func createPreallocated(path string, size int64) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return nil, fmt.Errorf("preallocate %s: %w", path, err)
	}
	return f, nil
}
