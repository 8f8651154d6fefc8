package poppytest

// Client authentication (spec 4.1): private_key_jwt with the keys of the
// client metadata document at the client_id URL. The fake fetches the
// document and its JWKS through its own client (User-Agent
// InternalUserAgent, logged with Internal set) and caches them for
// min(max-age, 60 s) of Clock time (60 s without Cache-Control, not at all
// with no-store, no-cache or max-age=0). When an assertion doesn't verify
// against a cached key set, the fake refetches once, so key rotation works.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwk"
)

const clientAssertionType = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"

// Assertion lifetimes: longer than maxAssertionLifetime is rejected; longer
// than assertionLifetimeBound is accepted and recorded as a violation.
const (
	maxAssertionLifetime   = 5 * time.Minute
	assertionLifetimeBound = 60 * time.Second
	clockLeeway            = 60 * time.Second
	maxClientCache         = 60 * time.Second
)

// clientInfo is a fetched and checked client metadata document.
type clientInfo struct {
	id       string
	metadata map[string]any
	set      jwk.Set
	expires  time.Time // Clock time; zero = don't reuse
}

type clientError struct{ msg string }

func (e *clientError) Error() string { return e.msg }

func clientErr(format string, args ...any) error {
	return &clientError{fmt.Sprintf(format, args...)}
}

// authenticateClient performs client authentication on a token or
// revocation request (CO-4.1-01..09). endpoint is the URL the request was
// sent to; the client assertion's aud may be it, the token endpoint or the
// issuer.
// requireFormPOST answers r with invalid_request, and reports false, unless
// it is a POST whose parameters are all in a form-encoded body, as the
// token, device authorization and revocation endpoints require (RFC 6749
// 3.2, RFC 8628 3.1, RFC 7009 2.1). what names the endpoint in the error.
func (s *Server) requireFormPOST(w http.ResponseWriter, r *http.Request, what string) bool {
	x := exchangeOf(r)
	switch {
	case r.Method != http.MethodPost:
		w.Header().Set("Allow", "POST")
		s.writeTokenError(w, r, &protoError{status: http.StatusMethodNotAllowed, code: "invalid_request", desc: "the " + what + " takes POST"})
	case x.form == nil:
		s.writeTokenError(w, r, &protoError{code: "invalid_request", desc: "the body must be application/x-www-form-urlencoded"})
	case r.URL.RawQuery != "":
		s.writeTokenError(w, r, &protoError{code: "invalid_request", desc: "parameters belong in the body, not the URL"})
	default:
		return true
	}
	return false
}

func (s *Server) authenticateClient(r *http.Request, form url.Values, endpoint string) (*clientInfo, *protoError) {
	x := exchangeOf(r)
	fail := func(format string, args ...any) (*clientInfo, *protoError) {
		return nil, &protoError{code: "invalid_client", desc: fmt.Sprintf(format, args...)}
	}
	if r.Header.Get("Authorization") != "" || form.Has("client_secret") {
		return fail("only private_key_jwt client authentication is accepted")
	}
	id := form.Get("client_id")
	if id == "" {
		return fail("client_id is missing")
	}
	if len(form["client_id"]) > 1 || len(form["client_assertion"]) > 1 {
		return fail("client_id and client_assertion must appear once")
	}
	if form.Get("client_assertion_type") != clientAssertionType {
		return fail("client_assertion_type must be %s", clientAssertionType)
	}
	if form.Get("client_assertion") == "" {
		return fail("client_assertion is missing")
	}
	u, err := url.Parse(id)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.Fragment != "" || u.User != nil {
		return fail("client_id must be an https URL")
	}
	// Company policy (CO-4.1-05, -06, -07).
	o := &s.opts
	if why := s.clientRefused(id); why != "" {
		return fail("%s", why)
	}
	s.mu.Lock()
	known := s.accepted[id]
	full := o.Clients.MaxNew > 0 && len(s.accepted) >= o.Clients.MaxNew
	s.mu.Unlock()
	if !known && full {
		return fail("the Company accepts no new client_id values") // CO-4.1-09, A-48
	}

	j, err := splitJWS(form.Get("client_assertion"))
	if err != nil {
		return fail("client_assertion is malformed")
	}
	ci, fresh, err := s.clientFor(r.Context(), x.idx, id, false)
	if err != nil {
		return fail("%v", err)
	}
	if err := verifyWithSet(j, ci.set); err != nil {
		if fresh {
			return fail("client_assertion: %v", err)
		}
		if ci, _, err = s.clientFor(r.Context(), x.idx, id, true); err != nil {
			return fail("%v", err)
		}
		if err := verifyWithSet(j, ci.set); err != nil {
			return fail("client_assertion: %v", err)
		}
	}
	// Claims (RFC 7523 3, CO-4.1-04).
	c := j.claims
	iss, _ := str(c, "iss")
	sub, _ := str(c, "sub")
	if iss != id || sub != id {
		return fail("client_assertion iss and sub must both be the client_id")
	}
	match := ""
	switch aud := c["aud"].(type) {
	case string:
		match = s.audienceMatch(aud, endpoint)
	case []any:
		for _, a := range aud {
			if as, ok := a.(string); ok && match == "" {
				match = s.audienceMatch(as, endpoint)
			}
		}
	}
	if x.clientAssertion = decodeJWTForLog(j.compact); x.clientAssertion != nil {
		x.clientAssertion.AudienceMatch = match
	}
	if match == "" {
		return fail("client_assertion aud must be the token endpoint, the issuer or this endpoint")
	}
	now := s.clock.Now()
	if perr := s.checkLifetime(x.idx, c, now, "PA-4.1-09", "client assertion"); perr != "" {
		return fail("client_assertion %s", perr)
	}
	jti, _ := str(c, "jti")
	if jti == "" {
		s.violate(x.idx, "PA-4.1-09", "client assertion has no jti")
	} else {
		exp, _ := num(c, "exp")
		key := id + " " + jti
		s.mu.Lock()
		seen := s.clientJTIs.seen(key, now)
		if !seen {
			s.clientJTIs.add(key, time.Unix(int64(exp), 0).Add(clockLeeway), now)
		}
		s.mu.Unlock()
		if seen {
			s.violate(x.idx, "PA-4.1-09", "client assertion jti reused")
			return fail("client_assertion jti was already used")
		}
	}
	s.mu.Lock()
	if !s.accepted[id] && o.Clients.MaxNew > 0 && len(s.accepted) >= o.Clients.MaxNew {
		s.mu.Unlock()
		return fail("the Company accepts no new client_id values")
	}
	s.accepted[id] = true
	s.mu.Unlock()
	return ci, nil
}

// clientRefused says why Company policy refuses client_id id (CO-4.1-05,
// -06, -07), or "" when it doesn't.
func (s *Server) clientRefused(id string) string {
	o := &s.opts
	s.mu.Lock()
	revoked := s.revoked[id]
	s.mu.Unlock()
	switch {
	case revoked:
		return "client_id has been revoked"
	case slices.Contains(o.Clients.Blocklist, id):
		return "client_id is blocked"
	case o.Clients.Allowlist != nil && !slices.Contains(o.Clients.Allowlist, id):
		return "client_id is not on the allowlist"
	case o.Clients.RequireRegistration && !slices.Contains(o.Clients.Registered, id):
		return "client_id is not registered"
	}
	return ""
}

// audienceMatch names what an aud value matched.
func (s *Server) audienceMatch(aud, endpoint string) string {
	switch aud {
	case s.tokenEndpoint():
		return "token_endpoint"
	case s.issuer:
		return "issuer"
	case endpoint:
		return "endpoint"
	}
	return ""
}

// checkLifetime checks exp, iat and nbf of an assertion: exp in the future,
// iat and nbf not in the future beyond the leeway, a lifetime of at most
// 5 min (beyond 60 s is recorded as a violation of rule). It returns a
// description of the failure or "".
func (s *Server) checkLifetime(idx int, c map[string]any, now time.Time, rule, what string) string {
	exp, ok := num(c, "exp")
	if !ok {
		return "has no numeric exp"
	}
	if exp > 9e9 || !now.Before(time.Unix(int64(exp), 0)) {
		return "has expired"
	}
	start := float64(now.Unix())
	if iat, ok := num(c, "iat"); ok {
		if time.Unix(int64(iat), 0).After(now.Add(clockLeeway)) {
			return "iat is in the future"
		}
		start = iat
	} else if _, present := c["iat"]; present {
		return "iat is not a number"
	}
	if nbf, ok := num(c, "nbf"); ok && time.Unix(int64(nbf), 0).After(now.Add(clockLeeway)) {
		return "is not valid yet (nbf)"
	}
	life := time.Duration(exp-start) * time.Second
	if life > maxAssertionLifetime {
		return "lifetime exceeds 5 minutes"
	}
	if life > assertionLifetimeBound {
		s.violate(idx, rule, "%s lifetime is %v, over 60 s", what, life)
	}
	return ""
}

// clientFor returns the checked metadata of client id, from the cache
// unless refresh is set or the entry is stale. fresh reports whether it
// was fetched by this call.
func (s *Server) clientFor(ctx context.Context, idx int, id string, refresh bool) (ci *clientInfo, fresh bool, err error) {
	now := s.clock.Now()
	s.clientMu.Lock()
	ci = s.clients[id]
	s.clientMu.Unlock()
	if ci != nil && !refresh && now.Before(ci.expires) {
		return ci, false, nil
	}
	ci, raw, err := s.fetchClient(ctx, idx, id)
	if err != nil {
		return nil, true, err
	}
	s.clientMu.Lock()
	s.clients[id] = ci
	s.clientDocs[id] = raw
	for i := range ci.set.Len() {
		k, _ := ci.set.Key(i)
		if tp, err := thumbprint(k); err == nil {
			s.published[tp] = id
		}
	}
	s.clientMu.Unlock()
	return ci, true, nil
}

// fetchClient fetches and checks the client metadata document and its JWKS
// (spec 4.1, CO-4.1-01..03).
func (s *Server) fetchClient(ctx context.Context, idx int, id string) (*clientInfo, []byte, error) {
	raw, hdr, err := s.fetchJSON(ctx, id)
	if err != nil {
		return nil, nil, clientErr("client metadata: %v%s", err, s.fetchHint(id))
	}
	md, err := decodeObject(raw)
	if err != nil {
		return nil, nil, clientErr("client metadata is not a JSON object")
	}
	if got, _ := str(md, "client_id"); got != id {
		return nil, nil, clientErr("client metadata client_id does not equal the URL it was fetched from")
	}
	idHost := hostOf(id)
	jwksURI, _ := str(md, "jwks_uri")
	if !sameHostHTTPS(jwksURI, idHost) {
		return nil, nil, clientErr("client metadata jwks_uri must be an https URL on the client_id host")
	}
	if v, ok := md["redirect_uris"]; ok {
		list, ok := v.([]any)
		if !ok {
			return nil, nil, clientErr("client metadata redirect_uris must be a list")
		}
		for _, e := range list {
			u, _ := e.(string)
			if !sameHostHTTPS(u, idHost) {
				return nil, nil, clientErr("client metadata redirect_uris must be https URLs on the client_id host")
			}
		}
	}
	if m, _ := str(md, "token_endpoint_auth_method"); m != "private_key_jwt" {
		return nil, nil, clientErr("client metadata token_endpoint_auth_method must be private_key_jwt")
	}
	keysRaw, keysHdr, err := s.fetchJSON(ctx, jwksURI)
	if err != nil {
		return nil, nil, clientErr("client JWKS: %v%s", err, s.fetchHint(jwksURI))
	}
	var shape struct {
		Keys []map[string]any `json:"keys"`
	}
	if err := json.Unmarshal(keysRaw, &shape); err != nil || shape.Keys == nil {
		return nil, nil, clientErr("client JWKS is not a JWK Set")
	}
	for _, k := range shape.Keys {
		if hasPrivateMembers(k) {
			s.violate(idx, "PA-4.1-05", "the JWKS at %s publishes private or symmetric key material", jwksURI)
			return nil, nil, clientErr("client JWKS must contain only public keys")
		}
	}
	set, err := jwk.Parse(keysRaw, jwk.WithIgnoreParseError(true))
	if err != nil || set.Len() == 0 {
		return nil, nil, clientErr("client JWKS has no usable key")
	}
	ttl := min(cacheTTL(hdr), cacheTTL(keysHdr))
	ci := &clientInfo{id: id, metadata: md, set: set}
	if ttl > 0 {
		ci.expires = s.clock.Now().Add(ttl)
	}
	return ci, raw, nil
}

// fetchHint tells a test why a fetch of the agent's document at u failed
// when the likely cause is the test's set-up: nothing serves the host.
func (s *Server) fetchHint(u string) string {
	h := hostOf(u)
	s.hostsMu.RLock()
	_, served := s.agents[h]
	s.hostsMu.RUnlock()
	// Short: the SDK keeps 200 bytes of an error_description.
	if served {
		return fmt.Sprintf("; poppytest: the HandleAgent(%q) handler has nothing at this path", h)
	}
	return fmt.Sprintf("; poppytest: nothing serves %s: call Server.HandleAgent(%q, identity.Handler(nil)) or use poppytest/agenttest", h, h)
}

// fetchJSON GETs a URL through the fake's internal client.
func (s *Server) fetchJSON(ctx context.Context, u string) ([]byte, http.Header, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, nil, errors.New("bad URL")
	}
	req.Header.Set("Accept", "application/json")
	resp, err := s.internal.Do(req)
	if err != nil {
		return nil, nil, errors.New("fetch failed")
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("fetch returned HTTP %d", resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 256<<10))
	if err != nil {
		return nil, nil, errors.New("fetch failed")
	}
	return b, resp.Header, nil
}

// cacheTTL is how long the fake reuses a fetched client document.
func cacheTTL(h http.Header) time.Duration {
	cc := strings.ToLower(h.Get("Cache-Control"))
	if cc == "" {
		return maxClientCache
	}
	ttl := maxClientCache
	for _, d := range strings.Split(cc, ",") {
		d = strings.TrimSpace(d)
		switch {
		case d == "no-store" || d == "no-cache":
			return 0
		case strings.HasPrefix(d, "max-age="):
			n, err := strconv.Atoi(strings.Trim(strings.TrimPrefix(d, "max-age="), `"`))
			if err != nil || n <= 0 {
				return 0
			}
			ttl = time.Duration(min(n, int(maxClientCache/time.Second))) * time.Second // no overflow
		}
	}
	return min(ttl, maxClientCache)
}

func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return strings.ToLower(u.Host)
}

// sameHostHTTPS reports whether raw is an https URL on host, compared
// exactly, port included (A-02: the fake reads "same domain" as the same
// host).
func sameHostHTTPS(raw, host string) bool {
	u, err := url.Parse(raw)
	return err == nil && u.Scheme == "https" && u.Host != "" && strings.ToLower(u.Host) == host && u.User == nil
}
