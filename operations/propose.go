package operations

// Proposing (OPS 4, 6, A-38): Propose keys each proposing request (key.go)
// and returns the open operation instead of proposing again; it journals
// the request before sending it, with its Idempotency-Key, so that a
// request whose answer was lost is sent again with the same key, never as
// a new proposal. One proposing request per key is in flight in a Client
// at a time (keyLocks).

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"sync"
)

// ProposeOptions configures Propose. Nil means req is sent with the
// Session's HTTP client.
type ProposeOptions struct {
	// HTTPClient sends req: a client of the Client's Session, such as one
	// bound to an API's resource (package api passes the one of its
	// OpenAPI). Nil means Session.HTTPClient.
	HTTPClient *http.Client
	// Call and CallKey make a proposing call that is not one HTTP request
	// of the caller's, such as an MCP tool call (OPS 4.2; package api's
	// MCP.CallTool proposes this way): req is then nil. CallKey identifies
	// the call, "the same action" (ToolCallKey for an MCP tool). While an
	// operation a call with the same CallKey proposed is open, Call is not
	// run; otherwise it runs and returns the operation the Company
	// proposed, or nil when it proposed none. Such a call carries no
	// Idempotency-Key, and it is journalled once it answered.
	Call    func(ctx context.Context) (*Operation, error)
	CallKey string
}

// Propose sends req, a request to an endpoint that may propose an
// operation (OPS 4.1), through the Session and returns the Client's view
// of the operation of a 202 answer. action names the endpoint for
// standing permissions, such as OpenAPIAction("POST",
// "/orders/{id}/exchanges"). opts may be nil; with opts.Call, the call
// proposes instead of req, and the response is nil.
//
// While an operation that the same request proposed is still open,
// Propose sends nothing and returns that operation with a *PendingError
// instead: the SDK never asks for a new proposal of an
// action whose operation isn't final (OPS 6, A-38), not even after a
// restart, since proposals are journalled. The same request is the same
// method, URL and body, with query parameters in any order and, for a
// JSON body, members in any order and any spacing.
//
// The request is journalled before it is sent, with the Idempotency-Key
// header it is sent with (the caller's own, if req has one). When it gets
// no usable answer (none at all, or a 5xx), or the process dies before the
// answer is journalled, Propose returns an error matching
// ErrProposalUnanswered, and the same request sent again (in this process
// or after a restart) carries the same Idempotency-Key: a Company that
// honours the header, or that returns the open operation of the same
// action (OPS 4), answers with the operation it proposed the first time.
// When the Company answers without an operation (it performed the request
// as it would without the extension), Propose returns the response, body
// unread, and no operation. A status of 400 and above is an error
// (poppy.ResponseError; extension_required matches
// poppy.ErrExtensionRequired).
func (c *Client) Propose(ctx context.Context, req *http.Request, action Action, opts *ProposeOptions) (*Operation, *http.Response, error) {
	var o ProposeOptions
	if opts != nil {
		o = *opts
	}
	switch {
	case o.Call != nil && req != nil:
		return nil, nil, errors.New("operations: Propose takes a request or ProposeOptions.Call, not both")
	case o.Call != nil:
		op, err := c.proposeCall(ctx, o.CallKey, action, o.Call)
		return op, nil, err
	case req == nil:
		return nil, nil, errors.New("operations: Propose needs a request")
	}
	hc := o.HTTPClient
	if hc == nil {
		hc = c.sess.HTTPClient()
	}
	if err := c.load(ctx); err != nil {
		return nil, nil, err
	}
	key, err := proposalKey(req)
	if err != nil {
		return nil, nil, err
	}
	unlock, err := c.locks.lock(ctx, key)
	if err != nil {
		return nil, nil, err
	}
	defer unlock()
	if open := c.openProposal(ctx, key); open != nil {
		// Another process may have finished it since: the journal says.
		if _, err := c.loadRecord(ctx, open.ID); err != nil {
			return nil, nil, err
		}
		if open := c.openProposal(ctx, key); open != nil {
			return open, nil, &PendingError{Operation: open} // PA-OPS6-04
		}
	}
	// OPS 6: journalled before it is sent, with the key it is sent with.
	idem, openID, err := c.j.sending(ctx, key, action, req.Header.Get("Idempotency-Key"), "", c.answered)
	if err == nil && openID != "" {
		// Another process proposed it since this Client read the journal.
		if _, err := c.loadRecord(ctx, openID); err != nil {
			return nil, nil, err
		}
		if open := c.openProposal(ctx, key); open != nil {
			return open, nil, &PendingError{Operation: open} // PA-OPS6-04
		}
		idem, _, err = c.j.sending(ctx, key, action, req.Header.Get("Idempotency-Key"), openID, c.answered)
	}
	if err != nil {
		return nil, nil, err
	}
	out := req.Clone(ctx)
	out.Header.Set("Idempotency-Key", idem)
	resp, err := hc.Do(out)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL, which the caller has
		}
		c.log.DebugContext(ctx, "operations: a proposing request got no answer; it stays journalled", "error", err)
		return nil, nil, &unansweredError{err: err} // the journal keeps the request
	}
	op, err := FromResponse(resp)
	if errors.Is(err, ErrNoOperation) {
		_ = c.j.unsent(ctx, key, idem) // performed without an operation
		return nil, resp, nil
	}
	if err != nil {
		if resp.Body != nil {
			resp.Body.Close()
		}
		switch {
		case resp.StatusCode >= 500 || resp.StatusCode == http.StatusAccepted:
			// A 5xx, or a 202 whose body didn't arrive whole or doesn't
			// parse: the Company may have proposed an operation. The
			// journal keeps the request.
			return nil, nil, &unansweredError{err: err}
		case resp.StatusCode != http.StatusConflict:
			// A refusal: nothing is open. (A 409 may be the Company still
			// processing the same Idempotency-Key: the record stays.)
			_ = c.j.unsent(ctx, key, idem)
		}
		return nil, nil, err
	}
	v, err := c.observeProposed(op, &action, key, idem)
	if err != nil {
		return v, nil, err
	}
	if err := c.j.proposed(ctx, v, action, key, idem); err != nil {
		return v, nil, err
	}
	if v.State.Final() {
		_ = c.j.unsent(ctx, key, idem)
	} else {
		_ = c.j.answered(ctx, key, idem, v.ID)
	}
	return v, nil, nil
}

// proposeCall is Propose of a call (ProposeOptions.Call) keyed by key.
func (c *Client) proposeCall(ctx context.Context, key string, action Action, call func(ctx context.Context) (*Operation, error)) (*Operation, error) {
	if key == "" {
		return nil, errors.New("operations: ProposeOptions.Call needs a CallKey")
	}
	if err := c.load(ctx); err != nil {
		return nil, err
	}
	unlock, err := c.locks.lock(ctx, key)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if open := c.openProposal(ctx, key); open != nil {
		return open, &PendingError{Operation: open} // PA-OPS6-04
	}
	op, err := call(ctx)
	if err != nil || op == nil {
		return nil, err
	}
	v, err := c.observe(op, &action, key)
	if err != nil {
		return v, err
	}
	if err := c.j.proposed(ctx, v, action, key, ""); err != nil {
		return v, err
	}
	return v, nil
}

// openProposal returns the open operation the request with key proposed.
func (c *Client) openProposal(ctx context.Context, key string) *Operation {
	c.mu.Lock()
	var open *Operation
	for _, e := range c.ops {
		if e.proposal == key && !e.op.State.Final() {
			open = e.op.Clone()
			break
		}
	}
	c.mu.Unlock()
	if open == nil {
		return nil
	}
	if open.State == StateProposed && open.Expired(c.clock.Now()) {
		// An expired proposal is final at the Company: read it to be sure.
		if v, err := c.Get(ctx, open.ID); err == nil && v.State.Final() {
			return nil
		} else if companyCode(err) == codeNotFound {
			return nil
		}
	}
	return open
}

// keyLocks lets one proposing request of a key be in flight in a Client,
// so that two goroutines sending the same request make one proposal: the
// second finds the first one's operation. The zero value is ready.
type keyLocks struct {
	mu sync.Mutex
	m  map[string]*keyLock
}

type keyLock struct {
	ch chan struct{}
	n  int
}

// lock waits until no other proposing request of key is in flight, or ctx
// ends, and returns the function that lets the next one go.
func (k *keyLocks) lock(ctx context.Context, key string) (unlock func(), err error) {
	k.mu.Lock()
	l := k.m[key]
	if l == nil {
		if k.m == nil {
			k.m = map[string]*keyLock{}
		}
		l = &keyLock{ch: make(chan struct{}, 1)}
		k.m[key] = l
	}
	l.n++
	k.mu.Unlock()
	release := func() {
		k.mu.Lock()
		if l.n--; l.n == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}
	select {
	case l.ch <- struct{}{}:
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
	return func() {
		<-l.ch
		release()
	}, nil
}
