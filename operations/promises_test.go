package operations_test

// What the package doc promises about proposals and approvals: a lost
// proposal answer proposes nothing twice (OPS 6, A-38), the same action is
// the same request in any order of JSON members and query parameters, and
// an operation that is no longer proposed is a typed error.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/operations"
	"github.com/poppyproto/poppy/poppytest"
)

// PA-OPS6-04 with lost answers: 20 exchanges, the first answer of 10 of
// them lost after the Company proposed (connection closed instead of the
// 202, or a 500), each sent again by the caller. Against a Company that
// proposes anew for every request it doesn't recognise as a retry
// (ProposeAgain), there is one operation per item: the request sent again
// carries the Idempotency-Key journalled before the first one was sent.
func TestPA_OPS6_04_LostProposalAnswer(t *testing.T) {
	const items = 20
	lose := func(i int) poppytest.OperationFault {
		switch {
		case i%2 == 0:
			return poppytest.FaultLoseResponse
		case i%5 == 0:
			return poppytest.Fault5xxAfter
		}
		return poppytest.FaultNone
	}
	e := newEnv(t, &poppytest.Options{Operations: poppytest.OperationsOptions{ProposeAgain: true,
		ProposeFaults: func(r poppytest.OperationRequest) poppytest.OperationFault {
			var i int
			fmt.Sscanf(r.Action, "ord_7Hk2 itm_%d", &i)
			if r.Attempt == 1 {
				return lose(i)
			}
			return poppytest.FaultNone
		}}}, nil)
	lost, got := 0, map[string]string{}
	for i := range items {
		item := fmt.Sprintf("itm_%02d", i)
		op, _, err := e.c.Propose(ctx, e.exchangeRequest(item), exchangeAction, nil)
		if lose(i) != poppytest.FaultNone {
			if err == nil {
				t.Fatalf("%s: the lost answer was not an error: %s", item, brief(op))
			}
			lost++
			op, _, err = e.c.Propose(ctx, e.exchangeRequest(item), exchangeAction, nil) // the caller sends it again
		}
		if err != nil || op == nil {
			t.Fatalf("%s: %s %v", item, brief(op), err)
		}
		got[item] = op.ID
	}
	all := e.Srv.Operations().All()
	if len(all) != items {
		t.Fatalf("PA-OPS6-04: %d operations proposed for %d items (%d answers lost)", len(all), items, lost)
	}
	for _, o := range all {
		// One proposal; a retry carries the same key as the request it repeats.
		if o.Proposals < 1 || o.IdempotencyKeys[0] == "" {
			t.Errorf("%s: proposals %d, keys %q", o.ID, o.Proposals, o.IdempotencyKeys)
		}
		for _, k := range o.IdempotencyKeys {
			if k != o.IdempotencyKeys[0] {
				t.Errorf("%s: sent with keys %q", o.ID, o.IdempotencyKeys)
			}
		}
	}
	if n := len(e.Requests(poppytest.EndpointAPI)); n != items+lost {
		t.Errorf("%d proposing requests, want %d", n, items+lost)
	}
	// Each item's operation is open: calling again sends nothing.
	before := len(e.Requests(poppytest.EndpointAPI))
	for item, id := range got {
		if op, _, err := e.c.Propose(ctx, e.exchangeRequest(item), exchangeAction, nil); !isPending(err) || op.ID != id {
			t.Errorf("%s again: %s %v", item, brief(op), err)
		}
	}
	if n := len(e.Requests(poppytest.EndpointAPI)) - before; n != 0 {
		t.Errorf("%d requests while the operations are open", n)
	}
	// The journal: a record per operation, and one per proposing request
	// naming the open operation it got; none without an operation.
	keys, _ := e.Store.List(ctx, keystore.KindOperation, "local-user", e.Srv.Issuer())
	ops, named := 0, map[string]bool{}
	for _, k := range keys {
		b, _ := e.Store.Get(ctx, k)
		var rec struct {
			OperationID string `json:"operation_id"`
			Proposing   *struct {
				OperationID string `json:"operation_id"`
			} `json:"proposing"`
		}
		json.Unmarshal(b, &rec)
		switch {
		case rec.Proposing != nil && rec.Proposing.OperationID != "":
			named[rec.Proposing.OperationID] = true
		case rec.Proposing != nil:
			t.Errorf("a proposing request without an operation is left: %s", b)
		default:
			ops++
		}
	}
	if ops != items || len(named) != items {
		t.Errorf("%d operation records and %d naming them, for %d operations", ops, len(named), items)
	}
}

// A lost answer is ErrProposalUnanswered, with what went wrong inside; a
// refusal is not kept: the same request after it gets a new key.
func TestProposalUnansweredError(t *testing.T) {
	e := newEnv(t, &poppytest.Options{Operations: poppytest.OperationsOptions{ProposeAgain: true,
		ProposeFaults: func(r poppytest.OperationRequest) poppytest.OperationFault {
			if r.Attempt == 1 && r.Action == "ord_7Hk2 itm_4Qa" {
				return poppytest.FaultCut
			}
			return poppytest.FaultNone
		}}}, nil)
	_, _, err := e.c.Propose(ctx, e.exchangeRequest("itm_4Qa"), exchangeAction, nil)
	if !errors.Is(err, operations.ErrProposalUnanswered) || !strings.HasPrefix(err.Error(), "operations: ") {
		t.Fatalf("cut: %v", err)
	}
	// A refusal (403 insufficient_scope) forgets the request: nothing is open.
	e.Srv.Faults().ForceError(poppytest.EndpointAPI, poppytest.Fault{Code: "insufficient_scope"})
	if _, _, err := e.c.Propose(ctx, e.exchangeRequest("itm_5Qa"), exchangeAction, nil); err == nil || errors.Is(err, operations.ErrProposalUnanswered) {
		t.Fatalf("refused: %v", err)
	}
	op, _, err := e.c.Propose(ctx, e.exchangeRequest("itm_5Qa"), exchangeAction, nil)
	if err != nil {
		t.Fatal(err)
	}
	reqs := e.Requests(poppytest.EndpointAPI)
	k1, k2 := reqs[len(reqs)-2].Header.Get("Idempotency-Key"), reqs[len(reqs)-1].Header.Get("Idempotency-Key")
	if k1 == "" || k1 == k2 || info(t, e.Srv, op.ID).Proposals != 1 {
		t.Errorf("keys after a refusal: %q %q", k1, k2)
	}
}

// OPS 6, A-38: the same action is the same request whatever the order of
// its JSON members or query parameters, and whatever the spacing of the
// JSON, so none of these proposes again (PA-OPS6-04). Another value is
// another request.
func TestPA_OPS6_04_SameActionInAnyOrder(t *testing.T) {
	e := newEnv(t, &poppytest.Options{Operations: poppytest.OperationsOptions{ProposeAgain: true}}, nil)
	base := e.Srv.EndpointURL(poppytest.EndpointAPI) + "/orders/ord_7Hk2/exchanges"
	req := func(query, body string) *http.Request {
		r, err := http.NewRequest("POST", base+query, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("Content-Type", "application/json; charset=utf-8")
		return r
	}
	first, _, err := e.c.Propose(ctx, req("?lang=en&channel=app&tag=a&tag=b", `{"item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m","note":{"x":1,"y":[1,2]}}`), exchangeAction, nil)
	if err != nil {
		t.Fatal(err)
	}
	same := []struct{ query, body string }{
		{"?channel=app&lang=en&tag=a&tag=b", `{"item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m","note":{"x":1,"y":[1,2]}}`},
		{"?lang=en&channel=app&tag=a&tag=b", `{"replacement_sku":"stormline-insulated-m","note":{"y":[1,2],"x":1},"item_id":"itm_4Qa"}`},
		{"?tag=a&channel=app&tag=b&lang=en", " {\n  \"note\": {\"x\": 1, \"y\": [1, 2]},\n  \"item_id\": \"itm_\\u0034Qa\",\n  \"replacement_sku\": \"stormline-insulated-m\"\n}\n"},
	}
	for _, s := range same {
		op, _, err := e.c.Propose(ctx, req(s.query, s.body), exchangeAction, nil)
		if !isPending(err) || op == nil || op.ID != first.ID {
			t.Errorf("PA-OPS6-04: %s %q proposed again: %s %v", s.query, s.body, brief(op), err)
		}
	}
	if n := len(e.Requests(poppytest.EndpointAPI)); n != 1 {
		t.Errorf("%d proposing requests, want 1", n)
	}
	// Other values, other order of one parameter's values, a number
	// written otherwise, a repeated member: other requests.
	other := []struct{ query, body string }{
		{"?lang=de&channel=app&tag=a&tag=b", `{"item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m","note":{"x":1,"y":[1,2]}}`},
		{"?lang=en&channel=app&tag=b&tag=a", `{"item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m","note":{"x":1,"y":[1,2]}}`},
		{"?lang=en&channel=app&tag=a&tag=b", `{"item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m","note":{"x":1,"y":[2,1]}}`},
		{"?lang=en&channel=app&tag=a&tag=b", `{"item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m","note":{"x":1.0,"y":[1,2]}}`},
		{"?lang=en&channel=app&tag=a&tag=b", `{"item_id":"itm_4Qa","item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m","note":{"x":1,"y":[1,2]}}`},
	}
	for i, o := range other {
		op, _, err := e.c.Propose(ctx, req(o.query, o.body), exchangeAction, nil)
		if err != nil || op == nil || op.ID == first.ID {
			t.Errorf("other request %d: %s %v", i, brief(op), err)
		}
	}
}

// An Approve of an operation another process has already confirmed is a
// *StateError with the state, matching ErrNotProposed; of an expired one,
// ErrOperationExpired too. Nothing is asked and nothing is sent.
func TestNotProposedStateError(t *testing.T) {
	e := newEnv(t, &poppytest.Options{Operations: poppytest.OperationsOptions{TTL: time.Minute}}, nil)
	op := e.propose("itm_4Qa")
	other, err := operations.New(e.sess, &operations.Options{Approver: e.ap})
	if err != nil {
		t.Fatal(err)
	}
	v, _ := other.Get(ctx, op.ID)
	a, err := other.Approve(ctx, v)
	if err != nil {
		t.Fatal(err)
	}
	if done, err := other.Confirm(ctx, a, nil); err != nil || done.State != operations.StateSucceeded {
		t.Fatalf("the other process: %s %v", brief(done), err)
	}
	cur, err := e.c.Get(ctx, op.ID)
	if err != nil {
		t.Fatal(err)
	}
	asked, confirms := len(e.ap.asked()), len(e.confirms())
	_, err = e.c.Approve(ctx, cur)
	var se *operations.StateError
	if !errors.As(err, &se) || se.State != operations.StateSucceeded || se.Operation == nil || se.Operation.ID != op.ID ||
		!isNotProposed(err) || errors.Is(err, operations.ErrOperationExpired) {
		t.Fatalf("Approve of a succeeded operation: %v", err)
	}
	if !strings.HasPrefix(err.Error(), "operations: ") || len(e.ap.asked()) != asked || len(e.confirms()) != confirms {
		t.Errorf("%q; asked %d, confirms %d", err, len(e.ap.asked())-asked, len(e.confirms())-confirms)
	}
	// Handle takes it as it is.
	if got, err := e.c.Handle(ctx, cur, nil); err != nil || got.State != operations.StateSucceeded {
		t.Errorf("Handle: %s %v", brief(got), err)
	}

	late := e.propose("itm_5Qa")
	e.Srv.Clock().Advance(2 * time.Minute)
	exp, err := e.c.Get(ctx, late.ID)
	if err != nil || exp.State != operations.StateExpired {
		t.Fatalf("%s %v", brief(exp), err)
	}
	_, err = e.c.Approve(ctx, exp)
	if !errors.As(err, &se) || se.State != operations.StateExpired || !isNotProposed(err) || !errors.Is(err, operations.ErrOperationExpired) {
		t.Errorf("Approve of an expired operation: %v", err)
	}
}

// PA-OPS6-04 across processes sharing a keystore: two Clients that read
// the journal before either proposed. The second sends nothing while the
// first's operation is open (the record of the request names it), and
// proposes anew once the first process cancelled it.
func TestPA_OPS6_04_TwoProcessesOneProposal(t *testing.T) {
	e := newEnv(t, &poppytest.Options{Operations: poppytest.OperationsOptions{ProposeAgain: true}}, nil)
	c2, err := operations.New(e.sess, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Recover(ctx); err != nil { // c2 has read the (empty) journal
		t.Fatal(err)
	}
	op := e.propose("itm_4Qa")
	got, _, err := c2.Propose(ctx, e.exchangeRequest("itm_4Qa"), exchangeAction, nil)
	if !isPending(err) || got == nil || got.ID != op.ID {
		t.Fatalf("PA-OPS6-04: the second process: %s %v", brief(got), err)
	}
	if n := len(e.Requests(poppytest.EndpointAPI)); n != 1 {
		t.Fatalf("PA-OPS6-04: %d proposing requests, want 1", n)
	}
	if _, err := e.c.Cancel(ctx, op.ID); err != nil {
		t.Fatal(err)
	}
	next, _, err := c2.Propose(ctx, e.exchangeRequest("itm_4Qa"), exchangeAction, nil)
	if err != nil || next == nil || next.ID == op.ID {
		t.Fatalf("after the first process cancelled it: %s %v", brief(next), err)
	}
}

// PA-OPS6-04 within one Client: the same request from eight goroutines at
// once is sent once; the others get its operation, open.
func TestPA_OPS6_04_ConcurrentSameRequest(t *testing.T) {
	e := newEnv(t, &poppytest.Options{Operations: poppytest.OperationsOptions{ProposeAgain: true}}, nil)
	const n = 8
	ids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			op, _, err := e.c.Propose(ctx, e.exchangeRequest("itm_4Qa"), exchangeAction, nil)
			ids[i], errs[i] = brief(op), err
		}()
	}
	wg.Wait()
	pending := 0
	for i := range n {
		if isPending(errs[i]) {
			pending++
		} else if errs[i] != nil {
			t.Errorf("goroutine %d: %v", i, errs[i])
		}
		if ids[i] != ids[0] {
			t.Errorf("operations %s and %s", ids[0], ids[i])
		}
	}
	if m := len(e.Requests(poppytest.EndpointAPI)); m != 1 || pending != n-1 || len(e.Srv.Operations().All()) != 1 {
		t.Errorf("PA-OPS6-04: %d requests, %d pending, %d operations", m, pending, len(e.Srv.Operations().All()))
	}
}

// PA-OPS6-04 for a proposing call that is not one HTTP request of the
// caller's (ProposeOptions.Call, as package api's MCP tool calls use it):
// while the operation a call with the same CallKey proposed is open, the
// call is not run again, in this Client or in another one sharing the
// keystore, and Propose returns the open operation with a *PendingError.
// A Propose with both a request and a Call, or with neither, or a Call
// without a CallKey, sends nothing.
func TestPA_OPS6_04_ProposeCall(t *testing.T) {
	e := newEnv(t, nil, nil)
	action := operations.ToolAction("request_exchange")
	key, err := operations.ToolCallKey(e.Srv.EndpointURL(poppytest.EndpointMCP), "request_exchange", map[string]any{"item_id": "itm_4Qa"})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	call := func(ctx context.Context) (*operations.Operation, error) {
		calls.Add(1)
		resp, err := e.sess.HTTPClient().Do(e.exchangeRequest("itm_4Qa"))
		if err != nil {
			return nil, err
		}
		return operations.FromResponse(resp)
	}
	op, resp, err := e.c.Propose(ctx, nil, action, &operations.ProposeOptions{CallKey: key, Call: call})
	if err != nil || op == nil || resp != nil || op.State != operations.StateProposed || calls.Load() != 1 {
		t.Fatalf("first call: %s, %v, %v after %d calls", brief(op), resp, err, calls.Load())
	}
	again, _, err := e.c.Propose(ctx, nil, action, &operations.ProposeOptions{CallKey: key, Call: call})
	var pend *operations.PendingError
	if !errors.As(err, &pend) || again == nil || again.ID != op.ID || pend.Operation.ID != op.ID || calls.Load() != 1 {
		t.Fatalf("the same call again: %s, %v after %d calls; want the open operation, not run", brief(again), err, calls.Load())
	}
	// Another process sharing the keystore: the journal keeps the key.
	c2, err := operations.New(e.sess, &operations.Options{Approver: e.ap})
	if err != nil {
		t.Fatal(err)
	}
	if got, _, err := c2.Propose(ctx, nil, action, &operations.ProposeOptions{CallKey: key, Call: call}); !isPending(err) || got == nil || got.ID != op.ID || calls.Load() != 1 {
		t.Fatalf("another Client: %s, %v after %d calls", brief(got), err, calls.Load())
	}
	// Misuse sends nothing.
	n := len(e.Requests())
	for name, args := range map[string]struct {
		req  *http.Request
		opts *operations.ProposeOptions
	}{
		"both":    {e.exchangeRequest("itm_5Qa"), &operations.ProposeOptions{CallKey: "k", Call: call}},
		"neither": {nil, nil},
		"no key":  {nil, &operations.ProposeOptions{Call: call}},
	} {
		if got, resp, err := e.c.Propose(ctx, args.req, action, args.opts); err == nil || got != nil || resp != nil {
			t.Errorf("%s: %s, %v, %v; want an error", name, brief(got), resp, err)
		}
	}
	if len(e.Requests()) != n || calls.Load() != 1 {
		t.Errorf("misuse sent %d requests and ran the call %d times", len(e.Requests())-n, calls.Load()-1)
	}
	// Once final, the same call proposes again.
	if _, err := e.c.Handle(ctx, op, nil); err != nil {
		t.Fatal(err)
	}
	next, _, err := e.c.Propose(ctx, nil, action, &operations.ProposeOptions{CallKey: key, Call: call})
	if err != nil || next == nil || next.ID == op.ID || calls.Load() != 2 {
		t.Fatalf("after the first is final: %s, %v after %d calls", brief(next), err, calls.Load())
	}
}
