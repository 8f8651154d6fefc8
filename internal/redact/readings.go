package redact

// What a JSON decoder reads of a text: the text with its escapes undone,
// and where each byte it reads came from, so that a secret found in what
// the decoder (and the model) reads is replaced where it stands in the
// text.

import (
	"slices"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxReadings bounds how many times the escapes of a text are undone, one
// level after another: a JSON text carried in a JSON string, itself in a
// JSON string, and so on. A JSON decoder undoes one level, and a reader of
// the JSON text a string carries a second; eight is far past what any
// reader undoes, and the bound keeps the work linear in the text's size.
const MaxReadings = 8

// reading is a text as a JSON decoder reads it. Byte i of text came from
// the bytes [from[i], to[i]) of the original: one byte, or a whole escape.
type reading struct {
	text     string
	from, to []int
}

// orig returns the bytes of the original a span of the reading came from.
func (r *reading) orig(sp span) span { return span{r.from[sp.start], r.to[sp.end-1]} }

// widen returns a span of the original widened to the whole escapes its
// ends fall inside; r is the first reading, whose escapes are the
// original's.
func (r *reading) widen(sp span) span {
	// The reading's bytes come in the original's order: find the first
	// whose escape ends after sp.start, and the last that starts before
	// sp.end.
	if i, _ := slices.BinarySearch(r.to, sp.start+1); i < len(r.to) && r.from[i] < sp.start {
		sp.start = r.from[i]
	}
	if i, _ := slices.BinarySearch(r.from, sp.end); i > 0 && r.to[i-1] > sp.end {
		sp.end = r.to[i-1]
	}
	return sp
}

// readings returns the readings a JSON decoder makes of s, one level after
// another, while a level still undoes an escape: none when s has none,
// at most MaxReadings.
func readings(s string) []reading {
	var out []reading
	cur := reading{text: s}
	for range MaxReadings {
		next, ok := unescape(cur.text)
		if !ok {
			break
		}
		if cur.from != nil { // in the original's bytes, not cur's
			for i := range next.from {
				next.from[i], next.to[i] = cur.from[next.from[i]], cur.to[next.to[i]-1]
			}
		}
		out = append(out, next)
		cur = next
	}
	return out
}

// unescape undoes every escape of s as a JSON decoder does in a string:
// \" \\ \/ \b \f \n \r \t, and \uXXXX in either case of hex, a surrogate
// pair as one character and a lone surrogate as U+FFFD (as encoding/json
// reads it). A backslash that starts no escape is read as it is; an escape
// cut short by the end of s, or by an Ellipsis that marks a cut, is read
// as nothing, so that what stands before it ends at the cut. ok is false
// when s holds no escape to undo.
func unescape(s string) (r reading, ok bool) {
	if strings.IndexByte(s, '\\') < 0 {
		return reading{}, false
	}
	var b strings.Builder
	b.Grow(len(s))
	r.from = make([]int, 0, len(s))
	r.to = make([]int, 0, len(s))
	emit := func(p []byte, from, to int) {
		b.Write(p)
		for range p {
			r.from = append(r.from, from)
			r.to = append(r.to, to)
		}
	}
	var buf [utf8.UTFMax]byte
	for i := 0; i < len(s); {
		if s[i] != '\\' {
			emit([]byte{s[i]}, i, i+1)
			i++
			continue
		}
		c, n := escape(s[i:])
		switch {
		case n > 0:
			emit(buf[:utf8.EncodeRune(buf[:], c)], i, i+n)
			i += n
			ok = true
		case n < 0: // cut short at a cut: read as nothing
			i += -n
			ok = true
		default:
			emit([]byte{'\\'}, i, i+1)
			i++
		}
	}
	r.text = b.String()
	return r, ok
}

// escape reads the escape that starts s (s[0] is a backslash): the
// character and its length in bytes; n = 0 when s starts no escape; n < 0
// when s holds only the start of one, cut short, its -n bytes ending s or
// followed by an Ellipsis.
func escape(s string) (c rune, n int) {
	cut := func(k int) bool { return k == len(s) || strings.HasPrefix(s[k:], Ellipsis) }
	if cut(1) {
		return 0, -1
	}
	switch s[1] {
	case '"', '\\', '/':
		return rune(s[1]), 2
	case 'b':
		return '\b', 2
	case 'f':
		return '\f', 2
	case 'n':
		return '\n', 2
	case 'r':
		return '\r', 2
	case 't':
		return '\t', 2
	}
	c, m := uEscape(s)
	switch {
	case m < 6 && cut(m):
		return 0, -m
	case m < 6:
		return 0, 0
	case !utf16.IsSurrogate(c):
		return c, 6
	case c < 0xdc00: // a first half: the second should follow
		l, k := uEscape(s[6:])
		if k == 6 {
			if p := utf16.DecodeRune(c, l); p != utf8.RuneError {
				return p, 12
			}
		} else if cut(6 + k) {
			return 0, -(6 + k) // the pair cut before its second half ends
		}
	}
	return utf8.RuneError, 6 // a lone half, as encoding/json reads it
}

// uEscape reads a \uXXXX escape at the start of s, or the start of one: its
// value when whole, and how many of its 6 bytes s holds (0 when s does not
// start with a backslash, 1 when no "u" follows it).
func uEscape(s string) (c rune, m int) {
	if s == "" || s[0] != '\\' {
		return 0, 0
	}
	if len(s) < 2 || s[1] != 'u' {
		return 0, 1
	}
	v := 0
	for m = 2; m < 6 && m < len(s); m++ {
		d := s[m]
		switch {
		case '0' <= d && d <= '9':
			d -= '0'
		case 'a' <= d && d <= 'f':
			d -= 'a' - 10
		case 'A' <= d && d <= 'F':
			d -= 'A' - 10
		default:
			return 0, m
		}
		v = v<<4 | int(d)
	}
	return rune(v), m
}
