package conversation

// Decoding events and pages in one pass over their bytes.
//
// Turning each event into a Go value was most of the reader's work, and
// encoding/json reads an event twice (it checks the whole input, then
// decodes it by reflection). decodeEvent and decodePage read the form a
// Company sends, once: an object whose keys are the spec's names, each
// once, with values of the spec's types. Every byte is still checked
// (RFC 8259); nothing is taken that encoding/json would refuse. Anything
// else (a key escaped or in another case, a key twice, a value of another
// type, a string with escapes or bytes that are not UTF-8, deep nesting,
// invalid JSON) is not decided here: json.Unmarshal decodes it, as before,
// with its errors and its readings. So the result is always
// json.Unmarshal's (FuzzDecodeEventJSON, FuzzDecodePageJSON and
// FuzzDecodeDeltaJSON check it).

import (
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// jsonScan reads JSON from b at i.
type jsonScan struct {
	b []byte
	i int
}

// maxFastDepth is the deepest nesting decodeEvent skips itself;
// json.Unmarshal decides deeper values (its own limit is 10,000).
const maxFastDepth = 64

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func (s *jsonScan) ws() {
	for s.i < len(s.b) && isSpace(s.b[s.i]) {
		s.i++
	}
}

// peek returns the next byte after white space, or 0 at the end.
func (s *jsonScan) peek() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// str reads a string at s.i (its opening quote). plain reports that it
// has no escape and is valid UTF-8: its bytes are its value. ok is false
// for an invalid string.
func (s *jsonScan) str() (raw []byte, plain, ok bool) {
	b, i := s.b, s.i+1
	start, plain, high := i, true, false
	for i < len(b) {
		c := b[i]
		switch {
		case c == '"':
			raw = b[start:i]
			s.i = i + 1
			if high && !utf8.Valid(raw) {
				plain = false // encoding/json puts U+FFFD for bytes that are not UTF-8
			}
			return raw, plain, true
		case c == '\\':
			plain = false
			if i+1 >= len(b) {
				return nil, false, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) || !isHex(b[i+5]) {
					return nil, false, false
				}
				i += 6
			default:
				return nil, false, false
			}
			continue
		case c < 0x20:
			return nil, false, false
		case c >= 0x80:
			high = true
		}
		i++
	}
	return nil, false, false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// skip reads any value at s.i, checking it; false for invalid JSON or
// nesting deeper than maxFastDepth.
func (s *jsonScan) skip(depth int) bool {
	switch s.peek() {
	case '"':
		_, _, ok := s.str()
		return ok
	case '{':
		if depth >= maxFastDepth {
			return false
		}
		s.i++
		if s.peek() == '}' {
			s.i++
			return true
		}
		for {
			if s.peek() != '"' {
				return false
			}
			if _, _, ok := s.str(); !ok || s.peek() != ':' {
				return false
			}
			s.i++
			if !s.skip(depth + 1) {
				return false
			}
			switch s.peek() {
			case ',':
				s.i++
			case '}':
				s.i++
				return true
			default:
				return false
			}
		}
	case '[':
		if depth >= maxFastDepth {
			return false
		}
		s.i++
		if s.peek() == ']' {
			s.i++
			return true
		}
		for {
			if !s.skip(depth + 1) {
				return false
			}
			switch s.peek() {
			case ',':
				s.i++
			case ']':
				s.i++
				return true
			default:
				return false
			}
		}
	case 't':
		return s.lit("true")
	case 'f':
		return s.lit("false")
	case 'n':
		return s.lit("null")
	default:
		return s.num()
	}
}

func (s *jsonScan) lit(w string) bool {
	if !strings.HasPrefix(string(s.b[s.i:min(s.i+len(w), len(s.b))]), w) {
		return false
	}
	s.i += len(w)
	return true
}

// num reads a number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *jsonScan) num() bool {
	b, i := s.b, s.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || !isDigit(b[i]) {
			return false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	s.i = i
	return true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// object reads an object at s.i: for each key that is names[i], field(i)
// reads its value (s.i at it) and reports whether it could; other keys'
// values are skipped (unknown). It gives up (false) on invalid JSON, an
// escaped key, a key twice (encoding/json merges or overwrites: its
// readings are its own) and a key field gives up on.
func (s *jsonScan) object(names []string, field func(i int) bool) bool {
	if s.peek() != '{' {
		return false
	}
	s.i++
	var seen uint64
	for first := true; ; first = false {
		c := s.peek()
		switch {
		case c == '}' && first:
			s.i++
			return true
		case first:
		case c == ',':
			s.i++
			c = s.peek()
		case c == '}':
			s.i++
			return true
		default:
			return false
		}
		if c != '"' {
			return false
		}
		key, plain, ok := s.str()
		if !ok || !plain || s.peek() != ':' {
			return false
		}
		s.i++
		s.ws()
		i := -1
		for j, n := range names {
			if string(key) == n {
				i = j
				break
			}
		}
		switch {
		case i < 0:
			ok = s.unknown(key, names)
		case seen&(1<<i) != 0:
			return false
		default:
			seen |= 1 << i
			ok = field(i)
		}
		if !ok {
			return false
		}
	}
}

// unknown skips the value of key, which is none of names: false if
// encoding/json would take key for one of them (in another case), or the
// value is invalid.
func (s *jsonScan) unknown(key []byte, names []string) bool {
	for _, n := range names {
		if strings.EqualFold(string(key), n) {
			return false
		}
	}
	return s.skip(1)
}

// strField reads a string value into *v: null leaves it, as
// encoding/json does; a string with escapes or bytes that are not UTF-8 is
// decoded by encoding/json; any other type gives up.
func (s *jsonScan) strField(v *string) bool {
	switch s.peek() {
	case 'n':
		return s.lit("null")
	case '"':
		start := s.i
		raw, plain, ok := s.str()
		if !ok {
			return false
		}
		if plain {
			*v = internString(raw)
			return true
		}
		// Into a string of its own, so that v does not escape.
		var t string
		if json.Unmarshal(s.b[start:s.i], &t) != nil {
			return false
		}
		*v = t
		return true
	}
	return false
}

// internString returns the value of a few strings every event repeats
// (types, states) without a copy, and a copy of any other.
func internString(b []byte) string {
	switch string(b) {
	case "message":
		return "message"
	case "state":
		return "state"
	case "user_requested":
		return "user_requested"
	case "authorization":
		return "authorization"
	case "idle":
		return "idle"
	case "working":
		return "working"
	case "queued":
		return "queued"
	case "closed":
		return "closed"
	case "agent":
		return "agent"
	case "human":
		return "human"
	case "company":
		return "company"
	case "user":
		return "user"
	}
	return string(b)
}

// rawField reads any value into *v as json.RawMessage does: a copy of
// its bytes.
func (s *jsonScan) rawField(v *json.RawMessage) bool {
	start := s.i
	if !s.skip(1) {
		return false
	}
	*v = append(json.RawMessage(nil), s.b[start:s.i]...)
	return true
}

// end checks that nothing but white space follows the value.
func (s *jsonScan) end() bool {
	s.ws()
	return s.i == len(s.b)
}

var (
	eventNames   = []string{"id", "type", "created_at", "message", "status", "responder", "error", "scope", "reason", "conversation_id"}
	messageNames = []string{"id", "role", "sender", "text", "data", "operation"}
	pageNames    = []string{"conversation_id", "events", "cursor", "has_more", "status", "responder"}
	deltaNames   = []string{"message_id", "text"}
)

// decodeEventJSON decodes raw into w (zero) as json.Unmarshal would;
// false when it leaves the decision to json.Unmarshal (see the file's
// comment), w then in any state.
func decodeEventJSON(raw []byte, w *wireEvent) bool {
	s := jsonScan{b: raw}
	return s.object(eventNames, func(i int) bool {
		switch eventNames[i] {
		case "id":
			return s.strField(&w.ID)
		case "type":
			return s.strField(&w.Type)
		case "created_at":
			return s.strField(&w.CreatedAt)
		case "status":
			return s.strField(&w.Status)
		case "responder":
			return s.strField(&w.Responder)
		case "error":
			return s.strField(&w.Error)
		case "scope":
			return s.strField(&w.Scope)
		case "reason":
			return s.strField(&w.Reason)
		case "conversation_id":
			return s.strField(&w.ConversationID)
		}
		return s.message(&w.Message)
	}) && s.end()
}

// message reads an event's message: null, or an object.
func (s *jsonScan) message(mp **wireReceived) bool {
	if s.peek() == 'n' {
		return s.lit("null")
	}
	m := &wireReceived{}
	*mp = m
	return s.object(messageNames, func(i int) bool {
		switch messageNames[i] {
		case "id":
			return s.strField(&m.ID)
		case "role":
			return s.strField(&m.Role)
		case "sender":
			return s.strField(&m.Sender)
		case "text":
			return s.strField(&m.Text)
		case "data":
			return s.rawField(&m.Data)
		}
		return s.rawField(&m.Operation)
	})
}

// decodePageJSON decodes a JSON events read into p (zero) as
// json.Unmarshal would, but for its events, which share b's bytes; false
// when it leaves the decision to json.Unmarshal.
func decodePageJSON(b []byte, p *page) bool {
	s := jsonScan{b: b}
	return s.object(pageNames, func(i int) bool {
		switch pageNames[i] {
		case "conversation_id":
			return s.strField(&p.ConversationID)
		case "status":
			return s.strField(&p.Status)
		case "responder":
			return s.strField(&p.Responder)
		case "cursor":
			return s.cursor(&p.Cursor)
		case "has_more":
			return s.boolPtr(&p.HasMore)
		}
		return s.events(&p.Events)
	}) && s.end()
}

// cursor reads a page's cursor: null (nil) or a string.
func (s *jsonScan) cursor(cp **string) bool {
	if s.peek() == 'n' {
		return s.lit("null")
	}
	var c string
	if !s.strField(&c) {
		return false
	}
	*cp = &c
	return true
}

// boolPtr reads null (nil) or a boolean.
func (s *jsonScan) boolPtr(bp **bool) bool {
	var v bool
	switch s.peek() {
	case 'n':
		return s.lit("null")
	case 't':
		v = true
		if !s.lit("true") {
			return false
		}
	case 'f':
		if !s.lit("false") {
			return false
		}
	default:
		return false
	}
	*bp = &v
	return true
}

// events reads a page's events: null (nil) or an array of any values,
// each sharing s.b's bytes.
func (s *jsonScan) events(ep *[]json.RawMessage) bool {
	switch s.peek() {
	case 'n':
		return s.lit("null")
	case '[':
	default:
		return false
	}
	s.i++
	evs := []json.RawMessage{}
	if s.peek() == ']' {
		s.i++
		*ep = evs
		return true
	}
	for {
		s.ws()
		start := s.i
		if !s.skip(1) {
			return false
		}
		evs = append(evs, s.b[start:s.i:s.i])
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			*ep = evs
			return true
		default:
			return false
		}
	}
}

// decodeDeltaJSON decodes a text-delta's data into message_id and text as
// json.Unmarshal would; false when it leaves the decision to it.
func decodeDeltaJSON(b []byte, id, text *string) bool {
	s := jsonScan{b: b}
	return s.object(deltaNames, func(i int) bool {
		if i == 0 {
			return s.strField(id)
		}
		return s.strField(text)
	}) && s.end()
}
