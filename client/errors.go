package client

import (
	"errors"
	"fmt"

	"github.com/tandem-tx/tandem/xid"
)

// Sentinel errors. Test with errors.Is.
var (
	// ErrAborted: the global transaction rolled back everywhere. Nothing of it
	// is committed. Safe to retry the whole unit of work.
	ErrAborted = errors.New("client: transaction aborted")
	// ErrOutcomeUnknown: the transaction may have committed or not, and the SDK
	// could not find out before the context ended. It is never half-committed:
	// ask the coordinator (Client.Status) later; do not redo the work blindly.
	ErrOutcomeUnknown = errors.New("client: transaction outcome unknown")
	// ErrTxDone: Commit or a statement after the transaction finished.
	ErrTxDone = errors.New("client: transaction already finished")
	// ErrBranchFailed: a statement of the branch failed earlier, so the
	// transaction can only roll back.
	ErrBranchFailed = errors.New("client: branch failed")
	// ErrUnknownRM: the resource manager name is not in the client's Config.
	ErrUnknownRM = errors.New("client: unknown resource manager")
	// ErrNoCoordinator: two or more branches wrote, but the Config names no
	// coordinator to decide them.
	ErrNoCoordinator = errors.New("client: no coordinator configured")
)

// AbortedError says why a transaction rolled back. It matches ErrAborted.
type AbortedError struct {
	GTRID  xid.GTRID
	Reason string
	Cause  error
	// stage is where the commit ended in abort (the label of the
	// tandem_client_aborts_total counter; Stage).
	stage abortStage
}

// Stage says where the commit ended in abort, in one word: one of
// AbortStages ("statement", "setup", "prepare", "commit", "decided-abort",
// "refused", "no-coordinator"; "other" when not known).
func (e *AbortedError) Stage() string {
	if e.stage == "" {
		return string(stageOther)
	}
	return string(e.stage)
}

func (e *AbortedError) Error() string {
	s := "client: transaction " + e.GTRID.String() + " aborted: " + e.Reason
	if e.Cause != nil {
		s += ": " + e.Cause.Error()
	}
	return s
}
func (e *AbortedError) Unwrap() error { return e.Cause }

// Is makes errors.Is(err, ErrAborted) true.
func (e *AbortedError) Is(target error) bool {
	return target == ErrAborted
}

// OutcomeUnknownError carries the gtrid to ask about later. It matches ErrOutcomeUnknown.
type OutcomeUnknownError struct {
	GTRID xid.GTRID
	Cause error
}

func (e *OutcomeUnknownError) Error() string {
	return fmt.Sprintf("client: outcome of transaction %s unknown (ask the coordinator: tandem status %s): %v", e.GTRID, e.GTRID, e.Cause)
}
func (e *OutcomeUnknownError) Unwrap() error { return e.Cause }

// Is makes errors.Is(err, ErrOutcomeUnknown) true.
func (e *OutcomeUnknownError) Is(target error) bool {
	return target == ErrOutcomeUnknown
}
