// Package redact takes secrets out of text bound for a model, whole or in
// part (PA-4.8-08). It is the module's one place that finds a secret in
// text: Secrets (the values a Session holds), JWS (anything shaped like a
// JWS or JWT: Account Tokens, DPoP proofs, assertions) and Carries (does a
// text hold a secret at all, for a check).
//
// Text is often cut to a bound before it reaches the model, by this module
// or by whoever wrote it first (a Company's error_description is kept to
// 200 bytes, an error to 500). A secret cut in two is still mostly a
// secret, so Secrets finds fragments too: any stretch of at least
// MinFragment bytes of a secret, wherever it is, and at a cut (the end of
// the text, or a "…" that marks one) any prefix of a secret of at least
// MinCut bytes. Callers scrub first and cut after, so that their own cut
// never splits a secret; the fragment rules catch the cuts made before.
//
// A model reads JSON as a JSON decoder does, and what a Company returns
// reaches it as JSON: "\u0051\u006d…" is "Qm…" to the model. So every
// function here looks for a secret in the text as it is and in each
// reading a JSON decoder makes of it (readings.go): every escape undone
// (\uXXXX of any character in either case of hex, surrogate pairs, \/,
// \", \\, \n and the others), and again in what that leaves, for JSON text
// carried inside a JSON string, up to MaxReadings levels deep. What it
// finds in a reading is replaced in the text where it came from, escapes
// and all, so that JSON stays JSON.
package redact

import (
	"encoding/json"
	"regexp"
	"slices"
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
// occurrence of one, each stretch of at least MinFragment bytes of one,
// and each prefix of one of at least MinCut bytes that ends s or is
// followed by Ellipsis, found in s as it is or as a JSON decoder reads it
// (escaped in any way, at any of MaxReadings levels). Empty secrets are
// skipped; one shorter than MinFragment is only replaced whole.
func Secrets(s string, secrets []string) string {
	m := newMatcher(secrets)
	if m == nil || s == "" {
		return s
	}
	return replace(s, find(s, m.spans))
}

// JWS returns s with every string shaped like a JWS or JWT replaced by
// Mark, in s as it is or as a JSON decoder reads it: Account Tokens, DPoP
// proofs, assertions; none is for a model. It finds the header and payload
// of one that was cut too (a JWT's payload is a JSON object, "eyJ…"), and
// a header cut before its payload where an Ellipsis marks the cut (the
// Ellipsis stays).
func JWS(s string) string {
	if s == "" {
		return s
	}
	return replace(s, find(s, jwsSpans))
}

// Carries reports whether text carries secret whole: as it is, or in a
// reading a JSON decoder makes of it (escaped in any way, at any of
// MaxReadings levels). It is the question "does this answer hold the
// credential I sent" that a check of a Company asks; an empty secret is
// carried by nothing. A secret shorter than ShortSecret bytes (a PIN, a
// code a person types) is carried only as a word of its own: "1234"
// inside "ord_81234" or "2024-12-31" is chance, not an echo, and a
// Company can't avoid every short string in its IDs, amounts and dates.
func Carries(text, secret string) bool {
	if secret == "" {
		return false
	}
	holds := strings.Contains
	if len(secret) < ShortSecret {
		holds = containsWord
	}
	if holds(text, secret) {
		return true
	}
	for _, r := range readings(text) {
		if holds(r.text, secret) {
			return true
		}
	}
	return false
}

// ShortSecret is the length under which Carries finds a secret only as a
// word of its own.
const ShortSecret = 8

// containsWord reports whether v occurs in s with neither neighbour a
// letter, a digit or a character that joins words into IDs, numbers and
// dates ("-_./:+@", or any byte of a multi-byte character).
func containsWord(s, v string) bool {
	joins := func(c byte) bool {
		return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80 || strings.IndexByte("-_./:+@", c) >= 0
	}
	for i := 0; ; {
		j := strings.Index(s[i:], v)
		if j < 0 {
			return false
		}
		j += i
		end := j + len(v)
		if (j == 0 || !joins(s[j-1])) && (end == len(s) || !joins(s[end])) {
			return true
		}
		i = j + 1
	}
}

// span is the bytes [start, end) of a text.
type span struct{ start, end int }

// find returns the spans that f finds in s and in each reading of s, in
// s's bytes. A span found in s as it stands that begins or ends inside an
// escape ("u0041…" may be part of a secret) is widened to the whole
// escape, so that no lone backslash is left to break the JSON; a span
// found in a reading covers whole escapes already.
func find(s string, f func(string) []span) []span {
	out := f(s)
	rs := readings(s)
	if len(rs) > 0 {
		for i := range out {
			out[i] = rs[0].widen(out[i])
		}
	}
	for _, r := range rs {
		for _, sp := range f(r.text) {
			out = append(out, r.orig(sp))
		}
	}
	return out
}

// replace returns s with each span replaced by Mark: spans that overlap
// become one, spans that only touch stay two.
func replace(s string, spans []span) string {
	if len(spans) == 0 {
		return s
	}
	slices.SortFunc(spans, func(a, b span) int { return a.start - b.start })
	var b strings.Builder
	b.Grow(len(s))
	last := 0 // s[last:] is not yet written
	for i := 0; i < len(spans); {
		cur := spans[i]
		for i++; i < len(spans) && spans[i].start < cur.end; i++ {
			cur.end = max(cur.end, spans[i].end)
		}
		b.WriteString(s[last:cur.start])
		b.WriteString(Mark)
		last = cur.end
	}
	b.WriteString(s[last:])
	return b.String()
}

// matcher finds the secrets of one call of Secrets in a text.
type matcher struct {
	short []string            // secrets shorter than MinFragment: found whole
	long  []string            // the others: found whole, in part, or cut
	grams map[string]struct{} // every MinFragment bytes of a long secret
}

// newMatcher returns the matcher of secrets, nil if they are all empty.
// Each secret is looked for as it is and JSON-escaped as encoding/json
// writes it, so that a prefix of its escaped form left by a cut is found
// too.
func newMatcher(secrets []string) *matcher {
	m := &matcher{grams: map[string]struct{}{}}
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
				m.short = append(m.short, f)
				continue
			}
			m.long = append(m.long, f)
			for i := 0; i+MinFragment <= len(f); i++ {
				m.grams[f[i:i+MinFragment]] = struct{}{}
			}
		}
	}
	if len(m.short) == 0 && len(m.long) == 0 {
		return nil
	}
	return m
}

// spans returns where s holds a secret: whole (a short one), a stretch of
// at least MinFragment bytes of one, or a prefix of one of at least MinCut
// bytes at a cut.
func (m *matcher) spans(s string) []span {
	var out []span
	for _, v := range m.short {
		for i := 0; ; {
			j := strings.Index(s[i:], v)
			if j < 0 {
				break
			}
			out = append(out, span{i + j, i + j + len(v)})
			i += j + len(v)
		}
	}
	if len(m.long) == 0 {
		return out
	}
	return m.cuts(s, m.fragments(s, out))
}

// fragments appends every stretch of s of at least MinFragment bytes that
// is a substring of a secret, longest first from the left.
func (m *matcher) fragments(s string, out []span) []span {
	for i := 0; i+MinFragment <= len(s); {
		if _, ok := m.grams[s[i:i+MinFragment]]; !ok {
			i++
			continue
		}
		j := i + MinFragment
		for j < len(s) && inAny(s[i:j+1], m.long) {
			j++
		}
		out = append(out, span{i, j})
		i = j
	}
	return out
}

func inAny(sub string, secrets []string) bool {
	for _, v := range secrets {
		if strings.Contains(v, sub) {
			return true
		}
	}
	return false
}

// cuts appends each prefix of a secret, of at least MinCut bytes, that ends
// s or stands before an Ellipsis.
func (m *matcher) cuts(s string, out []span) []span {
	from := 0 // where the text since the last cut begins
	for {
		q := strings.Index(s[from:], Ellipsis)
		end := len(s)
		if q >= 0 {
			end = from + q
		}
		if k := cutPrefix(s[from:end], m.long); k > 0 {
			out = append(out, span{end - k, end})
		}
		if q < 0 {
			return out
		}
		from = end + len(Ellipsis)
	}
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

// jwsRE matches anything shaped like a JWS or JWT, and the header and
// payload of one that was cut (a JWT's payload is a JSON object, "eyJ…");
// cutJWSRE a header cut before its payload, where a cut marks it.
var (
	jwsRE    = regexp.MustCompile(`eyJ[A-Za-z0-9_-]{4,}\.(?:[A-Za-z0-9_-]*\.[A-Za-z0-9_-]+|eyJ[A-Za-z0-9_-]*)`)
	cutJWSRE = regexp.MustCompile(`eyJ[A-Za-z0-9_-]{4,}\.?` + Ellipsis)
)

func jwsSpans(s string) []span {
	var out []span
	for _, m := range jwsRE.FindAllStringIndex(s, -1) {
		out = append(out, span{m[0], m[1]})
	}
	for _, m := range cutJWSRE.FindAllStringIndex(s, -1) {
		out = append(out, span{m[0], m[1] - len(Ellipsis)}) // the cut's mark stays
	}
	return out
}
