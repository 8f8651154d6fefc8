package conversation

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"golang.org/x/text/language"

	"github.com/poppyproto/poppy/internal/markup"
	"github.com/poppyproto/poppy/internal/tzname"
)

// Sender says who wrote a message (spec 7.8).
type Sender string

// The senders.
const (
	SenderAgent Sender = "agent" // the Personal Agent (or the Company Agent) wrote it
	SenderHuman Sender = "human" // a person wrote it: the User, or a person at the Company
)

// Role says which side a message came from; the Company sets it (spec 7.5).
type Role string

// The roles.
const (
	RoleUser    Role = "user"    // the Personal Agent's side
	RoleCompany Role = "company" // the Company's side
)

// Message is a message the Personal Agent sends (spec 7.4). It needs at
// least one of Text, Data or Context. Its sender is "agent" unless it was
// made by [Human]: a composite literal, [Text] and [Data] are the Personal
// Agent's own words (PA-7.8-02).
type Message struct {
	// ID is the message's ID, unique for the User (spec 7.3). Empty means
	// the SDK chooses one: "msg_" and 128 random bits, base64url.
	ID string
	// Text is the message in natural language, without JSON or other
	// markup (spec 7.4).
	Text string
	// Data is a JSON object for structured details: a map, a struct, or a
	// json.RawMessage holding an object. Anything that doesn't encode to a
	// JSON object is refused before sending (PA-7.4-03).
	Data any
	// Context carries facts about the User's situation (spec 7.4).
	Context *Context

	human bool
}

// Text returns a message of the Personal Agent's own words (sender
// "agent").
func Text(text string) Message { return Message{Text: text} }

// Data returns a message of the Personal Agent with text and structured
// data (sender "agent").
func Data(text string, data any) Message { return Message{Text: text, Data: data} }

// Human returns a message carrying the User's own words, exactly as the
// User wrote them: its sender is "human" (spec 7.8). Never use it for a
// summary, paraphrase or translation of what the User said, nor for text a
// model wrote: those are the Personal Agent's words, [Text].
func Human(words string) Message { return Message{Text: words, human: true} }

// UpdateContext returns a message that only updates the context: fields it
// leaves out keep their previous values at the Company (spec 7.4,
// PA-7.4-10).
func UpdateContext(c Context) Message { return Message{Context: &c} }

// Sender returns the message's sender.
func (m Message) Sender() Sender {
	if m.human {
		return SenderHuman
	}
	return SenderAgent
}

// Context holds facts about the User's situation (spec 7.4). Only what is
// set is sent; the SDK never fills in a field by itself (PA-7.4-09).
type Context struct {
	// Locale is an RFC 5646 language tag such as "en-US", sent as given.
	Locale string
	// TimeZone is an IANA time zone name such as "America/Los_Angeles".
	TimeZone string
	// UserAvailable, when set, says whether the User can answer questions
	// right now.
	UserAvailable *bool
	// Extra holds other fields, such as accessibility needs or preferred
	// units (PA-7.4-08). They may not reuse the three names above.
	Extra map[string]any
}

// Available returns a *bool for Context.UserAvailable.
func Available(b bool) *bool { return &b }

var tagChars = regexp.MustCompile(`^[A-Za-z0-9]+(-[A-Za-z0-9]+)*$`)

// validLocale reports whether l is a valid RFC 5646 language tag.
func validLocale(l string) bool {
	if len(l) > 64 || !tagChars.MatchString(l) {
		return false
	}
	_, err := language.Parse(l)
	return err == nil
}

// validTimeZone reports whether tz is an IANA time zone name, without the
// host's zoneinfo, which a scratch or distroless image lacks (PA-7.4-06).
func validTimeZone(tz string) bool { return tzname.Valid(tz) }

func (c *Context) encode() (map[string]any, error) {
	out := map[string]any{}
	for k, v := range c.Extra {
		if k == "locale" || k == "time_zone" || k == "user_available" {
			return nil, fmt.Errorf("%w: Extra may not set %q; use the field", errInvalidContext, k)
		}
		out[k] = v
	}
	if c.Locale != "" {
		if !validLocale(c.Locale) {
			return nil, fmt.Errorf("%w: locale %q is not an RFC 5646 language tag", errInvalidContext, c.Locale) // PA-7.4-05
		}
		out["locale"] = c.Locale
	}
	if c.TimeZone != "" {
		if !validTimeZone(c.TimeZone) {
			return nil, fmt.Errorf("%w: time_zone %q is not an IANA time zone name", errInvalidContext, c.TimeZone) // PA-7.4-06
		}
		out["time_zone"] = c.TimeZone
	}
	if c.UserAvailable != nil {
		out["user_available"] = *c.UserAvailable // PA-7.4-07: a JSON boolean
	}
	return out, nil
}

// wireMessage is a message as sent.
type wireMessage struct {
	ID      string          `json:"id"`
	Sender  Sender          `json:"sender"`
	Text    string          `json:"text,omitempty"`
	Data    json.RawMessage `json:"data,omitempty"`
	Context map[string]any  `json:"context,omitempty"`
}

// encode checks m and returns its wire form, choosing an ID if it has
// none. strict refuses markup in Text (PA-7.4-04); otherwise the caller
// gets hasMarkup=true to warn about.
func (m Message) encode(strict bool) (w wireMessage, hasMarkup bool, err error) {
	w.ID, w.Sender, w.Text = m.ID, m.Sender(), m.Text
	if w.ID == "" {
		w.ID = NewMessageID()
	} else if !validID(w.ID) {
		return w, false, fmt.Errorf("%w: message ID %q", errInvalidID, clip(w.ID))
	}
	if m.Data != nil {
		var b []byte
		if raw, ok := m.Data.(json.RawMessage); ok {
			b = raw
		} else if b, err = json.Marshal(m.Data); err != nil {
			return w, false, fmt.Errorf("%w: %v", errInvalidData, err)
		}
		var obj map[string]json.RawMessage
		if json.Unmarshal(b, &obj) != nil || obj == nil {
			return w, false, errInvalidData // PA-7.4-03
		}
		var cb bytes.Buffer
		if err := json.Compact(&cb, b); err != nil {
			return w, false, errInvalidData
		}
		w.Data = cb.Bytes()
	}
	if m.Context != nil {
		if w.Context, err = m.Context.encode(); err != nil {
			return w, false, err
		}
	}
	if w.Text == "" && w.Data == nil && len(w.Context) == 0 {
		return w, false, errEmptyMessage // PA-7.4-01
	}
	if markup.In(w.Text) {
		if strict {
			return w, true, errMarkupInText
		}
		hasMarkup = true
	}
	return w, hasMarkup, nil
}

// validID reports whether id follows spec 7.2: 1 to 256 characters of
// the URL-safe base64 alphabet, [A-Za-z0-9_-]. Nothing else is assumed
// about a Company's IDs (PA-7.2-04). A loop, not a regular expression:
// every event read checks one or more.
func validID(id string) bool {
	if len(id) == 0 || len(id) > 256 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// NewMessageID returns a fresh message ID: "msg_" and 128 random bits,
// base64url (PA-7.2-02, PA-7.2-03, PA-7.3-03).
func NewMessageID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return "msg_" + base64.RawURLEncoding.EncodeToString(b)
}

func clip(s string) string {
	s = strings.ToValidUTF8(s, "?")
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
