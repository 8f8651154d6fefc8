package operations

// Recovery (OPS 6): the journal's records are loaded into the Client's
// views once, before the first proposal or confirm, and Recover finishes
// the confirms an earlier process journalled.

import (
	"context"
	"errors"
	"fmt"

	"github.com/poppyproto/poppy/internal/retry"
)

// load puts the journal's operations into the Client's view, once, and
// drops the records of proposing requests whose answer an operation record
// already holds (a crash between the two writes).
func (c *Client) load(ctx context.Context) error {
	c.loadMu.Lock()
	defer c.loadMu.Unlock()
	if c.loaded {
		return nil
	}
	recs, proposing, err := c.j.scan(ctx)
	if err != nil {
		return err
	}
	c.mu.Lock()
	for _, r := range recs {
		if e := c.ops[r.OperationID]; e == nil {
			c.ops[r.OperationID] = &entry{op: r.Operation, action: r.Action, proposal: r.Proposal, idem: r.IdempotencyKey, finalSeen: r.Final}
		} else {
			if e.proposal == "" {
				e.proposal = r.Proposal
			}
			if e.idem == "" {
				e.idem = r.IdempotencyKey
			}
		}
	}
	c.mu.Unlock()
	for _, p := range proposing {
		// A crash between the operation's record and this one's.
		if p.Proposing.OperationID == "" && c.answered(p.Proposing.IdempotencyKey) {
			_ = c.j.unsent(ctx, p.Proposing.Key, p.Proposing.IdempotencyKey)
		}
	}
	c.loaded = true
	return nil
}

// loadRecord puts the journal record of operation id, written by any
// process, into the Client's view, and returns the view (nil when there is
// no usable record).
func (c *Client) loadRecord(ctx context.Context, id string) (*Operation, error) {
	r, err := c.j.read(ctx, id)
	if r == nil || err != nil {
		return nil, err
	}
	c.mu.Lock()
	e := c.ops[id]
	if e == nil {
		e = &entry{op: r.Operation, action: r.Action, finalSeen: r.Final}
		c.ops[id] = e
	} else if next, err := merge(e.op, r.Operation); err == nil {
		e.op = next
	}
	if e.proposal == "" {
		e.proposal = r.Proposal
	}
	if e.idem == "" {
		e.idem = r.IdempotencyKey
	}
	view := e.op.Clone()
	c.mu.Unlock()
	return view, nil
}

// answered reports whether an operation the Client knows was proposed by
// the request sent with idem: its record is then stale.
func (c *Client) answered(idem string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.ops {
		if e.idem == idem {
			return true
		}
	}
	return false
}

// Recover picks up what an earlier process left in the journal (OPS 6):
// for every operation whose confirm was journalled and that isn't final,
// it reads the operation, sends the journalled confirm again if it is
// still proposed at the approved revision (and the approval wasn't
// withdrawn), cancels it if the approval was withdrawn after confirming,
// and tracks it until final. It returns those operations, final unless ctx
// ended; errors of single operations are joined. Operations the journal
// holds only as proposals are loaded into the Client's view, so Propose
// keeps returning them while they are open. A proposing request whose
// answer never came stays journalled for the same request, which Propose
// sends again with the same Idempotency-Key: request bodies are never
// journalled, so Recover can't send it. A confirm journalled for the
// website (ConfirmOptions.Website) is sent at the operations endpoint if
// the operation is still proposed at the approved revision: the approval
// covers it however it is confirmed.
func (c *Client) Recover(ctx context.Context) ([]*Operation, error) {
	if err := c.load(ctx); err != nil {
		return nil, err
	}
	recs, _, err := c.j.scan(ctx)
	if err != nil {
		return nil, err
	}
	var out []*Operation
	var errs []error
	for _, r := range recs {
		if r.Final || r.Confirm == nil {
			continue
		}
		op, err := c.recoverOne(ctx, r)
		if op != nil {
			out = append(out, op)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("operations: recovering %s: %w", r.OperationID, err))
		}
		if ctx.Err() != nil {
			break
		}
	}
	return out, errors.Join(errs...)
}

func (c *Client) recoverOne(ctx context.Context, r journalRecord) (*Operation, error) {
	cur, err := c.Get(ctx, r.OperationID)
	for attempt := 0; err != nil && retry.IsTransient(err) && attempt < maxConfirmAttempts; attempt++ {
		if serr := c.clock.Sleep(ctx, c.wait(retry.AfterOf(err), attempt)); serr != nil {
			return nil, serr
		}
		cur, err = c.Get(ctx, r.OperationID)
	}
	if err != nil {
		return nil, err
	}
	c.log.InfoContext(ctx, "operations: recovering a journalled confirm", "operation_id", r.OperationID, "state", string(cur.State))
	switch {
	case cur.State.Final():
		return cur, nil
	case cur.State == StateInProgress && r.Withdrawn:
		return c.Cancel(ctx, cur.ID) // PA-OPS7-06
	case cur.State == StateInProgress:
		return c.Track(ctx, cur.ID)
	case r.Withdrawn:
		return cur, nil
	case cur.Revision != r.Confirm.Revision:
		// The terms changed since the approval: it doesn't cover them.
		_ = c.j.clearIntent(ctx, cur.ID)
		return cur, fmt.Errorf("%w: approved revision %d, latest %d", ErrApprovalMismatch, r.Confirm.Revision, cur.Revision)
	}
	if err := cur.expiryError(c.clock.Now()); err != nil {
		return cur, err // PA-OPS3-02
	}
	if r.Confirm.ApprovedBy == ApprovedByStandingPermission {
		// The permission must still cover the revision: the User may
		// have revoked it since (PA-OPS5-10).
		if err := c.stillPermitted(ctx, cur, r); err != nil {
			_ = c.j.clearIntent(ctx, cur.ID)
			return cur, err
		}
	}
	a := &Approval{c: c, opID: cur.ID, revision: r.Confirm.Revision, by: r.Confirm.ApprovedBy, permission: r.Confirm.Permission}
	return c.Confirm(ctx, a, nil)
}

// stillPermitted checks that the standing permission of a journalled
// confirm still covers the operation.
func (c *Client) stillPermitted(ctx context.Context, op *Operation, r journalRecord) error {
	perms, err := c.Permissions(ctx)
	if err != nil {
		return err
	}
	sub := Subject{Issuer: c.sess.Company().Issuer(), Account: c.sess.Account(), Action: r.Action, Operation: op, Now: c.clock.Now()}
	for _, p := range perms {
		if p.ID == r.Confirm.Permission {
			return p.Check(sub)
		}
	}
	return fmt.Errorf("operations: standing permission %s was revoked", r.Confirm.Permission)
}
