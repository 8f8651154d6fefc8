package operations

// The journal (OPS 6): one keystore record per operation this Client
// proposed or confirmed, under (local User, issuer, a hash of the
// operation ID), written before the network call it protects. It holds the
// latest view of the operation, the action and proposing request, and the
// approved confirm (revision, approved_by) from before the first confirm
// request until the operation is final.
//
// A proposing request has a record of its own before it is sent, under a
// hash of its proposal key: the key and the Idempotency-Key it is sent
// with. Once the answer's operation is journalled, the record names it, so
// that any process sharing the keystore finds the open operation of a
// request in one read, even one whose view was loaded before; it goes when
// the operation is final, or at once when the Company answered without an
// operation or refused. A record without an operation (no answer, a 5xx, a
// crash between the request and the journal) makes the same request, sent
// again in any process, carry the same Idempotency-Key (see doc.go, A-38).

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/poppyproto/poppy/internal/bounded"
	"github.com/poppyproto/poppy/internal/retry"
	"github.com/poppyproto/poppy/keystore"
)

type journalConfirm struct {
	Revision   int        `json:"revision"`
	ApprovedBy ApprovedBy `json:"approved_by"`
	Permission string     `json:"permission,omitempty"`
	// Via is "website" for a confirm on the Company's website
	// (ConfirmOnWebsite), "" for the operations endpoint. Recover sends
	// either at the endpoint when the operation is still proposed.
	Via string    `json:"via,omitempty"`
	At  time.Time `json:"at"`
}

// journalProposing is a proposing request sent, or about to be sent, whose
// answer is not journalled yet.
type journalProposing struct {
	Key            string    `json:"key"`
	IdempotencyKey string    `json:"idempotency_key"`
	Action         Action    `json:"action"`
	At             time.Time `json:"at"`
	// OperationID is the operation the answer carried, once journalled.
	OperationID string `json:"operation_id,omitempty"`
}

type journalRecord struct {
	OperationID string     `json:"operation_id"`
	Endpoint    string     `json:"endpoint"`
	Operation   *Operation `json:"operation"`
	Action      Action     `json:"action"`
	Proposal    string     `json:"proposal,omitempty"`
	// IdempotencyKey is the Idempotency-Key of the request that proposed
	// the operation, "" if unknown.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// Proposing is set (and OperationID empty) in the record of a
	// proposing request whose answer is not journalled.
	Proposing *journalProposing `json:"proposing,omitempty"`
	Session   string            `json:"session"`
	Account   string            `json:"account,omitempty"`
	Confirm   *journalConfirm   `json:"confirm,omitempty"`
	Withdrawn bool              `json:"withdrawn,omitempty"`
	Final     bool              `json:"final,omitempty"`
	Updated   time.Time         `json:"updated"`
}

// keepFinal is how long a final operation's record stays in the journal.
const keepFinal = 30 * 24 * time.Hour

func (c *Client) journalKey(id string) keystore.Key {
	h := sha256.Sum256([]byte(c.endpoint + "\x00" + id))
	return keystore.Key{Kind: keystore.KindOperation, User: c.sess.User(), Issuer: c.sess.Company().Issuer(),
		ID: "op_" + base64.RawURLEncoding.EncodeToString(h[:18])}
}

func (c *Client) store() keystore.Store { return c.sess.Company().Agent().Store() }

// journalUpdate changes the operation's record with fn; create makes a
// record when there is none (else fn is not called).
func (c *Client) journalUpdate(ctx context.Context, id string, create bool, fn func(*journalRecord)) error {
	err := c.store().Update(ctx, c.journalKey(id), func(cur []byte) ([]byte, error) {
		var rec journalRecord
		if cur == nil || json.Unmarshal(cur, &rec) != nil || rec.OperationID != id {
			if !create {
				return cur, nil
			}
			rec = journalRecord{OperationID: id, Endpoint: c.endpoint, Session: c.sess.Name()}
			if c.sess.SignedIn() {
				rec.Account = c.sess.Account()
			}
		}
		fn(&rec)
		rec.Updated = c.clock.Now()
		return json.Marshal(&rec)
	})
	if err != nil {
		return fmt.Errorf("operations: writing the journal: %w", err)
	}
	return nil
}

func (c *Client) journalProposal(ctx context.Context, op *Operation, action Action, key, idem string) error {
	return c.journalUpdate(ctx, op.ID, true, func(r *journalRecord) {
		r.Operation, r.Action, r.Proposal = op, action, key
		if idem != "" {
			r.IdempotencyKey = idem
		}
		r.Final = op.State.Final()
	})
}

// proposingKey is the keystore key of the record of a proposing request.
func (c *Client) proposingKey(key string) keystore.Key {
	h := sha256.Sum256([]byte(c.endpoint + "\x01" + key))
	return keystore.Key{Kind: keystore.KindOperation, User: c.sess.User(), Issuer: c.sess.Company().Issuer(),
		ID: "px_" + base64.RawURLEncoding.EncodeToString(h[:18])}
}

// journalProposing records, before a proposing request is sent, that it
// is being sent, and returns the Idempotency-Key to send it with: the one
// already journalled for the same request when its answer never came (in
// this process or another one sharing the keystore: the read and the write
// are one atomic update), else the caller's own (callerIdem, the header
// the request carries), else a new one. When the record names the
// operation an earlier answer carried (and that isn't stale), it returns
// that operation's ID instead and writes nothing; stale names it to
// replace, once the caller found that operation final or gone.
func (c *Client) journalProposing(ctx context.Context, key string, action Action, callerIdem, stale string) (idem, open string, err error) {
	err = c.store().Update(ctx, c.proposingKey(key), func(cur []byte) ([]byte, error) {
		idem, open = "", ""
		var rec journalRecord
		if cur != nil && json.Unmarshal(cur, &rec) == nil && rec.Proposing != nil && rec.Proposing.Key == key &&
			rec.Endpoint == c.endpoint && rec.Proposing.IdempotencyKey != "" {
			p := rec.Proposing
			switch {
			case p.OperationID != "" && p.OperationID != stale:
				open = p.OperationID
				return cur, nil
			case p.OperationID == "" && !c.answered(p.IdempotencyKey) && (callerIdem == "" || callerIdem == p.IdempotencyKey):
				idem = p.IdempotencyKey // the same request again: the same key
				return cur, nil
			}
		}
		idem = callerIdem
		if idem == "" {
			idem = newIdempotencyKey()
		}
		rec = journalRecord{Endpoint: c.endpoint, Session: c.sess.Name(), Updated: c.clock.Now(),
			Proposing: &journalProposing{Key: key, IdempotencyKey: idem, Action: action, At: c.clock.Now()}}
		if c.sess.SignedIn() {
			rec.Account = c.sess.Account()
		}
		return json.Marshal(&rec)
	})
	if err != nil {
		return "", "", fmt.Errorf("operations: writing the journal: %w", err)
	}
	return idem, open, nil
}

// markAnswered names, in the record of the request sent with idem, the
// operation its answer carried (journalled already).
func (c *Client) markAnswered(ctx context.Context, key, idem, id string) error {
	return c.store().Update(ctx, c.proposingKey(key), func(cur []byte) ([]byte, error) {
		var rec journalRecord
		if cur == nil || json.Unmarshal(cur, &rec) != nil || rec.Proposing == nil || rec.Proposing.IdempotencyKey != idem {
			return cur, nil // another request's record: leave it
		}
		rec.Proposing.OperationID, rec.Updated = id, c.clock.Now()
		return json.Marshal(&rec)
	})
}

// clearProposing removes the record of the request sent with idem, which
// needs none any more: the Company answered without an operation, or
// refused.
func (c *Client) clearProposing(ctx context.Context, key, idem string) error {
	return c.store().Update(ctx, c.proposingKey(key), func(cur []byte) ([]byte, error) {
		var rec journalRecord
		if cur == nil || json.Unmarshal(cur, &rec) != nil || rec.Proposing == nil || rec.Proposing.IdempotencyKey == idem {
			return nil, nil
		}
		return cur, nil
	})
}

// clearAnswered removes the record of key when it names operation id,
// which is final or unknown to the Company.
func (c *Client) clearAnswered(ctx context.Context, key, id string) error {
	return c.store().Update(ctx, c.proposingKey(key), func(cur []byte) ([]byte, error) {
		var rec journalRecord
		if cur == nil {
			return nil, nil
		}
		if json.Unmarshal(cur, &rec) != nil || rec.Proposing == nil || rec.Proposing.OperationID == id {
			return nil, nil
		}
		return cur, nil
	})
}

// loadRecord puts the journal record of operation id, written by any
// process, into the Client's view, and returns the view (nil when there is
// no usable record).
func (c *Client) loadRecord(ctx context.Context, id string) (*Operation, error) {
	b, err := c.store().Get(ctx, c.journalKey(id))
	if errors.Is(err, keystore.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("operations: reading the journal: %w", err)
	}
	var r journalRecord
	if json.Unmarshal(b, &r) != nil || r.OperationID != id || r.Operation == nil || r.Endpoint != c.endpoint {
		return nil, nil
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

// newIdempotencyKey returns a fresh Idempotency-Key value: 128 random bits
// as a Structured Field string, as draft-ietf-httpapi-idempotency-key-header
// defines it ("…"); a server that reads the header as an opaque string
// gets a constant string too.
func newIdempotencyKey() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return `"` + base64.RawURLEncoding.EncodeToString(b) + `"`
}

// journalIntent records the approved confirm before it is sent.
func (c *Client) journalIntent(ctx context.Context, op *Operation, jc journalConfirm) error {
	action, key := c.entryOf(op.ID)
	return c.journalUpdate(ctx, op.ID, true, func(r *journalRecord) {
		r.Operation, r.Confirm, r.Withdrawn = op, &jc, false
		if r.Action == (Action{}) {
			r.Action = action
		}
		if r.Proposal == "" {
			r.Proposal = key
		}
	})
}

func (c *Client) journalClearIntent(ctx context.Context, id string) error {
	return c.journalUpdate(ctx, id, false, func(r *journalRecord) { r.Confirm = nil })
}

func (c *Client) journalWithdraw(ctx context.Context, id string) error {
	return c.journalUpdate(ctx, id, false, func(r *journalRecord) { r.Withdrawn = true })
}

func (c *Client) journalFinal(ctx context.Context, op *Operation) error {
	var key string
	err := c.journalUpdate(ctx, op.ID, false, func(r *journalRecord) {
		r.Operation, r.Final, key = op, true, r.Proposal
	})
	if key == "" {
		_, key = c.entryOf(op.ID)
	}
	if key != "" {
		_ = c.clearAnswered(ctx, key, op.ID) // no longer open
	}
	return err
}

func (c *Client) journalDelete(ctx context.Context, id string) error {
	return c.store().Update(ctx, c.journalKey(id), func([]byte) ([]byte, error) { return nil, nil })
}

// records returns the operation records this Client may act on: those of
// its endpoint and Session name, or of the account it is signed in to
// (OPS 3.2).
func (c *Client) records(ctx context.Context) ([]journalRecord, error) {
	recs, _, err := c.scan(ctx)
	return recs, err
}

// scan reads the journal: the operation records and the records of
// proposing requests this Client may act on. It deletes records past
// keeping: final operations after keepFinal, proposals abandoned keepFinal
// after they expired, proposing requests keepFinal after they were sent.
func (c *Client) scan(ctx context.Context) (ops, proposing []journalRecord, err error) {
	st := c.store()
	keys, err := st.List(ctx, keystore.KindOperation, c.sess.User(), c.sess.Company().Issuer())
	if err != nil {
		return nil, nil, fmt.Errorf("operations: listing the journal: %w", err)
	}
	account := c.sess.Account()
	now := c.clock.Now()
	for _, k := range keys {
		b, err := st.Get(ctx, k)
		if errors.Is(err, keystore.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("operations: reading the journal: %w", err)
		}
		var rec journalRecord
		if json.Unmarshal(b, &rec) != nil || rec.Endpoint != c.endpoint {
			continue
		}
		if rec.Session != c.sess.Name() && (rec.Account == "" || rec.Account != account) {
			continue
		}
		if rec.Proposing != nil && rec.OperationID == "" {
			if now.Sub(rec.Updated) > keepFinal {
				_ = st.Update(ctx, k, func([]byte) ([]byte, error) { return nil, nil })
				continue
			}
			proposing = append(proposing, rec)
			continue
		}
		if rec.Operation == nil {
			continue
		}
		abandoned := rec.Confirm == nil && !rec.Operation.ExpiresAt.IsZero() && now.Sub(rec.Operation.ExpiresAt) > keepFinal
		if rec.Final && now.Sub(rec.Updated) > keepFinal || abandoned {
			_ = st.Update(ctx, k, func([]byte) ([]byte, error) { return nil, nil })
			continue
		}
		ops = append(ops, rec)
	}
	return ops, proposing, nil
}

// load puts the journal's operations into the Client's view, once, and
// drops the records of proposing requests whose answer an operation record
// already holds (a crash between the two writes).
func (c *Client) load(ctx context.Context) error {
	c.loadMu.Lock()
	defer c.loadMu.Unlock()
	if c.loaded {
		return nil
	}
	recs, proposing, err := c.scan(ctx)
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
		if !r.Final && legacyKey(r.Proposal) {
			c.legacy = true
		}
	}
	c.mu.Unlock()
	for _, p := range proposing {
		// A crash between the operation's record and this one's.
		if p.Proposing.OperationID == "" && c.answered(p.Proposing.IdempotencyKey) {
			_ = c.clearProposing(ctx, p.Proposing.Key, p.Proposing.IdempotencyKey)
		}
	}
	c.loaded = true
	return nil
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
// journalled, so Recover can't send it. A confirm journalled by
// ConfirmOnWebsite is sent at the operations endpoint if the operation is
// still proposed at the approved revision: the approval covers it however
// it is confirmed.
func (c *Client) Recover(ctx context.Context) ([]*Operation, error) {
	if err := c.load(ctx); err != nil {
		return nil, err
	}
	recs, err := c.records(ctx)
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
		_ = c.journalClearIntent(ctx, cur.ID)
		return cur, fmt.Errorf("%w: approved revision %d, latest %d", ErrApprovalMismatch, r.Confirm.Revision, cur.Revision)
	case cur.Expired(c.clock.Now()):
		return cur, fmt.Errorf("%w: %s", ErrOperationExpired, cur.ID)
	}
	if r.Confirm.ApprovedBy == ApprovedByStandingPermission {
		// The permission must still cover the revision: the User may
		// have revoked it since (PA-OPS5-10).
		if err := c.stillPermitted(ctx, cur, r); err != nil {
			_ = c.journalClearIntent(ctx, cur.ID)
			return cur, err
		}
	}
	a := &Approval{c: c, opID: cur.ID, revision: r.Confirm.Revision, by: r.Confirm.ApprovedBy, permission: r.Confirm.Permission}
	return c.Confirm(ctx, a)
}

// maxKeyedBody bounds a replayable request body proposalKeys hashes;
// maxCanonicalBody bounds the JSON body it reads into memory to key it as
// canonical JSON (a larger one is keyed byte for byte).
const (
	maxKeyedBody     = 64 << 20
	maxCanonicalBody = 8 << 20
)

// keyPrefix starts every proposal key of a request: a key without
// it (and without the "mcp-" of ToolCallKey) is a legacy key.
const keyPrefix = "r2-"

// legacyKey reports whether a journalled proposal key is of the legacy
// form: the exact bytes of method, URL and body.
func legacyKey(k string) bool {
	return k != "" && !strings.HasPrefix(k, keyPrefix) && !strings.HasPrefix(k, "mcp-")
}

// proposalKeys identifies a proposing request, "the same action":
// the method; the URL with its host in lower case, without a default port
// or fragment, and its query parameters sorted by name (the values of one
// name keep their order); and the body: canonical JSON (members sorted by
// name, no insignificant space, strings and numbers as JSON reads them)
// when the Content-Type is JSON and the body is valid UTF-8 JSON of at
// most 8 MiB without a repeated member name, otherwise its bytes. So
// reordered JSON members or query parameters are the same request; any
// other difference is another one.
//
// With legacy, it also returns the key the SDK computed before these keys
// existed (method, URL and body byte for byte), to match proposals
// journalled under it. It leaves req's body readable.
func proposalKeys(req *http.Request, legacy bool) (key, old string, err error) {
	body, err := keyBody(req)
	if err != nil {
		return "", "", err
	}
	hk := sha256.New()
	fmt.Fprintf(hk, "%s %s\n", req.Method, canonicalURL(req.URL))
	var ho hash.Hash
	w := io.Writer(hk)
	if legacy {
		ho = sha256.New()
		fmt.Fprintf(ho, "%s %s\n", req.Method, req.URL.String())
		w = io.MultiWriter(hk, ho)
	}
	if body != nil {
		defer body.Close()
		lr := io.LimitReader(body, maxKeyedBody+1)
		var n int64
		if isJSON(req.Header.Get("Content-Type")) {
			head, err := io.ReadAll(io.LimitReader(lr, maxCanonicalBody+1))
			if err != nil {
				return "", "", fmt.Errorf("operations: reading the request body: %w", err)
			}
			n = int64(len(head))
			if ho != nil {
				ho.Write(head)
			}
			if canon, ok := canonicalJSONUpTo(head, n); ok {
				hk.Write([]byte("c\n")) // canonical JSON
				hk.Write(canon)
			} else {
				hk.Write([]byte("r\n")) // raw bytes
				hk.Write(head)
				m, err := io.Copy(w, lr)
				if err != nil {
					return "", "", fmt.Errorf("operations: reading the request body: %w", err)
				}
				n += m
			}
		} else {
			hk.Write([]byte("r\n"))
			if n, err = io.Copy(w, lr); err != nil {
				return "", "", fmt.Errorf("operations: reading the request body: %w", err)
			}
		}
		if n > maxKeyedBody {
			return "", "", errors.New("operations: request body too large")
		}
	}
	key = keyPrefix + base64.RawURLEncoding.EncodeToString(hk.Sum(nil))
	if ho != nil {
		old = base64.RawURLEncoding.EncodeToString(ho.Sum(nil))
	}
	return key, old, nil
}

// keyBody returns a reader over a copy of req's body, nil for none. A body
// that can be read again (bytes, strings) is read from a copy, streamed; any
// other is read into memory (at most maxBody) and put back.
func keyBody(req *http.Request) (io.ReadCloser, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, nil
	}
	if req.GetBody != nil {
		rc, err := req.GetBody()
		if err != nil {
			return nil, fmt.Errorf("operations: reading the request body: %w", err)
		}
		return rc, nil
	}
	b, err := bounded.ReadAll(req.Body, maxBody)
	req.Body.Close()
	if errors.Is(err, bounded.ErrTooLarge) {
		return nil, errors.New("operations: request body too large")
	}
	if err != nil {
		return nil, fmt.Errorf("operations: reading the request body: %w", err)
	}
	req.Body = io.NopCloser(bytes.NewReader(b))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	req.ContentLength = int64(len(b))
	return io.NopCloser(bytes.NewReader(b)), nil
}

// canonicalURL is u as proposalKeys keys it.
func canonicalURL(u *url.URL) string {
	c := *u
	c.User = nil
	c.Scheme = strings.ToLower(c.Scheme)
	c.Host = strings.ToLower(c.Host)
	if c.Scheme == "https" {
		c.Host = strings.TrimSuffix(c.Host, ":443")
	}
	c.Fragment, c.RawFragment, c.ForceQuery = "", "", false
	if q, err := url.ParseQuery(c.RawQuery); err == nil {
		c.RawQuery = q.Encode() // sorted by name; one name's values in order
	}
	return c.String()
}

// isJSON reports whether a Content-Type is JSON: application/json or a
// +json suffix.
func isJSON(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

func canonicalJSONUpTo(b []byte, n int64) ([]byte, bool) {
	if n > maxCanonicalBody {
		return nil, false
	}
	return canonicalJSON(b)
}

// canonicalJSON returns b as canonical JSON: one value, object members
// sorted by name (byte order of the decoded names), no insignificant
// space, strings as encoding/json writes them, numbers as written. It
// reports false for anything that isn't exactly one valid JSON value in
// valid UTF-8, for nesting deeper than maxCanonicalDepth, and for an
// object that repeats a member name (readers differ on which one counts,
// so such a body is keyed byte for byte).
func canonicalJSON(b []byte) ([]byte, bool) {
	if !utf8.Valid(b) || !json.Valid(b) {
		return nil, false
	}
	cj := canonicalizer{in: b, out: make([]byte, 0, len(b))}
	cj.space()
	if !cj.value(0) {
		return nil, false
	}
	cj.space()
	return cj.out, cj.pos == len(b)
}

// maxCanonicalDepth bounds the nesting canonicalJSON follows.
const maxCanonicalDepth = 256

// canonicalizer writes a document json.Valid accepted in canonical form.
type canonicalizer struct {
	in  []byte
	pos int
	out []byte
}

func (c *canonicalizer) space() {
	for c.pos < len(c.in) {
		switch c.in[c.pos] {
		case ' ', '\t', '\n', '\r':
			c.pos++
		default:
			return
		}
	}
}

func (c *canonicalizer) value(depth int) bool {
	if depth > maxCanonicalDepth || c.pos >= len(c.in) {
		return false
	}
	switch ch := c.in[c.pos]; {
	case ch == '{':
		return c.object(depth)
	case ch == '[':
		c.pos++
		c.out = append(c.out, '[')
		c.space()
		if c.pos < len(c.in) && c.in[c.pos] == ']' {
			c.pos++
			c.out = append(c.out, ']')
			return true
		}
		for {
			c.space()
			if !c.value(depth + 1) {
				return false
			}
			c.space()
			if c.pos >= len(c.in) {
				return false
			}
			if c.in[c.pos] == ']' {
				c.pos++
				c.out = append(c.out, ']')
				return true
			}
			c.pos++ // ','
			c.out = append(c.out, ',')
		}
	case ch == '"':
		s, ok := c.str()
		if ok {
			c.out = append(c.out, s...)
		}
		return ok
	default: // a number, true, false or null: as written
		start := c.pos
		for c.pos < len(c.in) && !strings.ContainsRune(",]} \t\n\r", rune(c.in[c.pos])) {
			c.pos++
		}
		c.out = append(c.out, c.in[start:c.pos]...)
		return c.pos > start
	}
}

// str reads a string at pos and returns it in canonical form: as written
// when encoding/json would write it so (no escape, none of <, >, &, U+2028,
// U+2029), else decoded and encoded again.
func (c *canonicalizer) str() ([]byte, bool) {
	start := c.pos
	c.pos++
	plain := true
	for c.pos < len(c.in) {
		switch c.in[c.pos] {
		case '\\':
			plain = false
			c.pos += 2
			continue
		case '"':
			c.pos++
			raw := c.in[start:c.pos]
			if plain && !htmlOrLineSep(raw) {
				return raw, true
			}
			var s string
			if json.Unmarshal(raw, &s) != nil {
				return nil, false
			}
			enc, _ := json.Marshal(s)
			return enc, true
		}
		c.pos++
	}
	return nil, false
}

// htmlOrLineSep reports whether b holds a byte or rune encoding/json
// escapes in a string although JSON needn't: <, >, &, U+2028, U+2029.
func htmlOrLineSep(b []byte) bool {
	for i, ch := range b {
		switch ch {
		case '<', '>', '&':
			return true
		case 0xE2: // U+2028 and U+2029 are E2 80 A8 and E2 80 A9
			if i+2 < len(b) && b[i+1] == 0x80 && (b[i+2] == 0xA8 || b[i+2] == 0xA9) {
				return true
			}
		}
	}
	return false
}

func (c *canonicalizer) object(depth int) bool {
	c.pos++ // '{'
	// Members are written in the order they come, then reordered if they
	// weren't sorted (the output of most encoders already is).
	type member struct {
		key        []byte // the decoded name, to sort by
		start, end int    // name:value in out
	}
	var stack [8]member
	ms := stack[:0]
	c.out = append(c.out, '{')
	base := len(c.out)
	inOrder := true
	for {
		c.space()
		if c.pos >= len(c.in) {
			return false
		}
		if c.in[c.pos] == '}' {
			c.pos++
			break
		}
		if c.in[c.pos] == ',' {
			c.pos++
			c.space()
			c.out = append(c.out, ',')
		}
		raw := c.pos
		name, ok := c.str()
		if !ok {
			return false
		}
		key := c.in[raw+1 : c.pos-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			var decoded string
			if json.Unmarshal(c.in[raw:c.pos], &decoded) != nil {
				return false
			}
			key = []byte(decoded)
		}
		if n := len(ms); n > 0 {
			switch cmp := bytes.Compare(ms[n-1].key, key); {
			case cmp == 0:
				return false // a repeated name
			case cmp > 0:
				inOrder = false
			}
		}
		start := len(c.out)
		c.out = append(c.out, name...)
		c.out = append(c.out, ':')
		c.space()
		c.pos++ // ':'
		c.space()
		if !c.value(depth + 1) {
			return false
		}
		ms = append(ms, member{key: key, start: start, end: len(c.out)})
	}
	if !inOrder {
		slices.SortFunc(ms, func(a, b member) int { return bytes.Compare(a.key, b.key) })
		sorted := make([]byte, 0, len(c.out)-base)
		for i, m := range ms {
			if i > 0 {
				if bytes.Equal(ms[i-1].key, m.key) {
					return false
				}
				sorted = append(sorted, ',')
			}
			sorted = append(sorted, c.out[m.start:m.end]...)
		}
		c.out = append(c.out[:base], sorted...)
	}
	c.out = append(c.out, '}')
	return true
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
