package service

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tandem-tx/tandem/internal/coord"
	"github.com/tandem-tx/tandem/xid"
)

// TestStatusCodes pins how coord's errors reach clients: the SDK decides
// from the code whether a decision may exist (RESOURCE_EXHAUSTED: none was
// written) and shows the message to a person.
func TestStatusCodes(t *testing.T) {
	full := &coord.LogFullError{Used: 60 << 20, Size: 64 << 20, Unfinished: 3, Oldest: xid.New(), RM: "pg", LastError: "connection refused"}
	for _, tc := range []struct {
		err  error
		code codes.Code
	}{
		{&coord.InputError{Field: "gtrid", Reason: "bad"}, codes.InvalidArgument},
		{fmt.Errorf("%w: x", coord.ErrAlreadyCommitted), codes.FailedPrecondition},
		{coord.ErrClosed, codes.Unavailable},
		{full, codes.ResourceExhausted},
		{fmt.Errorf("coord: %w", full), codes.ResourceExhausted},
		{fmt.Errorf("%w: x", coord.ErrOutcomeUnknown), codes.Internal},
		{errors.New("something else"), codes.Unknown},
	} {
		st := status.Convert(toStatus(tc.err))
		if st.Code() != tc.code || st.Message() != tc.err.Error() {
			t.Errorf("toStatus(%v) = %v %q, want %v with the same message", tc.err, st.Code(), st.Message(), tc.code)
		}
	}
	msg := status.Convert(toStatus(full)).Message()
	for _, want := range []string{"decision log full", "3 transactions unfinished", full.Oldest.String(), `rm "pg"`, "connection refused"} {
		if !strings.Contains(msg, want) {
			t.Errorf("RESOURCE_EXHAUSTED message %q does not say %q", msg, want)
		}
	}
}
