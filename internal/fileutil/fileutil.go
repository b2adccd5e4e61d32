package fileutil

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ErrLocked is returned by TryLock when another holder has the lock.
var ErrLocked = errors.New("fileutil: locked by another holder")

// SyncDir fsyncs dir, so that entries created, removed or renamed in it
// survive a crash.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// WriteFileDurably writes body to dir/name: a temporary file, fsync,
// rename, directory fsync. A crash leaves the old file or the new one.
func WriteFileDurably(dir, name, body string, perm os.FileMode) error {
	tmp := filepath.Join(dir, name+".tmp")
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, perm)
	if err != nil {
		return err
	}
	_, err = f.WriteString(body)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err == nil {
		err = SyncDir(dir)
	}
	return err
}
