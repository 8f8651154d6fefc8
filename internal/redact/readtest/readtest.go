// Package readtest is the tests' oracle of what a model reads of a text:
// built on encoding/json alone, independent of package redact's own
// reader, so that a test of redact (or of a package that scrubs through
// it) does not check the reader with itself.
package readtest

import (
	"encoding/json"
	"strings"
)

// Fragment is the length of the shortest stretch of a secret Leak looks
// for: redact.MinFragment (this package can't import redact, whose own
// tests use it).
const Fragment = 8

// Readings returns s and, while what is read is JSON (or the content of a
// JSON string), every string encoding/json reads in it, member names too,
// down to depth levels.
func Readings(s string, depth int) []string {
	out := []string{s}
	if depth == 0 {
		return out
	}
	var v any
	if json.Unmarshal([]byte(s), &v) != nil {
		var str string
		if json.Unmarshal([]byte(`"`+s+`"`), &str) != nil || str == s {
			return out
		}
		return append(out, Readings(str, depth-1)...)
	}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			out = append(out, Readings(v, depth-1)...)
		case []any:
			for _, x := range v {
				walk(x)
			}
		case map[string]any:
			for k, x := range v {
				out = append(out, Readings(k, depth-1)...)
				walk(x)
			}
		}
	}
	walk(v)
	return out
}

// Leak returns the first stretch of Fragment bytes of a secret found in
// one of the Readings of s down to depth levels, "" if none.
func Leak(s string, depth int, secrets ...string) string {
	for _, r := range Readings(s, depth) {
		for _, v := range secrets {
			for i := 0; i+Fragment <= len(v); i++ {
				if strings.Contains(r, v[i:i+Fragment]) {
					return v[i : i+Fragment]
				}
			}
		}
	}
	return ""
}

// Escape writes the bytes of s whose bit is set in mask (cycled; nil
// means every byte) as \u escapes, hex in lower case, or upper when upper
// is set; the others as they are. s is ASCII, as tokens are.
func Escape(s string, mask []byte, upper bool) string {
	const lower, capital = "0123456789abcdef", "0123456789ABCDEF"
	digits := lower
	if upper {
		digits = capital
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if mask != nil && mask[i%len(mask)]&(1<<(i%8)) == 0 {
			b.WriteByte(s[i])
			continue
		}
		c := s[i]
		b.WriteString(`\u00`)
		b.WriteByte(digits[c>>4])
		b.WriteByte(digits[c&15])
	}
	return b.String()
}
