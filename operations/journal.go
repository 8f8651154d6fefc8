package operations

// The journal (OPS 6): one keystore record per operation this Client
// proposed or confirmed, under (local User, issuer, a hash of the
// operation ID), written before the network call it protects. It holds the
// latest view of the operation, the action and proposing request, and the
// approved confirm (revision, approved_by) from before the first confirm
// request until the operation is final.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/poppyproto/poppy/keystore"
)

type journalConfirm struct {
	Revision   int        `json:"revision"`
	ApprovedBy ApprovedBy `json:"approved_by"`
	Permission string     `json:"permission,omitempty"`
	At         time.Time  `json:"at"`
}

type journalRecord struct {
	OperationID string          `json:"operation_id"`
	Endpoint    string          `json:"endpoint"`
	Operation   *Operation      `json:"operation"`
	Action      Action          `json:"action"`
	Proposal    string          `json:"proposal,omitempty"`
	Session     string          `json:"session"`
	Account     string          `json:"account,omitempty"`
	Confirm     *journalConfirm `json:"confirm,omitempty"`
	Withdrawn   bool            `json:"withdrawn,omitempty"`
	Final       bool            `json:"final,omitempty"`
	Updated     time.Time       `json:"updated"`
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

func (c *Client) journalProposal(ctx context.Context, op *Operation, action Action, key string) error {
	return c.journalUpdate(ctx, op.ID, true, func(r *journalRecord) {
		r.Operation, r.Action, r.Proposal = op, action, key
		r.Final = op.State.Final()
	})
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
	return c.journalUpdate(ctx, op.ID, false, func(r *journalRecord) { r.Operation, r.Final = op, true })
}

func (c *Client) journalDelete(ctx context.Context, id string) error {
	return c.store().Update(ctx, c.journalKey(id), func([]byte) ([]byte, error) { return nil, nil })
}

// records returns the journal records this Client may act on: those of its
// endpoint and Session name, or of the account it is signed in to
// (OPS 3.2).
func (c *Client) records(ctx context.Context) ([]journalRecord, error) {
	st := c.store()
	keys, err := st.List(ctx, keystore.KindOperation, c.sess.User(), c.sess.Company().Issuer())
	if err != nil {
		return nil, fmt.Errorf("operations: listing the journal: %w", err)
	}
	account := c.sess.Account()
	var out []journalRecord
	for _, k := range keys {
		b, err := st.Get(ctx, k)
		if errors.Is(err, keystore.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("operations: reading the journal: %w", err)
		}
		var rec journalRecord
		if json.Unmarshal(b, &rec) != nil || rec.Operation == nil || rec.Endpoint != c.endpoint {
			continue
		}
		if rec.Session != c.sess.Name() && (rec.Account == "" || rec.Account != account) {
			continue
		}
		abandoned := rec.Confirm == nil && !rec.Operation.ExpiresAt.IsZero() && c.clock.Now().Sub(rec.Operation.ExpiresAt) > keepFinal
		if rec.Final && c.clock.Now().Sub(rec.Updated) > keepFinal || abandoned {
			_ = st.Update(ctx, k, func([]byte) ([]byte, error) { return nil, nil })
			continue
		}
		out = append(out, rec)
	}
	return out, nil
}

// load puts the journal's operations into the Client's view, once.
func (c *Client) load(ctx context.Context) error {
	c.loadMu.Lock()
	defer c.loadMu.Unlock()
	if c.loaded {
		return nil
	}
	recs, err := c.records(ctx)
	if err != nil {
		return err
	}
	c.mu.Lock()
	for _, r := range recs {
		if e := c.ops[r.OperationID]; e == nil {
			c.ops[r.OperationID] = &entry{op: r.Operation, action: r.Action, proposal: r.Proposal, finalSeen: r.Final}
		} else if e.proposal == "" {
			e.proposal = r.Proposal
		}
	}
	c.mu.Unlock()
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
// keeps returning them while they are open.
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
	for attempt := 0; err != nil && isTransient(err) && attempt < maxConfirmAttempts; attempt++ {
		if serr := c.clock.Sleep(ctx, c.wait(retryAfterOf(err), attempt)); serr != nil {
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

// maxKeyedBody bounds a replayable request body proposalKey hashes.
const maxKeyedBody = 64 << 20

// proposalKey identifies a proposing request: method, URL and body
// . It leaves req's body readable.
func proposalKey(req *http.Request) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s %s\n", req.Method, req.URL.String())
	if req.GetBody != nil && req.Body != nil && req.Body != http.NoBody {
		// A body that can be read again (bytes, strings) is hashed from a
		// copy, streamed, and left as it is.
		rc, err := req.GetBody()
		if err != nil {
			return "", fmt.Errorf("operations: reading the request body: %w", err)
		}
		n, err := io.Copy(h, io.LimitReader(rc, maxKeyedBody+1))
		rc.Close()
		if err != nil {
			return "", fmt.Errorf("operations: reading the request body: %w", err)
		}
		if n > maxKeyedBody {
			return "", errors.New("operations: request body too large")
		}
		return base64.RawURLEncoding.EncodeToString(h.Sum(nil)), nil
	}
	if req.Body != nil && req.Body != http.NoBody {
		b, err := io.ReadAll(io.LimitReader(req.Body, maxBody+1))
		req.Body.Close()
		if err != nil {
			return "", fmt.Errorf("operations: reading the request body: %w", err)
		}
		if len(b) > maxBody {
			return "", errors.New("operations: request body too large")
		}
		h.Write(b)
		req.Body = io.NopCloser(bytes.NewReader(b))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
		req.ContentLength = int64(len(b))
	}
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil)), nil
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
