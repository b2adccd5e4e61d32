package wal

import (
	"errors"
	"fmt"
)

// Sentinel errors. Test for them with errors.Is.
var (
	// ErrClosed is returned by Append after Close.
	ErrClosed = errors.New("wal: log is closed")

	// ErrRecordTooLarge is returned by Append for a payload that cannot fit
	// in one record: more than MaxPayloadSize bytes, or more than fits in an
	// empty segment of the configured SegmentSize.
	ErrRecordTooLarge = errors.New("wal: record too large")

	// ErrInvalidType is returned by Append for the reserved record types 0
	// and 255.
	ErrInvalidType = errors.New("wal: invalid record type")

	// ErrCorrupt matches every *CorruptionError.
	ErrCorrupt = errors.New("wal: decision log is damaged")

	// ErrOutcomeUnknown is returned to an Append whose record was handed to
	// the operating system but whose write or fdatasync failed: the record
	// may or may not be in the log. The coordinator must restart and replay
	// the log to learn whether it is. Never treat it as a failure to write.
	ErrOutcomeUnknown = errors.New("wal: record may or may not be durable")

	// ErrLogFailed is returned by every Append after a write, fdatasync or
	// segment rotation failed. The record was not written. The log stays
	// failed until it is closed and opened again, which replays it.
	ErrLogFailed = errors.New("wal: log is unusable after a write failure")

	// ErrLocked is returned by Open when another Log holds the directory.
	ErrLocked = errors.New("wal: log directory is locked")
)

// errStopped ends the preparation of a segment that Close made useless.
var errStopped = errors.New("wal: segment preparation stopped by Close")

// errPipelineOrder is an internal bug: the pipeline prepared another
// segment than the writer expected.
var errPipelineOrder = errors.New("wal: internal error: prepared segment out of order")

// CorruptionError reports damage that is not a torn tail: a bad record in a
// segment other than the last, a bad record followed by a valid one, a bad
// segment header, or a missing segment. Open returns it and does not modify
// the log. It matches ErrCorrupt with errors.Is.
type CorruptionError struct {
	File   string // segment file (for a missing segment: the name it should have)
	Offset int64  // byte offset of the bad record in File
	Reason string // what is wrong, e.g. "checksum mismatch"
}

func (e *CorruptionError) Error() string {
	return fmt.Sprintf("wal: decision log is damaged in the middle at %s offset %d (%s): "+
		"do not delete or truncate it; restore the log directory from the standby or a backup, "+
		"then start the coordinator again", e.File, e.Offset, e.Reason)
}

// Unwrap makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptionError) Unwrap() error { return ErrCorrupt }

// VersionError is returned by Open for a segment written in a log format
// newer than this build understands.
type VersionError struct {
	File    string
	Version uint16 // format version found in File
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("wal: %s was written by a newer Tandem (log format version %d, this build reads up to %d): "+
		"run that Tandem version or newer on this log", e.File, e.Version, formatVersion)
}

// WriteError describes a failed write, fdatasync or rotation of a segment.
// Errors returned by Append after a failure wrap it; errors.As reaches it
// and errors.Is reaches its cause (for example syscall.ENOSPC).
type WriteError struct {
	Op     string // "write", "fdatasync" or "rotate"
	File   string // for "rotate", the segment that could not be started
	Offset int64  // where the failed write started
	Err    error
}

func (e *WriteError) Error() string {
	if e.Op == "rotate" {
		return fmt.Sprintf("rotate to %s: %v", e.File, e.Err)
	}
	return fmt.Sprintf("%s %s at offset %d: %v", e.Op, e.File, e.Offset, e.Err)
}

func (e *WriteError) Unwrap() error { return e.Err }

// appendError is what Append returns after a write failure: kind is
// ErrOutcomeUnknown or ErrLogFailed, cause the failure.
type appendError struct {
	kind  error
	cause *WriteError
}

func (e *appendError) Error() string {
	if e.kind == ErrOutcomeUnknown {
		return fmt.Sprintf("%v: %v; restart the coordinator so that it replays the log and learns the outcome",
			ErrOutcomeUnknown, e.cause)
	}
	return fmt.Sprintf("%v (%v); restart the coordinator so that it replays the log", ErrLogFailed, e.cause)
}

func (e *appendError) Unwrap() []error { return []error{e.kind, e.cause} }
