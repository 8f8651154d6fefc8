package operations

// The journal (OPS 6): one keystore record per operation a Client proposed
// or confirmed, under (local User, issuer, a hash of the operation ID),
// written before the network call it protects. It holds the latest view of
// the operation, the action and proposing request, and the approved
// confirm (revision, approved_by) from before the first confirm request
// until the operation is final.
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
//
// The journal is the keystore side alone: it reads and writes records and
// knows nothing of the Client's views, which the Client keeps (client.go)
// and fills from the journal (recover.go). Every write is one atomic
// keystore update.

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/keystore"
)

type journalConfirm struct {
	Revision   int        `json:"revision"`
	ApprovedBy ApprovedBy `json:"approved_by"`
	Permission string     `json:"permission,omitempty"`
	// Via is "website" for a confirm on the Company's website
	// (ConfirmOptions.Website), "" for the operations endpoint. Recover
	// sends either at the endpoint when the operation is still proposed.
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

// journal is the keystore journal of one Client: the records of its
// endpoint, for its Session's User at its Company.
type journal struct {
	sess     *poppy.Session // records are stamped with its name and account
	endpoint string
	clock    poppy.Clock
}

func (j *journal) store() keystore.Store { return j.sess.Company().Agent().Store() }

func (j *journal) opKey(id string) keystore.Key {
	h := sha256.Sum256([]byte(j.endpoint + "\x00" + id))
	return keystore.Key{Kind: keystore.KindOperation, User: j.sess.User(), Issuer: j.sess.Company().Issuer(),
		ID: "op_" + base64.RawURLEncoding.EncodeToString(h[:18])}
}

// proposingKey is the keystore key of the record of a proposing request.
func (j *journal) proposingKey(key string) keystore.Key {
	h := sha256.Sum256([]byte(j.endpoint + "\x01" + key))
	return keystore.Key{Kind: keystore.KindOperation, User: j.sess.User(), Issuer: j.sess.Company().Issuer(),
		ID: "px_" + base64.RawURLEncoding.EncodeToString(h[:18])}
}

// newRecord is an empty record of this journal, stamped with the Session.
func (j *journal) newRecord() journalRecord {
	rec := journalRecord{Endpoint: j.endpoint, Session: j.sess.Name()}
	if j.sess.SignedIn() {
		rec.Account = j.sess.Account()
	}
	return rec
}

// Operation records.

// update changes the operation's record with fn; create makes a record
// when there is none (else fn is not called).
func (j *journal) update(ctx context.Context, id string, create bool, fn func(*journalRecord)) error {
	err := j.store().Update(ctx, j.opKey(id), func(cur []byte) ([]byte, error) {
		var rec journalRecord
		if cur == nil || json.Unmarshal(cur, &rec) != nil || rec.OperationID != id {
			if !create {
				return cur, nil
			}
			rec = j.newRecord()
			rec.OperationID = id
		}
		fn(&rec)
		rec.Updated = j.clock.Now()
		return json.Marshal(&rec)
	})
	if err != nil {
		return fmt.Errorf("operations: writing the journal: %w", err)
	}
	return nil
}

// proposed records an operation a proposing request with key (and
// Idempotency-Key idem, "" if none) got back.
func (j *journal) proposed(ctx context.Context, op *Operation, action Action, key, idem string) error {
	return j.update(ctx, op.ID, true, func(r *journalRecord) {
		r.Operation, r.Action, r.Proposal = op, action, key
		if idem != "" {
			r.IdempotencyKey = idem
		}
		r.Final = op.State.Final()
	})
}

// intend records the approved confirm of op before it is sent, with the
// action and proposal key the Client knows (kept when the record has its
// own).
func (j *journal) intend(ctx context.Context, op *Operation, jc journalConfirm, action Action, key string) error {
	return j.update(ctx, op.ID, true, func(r *journalRecord) {
		r.Operation, r.Confirm, r.Withdrawn = op, &jc, false
		if r.Action == (Action{}) {
			r.Action = action
		}
		if r.Proposal == "" {
			r.Proposal = key
		}
	})
}

// clearIntent forgets the confirm of an operation the Company refused
// without acting on it: nothing is left to recover.
func (j *journal) clearIntent(ctx context.Context, id string) error {
	return j.update(ctx, id, false, func(r *journalRecord) { r.Confirm = nil })
}

// withdraw records that the User withdrew the approval (OPS 7).
func (j *journal) withdraw(ctx context.Context, id string) error {
	return j.update(ctx, id, false, func(r *journalRecord) { r.Withdrawn = true })
}

// final records a final operation and returns the proposal key its record
// holds, "" if none.
func (j *journal) final(ctx context.Context, op *Operation) (key string, err error) {
	err = j.update(ctx, op.ID, false, func(r *journalRecord) {
		r.Operation, r.Final, key = op, true, r.Proposal
	})
	return key, err
}

// remove deletes the operation's record.
func (j *journal) remove(ctx context.Context, id string) error {
	return j.store().Update(ctx, j.opKey(id), func([]byte) ([]byte, error) { return nil, nil })
}

// read returns the operation's record, written by any process, or nil
// when there is no usable one.
func (j *journal) read(ctx context.Context, id string) (*journalRecord, error) {
	b, err := j.store().Get(ctx, j.opKey(id))
	if errors.Is(err, keystore.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("operations: reading the journal: %w", err)
	}
	var r journalRecord
	if json.Unmarshal(b, &r) != nil || r.OperationID != id || r.Operation == nil || r.Endpoint != j.endpoint {
		return nil, nil
	}
	return &r, nil
}

// scan reads the journal: the operation records and the records of
// proposing requests this Client may act on, those of its endpoint and
// Session name, or of the account it is signed in to (OPS 3.2). It deletes
// records past keeping: final operations after keepFinal, proposals
// abandoned keepFinal after they expired, proposing requests keepFinal
// after they were sent.
func (j *journal) scan(ctx context.Context) (ops, proposing []journalRecord, err error) {
	st := j.store()
	keys, err := st.List(ctx, keystore.KindOperation, j.sess.User(), j.sess.Company().Issuer())
	if err != nil {
		return nil, nil, fmt.Errorf("operations: listing the journal: %w", err)
	}
	account := j.sess.Account()
	now := j.clock.Now()
	for _, k := range keys {
		b, err := st.Get(ctx, k)
		if errors.Is(err, keystore.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("operations: reading the journal: %w", err)
		}
		var rec journalRecord
		if json.Unmarshal(b, &rec) != nil || rec.Endpoint != j.endpoint {
			continue
		}
		if rec.Session != j.sess.Name() && (rec.Account == "" || rec.Account != account) {
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

// Proposing-request records.

// sending records, before a proposing request is sent, that it is being
// sent, and returns the Idempotency-Key to send it with: the one already
// journalled for the same request when its answer never came (in this
// process or another one sharing the keystore: the read and the write are
// one atomic update) and known doesn't report it answered, else the
// caller's own (callerIdem, the header the request carries), else a new
// one. When the record names the operation an earlier answer carried (and
// that isn't stale), it returns that operation's ID instead and writes
// nothing; stale names it to replace, once the caller found that operation
// final or gone.
func (j *journal) sending(ctx context.Context, key string, action Action, callerIdem, stale string, known func(idem string) bool) (idem, open string, err error) {
	err = j.store().Update(ctx, j.proposingKey(key), func(cur []byte) ([]byte, error) {
		idem, open = "", ""
		var rec journalRecord
		if cur != nil && json.Unmarshal(cur, &rec) == nil && rec.Proposing != nil && rec.Proposing.Key == key &&
			rec.Endpoint == j.endpoint && rec.Proposing.IdempotencyKey != "" {
			p := rec.Proposing
			switch {
			case p.OperationID != "" && p.OperationID != stale:
				open = p.OperationID
				return cur, nil
			case p.OperationID == "" && !known(p.IdempotencyKey) && (callerIdem == "" || callerIdem == p.IdempotencyKey):
				idem = p.IdempotencyKey // the same request again: the same key
				return cur, nil
			}
		}
		idem = callerIdem
		if idem == "" {
			idem = newIdempotencyKey()
		}
		rec = j.newRecord()
		rec.Updated = j.clock.Now()
		rec.Proposing = &journalProposing{Key: key, IdempotencyKey: idem, Action: action, At: j.clock.Now()}
		return json.Marshal(&rec)
	})
	if err != nil {
		return "", "", fmt.Errorf("operations: writing the journal: %w", err)
	}
	return idem, open, nil
}

// answered names, in the record of the request sent with idem, the
// operation its answer carried (journalled already).
func (j *journal) answered(ctx context.Context, key, idem, id string) error {
	return j.store().Update(ctx, j.proposingKey(key), func(cur []byte) ([]byte, error) {
		var rec journalRecord
		if cur == nil || json.Unmarshal(cur, &rec) != nil || rec.Proposing == nil || rec.Proposing.IdempotencyKey != idem {
			return cur, nil // another request's record: leave it
		}
		rec.Proposing.OperationID, rec.Updated = id, j.clock.Now()
		return json.Marshal(&rec)
	})
}

// unsent removes the record of the request sent with idem, which needs
// none any more: the Company answered without an operation, or refused.
func (j *journal) unsent(ctx context.Context, key, idem string) error {
	return j.store().Update(ctx, j.proposingKey(key), func(cur []byte) ([]byte, error) {
		var rec journalRecord
		if cur == nil || json.Unmarshal(cur, &rec) != nil || rec.Proposing == nil || rec.Proposing.IdempotencyKey == idem {
			return nil, nil
		}
		return cur, nil
	})
}

// closed removes the record of key when it names operation id, which is
// final or unknown to the Company.
func (j *journal) closed(ctx context.Context, key, id string) error {
	return j.store().Update(ctx, j.proposingKey(key), func(cur []byte) ([]byte, error) {
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

// newIdempotencyKey returns a fresh Idempotency-Key value: 128 random bits
// as a Structured Field string, as draft-ietf-httpapi-idempotency-key-header
// defines it ("…"); a server that reads the header as an opaque string
// gets a constant string too.
func newIdempotencyKey() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return `"` + base64.RawURLEncoding.EncodeToString(b) + `"`
}
