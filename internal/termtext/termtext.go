// Package termtext makes text from an untrusted party, such as a Company,
// safe to print on a terminal: a Company's name, a user code or an error
// description must not move the cursor, retitle the terminal, clear the
// screen or hide text with escape sequences. ReadLine reads what a person
// types at a terminal prompt, one line at a time (signin.Terminal,
// operations.TerminalApprover); IsTerminal and EchoOff are the terminal
// attributes those prompts need.
package termtext

import (
	"errors"
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/poppyproto/poppy/internal/companytext"
)

// Escape returns s with every control character, every C1 and bidi
// control and every invalid UTF-8 byte written as a Go escape (\x1b,
// \u202e, \xff), so that what is printed is what was sent and nothing more.
// Printable text, spaces included, is left as it is. A backslash is
// doubled, so that an escape can't be faked.
func Escape(s string) string {
	if safe(s) {
		return s
	}
	var b strings.Builder
	b.Grow(2 * len(s))
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			b.WriteString(`\x`)
			b.WriteByte(hexDigits[s[i]>>4])
			b.WriteByte(hexDigits[s[i]&15])
		case r == '\\':
			b.WriteString(`\\`)
		case unsafeRune(r):
			var tmp [16]byte
			q := strconv.AppendQuoteRuneToASCII(tmp[:0], r)
			b.Write(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

const hexDigits = "0123456789abcdef"

// safe reports whether s needs no escape: the common case, checked
// without allocating.
func safe(s string) bool {
	for i := 0; i < len(s); {
		c := s[i]
		if c < 0x80 {
			if c < 0x20 || c == 0x7f || c == '\\' {
				return false
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n <= 1) || unsafeRune(r) {
			return false
		}
		i += n
	}
	return true
}

// unsafeRune reports runes that change how a terminal shows what follows
// or hide text: those internal/companytext neutralises wherever they stand
// (C0 and C1 controls, DEL, bidi controls, line separators, invisible
// runes such as tag characters, variation selectors and Hangul fillers),
// and every other Unicode format character (zero-width joiners and the
// like), since what is printed here is exactly what was sent.
func unsafeRune(r rune) bool {
	return companytext.Unsafe(r) || unicode.Is(unicode.Cf, r)
}

// ErrLineTooLong is returned by ReadLine for a line longer than its bound;
// the line was read to its end and dropped.
var ErrLineTooLong = errors.New("the line is too long")

// ReadLine reads one line a person typed from r, without its "\n" or
// "\r\n". It reads byte by byte, so that nothing after the line is
// consumed (the next prompt's answer stays for it). A line longer than max
// bytes is read to its end and dropped: ErrLineTooLong. At the end of the
// input it returns the last unterminated line, then io.EOF; any other
// error of r is returned as it is.
func ReadLine(r io.Reader, max int) (string, error) {
	var line []byte
	var c [1]byte
	n := 0
	for {
		k, err := r.Read(c[:])
		if k == 1 {
			if c[0] == '\n' {
				break
			}
			if n++; n <= max {
				line = append(line, c[0])
			}
			continue
		}
		if errors.Is(err, io.EOF) {
			if n == 0 {
				return "", io.EOF
			}
			break
		}
		if err != nil {
			return "", err
		}
	}
	if n > max {
		return "", ErrLineTooLong
	}
	return strings.TrimSuffix(string(line), "\r"), nil
}
