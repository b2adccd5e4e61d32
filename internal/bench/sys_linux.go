package bench

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// fdatasync is what the log's File.Sync does on Linux.
func fdatasync(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
		}
		return nil
	}
}

// createPreallocated creates path and preallocates size bytes the way the
// log preallocates a segment.
func createPreallocated(path string, size int64) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	err = unix.Fallocate(int(f.Fd()), 0, 0, size)
	if err == unix.EOPNOTSUPP || err == unix.ENOSYS {
		err = f.Truncate(size)
	}
	if err == nil {
		err = fdatasync(f)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("preallocate %s: %w", path, err)
	}
	return f, nil
}
