package wal

import (
	"os"
	"path/filepath"
)

// pipeline prepares the next segment in the background while the writer
// fills the current one, so that rotation costs a rename and a directory
// fsync, not a file creation and a preallocation. Model: etcd's
// file_pipeline.go. Its goroutine is stopped by close.
type pipeline struct {
	dir    string
	size   int64
	noSync bool
	open   OpenFunc

	next   chan prepared // unbuffered: at most one segment waits, plus the one in the making
	stop   chan struct{}
	exited chan struct{}
	err    error // first failure, kept by the writer (the only caller of take)
}

type prepared struct {
	f   File
	seq uint64
	err error
}

func startPipeline(dir string, size int64, noSync bool, open OpenFunc, seq uint64) *pipeline {
	p := &pipeline{
		dir: dir, size: size, noSync: noSync, open: open,
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
		f, err := createSegment(p.open, p.dir, seq, p.size, p.noSync, p.stop)
		select {
		case p.next <- prepared{f: f, seq: seq, err: err}:
			if err != nil {
				return
			}
			seq++
		case <-p.stop:
			if f != nil {
				f.Close()
				os.Remove(filepath.Join(p.dir, tmpName(seq)))
			}
			return
		}
	}
}

// take returns the prepared segment seq, waiting for it if it is not ready.
// It must not be called after close.
func (p *pipeline) take(seq uint64) (File, error) {
	if p.err != nil {
		return nil, p.err
	}
	r := <-p.next
	if r.err == nil && r.seq != seq {
		r.f.Close()
		r.err = errPipelineOrder
	}
	if r.err != nil {
		p.err = r.err
		return nil, r.err
	}
	return r.f, nil
}

// close stops the goroutine and deletes a segment it prepared but nobody
// took.
func (p *pipeline) close() {
	close(p.stop)
	<-p.exited
}
