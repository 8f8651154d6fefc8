package poppy

// Direct Sign-In's token-endpoint step (spec 4.5): the authorization code
// exchange with PKCE (RFC 7636), beside the Session whose grant it
// completes, as x/oauth2 keeps pkce.go beside Config. Package signin makes
// the authorization URL, keeps the pending sign-in (its state and
// code_verifier) in the keystore and checks the redirect (state, iss)
// before it calls ExchangeCode.

import (
	"context"
	"net/url"
	"slices"
)

// ExchangeCode completes a Direct Sign-In of the Session (spec 4.5): it
// sends code, from the Company's redirect, with redirectURI and
// codeVerifier, the redirect_uri and PKCE code_verifier of the
// authorization request (PA-4.5-09), to the token endpoint with the
// Session's session_id, the client assertion and a proof, and signs the
// Session in with the answer: the Account Token is stored before the
// Session Token is used. redirectURI must be one of the identity's
// redirect_uris, byte for byte (PA-4.5-04). A refusal is the Company's
// *Error and changes nothing (PA-4.4-10).
//
// If the Company answers invalid_session (it ended the Session), a new
// Session is started first (OnSessionReplaced), and the error is returned:
// the code is the User's consent, not the Session's, so the caller may
// exchange it once more, on the new Session (PA-4.2-16). A Company that
// used the code up then answers invalid_grant.
//
// When ctx ends first, ExchangeCode returns ctx's error and the exchange
// finishes without it: the code is used up once sent, so the answer is
// kept, and the Session is signed in, all the same.
//
// Check the redirect's state and iss (RFC 9207) before the exchange;
// package signin's Direct does the whole sign-in.
func (s *Session) ExchangeCode(ctx context.Context, code, redirectURI, codeVerifier string, opts *SignInOptions) (*SignInResult, error) {
	if s == nil {
		return nil, ErrNoSession
	}
	if code == "" || codeVerifier == "" {
		return nil, configError("ExchangeCode: no code or no code_verifier")
	}
	if !slices.Contains(s.agent.id.redirect, redirectURI) {
		return nil, configError("ExchangeCode: %q is not one of the identity's redirect_uris", redirectURI)
	}
	grant := url.Values{
		"grant_type":    {"authorization_code"},
		"code":          {code},
		"redirect_uri":  {redirectURI},
		"code_verifier": {codeVerifier},
	}
	return s.completeSignIn(ctx, grant, opts)
}
