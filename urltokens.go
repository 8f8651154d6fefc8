package poppy

// Tokens in URLs (spec 4.3: "Personal Agents MUST NOT send tokens in a
// URL", PA-4.3-26).
//
// A URL reaches the Company's logs, proxies' logs, browser histories and
// Referer headers, so a token in one is as good as published. The
// transport refuses, before sending, a request whose URL carries a token
// the Session holds: any of its current Session Tokens (DPoP and Bearer,
// of every resource and scope), a Session Token a renewal replaced until
// it expires (the Company still accepts it until then), and the Account
// Token it last used or got. Every part of the URL is searched (userinfo,
// host, path, query, fragment), as written and after each of up to four
// rounds of percent-decoding (%XX, and the legacy %uXXXX for ASCII), so
// that "%2B" for "+", an encoded letter or a double encoding a server or
// an application behind it would undo doesn't hide a token. The host is
// compared without regard to case, as DNS does. A token shorter than
// minTokenScan bytes can't be told from ordinary URL text, so it is looked
// for only as a whole path segment, query key or value, or host label.

import (
	"net/url"
	"strings"
	"time"
)

// heldTokens are the token values a Session holds beyond s.tokens, guarded
// by s.mu.
type heldTokens struct {
	retired []retiredToken // oldest first, at most maxRetired
	account string         // the Account Token last used or stored
}

type retiredToken struct {
	value  string
	expiry time.Time
}

// maxRetired bounds the replaced Session Tokens a Session remembers.
const maxRetired = 8

// minTokenScan is the shortest token searched for inside URL text.
const minTokenScan = 8

// retireLocked remembers the tokens of s.tokens that next doesn't keep and
// that have not expired. s.mu is held.
func (s *Session) retireLocked(next map[tokenKey]*Token) {
	if len(s.tokens) == 0 {
		return
	}
	now := s.agent.clock.Now()
	r := s.held.retired[:0:0]
	for _, old := range s.held.retired {
		if now.Before(old.expiry) {
			r = append(r, old)
		}
	}
	for k, t := range s.tokens {
		if n := next[k]; (n == nil || n.value != t.value) && now.Before(t.Expiry) {
			r = append(r, retiredToken{value: t.value, expiry: t.Expiry})
		}
	}
	if len(r) > maxRetired {
		r = r[len(r)-maxRetired:]
	}
	if len(r) == 0 {
		r = nil
	}
	s.held.retired = r
}

// holdAccountToken notes the Account Token value the Session just used or
// stored, for tokenInURL.
func (s *Session) holdAccountToken(v string) {
	if v == "" {
		return
	}
	s.mu.Lock()
	s.held.account = v
	s.mu.Unlock()
}

// tokenInURL reports whether u carries a token the Session holds.
func (s *Session) tokenInURL(u *url.URL) bool {
	var buf [6]string
	vals := buf[:0]
	s.mu.Lock()
	for _, t := range s.tokens {
		vals = append(vals, t.value)
	}
	for _, r := range s.held.retired {
		vals = append(vals, r.value)
	}
	if s.held.account != "" {
		vals = append(vals, s.held.account)
	}
	s.mu.Unlock()
	return urlCarries(u, vals)
}

// urlCarries reports whether any of tokens appears in u.
func urlCarries(u *url.URL, tokens []string) bool {
	if len(tokens) == 0 {
		return false
	}
	parts := [...]string{u.Opaque, u.Path, u.RawPath, u.RawQuery, u.Fragment, u.RawFragment, "", ""}
	if u.User != nil {
		parts[6] = u.User.Username()
		parts[7], _ = u.User.Password()
	}
	for _, p := range parts {
		if p != "" && textCarries(p, tokens, false) {
			return true
		}
	}
	return u.Host != "" && textCarries(u.Host, tokens, true)
}

// textCarries reports whether text, or text percent-decoded up to four
// times, holds one of tokens; fold compares without regard to case.
func textCarries(text string, tokens []string, fold bool) bool {
	for round := 0; ; round++ {
		for _, t := range tokens {
			if t != "" && holds(text, t, fold) {
				return true
			}
		}
		if round == 4 || !strings.Contains(text, "%") {
			return false
		}
		next := percentDecode(text)
		if next == text {
			return false
		}
		text = next
	}
}

// holds reports whether text holds tok: anywhere for a token of
// minTokenScan bytes or more, else as a whole component between URL
// delimiters.
func holds(text, tok string, fold bool) bool {
	if len(tok) > len(text) {
		return false
	}
	if len(tok) >= minTokenScan && strings.Contains(text, tok) {
		return true
	}
	if len(tok) >= minTokenScan && !fold {
		return false
	}
	for i := 0; i+len(tok) <= len(text); i++ {
		w := text[i : i+len(tok)]
		if w != tok && !(fold && strings.EqualFold(w, tok)) {
			continue
		}
		if len(tok) >= minTokenScan {
			return true
		}
		if (i == 0 || isURLDelim(text[i-1])) && (i+len(tok) == len(text) || isURLDelim(text[i+len(tok)])) {
			return true
		}
	}
	return false
}

func isURLDelim(c byte) bool {
	return strings.IndexByte("/?#&=;.:@,", c) >= 0
}

// percentDecode decodes every %XX, and %uXXXX below U+0080, leaving any
// other '%' as it is.
func percentDecode(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c != '%':
		case i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]):
			c = unhex(s[i+1])<<4 | unhex(s[i+2])
			i += 2
		case i+5 < len(s) && (s[i+1] == 'u' || s[i+1] == 'U') && s[i+2] == '0' && s[i+3] == '0' &&
			isHex(s[i+4]) && isHex(s[i+5]) && unhex(s[i+4]) < 8:
			c = unhex(s[i+4])<<4 | unhex(s[i+5])
			i += 5
		}
		b.WriteByte(c)
	}
	return b.String()
}
