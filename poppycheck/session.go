package poppycheck

// Step 3: a Session of a fresh User (spec 4.2), its DPoP handling (4.3)
// and the errors of the token endpoint.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/poppyproto/poppy/internal/jose"
	"github.com/poppyproto/poppy/internal/retry"
)

// session is a Session the run holds.
type session struct {
	userID string
	key    *dpopKey
	id     string
	token  string // DPoP Session Token
	signed bool
	scope  string
	ttl    time.Duration

	nonceMu sync.Mutex
	nonces  map[string]string // by host
}

func (s *session) nonce(host string) string {
	s.nonceMu.Lock()
	defer s.nonceMu.Unlock()
	return s.nonces[host]
}

func (s *session) setNonce(host, n string) {
	if n == "" {
		return
	}
	s.nonceMu.Lock()
	s.nonces[host] = n
	s.nonceMu.Unlock()
}

func newSession() (*session, error) {
	k, err := newDPoPKey()
	if err != nil {
		return nil, err
	}
	return &session{userID: "usr_" + jose.RandomID(16), key: k, nonces: map[string]string{}}, nil
}

// tokenStatus is the status spec 4.2's table gives each token endpoint
// error (and RFC 6749 5.2 the others).
var tokenStatus = map[string]int{
	"invalid_client": 401, "invalid_grant": 400, "invalid_session": 400, "account_mismatch": 400,
	"invalid_dpop_proof": 400, "use_dpop_nonce": 400, "rate_limited": 429, "invalid_request": 400,
	"invalid_scope": 400, "invalid_target": 400, "unsupported_grant_type": 400, "unauthorized_client": 400,
	"authorization_pending": 400, "slow_down": 400, "access_denied": 400, "expired_token": 400,
}

// checkTokenError checks an error answer of the token, revocation or
// device authorization endpoint (CO-4.2-11) and returns its code.
func (p *prober) checkTokenError(r *reply) string {
	code := errorCode(r.body)
	want, known := tokenStatus[code]
	ok := code != "" && (!known || r.status == want) && isJSONType(r.get("Content-Type"))
	p.check("CO-4.2-11", ok, r.ex, "error answer %d %q (want a JSON OAuth error with the status of spec 4.2)", r.status, code)
	return code
}

// tokenRequest posts form to the token endpoint with a client assertion,
// and a proof by s's key unless bearer. A use_dpop_nonce answer is
// retried once with the nonce (CO-4.3-10), a 429 once after Retry-After
// (CO-4.3-21) when that is short.
func (p *prober) tokenRequest(ctx context.Context, s *session, form url.Values, bearer bool) (*reply, map[string]any, error) {
	c := p.c
	tu, _ := url.Parse(c.tokenEP)
	for attempt := 0; attempt < 3; attempt++ {
		now := p.clock.Now()
		ca, err := p.opts.Agent.clientAssertion(c.tokenEP, now)
		if err != nil {
			return nil, nil, err
		}
		f := url.Values{}
		for k, v := range form {
			f[k] = v
		}
		if f.Get("grant_type") == grantJWTBearer {
			sa, err := p.opts.Agent.sessionAssertion(c.tokenEP, s.userID, now)
			if err != nil {
				return nil, nil, err
			}
			f.Set("assertion", sa)
			p.secret(sa)
		}
		f.Set("client_id", p.opts.Agent.ClientID())
		f.Set("client_assertion_type", "urn:ietf:params:oauth:client-assertion-type:jwt-bearer")
		f.Set("client_assertion", ca)
		p.secret(ca)
		for _, k := range []string{"refresh_token", "code", "code_verifier", "device_code"} {
			p.secret(f.Get(k))
		}
		body := []byte(f.Encode())
		req, _ := http.NewRequest(http.MethodPost, c.tokenEP, nil)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Accept", "application/json")
		if !bearer {
			proof, err := s.key.proof(http.MethodPost, htu(tu), "", s.nonce(tu.Host), now)
			if err != nil {
				return nil, nil, err
			}
			p.secret(proof)
			req.Header.Set("DPoP", proof)
		}
		r, err := p.send(ctx, req, body)
		if err != nil {
			return r, nil, err
		}
		if r.status == http.StatusOK {
			var m map[string]any
			_ = json.Unmarshal(r.body, &m)
			p.secretsOf(m)
			s.setNonce(tu.Host, r.get("DPoP-Nonce"))
			return r, m, nil
		}
		code := p.checkTokenError(r)
		switch {
		case code == "use_dpop_nonce" && !bearer && attempt == 0:
			n := r.get("DPoP-Nonce")
			if !p.check("CO-4.3-10", n != "", r.ex, "use_dpop_nonce at the token endpoint with DPoP-Nonce %s", present(n != "")) {
				return r, nil, nil
			}
			s.setNonce(tu.Host, n)
			continue
		case r.status == http.StatusTooManyRequests && attempt < 2:
			if !p.waitRetryAfter(ctx, r) {
				return r, nil, nil
			}
			continue
		}
		return r, nil, nil
	}
	return nil, nil, fmt.Errorf("poppycheck: the token endpoint kept asking for a nonce")
}

// clientPost posts form to endpoint, the device authorization or the
// revocation endpoint, with a client assertion as the SDK sends it there:
// aud the token endpoint, and no DPoP proof.
func (p *prober) clientPost(ctx context.Context, endpoint string, form url.Values) (*reply, error) {
	ca, err := p.opts.Agent.clientAssertion(p.c.tokenEP, p.clock.Now())
	if err != nil {
		return nil, err
	}
	p.secret(ca)
	f := url.Values{}
	for k, v := range form {
		f[k] = v
	}
	f.Set("client_id", p.opts.Agent.ClientID())
	f.Set("client_assertion_type", "urn:ietf:params:oauth:client-assertion-type:jwt-bearer")
	f.Set("client_assertion", ca)
	req, _ := http.NewRequest(http.MethodPost, endpoint, nil)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	return p.send(ctx, req, []byte(f.Encode()))
}

// waitRetryAfter waits out a Retry-After of
// at most 10 s. It reports whether to retry.
func (p *prober) waitRetryAfter(ctx context.Context, r *reply) bool {
	d, ok := parseRetryAfter(r.get("Retry-After"), p.clock.Now())
	if !ok || d > 10*time.Second {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// parseRetryAfter reads a Retry-After with the SDK's one reader
// (internal/retry): delta-seconds or an HTTP-date, a huge delta-seconds a
// long wait, never a negative one; ok is false when there is none the
// reader can read.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	return retry.Parse(v, now)
}

const grantJWTBearer = "urn:ietf:params:oauth:grant-type:jwt-bearer"

// nonceFreshness is why a stale proof that a Company requiring nonces took
// shows nothing: RFC 9449 section 4.3 (step 11) lets a server judge a
// proof's freshness by its nonce instead of its iat, and the proof's nonce
// was fresh.
const nonceFreshness = "the Company requires DPoP nonces and took a proof ten minutes old with a fresh nonce: RFC 9449 section 4.3 lets it judge freshness by the nonce instead of iat"

// startSession starts a Session for a fresh User and checks the answer
// (CO-4.1-01, CO-4.2-05..07).
func (p *prober) startSession(ctx context.Context) *session {
	p.step = "session"
	s, err := newSession()
	if err != nil {
		p.aborted = "poppycheck: " + err.Error()
		return nil
	}
	before := p.opts.Agent.fetches()
	r, m, err := p.tokenRequest(ctx, s, url.Values{"grant_type": {grantJWTBearer}}, false)
	if err != nil || m == nil {
		switch {
		case r != nil && errorCode(r.body) == "invalid_client":
			p.identityRefused = true
			p.aborted = "the Company refused the check's agent identity (invalid_client): it must be able to fetch " + p.opts.Agent.ClientID()
		case p.aborted == "":
			p.aborted = "no Session could be started"
		}
		p.notObserved("no Session could be started", "CO-4.2-05")
		return nil
	}
	if !p.checkSessionToken(r, m, s, "") {
		p.aborted = "the Session's token response is unusable"
		return nil
	}
	after := p.opts.Agent.fetches()
	p.check("CO-4.1-01", after.metadata > before.metadata || before.metadata > 0, r.ex,
		"the Company fetched the client metadata %d time(s) and the JWKS %d time(s) before accepting the new client", after.metadata, after.jwks)
	return s
}

// checkSessionToken checks a token response for a signed-out Session
// (CO-4.2-05..07, CO-4.2-09 when sid is the Session renewed) and stores it.
func (p *prober) checkSessionToken(r *reply, m map[string]any, s *session, sid string) bool {
	tok, _ := m["access_token"].(string)
	typ, _ := m["token_type"].(string)
	exp, okExp := m["expires_in"].(float64)
	scope, okScope := m["scope"].(string)
	id, _ := m["session_id"].(string)
	signed, okSigned := m["signed_in"].(bool)
	cc := strings.ToLower(r.get("Cache-Control"))
	rule := "CO-4.2-05"
	if sid != "" {
		rule = "CO-4.2-09"
	}
	ok := tok != "" && strings.EqualFold(typ, "DPoP") && okExp && okScope && scope == "" && id != "" && okSigned && !signed
	if sid == "" {
		ok = ok && strings.Contains(cc, "no-store")
	} else {
		ok = ok && id == sid && tok != s.token
	}
	p.check(rule, ok, r.ex, "access_token %s, token_type %q, expires_in %v, scope %q (present: %v), session_id %q, signed_in %v (present: %v), Cache-Control %q",
		present(tok != ""), typ, m["expires_in"], scope, okScope, id, signed, okSigned, r.get("Cache-Control"))
	if okExp {
		p.check("CO-4.2-06", exp > 0, r.ex, "expires_in %v", exp)
		p.check("CO-4.2-07", exp <= 24*3600, r.ex, "expires_in %v s (hours rather than days: at most a day)", exp)
	}
	if tok == "" || id == "" || !okExp || exp <= 0 {
		return false
	}
	s.token, s.id, s.ttl = tok, id, time.Duration(exp)*time.Second
	return true
}

// renew renews the Session's signed-out token (CO-4.2-09) and asks for a
// Session the Company doesn't have (CO-4.2-10).
func (p *prober) renew(ctx context.Context, s *session) {
	p.step = "renewal"
	r, m, err := p.tokenRequest(ctx, s, url.Values{"grant_type": {grantJWTBearer}, "session_id": {s.id}}, false)
	if err == nil && m != nil {
		p.checkSessionToken(r, m, s, s.id)
	} else if r != nil && r.status != 0 {
		p.fail("CO-4.2-09", r.ex, "renewing the Session answered %d %q", r.status, errorCode(r.body))
	}
	// A Session the Company doesn't know, as after it ended.
	r, m, err = p.tokenRequest(ctx, s, url.Values{"grant_type": {grantJWTBearer}, "session_id": {"ses_" + jose.RandomID(12)}}, false)
	if err == nil && r != nil {
		p.check("CO-4.2-10", m == nil && errorCode(r.body) == "invalid_session", r.ex,
			"renewing a Session the Company doesn't have answered %d %q", r.status, errorCode(r.body))
	}
}

// tokenProbes makes, on the probe Session s (not the main walk's), the
// token requests a Company must refuse and that would issue a token if
// it didn't: a scope beyond the Session's (CO-4.3-16), a proof ten
// minutes old (CO-4.3-08). A token they get back is never used: it would
// tell nothing of the rules the main walk checks.
func (p *prober) tokenProbes(ctx context.Context, s *session) {
	p.step = "token probes"
	if s == nil {
		p.notObserved("no second Session to make the probes with", "CO-4.3-16", "CO-4.3-08")
		return
	}
	// A scope beyond the Session's (a signed-out Session has none).
	r, m, err := p.tokenRequest(ctx, s, url.Values{"grant_type": {grantJWTBearer}, "session_id": {s.id}, "scope": {"poppy:read"}}, false)
	switch scope, hasScope := m["scope"].(string); {
	case err != nil || r == nil:
	case m == nil:
		p.check("CO-4.3-16", errorCode(r.body) == "invalid_scope", r.ex,
			"asking a signed-out Session for scope poppy:read answered %d %q", r.status, errorCode(r.body))
	default:
		// RFC 6749 section 5.1 lets a Company issue less than asked, and
		// say so in scope: a token that grants nothing the Session lacks
		// escalates nothing. One whose scope is absent grants what was
		// asked.
		p.check("CO-4.3-16", hasScope && strings.TrimSpace(scope) == "", r.ex,
			"asking a signed-out Session for scope poppy:read answered %d with a token of scope %q (present: %v)", r.status, scope, hasScope)
	}
	// A token endpoint proof the Company must refuse: iat ten minutes
	// old, as from an agent whose clock is off (CO-4.3-08).
	p.staleTokenProof(ctx, s)
}

// staleTokenProof sends a Session renewal whose proof's iat is ten
// minutes old.
func (p *prober) staleTokenProof(ctx context.Context, s *session) {
	c := p.c
	tu, _ := url.Parse(c.tokenEP)
	now := p.clock.Now()
	ca, err1 := p.opts.Agent.clientAssertion(c.tokenEP, now)
	sa, err2 := p.opts.Agent.sessionAssertion(c.tokenEP, s.userID, now)
	proof, err3 := s.key.proof(http.MethodPost, htu(tu), "", s.nonce(tu.Host), now.Add(-10*time.Minute))
	if err1 != nil || err2 != nil || err3 != nil {
		return
	}
	p.secret(ca, sa, proof)
	f := url.Values{"grant_type": {grantJWTBearer}, "assertion": {sa}, "session_id": {s.id}, "client_id": {p.opts.Agent.ClientID()},
		"client_assertion_type": {"urn:ietf:params:oauth:client-assertion-type:jwt-bearer"}, "client_assertion": {ca}}
	req, _ := http.NewRequest(http.MethodPost, c.tokenEP, nil)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("DPoP", proof)
	r, err := p.send(ctx, req, []byte(f.Encode()))
	if err != nil {
		return
	}
	code := errorCode(r.body)
	if r.status == http.StatusOK {
		var m map[string]any
		_ = json.Unmarshal(r.body, &m)
		p.secretsOf(m)
		if s.nonce(tu.Host) != "" {
			p.notObserved(nonceFreshness, "CO-4.3-08")
			return
		}
	} else {
		p.checkTokenError(r)
	}
	p.check("CO-4.3-08", r.status == http.StatusBadRequest && (code == "invalid_dpop_proof" || code == "use_dpop_nonce"), r.ex,
		"a token request whose proof's iat is ten minutes old answered %d %q", r.status, code)
}

func isJSONType(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	mt = strings.ToLower(strings.TrimSpace(mt))
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}
