package operations

// Confirming on the Company's website (OPS 4.4). An operation's url shows
// it on the website in the same Session; a website that also lets the
// Session confirm it confirms the same operation, and "the Personal
// Agent's duties in 5.1 apply however it confirms" (PA-OPS4-04). So a
// confirm on the website is Confirm with ConfirmOptions.Website: the same
// *Approval, which only Approve makes (the User through the Approver, or a
// standing permission that covers every term), the same checks before
// anything happens, and the confirm journalled before the website is
// asked, as before the first request at the endpoint. The website step itself (loading the page in a
// browser joined to the Session and pressing its confirm button) is the
// caller's WebsiteConfirmer: the extension doesn't define the website's
// form. Afterwards the SDK reads the operation at the operations endpoint,
// the one record of the action: it is confirmed only if the Company says
// so, and only for the revision the User approved.
//
// Nothing else in the SDK confirms on a website: a browser joined with
// package browser only navigates, and Company text never reaches a
// WebsiteConfirmer.

import (
	"context"
	"errors"
	"fmt"

	"github.com/poppyproto/poppy/internal/retry"
)

// WebsiteConfirmer confirms one revision of an operation on the Company's
// website (OPS 4.4), for ConfirmOptions.Website: typically it loads
// req.URL in a browser the agent controls, joined to the Session (package
// browser), checks that the page shows req.Revision, and presses the
// page's confirm button. It must confirm that revision only, and nothing when the page
// shows another one. It is called only with the User's approval of that
// revision.
type WebsiteConfirmer interface {
	ConfirmOnWebsite(ctx context.Context, req *WebsiteConfirm) error
}

// WebsiteConfirmerFunc adapts a function to WebsiteConfirmer.
type WebsiteConfirmerFunc func(ctx context.Context, req *WebsiteConfirm) error

// ConfirmOnWebsite calls f.
func (f WebsiteConfirmerFunc) ConfirmOnWebsite(ctx context.Context, req *WebsiteConfirm) error {
	return f(ctx, req)
}

// WebsiteConfirm is what a WebsiteConfirmer is asked to confirm.
type WebsiteConfirm struct {
	// OperationID and Revision name the approved revision: the website
	// must confirm this one and no other.
	OperationID string
	Revision    int
	// ApprovedBy is how the revision was approved, for a form that asks.
	ApprovedBy ApprovedBy
	// URL is the operation's page on the Company's website (Operation.URL,
	// https).
	URL string
}

// confirmOnWebsite is Confirm with ConfirmOptions.Website: it confirms the
// approved revision on the Company's website instead of at the operations
// endpoint (OPS 4.4), and returns the operation without tracking it.
func (c *Client) confirmOnWebsite(ctx context.Context, a *Approval, w WebsiteConfirmer) (*Operation, error) {
	cur, stop, err := c.precheck(ctx, a)
	if stop {
		return cur, err
	}
	if cur.URL == "" {
		return nil, fmt.Errorf("%w: %s", errNoWebsite, cur.ID)
	}
	// The page shows the operation as it is now: read it, and ask the
	// website only while the approved revision is the one to confirm.
	if _, err := c.Get(ctx, cur.ID); err != nil {
		return nil, err
	}
	if cur, stop, err = c.precheck(ctx, a); stop {
		return cur, err
	}
	if cur.URL == "" {
		return nil, fmt.Errorf("%w: %s", errNoWebsite, cur.ID)
	}
	if _, err := c.beginConfirm(ctx, a, cur, "website"); err != nil {
		return nil, err
	}
	req := &WebsiteConfirm{OperationID: cur.ID, Revision: a.revision, ApprovedBy: a.by, URL: cur.URL}
	stepErr := w.ConfirmOnWebsite(ctx, req)
	if stepErr != nil {
		stepErr = fmt.Errorf("operations: confirming on the website: %w", stepErr)
	}
	op, err := c.readAfter(ctx, cur.ID)
	if err != nil {
		// Unknown whether the website confirmed: the journal keeps the
		// confirm for Recover.
		return nil, errors.Join(stepErr, fmt.Errorf("operations: reading %s after the website step; the confirm is journalled, so Recover or Track it: %w", cur.ID, err))
	}
	if op.Confirmation == nil && (op.State == StateProposed || op.State.Final()) {
		// The website did not confirm it (or the operation ended unconfirmed).
		c.unconfirm(a)
		_ = c.j.clearIntent(ctx, op.ID)
		return op, errors.Join(fmt.Errorf("%w: %s is %s at revision %d", errNotConfirmedOnWebsite, op.ID, op.State, op.Revision), stepErr)
	}
	if cf := op.Confirmation; cf != nil && cf.Revision != a.revision {
		c.log.WarnContext(ctx, "operations: the website confirmed a revision the User did not approve",
			"operation_id", op.ID, "confirmed", cf.Revision, "approved", a.revision)
		return op, fmt.Errorf("%w: the website confirmed revision %d of %s, the approval is for revision %d", ErrApprovalMismatch, cf.Revision, op.ID, a.revision)
	}
	if stepErr != nil {
		c.log.DebugContext(ctx, "operations: the website step failed, but the operation is confirmed", "operation_id", op.ID, "error", stepErr)
	}
	return op, nil
}

// readAfter reads the operation, reading again when a read gets no usable
// answer (at most maxConfirmAttempts times).
func (c *Client) readAfter(ctx context.Context, id string) (*Operation, error) {
	op, err := c.Get(ctx, id)
	for attempt := 0; err != nil && retry.IsTransient(err) && attempt < maxConfirmAttempts-1; attempt++ {
		if serr := c.clock.Sleep(ctx, c.wait(retry.AfterOf(err), attempt)); serr != nil {
			return nil, serr
		}
		op, err = c.Get(ctx, id)
	}
	return op, err
}
