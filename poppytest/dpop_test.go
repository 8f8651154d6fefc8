package poppytest_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/poppyproto/poppy/poppytest"
)

// wantDPoPError checks a DPoP failure at a resource: 401, the error in a
// WWW-Authenticate: DPoP challenge (CO-4.3-09).
func wantDPoPError(t *testing.T, r *response, code string) {
	t.Helper()
	// CO-4.3-09
	if r.Status != 401 || !strings.HasPrefix(r.wwwAuth(), "DPoP ") || !strings.Contains(r.wwwAuth(), `error="`+code+`"`) {
		t.Fatalf("got %d %q %s, want 401 DPoP error=%q", r.Status, r.wwwAuth(), r.Raw, code)
	}
}

func TestCO_4_3_ProofChecksAtResources(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := newAgent(t, srv, "agent.test")
	tok := a.start("usr_1").str("access_token")
	t.Run("CO-4.3-19 valid without cookies", func(t *testing.T) {
		r := a.call("GET", "/products", tok, "")
		// CO-4.3-19, CO-6-03
		if r.Status != 200 || r.Body["products"] == nil {
			t.Fatalf("%d %s", r.Status, r.Raw)
		}
		q := srv.RequestsTo(poppytest.EndpointAPI)
		if last := q[len(q)-1]; last.AuthScheme != "DPoP" || last.AccessToken != tok || last.Proof == nil || last.Header.Get("Cookie") != "" {
			t.Errorf("logged %+v", last)
		}
	})
	t.Run("CO-4.3-02 flipped signature", func(t *testing.T) {
		// CO-4.3-02
		wantDPoPError(t, a.call("GET", "/products", tok, "", flipSignature()), "invalid_dpop_proof")
	})
	t.Run("CO-4.3-03 other key", func(t *testing.T) {
		// CO-4.3-03: a valid proof signed by a key the token isn't bound to.
		wantDPoPError(t, a.call("GET", "/products", tok, "", withKey(newKey(t))), "invalid_dpop_proof")
	})
	t.Run("CO-4.3-04 htu", func(t *testing.T) {
		// CO-4.3-04
		wantDPoPError(t, a.call("GET", "/products", tok, "", withClaim("htu", srv.EndpointURL(poppytest.EndpointAPI)+"/orders")), "invalid_dpop_proof")
		wantRules(t, srv, pa("4.3-08"))
	})
	t.Run("CO-4.3-04 htm", func(t *testing.T) {
		// CO-4.3-04
		wantDPoPError(t, a.call("POST", "/echo", tok, `{}`, withClaim("htm", "GET")), "invalid_dpop_proof")
		wantRules(t, srv, pa("4.3-07"))
	})
	t.Run("CO-4.3-04 htu with query", func(t *testing.T) {
		// CO-4.3-04
		wantDPoPError(t, a.call("GET", "/products?x=1", tok, "", withClaim("htu", srv.EndpointURL(poppytest.EndpointAPI)+"/products?x=1")), "invalid_dpop_proof")
		wantRules(t, srv, pa("4.3-08"))
	})
	t.Run("htu normalisation", func(t *testing.T) {
		r := a.call("GET", "/products?x=1", tok, "", withClaim("htu", "HTTPS://API.example.test:443/products"))
		if r.Status != 200 {
			t.Fatalf("%d %s", r.Status, r.Raw)
		}
	})
	t.Run("CO-4.3-05 iat", func(t *testing.T) {
		// CO-4.3-05
		wantDPoPError(t, a.call("GET", "/products", tok, "", withClaim("iat", srv.Clock().Now().Add(-120*time.Second).Unix())), "invalid_dpop_proof")
		// CO-4.3-05
		wantDPoPError(t, a.call("GET", "/products", tok, "", withClaim("iat", srv.Clock().Now().Add(120*time.Second).Unix())), "invalid_dpop_proof")
		if r := a.call("GET", "/products", tok, "", withClaim("iat", srv.Clock().Now().Add(-50*time.Second).Unix())); r.Status != 200 {
			t.Errorf("iat 50 s ago: %d", r.Status)
		}
	})
	t.Run("CO-4.3-06 replay", func(t *testing.T) {
		info, _ := srv.Tokens().Get(tok)
		proof := a.proof("GET", srv.EndpointURL(poppytest.EndpointAPI)+"/products", a.userKey(info.UserID), withToken(tok))
		send := func() *response {
			req, _ := http.NewRequest("GET", srv.EndpointURL(poppytest.EndpointAPI)+"/products", nil)
			req.Header.Set("Authorization", "DPoP "+tok)
			req.Header.Set("DPoP", proof)
			return do(t, srv.Client(), req)
		}
		if r := send(); r.Status != 200 {
			t.Fatalf("first: %d %s", r.Status, r.Raw)
		}
		// CO-4.3-06
		wantDPoPError(t, send(), "invalid_dpop_proof")
		wantRules(t, srv, pa("4.3-05"))
	})
	t.Run("CO-4.3-07 ath", func(t *testing.T) {
		// CO-4.3-07
		wantDPoPError(t, a.call("GET", "/products", tok, "", withToken("another-token")), "invalid_dpop_proof")
		// CO-4.3-07
		wantDPoPError(t, a.call("GET", "/products", tok, "", withoutClaim("ath")), "invalid_dpop_proof")
		wantRules(t, srv, pa("4.3-10"), pa("4.3-10"))
	})
	t.Run("shape", func(t *testing.T) {
		for name, m := range map[string]pmod{
			"typ":   withHeader("typ", "jwt"),
			"alg":   withHeader("alg", "ES384"),
			"jwk":   withHeader("jwk", "x"),
			"jti":   withoutClaim("jti"),
			"htm":   withoutClaim("htm"),
			"iat":   withClaim("iat", "now"),
			"ath":   withClaim("ath", 5),
			"nonce": withClaim("nonce", 5),
		} {
			r := a.call("GET", "/products", tok, "", m)
			if r.Status != 401 || !strings.Contains(r.wwwAuth(), `error="invalid_dpop_proof"`) {
				t.Errorf("%s: %d %q", name, r.Status, r.wwwAuth())
			}
		}
		srv.TakeViolations()
		req, _ := http.NewRequest("GET", srv.EndpointURL(poppytest.EndpointAPI)+"/products", nil)
		req.Header.Set("Authorization", "DPoP "+tok)
		req.Header.Add("DPoP", a.proof("GET", srv.EndpointURL(poppytest.EndpointAPI)+"/products", withToken(tok)))
		req.Header.Add("DPoP", a.proof("GET", srv.EndpointURL(poppytest.EndpointAPI)+"/products", withToken(tok)))
		wantDPoPError(t, do(t, srv.Client(), req), "invalid_dpop_proof")
	})
	t.Run("private key in proof", func(t *testing.T) {
		info, _ := srv.Tokens().Get(tok)
		k := a.userKeys[info.UserID]
		jw := publicJWK(k)
		d, _ := k.Bytes()
		jw["d"] = b64.EncodeToString(d)
		wantDPoPError(t, a.call("GET", "/products", tok, "", withHeader("jwk", jw)), "invalid_dpop_proof")
		wantRules(t, srv, pa("4.3-03"))
	})
	t.Run("published key as DPoP key", func(t *testing.T) {
		b := newAgent(t, srv, "reuse.test")
		b.userKeys["usr_1"] = b.key
		btok := b.start("usr_1").str("access_token")
		if r := b.call("GET", "/products", btok, ""); r.Status != 200 {
			t.Fatalf("%d", r.Status)
		}
		rules := takeRules(srv)
		if rules[pa("4.1-10")] < 2 {
			t.Errorf("violations = %v, want the published-key rule at the token endpoint and the API", rules)
		}
	})
}

func TestCO_4_3_08_TokenEndpointProofs(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := newAgent(t, srv, "agent.test")
	wantTokenDPoPError := func(t *testing.T, r *response) {
		t.Helper()
		// CO-4.3-08, CO-4.3-09
		if r.Status != 400 || r.str("error") != "invalid_dpop_proof" || !strings.HasPrefix(r.wwwAuth(), `DPoP error="invalid_dpop_proof"`) {
			t.Fatalf("got %d %q %s", r.Status, r.wwwAuth(), r.Raw)
		}
	}
	t.Run("replay", func(t *testing.T) {
		proof := a.proof("POST", srv.EndpointURL(poppytest.EndpointToken), a.userKey("usr_1"))
		if r := postForm(t, srv, srv.EndpointURL(poppytest.EndpointToken), a.startForm("usr_1"), "DPoP", proof); r.Status != 200 {
			t.Fatalf("first: %d %s", r.Status, r.Raw)
		}
		// CO-4.3-08
		wantTokenDPoPError(t, postForm(t, srv, srv.EndpointURL(poppytest.EndpointToken), a.startForm("usr_1"), "DPoP", proof))
		wantRules(t, srv, pa("4.3-05"))
	})
	for name, m := range map[string]pmod{
		"signature": flipSignature(),
		"htm":       withClaim("htm", "GET"),
		"htu":       withClaim("htu", srv.EndpointURL(poppytest.EndpointRevoke)),
		"iat":       withClaim("iat", srv.Clock().Now().Add(-2*time.Minute).Unix()),
	} {
		t.Run(name, func(t *testing.T) {
			// CO-4.3-08
			wantTokenDPoPError(t, a.token(a.startForm("usr_1"), m))
			// PA-4.3-07, PA-4.3-08: a proof for another method or URL.
			switch name {
			case "htm":
				wantRules(t, srv, pa("4.3-07"))
			case "htu":
				wantRules(t, srv, pa("4.3-08"))
			}
		})
	}
	t.Run("ath at the token endpoint", func(t *testing.T) {
		wantTokenDPoPError(t, a.token(a.startForm("usr_1"), withToken("x")))
		wantRules(t, srv, pa("4.3-11"))
	})
	if n := len(srv.Sessions().All()); n != 1 {
		t.Errorf("rejected token requests created sessions: %d", n)
	}
}

func TestCO_4_3_10_Nonces(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{Tokens: poppytest.TokenPolicy{RequireNonce: true}})
	a := newAgent(t, srv, "agent.test")
	r := a.token(a.startForm("usr_1"))
	authNonce := r.Header.Get("DPoP-Nonce")
	// CO-4.3-10
	if r.Status != 400 || r.str("error") != "use_dpop_nonce" || authNonce == "" {
		t.Fatalf("token without nonce: %d %v %s", r.Status, r.Header, r.Raw)
	}
	// The same assertions may be resent with a new proof: the nonce error consumed nothing.
	f := a.startForm("usr_1")
	r = postForm(t, srv, srv.EndpointURL(poppytest.EndpointToken), f, "DPoP", a.proof("POST", srv.EndpointURL(poppytest.EndpointToken), a.userKey("usr_1"), withNonce(authNonce)))
	if r.Status != 200 {
		t.Fatalf("retry with nonce: %d %s", r.Status, r.Raw)
	}
	tok := r.str("access_token")
	// Resource: its own nonce.
	c := a.call("GET", "/products", tok, "")
	wantDPoPError(t, c, "use_dpop_nonce")
	apiNonce := c.Header.Get("DPoP-Nonce")
	// CO-4.3-10
	if apiNonce == "" || apiNonce == authNonce {
		t.Fatalf("API nonce %q (auth %q)", apiNonce, authNonce)
	}
	wantDPoPError(t, a.call("GET", "/products", tok, "", withNonce(authNonce)), "use_dpop_nonce")
	if c := a.call("GET", "/products", tok, "", withNonce(apiNonce)); c.Status != 200 {
		t.Fatalf("with nonce: %d %s", c.Status, c.Raw)
	}
	// Old nonces expire after 4 newer ones.
	for range 5 {
		srv.Tokens().NewNonce(poppytest.EndpointAPI)
	}
	wantDPoPError(t, a.call("GET", "/products", tok, "", withNonce(apiNonce)), "use_dpop_nonce")
}

func TestRotateNonce(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{Tokens: poppytest.TokenPolicy{RequireNonce: true, RotateNonce: true}})
	a := newAgent(t, srv, "agent.test")
	r := a.token(a.startForm("usr_1"))
	n := r.Header.Get("DPoP-Nonce")
	r = a.token(a.startForm("usr_1"), withNonce(n))
	if r.Status != 200 || r.Header.Get("DPoP-Nonce") == "" || r.Header.Get("DPoP-Nonce") == n {
		t.Fatalf("rotation at the token endpoint: %d %v", r.Status, r.Header)
	}
	tok := r.str("access_token")
	c := a.call("GET", "/products", tok, "")
	seen := map[string]bool{}
	for range 3 {
		n = c.Header.Get("DPoP-Nonce")
		if n == "" || seen[n] {
			t.Fatalf("nonce %q not fresh", n)
		}
		seen[n] = true
		c = a.call("GET", "/products", tok, "", withNonce(n))
		if c.Status != 200 {
			t.Fatalf("with latest nonce: %d %s", c.Status, c.Raw)
		}
	}
}

func TestCO_4_3_11_BearerForMCP(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := newAgent(t, srv, "agent.test")
	start := a.start("usr_1")
	sid, dpopTok := start.str("session_id"), start.str("access_token")
	f := a.renewForm("usr_1", sid)
	f.Set("resource", srv.EndpointURL(poppytest.EndpointMCP))
	r := postForm(t, srv, srv.EndpointURL(poppytest.EndpointToken), f) // no DPoP header
	// CO-4.3-11
	if r.Status != 200 || r.str("token_type") != "Bearer" || r.str("session_id") != sid {
		t.Fatalf("proof-less renewal: %d %s", r.Status, r.Raw)
	}
	bearer := r.str("access_token")
	if info, _ := srv.Tokens().Get(bearer); info.Type != "Bearer" || info.Resource != srv.EndpointURL(poppytest.EndpointMCP) || info.JKT != "" {
		t.Errorf("bearer record %+v", info)
	}
	// CO-4.3-11: without resource → invalid_target.
	r = postForm(t, srv, srv.EndpointURL(poppytest.EndpointToken), a.renewForm("usr_1", sid))
	if r.Status != 400 || r.str("error") != "invalid_target" {
		t.Errorf("proof-less without resource: %d %s", r.Status, r.Raw)
	}
	// CO-4.3-13: the DPoP token still works.
	if c := a.call("GET", "/products", dpopTok, ""); c.Status != 200 {
		t.Errorf("DPoP token after Bearer issue: %d", c.Status)
	}
	// CO-4.3-14: the Bearer token is refused at the API, as Bearer and as DPoP.
	req, _ := http.NewRequest("GET", srv.EndpointURL(poppytest.EndpointAPI)+"/products", nil)
	req.Header.Set("Authorization", "Bearer "+bearer)
	c := do(t, srv.Client(), req)
	// CO-4.3-14
	if c.Status != 401 || !strings.HasPrefix(c.wwwAuth(), "DPoP ") {
		t.Errorf("Bearer at the API: %d %q", c.Status, c.wwwAuth())
	}
	// CO-4.3-14
	if c := a.call("GET", "/products", bearer, ""); c.Status != 401 || !strings.Contains(c.wwwAuth(), `error="invalid_token"`) {
		t.Errorf("Bearer token with DPoP scheme: %d %q", c.Status, c.wwwAuth())
	}
	for _, p := range []string{"/poppy/conversations", "/poppy/operations"} {
		req, _ := http.NewRequest("POST", srv.EndpointURL(poppytest.EndpointAPI)+p, strings.NewReader("{}"))
		req.Header.Set("Authorization", "Bearer "+bearer)
		c := do(t, srv.Client(), req)
		// CO-4.3-14 (the mediated endpoint comes with sign-in)
		if c.Status != 401 || !strings.HasPrefix(c.wwwAuth(), "DPoP ") {
			t.Errorf("Bearer at %s: %d %q", p, c.Status, c.wwwAuth())
		}
	}
	wantRules(t, srv, pa("4.3-19"), pa("4.3-19"), pa("4.3-19"), pa("4.3-19"))
}

func TestCO_4_3_15_DPoPTokenAsBearer(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := newAgent(t, srv, "agent.test")
	tok := a.start("usr_1").str("access_token")
	req, _ := http.NewRequest("GET", srv.EndpointURL(poppytest.EndpointAPI)+"/products", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	r := do(t, srv.Client(), req)
	// CO-4.3-15
	if r.Status != 401 || !strings.HasPrefix(r.wwwAuth(), "DPoP ") {
		t.Fatalf("%d %q", r.Status, r.wwwAuth())
	}
	// DPoP scheme without a proof.
	req.Header.Set("Authorization", "DPoP "+tok)
	wantDPoPError(t, do(t, srv.Client(), req), "invalid_dpop_proof")
	wantRules(t, srv, pa("4.3-01"), pa("4.3-01"))
}

func TestCO_4_3_16_Scope(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := newAgent(t, srv, "agent.test")
	sid := a.start("usr_1").str("session_id")
	f := a.renewForm("usr_1", sid)
	f.Set("scope", "poppy:read")
	r := a.token(f)
	// CO-4.3-16
	if r.Status != 400 || r.str("error") != "invalid_scope" {
		t.Fatalf("%d %s", r.Status, r.Raw)
	}
}

func TestCO_4_3_17_DefaultTokenAndResources(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := newAgent(t, srv, "agent.test")
	tok := a.start("usr_1").str("access_token")
	// CO-4.3-17: the default token works at the API and the conversation
	// endpoint, and passes authentication at the reserved operations
	// endpoint (it answers 501 until implemented).
	if r := a.call("GET", "/products", tok, ""); r.Status != 200 {
		t.Fatalf("%d", r.Status)
	}
	if r := a.call("POST", "/poppy/conversations", tok, `{"message":{"id":"msg_1","sender":"agent","text":"Hi."}}`); r.Status != 201 {
		t.Errorf("default token at /poppy/conversations: %d %s", r.Status, r.Raw)
	}
	// The operations endpoint: past authentication, an unknown operation.
	if r := a.call("GET", "/poppy/operations/op_unknown", tok, ""); r.Status != 404 || r.str("error") != "operation_not_found" {
		t.Errorf("default token at the operations endpoint: %d %s", r.Status, r.Raw)
	}
	// A token for the API's own resource identifier works there too.
	f := a.startForm("usr_2")
	f.Set("resource", "https://api.example.test/")
	r := a.token(f)
	if r.Status != 200 {
		t.Fatalf("%d %s", r.Status, r.Raw)
	}
	if info, _ := srv.Tokens().Get(r.str("access_token")); info.Resource != "https://api.example.test/" {
		t.Errorf("resource = %q", info.Resource)
	}
	if c := a.call("GET", "/products", r.str("access_token"), ""); c.Status != 200 {
		t.Errorf("resource token at the API: %d", c.Status)
	}
	// A DPoP token for the MCP server is not an API token.
	f = a.startForm("usr_3")
	f.Set("resource", srv.EndpointURL(poppytest.EndpointMCP))
	mcp := a.token(f).str("access_token")
	if c := a.call("GET", "/products", mcp, ""); c.Status != 401 || !strings.Contains(c.wwwAuth(), "invalid_token") {
		t.Errorf("MCP-resource DPoP token at the API: %d", c.Status)
	}
	// Unknown resources and several resources are invalid_target.
	f = a.startForm("usr_1")
	f.Set("resource", "https://elsewhere.test/")
	if r := a.token(f); r.str("error") != "invalid_target" {
		t.Errorf("unknown resource: %d %s", r.Status, r.Raw)
	}
	f = a.startForm("usr_1")
	f["resource"] = []string{srv.EndpointURL(poppytest.EndpointMCP), "https://api.example.test/"}
	if r := a.token(f); r.str("error") != "invalid_target" {
		t.Errorf("two resources: %d %s", r.Status, r.Raw)
	}
}

func TestCO_4_3_18_APIResource(t *testing.T) {
	const res = "https://api.example.test/orders-api"
	srv := poppytest.NewServer(t, &poppytest.Options{API: poppytest.OpenAPIServerOptions{Resource: res}})
	a := newAgent(t, srv, "agent.test")
	def := a.start("usr_1")
	// CO-4.3-18, CO-3-13
	if r := a.call("GET", "/products", def.str("access_token"), ""); r.Status != 401 || !strings.Contains(r.wwwAuth(), `error="invalid_token"`) {
		t.Errorf("default token: %d %q", r.Status, r.wwwAuth())
	}
	f := a.renewForm("usr_1", def.str("session_id"))
	f.Set("resource", res)
	r := a.token(f)
	// CO-4.3-18
	if c := a.call("GET", "/products", r.str("access_token"), ""); c.Status != 200 {
		t.Errorf("resource token: %d %s", c.Status, c.Raw)
	}
}

func TestCO_4_3_20_TokenInURL(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := newAgent(t, srv, "agent.test")
	tok := a.start("usr_1").str("access_token")
	r := get(t, srv, srv.EndpointURL(poppytest.EndpointAPI)+"/products?access_token="+url.QueryEscape(tok))
	// CO-4.3-20
	if r.Status != 401 {
		t.Fatalf("%d %s", r.Status, r.Raw)
	}
	// The token-in-URL rule twice: the URL scan and the query parameter.
	wantRules(t, srv, pa("4.3-26"), pa("4.3-26"))
	// Any path carrying an issued token is a violation, on any host. The
	// violation names the request, but not the token.
	get(t, srv, srv.URL()+"/x/"+tok)
	vs := srv.Violations()
	if len(vs) != 1 || vs[0].String() != vs[0].Rule+": "+vs[0].Detail+" (GET https://example.test/x/…)" || strings.Contains(vs[0].String(), tok) {
		t.Fatalf("violations %v", vs)
	}
	wantRules(t, srv, pa("4.3-26"))
}

func TestCO_4_3_21_RateLimits(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := newAgent(t, srv, "agent.test")
	tok := a.start("usr_1").str("access_token")
	date := srv.Clock().Now().Add(10 * time.Second).UTC().Format(http.TimeFormat)
	for _, ep := range []poppytest.EndpointKind{poppytest.EndpointAPI, poppytest.EndpointToken, poppytest.EndpointPoppyJSON, poppytest.EndpointMetadata, poppytest.EndpointRevoke} {
		srv.Faults().RateLimit(ep, 1, "5")
	}
	checks := []*response{
		a.call("GET", "/products", tok, ""),
		a.token(a.startForm("usr_1")),
		get(t, srv, srv.URL()+"/.well-known/poppy.json"),
		get(t, srv, "https://auth.example.test/.well-known/oauth-authorization-server"),
		postForm(t, srv, srv.EndpointURL(poppytest.EndpointRevoke), url.Values{}),
	}
	for i, r := range checks {
		// CO-4.3-21
		if r.Status != 429 || r.Header.Get("Retry-After") != "5" || r.str("error") != "rate_limited" {
			t.Errorf("endpoint %d: %d %v %s", i, r.Status, r.Header.Get("Retry-After"), r.Raw)
		}
	}
	// HTTP-date and no header.
	srv.Faults().RateLimit(poppytest.EndpointAPI, 1, date)
	srv.Faults().RateLimit(poppytest.EndpointAPI, 1, "")
	if r := a.call("GET", "/products", tok, ""); r.Status != 429 || r.Header.Get("Retry-After") != date {
		t.Errorf("HTTP-date: %d %q", r.Status, r.Header.Get("Retry-After"))
	}
	if r := a.call("GET", "/products", tok, ""); r.Status != 429 || r.Header.Get("Retry-After") != "" {
		t.Errorf("no Retry-After: %d %q", r.Status, r.Header.Get("Retry-After"))
	}
	if r := a.call("GET", "/products", tok, ""); r.Status != 200 {
		t.Errorf("after the limit: %d", r.Status)
	}
}

func TestMissingAuthorization(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	r := get(t, srv, srv.EndpointURL(poppytest.EndpointAPI)+"/products")
	if r.Status != 401 || !strings.Contains(r.wwwAuth(), `error="invalid_token"`) {
		t.Fatalf("%d %q", r.Status, r.wwwAuth())
	}
	wantRules(t, srv, pa("4.3-23"))
	// The OpenAPI description is public.
	if r := get(t, srv, srv.EndpointURL(poppytest.EndpointAPI)+"/openapi.json"); r.Status != 200 {
		t.Errorf("openapi.json: %d", r.Status)
	}
}
