package jose

// The JWTs a Personal Agent signs, each in one place: the SDK signs with
// these, and so does poppycheck, so that the check sends exactly what the
// SDK's agents send (its own copies once signed client assertions for
// another audience than the SDK's, and reported the Companies that refused
// them as failing).

import (
	"crypto/ecdsa"
	"net/url"
	"strings"
	"time"
)

// AssertionLifetime is how long a client, Session or browser assertion
// lives: exp is iat plus this (A-04; spec 5 caps browser assertions at
// 60 s, PA-5-08).
const AssertionLifetime = 60 * time.Second

// BrowserAssertionType is the typ header of a browser assertion (spec 5
// step 1, PA-5-03).
const BrowserAssertionType = "poppy-browser+jwt"

// AssertionHeader is the protected header of a JWT signed with the agent's
// published key kid: {"alg":"ES256","kid":…,"typ":…}. Client and Session
// assertions use typ "JWT", browser assertions
// BrowserAssertionType.
func AssertionHeader(kid, typ string) []byte {
	return NewClaims(96).String("alg", "ES256").String("kid", kid).String("typ", typ).Bytes()
}

// ClientAssertion signs a private_key_jwt client assertion (RFC 7523
// section 3; PA-4.1-07, PA-4.1-09): iss = sub = clientID, aud the token
// endpoint, as one string, whichever endpoint the assertion is sent to
// (the token, device authorization or revocation endpoint: A-03), a 60 s
// lifetime and a 128-bit jti. s signs with the agent's published key.
func ClientAssertion(s *Signer, clientID, tokenEndpoint string, now time.Time) (string, error) {
	return s.Sign(NewClaims(256).
		String("iss", clientID).
		String("sub", clientID).
		String("aud", tokenEndpoint).
		Int("iat", now.Unix()).
		Int("exp", now.Add(AssertionLifetime).Unix()).
		Random("jti", 16).
		Bytes())
}

// SessionAssertion signs a Session assertion (spec 4.2): iss the
// client_id (PA-4.2-06), sub the User ID (PA-4.2-07), aud the token
// endpoint as a single string (PA-4.2-08), iat (PA-4.2-09), a 60 s
// lifetime and a 128-bit jti (PA-4.2-10).
func SessionAssertion(s *Signer, clientID, userID, tokenEndpoint string, now time.Time) (string, error) {
	return s.Sign(NewClaims(256).
		String("iss", clientID).
		String("sub", userID).
		String("aud", tokenEndpoint).
		Int("iat", now.Unix()).
		Int("exp", now.Add(AssertionLifetime).Unix()).
		Random("jti", 16).
		Bytes())
}

// BrowserAssertion signs a browser assertion (spec 5 step 1) with priv,
// the agent's published key kid, typ BrowserAssertionType (PA-5-03): iss
// the client_id and sub the User ID (PA-5-04), aud the Company's
// web.browser_session_endpoint (PA-5-05), session_id (PA-5-06),
// return_to, iat, exp 60 s later (PA-5-08) and a 128-bit jti (PA-5-04).
func BrowserAssertion(priv *ecdsa.PrivateKey, kid, clientID, userID, endpoint, sessionID, returnTo string, now time.Time) (string, error) {
	s, err := NewSigner(priv, AssertionHeader(kid, BrowserAssertionType))
	if err != nil {
		return "", err
	}
	return s.Sign(NewClaims(512).
		String("iss", clientID).
		String("sub", userID).
		String("aud", endpoint).
		String("session_id", sessionID).
		String("return_to", returnTo).
		Int("iat", now.Unix()).
		Int("exp", now.Add(AssertionLifetime).Unix()).
		Random("jti", 16).
		Bytes())
}

// DPoPHeader is the protected header of every DPoP proof signed with the
// key pub (PA-4.3-06): typ dpop+jwt, ES256, and the public key only.
func DPoPHeader(pub *ecdsa.PublicKey) ([]byte, error) {
	x, y, err := PublicJWK(pub)
	if err != nil {
		return nil, err
	}
	return []byte(`{"typ":"dpop+jwt","alg":"ES256","jwk":{"kty":"EC","crv":"P-256","x":"` + x + `","y":"` + y + `"}}`), nil
}

// Proof signs a DPoP proof for one request (RFC 9449; PA-4.3-05..11) with
// s, a Signer whose header is DPoPHeader: a 128-bit jti, htm, htu
// (HTU of the request URL), iat, ath when the request carries a token
// (Hash of it; "" at the token endpoint) and the origin's nonce when there
// is one.
func Proof(s *Signer, method, htu, ath, nonce string, now time.Time) (string, error) {
	c := NewClaims(168+len(htu)+len(nonce)).
		Random("jti", 16).
		String("htm", method).
		String("htu", htu).
		Int("iat", now.Unix())
	if ath != "" {
		c.String("ath", ath)
	}
	if nonce != "" {
		c.String("nonce", nonce)
	}
	return s.Sign(c.Bytes())
}

// HTU is a proof's htu for a request to u (PA-4.3-08): the URL without
// query and fragment, scheme and host lower-cased, the path "/" when
// empty.
func HTU(u *url.URL) string {
	path := u.EscapedPath()
	if path == "" {
		path = "/"
	}
	return strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Host) + path
}
