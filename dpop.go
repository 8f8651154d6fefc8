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
	x, y, err := jose.PublicJWK(&priv.PublicKey)
	if err != nil {
		return nil, err
	}
	// PA-4.3-06: typ dpop+jwt, ES256, the public key only.
	header := []byte(`{"typ":"dpop+jwt","alg":"ES256","jwk":{"kty":"EC","crv":"P-256","x":"` + x + `","y":"` + y + `"}}`)
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

// proof signs a DPoP proof for one request (PA-4.3-05..11). htu is the
// request URL without query and fragment; ath is the token's hash, or "" at
// the token endpoint; nonce is the origin's nonce, or "".
func (k *dpopKey) proof(method, htu, ath, nonce string, now time.Time) (string, error) {
	c := jose.NewClaims(168+len(htu)+len(nonce)).
		Random("jti", 16). // 128 bits: what assertions need too
		String("htm", method).
		String("htu", htu).
		Int("iat", now.Unix())
	if ath != "" {
		c.String("ath", ath)
	}
	if nonce != "" {
		c.String("nonce", nonce)
	}
	return k.signer.Sign(c.Bytes())
}

// htuOf returns the URL without query and fragment (PA-4.3-08).
func htuOf(u *url.URL) string {
	scheme := strings.ToLower(u.Scheme)
	host := strings.ToLower(u.Host)
	path := u.EscapedPath()
	if path == "" {
		path = "/"
	}
	return scheme + "://" + host + path
}

// originOf returns scheme://host of u, lower-cased.
func originOf(u *url.URL) string { return strings.ToLower(u.Scheme + "://" + u.Host) }

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

// dpopChallenge returns the error and scope of the first DPoP or Bearer
// challenge in WWW-Authenticate that has an error attribute (RFC 9110
// section 11.6.1, RFC 6750 section 3, RFC 9449 section 7.1).
//
// It is one pass over at most maxChallengeBytes bytes, allocating only the
// two values it returns: a header of a million "a," costs no more than a
// short one. The grammar is read leniently: a scheme, then comma-separated
// name=token or name="quoted" attributes, until the next scheme.
func dpopChallenge(h http.Header) (code string, scope []string, ok bool) {
	budget := maxChallengeBytes
	for _, line := range h.Values("WWW-Authenticate") {
		if budget <= 0 {
			break
		}
		if len(line) > budget {
			line = line[:budget]
		}
		budget -= len(line)
		if code, scope, ok = scanChallenges(line); ok {
			return code, scope, true
		}
	}
	return "", nil, false
}

// scanChallenges is dpopChallenge for one header value.
func scanChallenges(s string) (code string, scope []string, ok bool) {
	wanted := false // inside a DPoP or Bearer challenge
	var errVal, scopeVal string
	var haveErr bool
	finish := func() bool {
		if wanted && haveErr && errVal != "" {
			code, scope, ok = errVal, boundedScopes(scopeVal), true
			return true
		}
		return false
	}
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
				val, k = quoted(s, k, wanted)
			} else {
				e := k
				for e < len(s) && s[e] != ',' && s[e] != ' ' && s[e] != '\t' {
					e++
				}
				val, k = s[k:e], e
			}
			if wanted {
				switch {
				case strings.EqualFold(tok, "error") && !haveErr:
					errVal, haveErr = val, true
				case strings.EqualFold(tok, "scope") && scopeVal == "":
					scopeVal = val
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
		// A new challenge begins: settle the previous one.
		if finish() {
			return code, scope, ok
		}
		wanted = strings.EqualFold(tok, "dpop") || strings.EqualFold(tok, "bearer")
		errVal, scopeVal, haveErr = "", "", false
		i = j
	}
	finish()
	return code, scope, ok
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
