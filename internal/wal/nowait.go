package wal

// AppendNoWait queues one record and returns at once, without waiting for it
// to be written. The record goes out with the next group commit, so it is
// durable once any later Append or Sync returns (or after Close). Use it for
// records whose loss a restart repairs by itself (the coordinator's END
// records). payload must not be modified after the call. The returned
// Position is a lower bound, as for AppendAsync. Errors are those of Append
// that need no write.
//
// A batch made only of such records is written without fdatasync: the next
// Append's, AppendAsync's or Sync's fdatasync, the next rotation or Close
// makes it durable; until then only the kernel's own writeback does. If its
// write fails, the log fails as for Append and Err says why.
func (l *Log) AppendNoWait(typ Type, payload []byte) (Position, error) {
	return l.appendUnwaited(modeNoWait, typ, payload)
}

// AppendAsync queues one record and returns at once, like AppendNoWait, but
// the writer also fdatasyncs it even when no other record asks for it: it is
// written and fdatasynced with the next group commit, at once in immediate
// mode, at most BatchWindow after the call in batch mode (plus the time to
// write the batches queued before it). Nobody is told when that happened;
// Sync waits for it.
//
// It is for decisions under durability nowait, acknowledged before they
// are durable. What that risks: a crash of the process or the machine
// between AppendAsync and the fdatasync loses the record, and the
// coordinator restarts without it. A failed write or fdatasync fails the
// log (Err) and the record's fate is unknown, as for Append's
// ErrOutcomeUnknown. Atomicity is safe only if nothing acts on the record
// before it is durable: call Sync before phase 2 tells any participant about
// a COMMIT written this way.
//
// payload must not be modified after the call. The writer places the
// record later, so the returned Position is only a lower bound: its Segment
// is the segment being written when the record was queued (the record goes
// there or into a later one) and its Offset is 0. Errors are those of
// Append that need no write.
func (l *Log) AppendAsync(typ Type, payload []byte) (Position, error) {
	return l.appendUnwaited(modeAsync, typ, payload)
}

func (l *Log) appendUnwaited(m mode, typ Type, payload []byte) (Position, error) {
	if err := l.check(typ, payload); err != nil {
		return Position{}, err
	}
	r := requestPool.Get().(*request) // the writer puts it back
	r.typ, r.payload, r.mode = typ, payload, m
	seg := l.segment.Load() // before the record is queued: a lower bound
	if err := l.enqueue(r); err != nil {
		r.reset()
		return Position{}, err
	}
	return Position{Segment: seg}, nil
}

// Sync returns once every record queued before it was called is durable:
// those of every Append, AppendNoWait and AppendAsync call that returned
// before Sync was called, from any goroutine. It writes no record. Its
// fdatasync is shared with the other requests of its batch, and it costs
// none when everything written is already synced; in batch mode it waits for
// the window like Append.
//
// Errors: ErrClosed; ErrLogFailed (an earlier failure: what was queued
// before may or may not be durable); ErrOutcomeUnknown (the fdatasync, or
// the write of a batch it joined, failed).
func (l *Log) Sync() error {
	if werr := l.failed.Load(); werr != nil {
		return &appendError{kind: ErrLogFailed, cause: werr}
	}
	r := requestPool.Get().(*request)
	r.mode = modeSync
	if err := l.enqueue(r); err != nil {
		r.reset()
		return err
	}
	<-r.done
	err := r.err
	r.reset()
	return err
}

// Err returns the failure that made the log unusable, or nil while it can
// still take records.
func (l *Log) Err() error {
	if w := l.failed.Load(); w != nil {
		return w
	}
	return nil
}

// Switch closes the current segment (synced, as at any rotation) once every
// record queued before the call is written, so that the next record goes
// into a new one; it does nothing when the current segment holds no record.
// It returns the position where the next record will go. The standby's arch
// transport ships only completed segments: a primary forces a switch to
// bound how long a decision waits for its segment to be shipped.
func (l *Log) Switch() (Position, error) {
	if werr := l.failed.Load(); werr != nil {
		return Position{}, &appendError{kind: ErrLogFailed, cause: werr}
	}
	r := requestPool.Get().(*request)
	r.mode = modeSwitch
	if err := l.enqueue(r); err != nil {
		r.reset()
		return Position{}, err
	}
	<-r.done
	pos, err := r.pos, r.err
	r.reset()
	return pos, err
}
