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
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
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
func isJSON(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

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

// origin is a URL's origin (RFC 6454) as tokens are guarded by it: scheme
// and host lower-cased, the host without a trailing dot, and the port
// always explicit, in decimal without leading zeros (the scheme's default
// when the URL names none). "https://API.example.com.:0443" and
// "https://api.example.com" are one origin; port 8443 is another.
type origin struct {
	scheme, host, port string
}

// originKey returns u's origin, and false when it has none the SDK would
// send a token to: no host, a scheme other than http and https, or a port
// that isn't a number in 1-65535.
func originKey(u *url.URL) (origin, bool) {
	o := origin{scheme: strings.ToLower(u.Scheme), host: strings.ToLower(strings.TrimSuffix(u.Hostname(), "."))}
	if o.host == "" {
		return origin{}, false
	}
	p := u.Port()
	switch {
	case p != "":
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return origin{}, false
		}
		o.port = strconv.FormatUint(n, 10)
	case o.scheme == "https":
		o.port = "443"
	case o.scheme == "http":
		o.port = "80"
	default:
		return origin{}, false
	}
	return o, o.scheme == "https" || o.scheme == "http"
}

// ownsURL reports whether u is on one of the Company's origins: one that
// its documents name (poppy.json's endpoints and the issuer, the token,
// revocation and mediated endpoints), the one it was discovered at, or
// https on port 443 at organization.domain or a subdomain of it. The host
// alone is not enough: a named host on another port is another server,
// which may not be the Company's at all.
func (c *Company) ownsURL(u *url.URL) bool {
	o, ok := originKey(u)
	if !ok {
		return false
	}
	c.hostsOnce.Do(c.collectOrigins)
	if c.origins[o] {
		return true
	}
	if o.scheme != "https" || o.port != "443" {
		return false
	}
	h, d := o.host, c.orgHost
	return d != "" && (h == d || (len(h) > len(d) && h[len(h)-len(d)-1] == '.' && strings.HasSuffix(h, d)))
}

func (c *Company) collectOrigins() {
	c.orgHost = normHost(c.doc.Organization.Domain)
	c.origins = map[origin]bool{}
	add := func(raw string) {
		if u, err := url.Parse(raw); err == nil {
			if o, ok := originKey(u); ok {
				c.origins[o] = true
			}
		}
	}
	// Where poppy.json was fetched from, as Agent.Company fetched it.
	scheme := "https"
	if c.agent != nil && c.agent.opts.UnsafeAllowLoopbackHTTP && isLoopback(hostOnly(c.domain)) {
		scheme = "http"
	}
	add(scheme + "://" + c.domain + "/")
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

// Tokens in URLs (spec 4.3: "Personal Agents MUST NOT send tokens in a
// URL", PA-4.3-26).
//
// A URL reaches the Company's logs, proxies' logs, browser histories and
// Referer headers, so a token in one is as good as published. The
// transport refuses, before sending, a request whose URL carries a token
// the Session holds: any of its current Session Tokens (DPoP and Bearer,
// of every resource and scope), a Session Token a renewal replaced until
// it expires (the Company still accepts it until then), and the Account
// Token it last used or got. Every part of the URL is searched (userinfo,
// host, path, query, fragment), as written and after each of up to four
// rounds of percent-decoding (%XX, and the legacy %uXXXX for ASCII), so
// that "%2B" for "+", an encoded letter or a double encoding a server or
// an application behind it would undo doesn't hide a token. The host is
// compared without regard to case, as DNS does. A token shorter than
// minTokenScan bytes can't be told from ordinary URL text, so it is looked
// for only as a whole path segment, query key or value, or host label.

// heldTokens are the token values a Session holds beyond s.tokens, guarded
// by s.mu.
type heldTokens struct {
	retired []retiredToken // oldest first, at most maxRetired
	account string         // the Account Token last used or stored
}

type retiredToken struct {
	value  string
	expiry time.Time
}

// maxRetired bounds the replaced Session Tokens a Session remembers.
const maxRetired = 8

// minTokenScan is the shortest token searched for inside URL text.
const minTokenScan = 8

// retireLocked remembers the tokens of s.tokens that next doesn't keep and
// that have not expired. s.mu is held.
func (s *Session) retireLocked(next map[tokenKey]*Token) {
	if len(s.tokens) == 0 {
		return
	}
	now := s.agent.clock.Now()
	r := s.held.retired[:0:0]
	for _, old := range s.held.retired {
		if now.Before(old.expiry) {
			r = append(r, old)
		}
	}
	for k, t := range s.tokens {
		if n := next[k]; (n == nil || n.value != t.value) && now.Before(t.Expiry) {
			r = append(r, retiredToken{value: t.value, expiry: t.Expiry})
		}
	}
	if len(r) > maxRetired {
		r = r[len(r)-maxRetired:]
	}
	if len(r) == 0 {
		r = nil
	}
	s.held.retired = r
}

// holdAccountToken notes the Account Token value the Session just used or
// stored, for tokenInURL.
func (s *Session) holdAccountToken(v string) {
	if v == "" {
		return
	}
	s.mu.Lock()
	s.held.account = v
	s.mu.Unlock()
}

// tokenInURL reports whether u carries a token the Session holds.
func (s *Session) tokenInURL(u *url.URL) bool {
	var buf [6]string
	vals := buf[:0]
	s.mu.Lock()
	for _, t := range s.tokens {
		vals = append(vals, t.value)
	}
	for _, r := range s.held.retired {
		vals = append(vals, r.value)
	}
	if s.held.account != "" {
		vals = append(vals, s.held.account)
	}
	s.mu.Unlock()
	return urlCarries(u, vals)
}

// urlCarries reports whether any of tokens appears in u.
func urlCarries(u *url.URL, tokens []string) bool {
	if len(tokens) == 0 {
		return false
	}
	parts := [...]string{u.Opaque, u.Path, u.RawPath, u.RawQuery, u.Fragment, u.RawFragment, "", ""}
	if u.User != nil {
		parts[6] = u.User.Username()
		parts[7], _ = u.User.Password()
	}
	for _, p := range parts {
		if p != "" && textCarries(p, tokens, false) {
			return true
		}
	}
	return u.Host != "" && textCarries(u.Host, tokens, true)
}

// textCarries reports whether text, or text percent-decoded up to four
// times, holds one of tokens; fold compares without regard to case.
func textCarries(text string, tokens []string, fold bool) bool {
	for round := 0; ; round++ {
		for _, t := range tokens {
			if t != "" && holds(text, t, fold) {
				return true
			}
		}
		if round == 4 || !strings.Contains(text, "%") {
			return false
		}
		next := percentDecode(text)
		if next == text {
			return false
		}
		text = next
	}
}

// holds reports whether text holds tok: anywhere for a token of
// minTokenScan bytes or more, else as a whole component between URL
// delimiters.
func holds(text, tok string, fold bool) bool {
	if len(tok) > len(text) {
		return false
	}
	if len(tok) >= minTokenScan && strings.Contains(text, tok) {
		return true
	}
	if len(tok) >= minTokenScan && !fold {
		return false
	}
	for i := 0; i+len(tok) <= len(text); i++ {
		w := text[i : i+len(tok)]
		if w != tok && !(fold && strings.EqualFold(w, tok)) {
			continue
		}
		if len(tok) >= minTokenScan {
			return true
		}
		if (i == 0 || isURLDelim(text[i-1])) && (i+len(tok) == len(text) || isURLDelim(text[i+len(tok)])) {
			return true
		}
	}
	return false
}

func isURLDelim(c byte) bool {
	return strings.IndexByte("/?#&=;.:@,", c) >= 0
}

// percentDecode decodes every %XX, and %uXXXX below U+0080, leaving any
// other '%' as it is.
func percentDecode(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c != '%':
		case i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]):
			c = unhex(s[i+1])<<4 | unhex(s[i+2])
			i += 2
		case i+5 < len(s) && (s[i+1] == 'u' || s[i+1] == 'U') && s[i+2] == '0' && s[i+3] == '0' &&
			isHex(s[i+4]) && isHex(s[i+5]) && unhex(s[i+4]) < 8:
			c = unhex(s[i+4])<<4 | unhex(s[i+5])
			i += 5
		}
		b.WriteByte(c)
	}
	return b.String()
}
