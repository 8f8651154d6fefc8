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
// in memory when the body is small enough. A Company's protocol errors
// (a WWW-Authenticate DPoP error, extension_required, a 429 that outlasts
// the retries) come back as an *Error from RoundTrip; http.Client wraps it in
// a *url.Error, and errors.Is and errors.As see through both. Every other
// response is returned as it is.
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
)

// maxReplayBody is the largest request body kept in memory so that a
// rejected request can be sent again.
const maxReplayBody = 4 << 20

// HTTPClient returns an *http.Client whose requests carry the Session's
// token and DPoP proofs. It shares the Agent's connection pool. There is no
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

// DirectHTTPClient is HTTPClient without redirects: a 3xx answer is
// returned as it is. Requests whose body must reach exactly one URL, such
// as Mediated Sign-In's credentials (spec 4.7), use it.
func (s *Session) DirectHTTPClient() *http.Client {
	c := s.HTTPClient()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
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
}

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
	getBody, canRetry, err := replayable(req)
	if err != nil {
		return nil, err
	}
	k := tokenKey{resource: s.company.resourceFor(req.URL)} // PA-4.3-22
	htu := htuOf(req.URL)
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
		proof, err := s.key.proof(req.Method, htu, tok.ath, a.nonces.get(origin), a.clock.Now())
		if err != nil {
			return nil, fmt.Errorf("poppy: signing DPoP proof: %w", err)
		}
		r := req.Clone(ctx)
		r.Header.Set("Authorization", "DPoP "+tok.value)
		r.Header.Set("DPoP", proof)
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
		if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden &&
			resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusBadRequest {
			return resp, nil
		}
		perr := t.protocolError(req, resp)
		if perr == nil {
			return resp, nil
		}
		drain(resp)
		retry := false
		switch {
		case !canRetry:
		case perr.Code == "use_dpop_nonce" && learned && !nonceRetried:
			nonceRetried, retry = true, true
		case perr.Code == "invalid_token" && !tokenRenewed:
			tokenRenewed, retry = true, true
			stale = tok.value
		case perr.Code == "sign_in_required" && !signInTried:
			// PA-4.4-14: the token may be older than a sign-in another task
			// made, or the Session may be signed out while an Account Token
			// is stored; either gives a signed-in token, then one retry.
			signInTried = true
			ok, err := s.signInForRetry(ctx, tok)
			if err != nil {
				return nil, err
			}
			retry = ok
		case resp.StatusCode == http.StatusTooManyRequests:
			if werr := a.waitRateLimit(ctx, perr, attempt); werr != nil {
				return nil, werr
			}
			retry = true
		}
		if !retry {
			switch perr.Code {
			case "sign_in_required":
				perr.SignInTypes = s.company.SignInTypes()
			case "insufficient_scope":
				perr.SignInTypes = s.company.EligibleSignInTypes(perr.Scope)
			}
			a.log.DebugContext(ctx, "poppy: request refused", "url", endpointOf(req.URL), "status", perr.Status, "error", perr.Code)
			return nil, perr
		}
	}
}

// protocolError returns the Company's protocol error in resp, or nil for an
// ordinary response that the caller should see as it is.
func (t *sessionTransport) protocolError(req *http.Request, resp *http.Response) *Error {
	a := t.s.agent
	if resp.StatusCode == http.StatusTooManyRequests {
		return a.responseError(req.URL, resp, nil)
	}
	if code, _, ok := dpopChallenge(resp.Header); ok && code != "" {
		return a.responseError(req.URL, resp, nil)
	}
	// extension_required (spec 3.3) comes as a JSON body on a 403.
	if resp.StatusCode == http.StatusForbidden {
		if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "application/json" {
			body, err := readCapped(resp.Body, 64<<10)
			resp.Body.Close()
			var oe oauthError
			if err == nil && json.Unmarshal(body, &oe) == nil && oe.Error == "extension_required" {
				return a.responseError(req.URL, resp, body)
			}
			resp.Body = io.NopCloser(bytes.NewReader(body))
		}
	}
	return nil
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
	d := normHost(c.doc.Organization.Domain)
	if h == d || strings.HasSuffix(h, "."+d) {
		return true
	}
	c.hostsOnce.Do(c.collectHosts)
	return c.hosts[h]
}

func (c *Company) collectHosts() {
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
	return out
}

// resourceFor returns the resource a DPoP token for u must be issued for:
// that of the listed entry whose resource (an https URL) prefixes u, or
// else whose URL's directory prefixes u, the longest match winning; "" when
// no entry with a resource matches (spec 4.3: one token works everywhere).
func (c *Company) resourceFor(u *url.URL) string {
	target := htuOf(u)
	best, bestLen := "", 0
	for _, e := range c.endpoints() {
		if e.resource == "" || e.mcp {
			continue
		}
		prefix := ""
		if r, err := url.Parse(e.resource); err == nil && r.Host != "" && strings.HasPrefix(target, htuOf(r)) {
			prefix = htuOf(r)
		} else if eu, err := url.Parse(e.url); err == nil && eu.Host != "" {
			p := htuOf(eu)
			if i := strings.LastIndex(p, "/"); i >= 0 && strings.HasPrefix(target, p[:i+1]) {
				prefix = p[:i+1]
			}
		}
		if len(prefix) > bestLen {
			best, bestLen = e.resource, len(prefix)
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
	_, ok, err := s.UseAccountToken(ctx, &SignInOptions{Account: account})
	return ok, err
}
