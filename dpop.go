package poppy

// DPoP (spec 4.3, RFC 9449).
//
// A dpopKey signs proofs. Its protected header {"typ","alg","jwk"} never
// changes, so it is encoded once; a proof is then a small payload written by
// hand, one SHA-256 and one ECDSA signature. The header carries only the
// public key (PA-4.3-03: a test checks that "d" never appears).
//
// Nonces (RFC 9449 section 8, 9) are kept per origin: any response's
// DPoP-Nonce header replaces the origin's nonce (PA-4.3-14), and the next
// proof to that origin carries it.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/poppyproto/poppy/internal/jose"
	"github.com/poppyproto/poppy/keystore"
)

type dpopKey struct {
	signer *jose.Signer
	jkt    string // RFC 7638 thumbprint of the public key
}

func newDPoPKey(priv *ecdsa.PrivateKey) (*dpopKey, error) {
	// PA-4.3-06: typ dpop+jwt, ES256, the public key only.
	header, err := jose.DPoPHeader(&priv.PublicKey)
	if err != nil {
		return nil, err
	}
	s, err := jose.NewSigner(priv, header)
	if err != nil {
		return nil, err
	}
	jkt, err := jose.Thumbprint(&priv.PublicKey)
	if err != nil {
		return nil, err
	}
	return &dpopKey{signer: s, jkt: jkt}, nil
}

// proof signs a DPoP proof for one request (jose.Proof; PA-4.3-05..11).
// htu is the request URL without query and fragment; ath is the token's
// hash, or "" at the token endpoint; nonce is the origin's nonce, or "".
func (k *dpopKey) proof(method, htu, ath, nonce string, now time.Time) (string, error) {
	return jose.Proof(k.signer, method, htu, ath, nonce, now)
}

// htuOf returns the URL without query and fragment (jose.HTU; PA-4.3-08).
func htuOf(u *url.URL) string { return jose.HTU(u) }

// storedKey is the keystore form of a DPoP private key.
type storedKey struct {
	D string `json:"d"`
}

// loadDPoPKey returns the DPoP key for (user, issuer, id), creating and
// storing it the first time. id is "" for the per-User key, or a Session
// name with KeyPerSession (PA-4.3-02, PA-4.3-04).
func (a *Agent) loadDPoPKey(ctx context.Context, user, issuer, id string) (*dpopKey, error) {
	key := keystore.Key{Kind: keystore.KindDPoPKey, User: user, Issuer: issuer, ID: id}
	var priv *ecdsa.PrivateKey
	parse := func(b []byte) error {
		var sk storedKey
		if err := json.Unmarshal(b, &sk); err != nil {
			return errors.New("poppy: stored DPoP key is corrupt")
		}
		d, err := base64.RawURLEncoding.DecodeString(sk.D)
		if err != nil {
			return errors.New("poppy: stored DPoP key is corrupt")
		}
		p, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), d)
		if err != nil {
			return errors.New("poppy: stored DPoP key is corrupt")
		}
		priv = p
		return nil
	}
	b, err := a.store.Get(ctx, key)
	switch {
	case err == nil:
		if err := parse(b); err != nil {
			return nil, err
		}
	case errors.Is(err, keystore.ErrNotFound):
		err = a.store.Update(ctx, key, func(cur []byte) ([]byte, error) {
			if cur != nil {
				return cur, parse(cur)
			}
			p, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
			if err != nil {
				return nil, err
			}
			d, err := p.Bytes()
			if err != nil {
				return nil, err
			}
			priv = p
			return json.Marshal(storedKey{D: base64.RawURLEncoding.EncodeToString(d)})
		})
		if err != nil {
			return nil, fmt.Errorf("poppy: storing DPoP key: %w", err)
		}
	default:
		return nil, fmt.Errorf("poppy: reading DPoP key: %w", err)
	}
	return newDPoPKey(priv)
}

// nonceCache holds the latest DPoP nonce per origin.
type nonceCache struct{ m sync.Map }

func (n *nonceCache) get(origin string) string {
	if v, ok := n.m.Load(origin); ok {
		return v.(string)
	}
	return ""
}

// learn records a DPoP-Nonce from any response (PA-4.3-14). A value that
// isn't a valid nonce (RFC 9449: NQCHAR) is ignored.
func (n *nonceCache) learn(u *url.URL, h http.Header) (string, bool) {
	v := h.Get("DPoP-Nonce")
	if v == "" || !validNonce(v) {
		return "", false
	}
	n.m.Store(originOf(u), v)
	return v, true
}

func validNonce(s string) bool {
	if len(s) > 1024 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x21 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// Bounds on what the SDK reads of WWW-Authenticate (a Company's input).
// The transport also caps response headers (maxResponseHeaderBytes), but a
// caller-supplied client may not, so the parser is bounded by itself.
const (
	// maxChallengeBytes is how much of the WWW-Authenticate values, in
	// total, is parsed; a challenge starting later is not seen.
	maxChallengeBytes = 8 << 10
	// maxScopes and maxScopeBytes bound Error.Scope: at most 64 scopes of
	// at most 128 bytes each.
	maxScopes     = 64
	maxScopeBytes = 128
)

// maxChallenges bounds how many DPoP and Bearer challenges are kept from
// one response.
const maxChallenges = 16

// challenge is one DPoP or Bearer challenge of WWW-Authenticate (RFC 9110
// section 11.6.1, RFC 6750 section 3, RFC 9449 section 7.1).
type challenge struct {
	scheme string // "DPoP" or "Bearer"
	code   string // the error attribute; "" when absent
	scope  []string
	// algs are the DPoP challenge's algs attribute (RFC 9449 section
	// 7.1): the proof algorithms the Company accepts; nil when absent.
	algs []string
}

// parseChallenges returns every DPoP and Bearer challenge in
// WWW-Authenticate, in order, at most maxChallenges of them (PA-6-04):
// several challenges in one header value or in several, quoted values,
// algs.
//
// It is one pass over at most maxChallengeBytes bytes, allocating only the
// values it returns: a header of a million "a," costs no more than a short
// one. The grammar is read leniently: a scheme, then comma-separated
// name=token or name="quoted" attributes, until the next scheme. Other
// schemes (Basic, ...) are skipped.
func parseChallenges(h http.Header) []challenge {
	var out []challenge
	budget := maxChallengeBytes
	for _, line := range h.Values("WWW-Authenticate") {
		if budget <= 0 || len(out) >= maxChallenges {
			break
		}
		if len(line) > budget {
			line = line[:budget]
		}
		budget -= len(line)
		out = scanChallenges(line, out)
	}
	return out
}

// pick returns the challenge with an error attribute of scheme, the one the
// token sent names (DPoP for the Session's DPoP token, Bearer for MCP), or
// else the first of any scheme that has one: a Company may answer a DPoP
// token with a Bearer challenge. ok is false when no challenge has an
// error.
func pick(cs []challenge, scheme string) (c challenge, ok bool) {
	for _, c := range cs {
		if c.code != "" && strings.EqualFold(c.scheme, scheme) {
			return c, true
		}
	}
	for _, c := range cs {
		if c.code != "" {
			return c, true
		}
	}
	return challenge{}, false
}

// dpopChallenge returns the error and scope of the challenge that answers
// a request sent with a DPoP token or proof: the DPoP challenge with an
// error, or else the first Bearer one (pick).
func dpopChallenge(h http.Header) (code string, scope []string, ok bool) {
	c, ok := pick(parseChallenges(h), "DPoP")
	return c.code, c.scope, ok
}

// requestScheme is the scheme of the token a request carried: "Bearer" for
// a Bearer token (MCP), "DPoP" otherwise.
func requestScheme(req *http.Request) string {
	if req != nil {
		if a := req.Header.Get("Authorization"); len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
			return "Bearer"
		}
	}
	return "DPoP"
}

// dpopAlgs returns the algs of the DPoP challenge in cs, nil when none
// names any.
func dpopAlgs(cs []challenge) []string {
	for _, c := range cs {
		if c.scheme == "DPoP" && c.algs != nil {
			return c.algs
		}
	}
	return nil
}

// scanChallenges appends the DPoP and Bearer challenges of one header value
// to out, up to maxChallenges in all.
func scanChallenges(s string, out []challenge) []challenge {
	var cur *challenge // the DPoP or Bearer challenge being read
	var haveErr, haveScope, haveAlgs bool
	i := 0
	for i < len(s) {
		// Skip separators.
		for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == ',') {
			i++
		}
		if i >= len(s) {
			break
		}
		// A token: a scheme or an attribute name.
		j := i
		for j < len(s) && s[j] != ' ' && s[j] != '\t' && s[j] != '=' && s[j] != ',' {
			j++
		}
		tok := s[i:j]
		k := j
		for k < len(s) && (s[k] == ' ' || s[k] == '\t') {
			k++
		}
		if k < len(s) && s[k] == '=' && j > i {
			// An attribute: name=value.
			k++
			for k < len(s) && (s[k] == ' ' || s[k] == '\t') {
				k++
			}
			var val string
			if k < len(s) && s[k] == '"' {
				val, k = quoted(s, k, cur != nil)
			} else {
				e := k
				for e < len(s) && s[e] != ',' && s[e] != ' ' && s[e] != '\t' {
					e++
				}
				val, k = s[k:e], e
			}
			if cur != nil {
				switch {
				case strings.EqualFold(tok, "error") && !haveErr:
					cur.code, haveErr = val, true
				case strings.EqualFold(tok, "scope") && !haveScope:
					cur.scope, haveScope = boundedScopes(val), true
				case strings.EqualFold(tok, "algs") && !haveAlgs && cur.scheme == "DPoP":
					cur.algs, haveAlgs = boundedAlgs(val), true
				}
			}
			i = k
			continue
		}
		if j == i {
			// A lone "=": skip it.
			i = j + 1
			continue
		}
		// A new challenge begins.
		cur, haveErr, haveScope, haveAlgs = nil, false, false, false
		if len(out) >= maxChallenges {
			break
		}
		switch {
		case strings.EqualFold(tok, "dpop"):
			out = append(out, challenge{scheme: "DPoP"})
			cur = &out[len(out)-1]
		case strings.EqualFold(tok, "bearer"):
			out = append(out, challenge{scheme: "Bearer"})
			cur = &out[len(out)-1]
		}
		i = j
	}
	return out
}

// maxAlgs bounds the algorithms kept from an algs attribute.
const maxAlgs = 16

// boundedAlgs splits an algs attribute (space-separated JWS algorithm
// names) into at most maxAlgs names of at most 32 bytes; an empty list is
// non-nil, so that "algs present but naming none" is told from absent.
func boundedAlgs(v string) []string {
	out := []string{}
	for _, a := range strings.Fields(v) {
		if len(out) == maxAlgs {
			break
		}
		if len(a) <= 32 && validNonce(a) {
			out = append(out, a)
		}
	}
	return out
}

// quoted reads the quoted-string starting at s[k] == '"' and returns its
// value (unescaped only when keep is set; otherwise "") and the index after
// it.
func quoted(s string, k int, keep bool) (string, int) {
	k++ // opening quote
	start := k
	escaped := false
	for k < len(s) && s[k] != '"' {
		if s[k] == '\\' && k+1 < len(s) {
			escaped = true
			k++
		}
		k++
	}
	raw := s[start:min(k, len(s))]
	if k < len(s) {
		k++ // closing quote
	}
	if !keep {
		return "", k
	}
	if !escaped {
		return raw, k
	}
	var b strings.Builder
	b.Grow(len(raw))
	for i := 0; i < len(raw); i++ {
		if raw[i] == '\\' && i+1 < len(raw) {
			i++
		}
		b.WriteByte(raw[i])
	}
	return b.String(), k
}

// boundedScopes splits a scope attribute (RFC 6749 section 3.3) into at
// most maxScopes scopes of at most maxScopeBytes bytes of NQCHAR each; a
// scope that breaks those rules is dropped.
func boundedScopes(v string) []string {
	var out []string
	for len(v) > 0 && len(out) < maxScopes {
		v = strings.TrimLeft(v, " ")
		i := strings.IndexByte(v, ' ')
		if i < 0 {
			i = len(v)
		}
		sc := v[:i]
		v = v[i:]
		if sc != "" && len(sc) <= maxScopeBytes && validNonce(sc) {
			out = append(out, sc)
		}
	}
	return out
}
