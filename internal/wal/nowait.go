package wal

// AppendNoWait queues one record and returns at once, without waiting for it
// to be written. The record goes out with the next group commit, so it is
// durable once any later Append returns. Use it for records whose loss a
// restart repairs by itself (the coordinator's END records). payload must not
// be modified after the call. Errors are those of Append that need no write.
//
// A batch made only of such records is written without fdatasync; the next
// Append's fdatasync, the next rotation or Close makes it durable. If its
// write fails, the log fails as for Append and Err says why.
func (l *Log) AppendNoWait(typ Type, payload []byte) (Position, error) {
	if err := l.check(typ, payload); err != nil {
		return Position{}, err
	}
	r := requestPool.Get().(*request) // the writer puts it back
	r.typ, r.payload, r.noWait = typ, payload, true
	if err := l.enqueue(r); err != nil {
		r.reset()
		return Position{}, err
	}
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
