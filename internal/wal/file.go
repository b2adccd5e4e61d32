package wal

import (
	"io"
	"os"
)

// File is the part of *os.File the log uses. Sync must make written data
// durable (fdatasync is enough). It exists so that tests can inject faults
// through Options.OpenFile.
type File interface {
	io.Writer
	io.WriterAt
	io.ReaderAt
	Sync() error // fdatasync
	Truncate(size int64) error
	Close() error
	Name() string
	Fd() uintptr
}

// OpenFunc opens a file like os.OpenFile.
type OpenFunc = func(name string, flag int, perm os.FileMode) (File, error)

// osFile is the default File: an *os.File whose Sync is fdatasync where the
// platform has it.
type osFile struct{ *os.File }

func (f osFile) Sync() error { return fdatasync(f.File) }

func openOSFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}
