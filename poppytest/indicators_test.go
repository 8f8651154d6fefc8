package poppytest_test

import (
	"net/url"
	"testing"

	"github.com/poppyproto/poppy/poppytest"
)

// StrictResourceIndicators behaves as oidc-provider's default does
// (RFC 8707 section 2.2): the Account Token is held to the resources the
// authorization named, and every token request of the grant names one.
func TestStrictResourceIndicators(t *testing.T) {
	const api = "https://api.example.test/v1"
	srv := poppytest.NewServer(t, &poppytest.Options{API: poppytest.OpenAPIServerOptions{Resource: api}, SignIn: poppytest.SignInPolicy{StrictResourceIndicators: true, RotateAccountTokens: true}})
	mcp := srv.EndpointURL(poppytest.EndpointMCP)
	a := newAgent(t, srv, "agent.test")
	sid := a.start("usr_1").str("session_id")
	code := func(resources ...string) (string, pkce) {
		p := newPKCE()
		u, _ := a.authzURL("poppy:read", p)
		for _, r := range resources {
			u += "&resource=" + url.QueryEscape(r)
		}
		loc := browse(t, srv, u)
		return loc.Query().Get("code"), p
	}
	exchange := func(c string, p pkce, resources ...string) *response {
		f := a.codeForm(c, p.verifier, sid)
		f["resource"] = resources
		return a.tokenAs("usr_1", f)
	}

	// None of two named: refused, and the code is used up.
	c, p := code(api, mcp)
	if r := exchange(c, p); r.Status != 400 || r.str("error") != "invalid_target" {
		t.Fatalf("exchange naming none of two: %d %s", r.Status, r.Raw)
	}
	if r := exchange(c, p, api); r.str("error") != "invalid_grant" {
		t.Fatalf("the refused code again: %d %s, want invalid_grant (used up)", r.Status, r.Raw)
	}
	// Both named: refused.
	c, p = code(api, mcp)
	if r := exchange(c, p, api, mcp); r.str("error") != "invalid_target" {
		t.Fatalf("exchange naming two: %d %s", r.Status, r.Raw)
	}
	// One not named at authorization: refused.
	c, p = code(api)
	if r := exchange(c, p, mcp); r.str("error") != "invalid_target" {
		t.Fatalf("exchange naming an unauthorized resource: %d %s", r.Status, r.Raw)
	}
	// Exactly one: its token.
	c, p = code(api, mcp)
	r := exchange(c, p, api)
	if r.Status != 200 {
		t.Fatalf("exchange naming one: %d %s", r.Status, r.Raw)
	}
	if info, _ := srv.Tokens().Get(r.str("access_token")); info.Resource != api {
		t.Fatalf("token for %q, want %q", info.Resource, api)
	}
	pat := r.str("refresh_token")
	refresh := func(pat string, resources ...string) *response {
		f := a.refreshForm(pat, sid)
		f["resource"] = resources
		return a.tokenAs("usr_1", f)
	}
	// A refresh naming the other resource gets its token.
	r = refresh(pat, mcp)
	if r.Status != 200 {
		t.Fatalf("refresh naming the MCP url: %d %s", r.Status, r.Raw)
	}
	if info, _ := srv.Tokens().Get(r.str("access_token")); info.Resource != mcp {
		t.Fatalf("refresh token for %q, want %q", info.Resource, mcp)
	}
	pat = r.str("refresh_token")
	// A refresh naming none is refused after the rotation: the value
	// sent is used up, and the new one never reached the client.
	if r := refresh(pat); r.str("error") != "invalid_target" {
		t.Fatalf("refresh naming none of two: %d %s", r.Status, r.Raw)
	}
	if r := refresh(pat, api); r.str("error") != "invalid_grant" {
		t.Fatalf("the rotated-away value again: %d %s, want invalid_grant", r.Status, r.Raw)
	}
	srv.TakeViolations() // that reuse is what the SDK must never do (PA-4.8-04)

	// One resource named at authorization: a request naming none gets it.
	c, p = code(api)
	r = exchange(c, p)
	if r.Status != 200 {
		t.Fatalf("exchange naming none of one: %d %s", r.Status, r.Raw)
	}
	if info, _ := srv.Tokens().Get(r.str("access_token")); info.Resource != api {
		t.Fatalf("implicit resource %q, want %q", info.Resource, api)
	}
}
