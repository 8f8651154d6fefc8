package operations

import (
	"errors"
	"fmt"

	"github.com/poppyproto/poppy"
)

// Sentinel errors for the states callers branch on. A Company's refusal is
// a *poppy.Error wherever it arrives, its Code the extension's error code
// (OPS 9: operation_not_found, terms_changed, user_approval_required); an
// [*Error] wraps it only to add the operation the Company sent with it.
// The other questions have one typed answer each: [*PendingError] (an
// operation from the same request is still open), [*StateError] (the
// operation is not proposed), [*AmbiguousTermsError] (terms read more than
// one way).
var (
	// ErrNotSupported: the Company doesn't list the operations extension
	// at version "1" with an endpoint, or the agent's identity doesn't
	// list it (OPS 2). No request is sent.
	ErrNotSupported = errors.New("operations: the Company or the agent does not support the operations extension v1")
	// ErrNoOperation: a response, tool result or message carries no
	// operation.
	ErrNoOperation = errors.New("operations: no operation")
	// ErrProtocol: the Company sent an operation that breaks the
	// extension's rules (a field missing or out of bounds, terms changed
	// under a revision already seen, a final state changed).
	ErrProtocol = errors.New("operations: protocol error")
	// ErrOperationExpired: the revision can no longer be confirmed
	// (expires_at has passed, or the Company reports expired). Trying
	// again needs a new proposal.
	ErrOperationExpired = errors.New("operations: operation expired")
	// ErrDeclined: the User (through the Approver) declined the revision.
	ErrDeclined = errors.New("operations: the User declined")
	// ErrApprovalMismatch: the approval is for another operation or
	// another revision than the one the SDK knows as the latest: ask the
	// User again for the latest.
	ErrApprovalMismatch = errors.New("operations: the approval does not cover this revision")
	// ErrNoApprover: the operation needs the User's approval and the
	// Client has no Approver.
	ErrNoApprover = errors.New("operations: no Approver to ask the User")
	// ErrProposalUnanswered: a proposing request got no usable answer (no
	// answer at all, or a 5xx), so the SDK can't tell whether the Company
	// proposed an operation. The request is journalled with its
	// Idempotency-Key: sending the same request again, in this process or
	// after a restart, sends that key again, so the Company can answer
	// with the operation it proposed instead of proposing another (OPS 6,
	//
	ErrProposalUnanswered = errors.New("operations: the proposing request got no usable answer")
)

// Errors no caller branches on: each says what went wrong, and the tests
// match them (export_test.go).
var (
	// errApprovalWithdrawn: the User withdrew the approval before it was
	// confirmed (OPS 7).
	errApprovalWithdrawn = errors.New("operations: the approval was withdrawn")
	// errNoWebsite: a confirm on the website (ConfirmOptions.Website) was
	// asked for an operation without a url on the Company's website (OPS
	// 3, 4.4). Nothing was sent.
	errNoWebsite = errors.New("operations: the operation has no page on the Company's website")
	// errNotConfirmedOnWebsite: after the WebsiteConfirmer ran, the
	// Company still reports the operation proposed: the website did not
	// confirm it (OPS 4.4). Nothing is journalled for it any more.
	errNotConfirmedOnWebsite = errors.New("operations: the website did not confirm the operation")
)

// The extension's error codes (OPS 9) that the Client acts on.
const (
	codeNotFound     = "operation_not_found"
	codeTermsChanged = "terms_changed"
	codeUserApproval = "user_approval_required"
)

// companyCode returns the Code of the Company's refusal in err's chain, ""
// if there is none.
func companyCode(err error) string {
	var pe *poppy.Error
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// Error is an error answer of the operations endpoint (OPS 9) that came
// with the current operation (terms_changed brings the latest revision,
// which needs a new approval). It adds that operation to the Company's
// *poppy.Error, which it wraps: ask the code, status and description of
// the *poppy.Error (errors.As), as for any Company's refusal.
type Error struct {
	// Operation is the Client's view of the operation the Company
	// included.
	Operation *Operation
	// Err is the Company's answer.
	Err *poppy.Error

	// sent is the revision of the operation as the Company sent it in
	// the answer (Operation is the Client's view, the newest revision it
	// knows).
	sent int
}

func (e *Error) Error() string {
	s := fmt.Sprintf("operations: %s (HTTP %d)", e.Err.Code, e.Err.Status)
	if e.Operation != nil {
		s += fmt.Sprintf(": operation %s is at revision %d (%s)", e.Operation.ID, e.Operation.Revision, e.Operation.State)
	}
	return s
}

// Unwrap returns the *poppy.Error.
func (e *Error) Unwrap() error {
	if e.Err == nil {
		return nil
	}
	return e.Err
}

// PendingError is returned by Client.Propose when an operation proposed by
// the same request is still open: confirm, track or cancel it
// instead of proposing again.
type PendingError struct {
	Operation *Operation
}

func (e *PendingError) Error() string {
	return fmt.Sprintf("operations: operation %s from this request is still %s; confirm, track or cancel it instead of proposing again", e.Operation.ID, e.Operation.State)
}

// StateError says that an operation is not in the state a call needs: an
// Approve of an operation that is no longer proposed, because another
// process or channel confirmed, cancelled or let it expire (OPS 3). It
// matches ErrOperationExpired when State is expired.
type StateError struct {
	// Operation is the Client's view of the operation.
	Operation *Operation
	// State is its state.
	State State
}

func (e *StateError) Error() string {
	id := ""
	if e.Operation != nil {
		id = e.Operation.ID
	}
	return fmt.Sprintf("operations: operation %s is %s, not proposed: nothing to approve", id, e.State)
}

// Is matches ErrOperationExpired for an expired operation.
func (e *StateError) Is(target error) bool {
	return target == ErrOperationExpired && e.State == StateExpired
}

// unansweredError is a proposing request without a usable answer. It
// matches ErrProposalUnanswered and wraps what went wrong.
type unansweredError struct{ err error }

func (e *unansweredError) Error() string {
	return "operations: the proposing request got no usable answer; it is journalled, and the same request sends it again with the same Idempotency-Key: " + e.err.Error()
}
func (e *unansweredError) Unwrap() error        { return e.err }
func (e *unansweredError) Is(target error) bool { return target == ErrProposalUnanswered }

func protocolError(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrProtocol}, args...)...)
}
