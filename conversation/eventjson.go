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

// open reads the '{' of an object. Then key returns its keys one by one,
// first true for the first, with s.i at the key's value, which the caller
// reads; end is true after the closing '}'. A key is returned plain
// (unescaped, valid UTF-8): ok is false for an escaped key, or invalid
// JSON.
func (s *jsonScan) open() bool {
	if s.peek() != '{' {
		return false
	}
	s.i++
	return true
}

func (s *jsonScan) key(first bool) (key []byte, end, ok bool) {
	c := s.peek()
	switch {
	case c == '}' && first:
		s.i++
		return nil, true, true
	case first:
	case c == ',':
		s.i++
		c = s.peek()
	case c == '}':
		s.i++
		return nil, true, true
	default:
		return nil, false, false
	}
	if c != '"' {
		return nil, false, false
	}
	key, plain, ok := s.str()
	if !ok || !plain || s.peek() != ':' {
		return nil, false, false
	}
	s.i++
	s.ws()
	return key, false, true
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

// strField reads a string value into *v, once (seen is the field's bit in
// *set): null leaves it, as encoding/json does; a string with escapes or
// bytes that are not UTF-8 is decoded by encoding/json; any other type
// gives up.
func (s *jsonScan) strField(v *string, set *uint32, bit uint32) bool {
	if *set&bit != 0 {
		return false // a key twice
	}
	*set |= bit
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

// rawField reads any value into *v as json.RawMessage does: its bytes,
// shared with s.b when share, else copied.
func (s *jsonScan) rawField(v *json.RawMessage, set *uint32, bit uint32, share bool) bool {
	if *set&bit != 0 {
		return false
	}
	*set |= bit
	start := s.i
	if !s.skip(1) {
		return false
	}
	if share {
		*v = s.b[start:s.i:s.i]
	} else {
		*v = append(json.RawMessage(nil), s.b[start:s.i]...)
	}
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
	if !s.open() {
		return false
	}
	var set uint32
	for first := true; ; first = false {
		key, end, ok := s.key(first)
		if !ok {
			return false
		}
		if end {
			return s.end()
		}
		switch string(key) {
		case "id":
			ok = s.strField(&w.ID, &set, 1<<0)
		case "type":
			ok = s.strField(&w.Type, &set, 1<<1)
		case "created_at":
			ok = s.strField(&w.CreatedAt, &set, 1<<2)
		case "status":
			ok = s.strField(&w.Status, &set, 1<<3)
		case "responder":
			ok = s.strField(&w.Responder, &set, 1<<4)
		case "error":
			ok = s.strField(&w.Error, &set, 1<<5)
		case "scope":
			ok = s.strField(&w.Scope, &set, 1<<6)
		case "reason":
			ok = s.strField(&w.Reason, &set, 1<<7)
		case "conversation_id":
			ok = s.strField(&w.ConversationID, &set, 1<<8)
		case "message":
			ok = set&(1<<9) == 0 && s.message(&w.Message)
			set |= 1 << 9
		default:
			ok = s.unknown(key, eventNames)
		}
		if !ok {
			return false
		}
	}
}

// message reads an event's message: null, or an object.
func (s *jsonScan) message(mp **wireReceived) bool {
	if s.peek() == 'n' {
		*mp = nil
		return s.lit("null")
	}
	if !s.open() {
		return false
	}
	m := &wireReceived{}
	*mp = m
	var set uint32
	for first := true; ; first = false {
		key, end, ok := s.key(first)
		if !ok {
			return false
		}
		if end {
			return true
		}
		switch string(key) {
		case "id":
			ok = s.strField(&m.ID, &set, 1<<0)
		case "role":
			ok = s.strField(&m.Role, &set, 1<<1)
		case "sender":
			ok = s.strField(&m.Sender, &set, 1<<2)
		case "text":
			ok = s.strField(&m.Text, &set, 1<<3)
		case "data":
			ok = s.rawField(&m.Data, &set, 1<<4, false)
		case "operation":
			ok = s.rawField(&m.Operation, &set, 1<<5, false)
		default:
			ok = s.unknown(key, messageNames)
		}
		if !ok {
			return false
		}
	}
}

// decodePageJSON decodes a JSON events read into p (zero) as
// json.Unmarshal would, but for its events, which share b's bytes; false
// when it leaves the decision to json.Unmarshal.
func decodePageJSON(b []byte, p *page) bool {
	s := jsonScan{b: b}
	if !s.open() {
		return false
	}
	var set uint32
	for first := true; ; first = false {
		key, end, ok := s.key(first)
		if !ok {
			return false
		}
		if end {
			return s.end()
		}
		switch string(key) {
		case "conversation_id":
			ok = s.strField(&p.ConversationID, &set, 1<<0)
		case "status":
			ok = s.strField(&p.Status, &set, 1<<1)
		case "responder":
			ok = s.strField(&p.Responder, &set, 1<<2)
		case "cursor":
			ok = set&(1<<3) == 0 && s.cursor(&p.Cursor)
			set |= 1 << 3
		case "has_more":
			ok = set&(1<<4) == 0 && s.boolPtr(&p.HasMore)
			set |= 1 << 4
		case "events":
			ok = set&(1<<5) == 0 && s.events(&p.Events)
			set |= 1 << 5
		default:
			ok = s.unknown(key, pageNames)
		}
		if !ok {
			return false
		}
	}
}

// cursor reads a page's cursor: null (nil) or a string.
func (s *jsonScan) cursor(cp **string) bool {
	if s.peek() == 'n' {
		return s.lit("null")
	}
	var c string
	var set uint32
	if !s.strField(&c, &set, 1) {
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
	if !s.open() {
		return false
	}
	var set uint32
	for first := true; ; first = false {
		key, end, ok := s.key(first)
		if !ok {
			return false
		}
		if end {
			return s.end()
		}
		switch string(key) {
		case "message_id":
			ok = s.strField(id, &set, 1<<0)
		case "text":
			ok = s.strField(text, &set, 1<<1)
		default:
			ok = s.unknown(key, deltaNames)
		}
		if !ok {
			return false
		}
	}
}
