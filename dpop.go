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
	c := jose.NewClaims(160+len(htu)+len(nonce)).
		String("jti", jose.RandomID(12)).
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

// challenge is a parsed WWW-Authenticate challenge.
type challenge struct {
	scheme string
	params map[string]string
}

// parseChallenges parses WWW-Authenticate headers (RFC 9110 section 11.6.1)
// leniently: scheme, then comma-separated name=value or name="quoted".
func parseChallenges(h http.Header) []challenge {
	var out []challenge
	for _, line := range h.Values("WWW-Authenticate") {
		s := line
		var cur *challenge
		for {
			s = strings.TrimLeft(s, " \t,")
			if s == "" {
				break
			}
			// token
			i := strings.IndexAny(s, " \t=,")
			if i < 0 {
				i = len(s)
			}
			tok := s[:i]
			rest := strings.TrimLeft(s[i:], " \t")
			if strings.HasPrefix(rest, "=") && cur != nil {
				rest = strings.TrimLeft(rest[1:], " \t")
				var val string
				if strings.HasPrefix(rest, `"`) {
					var b strings.Builder
					j := 1
					for ; j < len(rest); j++ {
						if rest[j] == '\\' && j+1 < len(rest) {
							j++
							b.WriteByte(rest[j])
							continue
						}
						if rest[j] == '"' {
							break
						}
						b.WriteByte(rest[j])
					}
					val = b.String()
					rest = rest[min(j+1, len(rest)):]
				} else {
					k := strings.IndexAny(rest, ", \t")
					if k < 0 {
						k = len(rest)
					}
					val, rest = rest[:k], rest[k:]
				}
				cur.params[strings.ToLower(tok)] = val
				s = rest
				continue
			}
			out = append(out, challenge{scheme: strings.ToLower(tok), params: map[string]string{}})
			cur = &out[len(out)-1]
			s = rest
		}
	}
	return out
}

// dpopChallenge returns the DPoP (or Bearer) challenge's error and scope.
func dpopChallenge(h http.Header) (code string, scope []string, ok bool) {
	for _, c := range parseChallenges(h) {
		if c.scheme == "dpop" || c.scheme == "bearer" {
			if e := c.params["error"]; e != "" {
				return e, strings.Fields(c.params["scope"]), true
			}
		}
	}
	return "", nil, false
}
