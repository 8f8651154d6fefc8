package operations

// Reading terms (OPS 3, OPS 5.1).
//
// An operation's terms are read by one reader, readTerms, into one tree:
// the permission check compares that tree, the Approver is shown its
// canonical encoding, and the journal keeps the same bytes (Parse stores
// them in Operation.Terms, which the journal writes). The canonical
// encoding is the tree written back: members in the order the Company
// sent them, no white space, strings written with the fewest escapes that
// json.Marshal leaves as they are (quote, backslash, control characters,
// <, >, &, U+2028, U+2029), numbers as their literal. Any JSON parser
// reads it as the SDK does, since it has no duplicate names, no escaped
// surrogates and no number beyond the decimal grammar; and writing an
// Operation with json.Marshal (the journal does) keeps these very bytes.
//
// Terms that two readers can read differently have no canonical form and
// are marked with an *AmbiguousTermsError: a member name twice in one
// object at any depth (after unescaping: "a" and "\u0061" are one name),
// a number token outside the decimal grammar, invalid UTF-8 or an escaped
// lone surrogate (readers replace, reject or keep them), an escaped U+0000
// (where readers written in C end a string), nesting deeper
// than maxTermsDepth (some readers stop earlier), or two places whose
// names joined with "." are the same string ({"total": {"amount": …},
// "total.amount": …}), which a display that flattens paths shows as one.
// Such terms keep their bytes as sent (compacted); no standing permission
// ever covers them, and the Approver's request says why (Ambiguity).
//
// Paths are sequences of member names, never joined strings.
//
// The parser is written here, strict to RFC 8259, rather than
// encoding/json, which replaces invalid UTF-8 and lone surrogates without
// a word and keeps the last of two equal names. FuzzTermsReading checks it
// against encoding/json's tokenizer.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// AmbiguousTermsError says why an operation's terms can be read more than
// one way. No standing permission covers such terms (PA-OPS5-09): the
// User is asked, and ApprovalRequest.Ambiguity carries this error so that
// the User can be told that the Company's summary, its page and the terms
// may not say the same thing.
type AmbiguousTermsError struct {
	// Path is where the problem is, nil for the terms as a whole.
	Path Path
	// Reason is a short explanation, such as "the member name \"amount\"
	// appears twice".
	Reason string
}

func (e *AmbiguousTermsError) Error() string {
	if len(e.Path) == 0 {
		return "operations: the terms can be read more than one way: " + e.Reason
	}
	return fmt.Sprintf("operations: the terms can be read more than one way at %s: %s", clean(e.Path.String(), 200), e.Reason)
}

// Path is the place of a term: the member names from the top of the terms
// object down, such as Path{"price_difference", "amount"}. A name may hold
// any character, "." included: Path{"total.amount"} is one member, never
// total's amount.
type Path []string

// P returns the path of names: P("price_difference", "amount").
func P(names ...string) Path { return Path(slices.Clone(names)) }

// ParsePath reads a path as a person types it: names joined with "."
// ("price_difference.amount", each name non-empty and without "."), or a
// JSON Pointer (RFC 6901) for any other names ("/total.amount" is the one
// member "total.amount"; "~1" stands for "/" and "~0" for "~").
func ParsePath(s string) (Path, error) {
	if s == "" {
		return nil, errors.New("operations: empty path")
	}
	if s[0] == '/' {
		var p Path
		for _, seg := range strings.Split(s[1:], "/") {
			var b strings.Builder
			for i := 0; i < len(seg); i++ {
				if seg[i] != '~' {
					b.WriteByte(seg[i])
					continue
				}
				if i+1 == len(seg) || seg[i+1] != '0' && seg[i+1] != '1' {
					return nil, fmt.Errorf("operations: path %q: \"~\" must be followed by 0 or 1 (RFC 6901)", clean(s, 100))
				}
				b.WriteByte("~/"[seg[i+1]-'0'])
				i++
			}
			p = append(p, b.String())
		}
		return p, nil
	}
	p := Path(strings.Split(s, "."))
	if slices.Contains(p, "") {
		return nil, fmt.Errorf("operations: path %q has an empty name (write a JSON Pointer, \"/a/b\", for names with dots or empty names)", clean(s, 100))
	}
	return p, nil
}

// String writes the path as ParsePath reads it: names joined with "." when
// that reads back the same, else a JSON Pointer.
func (p Path) String() string {
	dotted := len(p) > 0 && !strings.HasPrefix(p[0], "/")
	for _, n := range p {
		if n == "" || strings.Contains(n, ".") {
			dotted = false
		}
	}
	if dotted {
		return strings.Join(p, ".")
	}
	var b strings.Builder
	for _, n := range p {
		b.WriteByte('/')
		b.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(n))
	}
	return b.String()
}

// Equal reports whether p and q name the same place.
func (p Path) Equal(q Path) bool { return slices.Equal(p, q) }

// within reports whether p is q or lies below it.
func (p Path) within(q Path) bool { return len(p) >= len(q) && slices.Equal(p[:len(q)], q) }

// MarshalJSON writes the path as an array of names.
func (p Path) MarshalJSON() ([]byte, error) {
	if p == nil {
		return []byte("[]"), nil
	}
	return json.Marshal([]string(p))
}

// UnmarshalJSON reads an array of names. A string is a path stored before
// paths were arrays: its names were joined with ".", so it is split at
// every "." and a name can't hold one; a string with an empty name is
// refused, which makes the permission holding it unreadable, and such a
// permission is never applied. So an old "total.amount" covers total's
// amount, never a member named "total.amount".
func (p *Path) UnmarshalJSON(b []byte) error {
	var names []string
	if err := json.Unmarshal(b, &names); err == nil {
		*p = names
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errors.New("operations: a path is an array of member names")
	}
	names = strings.Split(s, ".")
	if slices.Contains(names, "") {
		return fmt.Errorf("operations: stored path %q has an empty name", clean(s, 100))
	}
	*p = names
	return nil
}

// maxTermsDepth bounds the nesting of terms; deeper terms are ambiguous.
const maxTermsDepth = 64

// maxParseDepth is where reading stops: more objects and arrays, one in
// another, than encoding/json reads.
const maxParseDepth = 10000

// maxDecimalLen bounds a decimal number, as a string or a number.
const maxDecimalLen = 40

// value is one JSON value of a reading.
type value struct {
	kind  byte   // 'o' object, 'a' array, 's' string, 'n' number, 't' true, 'f' false, 'z' null
	s     string // a string's text, a number's literal
	names []string
	kids  []value // an object's member values (beside names), an array's elements
}

// get returns the member named name of an object.
func (v *value) get(name string) (*value, bool) {
	for i, n := range v.names {
		if n == name {
			return &v.kids[i], true
		}
	}
	return nil, false
}

// leaf reports whether v is a term of its own: anything but an object with
// members.
func (v *value) leaf() bool { return v.kind != 'o' || len(v.names) == 0 }

// reading is the one reading of an operation's terms.
type reading struct {
	root value
	// amb is why the terms can be read more than one way, nil if they
	// can't.
	amb *AmbiguousTermsError
}

// readTerms reads terms, which must be a JSON object. An error means they
// are not one; ambiguity is in the reading.
func readTerms(b []byte) (*reading, error) {
	if len(b) > maxTermsLen {
		return nil, errors.New("operations: terms too large")
	}
	v, amb, err := readValue(b)
	if err != nil {
		return nil, err
	}
	if v.kind != 'o' {
		return nil, errors.New("operations: the terms are not an object")
	}
	r := &reading{root: v, amb: amb}
	if r.amb == nil {
		r.amb = collisions(&r.root)
	}
	return r, nil
}

// readValue reads one JSON value, strictly.
func readValue(b []byte) (value, *AmbiguousTermsError, error) {
	p := &parser{b: b}
	p.space()
	v, err := p.value(0)
	if err != nil {
		return value{}, nil, err
	}
	p.space()
	if p.i != len(p.b) {
		return value{}, nil, p.errorf("data after the value")
	}
	return v, p.amb, nil
}

// lookup returns the value at path.
func (r *reading) lookup(path Path) (*value, bool) {
	cur := &r.root
	for _, n := range path {
		if cur.kind != 'o' {
			return nil, false
		}
		next, ok := cur.get(n)
		if !ok {
			return nil, false
		}
		cur = next
	}
	return cur, true
}

// leaves calls fn for every term of the reading: each value that is not an
// object with members, by path, in document order.
func (r *reading) leaves(fn func(Path, *value) bool) {
	var walk func(Path, *value) bool
	walk = func(p Path, v *value) bool {
		if v.leaf() {
			return fn(p, v)
		}
		for i, n := range v.names {
			if !walk(append(p[:len(p):len(p)], n), &v.kids[i]) {
				return false
			}
		}
		return true
	}
	if !r.root.leaf() {
		walk(nil, &r.root)
	}
}

// collisions finds two places whose segments (member names, and array
// indexes in decimal) joined with "." are one string.
func collisions(root *value) *AmbiguousTermsError {
	seen := map[string]bool{}
	var amb *AmbiguousTermsError
	var walk func(prefix string, p Path, v *value)
	walk = func(prefix string, p Path, v *value) {
		child := func(seg string, kp Path, kid *value) {
			key := seg
			if prefix != "" || len(p) > 0 {
				key = prefix + "." + seg
			}
			if seen[key] && amb == nil {
				amb = &AmbiguousTermsError{Path: kp, Reason: fmt.Sprintf("two places read %q when their names are joined with \".\"", clean(key, 100))}
			}
			seen[key] = true
			walk(key, kp, kid)
		}
		switch v.kind {
		case 'o':
			for i, n := range v.names {
				child(n, append(p[:len(p):len(p)], n), &v.kids[i])
			}
		case 'a':
			for i := range v.kids {
				child(strconv.Itoa(i), p, &v.kids[i])
			}
		}
	}
	walk("", nil, root)
	return amb
}

// encode appends the canonical encoding of v; sorted orders members by
// name (for comparing two readings).
func (v *value) encode(b []byte, sorted bool) []byte {
	switch v.kind {
	case 'o':
		idx := make([]int, len(v.names))
		for i := range idx {
			idx[i] = i
		}
		if sorted {
			slices.SortFunc(idx, func(i, j int) int { return strings.Compare(v.names[i], v.names[j]) })
		}
		b = append(b, '{')
		for k, i := range idx {
			if k > 0 {
				b = append(b, ',')
			}
			b = appendString(b, v.names[i])
			b = append(b, ':')
			b = v.kids[i].encode(b, sorted)
		}
		return append(b, '}')
	case 'a':
		b = append(b, '[')
		for i := range v.kids {
			if i > 0 {
				b = append(b, ',')
			}
			b = v.kids[i].encode(b, sorted)
		}
		return append(b, ']')
	case 's':
		return appendString(b, v.s)
	case 'n':
		return append(b, v.s...)
	case 't':
		return append(b, "true"...)
	case 'f':
		return append(b, "false"...)
	}
	return append(b, "null"...)
}

// appendString writes s (valid UTF-8) as a JSON string with the fewest
// escapes encoding/json leaves alone: quote, backslash, control
// characters, and the <, >, & and U+2028, U+2029 that json.Marshal
// escapes, so that the journal (and any json.Marshal of an Operation)
// keeps these very bytes.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == 0xE2 && i+2 < len(s) && s[i+1] == 0x80 && (s[i+2] == 0xA8 || s[i+2] == 0xA9) {
			b = append(b, '\\', 'u', '2', '0', '2', hex[s[i+2]&15])
			i += 2
			continue
		}
		switch {
		case c == '<' || c == '>' || c == '&':
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c == '\t':
			b = append(b, '\\', 't')
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// canonicalTerms returns the bytes to keep for terms: their canonical
// encoding, or, for terms that can be read more than one way, the bytes as
// sent, compacted. ok is false when the terms are not a JSON object.
func canonicalTerms(b []byte) (out json.RawMessage, ok bool) {
	r, err := readTerms(b)
	if err != nil {
		return nil, false
	}
	if r.amb != nil {
		return sentBytes(b), true
	}
	return r.root.encode(make([]byte, 0, len(b)), false), true
}

// sentBytes returns terms as sent, compacted and escaped as json.Marshal
// escapes them, so that the journal keeps these very bytes.
func sentBytes(b []byte) json.RawMessage {
	var buf bytes.Buffer
	json.HTMLEscape(&buf, compact(b))
	return buf.Bytes()
}

// termsKey identifies what a revision's terms say, for comparing two views
// of one revision: the canonical encoding with members sorted, or the
// exact bytes of terms that can be read more than one way, so that
// ambiguous terms are never taken for their clean reading.
func termsKey(b json.RawMessage) string {
	if len(b) == 0 {
		return ""
	}
	r, err := readTerms(b)
	if err != nil || r.amb != nil {
		return "raw:" + string(sentBytes(b))
	}
	return "terms:" + string(r.root.encode(nil, true))
}

// Ambiguity returns why the operation's terms can be read more than one
// way (an *AmbiguousTermsError), or nil when they read one way or are
// absent. No standing permission covers such terms.
func (op *Operation) Ambiguity() error {
	if op.Terms == nil {
		return nil
	}
	r, err := readTerms(op.Terms)
	if err != nil {
		return &AmbiguousTermsError{Reason: "they are not a JSON object"}
	}
	if r.amb != nil {
		return r.amb
	}
	return nil
}

// decimalNumber reads a decimal number as the extension's amounts are
// written ("70.00"): an optional "-", digits without a leading zero (or a
// lone 0), and optionally "." and at least one digit; no sign "+", no
// exponent, no other base, no space, at most maxDecimalLen bytes. The
// specification gives no grammar, so the SDK takes the JSON number
// grammar without its exponent, which every reader reads as the same
// number (0x10, 0b101, 0o17, 0x1p4, 1e2, 070, .5 and "+5" are refused).
func decimalNumber(s string) (*big.Rat, bool) {
	if !isDecimal(s) {
		return nil, false
	}
	r, ok := new(big.Rat).SetString(s)
	return r, ok
}

func isDecimal(s string) bool {
	if len(s) == 0 || len(s) > maxDecimalLen {
		return false
	}
	i := 0
	if s[0] == '-' {
		i++
	}
	start := i
	for i < len(s) && '0' <= s[i] && s[i] <= '9' {
		i++
	}
	switch {
	case i == start:
		return false
	case s[start] == '0' && i-start > 1:
		return false // a leading zero: 070 is octal to some readers
	}
	if i == len(s) {
		return true
	}
	if s[i] != '.' {
		return false
	}
	i++
	frac := i
	for i < len(s) && '0' <= s[i] && s[i] <= '9' {
		i++
	}
	return i > frac && i == len(s)
}

// parser is a strict RFC 8259 parser that notes what makes a text
// readable more than one way.
type parser struct {
	b   []byte
	i   int
	amb *AmbiguousTermsError
	// path is the place being read, for the first ambiguity's Path.
	path Path
}

func (p *parser) errorf(format string, args ...any) error {
	return fmt.Errorf("operations: terms are not JSON: "+format+" at byte %d", append(args, p.i)...)
}

func (p *parser) ambiguous(format string, args ...any) {
	if p.amb == nil {
		p.amb = &AmbiguousTermsError{Path: slices.Clone(p.path), Reason: fmt.Sprintf(format, args...)}
	}
}

func (p *parser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *parser) value(depth int) (value, error) {
	if p.i >= len(p.b) {
		return value{}, p.errorf("unexpected end")
	}
	if depth > maxTermsDepth {
		p.ambiguous("nested deeper than %d", maxTermsDepth)
	}
	if c := p.b[p.i]; (c == '{' || c == '[') && depth >= maxParseDepth {
		return value{}, p.errorf("nested deeper than %d", maxParseDepth)
	}
	switch c := p.b[p.i]; {
	case c == '{':
		return p.object(depth)
	case c == '[':
		return p.array(depth)
	case c == '"':
		s, err := p.str()
		return value{kind: 's', s: s}, err
	case c == '-' || '0' <= c && c <= '9':
		return p.number()
	case bytes.HasPrefix(p.b[p.i:], []byte("true")):
		p.i += 4
		return value{kind: 't'}, nil
	case bytes.HasPrefix(p.b[p.i:], []byte("false")):
		p.i += 5
		return value{kind: 'f'}, nil
	case bytes.HasPrefix(p.b[p.i:], []byte("null")):
		p.i += 4
		return value{kind: 'z'}, nil
	}
	return value{}, p.errorf("unexpected %q", p.b[p.i])
}

func (p *parser) object(depth int) (value, error) {
	p.i++ // {
	v := value{kind: 'o'}
	p.space()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		return v, nil
	}
	var seen map[string]bool
	for {
		p.space()
		if p.i >= len(p.b) || p.b[p.i] != '"' {
			return value{}, p.errorf("expected a member name")
		}
		name, err := p.str()
		if err != nil {
			return value{}, err
		}
		if seen == nil && len(v.names) >= 8 {
			seen = make(map[string]bool, 16)
			for _, n := range v.names {
				seen[n] = true
			}
		}
		dup := slices.Contains(v.names, name)
		if seen != nil {
			dup = seen[name]
			seen[name] = true
		}
		p.path = append(p.path, name)
		if dup {
			p.ambiguous("the member name %q appears twice", clean(name, 100))
		}
		p.space()
		if p.i >= len(p.b) || p.b[p.i] != ':' {
			return value{}, p.errorf("expected \":\"")
		}
		p.i++
		p.space()
		kid, err := p.value(depth + 1)
		if err != nil {
			return value{}, err
		}
		p.path = p.path[:len(p.path)-1]
		v.names = append(v.names, name)
		v.kids = append(v.kids, kid)
		p.space()
		if p.i >= len(p.b) {
			return value{}, p.errorf("unexpected end in an object")
		}
		switch p.b[p.i] {
		case ',':
			p.i++
		case '}':
			p.i++
			return v, nil
		default:
			return value{}, p.errorf("expected \",\" or \"}\"")
		}
	}
}

func (p *parser) array(depth int) (value, error) {
	p.i++ // [
	v := value{kind: 'a'}
	p.space()
	if p.i < len(p.b) && p.b[p.i] == ']' {
		p.i++
		return v, nil
	}
	for {
		p.space()
		kid, err := p.value(depth + 1)
		if err != nil {
			return value{}, err
		}
		v.kids = append(v.kids, kid)
		p.space()
		if p.i >= len(p.b) {
			return value{}, p.errorf("unexpected end in an array")
		}
		switch p.b[p.i] {
		case ',':
			p.i++
		case ']':
			p.i++
			return v, nil
		default:
			return value{}, p.errorf("expected \",\" or \"]\"")
		}
	}
}

// number reads a number token (RFC 8259 section 6); one outside the
// decimal grammar is read, and noted as ambiguous.
func (p *parser) number() (value, error) {
	start := p.i
	if p.b[p.i] == '-' {
		p.i++
	}
	digits := func() int {
		n := 0
		for p.i < len(p.b) && '0' <= p.b[p.i] && p.b[p.i] <= '9' {
			p.i++
			n++
		}
		return n
	}
	if p.i < len(p.b) && p.b[p.i] == '0' {
		p.i++
	} else if digits() == 0 {
		return value{}, p.errorf("a number without digits")
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		if digits() == 0 {
			return value{}, p.errorf("a number without digits after \".\"")
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if digits() == 0 {
			return value{}, p.errorf("a number without digits in its exponent")
		}
	}
	lit := string(p.b[start:p.i])
	if !isDecimal(lit) {
		p.ambiguous("the number %s is outside the decimal grammar (no exponent, at most %d characters)", clean(lit, 60), maxDecimalLen)
	}
	return value{kind: 'n', s: lit}, nil
}

// str reads a string token and returns its text. Invalid UTF-8 and escaped
// lone surrogates are kept as U+FFFD, and noted as ambiguous, as is an
// escaped U+0000.
func (p *parser) str() (string, error) {
	p.i++ // "
	start := p.i
	// The common case: no escapes, all ASCII or valid UTF-8.
	for p.i < len(p.b) {
		c := p.b[p.i]
		if c == '"' {
			s := p.b[start:p.i]
			p.i++
			if !utf8.Valid(s) {
				p.ambiguous("a string holds invalid UTF-8")
				return strings.ToValidUTF8(string(s), "\uFFFD"), nil
			}
			return string(s), nil
		}
		if c == '\\' || c < 0x20 {
			break
		}
		p.i++
	}
	var b []byte
	b = append(b, p.b[start:p.i]...)
	for {
		if p.i >= len(p.b) {
			return "", p.errorf("unexpected end in a string")
		}
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			if !utf8.Valid(b) {
				p.ambiguous("a string holds invalid UTF-8")
				return strings.ToValidUTF8(string(b), "\uFFFD"), nil
			}
			return string(b), nil
		case c < 0x20:
			return "", p.errorf("a control character in a string")
		case c != '\\':
			b = append(b, c)
			p.i++
			continue
		}
		p.i++
		if p.i >= len(p.b) {
			return "", p.errorf("unexpected end in a string")
		}
		e := p.b[p.i]
		p.i++
		switch e {
		case '"', '\\', '/':
			b = append(b, e)
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			r, ok := p.hex4()
			if !ok {
				return "", p.errorf("a bad \\u escape")
			}
			if utf16.IsSurrogate(r) {
				r2 := rune(-1)
				if p.i+1 < len(p.b) && p.b[p.i] == '\\' && p.b[p.i+1] == 'u' {
					save := p.i
					p.i += 2
					var ok2 bool
					if r2, ok2 = p.hex4(); !ok2 {
						return "", p.errorf("a bad \\u escape")
					}
					if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
						b = utf8.AppendRune(b, d)
						continue
					}
					p.i = save // r2 is read on its own next
				}
				p.ambiguous("a string holds an escaped lone surrogate")
				r = utf8.RuneError
			}
			if r == 0 {
				p.ambiguous("a string holds U+0000, where readers written in C end it")
			}
			b = utf8.AppendRune(b, r)
		default:
			return "", p.errorf("a bad escape \\%c", e)
		}
	}
}

func (p *parser) hex4() (rune, bool) {
	if p.i+4 > len(p.b) {
		return 0, false
	}
	var r rune
	for _, c := range p.b[p.i : p.i+4] {
		r <<= 4
		switch {
		case '0' <= c && c <= '9':
			r |= rune(c - '0')
		case 'a' <= c && c <= 'f':
			r |= rune(c - 'a' + 10)
		case 'A' <= c && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	p.i += 4
	return r, true
}

// decoded returns v as encoding/json decodes it with UseNumber.
func (v *value) decoded() any {
	switch v.kind {
	case 'o':
		m := make(map[string]any, len(v.names))
		for i, n := range v.names {
			m[n] = v.kids[i].decoded()
		}
		return m
	case 'a':
		a := make([]any, len(v.kids))
		for i := range v.kids {
			a[i] = v.kids[i].decoded()
		}
		return a
	case 's':
		return v.s
	case 'n':
		return json.Number(v.s)
	case 't':
		return true
	case 'f':
		return false
	}
	return nil
}
