package wal

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

var errNoFallocate = errors.New("fallocate not supported")

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
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		if err == unix.EWOULDBLOCK {
			return nil, fmt.Errorf("wal: log directory %s is in use by another Log (held by this or another process): %w", dir, ErrLocked)
		}
		return nil, fmt.Errorf("wal: lock %s: %w", path, err)
	}
	return f, nil
}
