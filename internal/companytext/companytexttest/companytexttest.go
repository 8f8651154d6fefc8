// Package companytexttest gives the tests of every package that shows
// Company text one hostile sample and one check, so that each way such
// text reaches a person or a model is shown to go through
// internal/companytext.
package companytexttest

import (
	"strings"
	"testing"

	"github.com/poppyproto/poppy/internal/companytext"
)

// Hostile holds a rune of each kind the cleaner neutralises: escape
// sequences and a BEL, bidi overrides and isolates (U+202E, U+2066), a
// zero-width space, tag characters spelling "IGN" (text a model reads and
// a person doesn't see), interlinear annotations, a Hangul filler, a run
// of variation selectors, a NUL, a C1 control and a line separator.
const Hostile = "Pay \u202e0001\u202c now \x1b]0;pwned\x07\x1b[2J zero\u200bwidth \u2066iso\u2069 tag\U000E0049\U000E0047\U000E004E " +
	"\ufff9annotated\ufffb fill\u3164er vs😀\ufe0f\ufe01\ufe02 nul\x00 c1\u0085 sep\u2028end"

// never are runes of Hostile that no cleaned text may hold.
var never = []rune{0x202e, 0x202c, 0x2066, 0x2069, 0x1b, 0x07, 0x200b, 0xe0049, 0xe0047, 0xe004e, 0xfff9, 0xfffb, 0x3164, 0xfe01, 0xfe02, 0x00, 0x85, 0x2028}

// Check fails tb when s, text that came from Hostile on its way to a
// person or a model (what names the way), holds a rune that could drive a
// terminal or reorder or hide text.
func Check(tb testing.TB, what, s string) {
	tb.Helper()
	for _, r := range never {
		if strings.ContainsRune(s, r) {
			tb.Errorf("%s: %U reaches a person or a model in %+q", what, r, s)
		}
	}
	if !companytext.IsClean(s) {
		tb.Errorf("%s: %+q is not clean", what, s)
	}
}
