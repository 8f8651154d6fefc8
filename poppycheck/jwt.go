package poppycheck

// The JWTs an agent signs: DPoP proofs (RFC 9449), client assertions
// (private_key_jwt, RFC 7523), Session assertions (spec 4.2) and browser
// assertions (spec 5). The check signs them with the SDK's own code
// (internal/jose), so that it sends exactly what the SDK's agents send and
// keeps every PA rule: a client assertion's aud is the token endpoint at
// every endpoint it goes to.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"net/url"
	"time"

	"github.com/poppyproto/poppy/internal/jose"
)

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
	header, err := jose.DPoPHeader(&priv.PublicKey)
	if err != nil {
		return nil, err
	}
	s, err := jose.NewSigner(priv, header)
	if err != nil {
		return nil, err
	}
	return &dpopKey{signer: s}, nil
}

// proof signs a proof for method and htu (jose.HTU of the URL), with ath
// for token when token is set and nonce when set, at now.
func (k *dpopKey) proof(method, htu, token, nonce string, now time.Time) (string, error) {
	ath := ""
	if token != "" {
		ath = jose.Hash(token)
	}
	return jose.Proof(k.signer, method, htu, ath, nonce, now)
}

// htu is a proof's htu for u.
func htu(u *url.URL) string { return jose.HTU(u) }

// clientAssertion is a private_key_jwt client assertion, whose aud is the
// token endpoint wherever it is sent.
func (a *Agent) clientAssertion(tokenEndpoint string, now time.Time) (string, error) {
	return jose.ClientAssertion(a.signer, a.ClientID(), tokenEndpoint, now)
}

// sessionAssertion is a Session assertion for the User userID.
func (a *Agent) sessionAssertion(tokenEndpoint, userID string, now time.Time) (string, error) {
	return jose.SessionAssertion(a.signer, a.ClientID(), userID, tokenEndpoint, now)
}

// browserAssertion is a browser assertion (spec 5 step 1).
func (a *Agent) browserAssertion(endpoint, userID, sessionID, returnTo string, now time.Time) (string, error) {
	return jose.BrowserAssertion(a.key, a.kid, a.ClientID(), userID, endpoint, sessionID, returnTo, now)
}
