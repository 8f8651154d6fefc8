package poppytest_test

import (
	"context"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/poppyproto/poppy/poppytest"
)

func TestCO_4_5_DirectSignIn(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := newAgent(t, srv, "agent.test")
	a.setMeta(func(m map[string]any) { m["logo_uri"] = "https://agent.test/logo.png" })
	start := a.start("usr_1")
	sid, outTok := start.str("session_id"), start.str("access_token")

	p := newPKCE()
	u, state := a.authzURL("poppy:read poppy:write", p)
	loc := browse(t, srv, u)
	// CO-4.5-02: the consent page names the agent and shows the scopes.
	cs := srv.SignIn().Consents()
	if len(cs) != 1 || cs[0].Type != "direct" || cs[0].ClientName != "Raw Agent" || cs[0].LogoURI != "https://agent.test/logo.png" ||
		cs[0].ClientID != a.clientID || !slices.Equal(cs[0].Scopes, []string{"poppy:read", "poppy:write"}) || cs[0].RedirectURI != "https://agent.test/oauth/callback" {
		t.Fatalf("consent request = %+v", cs)
	}
	// CO-4.5-03: code, the same state, and iss.
	q := loc.Query()
	if loc.Scheme+"://"+loc.Host+loc.Path != "https://agent.test/oauth/callback" || q.Get("code") == "" || q.Get("state") != state || q.Get("iss") != srv.Issuer() {
		t.Fatalf("redirect = %v", loc)
	}
	// CO-4.5-05: a wrong verifier uses the code up.
	r := a.tokenAs("usr_1", a.codeForm(q.Get("code"), newPKCE().verifier, sid))
	if r.Status != 400 || r.str("error") != "invalid_grant" {
		t.Fatalf("wrong verifier: %d %s", r.Status, r.Raw)
	}
	if r := a.tokenAs("usr_1", a.codeForm(q.Get("code"), p.verifier, sid)); r.Status != 400 || r.str("error") != "invalid_grant" {
		t.Fatalf("code after a wrong verifier: %d %s", r.Status, r.Raw)
	}

	// A second sign-in, exchanged properly.
	p = newPKCE()
	u, _ = a.authzURL("poppy:read poppy:write", p)
	code := browse(t, srv, u).Query().Get("code")
	r = a.tokenAs("usr_1", a.codeForm(code, p.verifier, sid))
	// CO-4.4-11: the spec 4.4 response for the same Session.
	if r.Status != 200 || r.str("token_type") != "DPoP" || r.str("access_token") == "" || !strings.HasPrefix(r.str("refresh_token"), "pat_") ||
		r.Body["refresh_token_expires_in"] != float64(30*24*3600) || r.str("scope") != "poppy:read poppy:write" ||
		r.str("session_id") != sid || r.Body["signed_in"] != true || r.Body["expires_in"] != float64(3600) || r.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("exchange = %d %s", r.Status, r.Raw)
	}
	in, pat := r.str("access_token"), r.str("refresh_token")
	if c := a.call("GET", "/orders", in, ""); c.Status != 200 || !strings.Contains(string(c.Raw), "acct_1") {
		t.Errorf("signed-in token at /orders: %d %s", c.Status, c.Raw)
	}
	// CO-4.4-13: the older signed-out token stays signed out.
	if c := a.call("GET", "/orders", outTok, ""); c.Status != 403 || !strings.Contains(c.wwwAuth(), "sign_in_required") {
		t.Errorf("old token: %d %q", c.Status, c.wwwAuth())
	}
	info, _ := srv.Tokens().Account(pat)
	if info.ClientID != a.clientID || info.UserID != "usr_1" || info.Account != "acct_1" || info.Type != "direct" ||
		!slices.Equal(info.Scopes, []string{"poppy:read", "poppy:write"}) || info.Revoked || info.Current != pat {
		t.Errorf("Account Token record = %+v", info)
	}
	if si, _ := srv.Sessions().Get(sid); !si.SignedIn || si.Account != "acct_1" || si.AccountToken != pat {
		t.Errorf("session = %+v", si)
	}
	// CO-4.5-06: a code is one-time; its reuse revokes what it issued (RFC 6749 4.1.2).
	if r := a.tokenAs("usr_1", a.codeForm(code, p.verifier, sid)); r.Status != 400 || r.str("error") != "invalid_grant" {
		t.Errorf("reused code: %d %s", r.Status, r.Raw)
	}
	if info, _ := srv.Tokens().Account(pat); !info.Revoked {
		t.Error("reusing a code left its Account Token valid")
	}
}

func TestCO_4_5_01_RedirectURIExactMatch(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := newAgent(t, srv, "agent.test")
	for _, bad := range []string{"https://agent.test/oauth/callback/", "https://agent.test/oauth/callback?x=1", "https://evil.test/oauth/callback"} {
		u, _ := a.authzURL("poppy:read", newPKCE(), "redirect_uri", bad)
		r := asBrowser(t, srv, "GET", u, nil)
		// CO-4.5-01: an error page, no redirect.
		if r.Status != 400 || r.Header.Get("Location") != "" || !strings.HasPrefix(r.Header.Get("Content-Type"), "text/html") {
			t.Errorf("redirect_uri %q: %d %v", bad, r.Status, r.Header)
		}
		if _, err := srv.Browse(context.Background(), u); err == nil || !strings.Contains(err.Error(), "redirect_uri") {
			t.Errorf("Browse with redirect_uri %q: %v", bad, err)
		}
	}
	wantRules(t, srv, pa("4.5-04"), pa("4.5-04"), pa("4.5-04"), pa("4.5-04"), pa("4.5-04"), pa("4.5-04"))
	// An unknown client gets a page too.
	u, _ := a.authzURL("poppy:read", newPKCE(), "client_id", "https://agent.test/nope.json")
	if r := asBrowser(t, srv, "GET", u, nil); r.Status != 400 || r.Header.Get("Location") != "" {
		t.Errorf("unknown client: %d %v", r.Status, r.Header)
	}
	if len(srv.SignIn().Consents()) != 0 {
		t.Error("a consent page was shown")
	}
}

func TestCO_4_5_04_Decline(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := newAgent(t, srv, "agent.test")
	first := a.signedIn("usr_1", "poppy:read")
	pat := first.str("refresh_token")
	srv.SignIn().Deny()
	u, state := a.authzURL("poppy:read poppy:write", newPKCE())
	loc := browse(t, srv, u)
	q := loc.Query()
	// CO-4.5-04
	if q.Get("error") != "access_denied" || q.Get("state") != state || q.Get("iss") != srv.Issuer() || q.Has("code") {
		t.Fatalf("decline redirect = %v", loc)
	}
	// CO-4.4-10: the old Account Token still works.
	if r := a.tokenAs("usr_1", a.refreshForm(pat, first.str("session_id"))); r.Status != 200 || r.str("scope") != "poppy:read" {
		t.Errorf("refresh after a declined sign-in: %d %s", r.Status, r.Raw)
	}
	// The User leaves without answering: no redirect.
	srv.SignIn().NeverAnswer()
	u, _ = a.authzURL("poppy:read", newPKCE())
	if loc, err := srv.Browse(context.Background(), u); loc != "" || err != nil {
		t.Errorf("NeverAnswer: %q %v", loc, err)
	}
	// Approving none of the requested scopes declines.
	srv.SignIn().ApproveScopes("", "addresses")
	u, _ = a.authzURL("poppy:read", newPKCE())
	if loc := browse(t, srv, u); loc.Query().Get("error") != "access_denied" {
		t.Errorf("approving no requested scope: %v", loc)
	}
}

func TestCO_4_4_06_GrantedScopes(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := newAgent(t, srv, "agent.test")
	// CO-4.4-06: approve-all grants exactly what was requested.
	if r := a.signedIn("usr_1", "poppy:read"); r.str("scope") != "poppy:read" {
		t.Errorf("approve all of poppy:read: %s", r.Raw)
	}
	// The User approves only some (PA-4.4-11 setup); extra approvals don't count.
	srv.SignIn().ApproveScopes("acct_1", "poppy:read", "addresses")
	r := a.signedIn("usr_2", "poppy:read poppy:write")
	// CO-4.4-06
	if r.str("scope") != "poppy:read" {
		t.Errorf("partial approval: %s", r.Raw)
	}
	if c := a.call("POST", "/orders/ord_7Hk2/exchanges", r.str("access_token"), "{}"); c.Status != 403 || !strings.Contains(c.wwwAuth(), "insufficient_scope") {
		t.Errorf("write with read only: %d %q", c.Status, c.wwwAuth())
	}
	// A programmable User sees every request and picks the account.
	srv = poppytest.NewServer(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{Accounts: []poppytest.Account{
		{ID: "personal", Credentials: map[string]string{"email": "p@example.test", "password": "pw-personal"}},
		{ID: "business", Credentials: map[string]string{"email": "b@example.test", "password": "pw-business"}},
	}}})
	a = newAgent(t, srv, "agent.test")
	srv.SignIn().SetUser(func(req poppytest.ConsentRequest) poppytest.Consent {
		return poppytest.Consent{Approve: true, Account: "business", Scopes: []string{"poppy:write"}}
	})
	r = a.signedIn("usr_1", "poppy:read poppy:write addresses")
	if r.str("scope") != "poppy:write" {
		t.Errorf("scope = %s", r.Raw)
	}
	if si, _ := srv.Sessions().Get(r.str("session_id")); si.Account != "business" {
		t.Errorf("account = %q", si.Account)
	}
}

func TestCO_4_5_AuthorizationErrors(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := newAgent(t, srv, "agent.test")
	errorOf := func(t *testing.T, u string) url.Values {
		t.Helper()
		r := asBrowser(t, srv, "GET", u, nil)
		if r.Status != 303 {
			t.Fatalf("status %d %s", r.Status, r.Raw)
		}
		l, _ := url.Parse(r.Header.Get("Location"))
		if l.Host != "agent.test" || l.Query().Get("iss") != srv.Issuer() {
			t.Fatalf("Location %v", l)
		}
		return l.Query()
	}
	cases := []struct {
		name, code string
		set        []string
		rules      []string
	}{
		// CO-4.4-08: an unknown scope, redirected.
		{"unknown scope", "invalid_scope", []string{"scope", "poppy:admin"}, nil},
		// CO-4.4-07
		{"no scope", "invalid_scope", []string{"scope", ""}, nil},
		{"double space", "invalid_scope", []string{"scope", "poppy:read  poppy:write"}, []string{pa("4.4-06")}},
		{"plain PKCE", "invalid_request", []string{"code_challenge_method", "plain"}, []string{pa("4.5-02")}},
		{"no PKCE method", "invalid_request", []string{"code_challenge_method", ""}, []string{pa("4.5-02")}},
		{"bad challenge", "invalid_request", []string{"code_challenge", "abc"}, []string{pa("4.5-02")}},
		{"no state", "invalid_request", []string{"state", ""}, []string{pa("4.5-01")}},
		{"token response type", "unsupported_response_type", []string{"response_type", "token"}, []string{pa("4.5-03")}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			u, state := a.authzURL("poppy:read", newPKCE(), c.set...)
			q := errorOf(t, u)
			if q.Get("error") != c.code || q.Get("state") != state {
				t.Errorf("got %v, want error=%s", q, c.code)
			}
			wantRules(t, srv, c.rules...)
		})
	}
	// A short or reused state is a violation but works.
	u, _ := a.authzURL("poppy:read", newPKCE(), "state", "abc")
	browse(t, srv, u)
	u, _ = a.authzURL("poppy:read", newPKCE(), "state", "abc")
	browse(t, srv, u)
	wantRules(t, srv, pa("4.5-01"), pa("4.5-01"), pa("4.5-01"))
	// ForceError redirects with the error once redirect_uri checks out (PA-4.4-07 setup).
	srv.Faults().ForceError(poppytest.EndpointAuthorize, poppytest.Fault{Code: "invalid_scope"})
	u, _ = a.authzURL("addresses", newPKCE())
	if q := errorOf(t, u); q.Get("error") != "invalid_scope" {
		t.Errorf("forced: %v", q)
	}
	// The agent opening the page itself, with what only it holds (here
	// its Session Token), is a violation (PA-4.4-02).
	u, _ = a.authzURL("poppy:read", newPKCE())
	if r := get(t, srv, u, "Authorization", "DPoP "+a.start("usr_1").str("access_token")); r.Status != 200 || !strings.Contains(string(r.Raw), "Raw Agent") {
		t.Errorf("consent page: %d %s", r.Status, r.Raw)
	}
	wantRules(t, srv, pa("4.4-02"))
	// Opening the page decides nothing: no code exists until the form is posted.
	if n := len(srv.SignIn().Consents()); n != 2 {
		t.Errorf("Consents = %d, want 2 (the two browsed pages)", n)
	}
}

func TestCO_4_5_CodeBinding(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := newAgent(t, srv, "agent.test")
	a.setMeta(func(m map[string]any) {
		m["redirect_uris"] = []any{"https://agent.test/oauth/callback", "https://agent.test/oauth/other"}
	})
	b := newAgent(t, srv, "other-agent.test")
	sid := a.start("usr_1").str("session_id")
	bsid := b.start("usr_1").str("session_id")
	newCode := func() (string, pkce) {
		p := newPKCE()
		u, _ := a.authzURL("poppy:read", p)
		return browse(t, srv, u).Query().Get("code"), p
	}
	code, p := newCode()
	// CO-4.5-08: another client's Session; the code stays usable.
	r := a.tokenAs("usr_1", a.codeForm(code, p.verifier, bsid))
	if r.Status != 400 || r.str("error") != "invalid_session" {
		t.Errorf("other client's session: %d %s", r.Status, r.Raw)
	}
	// Client B can't redeem A's code.
	if r := b.tokenAs("usr_1", b.codeForm(code, p.verifier, bsid)); r.Status != 400 || r.str("error") != "invalid_grant" {
		t.Errorf("other client: %d %s", r.Status, r.Raw)
	}
	// CO-4.5-07: another registered redirect_uri.
	f := a.codeForm(code, p.verifier, sid)
	f.Set("redirect_uri", "https://agent.test/oauth/other")
	if r := a.tokenAs("usr_1", f); r.Status != 400 || r.str("error") != "invalid_grant" {
		t.Errorf("other redirect_uri: %d %s", r.Status, r.Raw)
	}
	// CO-4.5-06: expiry after 60 s.
	code, p = newCode()
	srv.Clock().Advance(61 * time.Second)
	if r := a.tokenAs("usr_1", a.codeForm(code, p.verifier, sid)); r.Status != 400 || r.str("error") != "invalid_grant" {
		t.Errorf("expired code: %d %s", r.Status, r.Raw)
	}
	// Without session_id: invalid_request, a violation.
	code, p = newCode()
	f = a.codeForm(code, p.verifier, "")
	if r := a.tokenAs("usr_1", f); r.Status != 400 || r.str("error") != "invalid_request" {
		t.Errorf("no session_id: %d %s", r.Status, r.Raw)
	}
	wantRules(t, srv, pa("4.5-09"))
	if r := a.tokenAs("usr_1", a.codeForm(code, p.verifier, sid)); r.Status != 200 {
		t.Errorf("the code after a refused exchange: %d %s", r.Status, r.Raw)
	}
}

func TestCO_4_4_12_AccountMismatch(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{Accounts: []poppytest.Account{
		{ID: "acct_a", Credentials: map[string]string{"email": "a@example.test", "password": "pw-a-secret"}},
		{ID: "acct_b", Credentials: map[string]string{"email": "b@example.test", "password": "pw-b-secret"}},
	}}})
	a := newAgent(t, srv, "agent.test")
	signedA := a.signedIn("usr_1", "poppy:read")
	sidA := signedA.str("session_id")
	wantMismatch := func(t *testing.T, r *response) {
		t.Helper()
		if r.Status != 400 || r.str("error") != "account_mismatch" {
			t.Errorf("got %d %s, want 400 account_mismatch", r.Status, r.Raw)
		}
	}
	srv.SignIn().ApproveAll("acct_b")
	t.Run("direct", func(t *testing.T) {
		// CO-4.4-12
		wantMismatch(t, a.direct("usr_1", sidA, "poppy:read"))
	})
	t.Run("device", func(t *testing.T) {
		d := a.deviceStart("poppy:read")
		browse(t, srv, d.str("verification_uri_complete"))
		// CO-4.4-12
		wantMismatch(t, a.poll("usr_1", d.str("device_code"), sidA))
	})
	t.Run("mediated", func(t *testing.T) {
		r := a.mediated("", signedA.str("access_token"), map[string]any{"scope": "poppy:read",
			"credentials": map[string]any{"email": "b@example.test", "password": "pw-b-secret"}})
		// CO-4.4-12
		wantMismatch(t, r)
	})
	t.Run("refresh", func(t *testing.T) {
		sidB := a.start("usr_1").str("session_id")
		patB := a.direct("usr_1", sidB, "poppy:read").str("refresh_token")
		// CO-4.4-12, CO-4.8-06
		wantMismatch(t, a.tokenAs("usr_1", a.refreshForm(patB, sidA)))
		wantRules(t, srv, pa("4.4-13"))
	})
	if si, _ := srv.Sessions().Get(sidA); si.Account != "acct_a" || !si.SignedIn {
		t.Errorf("session A = %+v", si)
	}
}
