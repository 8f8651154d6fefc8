package poppytest_test

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/poppyproto/poppy/poppytest"
)

// browserAssertion is a valid browser assertion of user for Session sid
// unless mods break it.
func (a *rawAgent) browserAssertion(user, sid string, mods ...claimsMod) string {
	now := a.srv.Clock().Now().Unix()
	h := map[string]any{"alg": "ES256", "typ": "poppy-browser+jwt", "kid": a.kid}
	c := map[string]any{"iss": a.clientID, "sub": user, "aud": a.srv.EndpointURL(poppytest.EndpointBrowserSession),
		"session_id": sid, "return_to": "https://example.test/orders", "iat": now, "exp": now + 60, "jti": randID()}
	for _, m := range mods {
		m(h, c)
	}
	return signJWT(a.t, a.key, h, c)
}

func header(k string, v any) claimsMod { return func(h, _ map[string]any) { h[k] = v } }

// join POSTs an assertion to the endpoint without following the redirect.
func join(t *testing.T, srv *poppytest.Server, target string, form url.Values, cookies ...*http.Cookie) *http.Response {
	t.Helper()
	var body *strings.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	} else {
		body = strings.NewReader("")
	}
	req, _ := http.NewRequest(http.MethodPost, target, body)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for _, c := range cookies {
		req.AddCookie(c)
	}
	c := &http.Client{Transport: srv.Transport(), CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// page GETs a page of the website with the given cookies and returns its
// status and body.
func page(t *testing.T, srv *poppytest.Server, method, u string, cookies ...*http.Cookie) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, u, nil)
	for _, c := range cookies {
		req.AddCookie(c)
	}
	r := do(t, srv.Client(), req)
	return r.Status, string(r.Raw)
}

func sessionCookie(t *testing.T, resp *http.Response) *http.Cookie {
	t.Helper()
	cs := resp.Cookies()
	if len(cs) != 1 {
		t.Fatalf("%d cookies set, want 1", len(cs))
	}
	return cs[0]
}

func webSetup(t *testing.T, opts *poppytest.Options) (*poppytest.Server, *rawAgent, string) {
	t.Helper()
	srv := poppytest.NewServer(t, opts)
	a := newAgent(t, srv, "agent.test")
	sid := a.start("usr_alice").str("session_id")
	return srv, a, sid
}

func TestBrowserSessionAccepted(t *testing.T) {
	srv, a, sid := webSetup(t, nil)
	resp := join(t, srv, srv.EndpointURL(poppytest.EndpointBrowserSession), url.Values{"assertion": {a.browserAssertion("usr_alice", sid)}})
	// CO-5-11: 303 to return_to with exactly one cookie.
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "https://example.test/orders" {
		t.Fatalf("join = %d Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if n := len(resp.Header.Values("Set-Cookie")); n != 1 {
		t.Fatalf("%d Set-Cookie headers", n)
	}
	raw := resp.Header.Get("Set-Cookie")
	c := sessionCookie(t, resp)
	// CO-5-16, CO-5-17: Secure, HttpOnly, SameSite=Lax.
	if !c.Secure || !c.HttpOnly || c.SameSite != http.SameSiteLaxMode || !strings.Contains(raw, "SameSite=Lax") {
		t.Fatalf("cookie attributes: %s", raw)
	}
	// Max-Age no longer than the cookie's life on the server (CookieTTL;
	// the Session's remaining life is TestCO_5_15_CookieNeverOutlivesSession's).
	if c.MaxAge <= 0 || c.MaxAge > 3600 || c.Domain != "example.test" {
		t.Fatalf("cookie Max-Age %d Domain %q", c.MaxAge, c.Domain)
	}
	code, body := page(t, srv, http.MethodGet, "https://example.test/orders", c)
	if code != 200 || !strings.Contains(body, "Signed out.") || !strings.Contains(body, "Session "+sid) {
		t.Fatalf("page: %d %s", code, body)
	}
	// The cookie covers the subdomains, where return_to may lead.
	code, body = page(t, srv, http.MethodGet, "https://www.example.test/", c)
	if code != 200 || !strings.Contains(body, "Session "+sid) {
		t.Fatalf("www page: %d %s", code, body)
	}
	wantRules(t, srv)
}

// CO-5-12: every refused join is a 400 page with no cookie.
func TestBrowserSessionRefused(t *testing.T) {
	srv, a, sid := webSetup(t, nil)
	other := a.start("usr_bob").str("session_id")
	b := newAgent(t, srv, "agent2.test")
	b.start("usr_alice")
	ended := a.start("usr_alice").str("session_id")
	srv.Sessions().End(ended)
	replayed := a.browserAssertion("usr_alice", sid)
	if r := join(t, srv, srv.EndpointURL(poppytest.EndpointBrowserSession), url.Values{"assertion": {replayed}}); r.StatusCode != 303 {
		t.Fatalf("first use: %d", r.StatusCode)
	}
	now := srv.Clock().Now().Unix()
	tampered := a.browserAssertion("usr_alice", sid)
	i := strings.LastIndexByte(tampered, '.') + 1
	sig, _ := b64.DecodeString(tampered[i:])
	sig[3] ^= 1
	tampered = tampered[:i] + b64.EncodeToString(sig)
	cases := []struct {
		name, assertion, rule string
		query                 bool
	}{
		// CO-5-01: the signature verifies with the client's keys.
		{"tampered signature", tampered, "", false},
		{"foreign key", signJWT(t, newKey(t), map[string]any{"alg": "ES256", "typ": "poppy-browser+jwt", "kid": a.kid},
			map[string]any{"iss": a.clientID, "sub": "usr_alice", "aud": srv.EndpointURL(poppytest.EndpointBrowserSession), "session_id": sid,
				"return_to": "https://example.test/", "iat": now, "exp": now + 60, "jti": randID()}), "", false},
		// CO-5-02: typ is exactly poppy-browser+jwt.
		{"typ JWT", a.browserAssertion("usr_alice", sid, header("typ", "JWT")), "", false},
		{"typ missing", a.browserAssertion("usr_alice", sid, func(h, _ map[string]any) { delete(h, "typ") }), "", false},
		// CO-5-03: a Session assertion is refused here.
		{"session assertion", a.sessionAssertion("usr_alice"), "", false},
		// CO-5-05: aud is the endpoint.
		{"aud token endpoint", a.browserAssertion("usr_alice", sid, set("aud", srv.EndpointURL(poppytest.EndpointToken))), "", false},
		{"aud list", a.browserAssertion("usr_alice", sid, set("aud", []any{srv.EndpointURL(poppytest.EndpointBrowserSession)})), "5-05", false},
		// CO-5-06: not expired.
		{"expired", a.browserAssertion("usr_alice", sid, set("iat", now-61), set("exp", now-1)), "", false},
		// CO-5-07: exp at most 60 s after iat.
		{"61 s", a.browserAssertion("usr_alice", sid, set("exp", now+61)), "5-08", false},
		// CO-5-08: a jti accepted before.
		{"replay", replayed, "5-04", false},
		// CO-5-09: an active Session of the same client and User.
		{"other user's session", a.browserAssertion("usr_alice", other), "", false},
		{"ended session", a.browserAssertion("usr_alice", ended), "", false},
		{"other client's session", b.browserAssertion("usr_alice", sid), "", false},
		{"unknown session", a.browserAssertion("usr_alice", "ses_nope"), "", false},
		{"no session_id", a.browserAssertion("usr_alice", sid, func(_, c map[string]any) { delete(c, "session_id") }), "", false},
		// CO-5-10: return_to on its own domain.
		{"return_to evil", a.browserAssertion("usr_alice", sid, set("return_to", "https://evil.test/")), "5-07", false},
		{"return_to http", a.browserAssertion("usr_alice", sid, set("return_to", "http://example.test/")), "5-07", false},
		{"return_to lookalike", a.browserAssertion("usr_alice", sid, set("return_to", "https://example.test.evil.test/")), "5-07", false},
		// CO-5-13: an assertion in the URL.
		{"in the URL", a.browserAssertion("usr_alice", sid), "5-10", true},
		{"malformed", "not.a.jwt", "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			target, form := srv.EndpointURL(poppytest.EndpointBrowserSession), url.Values{"assertion": {tc.assertion}}
			if tc.query {
				target += "?assertion=" + url.QueryEscape(tc.assertion)
				form = nil
			}
			resp := join(t, srv, target, form)
			if resp.StatusCode != http.StatusBadRequest || len(resp.Header.Values("Set-Cookie")) != 0 {
				t.Fatalf("got %d with Set-Cookie %q, want 400 without", resp.StatusCode, resp.Header.Values("Set-Cookie"))
			}
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
				t.Fatalf("error page Content-Type %q", ct)
			}
			if tc.rule != "" {
				wantRules(t, srv, pa(tc.rule))
			} else {
				wantRules(t, srv)
			}
		})
	}
	// CO-5-13 with a valid body too: the URL copy alone is refused.
	a2 := a.browserAssertion("usr_alice", sid)
	resp := join(t, srv, srv.EndpointURL(poppytest.EndpointBrowserSession)+"?assertion="+url.QueryEscape(a2), url.Values{"assertion": {a2}})
	if resp.StatusCode != 400 || len(resp.Cookies()) != 0 {
		t.Fatalf("assertion in URL and body: %d", resp.StatusCode)
	}
	wantRules(t, srv, pa("5-10"))
	// GET is not a join.
	code, _ := page(t, srv, http.MethodGet, srv.EndpointURL(poppytest.EndpointBrowserSession))
	if code != http.StatusMethodNotAllowed {
		t.Fatalf("GET endpoint: %d", code)
	}
}

// CO-5-04: a browser assertion is refused at the token endpoint.
func TestBrowserAssertionAtTokenEndpoint(t *testing.T) {
	srv, a, sid := webSetup(t, nil)
	form := a.startForm("usr_alice")
	form.Set("assertion", a.browserAssertion("usr_alice", sid, set("aud", srv.EndpointURL(poppytest.EndpointToken))))
	r := a.token(form)
	if r.Status != 400 || r.str("error") != "invalid_grant" {
		t.Fatalf("token endpoint: %d %s", r.Status, r.Raw)
	}
}

// CO-5-14, CO-5-18, CO-5-19: pages follow the Session's state on every
// request, to its end (which TestCO_5_15_CookieNeverOutlivesSession shows
// with the cookie's Max-Age).
func TestWebFollowsSession(t *testing.T) {
	srv, a, sid := webSetup(t, nil)
	c := sessionCookie(t, join(t, srv, srv.EndpointURL(poppytest.EndpointBrowserSession), url.Values{"assertion": {a.browserAssertion("usr_alice", sid)}}))
	exchange := func() int {
		t.Helper()
		code, _ := page(t, srv, http.MethodPost, "https://example.test/exchange", c)
		return code
	}
	// Signed out: no exchange.
	if code := exchange(); code != http.StatusUnauthorized {
		t.Fatalf("exchange signed out: %d", code)
	}
	// CO-5-14: signing in shows on the next request, with the scopes.
	if _, err := srv.Sessions().SignIn(sid, "acct_1", "poppy:read"); err != nil {
		t.Fatal(err)
	}
	_, body := page(t, srv, http.MethodGet, "https://example.test/account", c)
	if !strings.Contains(body, "Signed in to account acct_1.") || !strings.Contains(body, "Scopes: poppy:read</p>") {
		t.Fatalf("signed-in page: %s", body)
	}
	// CO-5-18: the website applies the scopes: poppy:read can't exchange.
	if code := exchange(); code != http.StatusForbidden {
		t.Fatalf("exchange with poppy:read: %d", code)
	}
	srv.Sessions().SignOut(sid)
	if _, err := srv.Sessions().SignIn(sid, "acct_1", "poppy:read", "poppy:write"); err != nil {
		t.Fatal(err)
	}
	if code := exchange(); code != http.StatusOK {
		t.Fatalf("exchange with poppy:write: %d", code)
	}
	// CO-5-19: the site's own login cookie for another account doesn't
	// change what the Session's cookie shows.
	login := &http.Cookie{Name: "poppytest_login", Value: "acct_B"}
	_, body = page(t, srv, http.MethodGet, "https://example.test/account", login, c)
	if !strings.Contains(body, "acct_1") || strings.Contains(body, "acct_B") {
		t.Fatalf("page with both cookies: %s", body)
	}
	_, body = page(t, srv, http.MethodGet, "https://example.test/account", login)
	if !strings.Contains(body, "acct_B (site login, no Session)") {
		t.Fatalf("page with the site login only: %s", body)
	}
	// Signing out shows on the next request.
	srv.Sessions().SignOut(sid)
	_, body = page(t, srv, http.MethodGet, "https://example.test/account", c)
	if !strings.Contains(body, "Signed out.") || strings.Contains(body, "acct_1") {
		t.Fatalf("signed-out page: %s", body)
	}
	// The Session's end shows on the next request.
	srv.Sessions().End(sid)
	_, body = page(t, srv, http.MethodGet, "https://example.test/account", c)
	if !strings.Contains(body, "Visitor without a Session.") {
		t.Fatalf("page after the Session ended: %s", body)
	}
	for _, wc := range srv.Sessions().Cookies() {
		if wc.Active {
			t.Fatal("a cookie of an ended Session is still active")
		}
	}
}

// The cookie also stops at its own expiry, CookieTTL.
func TestWebCookieExpires(t *testing.T) {
	srv, a, sid := webSetup(t, &poppytest.Options{Web: poppytest.WebOptions{CookieTTL: time.Minute}})
	resp := join(t, srv, srv.EndpointURL(poppytest.EndpointBrowserSession), url.Values{"assertion": {a.browserAssertion("usr_alice", sid)}})
	c := sessionCookie(t, resp)
	if !strings.Contains(resp.Header.Get("Set-Cookie"), "Max-Age="+strconv.Itoa(60)) {
		t.Fatalf("Set-Cookie %s", resp.Header.Get("Set-Cookie"))
	}
	srv.Clock().Advance(61 * time.Second)
	if _, body := page(t, srv, http.MethodGet, "https://example.test/", c); !strings.Contains(body, "Visitor without a Session.") {
		t.Fatalf("page after the cookie's expiry: %s", body)
	}
}

// CO-5-15: the cookie never outlives its Session. Its Max-Age, and its life
// on the server, are at most the Session's remaining life, not a fixed
// TTL: a Session that ends 30 minutes after its start (SessionLifetime)
// and joins at minute 20 gets a cookie of 10 minutes, though CookieTTL is
// an hour. When the Session ends, at its lifetime or by Sessions.End, the
// cookie is treated as no Session.
func TestCO_5_15_CookieNeverOutlivesSession(t *testing.T) {
	srv, a, sid := webSetup(t, &poppytest.Options{Tokens: poppytest.TokenPolicy{SessionLifetime: 30 * time.Minute}})
	start := srv.Clock().Now()
	srv.Clock().Advance(20 * time.Minute)
	resp := join(t, srv, srv.EndpointURL(poppytest.EndpointBrowserSession), url.Values{"assertion": {a.browserAssertion("usr_alice", sid)}})
	c := sessionCookie(t, resp)
	if c.MaxAge > 600 || c.MaxAge < 590 { // the fake clock runs on with the real one
		t.Fatalf("Max-Age %d with 600 s of the Session left (Set-Cookie %s)", c.MaxAge, resp.Header.Get("Set-Cookie"))
	}
	for _, wc := range srv.Sessions().Cookies() {
		if wc.ExpiresAt.After(start.Add(30 * time.Minute)) {
			t.Fatalf("the cookie lives on the server until %v, after the Session's end", wc.ExpiresAt)
		}
	}
	if _, body := page(t, srv, http.MethodGet, "https://example.test/", c); !strings.Contains(body, "Session "+sid) {
		t.Fatalf("page while the Session lasts: %s", body)
	}
	srv.Clock().Advance(10 * time.Minute)
	if _, body := page(t, srv, http.MethodGet, "https://example.test/", c); !strings.Contains(body, "Visitor without a Session.") {
		t.Fatalf("page after the Session's end: %s", body)
	}
	if info, _ := srv.Sessions().Get(sid); !info.Ended {
		t.Fatal("the Session did not end at its lifetime")
	}
	// A Session ended sooner, by Sessions.End: its cookie, set for the
	// Session's whole remaining life, stops with it.
	sid2 := a.start("usr_bob").str("session_id")
	resp = join(t, srv, srv.EndpointURL(poppytest.EndpointBrowserSession), url.Values{"assertion": {a.browserAssertion("usr_bob", sid2)}})
	c2 := sessionCookie(t, resp)
	if c2.MaxAge > 1800 || c2.MaxAge < 1790 {
		t.Fatalf("Max-Age %d for a new Session of 1800 s", c2.MaxAge)
	}
	srv.Sessions().End(sid2)
	if _, body := page(t, srv, http.MethodGet, "https://example.test/", c2); !strings.Contains(body, "Visitor without a Session.") {
		t.Fatalf("page after EndSession: %s", body)
	}
	for _, wc := range srv.Sessions().Cookies() {
		if wc.Active {
			t.Fatalf("a cookie of an ended Session is active: %+v", wc)
		}
	}
	// Renewing the Session that reached its lifetime: invalid_session.
	if r := a.token(a.renewForm("usr_alice", sid)); r.Status != http.StatusBadRequest || r.str("error") != "invalid_session" {
		t.Fatalf("renewing the Session after its lifetime: %d %s", r.Status, r.Raw)
	}
}

// CO-5-20: each join replaces the cookie; with RevokeOnRejoin the earlier
// one stops working on the server too.
func TestWebRejoin(t *testing.T) {
	for _, revoke := range []bool{false, true} {
		srv, a, sid := webSetup(t, &poppytest.Options{Web: poppytest.WebOptions{RevokeOnRejoin: revoke}})
		first := sessionCookie(t, join(t, srv, srv.EndpointURL(poppytest.EndpointBrowserSession), url.Values{"assertion": {a.browserAssertion("usr_alice", sid)}}))
		second := sessionCookie(t, join(t, srv, srv.EndpointURL(poppytest.EndpointBrowserSession), url.Values{"assertion": {a.browserAssertion("usr_alice", sid)}}, first))
		if first.Value == second.Value || first.Name != second.Name || first.Domain != second.Domain || first.Path != second.Path {
			t.Fatalf("second join set %v after %v: want a new value for the same cookie", second, first)
		}
		if _, body := page(t, srv, http.MethodGet, "https://example.test/", second); !strings.Contains(body, "Session "+sid) {
			t.Fatalf("page with the new cookie: %s", body)
		}
		_, body := page(t, srv, http.MethodGet, "https://example.test/", first)
		if got := strings.Contains(body, "Session "+sid); got == revoke {
			t.Fatalf("RevokeOnRejoin=%v: the old cookie works = %v", revoke, got)
		}
	}
}

// Negative knob: SameSite=Strict breaks CO-5-17 on purpose.
func TestWebSameSiteKnob(t *testing.T) {
	srv, a, sid := webSetup(t, &poppytest.Options{Web: poppytest.WebOptions{SameSite: http.SameSiteStrictMode}})
	resp := join(t, srv, srv.EndpointURL(poppytest.EndpointBrowserSession), url.Values{"assertion": {a.browserAssertion("usr_alice", sid)}})
	if !strings.Contains(resp.Header.Get("Set-Cookie"), "SameSite=Strict") {
		t.Fatalf("Set-Cookie %s", resp.Header.Get("Set-Cookie"))
	}
}

// Without the endpoint in poppy.json the path is an ordinary page, and no
// join is possible.
func TestWebWithoutEndpoint(t *testing.T) {
	srv, a, sid := webSetup(t, &poppytest.Options{Discovery: poppytest.DiscoveryOptions{DropBrowserSession: true}})
	if srv.EndpointURL(poppytest.EndpointBrowserSession) != "" {
		t.Fatal("endpoint reported")
	}
	resp := join(t, srv, "https://example.test"+poppytest.BrowserSessionPath, url.Values{"assertion": {a.browserAssertion("usr_alice", sid)}})
	if resp.StatusCode == http.StatusSeeOther || len(resp.Cookies()) != 0 {
		t.Fatalf("join without an endpoint: %d", resp.StatusCode)
	}
	if len(srv.RequestsTo(poppytest.EndpointBrowserSession)) != 0 {
		t.Fatal("classified as a join")
	}
}

func TestBrowserTrust(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{Web: poppytest.WebOptions{Subdomains: []string{"shop"}}})
	tr := srv.BrowserTrust()
	if !strings.HasPrefix(tr.Addr, "127.0.0.1:") || len(tr.SPKI) != 44 || len(tr.CAPEM) == 0 {
		t.Fatalf("trust = %+v", tr)
	}
	rules := tr.ChromiumHostRules()
	if !strings.Contains(rules, "MAP shop.example.test "+tr.Addr+",") || !strings.HasSuffix(rules, ",MAP * ~NOTFOUND,EXCLUDE 127.0.0.1") {
		t.Fatalf("rules = %s", rules)
	}
	for _, h := range []string{"example.test", "www.example.test", "shop.example.test", "auth.example.test", "api.example.test"} {
		found := false
		for _, x := range tr.Hosts {
			found = found || x == h
		}
		if !found {
			t.Fatalf("Hosts %v lack %s", tr.Hosts, h)
		}
	}
}
