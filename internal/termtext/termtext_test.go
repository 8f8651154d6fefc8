package termtext

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/poppyproto/poppy/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

func TestEscape(t *testing.T) {
	for in, want := range map[string]string{
		"Example Shop":           "Example Shop",
		"café ☕":                 "café ☕",
		"\x1b]0;pwned\x07":       `\x1b]0;pwned\a`,
		"red\x1b[31mtext\x1b[0m": `red\x1b[31mtext\x1b[0m`,
		"line\nbreak\rover":      `line\nbreak\rover`,
		"tab\there":              `tab\there`,
		"\u202eevil":             `\u202eevil`,
		"zero\u200bwidth":        `zero\u200bwidth`,
		"c1\u009bcsi":            `c1\u009bcsi`,
		"bad\xffbyte":            `bad\xffbyte`,
		`back\slash`:             `back\\slash`,
		"del\x7f":                `del\x7f`,
		"sep\u2028x":             `sep\u2028x`,
		"fill\u3164er":           `fill\u3164er`,
		"vs\ufe01\U000e0100":     `vs\ufe01\U000e0100`,
	} {
		got := Escape(in)
		if got != want {
			t.Errorf("Escape(%q) = %q, want %q", in, got, want)
		}
		for _, c := range got {
			if c < 0x20 || c == 0x7f || (c >= 0x80 && c < 0xa0) {
				t.Errorf("Escape(%q) still holds control %U", in, c)
			}
		}
	}
}

func FuzzEscape(f *testing.F) {
	f.Add("\x1b[2J\x1b]0;x\x07")
	f.Fuzz(func(t *testing.T, s string) {
		got := Escape(s)
		for _, r := range got {
			if unsafeRune(r) {
				t.Fatalf("Escape(%q) = %q holds %U", s, got, r)
			}
		}
		if !strings.Contains(s, "\\") && safe(s) && got != s {
			t.Fatalf("safe text changed")
		}
	})
}

var sink string

// Escape on text that needs nothing (the common case: a Company's name)
// costs a scan, no allocation; text with escapes costs one builder.
func BenchmarkEscapeSafe(b *testing.B) {
	s := strings.Repeat("Example Company — Orders & Returns ", 4)
	b.ReportAllocs()
	for b.Loop() {
		sink = Escape(s)
	}
	if allocs := testing.AllocsPerRun(100, func() { sink = Escape(s) }); allocs != 0 {
		b.Fatalf("Escape of safe text allocates %v times", allocs)
	}
}

func BenchmarkEscapeHostile(b *testing.B) {
	s := strings.Repeat("Shop\x1b]0;pwned\x07\u202e", 8)
	b.ReportAllocs()
	for b.Loop() {
		sink = Escape(s)
	}
	if allocs := testing.AllocsPerRun(100, func() { sink = Escape(s) }); allocs > 1 {
		b.Fatalf("Escape of hostile text allocates %v times, want 1", allocs)
	}
}

// The floor: copying the string once.
func BenchmarkFloorCopy(b *testing.B) {
	s := strings.Repeat("Example Company — Orders & Returns ", 4)
	for b.Loop() {
		sink = strings.Clone(s)
	}
}

// ReadLine takes one line and leaves what follows; a line too long is
// read to its end and dropped; the end of input gives the last line, then
// io.EOF.
func TestReadLine(t *testing.T) {
	r := strings.NewReader("yes\r\n" + strings.Repeat("x", 10) + "\nno\nlast")
	for _, want := range []struct {
		line string
		err  error
	}{{"yes", nil}, {"", ErrLineTooLong}, {"no", nil}, {"last", nil}, {"", io.EOF}} {
		line, err := ReadLine(r, 5)
		if line != want.line || !errors.Is(err, want.err) || (want.err == nil) != (err == nil) {
			t.Fatalf("ReadLine = %q, %v; want %q, %v", line, err, want.line, want.err)
		}
	}
}
