package companytext

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/poppyproto/poppy/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

const fffd = "\uFFFD"

func TestText(t *testing.T) {
	england := "\U0001F3F4" + tags("gbeng")
	for _, tc := range []struct{ in, want string }{
		{"Example Shop", "Example Shop"},
		{"café ☕, 東京, مرحبا", "café ☕, 東京, مرحبا"},
		{"two\nlines\tand a tab", "two\nlines\tand a tab"},
		{"crlf\r\nand cr\rover", "crlf\nand cr\nover"},
		{"sep\u2028para\u2029", "sep\npara\n"},
		{"\x1b]0;pwned\x07\x1b[2J", fffd + "]0;pwned" + fffd + fffd + "[2J"},
		{"c1\u009bcsi del\x7f nul\x00", "c1" + fffd + "csi del" + fffd + " nul" + fffd},
		{"bad\xffbyte", "bad" + fffd + "byte"},
		// The bidi controls (CVE-2021-42574).
		{"pay \u202e0001\u202c now", "pay " + fffd + "0001" + fffd + " now"},
		{"\u2066\u2067\u2068\u2069\u200e\u200f\u061c\u202a\u202b\u202d", strings.Repeat(fffd, 10)},
		// Invisible text for a model: tag characters, runs of variation
		// selectors, zero-width spaces, interlinear annotations, fillers.
		{"hi\U000E0069\U000E0067\U000E006E", "hi" + fffd + fffd + fffd},
		{"😀\ufe0f\ufe01\ufe02", "😀\ufe0f" + fffd + fffd},
		{"a\u200bb\ufeffc\u2060d\u2064e", "a" + fffd + "b" + fffd + "c" + fffd + "d" + fffd + "e"},
		{"\ufff9hidden\ufffbx", fffd + "hidden" + fffd + "x"},
		{"\u3164\u115f", fffd + fffd},
		// What scripts and emoji need stays.
		{"می\u200cخواهم", "می\u200cخواهم"},
		{"क्\u200dष", "क्\u200dष"},
		{"👨\u200d👩\u200d👧", "👨\u200d👩\u200d👧"},
		{"❤\ufe0f\u200d🔥 #\ufe0f\u20e3", "❤\ufe0f\u200d🔥 #\ufe0f\u20e3"},
		{"Sil\u00adben", "Sil\u00adben"},
		{england + " flag", england + " flag"},
		{"\u0600\u0661\u0662", "\u0600\u0661\u0662"},
		// Where they aren't needed, they are neutralised.
		{"\u200dstart \u200c\u200c", fffd + "start " + fffd + fffd},
		{"x\u200d\u200d\u200dy", "x\u200d" + fffd + fffd + "y"},
		{"\U0001F3F4\U000E0061\U000E0062\U000E007F", "\U0001F3F4" + fffd + fffd + fffd},
		{"\ufe0f", fffd},
	} {
		if got := Text(tc.in, 0); got != tc.want {
			t.Errorf("Text(%+q) = %+q, want %+q", tc.in, got, tc.want)
		}
	}
}

func TestLine(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"  one\r\n two\t\tthree\u2028four  ", "one two three four"},
		{"a\u00a0\u00a0b", "a b"},
		{"bidi\u202eevil\n", "bidi" + fffd + "evil"},
	} {
		if got := Line(tc.in, 0); got != tc.want {
			t.Errorf("Line(%+q) = %+q, want %+q", tc.in, got, tc.want)
		}
	}
}

func TestBounds(t *testing.T) {
	if got := Text(strings.Repeat("é", 100), 11); got != "éééé"+Ellipsis || len(got) > 11 {
		t.Errorf("cut: %q", got)
	}
	if got := Line("abc   def", 6); got != "abc"+Ellipsis {
		t.Errorf("Line cut: %q", got)
	}
	if got := Text("abcdef", 2); got != "ab" {
		t.Errorf("tiny bound: %q", got)
	}
	flag := "\U0001F3F4" + tags("gbsct")
	if got := Text("ab"+flag, 12); got != "ab\U0001F3F4"+Ellipsis {
		t.Errorf("a flag cut inside its tags: %+q", got)
	}
	if got := Text("short", 100); got != "short" {
		t.Errorf("uncut: %q", got)
	}
}

// neverShown are runes that no output holds, whatever stands around them.
func neverShown(r rune) bool {
	return r < 0x20 && r != '\n' && r != '\t' || r >= 0x7f && r < 0xa0 ||
		unicode.Is(unicode.Bidi_Control, r) || r == 0x2028 || r == 0x2029 || r >= 0xfff9 && r <= 0xfffb
}

// check is an independent reading of the rules: every unsafe rune in out
// stands where scripts or emoji need it.
func check(t *testing.T, in, out string, line bool) {
	t.Helper()
	if !utf8.ValidString(out) {
		t.Fatalf("%+q: invalid UTF-8 out: %+q", in, out)
	}
	rs := []rune(out)
	for i, r := range rs {
		if neverShown(r) {
			t.Fatalf("%+q: %U survived in %+q", in, r, out)
		}
		if r == '\n' || r == '\t' {
			if line {
				t.Fatalf("%+q: Line kept %U", in, r)
			}
			continue
		}
		if !Unsafe(r) {
			continue
		}
		var p rune = -1
		if i > 0 {
			p = rs[i-1]
		}
		ok := false
		switch {
		case r >= 0xe0020 && r <= 0xe007f:
			j := i
			for j > 0 && rs[j-1] >= 0xe0020 && rs[j-1] <= 0xe007f {
				j--
			}
			k := i
			for k < len(rs)-1 && rs[k] != 0xe007f {
				k++
			}
			if j > 0 && rs[j-1] == 0x1f3f4 {
				seq := string(rs[j : k+1])
				ok = seq == tags("gbeng") || seq == tags("gbsct") || seq == tags("gbwls")
			}
		case joiner(r):
			ok = p >= 0 && (visible(p) || variationSelector(p))
		case variationSelector(r):
			ok = p >= 0 && (visible(p) || unicode.IsPunct(p)) && !variationSelector(p)
		}
		if !ok {
			t.Fatalf("%+q: %U after %U survived in %+q", in, r, p, out)
		}
	}
}

func FuzzText(f *testing.F) {
	for _, s := range []string{"\x1b[2J\u202e\U000E0041", "👨\u200d👩", "a\r\nb", "\U0001F3F4" + tags("gbwls"), "x\ufe0f\ufe0f\u200d"} {
		f.Add(s, 0)
	}
	f.Fuzz(func(t *testing.T, s string, max int) {
		max %= 64
		for _, line := range []bool{false, true} {
			out := clean(s, max, line)
			check(t, s, out, line)
			if max > 0 && len(out) > max {
				t.Fatalf("%+q: %d bytes, bound %d", s, len(out), max)
			}
			if again := clean(out, 0, line); max <= 0 && again != out {
				t.Fatalf("%+q: not stable: %+q then %+q", s, out, again)
			}
			if !IsClean(out) {
				t.Fatalf("%+q: IsClean(%+q) = false", s, out)
			}
		}
		if IsClean(s) && Text(s, 0) != s {
			t.Fatal("IsClean text changed")
		}
	})
}

// unsafeRef is Unsafe from the Unicode properties.
func unsafeRef(r rune) bool {
	switch {
	case r < 0x20 || r == 0x7f:
		return true
	case r < 0xa0:
		return r >= 0x80
	case unicode.Is(unicode.Bidi_Control, r), r == 0x2028, r == 0x2029, r >= 0xfff9 && r <= 0xfffb:
		return true
	case unicode.Is(unicode.Prepended_Concatenation_Mark, r), r >= 0x13430 && r <= 0x1345f:
		return false
	case r >= 0xe0000 && r <= 0xe0fff:
		return true // the tag and variation selector blocks, unassigned code points included
	}
	return unicode.In(r, unicode.Cf, unicode.Other_Default_Ignorable_Code_Point, unicode.Variation_Selector)
}

func TestUnsafeRanges(t *testing.T) {
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if Unsafe(r) != unsafeRef(r) {
			t.Fatalf("Unsafe(%U) = %v, the Unicode %s properties say %v", r, Unsafe(r), unicode.Version, unsafeRef(r))
		}
		if variationSelector(r) != unicode.Is(unicode.Variation_Selector, r) {
			t.Fatalf("variationSelector(%U) = %v", r, variationSelector(r))
		}
	}
}

var sink string

// Clean text (the common case) costs a scan and no allocation; hostile
// text one copy.
func BenchmarkTextClean(b *testing.B) {
	s := strings.Repeat("Your order #1042 ships Tuesday — café ☕. ", 20)
	b.ReportAllocs()
	for b.Loop() {
		sink = Text(s, 0)
	}
	if a := testing.AllocsPerRun(100, func() { sink = Text(s, 0) }); a != 0 {
		b.Fatalf("Text of clean text allocates %v times", a)
	}
}

func BenchmarkTextHostile(b *testing.B) {
	s := strings.Repeat("Shop\x1b]0;pwned\x07\u202e\U000E0041", 40)
	b.ReportAllocs()
	for b.Loop() {
		sink = Text(s, 0)
	}
	if a := testing.AllocsPerRun(100, func() { sink = Text(s, 0) }); a > 3 {
		b.Fatalf("Text of hostile text allocates %v times, want at most 3", a)
	}
}

// The floor: copying the clean text once.
func BenchmarkFloorCopy(b *testing.B) {
	s := strings.Repeat("Your order #1042 ships Tuesday — café ☕. ", 20)
	for b.Loop() {
		sink = strings.Clone(s)
	}
}
