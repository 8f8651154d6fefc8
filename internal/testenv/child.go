package testenv

import (
	"net/http"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/poppytest"
)

// ChildAgent is the agent of a child process a crash test runs: the test
// agent's identity with the signing key jwk (the parent's, so that the
// fake Company knows it), listing extensions, on store, reaching the fake
// through the client and clock the parent put in the environment
// (poppytest.ClientFromEnv, ClockFromEnv). wrap, if set, wraps the
// transport, for a child that dies on purpose mid-request.
func ChildAgent(jwk []byte, extensions map[string]string, store keystore.Store, wrap func(http.RoundTripper) http.RoundTripper) (*poppy.Agent, error) {
	key, err := poppy.ParseSigningKey(jwk)
	if err != nil {
		return nil, err
	}
	id, err := poppy.NewIdentity(poppy.IdentityConfig{ClientID: ClientID, ClientName: "Example Agent",
		JWKSURI: JWKS, RedirectURIs: []string{Redirect}, Keys: []*poppy.SigningKey{key}, Extensions: extensions})
	if err != nil {
		return nil, err
	}
	hc, err := poppytest.ClientFromEnv()
	if err != nil {
		return nil, err
	}
	if wrap != nil {
		hc.Transport = wrap(hc.Transport)
	}
	return poppy.NewAgent(id, &poppy.AgentOptions{Store: store, HTTPClient: hc, Clock: poppytest.ClockFromEnv()})
}
