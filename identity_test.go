package poppy_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/poppytest"
)

func identityWith(t *testing.T, mutate func(*poppy.IdentityConfig)) error {
	t.Helper()
	key, err := poppy.GenerateSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	cfg := poppy.IdentityConfig{
		ClientID:     testClientID,
		JWKSURI:      testJWKS,
		RedirectURIs: []string{testRedirect},
		Keys:         []*poppy.SigningKey{key},
	}
	mutate(&cfg)
	_, err = poppy.NewIdentity(cfg)
	return err
}

func TestPA_4_1_01_to_04_IdentityURLs(t *testing.T) {
	for name, c := range map[string]struct {
		mutate func(*poppy.IdentityConfig)
		ok     bool
	}{
		// PA-4.1-01
		"http client_id": {func(c *poppy.IdentityConfig) { c.ClientID = "http://agent.test/agent.json" }, false},
		// PA-4.1-03
		"jwks elsewhere": {func(c *poppy.IdentityConfig) { c.JWKSURI = "https://cdn.other.test/jwks.json" }, false},
		"http jwks":      {func(c *poppy.IdentityConfig) { c.JWKSURI = "http://agent.test/jwks.json" }, false},
		// PA-4.1-04
		"http redirect": {func(c *poppy.IdentityConfig) { c.RedirectURIs = []string{"http://agent.test/cb"} }, false},
		"evil redirect": {func(c *poppy.IdentityConfig) { c.RedirectURIs = []string{"https://evil.test/cb"} }, false},
		"no keys":       {func(c *poppy.IdentityConfig) { c.Keys = nil }, false},
		"default jwks":  {func(c *poppy.IdentityConfig) { c.JWKSURI = "" }, true},
		"valid":         {func(c *poppy.IdentityConfig) {}, true},
	} {
		err := identityWith(t, c.mutate)
		if (err == nil) != c.ok {
			t.Errorf("%s: err = %v", name, err)
		}
	}
	// A loopback http:// identity needs the Agent's unsafe option.
	key, _ := poppy.GenerateSigningKey()
	id, err := poppy.NewIdentity(poppy.IdentityConfig{ClientID: "http://127.0.0.1:8080/agent.json", Keys: []*poppy.SigningKey{key}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := poppy.NewAgent(id, nil); err == nil {
		t.Fatal("NewAgent accepted an http:// identity without UnsafeAllowLoopbackHTTP")
	}
	if _, err := poppy.NewAgent(id, &poppy.AgentOptions{UnsafeAllowLoopbackHTTP: true}); err != nil {
		t.Fatal(err)
	}
}

// The documents as the fake Company fetched them, over HTTPS from client_id.
func fetchedMetadata(t *testing.T, e *env) map[string]any {
	t.Helper()
	e.session("alice")
	var doc map[string]any
	for _, r := range e.srv.Requests() {
		if r.Internal && r.URL == testClientID {
			if r.Status != 200 {
				t.Fatalf("fake's fetch of client_id: %d", r.Status)
			}
			b, ok := e.srv.Sessions().ClientMetadata(testClientID)
			if !ok {
				t.Fatal("fake kept no client metadata")
			}
			if err := json.Unmarshal(b, &doc); err != nil {
				t.Fatal(err)
			}
			return doc
		}
	}
	t.Fatal("the fake never fetched client_id")
	return nil
}

func TestPA_4_1_01_02_03_06_ServedMetadata(t *testing.T) {
	e := newEnv(t, nil, nil)
	doc := fetchedMetadata(t, e)
	// PA-4.1-02
	if doc["client_id"] != testClientID {
		t.Errorf("client_id %v", doc["client_id"])
	}
	// PA-4.1-03
	if u, _ := url.Parse(fmt.Sprint(doc["jwks_uri"])); u == nil || u.Host != "agent.test" || u.Scheme != "https" {
		t.Errorf("jwks_uri %v", doc["jwks_uri"])
	}
	// PA-4.1-06
	if doc["token_endpoint_auth_method"] != "private_key_jwt" {
		t.Errorf("token_endpoint_auth_method %v", doc["token_endpoint_auth_method"])
	}
	if ru, _ := doc["redirect_uris"].([]any); len(ru) != 1 || ru[0] != testRedirect {
		t.Errorf("redirect_uris %v", doc["redirect_uris"])
	}
}

func TestPA_4_1_05_JWKSPublicOnly(t *testing.T) {
	e := newEnv(t, nil, nil)
	k2, _ := poppy.GenerateSigningKey()
	if err := e.id.Rotate(e.key, k2); err != nil {
		t.Fatal(err)
	}
	resp, err := e.srv.Client().Get(testJWKS)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var set struct {
		Keys []map[string]any `json:"keys"`
	}
	if err := json.Unmarshal(body, &set); err != nil {
		t.Fatal(err)
	}
	if len(set.Keys) != 2 {
		t.Fatalf("%d keys published, want 2 after rotation", len(set.Keys))
	}
	for _, k := range set.Keys {
		// PA-4.1-05
		for _, priv := range []string{"d", "p", "q", "dp", "dq", "qi", "k"} {
			if _, ok := k[priv]; ok {
				t.Fatalf("JWKS key has private member %q", priv)
			}
		}
	}
	if resp.Header.Get("Cache-Control") == "" || resp.Header.Get("ETag") == "" {
		t.Fatal("JWKS served without caching headers")
	}
}

// Rotation: a published second key takes over signing and the Company
// accepts it.
func TestKeyRotation(t *testing.T) {
	e := newEnv(t, &poppytest.Options{}, nil)
	e.session("alice")
	k2, _ := poppy.GenerateSigningKey()
	if err := e.id.Rotate(k2, e.key); err != nil {
		t.Fatal(err)
	}
	s, err := e.company("example.test").Session(ctx, "bob", nil)
	if err != nil {
		t.Fatalf("after rotation: %v", err)
	}
	toks := sdkRequests(e.srv, poppytest.EndpointToken)
	if kid := toks[len(toks)-1].ClientAssertion.Header["kid"]; kid != k2.KeyID() {
		t.Fatalf("signed with kid %v, want the new key", kid)
	}
	_ = s
}

func TestPA_4_1_07_and_09_ClientAssertions(t *testing.T) {
	e := newEnv(t, nil, nil)
	s := e.session("alice")
	for range 99 {
		if _, err := s.Token(ctx, &poppy.TokenOptions{Renew: true}); err != nil {
			t.Fatal(err)
		}
	}
	jtis := map[string]bool{}
	toks := sdkRequests(e.srv, poppytest.EndpointToken)
	if len(toks) != 100 {
		t.Fatalf("%d token requests", len(toks))
	}
	for _, r := range toks {
		ca := r.ClientAssertion
		// PA-4.1-07: every token request is authenticated, and verified by the fake.
		if ca == nil || r.Status != 200 || r.Form.Get("client_assertion_type") != "urn:ietf:params:oauth:client-assertion-type:jwt-bearer" {
			t.Fatalf("token request %d: status %d", r.Index, r.Status)
		}
		// PA-4.1-09
		if claim(ca.Claims, "iss") != testClientID || claim(ca.Claims, "sub") != testClientID {
			t.Fatalf("iss/sub %v", ca.Claims)
		}
		if !bytes.Contains(ca.RawClaims, []byte(`"aud":"`)) || ca.AudienceMatch != "token_endpoint" {
			t.Fatalf("aud not a single string equal to the token endpoint: %s (%s)", ca.RawClaims, ca.AudienceMatch)
		}
		iat, _ := strconv.ParseInt(fmt.Sprint(ca.Claims["iat"]), 10, 64)
		exp, _ := strconv.ParseInt(fmt.Sprint(ca.Claims["exp"]), 10, 64)
		if exp-iat <= 0 || exp-iat > 60 {
			t.Fatalf("lifetime %d s", exp-iat)
		}
		jti := claim(ca.Claims, "jti")
		if b, err := base64.RawURLEncoding.DecodeString(jti); err != nil || len(b) < 16 || jtis[jti] {
			t.Fatalf("jti %q short or reused", jti)
		}
		jtis[jti] = true
	}
}

func TestPA_3_3_01_and_03_ExtensionNames(t *testing.T) {
	key, _ := poppy.GenerateSigningKey()
	base := poppy.IdentityConfig{ClientID: testClientID, JWKSURI: testJWKS, Keys: []*poppy.SigningKey{key}}
	// PA-3.3-01: a plain name is the protocol's own.
	bad := base
	bad.Extensions = map[string]string{"gift-wrap": "1"}
	if _, err := poppy.NewIdentity(bad); err == nil {
		t.Fatal("plain unknown extension name accepted")
	}
	good := base
	good.Extensions = map[string]string{"agent.test/gift-wrap": "1", "example.test/gift-wrap": "1", "operations": "1"}
	id, err := poppy.NewIdentity(good)
	if err != nil {
		t.Fatal(err)
	}
	// PA-3.3-03: listed under exactly those names, each with its version.
	var doc struct {
		Extensions map[string]struct {
			Version string `json:"version"`
		} `json:"extensions"`
	}
	if err := json.Unmarshal(id.Metadata(), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Extensions) != 3 || doc.Extensions["agent.test/gift-wrap"].Version != "1" || doc.Extensions["example.test/gift-wrap"].Version != "1" {
		t.Fatalf("extensions %+v", doc.Extensions)
	}
	none, _ := poppy.NewIdentity(base)
	if strings.Contains(string(none.Metadata()), "extensions") {
		t.Fatal("extensions listed with none enabled")
	}
}

func TestPA_3_3_06_ExtensionRequired(t *testing.T) {
	e := newEnv(t, nil, nil)
	s := e.session("alice")
	e.srv.Faults().ForceError(poppytest.EndpointAPI, poppytest.Fault{Status: 403, Code: "extension_required"})
	_, err := doPost(s, e.srv.EndpointURL(poppytest.EndpointAPI)+"/orders/ord_1/exchanges", `{}`)
	// PA-3.3-06
	var xr poppy.ExtensionRequiredError
	if !errorsAs(err, &xr) || xr.Extension != "operations" {
		t.Fatalf("err = %v", err)
	}
	if n := len(sdkRequests(e.srv, poppytest.EndpointAPI)); n != 1 {
		t.Fatalf("%d requests, want 1", n)
	}
}

func TestIdentityHandler(t *testing.T) {
	id, _ := newIdentity(t, nil)
	h := id.Handler(nil)
	for path, want := range map[string]int{"/agent.json": 200, "/jwks.json": 200, "/other": 404} {
		req, _ := http.NewRequest("GET", "https://agent.test"+path, nil)
		rec := newRecorder()
		h.ServeHTTP(rec, req)
		if rec.code != want {
			t.Errorf("%s: %d, want %d", path, rec.code, want)
		}
	}
}

// The Agent's own client refuses a redirect to http://, whatever client the
// caller supplied.
func TestAgentClientRefusesInsecureRedirect(t *testing.T) {
	e := newEnv(t, nil, nil)
	e.srv.HandleAgent("jump.example.test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://example.test/.well-known/poppy.json", http.StatusFound)
	}))
	_, err := e.agent.HTTPClient().Get("https://jump.example.test/")
	if !errors.Is(err, poppy.ErrInsecureRedirect) {
		t.Fatalf("err = %v, want ErrInsecureRedirect", err)
	}
	if e.srv.Client().CheckRedirect != nil {
		t.Fatal("the caller's client was changed")
	}
}
