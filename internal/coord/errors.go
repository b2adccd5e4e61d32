package coord

import (
	"errors"
	"fmt"
)

var (
	// ErrAlreadyCommitted answers Abort for a gtrid whose COMMIT was decided first.
	ErrAlreadyCommitted = errors.New("coord: already committed")
	// ErrClosed means the coordinator is shutting down.
	ErrClosed = errors.New("coord: coordinator is shutting down")
	// ErrOutcomeUnknown means the decision record could not be written durably.
	// It may or may not be on disk; the coordinator takes no more decisions
	// until it is restarted and replays its log.
	ErrOutcomeUnknown = errors.New("coord: decision outcome unknown")
)

// InputError is a request the coordinator refuses without writing anything.
type InputError struct {
	Field  string
	Reason string
}

func (e *InputError) Error() string { return "coord: invalid " + e.Field + ": " + e.Reason }

func inputErr(field, format string, args ...any) error {
	return &InputError{Field: field, Reason: fmt.Sprintf(format, args...)}
}
