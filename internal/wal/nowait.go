package wal

import "fmt"

// AppendNoWait queues one record and returns at once, without waiting for it
// to be written. The record goes out with the next group commit, so it is
// durable once any later Append returns. Use it for records whose loss a
// restart repairs by itself (the coordinator's END records). payload must not
// be modified after the call. Errors are those of Append that need no write.
func (l *Log) AppendNoWait(typ Type, payload []byte) (Position, error) {
	if typ == typeEnd || typ == typeSegmentHeader {
		return Position{}, fmt.Errorf("%w %d: types 0 and 255 are reserved", ErrInvalidType, typ)
	}
	if max := l.maxPayload(); len(payload) > max {
		return Position{}, fmt.Errorf("%w: %d-byte payload, at most %d", ErrRecordTooLarge, len(payload), max)
	}
	if werr := l.failed.Load(); werr != nil {
		return Position{}, &appendError{kind: ErrLogFailed, cause: werr}
	}
	// Not pooled: nobody waits to put it back.
	r := &request{typ: typ, payload: payload, done: make(chan struct{}, 1)}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return Position{}, ErrClosed
	}
	l.reqs <- r
	return Position{}, nil
}

// Err returns the failure that made the log unusable, or nil while it can
// still take records.
func (l *Log) Err() error {
	if w := l.failed.Load(); w != nil {
		return w
	}
	return nil
}
