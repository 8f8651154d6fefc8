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

// SignJWT signs claims (a JSON object) with the agent's current signing key
// and the header typ (none when typ is ""): alg ES256 and the key's kid.
func SignJWT(id *poppy.Identity, typ string, claims []byte) (string, error) {
	return hooks.SignJWT(id, typ, claims)
}

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

// ParseURL parses raw, a URL a Company sent, with the one check the whole
// module applies to Company URLs: absolute https:// with a host and no user
// information, or http:// on a loopback host when the Agent was made with
// UnsafeAllowLoopbackHTTP. Its errors match poppy.ErrInsecureURL.
func ParseURL(a *poppy.Agent, raw string) (*url.URL, error) {
	return hooks.ParseURL(a, raw)
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

// FetchDocument GETs a public document of the Company (an OpenAPI
// description, protected resource metadata) through the Agent's document
// cache, as discovery documents are fetched (spec 3): HTTPS only, redirects
// only to HTTPS, HTTP caching headers honoured, at most limit bytes (0: the
// Agent's MaxResponseBytes), 429 waited out. what names the document in
// errors. No token is sent.
func FetchDocument(ctx context.Context, a *poppy.Agent, rawURL, what string, limit int64) ([]byte, error) {
	return hooks.FetchDocument(ctx, a, rawURL, what, limit)
}

// RetryWait is the Session transport's retry policy for a request the
// Company may be asked again (spec 4.3, PA-4.3-27..29): before retry
// number attempt+1 (attempt from 0), wait retryAfter, or 1 s, 2 s, 4 s
// without one; false when the request must not be retried: three retries
// are used up, or the wait is longer than AgentOptions.MaxRetryWait.
func RetryWait(a *poppy.Agent, retryAfter time.Duration, attempt int) (time.Duration, bool) {
	return hooks.RetryWait(a, retryAfter, attempt)
}

// Secrets returns the values of the Session Tokens s holds and of its
// Account Token, for redacting them from what a model sees (PA-4.8-08).
// Never log or return them.
func Secrets(ctx context.Context, s *poppy.Session) []string {
	return hooks.Secrets(ctx, s)
}

// RenewToken returns the Session's token for opts, renewing it only if the
// cached one is still used, the token a server just refused: of several
// requests refused at once, the first renews and the others take its new
// token (one renewal per refusal, as the Session transport does).
func RenewToken(ctx context.Context, s *poppy.Session, opts *poppy.TokenOptions, used *poppy.Token) (*poppy.Token, error) {
	t, err := hooks.RenewToken(ctx, s, opts, used.Value())
	if err != nil {
		return nil, err
	}
	return t.(*poppy.Token), nil
}

// ResourceHTTPClient is Session.HTTPClient with every Session Token issued
// for resource: the client of one API entry that names a resource in
// poppy.json (spec 4.3, PA-4.3-22), whatever host its server is on.
func ResourceHTTPClient(s *poppy.Session, resource string) *http.Client {
	return hooks.ResourceHTTPClient(s, resource)
}
