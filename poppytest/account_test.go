package poppytest_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/poppyproto/poppy/poppytest"
)

func TestCO_4_8_AccountTokens(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := newAgent(t, srv, "agent.test")
	signed := a.signedIn("usr_1", "poppy:read poppy:write")
	pat := signed.str("refresh_token")

	// CO-4.8-01: with session_id, a token for that Session, signing it in.
	sid := a.start("usr_1").str("session_id")
	r := a.tokenAs("usr_1", a.refreshForm(pat, sid))
	if r.Status != 200 || r.str("session_id") != sid || r.Body["signed_in"] != true || r.str("scope") != "poppy:read poppy:write" {
		t.Fatalf("refresh with session_id = %d %s", r.Status, r.Raw)
	}
	// CO-4.8-02: the spec 4.4 fields, without refresh_token when not rotating.
	if r.has("refresh_token") || r.has("refresh_token_expires_in") || !r.has("access_token", "token_type", "expires_in") {
		t.Errorf("refresh response = %s", r.Raw)
	}
	if si, _ := srv.Sessions().Get(sid); !si.SignedIn || si.Account != "acct_1" || si.AccountToken != pat {
		t.Errorf("session = %+v", si)
	}
	// CO-4.8-01: without session_id, a new signed-in Session for the token's User.
	r = a.tokenAs("usr_1", a.refreshForm(pat, ""))
	if r.Status != 200 || r.str("session_id") == "" || r.str("session_id") == sid || r.Body["signed_in"] != true {
		t.Fatalf("refresh without session_id = %d %s", r.Status, r.Raw)
	}
	if si, _ := srv.Sessions().Get(r.str("session_id")); si.UserID != "usr_1" || si.ClientID != a.clientID || !si.SignedIn {
		t.Errorf("new session = %+v", si)
	}
	// PA-4.8-03 setup, CO-4.8-07: fewer scopes yes, more no.
	f := a.refreshForm(pat, sid)
	f.Set("scope", "poppy:read")
	if r := a.tokenAs("usr_1", f); r.Status != 200 || r.str("scope") != "poppy:read" {
		t.Errorf("narrower refresh = %d %s", r.Status, r.Raw)
	}
	// CO-4.8-03: an Account Token is not a Session Token.
	if c := a.call("GET", "/orders", pat, ""); c.Status != 401 || !strings.Contains(c.wwwAuth(), "invalid_token") {
		t.Errorf("Account Token at the API = %d %q", c.Status, c.wwwAuth())
	}
	wantRules(t, srv, pa("4.8-01"))
	// CO-4.8-04: another client gets invalid_grant; no client assertion is invalid_client.
	b := newAgent(t, srv, "other-agent.test")
	if r := b.tokenAs("usr_1", b.refreshForm(pat, "")); r.Status != 400 || r.str("error") != "invalid_grant" {
		t.Errorf("other client = %d %s", r.Status, r.Raw)
	}
	f = a.refreshForm(pat, "")
	f.Del("client_assertion")
	if r := a.tokenAs("usr_1", f); r.Status != 401 || r.str("error") != "invalid_client" {
		t.Errorf("no client assertion = %d %s", r.Status, r.Raw)
	}
	// CO-4.8-05: another User's Session; another client's Session.
	other := a.start("usr_2").str("session_id")
	if r := a.tokenAs("usr_1", a.refreshForm(pat, other)); r.Status != 400 || r.str("error") != "invalid_session" {
		t.Errorf("other User's session = %d %s", r.Status, r.Raw)
	}
	if r := a.tokenAs("usr_1", a.refreshForm(pat, b.start("usr_1").str("session_id"))); r.Status != 400 || r.str("error") != "invalid_session" {
		t.Errorf("other client's session = %d %s", r.Status, r.Raw)
	}
	// The Bearer variant for MCP (spec 4.3).
	f = a.refreshForm(pat, sid)
	f.Set("resource", srv.EndpointURL(poppytest.EndpointMCP))
	if r := postForm(t, srv, srv.EndpointURL(poppytest.EndpointToken), f); r.Status != 200 || r.str("token_type") != "Bearer" || r.str("session_id") != sid {
		t.Errorf("Bearer refresh = %d %s", r.Status, r.Raw)
	}
	// CO-4.8-10: revoked → invalid_grant.
	if !srv.Tokens().RevokeAccount(pat) {
		t.Fatal("RevokeAccountToken: unknown")
	}
	if r := a.tokenAs("usr_1", a.refreshForm(pat, sid)); r.Status != 400 || r.str("error") != "invalid_grant" {
		t.Errorf("revoked = %d %s", r.Status, r.Raw)
	}
}

func TestCO_4_8_08_LifetimeNotExtended(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{AccountTokenTTL: 100 * time.Second}, Tokens: poppytest.TokenPolicy{TTL: 10 * time.Second}})
	a := newAgent(t, srv, "agent.test")
	signed := a.signedIn("usr_1", "poppy:read")
	if signed.Body["refresh_token_expires_in"] != float64(100) {
		t.Fatalf("refresh_token_expires_in = %v", signed.Body["refresh_token_expires_in"])
	}
	pat, sid := signed.str("refresh_token"), signed.str("session_id")
	for _, at := range []time.Duration{50, 49} {
		srv.Clock().Advance(at * time.Second)
		// CO-4.8-08
		if r := a.tokenAs("usr_1", a.refreshForm(pat, sid)); r.Status != 200 {
			t.Fatalf("refresh = %d %s", r.Status, r.Raw)
		}
	}
	srv.Clock().Advance(2 * time.Second)
	// CO-4.8-08, CO-4.8-10
	if r := a.tokenAs("usr_1", a.refreshForm(pat, sid)); r.Status != 400 || r.str("error") != "invalid_grant" {
		t.Fatalf("refresh at 101 s = %d %s", r.Status, r.Raw)
	}
	// Used well after the expiry it was told: a violation.
	srv.Clock().Advance(10 * time.Second)
	a.tokenAs("usr_1", a.refreshForm(pat, sid))
	wantRules(t, srv, pa("4.4-12"))
	// The sign-in is over: the Session renews signed out with the assertion (PA-4.8-06 setup).
	if si, _ := srv.Sessions().Get(sid); si.SignedIn || si.Account != "acct_1" {
		t.Errorf("session after expiry = %+v", si)
	}
	if r := a.token(a.renewForm("usr_1", sid)); r.Status != 200 || r.Body["signed_in"] != false {
		t.Errorf("renewal after expiry = %d %s", r.Status, r.Raw)
	}
	// Negative AccountTokenTTL: no lifetime.
	srv2 := poppytest.NewServer(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{AccountTokenTTL: -1}})
	b := newAgent(t, srv2, "agent.test")
	if r := b.signedIn("usr_1", "poppy:read"); r.has("refresh_token_expires_in") {
		t.Errorf("no lifetime: %s", r.Raw)
	}
}

func TestCO_4_8_09_Rotation(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{RotateAccountTokens: true, AccountTokenTTL: time.Hour}})
	a := newAgent(t, srv, "agent.test")
	signed := a.signedIn("usr_1", "poppy:read")
	old, sid := signed.str("refresh_token"), signed.str("session_id")
	srv.Clock().Advance(10 * time.Minute)
	r := a.tokenAs("usr_1", a.refreshForm(old, sid))
	// CO-4.8-09: a new refresh_token; the lifetime is the remaining one.
	if r.Status != 200 || r.str("refresh_token") == "" || r.str("refresh_token") == old || r.Body["refresh_token_expires_in"] != float64(50*60) {
		t.Fatalf("rotating refresh = %d %s", r.Status, r.Raw)
	}
	cur := r.str("refresh_token")
	if info, _ := srv.Tokens().Account(old); !info.Replaced || info.Current != cur || info.Revoked {
		t.Errorf("old record = %+v", info)
	}
	if si, _ := srv.Sessions().Get(sid); si.AccountToken != cur {
		t.Errorf("session's Account Token = %q", si.AccountToken)
	}
	// CO-4.8-09: the old one dies at once; reusing it is a violation.
	if r := a.tokenAs("usr_1", a.refreshForm(old, sid)); r.Status != 400 || r.str("error") != "invalid_grant" {
		t.Errorf("old token = %d %s", r.Status, r.Raw)
	}
	wantRules(t, srv, pa("4.8-04"))
	if r := a.tokenAs("usr_1", a.refreshForm(cur, sid)); r.Status != 200 {
		t.Errorf("current token = %d %s", r.Status, r.Raw)
	}
}

func TestRotationGrace(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{RotateAccountTokens: true, RotationGrace: 10 * time.Second}})
	a := newAgent(t, srv, "agent.test")
	signed := a.signedIn("usr_1", "poppy:read")
	old := signed.str("refresh_token")
	// Two racing refreshes with one token: both succeed and agree on the newest value.
	var wg sync.WaitGroup
	got := make([]*response, 2)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = a.tokenAs("usr_1", a.refreshForm(old, ""))
		}()
	}
	wg.Wait()
	if got[0].Status != 200 || got[1].Status != 200 || got[0].str("refresh_token") != got[1].str("refresh_token") || got[0].str("refresh_token") == old {
		t.Fatalf("racing refreshes: %s / %s", got[0].Raw, got[1].Raw)
	}
	srv.Clock().Advance(11 * time.Second)
	if r := a.tokenAs("usr_1", a.refreshForm(old, "")); r.str("error") != "invalid_grant" {
		t.Errorf("after the grace: %s", r.Raw)
	}
	wantRules(t, srv, pa("4.8-04"))
}

func TestCO_4_9_Revocation(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := newAgent(t, srv, "agent.test")
	signed := a.signedIn("usr_1", "poppy:read")
	pat, sid, in := signed.str("refresh_token"), signed.str("session_id"), signed.str("access_token")
	// A second Session signed in with the same Account Token, and one with another.
	sid2 := a.tokenAs("usr_1", a.refreshForm(pat, "")).str("session_id")
	keep := a.signedIn("usr_1", "poppy:read")

	// CO-4.9-07: another client can't revoke it.
	b := newAgent(t, srv, "other-agent.test")
	if r := b.revoke(pat); r.Status != 400 || r.str("error") != "unauthorized_client" {
		t.Errorf("other client's revocation = %d %s", r.Status, r.Raw)
	}
	if r := a.tokenAs("usr_1", a.refreshForm(pat, sid)); r.Status != 200 {
		t.Fatalf("refresh after refused revocation = %d %s", r.Status, r.Raw)
	}
	// A forced failure (PA-4.9-04 setup) changes nothing.
	srv.Faults().ForceError(poppytest.EndpointRevoke, poppytest.Fault{Status: 503})
	if r := a.revoke(pat); r.Status != 503 {
		t.Errorf("forced 503 = %d", r.Status)
	}
	if r := a.revoke(pat); r.Status != 200 || r.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("revocation = %d %s", r.Status, r.Raw)
	}
	// CO-4.9-01: invalid_grant; the Sessions continue signed out.
	if r := a.tokenAs("usr_1", a.refreshForm(pat, sid)); r.Status != 400 || r.str("error") != "invalid_grant" {
		t.Errorf("refresh after revocation = %d %s", r.Status, r.Raw)
	}
	for _, s := range []string{sid, sid2} {
		if r := a.token(a.renewForm("usr_1", s)); r.Status != 200 || r.Body["signed_in"] != false || r.str("scope") != "" {
			t.Errorf("renewal of %s after revocation = %d %s", s, r.Status, r.Raw)
		}
	}
	// CO-4.9-03: the signed-in token issued before acts signed out at once.
	if c := a.call("GET", "/orders", in, ""); c.Status != 403 || !strings.Contains(c.wwwAuth(), "sign_in_required") {
		t.Errorf("old signed-in token = %d %q", c.Status, c.wwwAuth())
	}
	// The Session signed in with another Account Token is unaffected.
	if c := a.call("GET", "/orders", keep.str("access_token"), ""); c.Status != 200 {
		t.Errorf("other sign-in = %d", c.Status)
	}
	// RFC 7009: an unknown token is fine; a missing hint is a violation.
	if r := a.revoke("pat_unknown"); r.Status != 200 {
		t.Errorf("unknown token = %d", r.Status)
	}
	postForm(t, srv, srv.EndpointURL(poppytest.EndpointRevoke), a.clientForm("token", keep.str("refresh_token")))
	wantRules(t, srv, pa("4.9-01"))
}

func TestCO_4_9_02_EndSessionsOnSignOut(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{EndSessionsOnSignOut: true}})
	a := newAgent(t, srv, "agent.test")
	signed := a.signedIn("usr_1", "poppy:read")
	a.revoke(signed.str("refresh_token"))
	// CO-4.9-02
	if r := a.token(a.renewForm("usr_1", signed.str("session_id"))); r.Status != 400 || r.str("error") != "invalid_session" {
		t.Errorf("renewal = %d %s", r.Status, r.Raw)
	}
	if c := a.call("GET", "/products", signed.str("access_token"), ""); c.Status != 401 {
		t.Errorf("token of the ended Session = %d", c.Status)
	}
}

func TestCO_4_9_04_NoLiveSignInCheck(t *testing.T) {
	// CO-4.9-04
	if msg := configError(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{NoLiveSignInCheck: true}, Tokens: poppytest.TokenPolicy{TTL: time.Hour}}); !strings.Contains(msg, "CO-4.9-04") {
		t.Fatalf("long Tokens.TTL accepted: %q", msg)
	}
	srv := poppytest.NewServer(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{NoLiveSignInCheck: true}})
	a := newAgent(t, srv, "agent.test")
	signed := a.signedIn("usr_1", "poppy:read")
	// CO-4.9-04
	if n, _ := signed.Body["expires_in"].(float64); n <= 0 || n > 300 {
		t.Errorf("expires_in = %v", signed.Body["expires_in"])
	}
	a.revoke(signed.str("refresh_token"))
	if c := a.call("GET", "/orders", signed.str("access_token"), ""); c.Status != 200 {
		t.Errorf("without the live check the token acts as issued: %d", c.Status)
	}
}

func TestCO_4_9_05_EndSessionKeepsAccountToken(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := newAgent(t, srv, "agent.test")
	signed := a.signedIn("usr_1", "poppy:read")
	srv.Sessions().End(signed.str("session_id"))
	// CO-4.9-05
	if r := a.tokenAs("usr_1", a.refreshForm(signed.str("refresh_token"), "")); r.Status != 200 || r.Body["signed_in"] != true {
		t.Errorf("new Session after EndSession = %d %s", r.Status, r.Raw)
	}
}

func TestCO_4_9_06_Disconnect(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := newAgent(t, srv, "agent.test")
	signed := a.signedIn("usr_1", "poppy:read")
	byHand, err := srv.Sessions().SignIn(a.start("usr_2").str("session_id"), "acct_1", "poppy:read")
	if err != nil {
		t.Fatal(err)
	}
	srv.Sessions().Disconnect("acct_1")
	// CO-4.9-06
	if r := a.tokenAs("usr_1", a.refreshForm(signed.str("refresh_token"), "")); r.Status != 400 || r.str("error") != "invalid_grant" {
		t.Errorf("refresh after Disconnect = %d %s", r.Status, r.Raw)
	}
	for _, tok := range []string{signed.str("access_token"), byHand} {
		// CO-4.9-06
		if c := a.call("GET", "/orders", tok, ""); c.Status != 403 || !strings.Contains(c.wwwAuth(), "sign_in_required") {
			t.Errorf("signed-in token after Disconnect = %d %q", c.Status, c.wwwAuth())
		}
	}
	if info, _ := srv.Tokens().Account(signed.str("refresh_token")); !info.Revoked {
		t.Errorf("record = %+v", info)
	}
}

func TestCO_4_4_05_NarrowScopesOnly(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{NarrowScopesOnly: true}})
	a := newAgent(t, srv, "agent.test")
	doc := get(t, srv, "https://example.test/.well-known/poppy.json")
	auth := doc.Body["auth"].(map[string]any)
	scopesOf := func(typ string) string {
		var out []string
		for _, s := range auth[typ].(map[string]any)["scopes"].([]any) {
			out = append(out, s.(string))
		}
		return strings.Join(out, " ")
	}
	// CO-4.4-05
	if scopesOf("direct") != "orders:read orders:write" || scopesOf("device") != "orders:read orders:write" || scopesOf("mediated") != "orders:read" ||
		strings.Contains(string(doc.Raw), "poppy:") || auth["custom_scopes"].(map[string]any)["orders:read"] == nil {
		t.Fatalf("document = %s", doc.Raw)
	}
	if u, _ := a.authzURL("poppy:read", newPKCE()); browse(t, srv, u).Query().Get("error") != "invalid_scope" {
		t.Error("poppy:read accepted")
	}
	r := a.signedIn("usr_1", "orders:read")
	if c := a.call("GET", "/orders", r.str("access_token"), ""); c.Status != 200 {
		t.Errorf("orders:read at /orders = %d", c.Status)
	}
	c := a.call("POST", "/orders/ord_7Hk2/exchanges", r.str("access_token"), "{}")
	if c.Status != 403 || c.wwwAuth() != `DPoP error="insufficient_scope", scope="orders:read orders:write"` {
		t.Errorf("exchange = %d %q", c.Status, c.wwwAuth())
	}
}

func TestSignInTypesDisabled(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{Disable: []string{"direct", "device", "mediated"}}})
	a := newAgent(t, srv, "agent.test")
	tok := a.start("usr_1").str("access_token")
	for _, u := range []string{srv.EndpointURL(poppytest.EndpointAuthorize), srv.EndpointURL(poppytest.EndpointVerification)} {
		if r := asBrowser(t, srv, "GET", u, nil); r.Status != http.StatusNotFound {
			t.Errorf("%s = %d", u, r.Status)
		}
	}
	if r := a.deviceStart("poppy:read"); r.Status != http.StatusNotFound {
		t.Errorf("device = %d", r.Status)
	}
	if r := a.mediated("", tok, map[string]any{"scope": "poppy:read", "credentials": creds()}); r.Status != http.StatusNotFound {
		t.Errorf("mediated = %d", r.Status)
	}
}
