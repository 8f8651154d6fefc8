package poppycheck

// Steps 7 to 9: the browser-session endpoint (spec 5), the operations
// endpoint (OPS 2, 9) and the scope errors of Device Sign-In (spec 4.4),
// none of which needs a User.

import (
	"context"
	"net/http"
	"net/url"
	"strings"

	"github.com/poppyproto/poppy/internal/jose"
)

// browserSession joins the Session as the agent's browser would (a form
// POST of a browser assertion) and checks the answer and the cookie
// (CO-5-11, CO-5-16, CO-5-17), then with a Session the Company doesn't
// have (CO-5-09, CO-5-12).
func (p *prober) browserSession(ctx context.Context, s *session) {
	p.step = "browser session"
	c := p.c
	returnTo := "https://" + strings.TrimPrefix(c.org, "www.") + "/"
	post := func(sessionID string) (*reply, error) {
		a, err := p.opts.Agent.browserAssertion(c.browserEP, s.userID, sessionID, returnTo, p.clock.Now())
		if err != nil {
			return nil, err
		}
		p.secret(a)
		req, _ := http.NewRequest(http.MethodPost, c.browserEP, nil)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Accept", "text/html")
		return p.send(ctx, req, []byte(url.Values{"assertion": {a}}.Encode()))
	}
	r, err := post(s.id)
	if err != nil {
		return
	}
	for _, sc := range r.header.Values("Set-Cookie") {
		if _, v, ok := strings.Cut(strings.SplitN(sc, ";", 2)[0], "="); ok {
			p.secret(v)
		}
	}
	cookies := (&http.Response{Header: r.header}).Cookies()
	loc := r.get("Location")
	p.check("CO-5-11", r.status == http.StatusSeeOther && loc == returnTo && len(cookies) > 0, r.ex,
		"a good browser assertion answered %d to %q with %d cookie(s)", r.status, loc, len(cookies))
	for _, ck := range cookies {
		p.check("CO-5-16", ck.Secure && ck.HttpOnly, r.ex, "cookie %q: Secure %v, HttpOnly %v", ck.Name, ck.Secure, ck.HttpOnly)
		p.check("CO-5-17", ck.SameSite == http.SameSiteLaxMode || ck.SameSite == http.SameSiteNoneMode, r.ex,
			"cookie %q: SameSite %s", ck.Name, sameSite(ck.SameSite))
	}
	r, err = post("ses_" + jose.RandomID(12))
	if err != nil {
		return
	}
	p.check("CO-5-09", r.status == http.StatusBadRequest, r.ex, "a browser assertion for a Session the Company doesn't have answered %d", r.status)
	p.check("CO-5-12", r.status == http.StatusBadRequest && len(r.header.Values("Set-Cookie")) == 0, r.ex,
		"a refused browser assertion answered %d with %d Set-Cookie header(s)", r.status, len(r.header.Values("Set-Cookie")))
}

func sameSite(s http.SameSite) string {
	switch s {
	case http.SameSiteLaxMode:
		return "Lax"
	case http.SameSiteStrictMode:
		return "Strict"
	case http.SameSiteNoneMode:
		return "None"
	}
	return "not set"
}

// operationsEndpoint reads an operation the Company never proposed
// (CO-OPS9-01, CO-OPS9-02).
func (p *prober) operationsEndpoint(ctx context.Context, s *session) {
	p.step = "operations"
	m, _ := p.c.exts["operations"].(map[string]any)
	ep, _ := m["endpoint"].(string)
	if ok, _ := p.okURL(ep); !ok {
		return // CO-OPS2-01 failed
	}
	token := s.token
	if res, _ := m["resource"].(string); res != "" {
		t, ok := p.resourceToken(ctx, s, res, "CO-OPS2-02")
		if !ok {
			return
		}
		token = t
	}
	r, err := p.resourceRequest(ctx, s, http.MethodGet, strings.TrimSuffix(ep, "/")+"/op_"+jose.RandomID(12), nil, http.Header{"Accept": {"application/json"}}, token, proofOK)
	if err != nil {
		return
	}
	code := errorCode(r.body)
	if ch, _, _ := challenge(r.header, "DPoP"); r.status == http.StatusForbidden && ch == "sign_in_required" {
		// The Company's operations endpoint needs a signed-in Session:
		// the answer to a signed-out one says so, as spec 6 has it
		// (CO-OPS9-01's token errors), and says nothing of unknown
		// operations.
		p.notObserved("the operations endpoint answered the signed-out Session sign_in_required: reading an operation needs a sign-in there", "CO-OPS9-02", "CO-OPS9-01", "CO-OPS2-02")
		return
	}
	p.check("CO-OPS9-02", r.status == http.StatusNotFound && code == "operation_not_found", r.ex, "an operation the Company never proposed answered %d %q", r.status, code)
	p.check("CO-OPS9-01", isJSONType(r.get("Content-Type")) && code != "", r.ex, "the error is JSON with an error code: %q", code)
	if _, has := m["resource"]; has && r.status == http.StatusNotFound {
		p.pass("CO-OPS2-02", r.ex, "the operations endpoint took a token issued for its resource")
	}
}

// deviceScopes asks the device authorization endpoint for no scope, an
// unknown scope and a scope Device Sign-In doesn't offer (CO-4.4-07..09).
// Nobody is shown the codes it answers with, so nobody signs in.
func (p *prober) deviceScopes(ctx context.Context) {
	p.step = "device sign-in scopes"
	c := p.c
	offered := c.signIn["device"]
	if c.deviceEP == "" || offered == nil {
		p.notObserved("the Company doesn't offer Device Sign-In, the one sign-in an agent starts without a User", "CO-4.4-07", "CO-4.4-08", "CO-4.4-09")
		return
	}
	other := ""
	for _, typ := range []string{"direct", "mediated"} {
		for _, sc := range c.signIn[typ] {
			if !contains(offered, sc) && other == "" {
				other = sc
			}
		}
	}
	cases := []struct{ rule, scope, what string }{
		{"CO-4.4-07", "", "no scope"},
		{"CO-4.4-08", "poppycheck_unknown_" + strings.ToLower(jose.RandomID(4)), "a scope the Company doesn't define"},
	}
	if other != "" {
		cases = append(cases, struct{ rule, scope, what string }{"CO-4.4-09", other, "a scope another sign-in type offers but Device Sign-In doesn't"})
	} else {
		p.notObserved("every scope the Company offers is offered by Device Sign-In", "CO-4.4-09")
	}
	for _, k := range cases {
		f := url.Values{}
		if k.scope != "" {
			f.Set("scope", k.scope)
		}
		r, err := p.clientPost(ctx, c.deviceEP, f)
		if err != nil {
			return
		}
		code := ""
		if r.status != http.StatusOK {
			code = p.checkTokenError(r)
		} else {
			p.deviceCodes(r.body)
		}
		p.check(k.rule, r.status == http.StatusBadRequest && code == "invalid_scope", r.ex, "a device authorization request with %s answered %d %q", k.what, r.status, code)
	}
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}
