package wal

import (
	"errors"
	"os"
	"path/filepath"
)

// pipeline prepares the next segment in the background while the writer
// fills the current one, so that rotation costs a rename and a directory
// fsync, not a file creation and a preallocation. It reuses a released
// segment file when the log has one (recycleSegment) and creates a new one
// otherwise (createSegment). Model: etcd's file_pipeline.go. Its goroutine
// is stopped by close.
type pipeline struct {
	dir    string
	size   int64
	noSync bool
	open   OpenFunc
	// takeFree hands out the oldest released segment file, if any.
	takeFree func() (uint64, bool)

	next   chan prepared // unbuffered: at most one segment waits, plus the one in the making
	stop   chan struct{}
	exited chan struct{}
	err    error // first failure, kept by the writer (the only caller of take)
}

type prepared struct {
	f    File
	seq  uint64
	from uint64 // the released segment it was made from; 0 if created
	err  error
}

func startPipeline(dir string, size int64, noSync bool, open OpenFunc, takeFree func() (uint64, bool), seq uint64) *pipeline {
	p := &pipeline{
		dir: dir, size: size, noSync: noSync, open: open, takeFree: takeFree,
		next:   make(chan prepared),
		stop:   make(chan struct{}),
		exited: make(chan struct{}),
	}
	go p.run(seq)
	return p
}

func (p *pipeline) run(seq uint64) {
	defer close(p.exited)
	for {
		r := p.prepare(seq)
		select {
		case p.next <- r:
			if r.err != nil {
				return
			}
			seq++
		case <-p.stop:
			if r.f != nil {
				r.f.Close()
				tmp := filepath.Join(p.dir, tmpName(seq))
				if r.from != 0 {
					// Keep the file for the next Open to reuse. Its new
					// header is harmless: a released file's content is
					// never read.
					_ = os.Rename(tmp, filepath.Join(p.dir, freeName(r.from))) // best effort: a leftover temporary file is removed at Open
				} else {
					os.Remove(tmp)
				}
			}
			return
		}
	}
}

// prepare makes segment seq from a released file if there is one that
// works, else from a new file.
func (p *pipeline) prepare(seq uint64) prepared {
	for {
		from, ok := p.takeFree()
		if !ok {
			break
		}
		f, err := recycleSegment(p.open, p.dir, from, seq, p.size, p.noSync)
		if err == nil {
			return prepared{f: f, seq: seq, from: from}
		}
		if !errors.Is(err, errWrongSize) {
			break // the file is gone; do not try the others now
		}
	}
	f, err := createSegment(p.open, p.dir, seq, p.size, p.noSync, p.stop)
	return prepared{f: f, seq: seq, err: err}
}

// take returns the prepared segment seq, waiting for it if it is not ready,
// and whether it is a recycled file.
// It must not be called after close.
func (p *pipeline) take(seq uint64) (File, bool, error) {
	if p.err != nil {
		return nil, false, p.err
	}
	r := <-p.next
	if r.err == nil && r.seq != seq {
		r.f.Close()
		r.err = errPipelineOrder
	}
	if r.err != nil {
		p.err = r.err
		return nil, false, r.err
	}
	return r.f, r.from != 0, nil
}

// close stops the goroutine. A segment it prepared but nobody took is
// deleted, or given back its released name if it was one.
func (p *pipeline) close() {
	close(p.stop)
	<-p.exited
}
