package operations

// Confirming (OPS 5.2, 6, 7): Handle is the default path (approve, confirm,
// approve again when the terms changed, track until final); Approve and
// Confirm are its two steps, for an interface that holds the Approval
// itself. Confirm writes the approved confirm (operation, revision,
// approved_by) to the journal before the first confirm request; a confirm
// that gets no answer, times out or gets a 5xx is sent again with the same
// operation ID and body, never re-proposed, and the Company returns an
// operation that is no longer proposed as it is, so a repeated confirm
// performs nothing twice.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/poppyproto/poppy/internal/retry"
)

// maxConfirmAttempts bounds how often one Confirm call sends the confirm
// before it gives up; the journal keeps the confirm for Recover.
const maxConfirmAttempts = 8

// Handle is the default path of an operation: it takes a proposed
// operation through approval and confirmation to a final state. It asks
// for approval (a standing permission that covers the revision, or the
// User through the Approver), confirms, gets a new approval when the terms
// changed (PA-OPS5-15) or when the Company wants the User's own approval
// (PA-OPS5-16), and tracks the operation until final. When the User
// declines, it declines the proposal at the Company (OPS 7) and returns
// ErrDeclined with the cancelled operation. An operation past proposed is
// returned as it is, tracked if in_progress. opts, which may be nil, say
// how to confirm, as for Confirm.
//
// Approve and Confirm are its two steps, for an interface that must hold
// the approval itself: to withdraw it, or to confirm it again after a
// sign-in.
func (c *Client) Handle(ctx context.Context, op *Operation, opts *ConfirmOptions) (*Operation, error) {
	cur, err := c.observe(op, nil, "")
	if err != nil {
		return nil, err
	}
	reason, userOnly := "", false
	for range 16 {
		if cur.State != StateProposed {
			if cur.State == StateInProgress && (opts == nil || !opts.NoTrack) {
				return c.Track(ctx, cur.ID)
			}
			return cur, nil
		}
		a, err := c.approve(ctx, cur, reason, userOnly)
		if errors.Is(err, ErrDeclined) {
			cancelled, cerr := c.Cancel(ctx, cur.ID)
			return cancelled, errors.Join(ErrDeclined, cerr)
		}
		if err != nil {
			return cur, err
		}
		done, err := c.Confirm(ctx, a, opts)
		var oe *Error
		errors.As(err, &oe)
		switch {
		case companyCode(err) == codeTermsChanged && oe != nil && oe.Operation != nil:
			// A later revision: Confirm refused a stale one (PA-OPS3-09).
			cur, reason, userOnly = c.viewOr(oe.Operation), "terms_changed", false
		case companyCode(err) == codeUserApproval:
			cur, reason, userOnly = c.viewOr(cur), "user_approval_required", true
		default:
			return done, err
		}
	}
	return cur, protocolError("operation %s: too many revisions", cur.ID)
}

// ConfirmOptions says how Confirm and Handle confirm. Nil means at the
// operations endpoint, tracked until final.
type ConfirmOptions struct {
	// Website, when set, confirms on the Company's website instead of at
	// the operations endpoint (OPS 4.4): see website.go and Confirm.
	Website WebsiteConfirmer
	// NoTrack returns the operation as the Company answered the confirm,
	// which may be in_progress, instead of tracking it until final: Track
	// it later, or Recover it after a restart.
	NoTrack bool
}

// Confirm confirms the approved revision at the operations endpoint with
// {"revision": n, "approved_by": …} (OPS 5.2, PA-OPS5-13) and tracks the
// operation until final (unless opts.NoTrack). The approval must be for
// the revision the Client knows as the latest (PA-OPS5-01), not withdrawn
// (PA-OPS7-05), and the revision's expires_at present and not passed
// (PA-OPS3-02); otherwise nothing is sent. opts may be nil.
//
// The confirm is written to the keystore journal before it is first sent
// (OPS 6). A confirm that gets no answer, or a 5xx, is sent again with the
// same operation ID and body (PA-OPS6-03); the Company returns an operation
// that is no longer proposed as it is. terms_changed and
// user_approval_required come back as the Company's *poppy.Error (its
// Code), wrapped in an *Error that adds the current operation when the
// Company sent it (terms_changed), and need a new approval: Confirm never confirms new
// terms on its own (PA-OPS5-15). A terms_changed that brings a revision
// not later than the one confirmed is stale, the Company's error: an
// ErrProtocol, and nothing to approve again (PA-OPS3-09). An operation that is already past proposed
// is returned as it is, tracked if in_progress (PA-OPS5-18).
//
// A sign_in_required or insufficient_scope that the Session transport
// could not settle with a stored Account Token comes back as the
// *poppy.Error: sign the User in (package signin) and call Confirm again
// with the same Approval, which sends the same confirm (PA-OPS5-14).
//
// With opts.Website, the revision is confirmed on the Company's website
// instead (OPS 4.4), with the same checks first, so the User's approval of
// that revision comes first however the operation is confirmed
// (PA-OPS4-04): the operation must have a url (else an error, and nothing is sent), and the
// operation, read at the endpoint just before, must still be proposed at
// the approved revision; otherwise the WebsiteConfirmer is not called. The
// confirm is journalled before it runs. Then the operation is read at the
// endpoint: still proposed means the website did not confirm it
// (an error saying so, joined with the WebsiteConfirmer's error, and
// the journal forgets the confirm); a confirmation of another revision
// than the approved one is an ErrApprovalMismatch with the operation. If
// the read gets no answer, or the process dies, the journalled confirm
// stays: [Client.Recover] reads the operation and, if it is still proposed
// at the approved revision, confirms that revision at the operations
// endpoint, as the same approval covers it however it is confirmed; the
// Company performs it at most once across channels (CO-OPS6-02).
func (c *Client) Confirm(ctx context.Context, a *Approval, opts *ConfirmOptions) (*Operation, error) {
	var o ConfirmOptions
	if opts != nil {
		o = *opts
	}
	var op *Operation
	var err error
	if o.Website != nil {
		op, err = c.confirmOnWebsite(ctx, a, o.Website)
	} else {
		op, err = c.submit(ctx, a)
	}
	if err == nil && op != nil && op.State == StateExpired {
		err = fmt.Errorf("%w: %s", ErrOperationExpired, op.ID)
	}
	if err != nil || o.NoTrack || op == nil || op.State != StateInProgress {
		return op, err
	}
	return c.Track(ctx, op.ID)
}

// submit sends the journalled confirm until the Company answers it and
// returns the operation as the Company answered, which may be in_progress.
func (c *Client) submit(ctx context.Context, a *Approval) (*Operation, error) {
	cur, stop, err := c.precheck(ctx, a)
	if stop {
		return cur, err
	}
	jc, err := c.beginConfirm(ctx, a, cur, "")
	if err != nil {
		return nil, err
	}
	op, err := c.sendConfirm(ctx, cur.ID, jc)
	if err != nil {
		var oe *Error
		if errors.As(err, &oe) || isRefusal(err) {
			// The Company refused without acting: nothing to recover.
			c.unconfirm(a)
			_ = c.j.clearIntent(ctx, cur.ID)
		}
		if companyCode(err) == codeTermsChanged && oe != nil && oe.sent > 0 && oe.sent <= jc.Revision {
			// terms_changed says the confirmed revision is not the latest
			// and brings the latest (OPS 9): one not later than the
			// revision confirmed is stale, the Company's error
			// (PA-OPS3-09). Asking the User again would approve the same
			// revision, and the Company would refuse it again.
			return c.view(cur.ID), protocolError("operation %s: terms_changed brings revision %d, not later than the confirmed revision %d", cur.ID, oe.sent, jc.Revision)
		}
		return op, err
	}
	if op.State.Final() {
		if op.State == StateExpired {
			return op, fmt.Errorf("%w: %s", ErrOperationExpired, op.ID)
		}
		return op, nil
	}
	if op.State == StateProposed {
		return op, protocolError("operation %s is still proposed after its confirm", op.ID)
	}
	return op, nil
}

// precheck checks, before anything is sent, that a may confirm its
// operation now: an Approval of this Client (PA-OPS5-03), for the revision
// the Client knows as the latest (PA-OPS5-01), not a standing permission
// where the User's own approval is required (PA-OPS5-05), with an
// expires_at that has not passed (PA-OPS3-02). With stop, the caller returns (op, err) as they are: an
// error, or an operation past proposed returned as it is (PA-OPS5-18).
func (c *Client) precheck(ctx context.Context, a *Approval) (op *Operation, stop bool, err error) {
	if a == nil || a.c != c {
		return nil, true, errors.New("operations: Confirm needs an Approval from this Client")
	}
	if err := c.load(ctx); err != nil {
		return nil, true, err
	}
	cur := c.view(a.opID)
	if cur == nil {
		return nil, true, fmt.Errorf("operations: unknown operation %s", a.opID)
	}
	if err := c.brokenErr(cur.ID); err != nil {
		return nil, true, err
	}
	switch {
	case cur.State == StateInProgress:
		return cur, true, nil
	case cur.State == StateExpired:
		return cur, true, fmt.Errorf("%w: %s", ErrOperationExpired, cur.ID) // PA-OPS3-07
	case cur.State.Final():
		return cur, true, nil
	case a.revision != cur.Revision:
		return nil, true, fmt.Errorf("%w: approved revision %d, latest %d", ErrApprovalMismatch, a.revision, cur.Revision)
	case a.by == ApprovedByStandingPermission && cur.UserApprovalRequired:
		return nil, true, fmt.Errorf("%w: the operation requires the User's own approval", ErrApprovalMismatch)
	case a.by == ApprovedByStandingPermission && cur.Ambiguity() != nil:
		return nil, true, fmt.Errorf("%w: the terms can be read more than one way", ErrApprovalMismatch)
	}
	if err := cur.expiryError(c.clock.Now()); err != nil {
		return cur, true, err // PA-OPS3-02
	}
	return cur, false, nil
}

// beginConfirm marks a as confirmed, unless it was withdrawn
// (PA-OPS7-05), and journals the confirm before it is sent (OPS 6); via is
// "" for the operations endpoint, "website" for ConfirmOptions.Website.
func (c *Client) beginConfirm(ctx context.Context, a *Approval, cur *Operation, via string) (journalConfirm, error) {
	a.mu.Lock()
	if a.withdrawn {
		a.mu.Unlock()
		return journalConfirm{}, errApprovalWithdrawn
	}
	a.confirmed = true
	a.mu.Unlock()
	jc := journalConfirm{Revision: a.revision, ApprovedBy: a.by, Permission: a.permission, Via: via, At: c.clock.Now()}
	action, key := c.entryOf(cur.ID)
	if err := c.j.intend(ctx, cur, jc, action, key); err != nil {
		c.unconfirm(a)
		return journalConfirm{}, err
	}
	return jc, nil
}

// unconfirm records that a was not confirmed after all.
func (c *Client) unconfirm(a *Approval) {
	a.mu.Lock()
	a.confirmed = false
	a.mu.Unlock()
}

// sendConfirm sends the journalled confirm until the Company answers it.
func (c *Client) sendConfirm(ctx context.Context, id string, jc journalConfirm) (*Operation, error) {
	body, _ := json.Marshal(map[string]any{"revision": jc.Revision, "approved_by": jc.ApprovedBy})
	op, err := c.sendRetrying(ctx, c.opURL(id, "confirm"), id, body)
	if err != nil && retry.IsTransient(err) {
		return nil, fmt.Errorf("operations: confirm of %s unanswered after %d attempts; it is journalled, so Recover or Track it: %w", id, maxConfirmAttempts, err)
	}
	return op, err
}

// sendRetrying POSTs body to target, an idempotent request about operation
// id (confirm or cancel), until the Company answers it: a request that gets
// no answer or a 5xx is sent again, same body, after a backoff that honours
// Retry-After (PA-OPS6-03).
func (c *Client) sendRetrying(ctx context.Context, target, id string, body []byte) (*Operation, error) {
	var last error
	for attempt := range maxConfirmAttempts {
		if attempt > 0 {
			if err := c.clock.Sleep(ctx, c.wait(retry.AfterOf(last), attempt-1)); err != nil {
				return nil, err
			}
		}
		resp, err := c.send(ctx, http.MethodPost, target, body)
		if err == nil {
			var op *Operation
			if op, err = c.readOperation(ctx, resp, id); err == nil {
				return c.afterRead(ctx, op)
			}
		}
		if ctx.Err() != nil {
			return nil, err
		}
		if !retry.IsTransient(err) {
			return c.view(id), err
		}
		c.log.DebugContext(ctx, "operations: request got no answer, sending it again", "operation_id", id, "attempt", attempt+1, "error", err)
		last = err
	}
	return nil, last
}

func (c *Client) viewOr(op *Operation) *Operation {
	if v := c.view(op.ID); v != nil {
		return v
	}
	return op
}

// Cancel declines a proposed operation or asks the Company to stop one in
// progress, with POST {endpoint}/{id}/cancel and an empty JSON object
// (OPS 7, A-37), then tracks it until final (PA-OPS7-03). A final
// operation comes back as it is, without an error (PA-OPS7-04).
func (c *Client) Cancel(ctx context.Context, id string) (*Operation, error) {
	v, err := c.sendRetrying(ctx, c.opURL(id, "cancel"), id, []byte("{}"))
	if err != nil || v.State.Final() {
		return v, err
	}
	return c.Track(ctx, id)
}
