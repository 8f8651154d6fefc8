package conversation

import (
	"errors"
	"fmt"
	"strings"

	"github.com/poppyproto/poppy"
)

// Sentinel errors. A Company's conversation error (spec 7.13) is an
// [*Error], which matches the sentinel of its code with errors.Is and
// gives the [*poppy.Error] with errors.As; token errors (sign_in_required,
// insufficient_scope, ...) are *poppy.Error and match poppy's sentinels.
var (
	// ErrNoConversationProtocol: the Company lists no protocol this SDK
	// speaks (PA-7.1-02). The error names what it offers.
	ErrNoConversationProtocol = errors.New("conversation: the Company offers no supported conversation protocol")

	// The Company's conversation errors (spec 7.13), matched by an *Error
	// of their code.
	ErrConversationNotFound   = errors.New("conversation: conversation_not_found")
	ErrConversationClosed     = errors.New("conversation: conversation_closed")
	ErrDirectConversationOpen = errors.New("conversation: direct_conversation_open")
	ErrMessageIDConflict      = errors.New("conversation: message_id_conflict")
	ErrInvalidCursor          = errors.New("conversation: invalid_cursor")
	ErrCursorExpired          = errors.New("conversation: cursor_expired")

	// Refused before sending.
	ErrEmptyMessage   = errors.New("conversation: a message needs text, data or context")
	ErrInvalidData    = errors.New("conversation: data must be a JSON object")
	ErrInvalidContext = errors.New("conversation: invalid context")
	ErrMarkupInText   = errors.New("conversation: text holds JSON or markup; put structure in Data")
	ErrInvalidID      = errors.New("conversation: an ID must be 1 to 256 characters of A-Z a-z 0-9 - _")

	// ErrCursorStuck: the Company answered has_more: true several times
	// in a row without moving the cursor, so reading on would never end
	// (spec 7.5). The error also matches ErrProtocol.
	ErrCursorStuck = errors.New("conversation: the Company keeps saying it has more events without moving the cursor")

	// ErrProtocol: the Company's answer breaks the protocol (a bad ID, a
	// missing member, a body that isn't JSON).
	ErrProtocol = errors.New("conversation: the Company's answer breaks the protocol")

	// ErrTooManyEvents: an answer to a POST carried more events than
	// Options.MaxAnswerEvents. The message was taken; the events are read
	// by the next Events loop. It also matches ErrProtocol.
	ErrTooManyEvents = errors.New("conversation: the answer carries more events than Options.MaxAnswerEvents")

	// ErrMessagePending is matched by a [*PendingError]: the message is
	// in the outbox, and its outcome is not known yet.
	ErrMessagePending = errors.New("conversation: the message stays in the outbox")
)

// PendingError is the error of a Send, Start, Flush, Resume or Recover
// whose message was written to the outbox but not acknowledged: no
// answer came (network, ctx ended), or the Company answered 5xx or 429
// after the retries of the Session transport's policy (at most three,
// each after Retry-After up to AgentOptions.MaxRetryWait). The message
// stays in the outbox, and the next Send of the conversation, Flush,
// Resume or Recover sends it again with its ID and bytes, so the Company
// holds it once: don't send it again yourself. It matches
// ErrMessagePending, and Err (a *poppy.Error for the Company's 5xx or
// 429, a context error, a network error) with errors.Is and errors.As.
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

// Unwrap returns ErrMessagePending and Err.
func (e *PendingError) Unwrap() []error { return []error{ErrMessagePending, e.Err} }

var codeSentinels = map[string]error{
	"conversation_not_found":   ErrConversationNotFound,
	"conversation_closed":      ErrConversationClosed,
	"direct_conversation_open": ErrDirectConversationOpen,
	"message_id_conflict":      ErrMessageIDConflict,
	"invalid_cursor":           ErrInvalidCursor,
	"cursor_expired":           ErrCursorExpired,
}

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

// Is matches the sentinel of the error's code.
func (e *Error) Is(target error) bool {
	s, ok := codeSentinels[e.Err.Code]
	return ok && s == target
}

func protocolError(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrProtocol}, args...)...)
}
