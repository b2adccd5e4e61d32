package wal

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/tandem-tx/tandem/internal/fileutil"
)

var errNoFallocate = errors.New("fallocate not supported")

func fdatasync(f *os.File) error { return fileutil.Fdatasync(f) }

func fallocate(f File, size int64) error {
	for {
		err := unix.Fallocate(int(f.Fd()), 0, 0, size)
		switch err {
		case nil:
			return nil
		case unix.EINTR:
			continue
		case unix.EOPNOTSUPP, unix.ENOSYS:
			return errNoFallocate
		default:
			return fmt.Errorf("fallocate: %w", err)
		}
	}
}

// lockDir takes an exclusive advisory lock on dir/LOCK so that two
// coordinators (or two Logs in one process) never write the same log.
func lockDir(dir string) (*os.File, error) {
	path := dir + string(os.PathSeparator) + lockName
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, filePerm)
	if err != nil {
		return nil, fmt.Errorf("wal: lock log directory: %w", err)
	}
	if err := fileutil.TryLock(f); err != nil {
		f.Close()
		if errors.Is(err, fileutil.ErrLocked) {
			return nil, fmt.Errorf("wal: log directory %s is in use by another Log (held by this or another process): %w", dir, ErrLocked)
		}
		return nil, fmt.Errorf("wal: lock %s: %w", path, err)
	}
	return f, nil
}
