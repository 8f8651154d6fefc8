package poppycheck

// The JWTs an agent signs: DPoP proofs (RFC 9449), client assertions
// (private_key_jwt, RFC 7523), Session assertions (spec 4.2) and browser
// assertions (spec 5), each as this SDK's agents make them, so that the
// check itself keeps every PA rule.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"time"

	"github.com/poppyproto/poppy/internal/jose"
)

const assertionLifetime = 60 * time.Second

// dpopKey is a DPoP key: one per User per Company (spec 4.3), never
// published.
type dpopKey struct {
	signer *jose.Signer
}

func newDPoPKey() (*dpopKey, error) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	jwk, err := jose.PublicJWKJSON(&priv.PublicKey)
	if err != nil {
		return nil, err
	}
	header := jose.NewClaims(256).String("typ", "dpop+jwt").String("alg", "ES256").Raw("jwk", jwk).Bytes()
	s, err := jose.NewSigner(priv, header)
	if err != nil {
		return nil, err
	}
	return &dpopKey{signer: s}, nil
}

// proof signs a proof for method and htu (without query or fragment),
// with ath for token when token is set and nonce when set. iat is now.
func (k *dpopKey) proof(method, htu, token, nonce string, now time.Time) (string, error) {
	c := jose.NewClaims(256).Random("jti", 16).String("htm", method).String("htu", htu).Int("iat", now.Unix())
	if token != "" {
		c.String("ath", jose.Hash(token))
	}
	if nonce != "" {
		c.String("nonce", nonce)
	}
	return k.signer.Sign(c.Bytes())
}

// signer returns a signer of JWTs with the agent's published key.
func (a *Agent) signer(typ string) (*jose.Signer, error) {
	h := jose.NewClaims(96).String("alg", "ES256").String("kid", a.kid)
	if typ != "" {
		h.String("typ", typ)
	}
	return jose.NewSigner(a.key, h.Bytes())
}

// clientAssertion is a private_key_jwt client assertion for aud.
func (a *Agent) clientAssertion(aud string, now time.Time) (string, error) {
	s, err := a.signer("JWT")
	if err != nil {
		return "", err
	}
	return s.Sign(jose.NewClaims(256).String("iss", a.ClientID()).String("sub", a.ClientID()).String("aud", aud).
		Int("iat", now.Unix()).Int("exp", now.Add(assertionLifetime).Unix()).Random("jti", 16).Bytes())
}

// sessionAssertion is a Session assertion for the User userID.
func (a *Agent) sessionAssertion(tokenEndpoint, userID string, now time.Time) (string, error) {
	s, err := a.signer("JWT")
	if err != nil {
		return "", err
	}
	return s.Sign(jose.NewClaims(256).String("iss", a.ClientID()).String("sub", userID).String("aud", tokenEndpoint).
		Int("iat", now.Unix()).Int("exp", now.Add(assertionLifetime).Unix()).Random("jti", 16).Bytes())
}

// browserAssertion is a browser assertion (spec 5 step 1).
func (a *Agent) browserAssertion(endpoint, userID, sessionID, returnTo string, now time.Time) (string, error) {
	s, err := a.signer("poppy-browser+jwt")
	if err != nil {
		return "", err
	}
	return s.Sign(jose.NewClaims(384).String("iss", a.ClientID()).String("sub", userID).String("aud", endpoint).
		String("session_id", sessionID).String("return_to", returnTo).
		Int("iat", now.Unix()).Int("exp", now.Add(assertionLifetime).Unix()).Random("jti", 16).Bytes())
}
