package conversation

import (
	"errors"
	"fmt"
	"strings"

	"github.com/poppyproto/poppy"
)

// Sentinel errors for the states callers branch on. A Company's
// conversation error (spec 7.13) is an [*Error] wrapping the Company's
// *poppy.Error: ask its Code (such as "conversation_not_found") of the
// *poppy.Error with errors.As, as for any Company's refusal; token errors
// (sign_in_required, insufficient_scope, ...) are the *poppy.Error alone.
// A message the outbox keeps is a [*PendingError].
var (
	// ErrNoConversationProtocol: the Company lists no protocol this SDK
	// speaks (PA-7.1-02). The error names what it offers.
	ErrNoConversationProtocol = errors.New("conversation: the Company offers no supported conversation protocol")

	// ErrConversationClosed: the conversation takes no more messages
	// (spec 7.12): the Company's conversation_closed, or a conversation
	// the SDK already knows is closed, refused before sending
	// (PA-7.7-04).
	ErrConversationClosed = errors.New("conversation: conversation_closed")

	// ErrProtocol: the Company's answer breaks the protocol (a bad ID, a
	// missing member, a body that isn't JSON, a cursor that does not
	// move).
	ErrProtocol = errors.New("conversation: the Company's answer breaks the protocol")

	// ErrTooManyEvents: an answer to a POST carried more events than
	// Options.MaxAnswerEvents. The message was taken; the events are read
	// by the next Events loop. It also matches ErrProtocol.
	ErrTooManyEvents = errors.New("conversation: the answer carries more events than Options.MaxAnswerEvents")
)

// Errors no caller branches on: each says what is wrong, and the tests
// match them (export_test.go).
var (
	// A message refused before sending (spec 7.4).
	errEmptyMessage   = errors.New("conversation: a message needs text, data or context")
	errInvalidData    = errors.New("conversation: data must be a JSON object")
	errInvalidContext = errors.New("conversation: invalid context")
	errMarkupInText   = errors.New("conversation: text holds JSON or markup; put structure in Data")
	errInvalidID      = errors.New("conversation: an ID must be 1 to 256 characters of A-Z a-z 0-9 - _")
	// errIDConflict: a message ID already pending in the outbox with
	// other content (PA-7.3-06).
	errIDConflict = errors.New("conversation: message_id_conflict")

	// errCursorStuck: the Company answered has_more: true several times
	// in a row without moving the cursor, so reading on would never end
	// (spec 7.5). The error also matches ErrProtocol.
	errCursorStuck = errors.New("conversation: the Company keeps saying it has more events without moving the cursor")
)

// spec713Codes are the conversation error codes of spec 7.13, which come
// back as an *Error.
var spec713Codes = map[string]bool{
	"conversation_not_found": true, codeClosed: true, "direct_conversation_open": true,
	"message_id_conflict": true, codeInvalidCursor: true, codeCursorExpired: true,
}

// The Company's conversation error codes (spec 7.13) that the SDK acts on.
const (
	codeClosed        = "conversation_closed"
	codeInvalidCursor = "invalid_cursor"
	codeCursorExpired = "cursor_expired"
)

// specCode returns the spec 7.13 code of the *Error in err's chain, "" if
// there is none.
func specCode(err error) string {
	if e := (*Error)(nil); errors.As(err, &e) {
		return e.Err.Code
	}
	return ""
}

// PendingError is the error of a Send, Start, Flush, Resume or Recover
// whose message was written to the outbox but not acknowledged: no
// answer came (network, ctx ended), or the Company answered 5xx or 429
// after the retries of the Session transport's policy (at most three,
// each after Retry-After up to AgentOptions.MaxRetryWait). The message
// stays in the outbox, and the next Send of the conversation, Flush,
// Resume or Recover sends it again with its ID and bytes, so the Company
// holds it once: don't send it again yourself. It matches Err (a
// *poppy.Error for the Company's 5xx or 429, a context error, a network
// error) with errors.Is and errors.As.
type PendingError struct {
	// MessageID is the pending message: the one Send or Start was
	// given, or for Flush, Resume and Recover the first one not sent.
	MessageID string
	// Err is why it was not acknowledged.
	Err error
}

// Error names the message and why it is pending.
func (e *PendingError) Error() string {
	s := e.Err.Error()
	if !strings.HasPrefix(s, "conversation: ") {
		s = "conversation: " + s
	}
	return s + " (message " + e.MessageID + " stays in the outbox)"
}

// Unwrap returns Err.
func (e *PendingError) Unwrap() error { return e.Err }

// Error is a conversation error from the Company (spec 7.13).
type Error struct {
	// Err is the Company's answer: status, code, description.
	Err *poppy.Error
	// ConversationID names the open Direct Conversation of a
	// direct_conversation_open error (PA-7.10-03, PA-7.10-07).
	ConversationID string
}

// Error describes the error, naming the open Direct Conversation if any.
func (e *Error) Error() string {
	s := "conversation: " + e.Err.Error()
	if e.ConversationID != "" {
		s += fmt.Sprintf(" (open Direct Conversation %s)", e.ConversationID)
	}
	return s
}

// Unwrap returns the *poppy.Error.
func (e *Error) Unwrap() error { return e.Err }

// Is matches ErrConversationClosed for the Company's conversation_closed.
func (e *Error) Is(target error) bool {
	return target == ErrConversationClosed && e.Err.Code == codeClosed
}

func protocolError(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrProtocol}, args...)...)
}
