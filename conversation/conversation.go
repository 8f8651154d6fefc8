package conversation

// Sending: the outbox and its retries (spec 7.3).
//
// A message is encoded once, and the exact bytes of its POST body are
// written to the keystore outbox (keystore.KindOutbox, one record per
// message ID) before the first attempt. Every attempt sends those bytes:
// a retry has the same ID and byte-identical content, so the Company
// holds the message once. The record is deleted once the Company gave a
// definite answer (2xx, or a 4xx that says it will never take it); when the
// outcome is unknown (no response, a timeout, 5xx, 429, ctx done) it stays,
// and the next Send on the conversation, Flush, Resume or Recover sends it
// again, in the order it was first written. A conversation's messages are
// sent one at a time, in order.
//
// The conversation's own record (keystore.KindCursor, keyed by the
// Conversation ID) holds its endpoint, parent, status, responder, open
// Direct Conversation and the cursor of the last event handled. Start
// writes it before deleting the start message's outbox record, so a crash
// in between leaves the message to be sent again and the Company returns
// the conversation it already started (CO-7.3-03).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/internal/bounded"
	"github.com/poppyproto/poppy/internal/retry"
	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/operations"
)

// Status is a conversation's status (spec 7.7).
type Status string

// The statuses.
const (
	StatusWorking Status = "working" // the Company is working: read again
	StatusIdle    Status = "idle"    // the Company waits for the Personal Agent's side
	StatusQueued  Status = "queued"  // waiting for a person at the Company (spec 7.9)
	StatusClosed  Status = "closed"  // the conversation takes no more messages (spec 7.12)
)

// Responder says who handles the Company's side (spec 7.7).
type Responder string

// The responders.
const (
	ResponderAgent Responder = "agent" // an automated Company Agent
	ResponderHuman Responder = "human" // a person at the Company
)

// Options configures a Conversation. The zero value (or nil) gives the
// defaults described on each field.
type Options struct {
	// Logger receives debug and warning records; nil discards. No record
	// holds a token, proof or message text.
	Logger *slog.Logger
	// Operations, if set, observes every operation a Company message
	// carries (OPS 4.3), with operations.ConversationAction: the message's
	// Operation is then the Client's view of it, one operation with the
	// same operation_id from an API answer or a tool result (OPS 4). It
	// must be a Client of a Session of the same Agent at the
	// conversation's Company. Nil means the Session's Client, if New made
	// one (operations.SessionClient); without one, each message's
	// operation is as the Company sent it, parsed.
	Operations *operations.Client
	// LongPollWait is how long a long-poll read of Events asks the
	// Company to hold it (spec 7.5), in whole seconds. Default 30 s, at most 5 min.
	// (StartOptions.Wait and SendOptions.Wait, by contrast, ask for the
	// Company's reply in the answer to a message.)
	LongPollWait time.Duration
	// StrictText refuses a Text that holds JSON or HTML markup with
	// an error (PA-7.4-04); otherwise it is sent with a warning.
	StrictText bool
	// RequestTimeout bounds one attempt of a request, on top of its wait.
	// Default 30 s.
	RequestTimeout time.Duration
	// StreamIdleTimeout reconnects a stream that sent nothing for that long.
	// Default 2 min.
	StreamIdleTimeout time.Duration
	// MaxBackoff caps the jittered exponential backoff between reads and
	// reconnects after a failure. Default 10 s. (A POST is retried by the
	// Session transport's policy instead: see Send.)
	MaxBackoff time.Duration
	// MaxResponseBytes caps one JSON answer. Default 4 MiB.
	MaxResponseBytes int64
	// MaxAnswerEvents caps the events one answer to a POST may carry (the
	// reply of a Send or Start with Wait). An answer with more is taken
	// (the message is held, the conversation recorded) but its events are
	// not: the call returns an error matching ErrTooManyEvents, and the
	// next Events loop reads them from the saved cursor. Default 10,000.
	MaxAnswerEvents int
	// MaxEventBytes caps one streamed event. Default 1 MiB.
	MaxEventBytes int
	// RememberEvents is how many handled event IDs (and as many message
	// IDs) are remembered to skip the events a Company delivers again
	// before the cursor of a reconnect; the last 32 of them are
	// saved with the cursor. Default 1024, about 100 KiB per conversation
	// once that many were handled. Events up to the cursor are skipped by
	// position whatever this says.
	RememberEvents int
}

// check refuses options that can't serve a conversation in sess.
func (o *Options) check(sess *poppy.Session) error {
	if o == nil || o.Operations == nil {
		return nil
	}
	oc := o.Operations.Session().Company()
	if oc.Agent() != sess.Company().Agent() || oc.Issuer() != sess.Company().Issuer() {
		return errors.New("conversation: Options.Operations is a Client of another Company or Agent")
	}
	return nil
}

// operations returns the Client the conversation hands operations to:
// Options.Operations, else the Session's (operations.SessionClient), nil if
// neither.
func (c *Conversation) operations() *operations.Client {
	if c.opts.Operations != nil {
		return c.opts.Operations
	}
	return operations.SessionClient(c.sess.Load())
}

func (o *Options) withDefaults() Options {
	var c Options
	if o != nil {
		c = *o
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.LongPollWait <= 0 {
		c.LongPollWait = 30 * time.Second
	}
	c.LongPollWait = min(c.LongPollWait, 5*time.Minute)
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 30 * time.Second
	}
	if c.StreamIdleTimeout <= 0 {
		c.StreamIdleTimeout = 2 * time.Minute
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = 10 * time.Second
	}
	if c.MaxResponseBytes <= 0 {
		c.MaxResponseBytes = 4 << 20
	}
	if c.MaxEventBytes <= 0 {
		c.MaxEventBytes = 1 << 20
	}
	if c.MaxAnswerEvents <= 0 {
		c.MaxAnswerEvents = 10_000
	}
	if c.RememberEvents <= 0 {
		c.RememberEvents = 1024
	}
	return c
}

// Conversation is one conversation with a Company Agent (spec 7). It is
// safe for concurrent use: one goroutine may range over Events while
// others Send. Its status and responder are kept current from every answer
// and every state event, and read without a request.
type Conversation struct {
	id       string
	parent   string
	endpoint string // the poppy entry's endpoint, without a trailing "/"
	opts     Options
	log      *slog.Logger
	store    keystore.Store
	ckey     keystore.Key
	clock    poppy.Clock
	ops      bool // the agent speaks the operations extension

	sess atomic.Pointer[poppy.Session]

	sendSem chan struct{} // one sender at a time, in order
	reading atomic.Bool   // an Events loop is running

	mu         sync.Mutex
	status     Status
	responder  Responder
	openDirect string
	cursor     string  // the last event handled
	seen       *idRing // event IDs handled
	seenMsgs   *idRing // message IDs delivered
	pending    []Event // events from a POST's reply, not yet yielded

	wake chan struct{} // a message was sent: an Events loop's pause ends
}

// savedHandled is how many of the last handled event IDs the conversation
// record keeps beside the cursor.
const savedHandled = 32

// nudge ends the pause of an Events loop that is pacing idle reads: a
// message was sent, and its reply is worth reading at once.
func (c *Conversation) nudge() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// record is the conversation as kept in the keystore.
type record struct {
	Endpoint   string    `json:"endpoint"`
	Parent     string    `json:"parent,omitempty"`
	Cursor     string    `json:"cursor,omitempty"`
	Status     Status    `json:"status,omitempty"`
	Responder  Responder `json:"responder,omitempty"`
	OpenDirect string    `json:"open_direct,omitempty"`
	// Handled are the last event IDs handled, up to the cursor, oldest
	// first.
	Handled []string `json:"handled,omitempty"`
}

// outboxRecord is an unacknowledged message as kept in the keystore.
type outboxRecord struct {
	Conversation string `json:"conversation_id,omitempty"` // "" for a start
	Endpoint     string `json:"endpoint"`
	Seq          int64  `json:"seq"`
	Body         []byte `json:"body"` // the exact POST body
	Wait         int    `json:"wait,omitempty"`
}

var seqCounter atomic.Int64

func nextSeq() int64 {
	n := time.Now().UnixNano()
	for {
		old := seqCounter.Load()
		if n <= old {
			n = old + 1
		}
		if seqCounter.CompareAndSwap(old, n) {
			return n
		}
	}
}

// Endpoint returns the endpoint of the Company's poppy conversation
// protocol (spec 7.1): the first agent.protocols entry of type "poppy";
// entries of other types are skipped. With none it returns an error
// matching ErrNoConversationProtocol that names what the Company offers.
func Endpoint(c *poppy.Company) (string, error) {
	var offered []string
	if doc := c.Document(); doc != nil && doc.Agent != nil {
		for _, p := range doc.Agent.Protocols {
			if p.Type != "poppy" {
				offered = append(offered, strconv.Quote(clip(p.Type)))
				continue // PA-7.1-01: unfamiliar types are skipped
			}
			u, err := url.Parse(p.Endpoint)
			if err != nil || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
				return "", protocolError("the poppy endpoint %q is not a URL", clip(p.Endpoint))
			}
			return strings.TrimRight(p.Endpoint, "/"), nil // PA-7.2-01: no "//"
		}
	}
	if len(offered) == 0 {
		return "", fmt.Errorf("%w: it offers none", ErrNoConversationProtocol)
	}
	return "", fmt.Errorf("%w: it offers %s", ErrNoConversationProtocol, strings.Join(offered, ", "))
}

func newConversation(sess *poppy.Session, id, endpoint string, opts *Options) *Conversation {
	o := opts.withDefaults()
	agent := sess.Company().Agent()
	c := &Conversation{
		id: id, endpoint: endpoint, opts: o, log: o.Logger,
		store:    agent.Store(),
		ckey:     keystore.Key{Kind: keystore.KindCursor, User: sess.User(), Issuer: sess.Company().Issuer(), ID: id},
		clock:    agent.Clock(),
		ops:      agent.Identity().Supports("operations", "1"),
		sendSem:  make(chan struct{}, 1),
		seen:     newIDRing(o.RememberEvents),
		seenMsgs: newIDRing(o.RememberEvents),
		wake:     make(chan struct{}, 1),
	}
	c.sess.Store(sess)
	return c
}

// Start starts a conversation with its first message (spec 7.3). The
// message is written to the outbox first; if the answer is lost, the retry
// (here, or Recover in a later process) gets back the conversation the
// Company already started (PA-7.3-05). opts may be nil.
//
// Its errors say what became of the message as Send's do: a *PendingError
// leaves it in the outbox for Recover. An answer carrying more than
// Options.MaxAnswerEvents events returns the Conversation the Company
// started with an error matching ErrTooManyEvents.
func Start(ctx context.Context, sess *poppy.Session, msg Message, opts *StartOptions) (*Conversation, error) {
	return start(ctx, sess, "", msg, opts)
}

// StartDirect starts a Direct Conversation linked to the conversation
// parent (spec 7.10): the User talks with the Company through the Personal
// Agent's interface. Its messages are the User's own words: use [Human].
// Only the Personal Agent starts one, when the User agreed (PA-7.10-04).
// If the parent already has an open Direct Conversation, the *Error names
// it in ConversationID (PA-7.10-03).
func StartDirect(ctx context.Context, sess *poppy.Session, parent string, msg Message, opts *StartOptions) (*Conversation, error) {
	if !validID(parent) {
		return nil, fmt.Errorf("%w: parent %q", errInvalidID, clip(parent))
	}
	return start(ctx, sess, parent, msg, opts)
}

// StartOptions configures Start and StartDirect: the Conversation's
// Options, and what only the first message asks.
type StartOptions struct {
	Options
	// Wait asks for the Company's reply in the answer to the first
	// message, holding it up to Wait (spec 7.3, PA-7.3-07), as
	// SendOptions.Wait does for a later one; the reply's events come out
	// of Events. Options.LongPollWait is the hold of Events' own reads.
	Wait time.Duration
}

func start(ctx context.Context, sess *poppy.Session, parent string, msg Message, so *StartOptions) (*Conversation, error) {
	if sess == nil {
		return nil, poppy.ErrNoSession
	}
	var opts *Options
	var wait time.Duration
	if so != nil {
		opts, wait = &so.Options, so.Wait
	}
	endpoint, err := Endpoint(sess.Company())
	if err != nil {
		return nil, err // PA-7.1-02: nothing is sent
	}
	if err := opts.check(sess); err != nil {
		return nil, err
	}
	o := opts.withDefaults()
	w, markup, err := msg.encode(o.StrictText)
	if err != nil {
		return nil, err
	}
	if markup {
		o.Logger.WarnContext(ctx, "conversation: message text holds JSON or markup; structured details belong in data", "message_id", w.ID)
	}
	body := map[string]any{"message": w}
	if parent != "" {
		body["parent_conversation_id"] = parent
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("conversation: encoding the message: %w", err)
	}
	ob := outboxRecord{Endpoint: endpoint, Seq: nextSeq(), Body: b, Wait: waitSeconds(wait)}
	if err := putOutbox(ctx, sess, w.ID, ob); err != nil {
		return nil, err
	}
	return sendStart(ctx, sess, w.ID, ob, &o)
}

// sendStart sends a start message from the outbox and records the
// conversation it starts.
func sendStart(ctx context.Context, sess *poppy.Session, msgID string, ob outboxRecord, o *Options) (*Conversation, error) {
	tmp := newConversation(sess, "", ob.Endpoint, o)
	var parent string
	var pb struct {
		Parent string `json:"parent_conversation_id"`
	}
	if json.Unmarshal(ob.Body, &pb) == nil {
		parent = pb.Parent
	}
	ans, err := tmp.post(ctx, ob.Endpoint, ob.Body, ob.Wait, true)
	if err != nil {
		if definite(err) {
			// Refused for good, or a 2xx answer that breaks the protocol
			// and names no conversation the SDK could record.
			deleteOutbox(ctx, sess, msgID)
			return nil, err
		}
		return nil, &PendingError{MessageID: msgID, Err: err}
	}
	if ans.status != http.StatusCreated && ans.status != http.StatusOK {
		deleteOutbox(ctx, sess, msgID)
		return nil, protocolError("a start answered HTTP %d, not 201", ans.status)
	}
	if !validID(ans.ConversationID) {
		deleteOutbox(ctx, sess, msgID)
		return nil, protocolError("conversation_id %q breaks the ID rules", clip(ans.ConversationID)) // PA-7.2-05
	}
	c := newConversation(sess, ans.ConversationID, ob.Endpoint, o)
	c.parent = parent
	// Recorded before the outbox entry goes, so a crash in between sends
	// the start again and gets this conversation back.
	if err := c.load(ctx); err != nil {
		return nil, &PendingError{MessageID: msgID, Err: err}
	}
	c.applyAnswer(ans)
	if err := c.save(ctx); err != nil {
		return nil, &PendingError{MessageID: msgID, Err: err}
	}
	if err := c.answered(ctx, sess, pendingMsg{id: msgID, rec: ob}, nil); err != nil {
		return c, err
	}
	return c, ans.err()
}

// Resume continues conversation id from sess, which may be another
// Session, in another process or replica sharing the keystore, of the
// same agent and User or account (spec 7.2, 7.11): from the saved cursor,
// and first sending the messages still pending in the outbox, with their
// IDs. A conversation this keystore never saw is read from its beginning.
// If sending a pending message fails, Resume returns the Conversation with
// the error, and the message stays pending.
func Resume(ctx context.Context, sess *poppy.Session, id string, opts *Options) (*Conversation, error) {
	if sess == nil {
		return nil, poppy.ErrNoSession
	}
	if !validID(id) {
		return nil, fmt.Errorf("%w: conversation %q", errInvalidID, clip(id))
	}
	endpoint, err := Endpoint(sess.Company())
	if err != nil {
		return nil, err
	}
	if err := opts.check(sess); err != nil {
		return nil, err
	}
	c := newConversation(sess, id, endpoint, opts)
	if err := c.load(ctx); err != nil {
		return nil, err
	}
	if err := c.Flush(ctx); err != nil {
		return c, err
	}
	return c, nil
}

// Recover sends every message pending in the outbox of sess's User at its
// Company, after a crash or a lost answer: starts get back the
// conversation the Company started, later messages go to their
// conversation. It returns the conversations it touched.
func Recover(ctx context.Context, sess *poppy.Session, opts *Options) ([]*Conversation, error) {
	if sess == nil {
		return nil, poppy.ErrNoSession
	}
	if err := opts.check(sess); err != nil {
		return nil, err
	}
	pend, err := listOutbox(ctx, sess, "")
	if err != nil {
		return nil, err
	}
	var out []*Conversation
	seen := map[string]bool{}
	for _, p := range pend {
		if p.rec.Conversation != "" {
			if seen[p.rec.Conversation] {
				continue
			}
			seen[p.rec.Conversation] = true
			c, err := Resume(ctx, sess, p.rec.Conversation, opts)
			if err != nil {
				return out, err
			}
			out = append(out, c)
			continue
		}
		c, err := sendStart(ctx, sess, p.id, p.rec, opts)
		if err != nil {
			return out, err
		}
		if !seen[c.id] {
			seen[c.id] = true
			out = append(out, c)
		}
	}
	return out, nil
}

// ID returns the Conversation ID.
func (c *Conversation) ID() string { return c.id }

// Parent returns the parent conversation of a Direct Conversation, "" for
// others.
func (c *Conversation) Parent() string { return c.parent }

// Status returns the status as of the latest answer or state event.
func (c *Conversation) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status
}

// Responder returns who handles the Company's side, as of the latest
// answer or state event (PA-7.7-05).
func (c *Conversation) Responder() Responder {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.responder
}

// OpenDirect returns the ID of the open Direct Conversation linked to this
// one, "" when none is open (spec 7.10, PA-7.10-06). While one is open the
// Company refuses messages and handoffs here.
func (c *Conversation) OpenDirect() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.openDirect
}

// Cursor returns the cursor of the last event handled, "" before any. The
// keystore holds it once the Events loop checkpointed it (see Checkpoint).
func (c *Conversation) Cursor() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cursor
}

// Session returns the Session the conversation's requests go through.
func (c *Conversation) Session() *poppy.Session { return c.sess.Load() }

// UseSession continues the conversation through sess: another Session of
// the same agent and User or account (spec 7.11, PA-7.11-04).
func (c *Conversation) UseSession(sess *poppy.Session) {
	if sess != nil {
		c.sess.Store(sess)
	}
}

// SendOptions configures Send.
type SendOptions struct {
	// Wait asks for the Company's reply in the answer, holding it up to
	// Wait (spec 7.3, PA-7.3-07), from the conversation's cursor. The
	// reply's events come out of the next Events loop, once.
	Wait time.Duration
}

// SendResult is the Company's answer to a message.
type SendResult struct {
	MessageID string
	Status    Status
	Responder Responder
}

// Send sends a message (spec 7.3). It is written to the outbox first, then
// sent, and sent again with the same ID and bytes while its outcome is
// unknown, by the Session transport's retry policy (at most three times,
// after Retry-After); messages still pending from before go first. A closed
// conversation refuses it locally with ErrConversationClosed (PA-7.7-04).
//
// What an error says of the message: a *PendingError means it is in the outbox, its outcome unknown (no answer, ctx ended,
// 5xx or 429 after the retries: the Company's *poppy.Error is in it), and
// the next Send, Flush, Resume or Recover sends it with its ID: don't send
// it again. Any other error means the message was refused (by the Company,
// an *Error or *poppy.Error, or before sending) and is not in the outbox.
// If the process dies during Send, Conversation.Sent tells after the
// restart whether the message was written.
func (c *Conversation) Send(ctx context.Context, msg Message, opts *SendOptions) (*SendResult, error) {
	if c.Status() == StatusClosed {
		return nil, fmt.Errorf("%w: %s", ErrConversationClosed, c.id)
	}
	w, markup, err := msg.encode(c.opts.StrictText)
	if err != nil {
		return nil, err
	}
	if markup {
		c.log.WarnContext(ctx, "conversation: message text holds JSON or markup; structured details belong in data", "message_id", w.ID)
	}
	b, err := json.Marshal(map[string]any{"message": w})
	if err != nil {
		return nil, fmt.Errorf("conversation: encoding the message: %w", err)
	}
	wait := 0
	if opts != nil {
		wait = waitSeconds(opts.Wait)
	}
	sess := c.Session()
	if err := putOutbox(ctx, sess, w.ID, outboxRecord{Conversation: c.id, Endpoint: c.endpoint, Seq: nextSeq(), Body: b, Wait: wait}); err != nil {
		return nil, err
	}
	ans, err := c.flush(ctx, w.ID)
	if ans == nil {
		if err == nil {
			err = &PendingError{MessageID: w.ID, Err: errors.New("conversation: it was not sent")}
		}
		return nil, err
	}
	return &SendResult{MessageID: w.ID, Status: Status(ans.Status), Responder: Responder(ans.Responder)}, err
}

// DeclineUserRequest tells the Company, in the conversation, that the User
// declined to join or isn't available (spec 7.10, PA-7.10-05). note is the
// Personal Agent's own wording; "" gives a default.
func (c *Conversation) DeclineUserRequest(ctx context.Context, note string) (*SendResult, error) {
	if note == "" {
		note = "The user isn't available to talk with you directly right now. Please continue with me."
	}
	return c.Send(ctx, Text(note), nil)
}

// Flush sends the messages of this conversation still pending in the
// outbox, oldest first.
func (c *Conversation) Flush(ctx context.Context) error {
	_, err := c.flush(ctx, "")
	return err
}

// flush sends the pending messages in order and returns the answer to the
// message want.
func (c *Conversation) flush(ctx context.Context, want string) (*answer, error) {
	select {
	case c.sendSem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-c.sendSem }()
	sess := c.Session()
	pending := func(id string, err error) error {
		if want != "" {
			id = want
		}
		return &PendingError{MessageID: id, Err: err}
	}
	pend, err := listOutbox(ctx, sess, c.id)
	if err != nil {
		if want == "" {
			return nil, err
		}
		return nil, pending(want, err)
	}
	var out *answer
	var outErr error
	for _, p := range pend {
		if c.Status() == StatusClosed {
			closed := fmt.Errorf("%w: %s", ErrConversationClosed, c.id)
			if err := c.answered(ctx, sess, p, closed); err != nil {
				return nil, pending(p.id, err)
			}
			if p.id == want {
				return nil, closed
			}
			continue
		}
		u := c.endpoint + "/" + c.id + "/messages"
		ans, err := c.post(ctx, u, p.rec.Body, p.rec.Wait, false)
		if err != nil {
			if errors.Is(err, ErrConversationClosed) {
				c.setState(StatusClosed, "") // PA-7.13-02
			}
			if !definite(err) {
				return nil, pending(p.id, err) // an unknown outcome stops the line, keeping the order
			}
			// The Company will never take it: it leaves the outbox
			// and is never sent again under its ID (PA-7.3-06).
			if rerr := c.answered(ctx, sess, p, err); rerr != nil {
				return nil, pending(p.id, rerr)
			}
			if p.id != want {
				c.log.WarnContext(ctx, "conversation: the Company refused a pending message", "message_id", p.id, "error", err)
				continue
			}
			return nil, err
		}
		c.applyAnswer(ans)
		// The receipt, then the outbox record goes: a crash in between
		// sends the message again with its ID, and the Company answers
		// as before (CO-7.3-02).
		if err := c.answered(ctx, sess, p, nil); err != nil {
			return nil, pending(p.id, err)
		}
		if p.id == want {
			out, outErr = ans, ans.err()
		}
	}
	if err := c.save(ctx); err != nil {
		return out, err
	}
	return out, outErr
}

// Handoff asks for a person at the Company (spec 7.9): the status becomes
// queued while the Company finds someone (PA-7.9-02).
func (c *Conversation) Handoff(ctx context.Context) (Status, error) {
	if c.Status() == StatusClosed {
		return StatusClosed, fmt.Errorf("%w: %s", ErrConversationClosed, c.id)
	}
	ans, err := c.post(ctx, c.endpoint+"/"+c.id+"/handoff", []byte("{}"), 0, false)
	if err != nil {
		if errors.Is(err, ErrConversationClosed) {
			c.setState(StatusClosed, "")
		}
		return c.Status(), err
	}
	c.applyAnswer(ans)
	if err := c.save(ctx); err != nil {
		return Status(ans.Status), err
	}
	return Status(ans.Status), ans.err()
}

// Close closes the conversation (spec 7.12). Its events stay readable;
// closing cancels nothing it started, such as an order.
func (c *Conversation) Close(ctx context.Context) error {
	ans, err := c.post(ctx, c.endpoint+"/"+c.id+"/close", []byte("{}"), 0, false)
	if err != nil {
		return err
	}
	c.applyAnswer(ans)
	if err := c.save(ctx); err != nil {
		return err
	}
	return ans.err()
}

// answer is the body of a POST's answer (spec 7.3), with a reply's events
// when it carried wait.
type answer struct {
	status         int
	ConversationID string            `json:"conversation_id"`
	Status         string            `json:"status"`
	Responder      string            `json:"responder"`
	Events         []json.RawMessage `json:"events"`
	Cursor         *string           `json:"cursor"`
	HasMore        bool              `json:"has_more"`
	parsed         []Event
	// tooMany is the number of events of an answer that carried more than
	// Options.MaxAnswerEvents: none of them was taken.
	tooMany int
}

// err is the error an answer that was taken leaves: its events were
// refused for their number (ErrTooManyEvents). nil otherwise.
func (a *answer) err() error {
	if a.tooMany == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w: the answer carries %d events", ErrProtocol, ErrTooManyEvents, a.tooMany)
}

// post sends body to u, and again with the same bytes while the outcome is
// unknown (no response, 5xx; PA-7.3-04), by the Session transport's retry
// policy: at most three retries, each after Retry-After (or 1 s, 2 s, 4 s),
// none when Retry-After is longer than AgentOptions.MaxRetryWait. A 429 is
// returned as it comes: the transport already waited out its three retries
// (PA-4.3-27..29). ctx bounds the whole. wait > 0 asks for the reply in the
// answer. The last error names the Company's *poppy.Error, if any.
func (c *Conversation) post(ctx context.Context, u string, body []byte, wait int, isStart bool) (*answer, error) {
	q := url.Values{}
	if wait > 0 {
		q.Set("wait", strconv.Itoa(wait)) // PA-7.3-07, A-24
		if cur := c.Cursor(); cur != "" && !isStart {
			q.Set("cursor", cur)
		}
	}
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	agent := c.Session().Company().Agent()
	var company *poppy.Error        // the Company's last answer
	done := func(err error) error { // ctx ended
		if company != nil {
			return fmt.Errorf("conversation: %w (the Company answered %w)", err, company)
		}
		return fmt.Errorf("conversation: %w", err)
	}
	for attempt := 0; ; attempt++ {
		ans, err := c.postOnce(ctx, u, body, wait)
		if err == nil {
			return ans, nil
		}
		if ctx.Err() != nil {
			return nil, done(ctx.Err())
		}
		if !retry.IsTransient(err) {
			return nil, err // a definite answer, or refused before sending
		}
		var retryAfter time.Duration
		if errors.As(err, &company) {
			if company.Status == http.StatusTooManyRequests {
				return nil, err // the transport's retries are used up
			}
			retryAfter = company.RetryAfter
		}
		d, ok := agent.RetryWait(retryAfter, attempt)
		if !ok {
			return nil, err
		}
		c.log.DebugContext(ctx, "conversation: retrying a POST with the same body", "url", redactURL(u), "attempt", attempt+1, "wait", d, "error", err)
		if err := c.clock.Sleep(ctx, d); err != nil {
			return nil, done(err)
		}
	}
}

func (c *Conversation) postOnce(ctx context.Context, u string, body []byte, wait int) (*answer, error) {
	actx, cancel := context.WithTimeout(streamContext(ctx), c.opts.RequestTimeout+time.Duration(wait)*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("conversation: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := c.Session().HTTPClient().Do(req)
	if err != nil {
		return nil, classifyTransport(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		return nil, c.responseError(resp)
	}
	b, err := readCapped(resp.Body, c.opts.MaxResponseBytes)
	if errors.Is(err, poppy.ErrResponseTooLarge) {
		// A 2xx: the Company took the message, and would give the same
		// answer to a retry (CO-7.3-02).
		return nil, fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	if err != nil {
		return nil, err
	}
	var ans answer
	if err := json.Unmarshal(b, &ans); err != nil {
		return nil, protocolError("the answer is not JSON")
	}
	ans.status = resp.StatusCode
	if ans.Status == "" || ans.Responder == "" {
		return nil, protocolError("the answer lacks status or responder")
	}
	if ans.ConversationID != "" && !validID(ans.ConversationID) {
		return nil, protocolError("conversation_id %q breaks the ID rules", clip(ans.ConversationID))
	}
	if len(ans.Events) > c.opts.MaxAnswerEvents {
		// Bounded work per answer: the message is taken, its events are
		// not; the next Events loop reads them, page by page, from the
		// saved cursor.
		ans.tooMany, ans.Events, ans.Cursor, ans.HasMore = len(ans.Events), nil, nil, false
		return &ans, nil
	}
	ans.parsed = make([]Event, 0, len(ans.Events))
	for _, raw := range ans.Events {
		ev, err := c.parseEvent(raw)
		if err != nil {
			return nil, err
		}
		ans.parsed = append(ans.parsed, ev)
	}
	return &ans, nil
}

// applyAnswer takes status, responder and any reply events from ans
// (PA-7.3-02, PA-7.3-08), in time linear in the events pending and
// answered: an event already handled or pending is skipped by a set.
func (c *Conversation) applyAnswer(ans *answer) {
	defer c.nudge() // a message was answered: a pacing Events loop reads now
	c.mu.Lock()
	defer c.mu.Unlock()
	c.status, c.responder = Status(ans.Status), Responder(ans.Responder)
	if len(ans.parsed) == 0 {
		return
	}
	queued := make(map[string]struct{}, len(c.pending)+len(ans.parsed))
	for _, p := range c.pending {
		queued[p.ID] = struct{}{}
	}
	for _, ev := range ans.parsed {
		if _, dup := queued[ev.ID]; dup || c.seen.has(ev.ID) {
			continue
		}
		queued[ev.ID] = struct{}{}
		c.pending = append(c.pending, ev)
	}
}

func (c *Conversation) setState(s Status, r Responder) {
	c.mu.Lock()
	c.status = s
	if r != "" {
		c.responder = r
	}
	c.mu.Unlock()
}

// responseError turns an error answer into the error to return: an
// *Error for the codes of spec 7.13, else the *poppy.Error (token errors,
// unknown codes, PA-7.13-04), or a transient error for 5xx and 429.
func (c *Conversation) responseError(resp *http.Response) error {
	perr := poppy.ResponseError(resp)
	var pe *poppy.Error
	if !errors.As(perr, &pe) {
		return perr
	}
	if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
		return transient(pe)
	}
	if !spec713Codes[pe.Code] {
		return pe
	}
	e := &Error{Err: pe}
	if pe.Code == "direct_conversation_open" {
		var b struct {
			ConversationID string `json:"conversation_id"`
		}
		if raw, err := readCapped(resp.Body, 64<<10); err == nil && json.Unmarshal(raw, &b) == nil && validID(b.ConversationID) {
			e.ConversationID = b.ConversationID
			if c.id != "" {
				c.mu.Lock()
				c.openDirect = b.ConversationID
				c.mu.Unlock()
			}
		}
	}
	return e
}

// classifyTransport sorts an error of the Session's HTTP client, which
// gives no response: the request was refused before it was sent (no
// Session Token could be had, a foreign host, an insecure URL), which
// retrying won't mend, or its outcome is unknown (network, timeout), and
// it may be retried with the same bytes.
func classifyTransport(err error) error {
	var pe *poppy.Error
	if errors.As(err, &pe) {
		if pe.Status == http.StatusTooManyRequests || pe.Status >= 500 {
			return transient(pe)
		}
		return &unsentError{pe}
	}
	for _, s := range []error{poppy.ErrNoSession, poppy.ErrForeignHost, poppy.ErrInsecureURL, poppy.ErrInsecureRedirect, poppy.ErrTooManyRedirects} {
		if errors.Is(err, s) {
			return &unsentError{err}
		}
	}
	return transient(err)
}

// unsentError is a request refused before it reached the conversation
// endpoint, for a reason retrying won't mend, such as the token endpoint's
// refusal. It is returned, not retried; a message stays in the outbox.
type unsentError struct{ err error }

func (e *unsentError) Error() string { return "conversation: " + e.err.Error() }
func (e *unsentError) Unwrap() error { return e.err }

// transient marks an attempt whose outcome is unknown or that the Company
// asked to repeat: no response, 5xx, 429 (the SDK's one such error,
// internal/retry.Transient).
func transient(err error) error { return &retry.Transient{Prefix: "conversation: ", Err: err} }

// retryable reports whether the reader may read again after err, and sets
// retryAfter to the Company's Retry-After, bounded by the SDK's default
// longest wait (internal/retry.DefaultMaxWait, AgentOptions.MaxRetryWait's
// default); ctx bounds the whole.
func retryable(err error, retryAfter *time.Duration) bool {
	if !retry.IsTransient(err) {
		return false
	}
	var pe *poppy.Error
	if errors.As(err, &pe) {
		*retryAfter = min(pe.RetryAfter, retry.DefaultMaxWait) // a Company's wait is bounded
	}
	return true
}

// definite reports whether err is the Company's definite refusal: the
// message will never be taken, so it leaves the outbox.
func definite(err error) bool {
	var ue *unsentError
	if retry.IsTransient(err) || errors.As(err, &ue) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pe *poppy.Error
	return errors.As(err, &pe) || errors.Is(err, ErrProtocol)
}

// backoff returns the capped, jittered wait before retry n (0-based):
// 100 ms doubling up to MaxBackoff, each drawn from [d/2, d].
func (c *Conversation) backoff(n int) time.Duration {
	d := 100 * time.Millisecond << min(n, 20)
	d = min(d, c.opts.MaxBackoff)
	return d/2 + rand.N(d/2+1)
}

func waitSeconds(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	return int(min((d+time.Second-1)/time.Second, 300)) // whole seconds, rounded up
}

// readCapped reads an answer by the SDK's one bounded read
// (internal/bounded): too large is poppy.ErrResponseTooLarge, and a read
// cut short is transient, since the Company may have taken the request.
func readCapped(r io.Reader, limit int64) ([]byte, error) {
	b, err := bounded.ReadAll(r, limit)
	if err != nil && !errors.Is(err, bounded.ErrTooLarge) {
		return nil, transient(fmt.Errorf("reading the answer: %w", err))
	}
	return b, err
}

func redactURL(u string) string {
	if i := strings.IndexByte(u, '?'); i >= 0 {
		return u[:i]
	}
	return u
}

// load reads the conversation's record, if any.
func (c *Conversation) load(ctx context.Context) error {
	b, err := c.store.Get(ctx, c.ckey)
	if errors.Is(err, keystore.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("conversation: reading the conversation record: %w", err)
	}
	var r record
	if json.Unmarshal(b, &r) != nil {
		return nil // unreadable: start from the beginning
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.Parent != "" {
		c.parent = r.Parent
	}
	c.cursor, c.status, c.responder, c.openDirect = r.Cursor, r.Status, r.Responder, r.OpenDirect
	for _, id := range r.Handled {
		c.seen.add(id)
	}
	return nil
}

// save writes the conversation's record. It is written even when ctx is
// done: the caller has handled what the cursor says.
func (c *Conversation) save(ctx context.Context) error {
	c.mu.Lock()
	r := record{Endpoint: c.endpoint, Parent: c.parent, Cursor: c.cursor, Status: c.status, Responder: c.responder, OpenDirect: c.openDirect}
	if c.cursor != "" {
		r.Handled = c.seen.tail(savedHandled)
	}
	c.mu.Unlock()
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := c.store.Update(sctx, c.ckey, func([]byte) ([]byte, error) { return b, nil }); err != nil {
		return fmt.Errorf("conversation: saving the cursor: %w", err)
	}
	return nil
}

func outboxKey(sess *poppy.Session, msgID string) keystore.Key {
	return keystore.Key{Kind: keystore.KindOutbox, User: sess.User(), Issuer: sess.Company().Issuer(), ID: msgID}
}

// putOutbox writes a message to the outbox before its first attempt. A
// message ID already pending with other content is refused: the SDK never
// sends different content under one ID (PA-7.3-06).
func putOutbox(ctx context.Context, sess *poppy.Session, msgID string, ob outboxRecord) error {
	b, err := json.Marshal(ob)
	if err != nil {
		return err
	}
	err = sess.Company().Agent().Store().Update(ctx, outboxKey(sess, msgID), func(cur []byte) ([]byte, error) {
		if cur != nil {
			var old outboxRecord
			if json.Unmarshal(cur, &old) == nil && (!bytes.Equal(old.Body, ob.Body) || old.Conversation != ob.Conversation) {
				return nil, fmt.Errorf("%w: message %s is pending with other content", errIDConflict, msgID)
			}
			return cur, nil // the same message: keep its place in line
		}
		return b, nil
	})
	if err != nil && !errors.Is(err, errIDConflict) {
		return fmt.Errorf("conversation: writing the outbox: %w", err)
	}
	return err
}

func deleteOutbox(ctx context.Context, sess *poppy.Session, msgID string) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := sess.Company().Agent().Store().Update(dctx, outboxKey(sess, msgID), func([]byte) ([]byte, error) { return nil, nil }); err != nil {
		sess.Company().Agent().Logger().WarnContext(ctx, "conversation: removing a sent message from the outbox failed; it may be sent again, with its ID", "message_id", msgID, "error", err)
	}
}

type pendingMsg struct {
	id  string
	rec outboxRecord
}

// listOutbox returns the pending messages of conversation conv (all when
// conv is ""), oldest first.
func listOutbox(ctx context.Context, sess *poppy.Session, conv string) ([]pendingMsg, error) {
	st := sess.Company().Agent().Store()
	keys, err := st.List(ctx, keystore.KindOutbox, sess.User(), sess.Company().Issuer())
	if err != nil {
		return nil, fmt.Errorf("conversation: listing the outbox: %w", err)
	}
	var out []pendingMsg
	for _, k := range keys {
		if receiptRecord(k.ID) {
			continue
		}
		b, err := st.Get(ctx, k)
		if errors.Is(err, keystore.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("conversation: reading the outbox: %w", err)
		}
		var r outboxRecord
		if json.Unmarshal(b, &r) != nil {
			continue
		}
		if conv == "" || r.Conversation == conv {
			out = append(out, pendingMsg{id: k.ID, rec: r})
		}
	}
	slices.SortFunc(out, func(a, b pendingMsg) int { return int(min(max(a.rec.Seq-b.rec.Seq, -1), 1)) })
	return out, nil
}

// streamContext marks ctx for requests that the Company may hold open (long
// polls, streams, POSTs with wait): they are bounded by their own timeouts
// (Options.RequestTimeout plus the wait, the stream idle watchdog), never by
// the default client's response-header timeout.
func streamContext(ctx context.Context) context.Context {
	return poppy.WithResponseHeaderTimeout(ctx, 0)
}
