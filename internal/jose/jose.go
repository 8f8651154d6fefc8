// Package jose builds the compact ES256 JWTs the SDK signs on its hot paths:
// DPoP proofs, client assertions, Session and browser assertions.
//
// The payloads are small and their shape is fixed, so they are written by
// hand into one buffer instead of through a generic JWS library: a proof then
// costs little more than the ECDSA signature itself (see the benchmarks in
// the root package). Verification, JWK parsing and thumbprints use
// github.com/lestrrat-go/jwx/v3 elsewhere.
package jose

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"unicode/utf8"
	"unsafe"
)

var b64 = base64.RawURLEncoding

// ErrNotP256 is returned for a key that is not an ECDSA P-256 key.
var ErrNotP256 = errors.New("jose: key is not an ECDSA P-256 key")

// PublicJWK returns the members of the public JWK of an ECDSA P-256 key,
// in the lexicographic order RFC 7638 uses for thumbprints. It never holds d.
func PublicJWK(pub *ecdsa.PublicKey) (x, y string, err error) {
	if pub == nil || pub.Curve != elliptic.P256() {
		return "", "", ErrNotP256
	}
	raw, err := pub.Bytes() // 0x04 || X || Y
	if err != nil {
		return "", "", ErrNotP256
	}
	return b64.EncodeToString(raw[1:33]), b64.EncodeToString(raw[33:65]), nil
}

// PublicJWKJSON returns {"crv":"P-256","kty":"EC","x":…,"y":…}, with members
// in RFC 7638 order, optionally with extra members such as kid, alg and use
// appended after them.
func PublicJWKJSON(pub *ecdsa.PublicKey, extra ...string) ([]byte, error) {
	x, y, err := PublicJWK(pub)
	if err != nil {
		return nil, err
	}
	b := []byte(`{"crv":"P-256","kty":"EC","x":"` + x + `","y":"` + y + `"`)
	for i := 0; i+1 < len(extra); i += 2 {
		b = append(b, ',')
		b = AppendString(b, extra[i])
		b = append(b, ':')
		b = AppendString(b, extra[i+1])
	}
	return append(b, '}'), nil
}

// Thumbprint returns the RFC 7638 SHA-256 JWK thumbprint of pub, base64url.
func Thumbprint(pub *ecdsa.PublicKey) (string, error) {
	j, err := PublicJWKJSON(pub)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(j)
	return b64.EncodeToString(sum[:]), nil
}

// Signer signs ES256 JWTs with one key. Its header segment is encoded once.
type Signer struct {
	priv   *ecdsa.PrivateKey
	header string // base64url of the protected header, ending before the '.'
	rand   io.Reader
}

// NewSigner returns a Signer whose JWTs carry header (a JSON object).
func NewSigner(priv *ecdsa.PrivateKey, header []byte) (*Signer, error) {
	if priv == nil || priv.Curve != elliptic.P256() {
		return nil, ErrNotP256
	}
	return &Signer{priv: priv, header: b64.EncodeToString(header), rand: rand.Reader}, nil
}

// Sign returns the compact JWS of payload: header.payload.signature.
func (s *Signer) Sign(payload []byte) (string, error) {
	n := len(s.header) + 1 + b64.EncodedLen(len(payload)) + 1 + 86
	buf := make([]byte, 0, n)
	buf = append(buf, s.header...)
	buf = append(buf, '.')
	buf = b64.AppendEncode(buf, payload)
	sum := sha256.Sum256(buf)
	r, sv, err := ecdsa.Sign(s.rand, s.priv, sum[:])
	if err != nil {
		return "", err
	}
	var sig [64]byte
	r.FillBytes(sig[:32])
	sv.FillBytes(sig[32:])
	buf = append(buf, '.')
	buf = b64.AppendEncode(buf, sig[:])
	// buf is never written again: the string shares its bytes (one
	// allocation less on every request).
	return unsafe.String(unsafe.SliceData(buf), len(buf)), nil
}

// RandomID returns n random bytes, base64url-encoded without padding.
func RandomID(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic("jose: crypto/rand failed: " + err.Error()) // crypto/rand never fails on supported platforms
	}
	return b64.EncodeToString(b)
}

// Hash returns base64url(SHA-256(s)), as used for DPoP ath.
func Hash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return b64.EncodeToString(sum[:])
}

// AppendString appends s as a JSON string.
func AppendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// Claims appends JSON members to a payload under construction.
type Claims struct{ b []byte }

// NewClaims starts a JSON object with room for n bytes.
func NewClaims(n int) *Claims { return &Claims{b: append(make([]byte, 0, n), '{')} }

// String adds a string member.
func (c *Claims) String(name, v string) *Claims {
	c.sep()
	c.b = append(c.b, '"')
	c.b = append(c.b, name...)
	c.b = append(c.b, '"', ':')
	c.b = AppendString(c.b, v)
	return c
}

// Random adds a string member of n random bytes, base64url-encoded without
// padding, as RandomID does, written straight into the payload. n is at
// most 32.
func (c *Claims) Random(name string, n int) *Claims {
	var b [32]byte
	if _, err := rand.Read(b[:n]); err != nil {
		panic("jose: crypto/rand failed: " + err.Error()) // crypto/rand never fails on supported platforms
	}
	c.sep()
	c.b = append(c.b, '"')
	c.b = append(c.b, name...)
	c.b = append(c.b, '"', ':', '"')
	c.b = b64.AppendEncode(c.b, b[:n])
	c.b = append(c.b, '"')
	return c
}

// Int adds an integer member.
func (c *Claims) Int(name string, v int64) *Claims {
	c.sep()
	c.b = append(c.b, '"')
	c.b = append(c.b, name...)
	c.b = append(c.b, '"', ':')
	c.b = strconv.AppendInt(c.b, v, 10)
	return c
}

// Raw adds a member whose value is already JSON.
func (c *Claims) Raw(name string, v []byte) *Claims {
	c.sep()
	c.b = append(c.b, '"')
	c.b = append(c.b, name...)
	c.b = append(c.b, '"', ':')
	c.b = append(c.b, v...)
	return c
}

func (c *Claims) sep() {
	if len(c.b) > 1 {
		c.b = append(c.b, ',')
	}
}

// Bytes closes the object and returns it.
func (c *Claims) Bytes() []byte { return append(c.b, '}') }
