// Package redact takes secrets out of text bound for a model, whole or in
// part (PA-4.8-08).
//
// Text is often cut to a bound before it reaches the model, by this module
// or by whoever wrote it first (a Company's error_description is kept to
// 200 bytes, an error to 500). A secret cut in two is still mostly a
// secret, so Secrets finds fragments too: any stretch of at least
// MinFragment bytes of a secret, wherever it is, and at a cut (the end of
// the text, or a "…" that marks one) any prefix of a secret of at least
// MinCut bytes. Callers scrub first and cut after, so that their own cut
// never splits a secret; the fragment rules catch the cuts made before.
package redact

import (
	"encoding/json"
	"strings"
)

// Mark replaces what is redacted.
const Mark = "[redacted]"

// MinFragment is the shortest stretch of a secret redacted anywhere in a
// text; MinCut the shortest prefix of one redacted at a cut. Shorter
// pieces of a random token of 32 bytes or more leave most of it unknown,
// and matching them would cut ordinary text.
const (
	MinFragment = 8
	MinCut      = 4
)

// Ellipsis marks where this module cut a text.
const Ellipsis = "…"

// Secrets returns s with every secret in secrets replaced by Mark: each
// occurrence of one (and of its JSON-escaped form), each stretch of at
// least MinFragment bytes of one, and each prefix of one of at least
// MinCut bytes that ends s or is followed by Ellipsis. Empty secrets are
// skipped; one shorter than MinFragment is only replaced whole.
func Secrets(s string, secrets []string) string {
	var long []string
	for _, v := range secrets {
		if v == "" {
			continue
		}
		forms := []string{v}
		if b, err := json.Marshal(v); err == nil && string(b[1:len(b)-1]) != v {
			forms = append(forms, string(b[1:len(b)-1]))
		}
		for _, f := range forms {
			if len(f) < MinFragment {
				s = strings.ReplaceAll(s, f, Mark)
			} else {
				long = append(long, f)
			}
		}
	}
	if len(long) == 0 || s == "" {
		return s
	}
	return cuts(fragments(s, long), long)
}

// fragments replaces every stretch of s of at least MinFragment bytes that
// is a substring of a secret, longest first from the left.
func fragments(s string, secrets []string) string {
	grams := map[string]struct{}{}
	for _, v := range secrets {
		for i := 0; i+MinFragment <= len(v); i++ {
			grams[v[i:i+MinFragment]] = struct{}{}
		}
	}
	var b strings.Builder
	last := 0 // s[last:i] is not yet written
	for i := 0; i+MinFragment <= len(s); {
		if _, ok := grams[s[i:i+MinFragment]]; !ok {
			i++
			continue
		}
		j := i + MinFragment
		for j < len(s) && inAny(s[i:j+1], secrets) {
			j++
		}
		if b.Len() == 0 {
			b.Grow(len(s))
		}
		b.WriteString(s[last:i])
		b.WriteString(Mark)
		last, i = j, j
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

func inAny(sub string, secrets []string) bool {
	for _, v := range secrets {
		if strings.Contains(v, sub) {
			return true
		}
	}
	return false
}

// cuts replaces a prefix of a secret, of at least MinCut bytes, that ends
// s or stands before an Ellipsis.
func cuts(s string, secrets []string) string {
	var b strings.Builder
	last := 0
	for p := 0; p <= len(s); {
		q := strings.Index(s[p:], Ellipsis)
		end := len(s)
		if q >= 0 {
			end = p + q
		}
		if k := cutPrefix(s[last:end], secrets); k > 0 {
			b.WriteString(s[last : end-k])
			b.WriteString(Mark)
			last = end
		}
		if q < 0 {
			break
		}
		p = end + len(Ellipsis)
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// cutPrefix returns the length of the longest suffix of s, at least
// MinCut bytes, that is a prefix of a secret; 0 if none.
func cutPrefix(s string, secrets []string) int {
	best := 0
	for _, v := range secrets {
		for k := min(len(v), len(s)); k >= MinCut && k > best; k-- {
			if s[len(s)-k:] == v[:k] {
				best = k
				break
			}
		}
	}
	return best
}
