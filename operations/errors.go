package operations

import (
	"errors"
	"fmt"

	"github.com/poppyproto/poppy"
)

// Sentinel errors for the states callers branch on. An [*Error] from the
// operations endpoint matches the sentinel of its Code with errors.Is.
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
	// ErrOperationNotFound is the Company's operation_not_found (OPS 9).
	ErrOperationNotFound = errors.New("operations: operation_not_found")
	// ErrTermsChanged is the Company's terms_changed (OPS 9): the
	// revision confirmed isn't the latest. The *Error carries the current
	// operation, which needs a new approval.
	ErrTermsChanged = errors.New("operations: terms_changed")
	// ErrUserApprovalRequired is the Company's user_approval_required
	// (OPS 9): this operation needs the User's own approval of the
	// revision, not a standing permission.
	ErrUserApprovalRequired = errors.New("operations: user_approval_required")
	// ErrOperationExpired: the revision can no longer be confirmed
	// (expires_at has passed, or the Company reports expired). Trying
	// again needs a new proposal.
	ErrOperationExpired = errors.New("operations: operation expired")
	// ErrDeclined: the User (through the Approver) declined the revision.
	ErrDeclined = errors.New("operations: the User declined")
	// ErrApprovalMismatch: the approval is for another operation or
	// another revision than the one the SDK knows as the latest.
	ErrApprovalMismatch = errors.New("operations: the approval does not cover this revision")
	// ErrApprovalWithdrawn: the User withdrew the approval before it was
	// confirmed (OPS 7).
	ErrApprovalWithdrawn = errors.New("operations: the approval was withdrawn")
	// ErrOperationPending: an operation proposed by the same request is
	// still open, so the SDK doesn't ask for a new proposal (OPS 6, A-38).
	// The *PendingError carries it.
	ErrOperationPending = errors.New("operations: an operation from this request is still open")
	// ErrNoApprover: the operation needs the User's approval and the
	// Client has no Approver.
	ErrNoApprover = errors.New("operations: no Approver to ask the User")
	// ErrNotProposed: the operation is no longer proposed (it was
	// confirmed, cancelled or has expired, perhaps by another process or
	// on another channel), so there is nothing to approve or confirm. The
	// *StateError carries the state and the operation.
	ErrNotProposed = errors.New("operations: the operation is not proposed")
	// ErrProposalUnanswered: a proposing request got no usable answer (no
	// answer at all, or a 5xx), so the SDK can't tell whether the Company
	// proposed an operation. The request is journalled with its
	// Idempotency-Key: sending the same request again, in this process or
	// after a restart, sends that key again, so the Company can answer
	// with the operation it proposed instead of proposing another (OPS 6,
	//
	ErrProposalUnanswered = errors.New("operations: the proposing request got no usable answer")
	// ErrNoWebsite: a confirm on the website (ConfirmOptions.Website) was
	// asked for an operation without a url on the Company's website (OPS
	// 3, 4.4). Nothing was sent.
	ErrNoWebsite = errors.New("operations: the operation has no page on the Company's website")
	// ErrNotConfirmedOnWebsite: after the WebsiteConfirmer ran, the
	// Company still reports the operation proposed: the website did not
	// confirm it (OPS 4.4). Nothing is journalled for it any more.
	ErrNotConfirmedOnWebsite = errors.New("operations: the website did not confirm the operation")
)

var codeSentinels = map[string]error{
	"operation_not_found":    ErrOperationNotFound,
	"terms_changed":          ErrTermsChanged,
	"user_approval_required": ErrUserApprovalRequired,
}

// Error is an error answer of the operations endpoint (OPS 9). It wraps the
// *poppy.Error (so errors.Is(err, poppy.ErrSignInRequired) works for token
// errors) and carries the current operation when the Company sent one
// (terms_changed).
type Error struct {
	// Code is the error code, such as "terms_changed".
	Code string
	// Status is the HTTP status.
	Status int
	// Operation is the current operation the Company included, or nil.
	Operation *Operation
	// Err is the underlying protocol error.
	Err *poppy.Error

	// sent is the revision of the operation as the Company sent it in
	// the answer (Operation is the Client's view, the newest revision it
	// knows), 0 when it sent none.
	sent int
}

func (e *Error) Error() string {
	s := fmt.Sprintf("operations: %s (HTTP %d)", e.Code, e.Status)
	if e.Operation != nil {
		s += fmt.Sprintf(": operation %s is at revision %d (%s)", e.Operation.ID, e.Operation.Revision, e.Operation.State)
	}
	return s
}

// Is matches the sentinel of Code.
func (e *Error) Is(target error) bool {
	s, ok := codeSentinels[e.Code]
	return ok && s == target
}

// Unwrap returns the *poppy.Error.
func (e *Error) Unwrap() error {
	if e.Err == nil {
		return nil
	}
	return e.Err
}

// PendingError is returned by Client.Propose when an operation proposed by
// the same request is still open. It matches ErrOperationPending.
type PendingError struct {
	Operation *Operation
}

func (e *PendingError) Error() string {
	return fmt.Sprintf("operations: operation %s from this request is still %s; confirm, track or cancel it instead of proposing again", e.Operation.ID, e.Operation.State)
}

// Is matches ErrOperationPending.
func (e *PendingError) Is(target error) bool { return target == ErrOperationPending }

// StateError says that an operation is not in the state a call needs: an
// Approve of an operation that is no longer proposed, because another
// process or channel confirmed, cancelled or let it expire (OPS 3). It
// matches ErrNotProposed, and ErrOperationExpired when State is expired.
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

// Is matches ErrNotProposed, and ErrOperationExpired for an expired
// operation.
func (e *StateError) Is(target error) bool {
	return target == ErrNotProposed || target == ErrOperationExpired && e.State == StateExpired
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
