package poppytest

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwe"
)

// embeddedCredentialMarker starts the backend session blob that
// EmbedCredentials seals into every Session Token. It never appears in a
// token, nor in any base64url-decoded segment of one (CO-4.2-13).
const embeddedCredentialMarker = "POPPYTEST-BACKEND-SESSION"

// tokenCrypter holds the keys of the fake's own token formats: an AES-256
// key for the JWE (dir, A256GCM) of EmbedCredentials and an HMAC key for
// JWTTokens.
type tokenCrypter struct {
	aesKey  []byte
	hmacKey []byte
}

func newTokenCrypter() (*tokenCrypter, error) {
	c := &tokenCrypter{aesKey: make([]byte, 32), hmacKey: make([]byte, 32)}
	if _, err := rand.Read(c.aesKey); err != nil {
		return nil, err
	}
	if _, err := rand.Read(c.hmacKey); err != nil {
		return nil, err
	}
	return c, nil
}

// mintToken returns a new Session Token value for Session sid: 32 random
// bytes by default; a JWE sealing the backend blob with EmbedCredentials;
// a JWT whose exp claims 1 s with JWTTokens (with the JWE in its "cred"
// claim when both are set). Token contents never matter to the fake: it
// looks tokens up by value.
func (s *Server) mintToken(sid string, now time.Time, ttl time.Duration) string {
	sealed := ""
	if s.opts.Tokens.EmbedCredentials {
		blob, _ := json.Marshal(map[string]any{
			"backend_session": embeddedCredentialMarker + ":" + sid,
			"jti":             newID("", 12),
		})
		enc, err := jwe.Encrypt(blob, jwe.WithKey(jwa.DIRECT(), s.tokenCrypter.aesKey), jwe.WithContentEncryption(jwa.A256GCM()))
		if err != nil {
			panic("poppytest: sealing a token: " + err.Error())
		}
		sealed = string(enc)
	}
	if !s.opts.Tokens.JWT {
		if sealed != "" {
			return sealed
		}
		return newID("", 32)
	}
	hdr := `{"alg":"HS256","typ":"at+jwt"}`
	claims := map[string]any{
		"iss": s.issuer,
		"sid": sid,
		"iat": now.Unix(),
		"exp": now.Unix() + 1, // deliberately unlike expires_in (PA-4.2-20)
		"jti": newID("", 16),
	}
	if sealed != "" {
		claims["cred"] = sealed
	}
	body, _ := json.Marshal(claims)
	input := b64.EncodeToString([]byte(hdr)) + "." + b64.EncodeToString(body)
	m := hmac.New(sha256.New, s.tokenCrypter.hmacKey)
	m.Write([]byte(input))
	return input + "." + b64.EncodeToString(m.Sum(nil))
}

// embeddedCredentials opens the backend session blob sealed in a token
// issued with EmbedCredentials, as the Company's own systems would
// (CO-4.2-12). It reports false for any other token.
func (s *Server) embeddedCredentials(tok string) (string, bool) {
	if !s.opts.Tokens.EmbedCredentials {
		return "", false
	}
	sealed := tok
	if s.opts.Tokens.JWT {
		j, err := splitJWS(tok)
		if err != nil {
			return "", false
		}
		if sealed, _ = str(j.claims, "cred"); sealed == "" {
			return "", false
		}
	}
	plain, err := jwe.Decrypt([]byte(sealed), jwe.WithKey(jwa.DIRECT(), s.tokenCrypter.aesKey))
	if err != nil {
		return "", false
	}
	var blob struct {
		Backend string `json:"backend_session"`
	}
	if json.Unmarshal(plain, &blob) != nil || blob.Backend == "" {
		return "", false
	}
	return blob.Backend, true
}
