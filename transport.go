package poppy

// The Session transport (spec 4.3).
//
// Every request gets the Session Token in "Authorization: DPoP <token>" and a
// proof signed for that request alone (PA-4.3-01, PA-4.3-05). The transport
// retries a request only when the Company rejected it without acting on it:
//
//   - 401 use_dpop_nonce with a DPoP-Nonce: once, with the nonce (PA-4.3-13);
//   - 401 invalid_token: once, after renewing the token (spec 6);
//   - 429: after at least Retry-After, at most three times (PA-4.3-27..29).
//
// The request body is replayed for a retry from GetBody, or from a copy kept
// in memory when the body is small enough.
//
// The transport keeps the http.RoundTripper contract: whenever it obtained
// a response, it returns that response with a nil error, however the
// Company answered (a 401 or 403 with a WWW-Authenticate challenge, an
// extension_required refusal, a 429 that outlasts the retries, any 4xx or
// 5xx), with its body unread. A generated OpenAPI client therefore sees the
// status and body it was written for. RoundTrip returns an error only when
// there is no response: the network failed, ctx ended, the request was
// refused before it was sent (ErrForeignHost, ErrInsecureURL, ErrNoSession),
// or no Session Token could be had (the token endpoint's *Error).
//
// To branch on the Company's protocol error, pass the response to
// ResponseError, which reads the challenge, Retry-After and the JSON error
// body into an *Error. Session.Do is HTTPClient().Do with the transport's
// own error instead of net/http's *url.Error.
//
// Tokens are sent only to the Company's own origins (scheme, host and port,
// the scheme's default port made explicit): those its documents name, the
// one it was discovered at, and https on port 443 at organization.domain
// and its subdomains. A request (or a redirect) to any other origin, such
// as a named host on another port, fails with ErrForeignHost before
// anything is sent.
//
// Tokens never go in a URL (spec 4.3, PA-4.3-26): a request whose URL
// carries a token the Session holds, in any part and in any percent-encoding
// a server would decode, fails with ErrTokenInURL before anything is sent,
// and is not retried after a renewal either (see tokenInURL).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/poppyproto/poppy/internal/wire"
)

// maxReplayBody is the largest request body kept in memory so that a
// rejected request can be sent again.
const maxReplayBody = 4 << 20

// HTTPClient returns an *http.Client whose requests carry the Session's
// token and DPoP proofs. It shares the Agent's connection pool. Like
// Transport, it returns the Company's answer as a response whatever its
// status; see ResponseError for the error. There is no
// anonymous mode (spec 4.3): on a nil Session every request fails with
// ErrNoSession before anything is sent.
func (s *Session) HTTPClient() *http.Client {
	if s == nil {
		return &http.Client{Transport: &sessionTransport{}}
	}
	c := *s.agent.client
	c.Transport = s.Transport()
	return &c
}

// directHTTPClient is HTTPClient without redirects: a 3xx answer is
// returned as it is. Requests whose body must reach exactly one URL, such
// as Mediated Sign-In's credentials (spec 4.7), use it.
func (s *Session) directHTTPClient() *http.Client {
	c := s.HTTPClient()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return c
}

// boundHTTPClient is directHTTPClient for requests that belong to one
// Session, sessionID, such as a Mediated Sign-In's one-time code, which
// only the Session that sent the credentials may submit (PA-4.7-09): such
// a request is never sent with a token of another Session. If the Session
// was replaced before the request is sent, the client fails with an error
// matching ErrInvalidSession; if the Company's invalid_token answer makes
// the renewal start a new Session, that answer is returned as it is.
func (s *Session) boundHTTPClient(sessionID string) *http.Client {
	c := s.directHTTPClient()
	c.Transport.(*sessionTransport).bound = sessionID
	return c
}

// Transport returns the Session's http.RoundTripper, for generated OpenAPI
// clients and other code that takes one.
func (s *Session) Transport() http.RoundTripper {
	if s == nil {
		return &sessionTransport{}
	}
	base := s.agent.client.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	return &sessionTransport{s: s, base: base}
}

type sessionTransport struct {
	s    *Session
	base http.RoundTripper
	// bound, if set, is the only Session whose tokens the requests may
	// carry (boundHTTPClient).
	bound string
	// resource, when set, is the resource of every token this transport
	// sends: that of one API entry (package api), whatever the URL.
	resource string
}

// ResourceHTTPClient is HTTPClient with every Session Token issued for
// resource (RFC 8707): the client of one API entry whose "resource"
// poppy.json names (spec 4.3, PA-4.3-22), whatever host its server is on.
// HTTPClient picks a request's resource by its URL instead (Company
// resources); package api uses this one for an entry's calls. Requests
// still go only to the Company's own origins.
func (s *Session) ResourceHTTPClient(resource string) *http.Client {
	c := s.HTTPClient()
	c.Transport.(*sessionTransport).resource = resource
	return c
}

// withAuth returns a shallow copy of req with its own Header carrying
// "Authorization: DPoP <token>" and the proof, leaving req as it was (the
// http.RoundTripper contract). The copy shares req's URL, context and header
// values, which neither this transport nor net/http modifies: a deep Clone
// on every request cost allocations the request doesn't need.
func withAuth(req *http.Request, authz, proof string) *http.Request {
	r := new(http.Request)
	*r = *req
	h := make(http.Header, len(req.Header)+2)
	for k, v := range req.Header {
		if k != "Authorization" && k != "Dpop" {
			h[k] = v
		}
	}
	vals := []string{authz, proof} // one allocation for both values
	h["Authorization"] = vals[0:1:1]
	h["Dpop"] = vals[1:2:2] // the canonical form of "DPoP"
	r.Header = h
	return r
}

// respSessionKey marks, in the context of an error response's Request, the
// Session whose transport returned it, so that ResponseError can name the
// sign-in types that would help.
type respSessionKey struct{}

func (t *sessionTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	closeBody := func() {
		if req.Body != nil {
			req.Body.Close()
		}
	}
	if t.s == nil {
		closeBody()
		return nil, ErrNoSession // PA-4.3-24
	}
	s, a := t.s, t.s.agent
	// First, so that no error below, which may name the host, can echo
	// a token the URL carries.
	if s.tokenInURL(req.URL) {
		closeBody()
		return nil, ErrTokenInURL
	}
	if err := a.checkURL(req.URL); err != nil {
		closeBody()
		return nil, err
	}
	if !s.company.ownsURL(req.URL) {
		closeBody()
		return nil, fmt.Errorf("%w: %s is not an origin the Company's documents name", ErrForeignHost, originOf(req.URL))
	}
	htu := htuOf(req.URL)
	if s.company.isMCP(htu) {
		// PA-4.3-19: an MCP server takes Bearer tokens, never the DPoP one.
		closeBody()
		return nil, fmt.Errorf("%w: %s is an MCP server, which takes a Bearer token (package api)", ErrForeignHost, endpointOf(req.URL))
	}
	getBody, canRetry, err := replayable(req)
	if err != nil {
		return nil, err
	}
	k := tokenKey{resource: t.resource}
	if k.resource == "" {
		k.resource = s.company.resourceFor(req.URL) // PA-4.3-22
	}
	origin := originOf(req.URL)
	ctx := req.Context()
	var (
		stale                                   string
		nonceRetried, tokenRenewed, signInTried bool
	)
	for attempt := 0; ; attempt++ {
		tok, err := s.token(ctx, k, stale)
		if err != nil {
			return nil, err
		}
		if t.bound != "" && tok.SessionID != t.bound {
			closeBody()
			return nil, fmt.Errorf("%w: the request belongs to Session %s, which was replaced", ErrInvalidSession, t.bound)
		}
		proof, err := s.key.proof(req.Method, htu, tok.ath, a.nonces.get(origin), a.clock.Now())
		if err != nil {
			return nil, fmt.Errorf("poppy: signing DPoP proof: %w", err)
		}
		r := withAuth(req, tok.authz, proof)
		if getBody != nil {
			if r.Body, err = getBody(); err != nil {
				return nil, err
			}
		}
		resp, err := t.base.RoundTrip(r)
		if err != nil {
			return nil, err // not retried: the Company may have acted on it
		}
		_, learned := a.nonces.learn(req.URL, resp.Header)
		if resp.StatusCode < 400 {
			return resp, nil
		}
		// The final answer is always returned as a response (the
		// http.RoundTripper contract); only a request the Company
		// rejected without acting on it is sent again.
		retry := false
		var wait time.Duration
		code := ""
		if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden ||
			resp.StatusCode == http.StatusBadRequest {
			code, _, _ = dpopChallenge(resp.Header)
		}
		switch {
		case !canRetry:
		case code == "use_dpop_nonce" && learned && !nonceRetried: // PA-4.3-13
			nonceRetried, retry = true, true
		case code == "invalid_token" && !tokenRenewed: // spec 6
			tokenRenewed, retry = true, true
			stale = tok.value
			if t.bound != "" {
				// Renew now: if that starts a new Session, the request
				// isn't sent again with its token; this answer stands.
				if nt, err := s.token(ctx, k, stale); err != nil || nt.SessionID != t.bound {
					retry = false
				}
			}
		case code == "sign_in_required" && !signInTried:
			// PA-4.4-14: the token may be older than a sign-in another task
			// made, or the Session may be signed out while an Account Token
			// is stored; either gives a signed-in token, then one retry.
			signInTried = true
			ok, err := s.signInForRetry(ctx, tok)
			if err != nil {
				a.log.DebugContext(ctx, "poppy: using a stored Account Token failed", "url", endpointOf(req.URL), "error", err)
			}
			retry = ok
		case resp.StatusCode == http.StatusTooManyRequests: // PA-4.3-27..29
			wait, retry = a.RetryWait(retryAfter(resp.Header, a.clock.Now()), attempt)
		}
		if !retry {
			a.log.DebugContext(ctx, "poppy: request refused", "url", endpointOf(req.URL), "status", resp.StatusCode, "error", cleanText(code))
			resp.Request = r.WithContext(context.WithValue(r.Context(), respSessionKey{}, s))
			return resp, nil
		}
		drain(resp)
		if wait > 0 {
			a.log.DebugContext(ctx, "poppy: rate limited, waiting", "url", endpointOf(req.URL), "wait", wait)
			if err := a.clock.Sleep(ctx, wait); err != nil {
				return nil, fmt.Errorf("poppy: %s: rate_limited (HTTP 429), stopped waiting to retry: %w", endpointOf(req.URL), err)
			}
		}
	}
}

// maxErrorBody is how much of an error response ResponseError reads to find
// the OAuth or protocol error code in it. The rest stays in the body.
const maxErrorBody = 64 << 10

// ResponseError returns the Company's error in resp as an *Error, or nil
// when resp's status is below 400. It reads every WWW-Authenticate
// challenge and takes the error and scope of the one of the scheme the
// request's token used (Bearer for a Bearer token, as MCP sends, DPoP
// otherwise; else any challenge with an error), and the DPoP challenge's
// algs (Error.Algs: without ES256 the Error matches
// ErrUnsupportedDPoPAlgorithm), Retry-After, and an OAuth or protocol JSON
// body ({"error", "error_description", "extension"}); the Error matches its
// sentinel with errors.Is (ErrSignInRequired, ErrInsufficientScope,
// ErrExtensionRequired, ErrRateLimited, ...). Every status of 400 and above
// gives an *Error, with an empty Code when the Company named none.
//
// The body stays readable: what ResponseError read of it is put back in
// front of the rest. For a response from a Session's transport, the Error
// also lists the sign-in types that can grant what a sign_in_required or
// insufficient_scope refusal asks for (spec 4.4).
func ResponseError(resp *http.Response) error {
	if resp == nil || resp.StatusCode < 400 {
		return nil
	}
	e := &Error{Status: resp.StatusCode}
	var now time.Time
	var s *Session
	if resp.Request != nil {
		e.Endpoint = endpointOf(resp.Request.URL)
		s, _ = resp.Request.Context().Value(respSessionKey{}).(*Session)
	}
	if s != nil {
		now = s.agent.clock.Now()
	} else {
		now = time.Now()
	}
	// PA-6-04: every challenge is read; the one of the scheme the request's
	// token used answers it (DPoP, or Bearer for MCP).
	cs := parseChallenges(resp.Header)
	if c, ok := pick(cs, requestScheme(resp.Request)); ok {
		e.Code, e.Scope = c.code, c.scope
	}
	e.Algs = dpopAlgs(cs)
	if resp.Body != nil && resp.Body != http.NoBody && isJSON(resp.Header.Get("Content-Type")) {
		head, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		rest := resp.Body
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(head), rest), rest}
		var oe oauthError
		if err == nil && headOAuthError(head, &oe) {
			if oe.Error != "" && e.Code == "" {
				e.Code = oe.Error
			}
			e.Description = cleanText(oe.Description)
			e.Extension = cleanText(oe.Extension)
		}
	}
	e.Code = cleanText(e.Code)
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		// RFC 9110 section 10.2.3: Retry-After on a 503 too.
		e.RetryAfter = retryAfter(resp.Header, now)
	}
	if resp.StatusCode == http.StatusTooManyRequests && e.Code == "" {
		e.Code = "rate_limited"
	}
	if s != nil {
		switch e.Code {
		case "sign_in_required":
			e.SignInTypes = s.company.SignInTypes()
		case "insufficient_scope":
			e.SignInTypes = s.company.EligibleSignInTypes(e.Scope)
		}
	}
	return e
}

// headOAuthError decodes the OAuth error members of an error body's head,
// which may be cut short at maxErrorBody: members that come before the
// cut are found even when the rest of the object is missing.
func headOAuthError(head []byte, oe *oauthError) bool {
	if json.Unmarshal(head, oe) == nil {
		return true
	}
	d := json.NewDecoder(bytes.NewReader(head))
	if t, err := d.Token(); err != nil || t != json.Delim('{') {
		return false
	}
	found := false
	for d.More() {
		t, err := d.Token()
		if err != nil {
			break
		}
		name, _ := t.(string)
		var dst *string
		switch name {
		case "error":
			dst = &oe.Error
		case "error_description":
			dst = &oe.Description
		case "extension":
			dst = &oe.Extension
		}
		var v json.RawMessage
		if err := d.Decode(&v); err != nil {
			break
		}
		if dst != nil && json.Unmarshal(v, dst) == nil {
			found = true
		}
	}
	return found
}

// isJSON reports whether a Content-Type is JSON (application/json or a
// +json type).
func isJSON(ct string) bool { return wire.IsJSON(ct) }

// Do sends req through the Session's HTTP client and returns the
// Company's answer as a response whatever its status, as HTTPClient().Do
// does; pass it to ResponseError for the Company's *Error:
//
//	resp, err := sess.Do(req)
//	if err != nil {
//		return err // no response: network, ctx, or refused before sending
//	}
//	defer resp.Body.Close()
//	if err := poppy.ResponseError(resp); err != nil {
//		return err // errors.Is(err, poppy.ErrSignInRequired), ...
//	}
//
// Its error, when there is no response, is the cause itself rather than
// the *url.Error net/http wraps around it, whose text shows the request's
// URL, and with it any token ErrTokenInURL refused to send.
func (s *Session) Do(req *http.Request) (*http.Response, error) {
	resp, err := s.HTTPClient().Do(req)
	if err != nil {
		return nil, unwrapURLError(err)
	}
	return resp, nil
}

// replayable returns a function giving a fresh copy of req's body for each
// attempt (nil when the request has no body), and whether the request can
// be sent more than once. A body too large to keep is sent once, unretried.
func replayable(req *http.Request) (getBody func() (io.ReadCloser, error), canRetry bool, err error) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, true, nil
	}
	if req.GetBody != nil {
		return req.GetBody, true, nil
	}
	b, err := io.ReadAll(io.LimitReader(req.Body, maxReplayBody+1))
	if err != nil {
		req.Body.Close()
		return nil, false, fmt.Errorf("poppy: reading request body: %w", err)
	}
	if len(b) > maxReplayBody {
		rest := req.Body
		return func() (io.ReadCloser, error) {
			return struct {
				io.Reader
				io.Closer
			}{io.MultiReader(bytes.NewReader(b), rest), rest}, nil
		}, false, nil
	}
	req.Body.Close()
	return func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }, true, nil
}

// signInForRetry gets a signed-in token after a sign_in_required answer to
// a request sent with used: the Session's newer signed-in token if another
// task signed it in, or else one from a stored Account Token. It reports
// false when neither exists, and the caller must sign in (spec 4.4).
func (s *Session) signInForRetry(ctx context.Context, used *Token) (bool, error) {
	if !used.SignedIn {
		// Another task, or process, may have signed the Session in.
		if err := s.reload(ctx); err != nil {
			return false, err
		}
		s.mu.Lock()
		t := s.tokens[s.signInKey()]
		s.mu.Unlock()
		if t != nil && t.SignedIn && t.value != used.value && s.agent.clock.Now().Before(t.renewAt) {
			return true, nil
		}
	}
	s.mu.Lock()
	account := s.rec.Account
	s.mu.Unlock()
	_, ok, err := s.useAccountToken(ctx, &SignInOptions{Account: account}, false)
	return ok, err
}
