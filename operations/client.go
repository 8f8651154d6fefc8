package operations

// The Client and its at-most-once discipline (OPS 5.2, 6).
//
// A Client holds three things: its views, one per operation_id, which
// every operation it sees from any channel goes through (observe: the
// newest revision wins, a final state is never replaced); the journal
// (journal.go), the keystore records written before the network call each
// protects; and a lock per proposal key (propose.go). The flows read
// top-down, each in its own file: propose.go (Propose: key, journal,
// send), approve.go (Approve: standing permissions, then the Approver),
// confirm.go (Handle, Confirm, Cancel: journal, send until answered,
// track), website.go (a confirm on the Company's website) and recover.go
// (loading the journal, Recover after a crash). This file holds the views,
// the reads (Get, Track) and the requests to the operations endpoint.

import (
	"bytes"
	"context"
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

	j     *journal // the keystore journal (journal.go)
	locks keyLocks // one proposing request per key in flight (propose.go)
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
	oc := &Client{
		sess: sess, endpoint: strings.TrimSuffix(v.Endpoint, "/"), approver: o.Approver,
		log: o.Logger, clock: c.Agent().Clock(), maxWait: o.MaxWait, onFinal: o.OnFinal,
		origins: companyOrigins(c), ops: map[string]*entry{},
		j: &journal{sess: sess, endpoint: strings.TrimSuffix(v.Endpoint, "/"), clock: c.Agent().Clock()},
	}
	sessionClient.LoadOrStore(sess, oc)
	return oc, nil
}

// sessionClient holds each Session's Client: the first one New made for
// it (see SessionClient).
var sessionClient poppy.SessionValue[*Client]

// SessionClient returns sess's Client: the first one New made for sess,
// nil if New made none. Packages api and conversation use it for every
// operation they read when not given a Client (api.OpenAPIOptions,
// api.MCPOptions, conversation.Options), so that one operation_id is one
// operation across channels by default (OPS 4), with the Approver and
// OnFinal the caller gave New. A later New for the same Session makes a
// Client of its own, as another process would (they share the journal in
// the keystore); Company.Session returns one *Session per User and
// Session name, so this is one Client per Company, User and Session.
func SessionClient(sess *poppy.Session) *Client {
	oc, _ := sessionClient.Load(sess)
	return oc
}

// Endpoint returns the operations endpoint.
func (c *Client) Endpoint() string { return c.endpoint }

// Session returns the Client's Session.
func (c *Client) Session() *poppy.Session { return c.sess }

// Observe hands the Client an operation read from any channel with the
// action that proposed it, and returns the Client's view of it: the same
// operation_id from two channels is one operation, the newest revision
// wins, and a final state is never replaced (OPS 4). Changed terms under a
// revision already seen are an ErrProtocol, and the earlier view stays.
// Packages api and conversation call it for every operation they read,
// on the Client they are given (api.OpenAPIOptions.Operations,
// api.MCPOptions.Operations, conversation.Options.Operations) or else on
// the Session's (SessionClient); call it for an operation read elsewhere
// (Parse, FromResponse).
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
	_ = c.j.remove(ctx, id)
	if key != "" {
		_ = c.j.closed(ctx, key, id)
	}
}

// finalize records a final operation in the journal and drops the record
// of the request that proposed it, no longer open.
func (c *Client) finalize(ctx context.Context, op *Operation) error {
	key, err := c.j.final(ctx, op)
	if key == "" {
		_, key = c.entryOf(op.ID)
	}
	if key != "" {
		_ = c.j.closed(ctx, key, op.ID)
	}
	return err
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
		_ = c.finalize(ctx, v)
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
		case companyCode(err) == codeNotFound || errors.Is(err, ErrProtocol) || ctx.Err() != nil:
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
		if pe.Code == codeNotFound {
			c.forget(ctx, id) // PA-OPS9-01
		}
		if pe.Code != codeTermsChanged && pe.Code != codeUserApproval {
			return nil, pe
		}
		// The Company may send the current operation with its refusal.
		if b, err := readBody(resp.Body); err == nil {
			var body struct {
				Operation json.RawMessage `json:"operation"`
			}
			if json.Unmarshal(b, &body) == nil && len(body.Operation) > 0 {
				if op, err := Parse(body.Operation); err == nil && op.ID == id {
					view, _ := c.observe(op, nil, "")
					return nil, &Error{Operation: view, Err: pe, sent: op.Revision}
				}
			}
		}
		return nil, pe
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
