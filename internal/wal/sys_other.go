//go:build !linux

package wal

import (
	"errors"
	"os"

	"github.com/tandem-tx/tandem/internal/fileutil"
)

var errNoFallocate = errors.New("fallocate not supported")

func fdatasync(f *os.File) error { return fileutil.Fdatasync(f) }

func fallocate(File, int64) error { return errNoFallocate }

// lockDir only creates dir/LOCK: advisory locking is implemented on Linux.
func lockDir(dir string) (*os.File, error) {
	return os.OpenFile(dir+string(os.PathSeparator)+lockName, os.O_CREATE|os.O_RDWR, filePerm)
}
