package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/operations"
	"github.com/poppyproto/poppy/poppytest"
	"github.com/poppyproto/poppy/signin"
)

// exchangeJacket runs the operations extension's jacket exchange: the API
// proposes it (HTTP 202 with an operation), the User approves the exact
// terms through an Approver, the agent confirms that revision at the
// operations endpoint, and tracks it until the Company reports the result.
func exchangeJacket(ctx context.Context, step func(string, ...any), company *poppytest.Server, sess *poppy.Session) error {
	// An exchange needs poppy:write too: sign in for it if the Session
	// hasn't got it (spec 4.4, incremental sign-in).
	if !slices.Contains(sess.Scopes(), "poppy:write") {
		prompter := signin.PrompterFuncs{ShowCodeFunc: func(ctx context.Context, p *signin.CodePrompt) error {
			_, err := company.Browse(ctx, p.VerificationURIComplete)
			return err
		}}
		if _, err := signin.Device(ctx, sess, &poppy.SignInOptions{Scopes: []string{"poppy:read", "poppy:write"}}, prompter); err != nil {
			return err
		}
		step("signed in again for poppy:write")
	}

	// The Approver is the User's own interface: the only thing that can
	// approve an operation. This demo answers by itself, and says so.
	approver := operations.ApproverFunc(func(_ context.Context, r *operations.ApprovalRequest) (operations.Decision, error) {
		step("approval: %s asks the User to approve revision %d of %s:", r.Company, r.Revision, r.OperationID)
		step("  %q", operations.PlainText(r.Summary, 500))
		step("  (demo: the User is not asked; this Approver answers \"approve\" by itself)")
		return operations.Approve, nil
	})
	ops, err := operations.New(sess, &operations.Options{Approver: approver})
	if err != nil {
		return err
	}
	step("operations endpoint: %s", ops.Endpoint())

	req, err := http.NewRequestWithContext(ctx, "POST", company.EndpointURL(poppytest.EndpointAPI)+"/orders/ord_7Hk2/exchanges",
		strings.NewReader(`{"item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m"}`))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	op, resp, err := ops.Propose(ctx, req, operations.OpenAPIAction("POST", "/orders/{id}/exchanges"), nil)
	if err != nil {
		return err
	}
	if op == nil {
		resp.Body.Close()
		return fmt.Errorf("the Company performed the exchange without proposing it (HTTP %d)", resp.StatusCode)
	}
	step("POST %s/orders/ord_7Hk2/exchanges → 202: operation %s, revision %d, %s, expires %s",
		company.EndpointURL(poppytest.EndpointAPI), op.ID, op.Revision, op.State, op.ExpiresAt.UTC().Format("15:04:05Z"))

	// Approve, confirm (journalled first, so a crash can't confirm twice),
	// and track until final.
	done, err := ops.Handle(ctx, op, nil)
	if err != nil {
		return err
	}
	step("operation %s: %s (confirmed revision %d, approved_by %s)", done.ID, done.State, done.Confirmation.Revision, done.Confirmation.ApprovedBy)
	step("  the Company's account of what happened: %s", operations.PlainText(done.Result.Summary, 500))
	return nil
}
