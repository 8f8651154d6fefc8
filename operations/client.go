package operations

// The Client and its at-most-once discipline (OPS 5.2, 6).
//
// Every operation the Client sees, from any channel, goes through observe,
// which keeps one view per operation_id (merge: newest revision wins, a
// final state is never replaced). Confirm writes the approved confirm
// (operation, revision, approved_by) to the keystore journal before the
// first confirm request; a confirm that fails without an answer, times out
// or gets a 5xx is sent again with the same operation ID and body, never
// re-proposed; the Company returns an operation that is no longer proposed
// as it is, so a repeated confirm performs nothing twice. A crash leaves the
// journal entry behind, and Recover picks it up: it reads the operation,
// confirms again only if it is still proposed at the approved revision, and
// tracks it until final. Propose keys each proposal by its request
// (canonical JSON, sorted query) and returns the open operation instead of
// proposing again; it journals the request before sending it, with
// its Idempotency-Key, so that a request whose answer was lost is sent
// again with the same key, never as a new proposal. One proposing request
// per key is in flight in a Client at a time.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/internal/retry"
)

// Name and Version identify the extension (OPS 2).
const (
	Name    = "operations"
	Version = "1"
)

// Options configures a Client. The zero value is valid, but without an
// Approver only standing permissions can approve.
type Options struct {
	// Approver asks the User. It is the only source of a User's approval.
	Approver Approver
	// Logger receives debug records. Nil discards. Records hold operation
	// IDs and states, never a token and never the Company's text.
	Logger *slog.Logger
	// MaxWait caps one wait between reads of an in_progress operation,
	// whatever Retry-After the Company sends. Zero means 5 minutes.
	MaxWait time.Duration
	// OnFinal is called once for each operation the Client first sees in a
	// final state, with that final operation: present its Result.Summary
	// to the User as the Company's account of what happened (OPS 6,
	// PA-OPS6-05). It must not block for long.
	OnFinal func(*Operation)
}

// Client uses the operations extension of one Company in one Session: it
// reads operations out of every channel, asks for approval, confirms,
// tracks and cancels them. It is safe for concurrent use.
type Client struct {
	sess     *poppy.Session
	endpoint string // the operations endpoint, without a trailing "/"
	approver Approver
	log      *slog.Logger
	clock    poppy.Clock
	maxWait  time.Duration
	onFinal  func(*Operation)
	origins  map[string]bool // the Company's origins, for Operation.URL (origins.go)

	loadMu sync.Mutex
	loaded bool

	mu  sync.Mutex
	ops map[string]*entry
	// legacy is set when the journal holds an open operation whose
	// proposal key is of the legacy form (see proposalKeys).
	legacy bool

	keyMu    sync.Mutex
	keyLocks map[string]*keyLock
}

// keyLock lets one proposing request of a key be in flight in a Client.
type keyLock struct {
	ch chan struct{}
	n  int
}

type entry struct {
	op        *Operation
	action    Action
	proposal  string // key of the proposing request, "" if unknown
	idem      string // Idempotency-Key of the proposing request, "" if unknown
	finalSeen bool
	// broken holds the protocol error of a Company that changed a
	// revision it had issued: such an operation is never confirmed.
	broken error
}

// New returns a Client for sess's Company. It returns ErrNotSupported, and
// sends nothing, unless the Company lists the extension at version "1" with
// an https endpoint and the agent's identity lists it too (PA-OPS2-01,
// PA-OPS2-03: the agent advertises it with IdentityConfig.Extensions
// {"operations": "1"}).
func New(sess *poppy.Session, opts *Options) (*Client, error) {
	if sess == nil {
		return nil, errors.New("operations: nil Session")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	c := sess.Company()
	if !c.Agent().Identity().Supports(Name, Version) {
		return nil, fmt.Errorf("%w: the agent's identity does not list it (IdentityConfig.Extensions)", ErrNotSupported)
	}
	e, ok := c.Extension(Name, Version)
	if !ok {
		return nil, ErrNotSupported
	}
	var v struct {
		Endpoint string `json:"endpoint"`
	}
	if json.Unmarshal(e.Raw, &v) != nil || v.Endpoint == "" {
		return nil, fmt.Errorf("%w: the entry has no endpoint", ErrNotSupported)
	}
	u, err := url.Parse(v.Endpoint)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("%w: the endpoint is not an https URL", ErrNotSupported)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MaxWait <= 0 {
		o.MaxWait = 5 * time.Minute
	}
	return &Client{
		sess: sess, endpoint: strings.TrimSuffix(v.Endpoint, "/"), approver: o.Approver,
		log: o.Logger, clock: c.Agent().Clock(), maxWait: o.MaxWait, onFinal: o.OnFinal,
		origins: companyOrigins(c), ops: map[string]*entry{}, keyLocks: map[string]*keyLock{},
	}, nil
}

// Endpoint returns the operations endpoint.
func (c *Client) Endpoint() string { return c.endpoint }

// Session returns the Client's Session.
func (c *Client) Session() *poppy.Session { return c.sess }

// Observe hands the Client an operation read from any channel (FromResponse,
// FromToolResult, FromMessage, Parse) with the action that proposed it, and
// returns the Client's view of it: the same operation_id from two channels
// is one operation, the newest revision wins, and a final state is never
// replaced (OPS 4). Changed terms under a revision already seen are an
// ErrProtocol, and the earlier view stays.
func (c *Client) Observe(op *Operation, action Action) (*Operation, error) {
	return c.observe(op, &action, "")
}

func (c *Client) observe(op *Operation, action *Action, proposal string) (*Operation, error) {
	return c.observeProposed(op, action, proposal, "")
}

// observeProposed is observe for an operation a request with the
// Idempotency-Key idem proposed.
func (c *Client) observeProposed(op *Operation, action *Action, proposal, idem string) (*Operation, error) {
	if op == nil {
		return nil, ErrNoOperation
	}
	c.mu.Lock()
	e := c.ops[op.ID]
	if e == nil {
		e = &entry{}
		c.ops[op.ID] = e
	}
	if action != nil && e.action == (Action{}) {
		e.action = *action
	}
	if proposal != "" {
		e.proposal = proposal
	}
	if idem != "" {
		e.idem = idem
	}
	in := op.Clone()
	if in.URL != "" && !c.companyURL(in.URL) {
		in.URL = "" // not the Company's page (origins.go)
	}
	next, err := merge(e.op, in)
	if err != nil && e.broken == nil && next.Revision == op.Revision {
		e.broken = err // PA-OPS3-09: terms changed under a revision
	}
	if next != e.op {
		e.op = next
	} else if err == nil && e.op.State == op.State && e.op.Revision == op.Revision {
		e.op.RetryAfter = op.RetryAfter // the same view, with the latest hint
	}
	view := e.op.Clone()
	notify := view.State.Final() && !e.finalSeen
	if notify {
		e.finalSeen = true
	}
	if len(c.ops) > maxViews {
		c.pruneLocked(op.ID)
	}
	c.mu.Unlock()
	if notify && c.onFinal != nil {
		c.onFinal(view.Clone())
	}
	return view, err
}

// maxViews bounds the operations a Client keeps in memory; beyond it, final
// ones are dropped (the Company keeps them readable, and the journal keeps
// those this Client proposed or confirmed).
const maxViews = 4096

func (c *Client) pruneLocked(keep string) {
	for id, e := range c.ops {
		if id != keep && e.op.State.Final() {
			delete(c.ops, id)
		}
	}
}

// view returns the Client's view of an operation, or nil.
func (c *Client) view(id string) *Operation {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.ops[id]; e != nil {
		return e.op.Clone()
	}
	return nil
}

// brokenErr returns the protocol error that makes an operation
// unconfirmable, or nil.
func (c *Client) brokenErr(id string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.ops[id]; e != nil {
		return e.broken
	}
	return nil
}

func (c *Client) entryOf(id string) (Action, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.ops[id]; e != nil {
		return e.action, e.proposal
	}
	return Action{}, ""
}

// forget drops the Client's state for an operation the Company no longer
// knows (PA-OPS9-01).
func (c *Client) forget(ctx context.Context, id string) {
	c.mu.Lock()
	var key string
	if e := c.ops[id]; e != nil {
		key = e.proposal
	}
	delete(c.ops, id)
	c.mu.Unlock()
	_ = c.journalDelete(ctx, id)
	if key != "" {
		_ = c.clearAnswered(ctx, key, id)
	}
}

// Get reads the operation once at the operations endpoint (OPS 6,
// PA-OPS6-01) and returns the Client's view of it.
func (c *Client) Get(ctx context.Context, id string) (*Operation, error) {
	resp, err := c.send(ctx, http.MethodGet, c.opURL(id, ""), nil)
	if err != nil {
		return nil, err
	}
	op, err := c.readOperation(ctx, resp, id)
	if err != nil {
		return nil, err
	}
	return c.afterRead(ctx, op)
}

// afterRead merges a read operation into the view and the journal.
func (c *Client) afterRead(ctx context.Context, op *Operation) (*Operation, error) {
	v, err := c.observe(op, nil, "")
	if err != nil {
		return v, err
	}
	if v.State.Final() {
		_ = c.journalFinal(ctx, v)
	}
	return v, nil
}

// Track reads the operation until it is final, waiting Retry-After (capped
// by Options.MaxWait) between reads, or a backoff from 1 s to 30 s when the
// Company sends none (PA-OPS5-17, PA-OPS6-01, PA-OPS6-02). It stops with
// ctx, returning the latest view and ctx's error. A final operation is
// returned without a request (PA-OPS3-08).
func (c *Client) Track(ctx context.Context, id string) (*Operation, error) {
	cur := c.view(id)
	if cur == nil {
		var err error
		if cur, err = c.Get(ctx, id); err != nil {
			return nil, err
		}
	}
	for attempt := 0; !cur.State.Final(); attempt++ {
		if err := c.clock.Sleep(ctx, c.wait(cur.RetryAfter, attempt)); err != nil {
			return cur, err
		}
		next, err := c.Get(ctx, id)
		switch {
		case err == nil:
			cur = next
		case errors.Is(err, ErrOperationNotFound) || errors.Is(err, ErrProtocol) || ctx.Err() != nil:
			return cur, err
		case retry.IsTransient(err):
			c.log.DebugContext(ctx, "operations: reading failed, will read again", "operation_id", id, "error", err)
			cur.RetryAfter = 0
		default:
			return cur, err
		}
	}
	return cur, nil
}

// wait is how long to wait before the next read: Retry-After, or a backoff
// of 1, 2, 4 … 30 s; at least 1 s, at most maxWait.
func (c *Client) wait(retryAfter time.Duration, attempt int) time.Duration {
	d := retryAfter
	if d <= 0 {
		d = time.Second << min(attempt, 5)
		d = min(d, 30*time.Second)
	}
	return min(max(d, time.Second), c.maxWait)
}

// Approve gets approval for the operation's current revision: from a
// standing permission that covers it (never when user_approval_required is
// set or terms are absent), or else from the User through the Approver
// (OPS 5.1). It returns ErrDeclined when the User declines. op must be the
// Client's operation (from Propose or Observe). An operation that is no
// longer proposed (another process or channel confirmed, cancelled or
// expired it) is a *StateError matching ErrNotProposed, with the state.
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
	switch {
	case cur.State != StateProposed:
		// Another process or channel confirmed, cancelled or expired it.
		return nil, &StateError{Operation: cur, State: cur.State}
	case cur.Expired(c.clock.Now()):
		return nil, fmt.Errorf("%w: %s revision %d", ErrOperationExpired, cur.ID, cur.Revision) // PA-OPS3-02
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

// maxConfirmAttempts bounds how often one Confirm call sends the confirm
// before it gives up; the journal keeps the confirm for Recover.
const maxConfirmAttempts = 8

// Confirm confirms the approved revision at the operations endpoint with
// {"revision": n, "approved_by": …} (OPS 5.2, PA-OPS5-13) and tracks the
// operation until final. The approval must be for the revision the Client
// knows as the latest (PA-OPS5-01), not withdrawn (PA-OPS7-05), and the
// revision unexpired (PA-OPS3-02); otherwise nothing is sent.
//
// The confirm is written to the keystore journal before it is first sent
// (OPS 6). A confirm that gets no answer, or a 5xx, is sent again with the
// same operation ID and body (PA-OPS6-03); the Company returns an operation
// that is no longer proposed as it is. terms_changed and
// user_approval_required come back as an *Error (with the current operation
// for terms_changed) and need a new approval: Confirm never confirms new
// terms on its own (PA-OPS5-15). An operation that is already past proposed
// is returned as it is, tracked if in_progress (PA-OPS5-18).
//
// A sign_in_required or insufficient_scope that the Session transport
// could not settle with a stored Account Token comes back as the
// *poppy.Error: sign the User in (package signin) and call Confirm again
// with the same Approval, which sends the same confirm (PA-OPS5-14).
func (c *Client) Confirm(ctx context.Context, a *Approval) (*Operation, error) {
	op, err := c.Submit(ctx, a)
	if err != nil || op.State != StateInProgress {
		return op, err
	}
	return c.Track(ctx, op.ID)
}

// Submit is Confirm without the tracking: it sends the journalled confirm
// until the Company answers it and returns the operation as the Company
// answered, which may be in_progress. Track it, or Recover it after a
// restart.
func (c *Client) Submit(ctx context.Context, a *Approval) (*Operation, error) {
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
			_ = c.journalClearIntent(ctx, cur.ID)
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
// where the User's own approval is required (PA-OPS5-05), unexpired
// (PA-OPS3-02). With stop, the caller returns (op, err) as they are: an
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
	case cur.Expired(c.clock.Now()):
		return cur, true, fmt.Errorf("%w: %s revision %d", ErrOperationExpired, cur.ID, cur.Revision)
	}
	return cur, false, nil
}

// beginConfirm marks a as confirmed, unless it was withdrawn
// (PA-OPS7-05), and journals the confirm before it is sent (OPS 6); via is
// "" for the operations endpoint, "website" for ConfirmOnWebsite.
func (c *Client) beginConfirm(ctx context.Context, a *Approval, cur *Operation, via string) (journalConfirm, error) {
	a.mu.Lock()
	if a.withdrawn {
		a.mu.Unlock()
		return journalConfirm{}, ErrApprovalWithdrawn
	}
	a.confirmed = true
	a.mu.Unlock()
	jc := journalConfirm{Revision: a.revision, ApprovedBy: a.by, Permission: a.permission, Via: via, At: c.clock.Now()}
	if err := c.journalIntent(ctx, cur, jc); err != nil {
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

// Handle takes a proposed operation through approval and confirmation to a
// final state: it asks for approval (standing permission or the User),
// confirms, gets a new approval when the terms changed (PA-OPS5-15) or
// when the Company wants the User's own approval (PA-OPS5-16), and tracks
// the operation until final. When the User declines, it declines the
// proposal at the Company (OPS 7) and returns ErrDeclined with the
// cancelled operation.
func (c *Client) Handle(ctx context.Context, op *Operation) (*Operation, error) {
	cur, err := c.observe(op, nil, "")
	if err != nil {
		return nil, err
	}
	reason, userOnly := "", false
	for range 16 {
		if cur.State != StateProposed {
			if cur.State == StateInProgress {
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
		done, err := c.Confirm(ctx, a)
		var oe *Error
		switch {
		case errors.As(err, &oe) && oe.Code == "terms_changed" && oe.Operation != nil:
			cur, reason, userOnly = c.viewOr(oe.Operation), "terms_changed", false
		case errors.As(err, &oe) && oe.Code == "user_approval_required":
			cur, reason, userOnly = c.viewOr(cur), "user_approval_required", true
		default:
			return done, err
		}
	}
	return cur, protocolError("operation %s: too many revisions", cur.ID)
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

// Propose sends req, a request to an endpoint that may propose an
// operation (OPS 4.1), through the Session and returns the operation of a
// 202 answer. action names the endpoint for standing permissions, such as
// OpenAPIAction("POST", "/orders/{id}/exchanges").
//
// While an operation that the same request proposed is still open,
// Propose sends nothing and returns that operation with a *PendingError
// (ErrOperationPending): the SDK never asks for a new proposal of an
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
func (c *Client) Propose(ctx context.Context, req *http.Request, action Action) (*Operation, *http.Response, error) {
	return c.ProposeVia(ctx, c.sess.HTTPClient(), req, action)
}

// ProposeVia is Propose sending req with hc, a client of the Client's
// Session, such as one bound to an API's resource (package api uses it).
func (c *Client) ProposeVia(ctx context.Context, hc *http.Client, req *http.Request, action Action) (*Operation, *http.Response, error) {
	if hc == nil {
		return nil, nil, errors.New("operations: ProposeVia needs an HTTP client")
	}
	if err := c.load(ctx); err != nil {
		return nil, nil, err
	}
	key, old, err := proposalKeys(req, c.hasLegacy())
	if err != nil {
		return nil, nil, err
	}
	unlock, err := c.lockKey(ctx, key)
	if err != nil {
		return nil, nil, err
	}
	defer unlock()
	if open := c.openProposal(ctx, key, old); open != nil {
		// Another process may have finished it since: the journal says.
		if _, err := c.loadRecord(ctx, open.ID); err != nil {
			return nil, nil, err
		}
		if open := c.openProposal(ctx, key, old); open != nil {
			return open, nil, &PendingError{Operation: open} // PA-OPS6-04
		}
	}
	// OPS 6: journalled before it is sent, with the key it is sent with.
	idem, openID, err := c.journalProposing(ctx, key, action, req.Header.Get("Idempotency-Key"), "")
	if err == nil && openID != "" {
		// Another process proposed it since this Client read the journal.
		if _, err := c.loadRecord(ctx, openID); err != nil {
			return nil, nil, err
		}
		if open := c.openProposal(ctx, key, old); open != nil {
			return open, nil, &PendingError{Operation: open} // PA-OPS6-04
		}
		idem, _, err = c.journalProposing(ctx, key, action, req.Header.Get("Idempotency-Key"), openID)
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
		_ = c.clearProposing(ctx, key, idem) // performed without an operation
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
			_ = c.clearProposing(ctx, key, idem)
		}
		return nil, nil, err
	}
	v, err := c.observeProposed(op, &action, key, idem)
	if err != nil {
		return v, nil, err
	}
	if err := c.journalProposal(ctx, v, action, key, idem); err != nil {
		return v, nil, err
	}
	if v.State.Final() {
		_ = c.clearProposing(ctx, key, idem)
	} else {
		_ = c.markAnswered(ctx, key, idem, v.ID)
	}
	return v, nil, nil
}

// hasLegacy reports whether proposals journalled under legacy keys are
// open, so that requests must be keyed both ways.
func (c *Client) hasLegacy() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.legacy
}

// lockKey waits until no other proposing request of key is in flight in
// this Client, so that two goroutines sending the same request make one
// proposal: the second finds the first one's operation.
func (c *Client) lockKey(ctx context.Context, key string) (func(), error) {
	c.keyMu.Lock()
	l := c.keyLocks[key]
	if l == nil {
		l = &keyLock{ch: make(chan struct{}, 1)}
		c.keyLocks[key] = l
	}
	l.n++
	c.keyMu.Unlock()
	release := func() {
		c.keyMu.Lock()
		if l.n--; l.n == 0 {
			delete(c.keyLocks, key)
		}
		c.keyMu.Unlock()
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

// ProposeCall is Propose for a proposing call that is not one HTTP request
// of the caller's, such as an MCP tool call (OPS 4.2). key identifies the
// call (ToolCallKey for an MCP tool). While an operation a call with the
// same key proposed is still open, call is not run and that operation is
// returned with a *PendingError (ErrOperationPending), even after a
// restart, since proposals are journalled (OPS 6, A-38). Otherwise call
// runs and returns the operation the Company proposed, or nil when it
// proposed none; ProposeCall returns the Client's view of it.
func (c *Client) ProposeCall(ctx context.Context, key string, action Action, call func(ctx context.Context) (*Operation, error)) (*Operation, error) {
	if key == "" {
		return nil, errors.New("operations: ProposeCall needs a key")
	}
	if err := c.load(ctx); err != nil {
		return nil, err
	}
	unlock, err := c.lockKey(ctx, key)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if open := c.openProposal(ctx, key, ""); open != nil {
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
	if err := c.journalProposal(ctx, v, action, key, ""); err != nil {
		return v, err
	}
	return v, nil
}

// ToolCallKey is the ProposeCall key of a call of the MCP tool named tool
// on the server at serverURL with args (a JSON object, as any value
// json.Marshal takes, or json.RawMessage): the same tool with the same
// arguments, whatever their order or spacing, is the same call.
func ToolCallKey(serverURL, tool string, args any) (string, error) {
	var raw []byte
	switch a := args.(type) {
	case json.RawMessage:
		raw = a
	case []byte:
		raw = a
	default:
		var err error
		if raw, err = json.Marshal(args); err != nil {
			return "", fmt.Errorf("operations: tool arguments: %w", err)
		}
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if len(bytes.TrimSpace(raw)) > 0 {
		if err := dec.Decode(&v); err != nil {
			return "", fmt.Errorf("operations: tool arguments: %w", err)
		}
	}
	canon, err := json.Marshal(v) // object keys sorted
	if err != nil {
		return "", fmt.Errorf("operations: tool arguments: %w", err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "mcp tools/call %s %s\n", serverURL, tool)
	h.Write(canon)
	return "mcp-" + base64.RawURLEncoding.EncodeToString(h.Sum(nil)), nil
}

// openProposal returns the open operation the request with key (or the
// legacy key old, when not "") proposed.
func (c *Client) openProposal(ctx context.Context, key, old string) *Operation {
	c.mu.Lock()
	var open *Operation
	for _, e := range c.ops {
		if (e.proposal == key || old != "" && e.proposal == old) && !e.op.State.Final() {
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
		} else if errors.Is(err, ErrOperationNotFound) {
			return nil
		}
	}
	return open
}

func (c *Client) opURL(id, action string) string {
	u := c.endpoint + "/" + url.PathEscape(id)
	if action != "" {
		u += "/" + action
	}
	return u
}

// send sends a request to the operations endpoint through the Session
// transport, which picks the token for the entry's resource (PA-OPS2-02).
func (c *Client) send(ctx context.Context, method, target string, body []byte) (*http.Response, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, r)
	if err != nil {
		return nil, fmt.Errorf("operations: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.sess.HTTPClient().Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, transient(err, 0)
	}
	return resp, nil
}

// readOperation reads an operations endpoint answer: the operation, or an
// error. It closes the body.
func (c *Client) readOperation(ctx context.Context, resp *http.Response, id string) (*Operation, error) {
	defer resp.Body.Close()
	if perr := poppy.ResponseError(resp); perr != nil {
		pe := perr.(*poppy.Error)
		if resp.StatusCode >= 500 {
			return nil, transient(pe, retry.After(resp.Header.Get("Retry-After"), c.clock.Now()))
		}
		if _, ok := codeSentinels[pe.Code]; !ok {
			return nil, pe
		}
		e := &Error{Code: pe.Code, Status: pe.Status, Err: pe}
		if b, err := readBody(resp.Body); err == nil {
			var body struct {
				Operation json.RawMessage `json:"operation"`
			}
			if json.Unmarshal(b, &body) == nil && len(body.Operation) > 0 {
				if op, err := Parse(body.Operation); err == nil && op.ID == id {
					e.Operation, _ = c.observe(op, nil, "")
				}
			}
		}
		if pe.Code == "operation_not_found" {
			c.forget(ctx, id) // PA-OPS9-01
		}
		return nil, e
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusAccepted {
		return nil, protocolError("operations endpoint answered HTTP %d", resp.StatusCode)
	}
	b, err := readBody(resp.Body)
	if err != nil {
		return nil, transient(err, 0)
	}
	op, err := Parse(b)
	if err != nil {
		return nil, err
	}
	if op.ID != id {
		return nil, protocolError("asked for operation %s, got %s", id, op.ID)
	}
	op.RetryAfter = retry.After(resp.Header.Get("Retry-After"), c.clock.Now()) // PA-OPS6-01
	return op, nil
}

// transient marks a failure after which the request may be sent again: no
// answer (network, cut connection, timeout, unreadable body) or a 5xx, with
// the Company's Retry-After (the SDK's one such error,
// internal/retry.Transient).
func transient(err error, after time.Duration) error {
	return &retry.Transient{Prefix: "operations: no usable answer: ", Err: err, After: after}
}

// isRefusal reports whether err is a 4xx answer: the Company refused the
// request without acting on it.
func isRefusal(err error) bool {
	var pe *poppy.Error
	return errors.As(err, &pe) && pe.Status >= 400 && pe.Status < 500
}
