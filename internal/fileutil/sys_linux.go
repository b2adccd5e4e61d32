package fileutil

import (
	"os"

	"golang.org/x/sys/unix"
)

// Fdatasync flushes f's data to stable storage (fdatasync(2)), retrying
// EINTR.
func Fdatasync(f *os.File) error {
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

// TryLock takes an exclusive advisory lock on f (flock(2), LOCK_NB): it
// returns ErrLocked at once when another holder has it. The lock goes with
// the file's close.
func TryLock(f *os.File) error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		switch err {
		case nil:
			return nil
		case unix.EINTR:
			continue
		case unix.EWOULDBLOCK:
			return ErrLocked
		default:
			return &os.PathError{Op: "flock", Path: f.Name(), Err: err}
		}
	}
}
