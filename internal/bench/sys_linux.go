package bench

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/tandem-tx/tandem/internal/fileutil"
)

// fdatasync is what the log's File.Sync does on Linux.
func fdatasync(f *os.File) error { return fileutil.Fdatasync(f) }

// createPreallocated creates path and preallocates size bytes the way the
// log prepares a segment: fallocate (or ftruncate where the file system
// cannot), then zeros written over the whole file, then fdatasync, so that
// the records overwrite written blocks.
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
		err = writeZeros(f, size)
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

func writeZeros(f *os.File, size int64) error {
	zeros := make([]byte, min(size, 1<<20))
	for off := int64(0); off < size; off += int64(len(zeros)) {
		if _, err := f.WriteAt(zeros[:min(int64(len(zeros)), size-off)], off); err != nil {
			return err
		}
	}
	return nil
}
