package signin_test

import (
	"context"
	"encoding/base64"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/internal/testenv"
	"github.com/poppyproto/poppy/poppytest"
	"github.com/poppyproto/poppy/signin"
)

func TestPA_4_5_DirectSignIn(t *testing.T) {
	e := newEnv(t, nil, nil)
	sess := e.Session("alice")
	b := e.browser()
	res, err := e.direct.SignIn(ctx, sess, scopes("poppy:read", "poppy:write"), b)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(b.urls[0])
	q := u.Query()
	// PA-4.5-03: every parameter on authorization_endpoint.
	if u.Scheme+"://"+u.Host+u.Path != e.Company("example.test").Metadata().AuthorizationEndpoint {
		t.Fatalf("authorization URL %s", u.Redacted())
	}
	for _, p := range []string{"response_type", "client_id", "redirect_uri", "scope", "state", "code_challenge", "code_challenge_method"} {
		if q.Get(p) == "" {
			t.Fatalf("authorization URL lacks %s", p)
		}
	}
	// PA-4.4-06, PA-4.4-03: scope space-separated, read and write both asked.
	if q.Get("scope") != "poppy:read poppy:write" || q.Get("response_type") != "code" || q.Get("client_id") != testenv.ClientID {
		t.Fatalf("scope %q", q.Get("scope"))
	}
	// PA-4.5-02
	if q.Get("code_challenge_method") != "S256" {
		t.Fatalf("method %q", q.Get("code_challenge_method"))
	}
	// PA-4.5-04: byte-equal to the served redirect_uris entry.
	if q.Get("redirect_uri") != testenv.Redirect {
		t.Fatalf("redirect_uri %q", q.Get("redirect_uri"))
	}
	ex := grants(e, "authorization_code")
	if len(ex) != 1 {
		t.Fatalf("%d code exchanges", len(ex))
	}
	f := ex[0].Form
	// PA-4.5-09: code, redirect_uri, verifier, session_id, client assertion, proof.
	if f.Get("code") == "" || f.Get("redirect_uri") != testenv.Redirect || f.Get("code_verifier") == "" ||
		f.Get("session_id") != sess.ID() || ex[0].ClientAssertion == nil || ex[0].Proof == nil {
		t.Fatalf("exchange form %v", f)
	}
	if ex[0].Status != 200 {
		t.Fatalf("exchange answered %d %s", ex[0].Status, ex[0].ErrorCode)
	}
	// PA-4.5-10: stored, signed in, used from then on.
	if !sess.SignedIn() || res.Account != poppy.DefaultAccount || len(res.Missing()) != 0 {
		t.Fatalf("signed in %v, result %+v", sess.SignedIn(), res)
	}
	if _, err := sess.AccountToken(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if code, body := e.Get(sess, "/orders"); code != 200 {
		t.Fatalf("GET /orders after sign-in: %d %s", code, body)
	}
	info, _ := e.Srv.Sessions().Get(sess.ID())
	if !info.SignedIn {
		t.Fatal("the fake sees the Session signed out")
	}
	// PA-4.4-02: the SDK itself never requested the authorization URL.
	for _, r := range e.Requests() {
		if strings.HasPrefix(r.URL, e.Srv.EndpointURL(poppytest.EndpointAuthorize)) && r.Header.Get("Authorization") != "" {
			t.Fatal("the SDK's client opened the authorization page")
		}
	}
}

func TestPA_4_5_01_StateFresh(t *testing.T) {
	e := newEnv(t, nil, nil)
	sess := e.Session("alice")
	seen := map[string]bool{}
	for range 100 {
		st, err := e.direct.Start(ctx, sess, scopes("poppy:read"))
		if err != nil {
			t.Fatal(err)
		}
		// PA-4.5-01
		if len(st.State) < 22 || seen[st.State] || query(t, st.URL).Get("state") != st.State {
			t.Fatalf("state %q repeated or short", st.State)
		}
		if _, err := base64.RawURLEncoding.DecodeString(st.State); err != nil {
			t.Fatal(err)
		}
		seen[st.State] = true
	}
}

// The callback is checked before any token request: state (PA-4.5-05),
// iss present (PA-4.5-07) and equal to the issuer (PA-4.5-06), then
// access_denied (PA-4.5-08).
func TestPA_4_5_05_to_08_CallbackChecks(t *testing.T) {
	for _, c := range []struct {
		name   string
		deny   bool
		mangle func(string) string
		want   error
	}{
		{"state", false, func(s string) string { return setParam(s, "state", "not-the-state") }, signin.ErrStateMismatch},
		// PA-4.5-06
		{"iss other", false, func(s string) string { return setParam(s, "iss", "https://auth.other.test") }, poppy.ErrIssuerMismatch},
		// PA-4.5-07
		{"iss missing", false, func(s string) string { return setParam(s, "iss", "") }, signin.ErrIssuerMissing},
		// PA-4.5-08
		{"denied", true, nil, signin.ErrAccessDenied},
		{"denied wrong iss", true, func(s string) string { return setParam(s, "iss", "https://auth.other.test") }, poppy.ErrIssuerMismatch},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, nil, nil)
			sess := e.Session("alice")
			if c.deny {
				e.Srv.SignIn().Deny()
			}
			st, err := e.direct.Start(ctx, sess, scopes("poppy:read"))
			if err != nil {
				t.Fatal(err)
			}
			loc, err := e.Srv.Browse(ctx, st.URL)
			if err != nil {
				t.Fatal(err)
			}
			if c.mangle != nil {
				loc = c.mangle(loc)
			}
			_, err = e.direct.Complete(ctx, loc)
			if !errors.Is(err, c.want) {
				t.Fatalf("Complete: %v, want %v", err, c.want)
			}
			if n := len(grants(e, "authorization_code")); n != 0 {
				t.Fatalf("%d code exchanges after a refused callback", n)
			}
			// PA-4.4-10: nothing changed.
			if sess.SignedIn() {
				t.Fatal("signed in")
			}
			if _, err := sess.AccountToken(ctx, ""); !errors.Is(err, poppy.ErrNoAccountToken) {
				t.Fatal("an Account Token was stored")
			}
			if c.name != "state" {
				if _, err := e.direct.Wait(ctx, st.State); !errors.Is(err, c.want) {
					t.Fatalf("Wait: %v", err)
				}
			}
		})
	}
}

func setParam(raw, k, v string) string {
	u, _ := url.Parse(raw)
	q := u.Query()
	if v == "" {
		q.Del(k)
	} else {
		q.Set(k, v)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

func TestPA_4_5_11_ExpiredCode(t *testing.T) {
	e := newEnv(t, nil, nil)
	sess := e.Session("alice")
	st, err := e.direct.Start(ctx, sess, scopes("poppy:read"))
	if err != nil {
		t.Fatal(err)
	}
	loc, err := e.Srv.Browse(ctx, st.URL)
	if err != nil {
		t.Fatal(err)
	}
	e.Srv.Clock().Advance(2 * 60e9) // past the code's lifetime
	_, err = e.direct.Complete(ctx, loc)
	// PA-4.5-11
	if !errors.Is(err, poppy.ErrInvalidGrant) {
		t.Fatalf("err = %v, want ErrInvalidGrant", err)
	}
	if sess.SignedIn() {
		t.Fatal("signed in")
	}
	if code, _ := e.Get(sess, "/products"); code != 200 {
		t.Fatal("the old token no longer works")
	}
}

// A sign-in started by one agent (one replica) completes when the redirect
// reaches another that shares the keystore.
func TestDirectAcrossReplicas(t *testing.T) {
	e := newEnv(t, nil, nil)
	sess := e.Session("alice")
	// Replica 2: another Agent and Direct on the same store; it serves the callback.
	a2 := e.NewAgent(nil)
	d2, err := signin.NewDirect(a2, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.Serve(d2.Handler())
	res, err := e.direct.SignIn(ctx, sess, scopes("poppy:read"), e.browser())
	if err != nil {
		t.Fatal(err)
	}
	if res.Account != poppy.DefaultAccount || !has(res.Granted, "poppy:read") {
		t.Fatalf("result %+v", res)
	}
	// The replica that waited sees the Session signed in through the store.
	s2, err := e.Company("example.test").Session(ctx, "alice", nil)
	if err != nil {
		t.Fatal(err)
	}
	if code, body := e.Get(s2, "/orders"); code != 200 {
		t.Fatalf("GET /orders: %d %s", code, body)
	}
}

func TestPA_4_4_11_FewerScopesGranted(t *testing.T) {
	e := newEnv(t, nil, nil)
	sess := e.Session("alice")
	e.Srv.SignIn().ApproveScopes("", "poppy:read")
	res, err := e.direct.SignIn(ctx, sess, scopes("poppy:read", "poppy:write"), e.browser())
	if err != nil {
		t.Fatal(err)
	}
	// PA-4.4-11: reported, not hidden.
	if strings.Join(res.Granted, " ") != "poppy:read" || strings.Join(res.Missing(), " ") != "poppy:write" {
		t.Fatalf("granted %v missing %v", res.Granted, res.Missing())
	}
	if err := res.Require("poppy:read", "poppy:write"); !errors.Is(err, poppy.ErrScopeNotGranted) {
		t.Fatalf("Require: %v", err)
	}
	if err := res.Require("poppy:read"); err != nil {
		t.Fatal(err)
	}
}

func TestPA_4_4_01_and_05_TypesAndScopes(t *testing.T) {
	e := newEnv(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{Disable: []string{"direct", "mediated"}}}, nil)
	sess := e.Session("alice")
	before := len(e.Srv.Requests())
	// PA-4.4-01: a type the Company doesn't list is unavailable, locally.
	if _, err := e.direct.SignIn(ctx, sess, scopes("poppy:read"), e.browser()); !errors.Is(err, signin.ErrSignInTypeUnavailable) {
		t.Fatalf("err = %v", err)
	}
	// PA-4.4-05: a scope the type doesn't list fails locally too.
	if _, err := signin.Device(ctx, sess, scopes("addresses"), e.browser()); !errors.Is(err, signin.ErrSignInTypeUnavailable) {
		t.Fatalf("err = %v", err)
	}
	if len(e.Srv.Requests()) != before {
		t.Fatal("requests were sent")
	}

	n := newEnv(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{NarrowScopesOnly: true}}, nil)
	ns := n.Session("alice")
	if _, err := signin.Mediated(ctx, ns, scopes("poppy:read"), n.browser()); !errors.Is(err, signin.ErrSignInTypeUnavailable) {
		t.Fatalf("poppy:read with narrow scopes only: %v", err)
	}
	if _, err := signin.Mediated(ctx, ns, scopes("orders:read"), n.browser()); err != nil {
		t.Fatal(err)
	}
	m := n.Requests(poppytest.EndpointSignIn)
	if len(m) == 0 || !strings.Contains(string(m[0].Body), `"scope":"orders:read"`) {
		t.Fatalf("mediated body %s", m[0].Body)
	}
}

func TestPA_4_4_04_CustomScopeDescribed(t *testing.T) {
	e := newEnv(t, nil, nil)
	sess := e.Session("alice")
	b := e.browser()
	b.noVisit = true
	st, err := e.direct.Start(ctx, sess, scopes("addresses"))
	if err != nil || st.URL == "" {
		t.Fatal(err)
	}
	var got []signin.Scope
	f := signin.PrompterFuncs{OpenURLFunc: func(_ context.Context, p *signin.URLPrompt) error {
		got = p.Scopes
		return errStop
	}}
	_, _ = e.direct.SignIn(ctx, sess, scopes("addresses"), f)
	desc, _ := e.Company("example.test").ScopeDescription("addresses")
	// PA-4.4-04
	if len(got) != 1 || got[0].Name != "addresses" || got[0].Description != desc || desc == "" {
		t.Fatalf("prompted %+v, Company says %q", got, desc)
	}
}

var errStop = errors.New("stop")
