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
// body into an *Error; or send with Session.Do, which returns that *Error
// for every status of 400 and above.
//
// Tokens are sent only to the Company's own hosts: organization.domain, its
// subdomains and the hosts its documents name. A request (or a redirect) to
// any other host fails with ErrForeignHost before anything is sent.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// maxReplayBody is the largest request body kept in memory so that a
// rejected request can be sent again.
const maxReplayBody = 4 << 20

// HTTPClient returns an *http.Client whose requests carry the Session's
// token and DPoP proofs. It shares the Agent's connection pool. Like
// Transport, it returns the Company's answer as a response whatever its
// status; see ResponseError and Session.Do for the error. There is no
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

// boundHTTPClient is directHTTPClient for requests that belong to the
// Session sessionID: they are never sent with a token of another Session
// (see internal/sdk.BoundHTTPClient).
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

// resourceHTTPClient is HTTPClient with every token issued for resource
// (PA-4.3-22), for the API entry that names it.
func (s *Session) resourceHTTPClient(resource string) *http.Client {
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
	if err := a.checkURL(req.URL); err != nil {
		closeBody()
		return nil, err
	}
	if !s.company.ownsHost(req.URL.Hostname()) {
		closeBody()
		return nil, fmt.Errorf("%w: %s", ErrForeignHost, req.URL.Hostname())
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
			wait, retry = a.rateWait(parseRetryAfter(resp.Header.Get("Retry-After"), a.clock.Now()), attempt)
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
// when resp's status is below 400. It reads the WWW-Authenticate challenge
// (DPoP or Bearer: error, scope), Retry-After, and an OAuth or protocol JSON
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
	if code, scope, ok := dpopChallenge(resp.Header); ok {
		e.Code, e.Scope = code, scope
	}
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
		e.RetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), now)
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
func isJSON(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

// Do sends req through the Session's HTTP client and turns an error
// response into an error: for a status of 400 and above it closes the body
// and returns ResponseError's *Error. It is the convenience for callers who
// want errors rather than responses; HTTPClient and Transport return every
// response as a response.
func (s *Session) Do(req *http.Request) (*http.Response, error) {
	resp, err := s.HTTPClient().Do(req)
	if err != nil {
		return nil, unwrapURLError(err)
	}
	if perr := ResponseError(resp); perr != nil {
		drain(resp)
		return nil, perr
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

// ownsHost reports whether host belongs to the Company: organization.domain
// or a subdomain of it, or a host one of its documents names.
func (c *Company) ownsHost(host string) bool {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	c.hostsOnce.Do(c.collectHosts)
	d := c.orgHost
	if h == d || (len(h) > len(d) && h[len(h)-len(d)-1] == '.' && strings.HasSuffix(h, d)) {
		return true
	}
	return c.hosts[h]
}

func (c *Company) collectHosts() {
	c.orgHost = normHost(c.doc.Organization.Domain)
	c.hosts = map[string]bool{}
	add := func(raw string) {
		if u, err := url.Parse(raw); err == nil && u.Host != "" {
			c.hosts[strings.ToLower(u.Hostname())] = true
		}
	}
	for _, e := range c.endpoints() {
		add(e.url)
	}
	if c.meta != nil {
		add(c.meta.TokenEndpoint)
		add(c.meta.RevocationEndpoint)
	}
	if c.doc.Auth != nil {
		add(c.doc.Auth.Issuer)
		if c.doc.Auth.Mediated != nil {
			add(c.doc.Auth.Mediated.Endpoint)
		}
	}
}

// endpoint is a service the Company lists, with the resource its tokens
// must be issued for, if any.
type endpoint struct {
	url, resource string
	mcp           bool
	// htu is the url as a DPoP htu ("" if it doesn't parse). resOrigin
	// and resPath are the resource, urlOrigin and urlDir the url's
	// directory, normalised for resourceFor ("" if they don't parse). All
	// are computed once, not on every request.
	htu                string
	resOrigin, resPath string
	urlOrigin, urlDir  string
}

// endpoints returns the services the Company lists, computed once.
func (c *Company) endpoints() []endpoint {
	c.endpointsOnce.Do(func() { c.eps = c.listEndpoints() })
	return c.eps
}

func (c *Company) listEndpoints() []endpoint {
	var out []endpoint
	if c.doc.Agent != nil {
		for _, p := range c.doc.Agent.Protocols {
			out = append(out, endpoint{url: p.Endpoint, resource: p.Resource})
		}
	}
	for _, api := range c.doc.APIs {
		out = append(out, endpoint{url: api.URL, resource: api.Resource, mcp: api.Type == "mcp"})
	}
	for _, e := range c.doc.Extensions {
		var v struct {
			Endpoint string `json:"endpoint"`
			Resource string `json:"resource"`
		}
		if json.Unmarshal(e.Raw, &v) == nil && v.Endpoint != "" {
			out = append(out, endpoint{url: v.Endpoint, resource: v.Resource})
		}
	}
	if c.doc.Web != nil && c.doc.Web.BrowserSessionEndpoint != "" {
		out = append(out, endpoint{url: c.doc.Web.BrowserSessionEndpoint})
	}
	for i := range out {
		e := &out[i]
		eu, err := url.Parse(e.url)
		if err == nil && eu.Host != "" {
			e.htu = htuOf(eu)
		}
		if e.resource == "" || e.mcp {
			continue
		}
		c.anyResource = true
		if r, err := url.Parse(e.resource); err == nil && r.Host != "" {
			e.resOrigin, e.resPath = normURL(r)
		}
		if err == nil && eu.Host != "" {
			o, p := normURL(eu)
			e.urlOrigin, e.urlDir = o, p[:strings.LastIndex(p, "/")+1]
		}
	}
	return out
}

// isMCP reports whether target, a request's htu, is the url of an MCP
// server the Company lists.
func (c *Company) isMCP(target string) bool {
	for _, e := range c.endpoints() {
		if e.mcp && e.htu != "" && e.htu == target {
			return true
		}
	}
	return false
}

// resourceFor returns the resource a DPoP token for u must be issued for:
// that of the listed entry whose resource (an https URL) contains u, or
// else whose URL's directory contains u, the longest match winning; "" when
// no entry with a resource matches (spec 4.3: one token works everywhere).
// URLs are compared normalised (RFC 3986 section 6.2.2, 6.2.3; urlnorm.go),
// and paths segment by segment. The entries' sides are normalised once, in
// listEndpoints; a request's URL once per call.
func (c *Company) resourceFor(u *url.URL) string {
	eps := c.endpoints()
	if !c.anyResource {
		return "" // nothing to match: the common case costs nothing
	}
	origin, path := normURL(u)
	best, bestLen := "", -1
	for i := range eps {
		e := &eps[i]
		if e.resource == "" || e.mcp {
			continue
		}
		switch {
		case e.resOrigin != "" && e.resOrigin == origin && pathWithin(path, e.resPath):
			if len(e.resPath) > bestLen {
				best, bestLen = e.resource, len(e.resPath)
			}
		case e.urlOrigin != "" && e.urlOrigin == origin && strings.HasPrefix(path, e.urlDir):
			if len(e.urlDir) > bestLen {
				best, bestLen = e.resource, len(e.urlDir)
			}
		}
	}
	return best
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
		t := s.tokens[tokenKey{}]
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
