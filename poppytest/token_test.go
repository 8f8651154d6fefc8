package poppytest_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/poppyproto/poppy/poppytest"
)

// credMarker starts the backend session blob the fake seals into a
// Session Token with TokenPolicy.EmbedCredentials.
const credMarker = "POPPYTEST-BACKEND-SESSION"

func TestCO_4_2_05_StartSession(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := newAgent(t, srv, "agent.test")
	r := a.token(a.startForm("usr_Q7c1vK"))
	// CO-4.2-05
	if r.Status != 200 || r.Header.Get("Cache-Control") != "no-store" || r.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("start = %d %v %s", r.Status, r.Header, r.Raw)
	}
	if r.str("access_token") == "" || r.str("token_type") != "DPoP" || r.Body["scope"] != "" ||
		!strings.HasPrefix(r.str("session_id"), "ses_") || r.Body["signed_in"] != false {
		t.Errorf("body = %s", r.Raw)
	}
	// CO-4.2-06, CO-4.2-07
	if n, _ := r.Body["expires_in"].(float64); n < 3600 || n >= 86400 {
		t.Errorf("expires_in = %v", r.Body["expires_in"])
	}
	// CO-4.3-01: the token is bound to the proof's key.
	reqs := srv.RequestsTo(poppytest.EndpointToken)
	tok, ok := srv.Tokens().Get(r.str("access_token"))
	if !ok || tok.JKT == "" || tok.JKT != reqs[0].Proof.JKT || tok.Type != "DPoP" || tok.UserID != "usr_Q7c1vK" || tok.ClientID != a.clientID {
		t.Errorf("token record = %+v, proof jkt %q", tok, reqs[0].Proof.JKT)
	}
	sess, ok := srv.Sessions().Get(r.str("session_id"))
	if !ok || sess.UserID != "usr_Q7c1vK" || sess.ClientID != a.clientID || sess.SignedIn {
		t.Errorf("session = %+v", sess)
	}
	// The log decodes the assertions for tests.
	if reqs[0].Assertion == nil || reqs[0].Assertion.Claims["sub"] != "usr_Q7c1vK" || reqs[0].ClientAssertion.AudienceMatch != "token_endpoint" ||
		!bytes.Contains(reqs[0].Assertion.RawClaims, []byte(`"aud":"https://auth.example.test/oauth/token"`)) || reqs[0].SessionID != r.str("session_id") {
		t.Errorf("logged %+v", reqs[0])
	}
	// The fake fetched the metadata and JWKS itself, marked internal.
	var internal int
	for _, q := range srv.Requests() {
		if q.Internal {
			internal++
			if q.Endpoint != poppytest.EndpointAgent || q.Header.Get("User-Agent") != "poppytest-company" {
				t.Errorf("internal request %+v", q)
			}
		}
	}
	if internal != 2 {
		t.Errorf("internal fetches = %d, want 2", internal)
	}
	// CO-3.3-02: the extension the agent lists and the fake doesn't know is ignored.
	if md, ok := srv.Sessions().ClientMetadata(a.clientID); !ok || !bytes.Contains(md, []byte("agent.test/foo")) {
		t.Errorf("ClientMetadata = %s", md)
	}
}

func TestCO_4_2_09_Renewal(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := newAgent(t, srv, "agent.test")
	first := a.start("usr_1")
	sid := first.str("session_id")
	r := a.token(a.renewForm("usr_1", sid))
	// CO-4.2-09
	if r.Status != 200 || r.str("session_id") != sid || r.Body["signed_in"] != false || r.str("access_token") == first.str("access_token") {
		t.Fatalf("renewal = %d %s", r.Status, r.Raw)
	}
	// CO-4.2-08: another User's assertion.
	r = a.token(a.renewForm("usr_2", sid))
	if r.Status != 400 || r.str("error") != "invalid_session" {
		t.Errorf("other user renewal = %d %s", r.Status, r.Raw)
	}
	// CO-4.2-08: another client.
	b := newAgent(t, srv, "other-agent.test")
	if r := b.token(b.renewForm("usr_1", sid)); r.Status != 400 || r.str("error") != "invalid_session" {
		t.Errorf("other client renewal = %d %s", r.Status, r.Raw)
	}
	// CO-4.2-10
	srv.Sessions().End(sid)
	if r := a.token(a.renewForm("usr_1", sid)); r.Status != 400 || r.str("error") != "invalid_session" {
		t.Errorf("ended session renewal = %d %s", r.Status, r.Raw)
	}
	if r := a.token(a.renewForm("usr_1", "ses_unknown")); r.str("error") != "invalid_session" {
		t.Errorf("unknown session renewal = %d %s", r.Status, r.Raw)
	}
	if r := a.call("GET", "/products", first.str("access_token"), ""); r.Status != 401 || !strings.Contains(r.wwwAuth(), `error="invalid_token"`) {
		t.Errorf("token of ended session = %d %q", r.Status, r.wwwAuth())
	}
}

func TestCO_3_2_01_SharedIssuerAcrossDomains(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{Domains: []string{"example.test", "example-uk.test"}})
	a := newAgent(t, srv, "agent.test")
	// Both domains' documents name the one issuer, hence one token endpoint.
	for _, d := range []string{"example.test", "example-uk.test"} {
		if iss := get(t, srv, "https://"+d+"/.well-known/poppy.json").Body["auth"].(map[string]any)["issuer"]; iss != srv.Issuer() {
			t.Fatalf("%s issuer = %v", d, iss)
		}
	}
	sid := a.start("usr_1").str("session_id")
	// CO-3.2-01: the Session started via one domain renews via the other's discovery (same issuer).
	if r := a.token(a.renewForm("usr_1", sid)); r.Status != 200 || r.str("session_id") != sid {
		t.Fatalf("renewal = %d %s", r.Status, r.Raw)
	}
}

func TestCO_4_02_ConcurrentSessions(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := newAgent(t, srv, "agent.test")
	var wg sync.WaitGroup
	results := make([]*response, 3)
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = a.token(a.startForm("usr_1"))
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, r := range results {
		if r.Status != 200 {
			t.Fatalf("start = %d %s", r.Status, r.Raw)
		}
		seen[r.str("session_id")] = true
		// CO-4-02
		if c := a.call("GET", "/products", r.str("access_token"), ""); c.Status != 200 {
			t.Errorf("API with session %s = %d", r.str("session_id"), c.Status)
		}
	}
	if len(seen) != 3 {
		t.Errorf("session ids = %v", seen)
	}
}

func TestCO_4_1_ClientAuthentication(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := newAgent(t, srv, "agent.test")
	wantInvalidClient := func(t *testing.T, r *response) {
		t.Helper()
		if r.Status != 401 || r.str("error") != "invalid_client" || r.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("got %d %s, want 401 invalid_client", r.Status, r.Raw)
		}
	}
	t.Run("CO-4.1-01 metadata 404", func(t *testing.T) {
		a.mu.Lock()
		a.status = 404
		a.mu.Unlock()
		defer func() { a.mu.Lock(); a.status = 0; a.mu.Unlock() }()
		// CO-4.1-01
		wantInvalidClient(t, a.token(a.startForm("usr_1")))
	})
	t.Run("CO-4.1-02 client_id mismatch", func(t *testing.T) {
		a.setMeta(func(m map[string]any) { m["client_id"] = "https://agent.test/other.json" })
		defer a.setMeta(nil)
		// CO-4.1-02
		wantInvalidClient(t, a.token(a.startForm("usr_1")))
	})
	t.Run("CO-4.1-03 jwks_uri on another host", func(t *testing.T) {
		a.setMeta(func(m map[string]any) { m["jwks_uri"] = "https://other.test/jwks.json" })
		defer a.setMeta(nil)
		// CO-4.1-03
		wantInvalidClient(t, a.token(a.startForm("usr_1")))
	})
	t.Run("CO-4.1-03 http redirect_uri", func(t *testing.T) {
		a.setMeta(func(m map[string]any) { m["redirect_uris"] = []any{"http://agent.test/cb"} })
		defer a.setMeta(nil)
		// CO-4.1-03
		wantInvalidClient(t, a.token(a.startForm("usr_1")))
	})
	t.Run("token_endpoint_auth_method", func(t *testing.T) {
		a.setMeta(func(m map[string]any) { m["token_endpoint_auth_method"] = "none" })
		defer a.setMeta(nil)
		wantInvalidClient(t, a.token(a.startForm("usr_1")))
	})
	t.Run("CO-4.1-04 unpublished key", func(t *testing.T) {
		f := a.startForm("usr_1")
		other := newKey(t)
		now := srv.Clock().Now().Unix()
		f.Set("client_assertion", signJWT(t, other, map[string]any{"alg": "ES256", "kid": a.kid},
			map[string]any{"iss": a.clientID, "sub": a.clientID, "aud": srv.EndpointURL(poppytest.EndpointToken), "iat": now, "exp": now + 60, "jti": randID()}))
		// CO-4.1-04
		wantInvalidClient(t, a.token(f))
	})
	for name, mod := range map[string]claimsMod{
		"iss":     set("iss", "https://agent.test/x.json"),
		"sub":     set("sub", "usr_1"),
		"aud":     set("aud", "https://auth.other.test/oauth/token"),
		"expired": set("exp", srv.Clock().Now().Unix()-1),
		"5min":    set("exp", srv.Clock().Now().Unix()+600),
		"no exp":  func(_, c map[string]any) { delete(c, "exp") },
		"HS256":   func(h, _ map[string]any) { h["alg"] = "HS256" },
		"future":  set("iat", srv.Clock().Now().Unix()+120),
	} {
		t.Run("CO-4.1-04 "+name, func(t *testing.T) {
			f := a.startForm("usr_1")
			f.Set("client_assertion", a.clientAssertion(mod))
			// CO-4.1-04
			wantInvalidClient(t, a.token(f))
		})
	}
	t.Run("missing parameters", func(t *testing.T) {
		for _, k := range []string{"client_id", "client_assertion", "client_assertion_type"} {
			f := a.startForm("usr_1")
			f.Del(k)
			wantInvalidClient(t, a.token(f))
		}
	})
	t.Run("aud variants A-03", func(t *testing.T) {
		for aud, want := range map[any]string{srv.Issuer(): "issuer", fmt.Sprint(srv.EndpointURL(poppytest.EndpointToken)): "token_endpoint"} {
			f := a.startForm("usr_1")
			f.Set("client_assertion", a.clientAssertion(set("aud", aud)))
			if r := a.token(f); r.Status != 200 {
				t.Fatalf("aud %v: %d %s", aud, r.Status, r.Raw)
			}
			reqs := srv.RequestsTo(poppytest.EndpointToken)
			if got := reqs[len(reqs)-1].ClientAssertion.AudienceMatch; got != want {
				t.Errorf("AudienceMatch = %q, want %q", got, want)
			}
		}
		f := a.startForm("usr_1")
		f.Set("client_assertion", a.clientAssertion(set("aud", []any{srv.EndpointURL(poppytest.EndpointToken)})))
		if r := a.token(f); r.Status != 200 {
			t.Fatalf("aud array on the client assertion: %d %s", r.Status, r.Raw)
		}
	})
	t.Run("replayed client assertion", func(t *testing.T) {
		ca := a.clientAssertion()
		f := a.startForm("usr_1")
		f.Set("client_assertion", ca)
		if r := a.token(f); r.Status != 200 {
			t.Fatalf("first: %d %s", r.Status, r.Raw)
		}
		f = a.startForm("usr_1")
		f.Set("client_assertion", ca)
		wantInvalidClient(t, a.token(f))
		wantRules(t, srv, pa("4.1-09"))
	})
	t.Run("lifetime over 60 s is a violation", func(t *testing.T) {
		f := a.startForm("usr_1")
		f.Set("client_assertion", a.clientAssertion(set("exp", srv.Clock().Now().Unix()+120)))
		if r := a.token(f); r.Status != 200 {
			t.Fatalf("%d %s", r.Status, r.Raw)
		}
		wantRules(t, srv, pa("4.1-09"))
	})
	t.Run("private key in JWKS", func(t *testing.T) {
		b := newAgent(t, srv, "leaky.test")
		raw, _ := b.key.Bytes()
		d := b64.EncodeToString(raw)
		jw := publicJWK(b.key)
		jw["d"], jw["kid"] = d, b.kid
		b.jwksRaw, _ = json.Marshal(map[string]any{"keys": []any{jw}})
		wantInvalidClient(t, b.token(b.startForm("usr_1")))
		wantRules(t, srv, pa("4.1-05"))
	})
	t.Run("unknown kty in JWKS is ignored", func(t *testing.T) {
		b := newAgent(t, srv, "future.test")
		var set map[string][]any
		json.Unmarshal(jwksOf(t, b.kid, &b.key.PublicKey), &set)
		b.jwksRaw, _ = json.Marshal(map[string]any{"keys": append([]any{map[string]any{"kty": "FUTURE", "kid": "f"}}, set["keys"]...)})
		if r := b.token(b.startForm("usr_1")); r.Status != 200 {
			t.Fatalf("%d %s", r.Status, r.Raw)
		}
	})
	t.Run("key rotation refetches", func(t *testing.T) {
		b := newAgent(t, srv, "rotating.test")
		b.start("usr_1")
		b.mu.Lock()
		b.key, b.kid = newKey(t), "k2"
		b.mu.Unlock()
		if r := b.token(b.startForm("usr_1")); r.Status != 200 {
			t.Fatalf("after rotation: %d %s", r.Status, r.Raw)
		}
	})
}

func TestCO_4_1_Policy(t *testing.T) {
	t.Run("CO-4.1-05 registration", func(t *testing.T) {
		srv := poppytest.NewServer(t, &poppytest.Options{Clients: poppytest.ClientOptions{RequireRegistration: true, Registered: []string{"https://good.test/agent.json"}}})
		bad, good := newAgent(t, srv, "agent.test"), newAgent(t, srv, "good.test")
		// CO-4.1-05
		if r := bad.token(bad.startForm("usr_1")); r.Status != 401 || r.str("error") != "invalid_client" {
			t.Errorf("unregistered = %d %s", r.Status, r.Raw)
		}
		good.start("usr_1")
	})
	t.Run("CO-4.1-06 lists", func(t *testing.T) {
		srv := poppytest.NewServer(t, &poppytest.Options{Clients: poppytest.ClientOptions{Blocklist: []string{"https://agent.test/agent.json"}}})
		a := newAgent(t, srv, "agent.test")
		// CO-4.1-06
		if r := a.token(a.startForm("usr_1")); r.Status != 401 || r.str("error") != "invalid_client" {
			t.Errorf("blocked = %d %s", r.Status, r.Raw)
		}
		srv2 := poppytest.NewServer(t, &poppytest.Options{Clients: poppytest.ClientOptions{Allowlist: []string{"https://good.test/agent.json"}}})
		b := newAgent(t, srv2, "agent.test")
		// CO-4.1-06
		if r := b.token(b.startForm("usr_1")); r.Status != 401 || r.str("error") != "invalid_client" {
			t.Errorf("not on allowlist = %d %s", r.Status, r.Raw)
		}
	})
	t.Run("CO-4.1-07 revoked", func(t *testing.T) {
		srv := poppytest.NewServer(t, nil)
		a := newAgent(t, srv, "agent.test")
		a.start("usr_1")
		srv.Sessions().RevokeClient(a.clientID)
		// CO-4.1-07, CO-4.4-01
		if r := a.token(a.startForm("usr_1")); r.Status != 401 || r.str("error") != "invalid_client" {
			t.Errorf("revoked = %d %s", r.Status, r.Raw)
		}
	})
	t.Run("CO-4.1-08 session starts per minute", func(t *testing.T) {
		srv := poppytest.NewServer(t, &poppytest.Options{Clients: poppytest.ClientOptions{SessionStartsPerMinute: 2}})
		a := newAgent(t, srv, "agent.test")
		sid := a.start("usr_1").str("session_id")
		a.start("usr_1")
		r := a.token(a.startForm("usr_1"))
		// CO-4.1-08, CO-4.2-11
		if r.Status != 429 || r.str("error") != "rate_limited" || r.Header.Get("Retry-After") == "" || r.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("3rd start = %d %v %s", r.Status, r.Header, r.Raw)
		}
		// Renewals are not starts.
		if r := a.token(a.renewForm("usr_1", sid)); r.Status != 200 {
			t.Errorf("renewal while limited = %d", r.Status)
		}
		srv.Clock().Advance(61 * time.Second)
		a.start("usr_1")
	})
	t.Run("CO-4.1-09 max new clients", func(t *testing.T) {
		srv := poppytest.NewServer(t, &poppytest.Options{Clients: poppytest.ClientOptions{MaxNew: 1}})
		a, b := newAgent(t, srv, "agent.test"), newAgent(t, srv, "second.test")
		a.start("usr_1")
		// CO-4.1-09
		if r := b.token(b.startForm("usr_1")); r.Status != 401 || r.str("error") != "invalid_client" {
			t.Errorf("second client = %d %s", r.Status, r.Raw)
		}
		a.start("usr_2")
	})
}

func TestCO_4_2_SessionAssertion(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := newAgent(t, srv, "agent.test")
	invalidGrant := func(t *testing.T, f url.Values) {
		t.Helper()
		r := a.token(f)
		// CO-4.2-11
		if r.Status != 400 || r.str("error") != "invalid_grant" || r.Header.Get("Content-Type") != "application/json" || r.Header.Get("Cache-Control") != "no-store" {
			t.Fatalf("got %d %s, want 400 invalid_grant", r.Status, r.Raw)
		}
	}
	t.Run("CO-4.2-01 iss", func(t *testing.T) {
		f := a.startForm("usr_1")
		f.Set("assertion", a.sessionAssertion("usr_1", set("iss", "https://agent.test/other.json")))
		// CO-4.2-01
		invalidGrant(t, f)
	})
	t.Run("CO-4.2-01 signature", func(t *testing.T) {
		f := a.startForm("usr_1")
		now := srv.Clock().Now().Unix()
		f.Set("assertion", signJWT(t, newKey(t), map[string]any{"alg": "ES256", "kid": a.kid},
			map[string]any{"iss": a.clientID, "sub": "usr_1", "aud": srv.EndpointURL(poppytest.EndpointToken), "iat": now, "exp": now + 60, "jti": randID()}))
		// CO-4.2-01
		invalidGrant(t, f)
	})
	t.Run("CO-4.2-02 replay", func(t *testing.T) {
		f := a.startForm("usr_1")
		if r := a.token(f); r.Status != 200 {
			t.Fatal(r.Status)
		}
		g := a.startForm("usr_1")
		g.Set("assertion", f.Get("assertion"))
		// CO-4.2-02
		invalidGrant(t, g)
		wantRules(t, srv, pa("4.2-10"))
	})
	t.Run("CO-4.2-03 aud array", func(t *testing.T) {
		f := a.startForm("usr_1")
		f.Set("assertion", a.sessionAssertion("usr_1", set("aud", []any{srv.EndpointURL(poppytest.EndpointToken)})))
		// CO-4.2-03
		invalidGrant(t, f)
		wantRules(t, srv, pa("4.2-08"))
	})
	t.Run("CO-4.2-03 aud issuer", func(t *testing.T) {
		f := a.startForm("usr_1")
		f.Set("assertion", a.sessionAssertion("usr_1", set("aud", srv.Issuer())))
		// CO-4.2-03
		invalidGrant(t, f)
		wantRules(t, srv, pa("4.2-08"))
	})
	t.Run("CO-4.2-04 expired", func(t *testing.T) {
		f := a.startForm("usr_1")
		now := srv.Clock().Now().Unix()
		f.Set("assertion", a.sessionAssertion("usr_1", set("exp", now-1), set("iat", now-61)))
		// CO-4.2-04
		invalidGrant(t, f)
	})
	t.Run("CO-4.2-04 missing and malformed", func(t *testing.T) {
		f := a.startForm("usr_1")
		f.Del("assertion")
		// CO-4.2-04
		invalidGrant(t, f)
		f = a.startForm("usr_1")
		f.Set("assertion", "not.a.jwt")
		// CO-4.2-04
		invalidGrant(t, f)
		f = a.startForm("usr_1")
		f.Set("assertion", a.sessionAssertion("usr_1", func(_, c map[string]any) { delete(c, "jti") }))
		invalidGrant(t, f)
		f = a.startForm("usr_1")
		f.Set("assertion", a.sessionAssertion("", set("sub", "")))
		invalidGrant(t, f)
	})
	t.Run("browser assertion refused", func(t *testing.T) {
		f := a.startForm("usr_1")
		f.Set("assertion", a.sessionAssertion("usr_1", func(h, _ map[string]any) { h["typ"] = "poppy-browser+jwt" }))
		invalidGrant(t, f)
	})
	t.Run("violations on accepted assertions", func(t *testing.T) {
		f := a.startForm("dana@example.org")
		f.Set("assertion", a.sessionAssertion("dana@example.org", set("jti", "short"), set("exp", srv.Clock().Now().Unix()+90)))
		if r := a.token(f); r.Status != 200 {
			t.Fatalf("%d %s", r.Status, r.Raw)
		}
		wantRules(t, srv, pa("4.2-04"), pa("4.2-09"), pa("4.2-10"))
	})
	t.Run("A-10 signed-in renewal with assertion", func(t *testing.T) {
		sid := a.start("usr_1").str("session_id")
		if _, err := srv.Sessions().SignIn(sid, "acct_1", "poppy:read"); err != nil {
			t.Fatal(err)
		}
		invalidGrant(t, a.renewForm("usr_1", sid))
		wantRules(t, srv, pa("4.2-15"))
	})
	t.Run("unsupported grant", func(t *testing.T) {
		f := a.startForm("usr_1")
		f.Set("grant_type", "password")
		if r := a.token(f); r.Status != 400 || r.str("error") != "unsupported_grant_type" {
			t.Errorf("%d %s", r.Status, r.Raw)
		}
	})
	t.Run("CO-3.3-03 unknown parameter ignored", func(t *testing.T) {
		f := a.startForm("usr_1")
		f.Set("x_future", "1")
		// CO-3.3-03
		if r := a.token(f); r.Status != 200 {
			t.Errorf("%d %s", r.Status, r.Raw)
		}
	})
	t.Run("form and method", func(t *testing.T) {
		req, _ := http.NewRequest("POST", srv.EndpointURL(poppytest.EndpointToken), strings.NewReader(`{"grant_type":"x"}`))
		req.Header.Set("Content-Type", "application/json")
		if r := do(t, srv.Client(), req); r.Status != 400 || r.str("error") != "invalid_request" {
			t.Errorf("JSON body: %d %s", r.Status, r.Raw)
		}
		if r := get(t, srv, srv.EndpointURL(poppytest.EndpointToken)); r.Status != 405 {
			t.Errorf("GET: %d", r.Status)
		}
	})
}

func TestCO_4_2_11_ErrorStatuses(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{Tokens: poppytest.TokenPolicy{RequireNonce: true}})
	a := newAgent(t, srv, "agent.test")
	check := func(r *response, status int, code string) {
		t.Helper()
		// CO-4.2-11
		if r.Status != status || r.str("error") != code || r.Header.Get("Content-Type") != "application/json" || r.Header.Get("Cache-Control") != "no-store" {
			t.Errorf("got %d %s, want %d %s", r.Status, r.Raw, status, code)
		}
	}
	// use_dpop_nonce 400 with DPoP-Nonce and WWW-Authenticate.
	r := a.token(a.startForm("usr_1"))
	check(r, 400, "use_dpop_nonce")
	nonce := r.Header.Get("DPoP-Nonce")
	if nonce == "" || !strings.HasPrefix(r.wwwAuth(), `DPoP error="use_dpop_nonce"`) {
		t.Fatalf("nonce challenge: %v", r.Header)
	}
	// invalid_dpop_proof 400.
	check(a.token(a.startForm("usr_1"), withNonce(nonce), flipSignature()), 400, "invalid_dpop_proof")
	// invalid_client 401.
	f := a.startForm("usr_1")
	f.Set("client_id", "https://agent.test/nope.json")
	check(a.token(f, withNonce(nonce)), 401, "invalid_client")
	// invalid_grant 400.
	f = a.startForm("usr_1")
	f.Set("assertion", "x.y.z")
	check(a.token(f, withNonce(nonce)), 400, "invalid_grant")
	// invalid_session 400.
	check(a.token(a.renewForm("usr_1", "ses_nope"), withNonce(nonce)), 400, "invalid_session")
	// rate_limited 429 with Retry-After.
	srv.Faults().RateLimit(poppytest.EndpointToken, 1, "7")
	r = a.token(a.startForm("usr_1"), withNonce(nonce))
	check(r, 429, "rate_limited")
	if r.Header.Get("Retry-After") != "7" {
		t.Errorf("Retry-After = %q", r.Header.Get("Retry-After"))
	}
	// account_mismatch 400 (forced: the Account Token grant comes later).
	srv.Faults().ForceError(poppytest.EndpointToken, poppytest.Fault{Code: "account_mismatch"})
	check(a.token(a.startForm("usr_1"), withNonce(nonce)), 400, "account_mismatch")
	// And the success path with the nonce.
	if r := a.token(a.startForm("usr_1"), withNonce(nonce)); r.Status != 200 {
		t.Errorf("with nonce: %d %s", r.Status, r.Raw)
	}
}

func TestCO_4_2_12_EmbeddedCredentialsEncrypted(t *testing.T) {
	for _, jwtShaped := range []bool{false, true} {
		srv := poppytest.NewServer(t, &poppytest.Options{Tokens: poppytest.TokenPolicy{EmbedCredentials: true, JWT: jwtShaped}})
		a := newAgent(t, srv, "agent.test")
		r := a.start("usr_1")
		tok := r.str("access_token")
		// CO-4.2-12: the Company's systems can read the blob.
		blob, ok := srv.Tokens().EmbeddedCredentials(tok)
		if !ok || !strings.HasPrefix(blob, credMarker+":"+r.str("session_id")) {
			t.Fatalf("EmbeddedCredentials = %q %v", blob, ok)
		}
		// CO-4.2-13: the marker is in no segment, decoded or not.
		if strings.Contains(tok, credMarker) {
			t.Fatal("marker in the token")
		}
		for _, seg := range strings.Split(tok, ".") {
			dec, _ := b64.DecodeString(seg)
			// CO-4.2-13
			if bytes.Contains(dec, []byte(credMarker)) {
				t.Fatalf("marker in a decoded segment of %q", seg)
			}
			var inner map[string]any
			if json.Unmarshal(dec, &inner) == nil {
				if cred, ok := inner["cred"].(string); ok {
					for _, s2 := range strings.Split(cred, ".") {
						d2, _ := b64.DecodeString(s2)
						// CO-4.2-13
						if bytes.Contains(d2, []byte(credMarker)) {
							t.Fatal("marker in a nested segment")
						}
					}
				}
			}
		}
		if c := a.call("GET", "/products", tok, ""); c.Status != 200 {
			t.Errorf("sealed token at the API: %d", c.Status)
		}
	}
}

func TestJWTTokensClaimOneSecond(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{Tokens: poppytest.TokenPolicy{JWT: true}})
	a := newAgent(t, srv, "agent.test")
	r := a.start("usr_1")
	parts := strings.Split(r.str("access_token"), ".")
	if len(parts) != 3 {
		t.Fatalf("token %q is not JWT-shaped", r.str("access_token"))
	}
	var c struct{ Iat, Exp int64 }
	p, _ := b64.DecodeString(parts[1])
	json.Unmarshal(p, &c)
	if c.Exp-c.Iat != 1 || r.Body["expires_in"] != float64(3600) {
		t.Fatalf("claims %s, expires_in %v", p, r.Body["expires_in"])
	}
	srv.Clock().Advance(10 * time.Second)
	if c := a.call("GET", "/products", r.str("access_token"), ""); c.Status != 200 {
		t.Errorf("the server honours expires_in, not the claim: %d", c.Status)
	}
}

func TestCO_4_2_06_TokenTTL(t *testing.T) {
	// CO-4.2-06
	if msg := configError(t, &poppytest.Options{Tokens: poppytest.TokenPolicy{TTL: -time.Second}}); !strings.Contains(msg, "CO-4.2-06") {
		t.Fatalf("negative TTL accepted: %q", msg)
	}
	srv := poppytest.NewServer(t, &poppytest.Options{Tokens: poppytest.TokenPolicy{TTL: 90 * time.Second}})
	a := newAgent(t, srv, "agent.test")
	r := a.start("usr_1")
	// CO-4.2-06
	if r.Body["expires_in"] != float64(90) {
		t.Fatalf("expires_in = %v", r.Body["expires_in"])
	}
	srv.Clock().Advance(91 * time.Second)
	// CO-6-09: expired token.
	if c := a.call("GET", "/products", r.str("access_token"), ""); c.Status != 401 || !strings.Contains(c.wwwAuth(), `DPoP error="invalid_token"`) {
		t.Errorf("expired token: %d %q", c.Status, c.wwwAuth())
	}
}

func TestRevocationEndpoint(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := newAgent(t, srv, "agent.test")
	tok := a.start("usr_1").str("access_token")
	f := url.Values{"token": {tok}, "client_id": {a.clientID},
		"client_assertion_type": {"urn:ietf:params:oauth:client-assertion-type:jwt-bearer"},
		"client_assertion":      {a.clientAssertion(set("aud", srv.EndpointURL(poppytest.EndpointRevoke)))}}
	if r := postForm(t, srv, srv.EndpointURL(poppytest.EndpointRevoke), f); r.Status != 200 {
		t.Fatalf("revoke = %d %s", r.Status, r.Raw)
	}
	reqs := srv.RequestsTo(poppytest.EndpointRevoke)
	if reqs[0].ClientAssertion.AudienceMatch != "endpoint" {
		t.Errorf("AudienceMatch = %q", reqs[0].ClientAssertion.AudienceMatch)
	}
	if info, _ := srv.Tokens().Get(tok); !info.Revoked {
		t.Error("token not revoked")
	}
	if c := a.call("GET", "/products", tok, ""); c.Status != 401 {
		t.Errorf("revoked token: %d", c.Status)
	}
	// Unknown tokens are fine (RFC 7009); client authentication is not optional.
	f.Set("token", "unknown")
	f.Set("client_assertion", a.clientAssertion())
	if r := postForm(t, srv, srv.EndpointURL(poppytest.EndpointRevoke), f); r.Status != 200 {
		t.Errorf("unknown token: %d", r.Status)
	}
	f.Del("client_assertion")
	if r := postForm(t, srv, srv.EndpointURL(poppytest.EndpointRevoke), f); r.Status != 401 || r.str("error") != "invalid_client" {
		t.Errorf("no client assertion: %d %s", r.Status, r.Raw)
	}
}
