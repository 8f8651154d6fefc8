package poppy_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/poppytest"
)

func ath(tok string) string {
	sum := sha256.Sum256([]byte(tok))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// A mixed workload whose every request the tests below inspect.
func mixedWorkload(t *testing.T, e *env, s *poppy.Session) {
	t.Helper()
	for i := 0; i < 20; i++ {
		if code, body := e.get(s, "/products?page="+strconv.Itoa(i)+"#frag"); code != 200 {
			t.Fatalf("GET: %d %s", code, body)
		}
		resp, err := s.HTTPClient().Post(e.srv.EndpointURL(poppytest.EndpointAPI)+"/echo", "application/json", strings.NewReader(`{"n":1}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if i%5 == 0 {
			if _, err := s.Token(ctx, &poppy.TokenOptions{Renew: true}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// stillClock is an agent clock that stands still at t: every proof made by
// it says when it was made, t, to the second (PA-4.3-09).
type stillClock struct{ t time.Time }

func (c stillClock) Now() time.Time { return c.t }

func (c stillClock) Sleep(ctx context.Context, _ time.Duration) error { return ctx.Err() }

func TestPA_4_3_01_and_05_to_11_EveryRequestProof(t *testing.T) {
	// The agent's clock stands 20 s behind the fake's, within its 60 s
	// window: a proof's iat is then the agent's time to the second, and
	// neither the fake's clock nor the machine's.
	made := stillClock{time.Now().Add(-20*time.Second - 300*time.Millisecond)}
	e := newEnv(t, nil, &poppy.AgentOptions{Clock: made})
	s := e.session("alice")
	mixedWorkload(t, e, s)
	jtis := map[string]bool{}
	var api, token int
	for _, r := range sdkRequests(e.srv, poppytest.EndpointAPI, poppytest.EndpointToken) {
		p := r.Proof
		// PA-4.3-05: a proof on every request, token requests included.
		if p == nil {
			t.Fatalf("%s %s has no proof", r.Method, r.URL)
		}
		jti := claim(p.Claims, "jti")
		if jtis[jti] {
			t.Fatalf("proof jti %q reused", jti)
		}
		jtis[jti] = true
		// PA-4.3-06
		jwkMap, _ := p.Header["jwk"].(map[string]any)
		if p.Header["typ"] != "dpop+jwt" || p.Header["alg"] != "ES256" ||
			jwkMap["kty"] != "EC" || jwkMap["crv"] != "P-256" || jwkMap["x"] == nil || jwkMap["y"] == nil {
			t.Fatalf("proof header %s", p.RawHeader)
		}
		// PA-4.3-03: never a private key member.
		if bytes.Contains(p.RawHeader, []byte(`"d"`)) {
			t.Fatalf("proof header carries d: %s", p.RawHeader)
		}
		// PA-4.3-07, PA-4.3-08
		if claim(p.Claims, "htm") != r.Method {
			t.Errorf("htm %q for %s", claim(p.Claims, "htm"), r.Method)
		}
		if want := "https://" + r.Host + r.Path; claim(p.Claims, "htu") != want {
			t.Errorf("htu %q, want %q", claim(p.Claims, "htu"), want)
		}
		// PA-4.3-09
		iat, _ := strconv.ParseInt(fmt.Sprint(p.Claims["iat"]), 10, 64)
		if iat != made.t.Unix() {
			t.Errorf("iat %d, the agent's clock %d", iat, made.t.Unix())
		}
		switch r.Endpoint {
		case poppytest.EndpointAPI:
			api++
			// PA-4.3-01
			if !strings.HasPrefix(r.Header.Get("Authorization"), "DPoP ") || strings.Count(r.Header.Get("Authorization"), " ") != 1 {
				t.Errorf("Authorization %q", r.Header.Get("Authorization"))
			}
			// PA-4.3-10
			if claim(p.Claims, "ath") != ath(r.AccessToken) {
				t.Error("ath does not hash the token sent")
			}
		case poppytest.EndpointToken:
			token++
			// PA-4.3-11
			if _, ok := p.Claims["ath"]; ok {
				t.Error("token endpoint proof has ath")
			}
		}
		if r.Status >= 400 {
			t.Errorf("%s %s answered %d %s", r.Method, r.URL, r.Status, r.ErrorCode)
		}
	}
	if api != 40 || token != 5 {
		t.Fatalf("%d API and %d token requests", api, token)
	}
}

func TestPA_4_3_02_and_04_KeyPerUserPerCompany(t *testing.T) {
	thumbs := map[string]string{}
	for _, issuer := range []string{"https://auth.example.test", "https://auth.other.test"} {
		e := newEnv(t, &poppytest.Options{Issuer: issuer}, nil)
		for _, u := range []string{"alice", "bob"} {
			s := e.session(u)
			s2, err := e.company("example.test").Session(ctx, u, &poppy.SessionOptions{Name: "other"})
			if err != nil {
				t.Fatal(err)
			}
			// PA-4.3-04: by default every Session of one User shares the key.
			if s.Thumbprint() != s2.Thumbprint() {
				t.Fatal("two Sessions of one User use different keys without KeyPerSession")
			}
			thumbs[issuer+" "+u] = s.Thumbprint()
		}
		// The fake saw the thumbprints the SDK reports.
		for _, r := range sdkRequests(e.srv, poppytest.EndpointToken) {
			found := false
			for _, tp := range thumbs {
				found = found || tp == r.Proof.JKT
			}
			if !found {
				t.Fatal("proof key unknown")
			}
		}
	}
	// PA-4.3-02: 2 Users × 2 issuers → 4 keys.
	seen := map[string]bool{}
	for _, tp := range thumbs {
		seen[tp] = true
	}
	if len(seen) != 4 {
		t.Fatalf("%d distinct DPoP keys for 2 Users at 2 issuers, want 4", len(seen))
	}
	// PA-4.3-04: with KeyPerSession each Session has its own.
	e := newEnv(t, nil, &poppy.AgentOptions{KeyPerSession: true})
	a := e.session("alice")
	b, err := e.company("example.test").Session(ctx, "alice", &poppy.SessionOptions{Name: "other"})
	if err != nil {
		t.Fatal(err)
	}
	if a.Thumbprint() == b.Thumbprint() {
		t.Fatal("KeyPerSession: two Sessions share a key")
	}
}

func TestPA_4_1_10_DPoPKeysNotPublished(t *testing.T) {
	e := newEnv(t, nil, nil)
	s := e.session("alice")
	mixedWorkload(t, e, s)
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(e.id.JWKS(), &set); err != nil || len(set.Keys) == 0 {
		t.Fatal(err)
	}
	// PA-4.1-10: JWKS keys and proof keys are disjoint (the fake also checks
	// every proof key against every JWKS it fetched).
	for _, r := range sdkRequests(e.srv, poppytest.EndpointAPI, poppytest.EndpointToken) {
		if r.Proof.JKT == e.key.KeyID() {
			t.Fatal("a proof used the published signing key")
		}
	}
	for _, v := range e.srv.Violations() {
		if v.Rule == "PA-4.1-10" {
			t.Fatalf("violation %v", v)
		}
	}
}

func TestPA_4_3_12_NonceAtTokenEndpoint(t *testing.T) {
	e := newEnv(t, &poppytest.Options{Tokens: poppytest.TokenPolicy{RequireNonce: true}}, nil)
	e.session("alice")
	toks := sdkRequests(e.srv, poppytest.EndpointToken)
	if len(toks) != 2 {
		t.Fatalf("%d token requests, want 2", len(toks))
	}
	// PA-4.3-12
	if toks[0].ErrorCode != "use_dpop_nonce" || toks[1].Status != 200 {
		t.Fatalf("first %d %s, second %d", toks[0].Status, toks[0].ErrorCode, toks[1].Status)
	}
	if claim(toks[1].Proof.Claims, "nonce") == "" || claim(toks[0].Proof.Claims, "nonce") != "" {
		t.Fatal("second proof carries no nonce")
	}
}

func TestPA_4_3_13_NonceAtAPI(t *testing.T) {
	e := newEnv(t, &poppytest.Options{Tokens: poppytest.TokenPolicy{RequireNonce: true}}, nil)
	s := e.session("alice")
	if code, body := e.get(s, "/products"); code != 200 {
		t.Fatalf("status %d %s", code, body)
	}
	// PA-4.3-13: exactly two requests, the second with the API's nonce.
	api := sdkRequests(e.srv, poppytest.EndpointAPI)
	if len(api) != 2 || api[0].ErrorCode != "use_dpop_nonce" || claim(api[1].Proof.Claims, "nonce") == "" {
		t.Fatalf("%d API requests", len(api))
	}
	// The API's nonce is not the token endpoint's: nonces are per server.
	toks := sdkRequests(e.srv, poppytest.EndpointToken)
	if claim(api[1].Proof.Claims, "nonce") == claim(toks[len(toks)-1].Proof.Claims, "nonce") {
		t.Fatal("API proof reused the token endpoint's nonce")
	}
}

func TestPA_4_3_14_NonceFromEveryResponse(t *testing.T) {
	e := newEnv(t, &poppytest.Options{Tokens: poppytest.TokenPolicy{RequireNonce: true, RotateNonce: true}}, nil)
	s := e.session("alice")
	for i := 0; i < 10; i++ {
		if code, body := e.get(s, "/products"); code != 200 {
			t.Fatalf("status %d %s", code, body)
		}
	}
	api := sdkRequests(e.srv, poppytest.EndpointAPI)
	// PA-4.3-14: only the very first request lacks a nonce; each later proof
	// carries the nonce of the previous response.
	fails := 0
	for i, r := range api {
		if r.ErrorCode == "use_dpop_nonce" {
			fails++
		}
		// Each response carried a fresh nonce: a later proof reusing an
		// older one shows the SDK did not adopt it.
		if i > 1 && claim(r.Proof.Claims, "nonce") == claim(api[i-1].Proof.Claims, "nonce") {
			t.Fatalf("request %d reuses the nonce of request %d", i, i-1)
		}
	}
	if fails != 1 {
		t.Fatalf("%d use_dpop_nonce answers, want 1", fails)
	}
}

func TestPA_4_3_15_NonceRetriedOnce(t *testing.T) {
	e := newEnv(t, nil, nil)
	s := e.session("alice")
	e.srv.Faults().ForceError(poppytest.EndpointAPI, poppytest.Fault{Status: 401, Code: "use_dpop_nonce", Times: 10})
	_, err := doGet(s, e.srv.EndpointURL(poppytest.EndpointAPI)+"/products")
	// PA-4.3-15
	if !errors.Is(err, poppy.ErrDPoPNonce) {
		t.Fatalf("err = %v, want ErrDPoPNonce", err)
	}
	if n := len(sdkRequests(e.srv, poppytest.EndpointAPI)); n != 2 {
		t.Fatalf("%d API requests, want 2", n)
	}
}

func TestPA_4_3_16_InvalidProofNoRetry(t *testing.T) {
	e := newEnv(t, nil, nil)
	e.srv.Faults().ForceError(poppytest.EndpointToken, poppytest.Fault{Status: 400, Code: "invalid_dpop_proof"})
	if _, err := e.company("example.test").Session(ctx, "alice", nil); !errors.Is(err, poppy.ErrInvalidDPoPProof) {
		t.Fatalf("token endpoint: err = %v", err)
	}
	// PA-4.3-16: one request at the token endpoint…
	if n := len(sdkRequests(e.srv, poppytest.EndpointToken)); n != 1 {
		t.Fatalf("%d token requests", n)
	}
	s := e.session("alice")
	e.srv.Faults().ForceError(poppytest.EndpointAPI, poppytest.Fault{Status: 401, Code: "invalid_dpop_proof"})
	_, err := doGet(s, e.srv.EndpointURL(poppytest.EndpointAPI)+"/products")
	if !errors.Is(err, poppy.ErrInvalidDPoPProof) {
		t.Fatalf("API: err = %v", err)
	}
	// …and one at the API.
	if n := len(sdkRequests(e.srv, poppytest.EndpointAPI)); n != 1 {
		t.Fatalf("%d API requests", n)
	}
}

func TestPA_4_3_17_18_BearerTokenForMCP(t *testing.T) {
	e := newEnv(t, nil, nil)
	s := e.session("alice")
	tok, err := s.Token(ctx, &poppy.TokenOptions{Bearer: true, Resource: e.srv.EndpointURL(poppytest.EndpointMCP)})
	if err != nil {
		t.Fatal(err)
	}
	toks := sdkRequests(e.srv, poppytest.EndpointToken)
	r := toks[len(toks)-1]
	// PA-4.3-17: no proof; the Session's renewal grant.
	if hasHeader(r, "DPoP") || r.Form.Get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer" || r.Form.Get("session_id") != s.ID() {
		t.Fatalf("Bearer request: DPoP %v, form %v", hasHeader(r, "DPoP"), r.Form)
	}
	// PA-4.3-18
	if r.Form.Get("resource") != e.srv.EndpointURL(poppytest.EndpointMCP) {
		t.Fatalf("resource %q", r.Form.Get("resource"))
	}
	if tok.Type != "Bearer" {
		t.Fatalf("type %q", tok.Type)
	}
	// The DPoP token is kept beside it (PA-4.3-19 for the API side).
	if code, body := e.get(s, "/products"); code != 200 {
		t.Fatalf("status %d %s", code, body)
	}
	last := sdkRequests(e.srv, poppytest.EndpointAPI)
	if last[len(last)-1].AccessToken == tok.Value() {
		t.Fatal("Bearer token sent to the OpenAPI API")
	}
}

func TestPA_4_3_20_NarrowerScope(t *testing.T) {
	e := newEnv(t, nil, nil)
	s := e.session("alice")
	_, err := s.Token(ctx, &poppy.TokenOptions{Scopes: []string{"poppy:read"}})
	toks := sdkRequests(e.srv, poppytest.EndpointToken)
	// PA-4.3-20: the scope is asked for; a signed-out Session has none, so
	// the Company refuses with invalid_scope (CO-4.3-16), typed.
	if got := toks[len(toks)-1].Form.Get("scope"); got != "poppy:read" {
		t.Fatalf("scope %q", got)
	}
	if !errors.Is(err, poppy.ErrInvalidScope) {
		t.Fatalf("err = %v, want ErrInvalidScope", err)
	}
}

func TestPA_4_3_21_ResourceToken(t *testing.T) {
	e := newEnv(t, nil, nil)
	s := e.session("alice")
	res := e.srv.EndpointURL(poppytest.EndpointAPI) + "/"
	tok, err := s.Token(ctx, &poppy.TokenOptions{Resource: res})
	if err != nil {
		t.Fatal(err)
	}
	toks := sdkRequests(e.srv, poppytest.EndpointToken)
	// PA-4.3-21
	if toks[len(toks)-1].Form.Get("resource") != res {
		t.Fatalf("resource %q", toks[len(toks)-1].Form.Get("resource"))
	}
	if info, ok := e.srv.Tokens().Get(tok.Value()); !ok || info.Resource != res {
		t.Fatalf("server record %+v", info)
	}
}

func TestPA_4_3_22_PerResourceToken(t *testing.T) {
	res := "https://api.example.test/"
	e := newEnv(t, &poppytest.Options{API: poppytest.OpenAPIServerOptions{Resource: res}}, nil)
	s := e.session("alice")
	if code, body := e.get(s, "/products"); code != 200 {
		t.Fatalf("status %d %s", code, body)
	}
	// PA-4.3-22: a token request for the resource before the first call.
	toks := sdkRequests(e.srv, poppytest.EndpointToken)
	api := sdkRequests(e.srv, poppytest.EndpointAPI)
	if len(api) != 1 || toks[len(toks)-1].Form.Get("resource") != res || toks[len(toks)-1].Index > api[0].Index {
		t.Fatalf("%d API requests; last token request resource %q", len(api), toks[len(toks)-1].Form.Get("resource"))
	}
}

func TestPA_4_3_23_26_NoAnonymousRequestsNoTokensInURLs(t *testing.T) {
	e := newEnv(t, nil, nil)
	s := e.session("alice")
	mixedWorkload(t, e, s)
	for _, r := range sdkRequests(e.srv, poppytest.EndpointAPI) {
		// PA-4.3-23
		if r.Header.Get("Authorization") == "" {
			t.Fatalf("%s %s without Authorization", r.Method, r.URL)
		}
	}
	// PA-4.3-26: the fake scans every URL for any token it issued, and the
	// test fails at cleanup on any violation; check it here too.
	for _, v := range e.srv.Violations() {
		t.Errorf("violation %v", v)
	}
	for _, r := range e.srv.Requests() {
		for _, api := range sdkRequests(e.srv, poppytest.EndpointAPI) {
			if strings.Contains(r.URL, api.AccessToken) {
				t.Fatal("token in a URL")
			}
		}
	}
}

func TestPA_4_3_24_NoAnonymousMode(t *testing.T) {
	var s *poppy.Session
	e := newEnv(t, nil, nil)
	_, err := s.HTTPClient().Get(e.srv.EndpointURL(poppytest.EndpointAPI) + "/products")
	// PA-4.3-24
	if !errors.Is(err, poppy.ErrNoSession) {
		t.Fatalf("err = %v, want ErrNoSession", err)
	}
	if n := len(sdkRequests(e.srv, poppytest.EndpointAPI)); n != 0 {
		t.Fatalf("%d requests sent", n)
	}
}

func TestPA_4_3_25_NewTokenUsedFromThenOn(t *testing.T) {
	e := newEnv(t, &poppytest.Options{Tokens: poppytest.TokenPolicy{RevokeOnReissue: true}}, nil)
	s := e.session("alice")
	old, _ := s.Token(ctx, nil)
	if _, err := s.Token(ctx, &poppy.TokenOptions{Renew: true}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if code, body := e.get(s, "/products"); code != 200 {
			t.Fatalf("status %d %s", code, body)
		}
	}
	// PA-4.3-25
	for _, r := range sdkRequests(e.srv, poppytest.EndpointAPI) {
		if r.AccessToken == old.Value() || r.ErrorCode == "invalid_token" {
			t.Fatal("old token used after renewal")
		}
	}
}

func TestPA_4_3_27_RetryAfterSeconds(t *testing.T) {
	e := newEnv(t, nil, nil)
	s := e.session("alice")
	e.srv.Faults().RateLimit(poppytest.EndpointAPI, 1, "5")
	if code, body := e.get(s, "/products"); code != 200 {
		t.Fatalf("status %d %s", code, body)
	}
	api := sdkRequests(e.srv, poppytest.EndpointAPI)
	// PA-4.3-27
	if len(api) != 2 || api[1].Time.Sub(api[0].Time) < 5*time.Second {
		t.Fatalf("%d requests; gap %v", len(api), api[len(api)-1].Time.Sub(api[0].Time))
	}
}

func TestPA_4_3_28_RetryAfterDate(t *testing.T) {
	e := newEnv(t, nil, nil)
	s := e.session("alice")
	e.srv.Faults().RateLimit(poppytest.EndpointAPI, 1, e.srv.Clock().Now().Add(10*time.Second).UTC().Format(http.TimeFormat))
	if code, body := e.get(s, "/products"); code != 200 {
		t.Fatalf("status %d %s", code, body)
	}
	api := sdkRequests(e.srv, poppytest.EndpointAPI)
	// PA-4.3-28
	if len(api) != 2 || api[1].Time.Sub(api[0].Time) < 9*time.Second {
		t.Fatalf("%d requests; gap %v", len(api), api[len(api)-1].Time.Sub(api[0].Time))
	}
}

func TestPA_4_3_29_RateLimitWithoutRetryAfter(t *testing.T) {
	e := newEnv(t, nil, nil)
	s := e.session("alice")
	e.srv.Faults().RateLimit(poppytest.EndpointAPI, 10, "")
	_, err := doGet(s, e.srv.EndpointURL(poppytest.EndpointAPI)+"/products")
	// PA-4.3-29: 1 s, 2 s, 4 s apart, then ErrRateLimited.
	if !errors.Is(err, poppy.ErrRateLimited) {
		t.Fatalf("err = %v, want ErrRateLimited", err)
	}
	api := sdkRequests(e.srv, poppytest.EndpointAPI)
	if len(api) != 4 {
		t.Fatalf("%d requests, want 4", len(api))
	}
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		if gap := api[i+1].Time.Sub(api[i].Time); gap < want {
			t.Fatalf("gap %d = %v, want >= %v", i, gap, want)
		}
	}
}

// A body survives every kind of retry unchanged.
func TestRetriedBodyIntact(t *testing.T) {
	e := newEnv(t, &poppytest.Options{Tokens: poppytest.TokenPolicy{RequireNonce: true}}, nil)
	s := e.session("alice")
	e.srv.Faults().RateLimit(poppytest.EndpointAPI, 1, "1")
	body := `{"hello":"world"}`
	req, _ := http.NewRequest("POST", e.srv.EndpointURL(poppytest.EndpointAPI)+"/echo", io.NopCloser(strings.NewReader(body)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.HTTPClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(string(got), `"hello":"world"`) {
		t.Fatalf("status %d body %s", resp.StatusCode, got)
	}
}

// Tokens go only to the Company's hosts.
func TestForeignHostRefused(t *testing.T) {
	e := newEnv(t, nil, nil)
	s := e.session("alice")
	_, err := s.HTTPClient().Get("https://agent.test/agent.json")
	if !errors.Is(err, poppy.ErrForeignHost) {
		t.Fatalf("err = %v, want ErrForeignHost", err)
	}
	_, err = s.HTTPClient().Get("http://api.example.test/products")
	if !errors.Is(err, poppy.ErrInsecureURL) {
		t.Fatalf("err = %v, want ErrInsecureURL", err)
	}
}

// Requests whose body holds credentials are never redirected: the form of a
// client-authenticated POST (token, revocation, device authorization) and a
// DirectHTTPClient request stop at a 307 instead of re-sending the body.
func TestCredentialBodiesNotRedirected(t *testing.T) {
	e := newEnv(t, nil, nil)
	s := e.session("alice")
	var hits int
	e.srv.HandleAgent("jump.example.test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits++
		http.Redirect(w, r, "https://api.example.test/echo", http.StatusTemporaryRedirect)
	}))
	_, err := poppy.PostClientAuthenticated(ctx, e.company("example.test"), "https://jump.example.test/oauth/device", nil)
	var pe *poppy.Error
	if !errors.As(err, &pe) || pe.Status != http.StatusTemporaryRedirect {
		t.Fatalf("err = %v, want the 307 as an *Error", err)
	}
	resp, err := poppy.DirectHTTPClient(s).Post("https://jump.example.test/sign-in", "application/json", strings.NewReader(`{"secret":1}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTemporaryRedirect {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if n := len(sdkRequests(e.srv, poppytest.EndpointAPI)); n != 0 || hits != 2 {
		t.Fatalf("the body followed the redirect (%d API requests, %d hits)", n, hits)
	}
}
