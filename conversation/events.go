package conversation

// Reading events: long polls and streams behind one iterator (spec 7.5,
// 7.6).
//
// Events asks for a stream (Accept: text/event-stream) unless told not to.
// A Company that answers JSON doesn't stream, and the loop long-polls for
// the rest of its life. Each request goes through the Session's HTTP
// client, so every reconnect has a fresh proof and a current token, renewed
// when the Company closed the stream at its expiry (PA-7.6-05).
//
// Streams are parsed by sseReader (sse.go) over the response body. An
// event's ID is taken from its JSON, never from the SSE id (which carries
// over to frames without one), and a text-delta frame is recognised by its
// event name alone: it never moves the cursor or Last-Event-ID
// (PA-7.6-07). Events and pages are decoded by one pass over their bytes
// (eventjson.go), json.Unmarshal deciding whatever that pass does not
// know.
//
// Every event goes through deliver: skipped if it was handled before,
// applied to the status, responder and open Direct Conversation, yielded,
// and only when the loop body has returned from it does its ID become the
// cursor (PA-7.5-08). Unknown types are skipped, but the cursor moves past
// them (PA-7.5-04). A stream that ends with text-delta pieces of a message
// not yet received in full yields one EventPartialDropped per such message
// (PA-7.6-08).
//
// What was handled is known by position, not by a set of IDs (PA-7.5-09):
// the events handled are those up to the cursor, in the Company's order.
// An answer read from the cursor that holds the cursor's event again (a
// replay) starts after it; a recovery from cursor_expired or
// invalid_cursor reads from the beginning yielding nothing until the
// cursor's event (see startScan), for any length of history. A bounded
// ring of the last RememberEvents IDs, seeded from the last ones saved
// with the cursor, catches the few events a stream replays before its
// Last-Event-ID.
//
// The cursor is saved in the keystore by checkpoints (Checkpoint): after
// each JSON page, before a stream waits for more bytes, every
// Checkpoint.Events events or Checkpoint.Interval, and when the loop
// returns. A has_more answer that never moves the cursor ends the loop
// with an ErrProtocol.
//
// Pacing is one rule, in one place (reader.pace, after every read of
// every kind): a read that brought no event not handled before is
// followed by a pause, from the start of that read, of 250 ms doubling to
// 5 s while reads keep bringing nothing (PA-7.5-06, PA-7.5-09). What the
// answer said does not matter: a cursor that moved (forward, backward, or
// to a value of the Company's own), has_more, a wait cut short, a stream
// closed at once, a refused cursor. A read that brought a new event is
// followed by the next one at once (PA-7.5-07), and a message sent ends a
// pause. A failed read waits out Retry-After or the failure backoff.
//
// Breaking out of the loop returns from the iterator: the request in
// flight is cancelled with the iterator's own context, and no goroutine is
// left behind (the stream idle watchdog is a timer, stopped on return).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/internal/companytext"
	"github.com/poppyproto/poppy/operations"
)

// EventType is an event's type (spec 7.5), or one of the types the SDK
// adds: EventTextDelta, EventPartialDropped and EventHistoryGap.
type EventType string

// The event types.
const (
	EventMessage       EventType = "message"
	EventState         EventType = "state"
	EventAuthorization EventType = "authorization"
	EventUserRequested EventType = "user_requested"
	EventDirectOpened  EventType = "direct_opened"
	EventDirectClosed  EventType = "direct_closed"

	// EventTextDelta is a provisional piece of a Company message being
	// written (spec 7.6), for display only: never act on it (PA-7.6-07).
	// The complete EventMessage with the same message ID replaces it. It
	// has no ID and moves no cursor.
	EventTextDelta EventType = "text-delta"
	// EventPartialDropped says that the pieces shown of message
	// Delta.MessageID are void: the stream broke before the message came
	// in full (PA-7.6-08). The message itself arrives later as usual.
	EventPartialDropped EventType = "partial-dropped"
	// EventHistoryGap says that part of the conversation is missing: the
	// Company no longer had the events at the saved cursor
	// (cursor_expired), and reading went on from the oldest event it
	// keeps. Tell the User (PA-7.5-11).
	EventHistoryGap EventType = "history-gap"
)

// Event is one event of a conversation.
type Event struct {
	// ID is the Company's event ID, also a cursor; "" for the types the SDK
	// adds. Handle events idempotently by it: after a crash, an event
	// whose handling had not returned is yielded again.
	ID        string
	Type      EventType
	CreatedAt time.Time
	// Message is the message of an EventMessage.
	Message *ReceivedMessage
	// Status and Responder are those of an EventState.
	Status    Status
	Responder Responder
	// Authorization is what an EventAuthorization asks for (spec 7.11):
	// Code "sign_in_required" or "insufficient_scope", Scope, and the
	// SignInTypes that can grant it, as an API refusal has them. It matches
	// poppy.ErrSignInRequired or poppy.ErrInsufficientScope. Sign in, then
	// keep going: the conversation continues with the new token.
	Authorization *poppy.Error
	// Reason is the reason of an EventUserRequested: ask the User whether
	// they want to talk with the Company; start a Direct Conversation only
	// if they agree (StartDirect), or else DeclineUserRequest.
	Reason string
	// ConversationID is the Direct Conversation of EventDirectOpened and
	// EventDirectClosed.
	ConversationID string
	// Delta is the piece of an EventTextDelta, or the message of an
	// EventPartialDropped.
	Delta *TextDelta
	// Raw is the event as the Company sent it; nil for the SDK's types.
	Raw json.RawMessage
}

// Provisional reports whether the event is for display only.
func (e Event) Provisional() bool {
	return e.Type == EventTextDelta || e.Type == EventPartialDropped
}

// TextDelta is a piece of a Company message being written (spec 7.6).
type TextDelta struct {
	MessageID string
	Text      string
}

// ReceivedMessage is a message of an event (spec 7.4, 7.5). The Company's
// text keeps newlines and tabs; every rune that could drive a terminal,
// reorder or hide text becomes U+FFFD (see the package doc). It marshals
// to the wire form of a message.
type ReceivedMessage struct {
	ID     string `json:"id"`
	Role   Role   `json:"role"`   // "user" for the Personal Agent's side, "company"
	Sender Sender `json:"sender"` // who wrote it (PA-7.7-06)
	Text   string `json:"text,omitempty"`
	// Data is the message's JSON object, if any.
	Data json.RawMessage `json:"data,omitempty"`
	// Operation is the operations extension's operation the message
	// carries (OPS 4.3), when the agent's identity lists that extension;
	// nil otherwise (PA-7.4-11). With Options.Operations it is that
	// Client's view of it. It is a proposal: the message, whatever its
	// text says, never approves or confirms it (PA-OPS5-04).
	Operation *operations.Operation `json:"operation,omitempty"`
	// OperationError says why the operation the message carries is not in
	// Operation: it breaks the extension's rules (operations.ErrProtocol),
	// or Options.Operations refused it (terms changed under a revision it
	// had seen). The message itself is delivered as usual.
	OperationError error `json:"-"`
}

// EventsOptions configures Events.
type EventsOptions struct {
	// LongPoll reads with JSON long polls, never a stream.
	LongPoll bool
	// UntilIdle returns once the Company is no longer working (idle,
	// queued or closed) and every event up to then was yielded: the
	// control goes back to the caller (PA-7.7-02). Where the Company
	// streams, it streams, text-delta pieces included: a first JSON read
	// (without wait) learns where the turn stands, so a loop resumed at an
	// idle cursor returns at once, and the stream that follows ends the
	// loop at the state event that ends the turn.
	UntilIdle bool
	// Checkpoint says when the cursor of the events handled is saved in
	// the keystore. The zero value is the default policy.
	Checkpoint Checkpoint
}

// Checkpoint is when an Events loop saves its cursor (the last event
// handled) in the keystore, as a Kafka consumer commits its offsets. The
// cursor is always saved after each JSON page, before a stream waits for
// more data (the end of a burst; at most every 20 ms, so a stream that
// falls silent is saved within 20 ms), and when the loop returns; Events
// and Interval bound how far it may lag in between, while events keep
// coming.
//
// What comes again after a crash is what was handled but not yet saved,
// each event with its ID, and the event in flight: fewer than Events
// events (default 256). Events: 1 saves after every event, so that only
// the event in flight comes again, at one keystore write per event.
type Checkpoint struct {
	// Events saves once that many handled events are unsaved. Default 256.
	Events int
	// Interval saves, after an event was handled, once the oldest unsaved
	// one was handled that long ago. Default 1 s.
	Interval time.Duration
}

// The default checkpoint policy.
const (
	defaultCheckpointEvents   = 256
	defaultCheckpointInterval = time.Second
)

func (p Checkpoint) withDefaults() Checkpoint {
	if p.Events <= 0 {
		p.Events = defaultCheckpointEvents
	}
	if p.Interval <= 0 {
		p.Interval = defaultCheckpointInterval
	}
	return p
}

// errReading is yielded when Events is called while another Events loop of
// the same Conversation is running.
var errReading = errors.New("conversation: another Events loop is reading this conversation")

// Events reads the conversation's events from the saved cursor, in order,
// each once within this process (spec 7.5). It streams where the Company
// streams and long-polls otherwise, reconnecting after a cut with capped,
// jittered backoff, until the loop breaks, ctx ends, the conversation is
// closed and read to its end, or a terminal error (yielded once): a
// refusal such as conversation_not_found or sign_in_required, a protocol
// error (a cursor that does not move among them), or a keystore failure. cursor_expired
// and invalid_cursor are recovered from by reading from the beginning and
// skipping, by position, every event up to the last one handled;
// cursor_expired also yields EventHistoryGap.
//
// Reads that bring nothing new are paced: a read that brought no event
// not handled before is followed by a pause, counted from its start, that
// grows while reads bring nothing, from 250 ms to 5 s, whatever the
// Company answered (a long poll returned at once, as spec 7.5 lets it, a
// cursor of its own, has_more, a stream closed at once); a message sent
// on the Conversation ends the pause.
//
// The cursor is saved in the keystore after the loop body returned from
// the events it covers, as opts.Checkpoint says. Delivery: within a
// process each event is yielded once; across a crash, the events handled
// since the last checkpoint are yielded again, with the same IDs, and
// never one the saved cursor covers.
func (c *Conversation) Events(ctx context.Context, opts *EventsOptions) iter.Seq2[Event, error] {
	var o EventsOptions
	if opts != nil {
		o = *opts
	}
	return func(yield func(Event, error) bool) {
		if !c.reading.CompareAndSwap(false, true) {
			yield(Event{}, errReading)
			return
		}
		defer c.reading.Store(false)
		r := &reader{c: c, yield: yield, stream: !o.LongPoll, untilIdle: o.UntilIdle, ck: o.Checkpoint.withDefaults()}
		r.run(ctx)
	}
}

// reader is the state of one Events loop.
type reader struct {
	c         *Conversation
	yield     func(Event, error) bool
	stream    bool
	untilIdle bool
	caughtUp  bool            // UntilIdle: a JSON read showed where the turn stands
	streamed  bool            // a stream was opened: reconnects send Last-Event-ID alone
	deltas    map[string]bool // messages with pieces shown, not yet complete
	stopped   bool            // the loop body broke
	failures  int             // failed reads in a row (the failure backoff)
	more      bool            // the last page said has_more: the next read is without wait

	// Recovery from invalid_cursor and cursor_expired: the
	// conversation is read from its beginning by JSON, yielding nothing,
	// until the last event handled (scanFor) shows where to go on.
	scanning   bool
	scanFor    string
	scanCursor string
	scanned    *idRing // event IDs this recovery read (pacing)
	onward     bool    // the recovery's last page was history it had not read (pacing)

	// Checkpoints: events handled since the cursor was last saved.
	ck           Checkpoint
	unsaved      int
	firstUnsaved time.Time
	lastSave     time.Time
	dirty        bool  // status or cursor changed without an event
	saveErr      error // a checkpoint failed inside a stream read

	fresh int // events handled that were not handled before (pacing)
	idle  int // reads in a row that brought nothing new (pacing)
	stuck int // has_more reads in a row whose cursor did not move
}

var errStop = errors.New("stop")

// Pacing of reads that bring nothing new, and the bound on a cursor that
// doesn't move.
const (
	idlePaceMin = 250 * time.Millisecond
	idlePaceMax = 5 * time.Second
	// stuckReads is how many has_more answers in a row may leave the
	// cursor where it was before that is the Company's error.
	stuckReads = 5
)

func (r *reader) run(ctx context.Context) {
	c := r.c
	// Whatever was handled is saved when the loop returns, however it
	// returns (a break, an error, a panic in the loop body).
	defer func() {
		if err := r.checkpoint(ctx, true); err != nil {
			c.log.WarnContext(ctx, "conversation: saving the cursor failed; the events handled since the last checkpoint will come again", "conversation_id", c.id, "error", err)
		}
	}()
	for {
		if !r.scanning {
			n, err := r.drainPending(ctx)
			if err != nil {
				r.finish(err)
				return
			}
			if n > 0 {
				r.caughtUp = false // the turn may have moved: look again
			}
		}
		// A message sent before this read has its answer read by it: only
		// one sent from now on ends the pause that may follow.
		select {
		case <-c.wake:
		default:
		}
		// One read, of whichever kind; then the one rule of pacing.
		began, fresh := c.clock.Now(), r.fresh
		var done bool
		var err error
		switch {
		case r.scanning:
			done, err = r.scan(ctx)
		case r.stream && c.Status() != StatusClosed && (!r.untilIdle || r.caughtUp):
			done, err = r.streamOnce(ctx)
		default:
			done, err = r.poll(ctx)
		}
		if err == nil && done {
			return
		}
		failed := false
		var retryAfter time.Duration
		if err != nil {
			switch {
			case errors.Is(err, errStop):
				return
			case ctx.Err() != nil:
				r.yield(Event{}, fmt.Errorf("conversation: %w", ctx.Err()))
				return
			case specCode(err) == codeCursorExpired:
				// PA-7.5-10, PA-7.5-11: read from the beginning, say so.
				c.log.InfoContext(ctx, "conversation: cursor expired; reading from the beginning", "conversation_id", c.id)
				r.startScan()
				if !r.emit(ctx, Event{Type: EventHistoryGap}) {
					return
				}
			case specCode(err) == codeInvalidCursor:
				// PA-7.13-03, A-32: the same recovery.
				c.log.InfoContext(ctx, "conversation: invalid cursor; reading from the beginning", "conversation_id", c.id)
				r.startScan()
			case retryable(err, &retryAfter):
				c.log.DebugContext(ctx, "conversation: read failed, retrying", "conversation_id", c.id, "error", err)
				failed = true
			default:
				if errors.Is(err, ErrConversationClosed) {
					c.setState(StatusClosed, "")
				}
				r.yield(Event{}, err)
				return
			}
		}
		if err := r.pace(ctx, began, r.fresh-fresh, failed, retryAfter); err != nil {
			r.yield(Event{}, fmt.Errorf("conversation: %w", err))
			return
		}
	}
}

// pace is the one rule of read pacing (spec 7.5, PA-7.5-06, PA-7.5-07,
// PA-7.5-09), applied after every read of the loop, JSON or stream,
// answered or refused: it waits before the next read.
//
// A read that brought an event not handled before (fresh > 0) is
// followed by the next one at once: the Company has more to say, and
// has_more: true is read again right away (PA-7.5-07). So is a page of a
// recovery that holds history this recovery had not read yet, so
// that a long history is skipped quickly; but it is no news, and does not
// start the pacing over: a Company that refuses every cursor is paced
// all the same. A read that brought nothing new is followed by a pause, counted from the read's start, of
// 250 ms doubling to 5 s (at most Options.MaxBackoff) while reads keep
// bringing nothing, whatever the answer said: a cursor that moved, or
// went back, or is a value of the Company's own; has_more; a long poll
// held for less than its wait; a stream closed at once; a cursor refused.
// None of these told the User anything, and the Company is asked again
// no faster than a person could notice. A long poll that was held (or a
// stream that stayed open) longer than the pause goes on at once. A
// message sent on the Conversation ends the pause (its reply is worth
// reading now), and the pacing starts over.
//
// A failed read (no answer, 5xx, 429) waits for Retry-After or the
// failure backoff, whichever is longer (PA-4.3-27), not ended by a
// message sent.
func (r *reader) pace(ctx context.Context, began time.Time, fresh int, failed bool, retryAfter time.Duration) error {
	c := r.c
	onward := r.onward
	r.onward = false
	if failed {
		d := max(retryAfter, c.backoff(r.failures))
		r.failures++
		return c.clock.Sleep(ctx, d)
	}
	r.failures = 0
	if fresh > 0 {
		r.idle = 0
		return nil
	}
	if onward {
		return nil
	}
	d := min(idlePaceMin<<min(r.idle, 16), idlePaceMax, c.opts.MaxBackoff)
	r.idle++
	if d -= c.clock.Now().Sub(began); d <= 0 {
		return nil
	}
	return r.pause(ctx, d)
}

func (r *reader) finish(err error) {
	if errors.Is(err, errStop) {
		return
	}
	r.yield(Event{}, err)
}

// startScan begins the recovery from a cursor the Company refused
// (cursor_expired, invalid_cursor): the conversation is read from its
// beginning, and every event up to the last one handled is skipped by
// position, however long the history (PA-7.5-09, A-32). Nothing is saved
// while scanning: a crash meanwhile scans again.
func (r *reader) startScan() {
	c := r.c
	c.mu.Lock()
	last := c.cursor
	c.mu.Unlock()
	r.streamed = false
	r.stuck, r.more = 0, false
	if last == "" {
		return // nothing was handled: read from the beginning, as usual
	}
	r.scanning, r.scanFor, r.scanCursor = true, last, ""
	r.scanned = newIDRing(r.c.opts.RememberEvents)
}

// scan does one JSON read of the recovery (see startScan). The page that
// holds the last event handled gives the events after it, and reading goes
// on from there. A history read to its end without that event no longer
// holds it, nor anything before it (a Company drops its oldest events):
// none of its events was handled, and it is read again from the beginning,
// delivering. A one-page history is delivered at once.
func (r *reader) scan(ctx context.Context) (bool, error) {
	c := r.c
	p, err := r.readJSON(ctx, r.scanCursor, 0)
	if err != nil {
		return false, err
	}
	evs, err := c.parseEvents(p)
	if err != nil {
		return false, err
	}
	k, unread := -1, 0
	for i := range evs {
		if evs[i].ID == r.scanFor {
			k = i
		}
		if !r.scanned.has(evs[i].ID) {
			r.scanned.add(evs[i].ID)
			unread++
		}
	}
	more := *p.HasMore
	switch {
	case k >= 0:
		r.scanning = false
		return false, r.deliverPage(ctx, p, evs[k+1:])
	case !more && r.scanCursor == "":
		r.scanning = false
		c.mu.Lock()
		c.cursor = ""
		c.mu.Unlock()
		return false, r.deliverPage(ctx, p, evs)
	case !more:
		r.scanning = false
		c.mu.Lock()
		c.cursor = ""
		c.mu.Unlock()
		return false, nil
	}
	next := r.scanCursor
	if p.Cursor != nil && *p.Cursor != "" {
		next = *p.Cursor
	}
	if err := r.noteMore(r.scanCursor, next); err != nil {
		return false, err
	}
	// Pacing: a page of the history this recovery had not read goes on
	// to the next at once; one it had read brought nothing.
	r.onward = unread > 0
	r.scanCursor = next
	return false, nil
}

// drainPending yields the events a POST's reply brought, and returns how
// many it took.
func (r *reader) drainPending(ctx context.Context) (int, error) {
	n := 0
	for {
		r.c.mu.Lock()
		if len(r.c.pending) == 0 {
			r.c.mu.Unlock()
			return n, nil
		}
		ev := r.c.pending[0]
		r.c.pending = r.c.pending[1:]
		r.c.mu.Unlock()
		n++
		if _, err := r.deliver(ctx, ev); err != nil {
			return n, err
		}
	}
}

// emit yields an event the SDK adds; false when the loop body broke.
func (r *reader) emit(ctx context.Context, ev Event) bool {
	if !r.yield(ev, nil) {
		r.stopped = true
		return false
	}
	return true
}

// deliver handles one Company event: skip, apply, yield, move the cursor,
// checkpoint. new reports whether the event was not skipped.
func (r *reader) deliver(ctx context.Context, ev Event) (new bool, err error) {
	c := r.c
	c.mu.Lock()
	if ev.ID == c.cursor || c.seen.has(ev.ID) {
		if ev.Type == EventMessage {
			delete(r.deltas, ev.Message.ID)
		}
		c.mu.Unlock()
		return false, nil // PA-7.5-09: handled before
	}
	known := true
	switch ev.Type {
	case EventState:
		c.status, c.responder = ev.Status, ev.Responder // PA-7.5-03
	case EventDirectOpened:
		c.openDirect = ev.ConversationID // PA-7.10-06
	case EventDirectClosed:
		if c.openDirect == ev.ConversationID || c.openDirect == "" {
			c.openDirect = "" // PA-7.10-08
		}
	case EventMessage:
		delete(r.deltas, ev.Message.ID)
		c.seenMsgs.add(ev.Message.ID)
	case EventAuthorization, EventUserRequested:
	default:
		known = false // PA-7.5-04: skipped, and the cursor moves past it
	}
	c.mu.Unlock()
	if known && !r.yield(ev, nil) {
		r.stopped = true
	}
	// The loop body has returned from the event (PA-7.5-08).
	c.mu.Lock()
	c.seen.add(ev.ID)
	c.cursor = ev.ID
	c.mu.Unlock()
	r.fresh++
	if r.unsaved == 0 {
		r.firstUnsaved = c.clock.Now()
	}
	r.unsaved++
	if err := r.checkpoint(ctx, false); err != nil {
		return true, err
	}
	if r.stopped {
		return true, errStop
	}
	return true, nil
}

// checkpoint saves the cursor when the policy says so, or whenever
// something is unsaved with force.
func (r *reader) checkpoint(ctx context.Context, force bool) error {
	if r.unsaved == 0 && !r.dirty {
		return nil
	}
	if !force && r.unsaved < r.ck.Events && r.c.clock.Now().Sub(r.firstUnsaved) < r.ck.Interval {
		return nil
	}
	if err := r.c.save(ctx); err != nil {
		return err
	}
	r.unsaved, r.dirty, r.lastSave = 0, false, r.c.clock.Now()
	return nil
}

// page is a JSON events read (spec 7.5).
type page struct {
	ConversationID string            `json:"conversation_id"`
	Events         []json.RawMessage `json:"events"`
	Cursor         *string           `json:"cursor"`
	HasMore        *bool             `json:"has_more"`
	Status         string            `json:"status"`
	Responder      string            `json:"responder"`
}

// poll does one JSON read and handles its events. done means the loop
// ends: the conversation is closed and read to its end, or UntilIdle was
// met. After a has_more answer the next read is sent without wait
// (PA-7.5-07); when it goes is pace's to say.
func (r *reader) poll(ctx context.Context) (bool, error) {
	c := r.c
	c.mu.Lock()
	cursor := c.cursor
	st := c.status
	c.mu.Unlock()
	catchUp := r.untilIdle && r.stream && !r.caughtUp
	wait := 0
	if st != StatusClosed && !catchUp && !r.more && !(r.untilIdle && st != StatusWorking) {
		wait = waitSeconds(c.opts.LongPollWait)
	}
	p, err := r.readJSON(ctx, cursor, wait)
	if err != nil {
		return false, err
	}
	return r.takePage(ctx, p, cursor, catchUp)
}

// takePage handles a JSON page read from cursor (a long poll's, or the
// answer of a Company that doesn't stream to a stream request): its
// events, its cursor and state, has_more, and whether the loop ends.
// catchUp says the page is UntilIdle's look at where the turn stands.
func (r *reader) takePage(ctx context.Context, p *page, cursor string, catchUp bool) (done bool, err error) {
	if err := r.handlePage(ctx, p, cursor); err != nil {
		return false, err
	}
	if r.more = *p.HasMore; r.more {
		return false, r.noteMore(cursor, r.c.Cursor())
	}
	r.stuck = 0
	switch st := r.c.Status(); {
	case st == StatusClosed:
		return true, nil // PA-7.12-02
	case r.untilIdle && st != StatusWorking:
		return true, nil // PA-7.7-02
	}
	if catchUp {
		r.caughtUp = true // the turn goes on: stream it
	}
	return false, nil // PA-7.5-06, PA-7.7-01: read again
}

// noteMore checks that a has_more answer moved the cursor: after
// stuckReads answers in a row that did not, it is the Company's error,
// since reading on would never end. (Each was paced: it brought nothing.)
func (r *reader) noteMore(cursor, next string) error {
	if next != cursor {
		r.stuck = 0
		return nil
	}
	r.stuck++
	if r.stuck >= stuckReads {
		return fmt.Errorf("%w (%d answers in a row at cursor %q; %w)", errCursorStuck, r.stuck, clip(cursor), ErrProtocol)
	}
	return nil
}

// pause waits d, or less if a message is sent on the conversation (its
// reply is worth reading at once): then the pacing starts over.
func (r *reader) pause(ctx context.Context, d time.Duration) error {
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-r.c.wake:
			cancel()
		case <-done:
		}
	}()
	if r.c.clock.Sleep(pctx, d) != nil && ctx.Err() == nil {
		r.idle = 0 // woken by a message sent
	}
	return ctx.Err()
}

// handlePage delivers a page's events and takes its cursor and state. A
// page read from cursor that holds cursor's event again starts after it:
// what comes before it was handled (PA-7.5-09, by position).
func (r *reader) handlePage(ctx context.Context, p *page, cursor string) error {
	evs, err := r.c.parseEvents(p)
	if err != nil {
		return err
	}
	if cursor != "" {
		for i := len(evs) - 1; i >= 0; i-- {
			if evs[i].ID == cursor {
				evs = evs[i+1:]
				break
			}
		}
	}
	return r.deliverPage(ctx, p, evs)
}

// deliverPage delivers evs, the new part of p, then takes p's cursor and
// state and checkpoints.
func (r *reader) deliverPage(ctx context.Context, p *page, evs []Event) error {
	c := r.c
	for _, ev := range evs {
		if _, err := r.deliver(ctx, ev); err != nil {
			return err
		}
	}
	c.mu.Lock()
	// PA-7.5-05: the Company's cursor, verbatim; but never one of the
	// events already handled, which would read them all again.
	if p.Cursor != nil && *p.Cursor != "" && *p.Cursor != c.cursor && !c.seen.has(*p.Cursor) {
		c.cursor = *p.Cursor
		r.dirty = true
	}
	if Status(p.Status) != c.status || Responder(p.Responder) != c.responder {
		c.status, c.responder = Status(p.Status), Responder(p.Responder)
		r.dirty = true
	}
	c.mu.Unlock()
	return r.checkpoint(ctx, true) // after each page
}

// parseEvents decodes and checks a page's events.
func (c *Conversation) parseEvents(p *page) ([]Event, error) {
	evs := make([]Event, 0, len(p.Events))
	for _, raw := range p.Events {
		ev, err := c.parseEvent(raw)
		if err != nil {
			return nil, err
		}
		evs = append(evs, ev)
	}
	return evs, nil
}

// readJSON sends one JSON events read.
func (r *reader) readJSON(ctx context.Context, cursor string, wait int) (*page, error) {
	c := r.c
	q := url.Values{}
	if cursor != "" {
		q.Set("cursor", cursor) // PA-7.5-01
	}
	if wait > 0 {
		q.Set("wait", strconv.Itoa(wait))
	}
	u := c.endpoint + "/" + c.id + "/events"
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	rctx, cancel := context.WithTimeout(streamContext(ctx), c.opts.RequestTimeout+time.Duration(wait)*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("conversation: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.Session().HTTPClient().Do(req)
	if err != nil {
		return nil, classifyTransport(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		return nil, c.responseError(resp)
	}
	return c.decodePage(resp)
}

func (c *Conversation) decodePage(resp *http.Response) (*page, error) {
	b, err := readCapped(resp.Body, c.opts.MaxResponseBytes)
	if err != nil {
		return nil, err
	}
	var p page
	if !decodePageJSON(b, &p) {
		p = page{}
		if err := json.Unmarshal(b, &p); err != nil {
			return nil, protocolError("the events read is not JSON")
		}
	}
	if p.HasMore == nil || p.Status == "" || p.Responder == "" {
		return nil, protocolError("the events read lacks has_more, status or responder")
	}
	if p.Cursor != nil && *p.Cursor != "" && !validID(*p.Cursor) {
		return nil, protocolError("cursor %q breaks the ID rules", clip(*p.Cursor))
	}
	return &p, nil
}

// streamOnce opens one stream and handles it until it ends. done means the
// loop ends (the conversation closed, or UntilIdle was met).
//
// The first stream of a loop sends the cursor both as the cursor query and
// as Last-Event-ID: a Company that resumes a stream from either
// resumes from it, and one that answers JSON reads from the query.
// Reconnects send Last-Event-ID alone, in place of cursor (PA-7.6-04).
func (r *reader) streamOnce(ctx context.Context) (bool, error) {
	c := r.c
	sctx, cancel := context.WithCancel(streamContext(ctx))
	defer cancel()
	c.mu.Lock()
	cursor := c.cursor
	c.mu.Unlock()
	u := c.endpoint + "/" + c.id + "/events"
	if cursor != "" && !r.streamed {
		u += "?" + url.Values{"cursor": {cursor}}.Encode()
	}
	req, err := http.NewRequestWithContext(sctx, http.MethodGet, u, nil)
	if err != nil {
		return false, fmt.Errorf("conversation: %w", err)
	}
	req.Header.Set("Accept", "text/event-stream, application/json;q=0.5") // PA-7.6-01
	if cursor != "" {
		req.Header.Set("Last-Event-ID", cursor) // PA-7.6-04
	}
	// A stream that sends nothing for StreamIdleTimeout is reconnected.
	idle := time.AfterFunc(c.opts.RequestTimeout, cancel)
	defer idle.Stop()
	resp, err := c.Session().HTTPClient().Do(req)
	if err != nil {
		return false, classifyTransport(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		return false, c.responseError(resp)
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt != "text/event-stream" {
		// PA-7.6-02: the Company doesn't stream; long-poll from now on.
		idle.Stop()
		r.stream = false
		p, err := c.decodePage(resp)
		if err != nil {
			return false, err
		}
		return r.takePage(ctx, p, cursor, false)
	}
	r.streamed = true
	idle.Reset(c.opts.StreamIdleTimeout)
	body := &streamBody{ctx: ctx, rd: r, r: resp.Body, t: idle, d: c.opts.StreamIdleTimeout}
	events := newSSEReader(body, c.opts.MaxEventBytes)
	for {
		sev, err := events.next()
		if r.saveErr != nil {
			return false, r.saveErr
		}
		if errors.Is(err, errEventTooLarge) {
			return false, protocolError("a streamed event exceeds %d bytes", c.opts.MaxEventBytes)
		}
		if err != nil {
			break // the end of the stream, or a cut: reconnect
		}
		if sev.typ == "text-delta" {
			// PA-7.6-07: a piece is shown, never acted on; it has no ID
			// and moves neither the cursor nor Last-Event-ID, whatever
			// SSE id it came with.
			d, err := parseDelta(sev.data)
			if err != nil {
				return false, err
			}
			c.mu.Lock()
			complete := c.seenMsgs.has(d.MessageID)
			c.mu.Unlock()
			if complete {
				continue // the message came in full before: its pieces are moot
			}
			if r.deltas == nil {
				r.deltas = map[string]bool{}
			}
			if len(r.deltas) < 256 {
				r.deltas[d.MessageID] = true
			}
			if !r.emit(ctx, Event{Type: EventTextDelta, Delta: d}) {
				return true, nil
			}
			continue
		}
		if len(bytes.TrimSpace(sev.data)) == 0 {
			continue // an empty frame carries nothing
		}
		ev, err := c.parseEvent(sev.data)
		if err != nil {
			return false, err
		}
		isNew, err := r.deliver(ctx, ev)
		if err != nil {
			return false, err
		}
		if !isNew {
			continue
		}
		if ev.Type == EventState && ev.Status == StatusClosed {
			r.dropPartials(ctx)
			return !r.stopped, nil // PA-7.12-02
		}
		if r.untilIdle && ev.Type == EventState && ev.Status != StatusWorking {
			r.dropPartials(ctx)
			return !r.stopped, nil // PA-7.7-02: the turn is over
		}
	}
	if r.saveErr != nil {
		return false, r.saveErr
	}
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	if !r.dropPartials(ctx) {
		return true, nil
	}
	return false, nil // reconnect, when pace says
}

// dropPartials voids the pieces of messages not received in full
// (PA-7.6-08); false when the loop body broke.
func (r *reader) dropPartials(ctx context.Context) bool {
	for id := range r.deltas {
		delete(r.deltas, id)
		if !r.emit(ctx, Event{Type: EventPartialDropped, Delta: &TextDelta{MessageID: id}}) {
			return false
		}
	}
	return true
}

// streamBody is a stream's body. When the SSE parser asks it for more
// bytes, every event received in full was handled, and the stream may now
// wait: the end of a burst, where the cursor is saved (burstEnd). Every
// read resets the idle watchdog.
type streamBody struct {
	ctx context.Context
	rd  *reader
	r   interface{ Read([]byte) (int, error) }
	t   *time.Timer
	d   time.Duration
}

func (b *streamBody) Read(p []byte) (int, error) {
	wait, err := b.rd.burstEnd(b.ctx)
	if err != nil {
		return 0, err
	}
	b.t.Reset(b.d)
	n, err := b.r.Read(p)
	b.t.Reset(b.d)
	if wait != nil {
		if err := wait(); err != nil {
			b.rd.saveErr = err
			return 0, err
		}
	}
	return n, err
}

// burstGap is the least time between the checkpoints at the ends of a
// stream's bursts, so that a stream whose bytes come in small pieces
// doesn't pay a keystore write for each.
const burstGap = 20 * time.Millisecond

// burstEnd is called before a stream reads more bytes. The cursor is saved
// now if the last save is burstGap old; otherwise burstGap after the last
// save, should the read still be waiting then: a stream that falls silent
// has its cursor saved within burstGap. wait, when not nil, must be called
// once the read returned.
func (r *reader) burstEnd(ctx context.Context) (wait func() error, err error) {
	if r.unsaved == 0 && !r.dirty {
		return nil, nil
	}
	since := r.c.clock.Now().Sub(r.lastSave)
	if since >= burstGap {
		if err := r.checkpoint(ctx, true); err != nil {
			r.saveErr = err
			return nil, err
		}
		return nil, nil
	}
	done := make(chan error, 1)
	t := time.AfterFunc(burstGap-since, func() { done <- r.c.save(ctx) })
	return func() error {
		if t.Stop() {
			return nil // bytes came first: the events stay unsaved for now
		}
		// Saved while the read waited; nothing was handled meanwhile.
		if err := <-done; err != nil {
			return err
		}
		r.unsaved, r.dirty, r.lastSave = 0, false, r.c.clock.Now()
		return nil
	}, nil
}

// wireEvent is an event as the Company sends it.
type wireEvent struct {
	ID             string        `json:"id"`
	Type           string        `json:"type"`
	CreatedAt      string        `json:"created_at"`
	Message        *wireReceived `json:"message"`
	Status         string        `json:"status"`
	Responder      string        `json:"responder"`
	Error          string        `json:"error"`
	Scope          string        `json:"scope"`
	Reason         string        `json:"reason"`
	ConversationID string        `json:"conversation_id"`
}

type wireReceived struct {
	ID        string          `json:"id"`
	Role      string          `json:"role"`
	Sender    string          `json:"sender"`
	Text      string          `json:"text"`
	Data      json.RawMessage `json:"data"`
	Operation json.RawMessage `json:"operation"`
}

// readOperation reads the operation of message id (OPS 4.3) and hands it
// to the conversation's operations Client, if any.
func (c *Conversation) readOperation(id string, raw json.RawMessage) (*operations.Operation, error) {
	op, err := operations.Parse(raw)
	if oc := c.operations(); err == nil && oc != nil {
		op, err = oc.Observe(op, operations.ConversationAction())
	}
	if err != nil {
		c.log.Warn("conversation: a message's operation was not taken", "conversation_id", c.id, "message_id", id, "error", err)
		return nil, fmt.Errorf("conversation: the operation of message %s: %w", clip(id), err)
	}
	return op, nil
}

// parseEvent decodes and checks one event (spec 7.5).
func (c *Conversation) parseEvent(raw []byte) (Event, error) {
	var w wireEvent
	if !decodeEventJSON(raw, &w) {
		slow := new(wireEvent) // of its own, so that w stays on the stack
		if err := json.Unmarshal(raw, slow); err != nil {
			return Event{}, protocolError("an event is not a JSON object")
		}
		w = *slow
	}
	if !validID(w.ID) {
		return Event{}, protocolError("event id %q breaks the ID rules", clip(w.ID))
	}
	if w.Type == "" {
		return Event{}, protocolError("event %s has no type", w.ID)
	}
	ev := Event{ID: w.ID, Type: EventType(w.Type), Raw: json.RawMessage(append([]byte(nil), raw...))}
	if w.CreatedAt != "" {
		t, err := time.Parse(time.RFC3339Nano, w.CreatedAt)
		if err != nil {
			return Event{}, protocolError("event %s: created_at is not RFC 3339", w.ID)
		}
		ev.CreatedAt = t
	}
	switch ev.Type {
	case EventMessage:
		m := w.Message
		if m == nil || !validID(m.ID) || (m.Role != "user" && m.Role != "company") || (m.Sender != "agent" && m.Sender != "human") {
			return Event{}, protocolError("event %s: the message needs an id, a role and a sender", w.ID)
		}
		rm := &ReceivedMessage{ID: m.ID, Role: Role(m.Role), Sender: Sender(m.Sender), Text: cleanText(m.Text)}
		if len(m.Data) > 0 && string(m.Data) != "null" {
			if m.Data[0] != '{' {
				return Event{}, protocolError("event %s: data is not a JSON object", w.ID)
			}
			rm.Data = m.Data
		}
		if c.ops && len(m.Operation) > 0 && string(m.Operation) != "null" {
			rm.Operation, rm.OperationError = c.readOperation(m.ID, m.Operation)
		}
		ev.Message = rm
	case EventState:
		if w.Status == "" || w.Responder == "" {
			return Event{}, protocolError("state event %s needs status and responder", w.ID)
		}
		ev.Status, ev.Responder = Status(w.Status), Responder(w.Responder)
	case EventAuthorization:
		if w.Error != "sign_in_required" && w.Error != "insufficient_scope" {
			return Event{}, protocolError("authorization event %s: error %q", w.ID, clip(w.Error))
		}
		pe := &poppy.Error{Endpoint: c.endpoint + "/" + c.id, Status: http.StatusForbidden, Code: w.Error, Scope: strings.Fields(cleanText(w.Scope))}
		if s := c.Session(); s != nil {
			if pe.Code == "sign_in_required" {
				pe.SignInTypes = s.Company().SignInTypes()
			} else {
				pe.SignInTypes = s.Company().EligibleSignInTypes(pe.Scope)
			}
		}
		ev.Authorization = pe
	case EventUserRequested:
		ev.Reason = cleanText(w.Reason)
	case EventDirectOpened, EventDirectClosed:
		if !validID(w.ConversationID) {
			return Event{}, protocolError("event %s: conversation_id %q breaks the ID rules", w.ID, clip(w.ConversationID))
		}
		ev.ConversationID = w.ConversationID
	}
	return ev, nil
}

func parseDelta(data []byte) (*TextDelta, error) {
	var id, text string
	if !decodeDeltaJSON(data, &id, &text) {
		var d struct {
			MessageID string `json:"message_id"`
			Text      string `json:"text"`
		}
		if json.Unmarshal(data, &d) != nil {
			return nil, protocolError("a text-delta needs a message_id and text")
		}
		id, text = d.MessageID, d.Text
	}
	if !validID(id) {
		return nil, protocolError("a text-delta needs a message_id and text")
	}
	return &TextDelta{MessageID: id, Text: cleanText(text)}, nil
}

// cleanText makes a Company's text fit for a person or a model
// (internal/companytext): nothing that could drive a terminal or reorder
// or hide text.
func cleanText(s string) string { return companytext.Text(s, 0) }

// idRing remembers the last n event IDs handled. It grows as IDs
// come: an idle conversation costs nothing.
type idRing struct {
	n    int
	set  map[string]struct{}
	ring []string
	next int
}

func newIDRing(n int) *idRing { return &idRing{n: n} }

func (r *idRing) has(id string) bool {
	_, ok := r.set[id]
	return ok
}

// tail returns the last n IDs added (fewer if fewer were), oldest first.
func (r *idRing) tail(n int) []string {
	k := len(r.ring)
	n = min(n, k)
	out := make([]string, 0, n)
	for i := k - n; i < k; i++ {
		if k < r.n {
			out = append(out, r.ring[i])
		} else {
			out = append(out, r.ring[(r.next+i)%k])
		}
	}
	return out
}

func (r *idRing) add(id string) {
	if r.has(id) {
		return
	}
	if r.set == nil {
		r.set = map[string]struct{}{}
	}
	if len(r.ring) < r.n {
		r.ring = append(r.ring, id)
	} else {
		delete(r.set, r.ring[r.next])
		r.ring[r.next] = id
		r.next = (r.next + 1) % r.n
	}
	r.set[id] = struct{}{}
}
