package conversation

// What became of the messages Send was given: the outbox's account.
//
// A message is in one of three places in the keystore, and moves between
// them with single-record writes, so that at every instant one of them
// says where it is:
//
//   - pending: its outbox record (keystore.KindOutbox, keyed by message
//     ID) exists, written before its first POST;
//   - held or refused: the Company answered 2xx (held) or refused it for
//     good (refused). Its receipt is added to the conversation's receipts
//     record (keystore.KindOutbox, ID "sent:" + the Conversation ID)
//     before its outbox record is deleted, so a crash in between leaves it
//     both pending and held, and it is sent again with its ID, which the
//     Company answers as before (CO-7.3-02);
//   - nowhere: Send never wrote it (it was refused before sending, or the
//     process died before the outbox write returned).
//
// The receipts record keeps the count of the conversation's messages
// answered through this keystore and the receipts of the last keptReceipts
// of them: ID, place, state, refusal code and a digest of the content (not
// the content). The count gives each message its place N, in the order the
// messages were written (a conversation's messages are sent one at a time,
// oldest first), so an app that sends its messages one after another
// learns, after a crash, how many of them got through, without having
// chosen their IDs: see Conversation.Sent.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/keystore"
)

// MessageState is where a message given to Send or Start stands.
type MessageState string

// The states of a sent message.
const (
	// MessagePending: in the outbox, its outcome not known. Send, Flush,
	// Resume or Recover sends it again with its ID; never send it again
	// yourself.
	MessagePending MessageState = "pending"
	// MessageHeld: the Company acknowledged it (2xx): it holds it, once.
	MessageHeld MessageState = "held"
	// MessageRefused: the Company refused it for good (a 4xx such as
	// message_id_conflict, or the conversation was closed). It is never
	// sent again under its ID.
	MessageRefused MessageState = "refused"
)

// SentMessage is what the keystore knows of a message Send or Start was
// given: its ID (the one the SDK chose, when the app chose none), its
// place, and where it stands.
type SentMessage struct {
	// ID is the message's ID.
	ID string
	// Conversation is its conversation; "" for a start not answered yet.
	Conversation string
	// N is its place among the messages of the conversation written
	// through this keystore, from 1 (the start); 0 for a pending start.
	// A pending message's N is the place it takes once the messages before
	// it are answered.
	N int64
	// State is where it stands.
	State MessageState
	// Code is the Company's error code of a refused message
	// ("message_id_conflict", "conversation_closed", ...).
	Code string
	// At is when the Company answered it; zero while pending.
	At time.Time

	digest string
}

// Same reports whether m has the content of the sent message: the same
// sender, text, data and context (its ID aside, so that a message whose ID
// the SDK chose is recognised). It is how an app that sent a message
// without choosing its ID tells, after a crash, whether that message got
// through.
func (s SentMessage) Same(m Message) bool {
	w, _, err := m.encode(false)
	if err != nil {
		return false
	}
	b, err := json.Marshal(w)
	if err != nil {
		return false
	}
	return s.digest != "" && s.digest == contentDigest(b)
}

// contentDigest returns a digest of a wire message's content, without its
// ID: member order and spacing aside, numbers as written.
func contentDigest(wire []byte) string {
	d := json.NewDecoder(bytes.NewReader(wire))
	d.UseNumber()
	var m map[string]any
	if d.Decode(&m) != nil {
		return ""
	}
	delete(m, "id")
	b, err := json.Marshal(m)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return base64.RawURLEncoding.EncodeToString(sum[:16])
}

// bodyDigest is contentDigest of the message in a POST body.
func bodyDigest(body []byte) string {
	var b struct {
		Message json.RawMessage `json:"message"`
	}
	if json.Unmarshal(body, &b) != nil {
		return ""
	}
	return contentDigest(b.Message)
}

// keptReceipts is how many receipts a conversation's receipts record
// keeps: the last ones answered. The count goes on.
const keptReceipts = 64

// receipts is a conversation's receipts record.
type receipts struct {
	Count int64     `json:"count"`
	Last  []receipt `json:"last,omitempty"`
}

type receipt struct {
	ID     string       `json:"id"`
	N      int64        `json:"n"`
	State  MessageState `json:"state"`
	Code   string       `json:"code,omitempty"`
	Digest string       `json:"digest,omitempty"`
	At     time.Time    `json:"at"`
}

func receiptsKey(sess *poppy.Session, conv string) keystore.Key {
	return keystore.Key{Kind: keystore.KindOutbox, User: sess.User(), Issuer: sess.Company().Issuer(), ID: "sent:" + conv}
}

// addReceipt records that message id of conversation conv was answered,
// before its outbox record is deleted. A receipt already there stays as
// it is (a message sent again after a crash keeps its place).
func addReceipt(ctx context.Context, sess *poppy.Session, conv, id string, st MessageState, code, digest string, at time.Time) error {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	err := sess.Company().Agent().Store().Update(wctx, receiptsKey(sess, conv), func(cur []byte) ([]byte, error) {
		var r receipts
		if cur != nil && json.Unmarshal(cur, &r) != nil {
			r = receipts{} // unreadable: start again rather than lose the answer
		}
		if slices.ContainsFunc(r.Last, func(x receipt) bool { return x.ID == id }) {
			return cur, nil
		}
		r.Count++
		r.Last = append(r.Last, receipt{ID: id, N: r.Count, State: st, Code: code, Digest: digest, At: at.UTC()})
		if n := len(r.Last) - keptReceipts; n > 0 {
			r.Last = slices.Delete(r.Last, 0, n)
		}
		return json.Marshal(r)
	})
	if err != nil {
		return fmt.Errorf("conversation: recording the answer to message %s: %w", id, err)
	}
	return nil
}

func loadReceipts(ctx context.Context, sess *poppy.Session, conv string) (receipts, error) {
	var r receipts
	b, err := sess.Company().Agent().Store().Get(ctx, receiptsKey(sess, conv))
	if errors.Is(err, keystore.ErrNotFound) {
		return r, nil
	}
	if err != nil {
		return r, fmt.Errorf("conversation: reading the receipts: %w", err)
	}
	_ = json.Unmarshal(b, &r)
	return r, nil
}

// answered records message p's answer and takes it out of the outbox:
// held, or refused for good with err.
func (c *Conversation) answered(ctx context.Context, sess *poppy.Session, p pendingMsg, err error) error {
	st, code := MessageHeld, ""
	if err != nil {
		st, code = refusal(err)
	}
	if rerr := addReceipt(ctx, sess, c.id, p.id, st, code, bodyDigest(p.rec.Body), c.clock.Now()); rerr != nil {
		return rerr // the outbox record stays: the message is sent again, with its ID
	}
	deleteOutbox(ctx, sess, p.id)
	return nil
}

// refusal returns the state and code a definite error leaves a message in:
// a protocol error came with a 2xx answer, so the Company holds it.
func refusal(err error) (MessageState, string) {
	if errors.Is(err, ErrProtocol) {
		return MessageHeld, ""
	}
	if errors.Is(err, ErrConversationClosed) {
		return MessageRefused, "conversation_closed"
	}
	var pe *poppy.Error
	if errors.As(err, &pe) {
		return MessageRefused, pe.Code
	}
	return MessageRefused, ""
}

// Sent returns what the keystore knows of the messages this conversation
// was given by Send and Start through it, in the order they were written:
// the receipts of the last 64 the Company answered (held or refused), then
// those still pending in the outbox. It sends no request.
//
// It is how an app learns, after a crash, which of its messages got
// through, when the SDK chose their IDs. A message whose Send did not
// return is either in this list (pending or held: don't send it again;
// Resume sends a pending one) or was never written (send it again):
//
//	c, err := conversation.Resume(ctx, sess, id, nil) // sends what is pending, with its IDs
//	sent, err := c.Sent(ctx)
//	// An app sending its messages one after another: its k-th message
//	// (the start is the first) got through if k <= sent[len(sent)-1].N.
//	// Or by content: slices.ContainsFunc(sent, func(s conversation.SentMessage) bool { return s.Same(msg) })
//
// A start whose answer was lost is not in any conversation's list until
// Recover sends it again: call Recover first (see List).
func (c *Conversation) Sent(ctx context.Context) ([]SentMessage, error) {
	sess := c.Session()
	// The outbox first: a message answered meanwhile has its receipt
	// written before its outbox record goes, so it is read in one or
	// both, never in neither.
	pend, err := listOutbox(ctx, sess, c.id)
	if err != nil {
		return nil, err
	}
	r, err := loadReceipts(ctx, sess, c.id)
	if err != nil {
		return nil, err
	}
	out := make([]SentMessage, 0, len(r.Last)+len(pend))
	done := make(map[string]bool, len(r.Last))
	for _, x := range r.Last {
		done[x.ID] = true
		out = append(out, SentMessage{ID: x.ID, Conversation: c.id, N: x.N, State: x.State, Code: x.Code, At: x.At, digest: x.Digest})
	}
	n := r.Count
	for _, p := range pend {
		if done[p.id] {
			continue // answered; its outbox record is about to go
		}
		n++
		out = append(out, SentMessage{ID: p.id, Conversation: c.id, N: n, State: MessagePending, digest: bodyDigest(p.rec.Body)})
	}
	return out, nil
}

// Pending returns every message pending in the outbox of sess's User at
// its Company, oldest first: starts (Conversation "") and messages of
// every conversation. Recover sends them all; Resume those of one
// conversation. It sends no request.
func Pending(ctx context.Context, sess *poppy.Session) ([]SentMessage, error) {
	if sess == nil {
		return nil, poppy.ErrNoSession
	}
	pend, err := listOutbox(ctx, sess, "")
	if err != nil {
		return nil, err
	}
	out := make([]SentMessage, 0, len(pend))
	for _, p := range pend {
		out = append(out, SentMessage{ID: p.id, Conversation: p.rec.Conversation, State: MessagePending, digest: bodyDigest(p.rec.Body)})
	}
	return out, nil
}

// List returns the conversations the keystore knows for sess's User at
// its Company, in order of ID, whatever their status: every conversation
// started, resumed or recovered through it. Each is as its record says
// (status, responder, cursor, open Direct Conversation); no request is
// sent, and messages still pending are not: Flush (or Resume) sends them.
// A start whose answer was lost is not listed until Recover has sent it
// again, so after a crash call Recover first:
//
//	if _, err := conversation.Recover(ctx, sess, nil); err != nil { ... }
//	convs, err := conversation.List(ctx, sess, nil)
//
// opts configures the Conversations returned; nil gives the defaults.
func List(ctx context.Context, sess *poppy.Session, opts *Options) ([]*Conversation, error) {
	if sess == nil {
		return nil, poppy.ErrNoSession
	}
	endpoint, err := Endpoint(sess.Company())
	if err != nil {
		return nil, err
	}
	if err := opts.check(sess); err != nil {
		return nil, err
	}
	keys, err := sess.Company().Agent().Store().List(ctx, keystore.KindCursor, sess.User(), sess.Company().Issuer())
	if err != nil {
		return nil, fmt.Errorf("conversation: listing the conversations: %w", err)
	}
	var out []*Conversation
	for _, k := range keys {
		if !validID(k.ID) {
			continue // not a conversation record
		}
		c := newConversation(sess, k.ID, endpoint, opts)
		if err := c.load(ctx); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// receiptRecord reports whether an outbox key is a receipts record, not a
// message: message IDs have no ':'.
func receiptRecord(id string) bool { return strings.Contains(id, ":") }
