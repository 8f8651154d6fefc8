// Package sdk gives the SDK's subpackages (signin, browser and the ones
// after them) the building blocks that package poppy keeps off its exported
// surface: a user of the SDK can't sign an arbitrary JWT with the agent's
// key or post a client-authenticated form by accident (DESIGN: "What is
// exported"). Each function is a typed wrapper of a hook that poppy sets in
// its init.
package sdk

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/internal/hooks"
)

// CompleteSignIn sends a sign-in's grant (the authorization_code or
// device_code form, without client authentication) to the token endpoint
// with the Session's session_id, a client assertion and a proof, and signs
// the Session in with the answer: the Account Token is stored before the
// Session Token is used (spec 4.5, 4.6).
func CompleteSignIn(ctx context.Context, s *poppy.Session, grant url.Values, opts *poppy.SignInOptions) (*poppy.SignInResult, error) {
	r, err := hooks.CompleteSignIn(ctx, s, grant, opts)
	if err != nil {
		return nil, err
	}
	return r.(*poppy.SignInResult), nil
}

// AcceptSignIn adopts a sign-in's token response obtained by the caller,
// such as Mediated Sign-In's "complete" (spec 4.7).
func AcceptSignIn(ctx context.Context, s *poppy.Session, tokenResponse []byte, opts *poppy.SignInOptions) (*poppy.SignInResult, error) {
	r, err := hooks.AcceptSignIn(ctx, s, tokenResponse, opts)
	if err != nil {
		return nil, err
	}
	return r.(*poppy.SignInResult), nil
}

// PostClientAuthenticated POSTs form to endpoint, one of the Company's
// hosts, with the agent's client assertion (no proof, A-06), never
// following a redirect, and returns the 200 body; any other answer is an
// *poppy.Error.
func PostClientAuthenticated(ctx context.Context, c *poppy.Company, endpoint string, form url.Values) ([]byte, error) {
	return hooks.PostClientAuthenticated(ctx, c, endpoint, form)
}

// DirectHTTPClient is Session.HTTPClient without redirects: a 3xx answer is
// returned as it is. Requests whose body must reach exactly one URL, such as
// Mediated Sign-In's credentials (spec 4.7), use it.
func DirectHTTPClient(s *poppy.Session) *http.Client {
	return hooks.DirectHTTPClient(s)
}

// BoundHTTPClient is DirectHTTPClient for requests that belong to one
// Session, sessionID, such as a Mediated Sign-In's one-time code, which only
// the Session that sent the credentials may submit (PA-4.7-09): such a
// request is never sent with a token of another Session. If the Session
// was replaced before the request is sent, the client fails with an error
// matching poppy.ErrInvalidSession; if the Company's invalid_token answer
// makes the renewal start a new Session, that answer is returned as it is.
func BoundHTTPClient(s *poppy.Session, sessionID string) *http.Client {
	return hooks.BoundHTTPClient(s, sessionID)
}

// RestartSession replaces the Session, which the Company answered
// invalid_session for while its session_id was ended, with a new
// signed-out one and reports it to OnSessionReplaced (PA-4.2-16). When
// the Session is already another one than ended, it does nothing.
func RestartSession(ctx context.Context, s *poppy.Session, ended string) error {
	return hooks.RestartSession(ctx, s, ended)
}

// DeviceDurations reads a device authorization response's interval and
// expires_in (RFC 8628 section 3.2; the JSON values as they came, "" when
// absent) through the SDK's one duration rule: both are honoured as sent
// (PA-4.6-04); expires_in is required and positive, else an error, and is
// read as at most 30 days; an interval that is not a count of at least one
// second is absent and means 5 s; one longer than expires_in is an error.
func DeviceDurations(interval, expiresIn string) (time.Duration, time.Duration, error) {
	return hooks.DeviceDurations(interval, expiresIn)
}
