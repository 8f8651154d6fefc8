package poppytest

import (
	"bytes"
	"crypto"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jws"
)

// maxJWS bounds every compact JWS the fake parses.
const maxJWS = 16 << 10

var b64 = base64.RawURLEncoding

// compactJWS is a strictly split compact JWS: three base64url segments
// without padding, a JSON object header and a JSON object payload.
type compactJWS struct {
	compact   string
	header    map[string]any
	claims    map[string]any
	rawHeader []byte
	rawClaims []byte
	sig       []byte
}

var errMalformed = errors.New("malformed compact JWS")

func splitJWS(s string) (*compactJWS, error) {
	if len(s) == 0 || len(s) > maxJWS {
		return nil, errMalformed
	}
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return nil, errMalformed
	}
	h, err := b64.DecodeString(parts[0])
	if err != nil {
		return nil, errMalformed
	}
	p, err := b64.DecodeString(parts[1])
	if err != nil {
		return nil, errMalformed
	}
	sig, err := b64.DecodeString(parts[2])
	if err != nil || len(sig) == 0 {
		return nil, errMalformed
	}
	hdr, err := decodeObject(h)
	if err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	claims, err := decodeObject(p)
	if err != nil {
		return nil, fmt.Errorf("payload: %w", err)
	}
	return &compactJWS{compact: s, header: hdr, claims: claims, rawHeader: h, rawClaims: p, sig: sig}, nil
}

// decodeObject decodes one JSON object, keeping numbers as json.Number and
// refusing trailing data.
func decodeObject(b []byte) (map[string]any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil || m == nil {
		return nil, errors.New("not a JSON object")
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errors.New("trailing data after JSON object")
	}
	return m, nil
}

func str(m map[string]any, k string) (string, bool) {
	v, ok := m[k].(string)
	return v, ok
}

// num reads an integer or fractional JSON number claim as Unix seconds.
func num(m map[string]any, k string) (float64, bool) {
	n, ok := m[k].(json.Number)
	if !ok {
		return 0, false
	}
	f, err := n.Float64()
	return f, err == nil
}

// privateJWKMembers are the members that only a private or symmetric key has.
var privateJWKMembers = []string{"d", "p", "q", "dp", "dq", "qi", "oth", "k"}

func hasPrivateMembers(m map[string]any) bool {
	for _, k := range privateJWKMembers {
		if _, ok := m[k]; ok {
			return true
		}
	}
	return false
}

// thumbprint returns the RFC 7638 SHA-256 thumbprint of key, base64url.
func thumbprint(key jwk.Key) (string, error) {
	tp, err := key.Thumbprint(crypto.SHA256)
	if err != nil {
		return "", err
	}
	return b64.EncodeToString(tp), nil
}

// assertionAlgs are the algorithms the fake accepts on client, Session and
// (later) browser assertions: asymmetric ones only.
var assertionAlgs = map[string]jwa.SignatureAlgorithm{
	"ES256": jwa.ES256(), "ES384": jwa.ES384(), "ES512": jwa.ES512(),
	"RS256": jwa.RS256(), "RS384": jwa.RS384(), "RS512": jwa.RS512(),
	"PS256": jwa.PS256(), "PS384": jwa.PS384(), "PS512": jwa.PS512(),
	"EdDSA": jwa.EdDSA(),
}

// verifyWithSet verifies j against the keys of set, choosing candidates by
// kid when the header has one.
func verifyWithSet(j *compactJWS, set jwk.Set) error {
	algName, _ := str(j.header, "alg")
	alg, ok := assertionAlgs[algName]
	if !ok {
		return fmt.Errorf("alg %q not accepted", algName)
	}
	kid, hasKid := str(j.header, "kid")
	for i := range set.Len() {
		key, _ := set.Key(i)
		if hasKid {
			if k, ok := key.KeyID(); !ok || k != kid {
				continue
			}
		}
		if _, err := jws.VerifyCompactFast(key, []byte(j.compact), alg); err == nil {
			return nil
		}
	}
	if hasKid {
		return fmt.Errorf("no key with kid %q verifies the signature", kid)
	}
	return errors.New("no published key verifies the signature")
}

func decodeJWTForLog(s string) *JWT {
	if s == "" {
		return nil
	}
	j, err := splitJWS(s)
	if err != nil {
		return nil
	}
	return &JWT{Compact: s, Header: j.header, Claims: j.claims, RawHeader: j.rawHeader, RawClaims: j.rawClaims}
}
