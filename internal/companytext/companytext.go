// Package companytext is the one cleaner of text a Company sends, on every
// way it reaches a person (a terminal, a web page, a notification, an error
// string, a log line) or a model (a tool's result or description): a
// message, a reason, a summary, an error description, a name.
//
// Such text must not drive a terminal (escape sequences, carriage returns),
// reorder what is shown around it (the bidirectional controls of
// CVE-2021-42574: U+202E and the others), or hide text from the person
// while a model reads it (tag characters, runs of variation selectors,
// invisible format characters). Text and Line replace every such rune with
// U+FFFD, so that what was removed shows. What scripts and emoji need is
// kept where they need it: a zero-width joiner or non-joiner (or a soft
// hyphen, a combining grapheme joiner, a Mongolian vowel separator) right
// after a letter, mark, digit or symbol; one variation selector after a
// visible character; the tag sequences of the three subdivision flags of
// Unicode's recommended emoji set. Everything else, letters of any script
// included, is left as it is.
//
// The CLI's internal/termtext escapes what it prints instead (\u202e): it
// shows exactly what was sent, so it escapes every rune Unsafe reports and
// every format character besides.
package companytext

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Ellipsis ends text cut to its bound.
const Ellipsis = "…"

// Text returns s fit to show as prose: line breaks ("\n"; "\r\n", a lone
// "\r", U+2028 and U+2029 become "\n") and tabs are kept, every rune that
// could drive a terminal, reorder or hide text becomes U+FFFD, invalid
// UTF-8 too. When max > 0 the result is at most max bytes, cut at a rune
// boundary and ended with Ellipsis. Text of clean text is that text:
// Text(Text(s, 0), 0) == Text(s, 0).
func Text(s string, max int) string { return clean(s, max, false) }

// Line is Text on one line, for an error string, a log attribute, a name or
// a description: line breaks and tabs become spaces, runs of white space
// one space, and leading and trailing space go.
func Line(s string, max int) string { return clean(s, max, true) }

// IsClean reports whether Text leaves s as it is: s holds no rune that
// could drive a terminal, reorder or hide text.
func IsClean(s string) bool { return clean(s, 0, false) == s }

// Unsafe reports the runes that are never shown as they are, wherever they
// stand: C0 and C1 controls and DEL (newline and tab are the callers'),
// the bidirectional controls (U+061C, U+200E, U+200F, U+202A to U+202E,
// U+2066 to U+2069), the line and paragraph separators, the interlinear
// annotation characters (U+FFF9 to U+FFFB, which can hide what they
// enclose), and the default-ignorable code points (invisible wherever they
// are not supported: format characters, tag characters, Hangul fillers,
// variation selectors, ...) other than the prepended concatenation marks
// of Arabic and other scripts, which show. Text and Line keep some of the
// invisible ones in the places scripts and emoji need them.
func Unsafe(r rune) bool {
	if r < 0xad {
		return r < 0x20 || r >= 0x7f && r < 0xa0
	}
	for _, u := range unsafeRanges {
		if r < u.lo {
			return false
		}
		if r <= u.hi {
			return true
		}
	}
	return false
}

// unsafeRanges are the runes Unsafe reports from U+00AD on, as Unicode
// 15.0 (Go's unicode tables) has them: TestUnsafeRanges checks them
// against the properties, rune by rune.
var unsafeRanges = [...]struct{ lo, hi rune }{
	{0x00ad, 0x00ad},   // soft hyphen
	{0x034f, 0x034f},   // combining grapheme joiner
	{0x061c, 0x061c},   // Arabic letter mark
	{0x115f, 0x1160},   // Hangul fillers
	{0x17b4, 0x17b5},   // Khmer inherent vowels
	{0x180b, 0x180f},   // Mongolian variation selectors, vowel separator
	{0x200b, 0x200f},   // zero-width space, non-joiner, joiner; LRM, RLM
	{0x2028, 0x202e},   // line and paragraph separators; LRE, RLE, PDF, LRO, RLO
	{0x2060, 0x206f},   // word joiner, invisible operators; LRI, RLI, FSI, PDI; deprecated format characters
	{0x3164, 0x3164},   // Hangul filler
	{0xfe00, 0xfe0f},   // variation selectors
	{0xfeff, 0xfeff},   // zero-width no-break space
	{0xffa0, 0xffa0},   // halfwidth Hangul filler
	{0xfff0, 0xfffb},   // reserved; interlinear annotations
	{0x1bca0, 0x1bca3}, // shorthand format controls
	{0x1d173, 0x1d17a}, // musical symbol format controls
	{0xe0000, 0xe0fff}, // tags, variation selectors supplement
}

// defaultIgnorable is Unicode's Default_Ignorable_Code_Point
// (DerivedCoreProperties: Other_Default_Ignorable_Code_Point, Cf and
// Variation_Selector, less white space, the interlinear annotation
// characters, the Egyptian hieroglyph format controls and the prepended
// concatenation marks), with the unassigned code points of the blocks it
// reserves.
func defaultIgnorable(r rune) bool {
	return r >= 0xa0 && Unsafe(r) && !unicode.Is(unicode.Bidi_Control, r) && r != 0x2028 && r != 0x2029 && (r < 0xfff9 || r > 0xfffb)
}

// joiner reports the invisible runes kept right after a letter, mark,
// digit or symbol: they shape scripts (Persian and Indic ZWNJ and ZWJ,
// Mongolian) and join emoji.
func joiner(r rune) bool {
	switch r {
	case 0x200c, 0x200d, 0x00ad, 0x034f, 0x180e:
		return true
	}
	return false
}

func variationSelector(r rune) bool {
	return r >= 0xfe00 && r <= 0xfe0f || r >= 0x180b && r <= 0x180f && r != 0x180e || r >= 0xe0100 && r <= 0xe01ef
}

// visible reports a rune a joiner or variation selector may follow: a
// letter, mark, digit or symbol that shows (not an invisible mark such as
// a variation selector, nor the U+FFFD of a rune replaced).
func visible(r rune) bool {
	return r != utf8.RuneError && unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.S) && !defaultIgnorable(r)
}

// flagTags are the tag sequences (after U+1F3F4) of the recommended emoji
// set: England, Scotland, Wales.
var flagTags = []string{tags("gbeng"), tags("gbsct"), tags("gbwls")}

func tags(s string) string {
	var b strings.Builder
	for _, c := range s {
		b.WriteRune(0xe0000 + c)
	}
	b.WriteRune(0xe007f)
	return b.String()
}

const blackFlag = 0x1f3f4

// clean is Text (line false) and Line (line true). It copies s only from
// the first rune it changes, so clean text costs a scan.
func clean(s string, max int, line bool) string {
	var out []byte // nil while the output is s[:i]
	start := func(i int) {
		if out == nil {
			out = append(make([]byte, 0, len(s)+len(s)/4+8), s[:i]...)
		}
	}
	prev := rune(-1) // the last rune of the output; -1 before any
	space := line    // Line: the output is empty or ends with a space
	vsKept := false  // prev is a variation selector kept after a visible rune
	for i := 0; i < len(s); {
		if c := s[i]; c >= 0x20 && c < 0x7f && (!line || c != ' ') {
			// Printable ASCII: as it is.
			if out != nil {
				out = append(out, c)
			}
			prev, space, vsKept = rune(c), false, false
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		w := r // what is written for r
		switch {
		case r == utf8.RuneError && n == 1:
			// invalid UTF-8: w is U+FFFD
		case r == '\r':
			if strings.HasPrefix(s[i+1:], "\n") {
				start(i) // "\r\n" is "\n"
				i++
				continue
			}
			w = '\n'
		case r == 0x2028 || r == 0x2029:
			w = '\n'
		case r == '\n' || r == '\t':
		case r == blackFlag:
			for _, t := range flagTags {
				if strings.HasPrefix(s[i+n:], t) {
					n += len(t) // an emoji flag: kept whole
					break
				}
			}
		case joiner(r):
			if prev < 0 || !visible(prev) && !vsKept {
				w = utf8.RuneError
			}
		case variationSelector(r):
			if prev < 0 || !visible(prev) && !unicode.IsPunct(prev) || vsKept {
				w = utf8.RuneError
			}
		case Unsafe(r):
			w = utf8.RuneError
		}
		if line {
			if w == '\n' || w == '\t' || unicode.IsSpace(w) {
				if space {
					start(i) // a run of white space is one space
					i += n
					continue
				}
				space, w = true, ' '
			} else {
				space = false
			}
		}
		changed := w != r || r == utf8.RuneError && n == 1
		if changed {
			start(i)
			out = utf8.AppendRune(out, w)
		} else if out != nil {
			out = append(out, s[i:i+n]...)
		}
		vsKept = variationSelector(r) && !changed
		prev = w
		i += n
	}
	res := s
	if out != nil {
		res = string(out)
	}
	if line {
		res = strings.TrimRight(res, " ")
	}
	return cut(res, max, line)
}

// cut returns s cut to at most max bytes (when max > 0) at a rune
// boundary, never inside a flag's tag sequence, and ended with Ellipsis.
func cut(s string, max int, line bool) string {
	if max <= 0 || len(s) <= max {
		return s
	}
	keep, tail := max-len(Ellipsis), Ellipsis
	if keep < 0 {
		keep, tail = max, ""
	}
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	for keep > 0 {
		r, n := utf8.DecodeLastRuneInString(s[:keep])
		if r < 0xe0000 || r > 0xe007f {
			break
		}
		keep -= n // no tags without their flag's end
	}
	s = s[:keep]
	if line {
		s = strings.TrimRight(s, " ")
	}
	return s + tail
}
