// Package conversation talks with a Company Agent over the Personal Agent
// Protocol's own conversation protocol (spec 7): start a conversation,
// send messages, read its events by long poll or stream, hand off to a
// person, open a Direct Conversation for the User, sign in partway, close.
//
//	c, err := conversation.Start(ctx, sess, conversation.Text("The jacket from order #1042 isn't warm enough."), nil)
//	for ev, err := range c.Events(ctx, nil) { // a stream where the Company streams, long polls otherwise
//		if err != nil { ... }                  // a terminal error, yielded once
//		switch ev.Type {
//		case conversation.EventTextDelta:     // provisional: show it, never act on it
//		case conversation.EventMessage:       // ev.Message.Text, .Data, .Sender
//		case conversation.EventAuthorization: // sign in (package signin), then keep reading
//		}
//	}                                          // the cursor is saved after each event the body returns from
//	c.Send(ctx, conversation.Human("Medium, please."), nil)
//
// Every request goes through the Session's HTTP client (poppy.Session),
// so DPoP proofs, nonces, token renewal, a stored Account Token on
// sign_in_required, and 429 waits work as for any API call: a 429 is sent
// again at most three times, after Retry-After (PA-4.3-27..29). A POST
// whose outcome is unknown (no answer, 5xx) is sent again by the same
// policy, with the same ID and bytes: at most three times, after
// Retry-After or 1 s, 2 s, 4 s, never when Retry-After is longer than
// poppy.AgentOptions.MaxRetryWait. Then the call returns the Company's
// *poppy.Error in a *PendingError, and the message stays in the outbox
// for the next Send, Flush, Resume or Recover. A conversation
// is not tied to its Session or process: [Resume] continues it from any
// Session of the same agent and User (or account), in this process or
// another sharing the keystore.
//
// # What is kept, and the delivery guarantee
//
// Three kinds of keystore records make a conversation survive a crash or
// a move to another replica: the outbox (keystore.KindOutbox, one record
// per unacknowledged message, written before its first POST), the
// receipts of the messages the Company answered (one record per
// conversation, written before the answered message leaves the outbox)
// and the conversation record (keystore.KindCursor: endpoint, status,
// responder, open Direct Conversation, the cursor of the last event
// handled and the last 32 event IDs up to it, written by checkpoints after
// the loop body returned from the events they cover).
//
//   - Sending: a message is held by the Company exactly once. It is retried
//     with the same ID and the same bytes while the outcome is unknown, and
//     a process that crashed before the answer sends it again from the
//     outbox on Resume (or Recover, for a start). This holds whoever chose
//     the ID: see below for an app whose process may die during Send.
//   - Reading: within a process, each event is yielded once, in order.
//     Across a crash, the events handled since the last checkpoint are
//     yielded again, each with its ID, and never one the saved cursor
//     covers: handle events idempotently by Event.ID.
//
// # Exactly once when the SDK chooses the IDs
//
// An app that lets the SDK choose its message IDs (c.Send(ctx,
// conversation.Text(…), nil)) and dies during Send can't know by itself
// whether the message was written to the outbox: sending it again may send
// it twice, not sending it may lose it. The outbox knows. After a restart:
//
//	// 1. Send what is pending, starts included, each with its ID.
//	if _, err := conversation.Recover(ctx, sess, nil); err != nil { ... }
//	// 2. Every conversation the keystore knows, with what became of its messages.
//	convs, err := conversation.List(ctx, sess, nil)
//	sent, err := convs[0].Sent(ctx) // held, refused or pending, oldest first
//	// 3a. An app that sends its messages one after another: its first N
//	//     messages got through (the start is number 1), where
//	//     N := sent[len(sent)-1].N; go on with message N+1.
//	// 3b. Or by content: the message got through if
//	//     slices.ContainsFunc(sent, func(s conversation.SentMessage) bool { return s.Same(msg) }).
//
// A message that Sent lists is held, or pending and sent by Recover and
// Resume: never send it again. One it doesn't list was never written:
// send it. Sent keeps the last 64 answered messages of a conversation and
// the count of all of them. While the process lives, Send's error says the
// same: a *PendingError means the message is in the
// outbox; any other error means it is not. keystore/sqlitestore's
// TestCrashSDKChosenIDs (and keystore/pgstore's
// TestConversationCrashSDKChosenIDs, on PostgreSQL) kills such an app with SIGKILL 100 times (CONVERSATION_CRASH_KILLS=1000 for a
// longer run) and finds no message lost or held twice. An app that chooses
// its own IDs (Message.ID, unique for the User) can also simply send
// again with the same ID: the Company holds it once.
//
// The cursor is saved by checkpoints, as a Kafka consumer commits its
// offsets (EventsOptions.Checkpoint): after each JSON page; in a stream at
// the end of each burst, before it waits for more bytes (at most every
// 20 ms, so a stream that falls silent is saved within 20 ms); once
// Checkpoint.Events events are unsaved (default 256), or when an event
// returns Checkpoint.Interval (default 1 s) or more after the oldest
// unsaved one was handled; and whenever the loop returns, by a break, an
// error or a panic in its body. What a crash costs is the events handled
// since the last checkpoint, yielded again with their IDs, and the one in
// flight: at most 256 with the default policy. Checkpoint{Events: 1}
// makes it the event in flight alone, at one keystore write per event (on
// SQLite a few hundred events a second, against tens of thousands with
// the default: see docs/performance.md). Outbox records hold the message
// as sent; a store that seals only secret kinds keeps them in clear.
//
// # Reading a turn
//
// EventsOptions.UntilIdle returns once the Company's turn is over (status
// idle, queued or closed) and every event up to then was yielded,
// streaming where the Company streams, text-delta pieces included.
//
// Reads are paced by one rule, in both read modes: a read that brought no
// event not handled before is followed by a pause, counted from its
// start, of 250 ms doubling to 5 s while reads keep bringing nothing
// (ended at once by a message sent), whatever the Company answered: a
// long poll returned before its wait, a stream closed at once, a cursor
// that moved (even backwards, or to a value of its own) over events
// already handled, has_more, a refused cursor. A read that brought a new
// event is followed by the next at once, and so is each page of history
// a recovery from a refused cursor skips. A Company that keeps
// answering has_more without moving its cursor ends the loop with
// an ErrProtocol.
//
// # Decisions on the specification's open points
//
//   - A-22 (when a conversation "uses" the account): the SDK makes no
//     assumption; it keeps using whatever token the Session has and
//     reports sign_in_required (a *poppy.Error) when the Company refuses a
//     signed-out token on a conversation that used the account
//     (PA-7.11-05). It never starts a new conversation on its own.
//   - A-23 (same content): the SDK resends the exact bytes it first sent
//     (message and parent_conversation_id), so every reading of "same"
//     holds. wait and cursor are query parameters, outside the content. A
//     retry that asks for wait is answered as a read from the cursor.
//   - A-24 (wait on a POST): a query parameter in whole seconds (rounded
//     up, at most 300), with cursor when there is one; never SSE on a POST.
//     The reply's events come out of the next Events loop, each once.
//   - A-25 (cursor of an empty read without cursor): null, "" or a missing
//     member all mean "no cursor yet"; the SDK keeps the one it has.
//   - A-26 (how many handled IDs to remember): none are needed for the
//     guarantee, which goes by position: the events handled are those up
//     to the cursor, in the Company's order. An answer read from the
//     cursor that holds the cursor's event again starts after it, and a
//     read from the beginning yields nothing up to the cursor's
//     event, for any length of history. A ring of the last 1024 event IDs
//     (and message IDs, to void stale text-delta pieces) per Conversation
//     (Options.RememberEvents, about 100 KiB once full, nothing while
//     idle), seeded after a restart from the last 32 saved with the
//     cursor, catches what a stream replays before its Last-Event-ID,
//     where no answer can be looked ahead in.
//   - A-27 (SSE details): an ordinary event may carry any SSE event name
//     or none; its type and ID are read from the JSON data, never from the
//     SSE id (which, by the SSE rules, carries over to frames without one).
//     Only "event: text-delta" frames are pieces, and their SSE id, if
//     any, is ignored (PA-7.6-07). The first stream request of an Events
//     loop carries the saved cursor both as the cursor query and as
//     Last-Event-ID, the same ID, so that a Company resuming a stream from
//     either reads from it (spec 7.6 says a reconnect sends Last-Event-ID
//     "in place of cursor"; some Companies resume every stream from it
//     alone), and one that answers JSON reads from the query; every
//     reconnect sends Last-Event-ID alone, with no cursor query. A
//     stream that closes, is cut or sends nothing for
//     Options.StreamIdleTimeout is reconnected at once if it brought a
//     new event, else after the pause of a read that brought nothing
//     (above); errors come as the HTTP answer to the reconnect, retried
//     with capped, jittered backoff.
//   - A-28 (a Direct as a parent): whatever the Company answers
//     (conversation_not_found in poppytest) is returned as is.
//   - A-29 (closing twice, handoff while queued): Close and Handoff send
//     their request whatever the local status says, except that a
//     conversation known to be closed refuses Handoff and Send locally
//     with ErrConversationClosed.
//   - A-30 (malformed requests): refused before sending with typed errors
//     (an empty message, data not an object, a bad context or ID);
//     a Company's 400 invalid_request comes back as a *poppy.Error.
//   - A-31 (clearing a context field): not possible; Context sends only
//     the fields that are set, and the Company keeps the others.
//   - A-32 (invalid_cursor): as for cursor_expired, the conversation is
//     read from its beginning by JSON, yielding nothing until the cursor's
//     event, and from there on as usual; only cursor_expired also yields
//     EventHistoryGap. A history read to its end without that event no
//     longer holds it, nor (a Company drops its oldest events first)
//     anything before it: none of its events was handled, and all are
//     yielded. Nothing is saved meanwhile, so a crash scans again.
//
// Pacing and has_more (spec 7.5 says "when has_more is true, the
// Personal Agent reads again right away", and also lets a Company return
// a long poll sooner than its wait): a has_more answer that brought an
// event not handled before is read again at once (PA-7.5-07); one that
// brought none is paced like any read that brought nothing, since it told
// the User nothing and reading again at once could go on for ever. A
// Company that pages through new events is never slowed by this; one
// that answers "more" with nothing is read 250 ms, then 500 ms, up to 5 s
// apart, and after 5 such answers at the same cursor the loop ends
// (ErrProtocol). What is new is judged by event ID and position
// never by the cursor, which the SDK never compares (PA-7.5-05).
//
// Other choices: Company IDs are checked only against the alphabet and
// length of spec 7.2 (a bad one is ErrProtocol); Company text (messages,
// reasons, pieces, scopes) goes through the SDK's one cleaner of Company
// text, as everywhere else it reaches a person or a model: newlines and
// tabs stay, and every rune that could drive a terminal, reorder what is
// shown (U+202E and the other bidi controls) or hide text (tag
// characters, runs of variation selectors, invisible format characters)
// becomes U+FFFD; a message's "operation" (operations extension) is read
// only when the agent's identity lists that extension, into an
// *operations.Operation (ReceivedMessage.Operation), observed by
// Options.Operations when it is set, as an API answer's and a tool
// result's are. One answer to a POST carries at most Options.MaxAnswerEvents
// events (ErrTooManyEvents), and is handled in time linear in them.
// context.time_zone is checked against the names of the tz database the Go
// toolchain ships, so a host without zoneinfo (a scratch image) takes
// valid zones.
package conversation
