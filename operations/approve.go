package operations

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Approver asks the User, through the agent's own interface, whether to
// approve one revision of an operation (OPS 5.1). It is the only source of
// a User's approval: nothing the Company sends (a message, a tool result's
// text, a summary saying "the user approved") ever approves anything
// (PA-OPS5-03, PA-OPS5-04).
type Approver interface {
	Approve(ctx context.Context, req *ApprovalRequest) (Decision, error)
}

// ApproverFunc adapts a function to Approver.
type ApproverFunc func(ctx context.Context, req *ApprovalRequest) (Decision, error)

// Approve calls f.
func (f ApproverFunc) Approve(ctx context.Context, req *ApprovalRequest) (Decision, error) {
	return f(ctx, req)
}

// Decision is the User's answer.
type Decision int

// The User's answers.
const (
	Decline Decision = iota
	Approve
)

// ApprovalRequest is what the User is shown for one revision (OPS 5.1,
// PA-OPS5-02). Every text in it but Reason comes from the Company and is
// untrusted: show Summary as the Company's words (PlainText strips control
// sequences for a terminal), and never parse it for instructions.
type ApprovalRequest struct {
	// Company is the Company's organization.name.
	Company string
	// Domain is the domain the Company was resolved from.
	Domain string
	// Issuer is the Company's auth.issuer.
	Issuer string
	// Account is the account label the Session is signed in with, "" if
	// signed out.
	Account string
	// Action is what proposed the operation.
	Action Action
	// OperationID and Revision name what the answer covers: this revision
	// only (PA-OPS5-11).
	OperationID string
	Revision    int
	// Summary is the revision's summary, byte for byte as the Company sent it.
	Summary string
	// Terms is the revision's terms, nil if none: the same reading the
	// standing permissions were checked against and the journal keeps,
	// in a canonical encoding that every JSON parser reads the same way
	// (Operation.Terms).
	Terms json.RawMessage
	// Ambiguity, when not nil, says why Terms can be read more than one
	// way (an *AmbiguousTermsError: a member name twice, two paths that
	// read the same when joined with ".", a number outside the decimal
	// grammar, invalid UTF-8). Terms then holds the bytes as the Company
	// sent them, no standing permission applied, and the User should be
	// told that the terms may not say what the summary says.
	Ambiguity error
	// ExpiresAt is the last time the revision can be confirmed.
	ExpiresAt time.Time
	// URL is the Company's page for the operation, if any: only a URL on
	// an origin the Company's documents name (see Operation.URL), so that
	// it can be shown as the Company's.
	URL string
	// UserApprovalRequired says that no standing permission may answer:
	// none was consulted, so Permission is nil (PA-OPS5-05).
	UserApprovalRequired bool
	// Reason says why the User is asked: "" for a new proposal,
	// "terms_changed" when the terms changed since an earlier approval,
	// "user_approval_required" when the Company refused a standing
	// permission.
	Reason string
	// Permission explains, when the User has standing permissions for the
	// action and they were consulted, why none applied (each a
	// *MismatchError, joined).
	Permission error
}

// Approval is the approval of one revision of one operation, by the User
// or by a standing permission. Confirm sends it; Withdraw takes it back.
//
// Its fields can't be changed: an approval covers the one revision it was
// given for, in the way it was given (PA-OPS5-11, PA-OPS5-12).
type Approval struct {
	c          *Client
	opID       string
	revision   int
	by         ApprovedBy
	permission string

	mu        sync.Mutex
	withdrawn bool
	confirmed bool
}

// OperationID is the operation the approval is for.
func (a *Approval) OperationID() string { return a.opID }

// Revision is the revision the approval covers.
func (a *Approval) Revision() int { return a.revision }

// By says how the revision was approved.
func (a *Approval) By() ApprovedBy { return a.by }

// PermissionID names the standing permission that matched, when By is
// standing_permission.
func (a *Approval) PermissionID() string { return a.permission }

// Withdraw takes the User's approval back (OPS 7). Before the approval was
// confirmed, the SDK will not confirm it (PA-OPS7-05) and no request is
// sent; after, the SDK asks the Company to cancel the operation
// (PA-OPS7-06) and returns what the Company answered.
func (a *Approval) Withdraw(ctx context.Context) (*Operation, error) {
	a.mu.Lock()
	a.withdrawn = true
	confirmed := a.confirmed
	a.mu.Unlock()
	if err := a.c.j.withdraw(ctx, a.opID); err != nil {
		return nil, err
	}
	if !confirmed {
		return a.c.view(a.opID), nil
	}
	return a.c.Cancel(ctx, a.opID)
}

// Withdrawn reports whether Withdraw was called.
func (a *Approval) Withdrawn() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.withdrawn
}

// Approve gets approval for the operation's current revision: from a
// standing permission that covers it (never when user_approval_required is
// set or terms are absent), or else from the User through the Approver
// (OPS 5.1). It returns ErrDeclined when the User declines. op must be the
// Client's operation (from Propose or Observe). An operation that is no
// longer proposed (another process or channel confirmed, cancelled or
// expired it) is a *StateError with the state. A
// revision without an expires_at (ErrProtocol) or past it
// (ErrOperationExpired) is refused before anyone is asked (PA-OPS3-02).
func (c *Client) Approve(ctx context.Context, op *Operation) (*Approval, error) {
	return c.approve(ctx, op, "", false)
}

func (c *Client) approve(ctx context.Context, op *Operation, reason string, userOnly bool) (*Approval, error) {
	if op == nil {
		return nil, ErrNoOperation
	}
	cur, err := c.observe(op, nil, "")
	if err == nil {
		err = c.brokenErr(cur.ID)
	}
	if err != nil {
		return nil, err
	}
	if cur.State != StateProposed {
		// Another process or channel confirmed, cancelled or expired it.
		return nil, &StateError{Operation: cur, State: cur.State}
	}
	if err := cur.expiryError(c.clock.Now()); err != nil {
		return nil, err // PA-OPS3-02: before anyone is asked
	}
	action, _ := c.entryOf(cur.ID)
	company := c.sess.Company()
	account := ""
	if c.sess.SignedIn() {
		account = c.sess.Account()
	}
	var why error
	if !userOnly && !cur.UserApprovalRequired { // PA-OPS5-05
		perms, err := c.Permissions(ctx)
		if err != nil {
			return nil, err
		}
		sub := Subject{Issuer: company.Issuer(), Account: account, Action: action, Operation: cur, Now: c.clock.Now()}
		var mismatches []error
		for _, p := range perms {
			if err := p.Check(sub); err != nil {
				mismatches = append(mismatches, err)
				continue
			}
			c.log.DebugContext(ctx, "operations: a standing permission covers the revision", "operation_id", cur.ID, "revision", cur.Revision, "permission", p.ID)
			return &Approval{c: c, opID: cur.ID, revision: cur.Revision, by: ApprovedByStandingPermission, permission: p.ID}, nil
		}
		why = errors.Join(mismatches...)
	}
	if c.approver == nil {
		return nil, ErrNoApprover
	}
	req := &ApprovalRequest{
		Company: company.Name(), Domain: company.Domain(), Issuer: company.Issuer(), Account: account,
		Action: action, OperationID: cur.ID, Revision: cur.Revision, Summary: cur.Summary, Terms: clone(cur.Terms),
		ExpiresAt: cur.ExpiresAt, URL: cur.URL, UserApprovalRequired: cur.UserApprovalRequired,
		Reason: reason, Permission: why, Ambiguity: cur.Ambiguity(),
	}
	d, err := c.approver.Approve(ctx, req) // PA-OPS5-03: the only source of a User's approval
	if err != nil {
		return nil, fmt.Errorf("operations: asking the User: %w", err)
	}
	if d != Approve {
		return nil, ErrDeclined
	}
	return &Approval{c: c, opID: cur.ID, revision: cur.Revision, by: ApprovedByUser}, nil
}
