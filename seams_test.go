package poppy_test

// The capabilities the SDK's own packages use and users may use too
// (docs/decisions.md, "Seams between the packages"): the module's one URL
// check, the Agent's document fetch and retry policy, a Session's client
// for one resource, renewing a refused token, and redacting a Session's
// secrets.

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/poppytest"
)

func TestAgentParseURL(t *testing.T) {
	e := newEnv(t, nil, nil)
	loose := e.newAgent(&poppy.AgentOptions{UnsafeAllowLoopbackHTTP: true})
	for _, c := range []struct {
		raw          string
		strict, dev  bool
		wantHostPart string
	}{
		{"https://api.example.test/orders", true, true, "api.example.test"},
		{"http://api.example.test/orders", false, false, ""},
		{"http://127.0.0.1:8080/", false, true, "127.0.0.1:8080"},
		{"http://localhost/x", false, true, "localhost"},
		{"https://user:pw@api.example.test/", false, false, ""},
		{"https:opaque", false, false, ""},
		{"/relative", false, false, ""},
		{"%zz", false, false, ""},
	} {
		for _, a := range []struct {
			agent *poppy.Agent
			ok    bool
		}{{e.agent, c.strict}, {loose, c.dev}} {
			u, err := a.agent.ParseURL(c.raw)
			if a.ok != (err == nil) {
				t.Errorf("ParseURL(%q) = %v, %v; want ok %v", c.raw, u, err, a.ok)
				continue
			}
			if err != nil && !errors.Is(err, poppy.ErrInsecureURL) {
				t.Errorf("ParseURL(%q): %v does not match ErrInsecureURL", c.raw, err)
			}
			if err == nil && u.Host != c.wantHostPart {
				t.Errorf("ParseURL(%q) host %q", c.raw, u.Host)
			}
		}
	}
}

func TestAgentFetchDocument(t *testing.T) {
	e := newEnv(t, nil, nil)
	c := e.company("example.test")
	var doc string
	for _, api := range c.Document().APIs {
		if api.Type == "openapi" {
			doc = api.URL
		}
	}
	if doc == "" {
		t.Fatal("the fake lists no OpenAPI description")
	}
	b, err := e.agent.FetchDocument(ctx, doc, &poppy.DocumentOptions{Name: "OpenAPI description"})
	if err != nil || !strings.Contains(string(b), "openapi") {
		t.Fatalf("FetchDocument = %.40q, %v", b, err)
	}
	// The caller's copy is its own: changing it changes no later fetch.
	want := string(b)
	for i := range b {
		b[i] = 'x'
	}
	again, err := e.agent.FetchDocument(ctx, doc, nil)
	if err != nil || string(again) != want {
		t.Fatalf("second fetch = %.40q, %v", again, err)
	}
	// The bound holds for a cached document too.
	if _, err := e.agent.FetchDocument(ctx, doc, &poppy.DocumentOptions{MaxBytes: 10}); !errors.Is(err, poppy.ErrResponseTooLarge) {
		t.Fatalf("FetchDocument with MaxBytes 10 = %v, want ErrResponseTooLarge", err)
	}
	if _, err := e.agent.FetchDocument(ctx, "http://api.example.test/openapi.json", nil); !errors.Is(err, poppy.ErrInsecureURL) {
		t.Fatalf("FetchDocument of an http URL = %v", err)
	}
	// No token is ever sent with a document.
	for _, r := range sdkRequests(e.srv, poppytest.EndpointAPI) {
		if r.Header.Get("Authorization") != "" || r.Header.Get("DPoP") != "" {
			t.Fatalf("a document request carried a token: %s %s", r.Method, r.URL)
		}
	}
}

// PA-4.3-27..29, A-40: the Agent's retry policy, with MaxRetryWait.
func TestAgentRetryWait(t *testing.T) {
	e := newEnv(t, nil, &poppy.AgentOptions{MaxRetryWait: 10 * time.Second})
	for _, c := range []struct {
		after   time.Duration
		attempt int
		want    time.Duration
		ok      bool
	}{
		{0, 0, time.Second, true},
		{0, 2, 4 * time.Second, true},
		{0, 3, 0, false},
		{5 * time.Second, 0, 5 * time.Second, true},
		{11 * time.Second, 0, 0, false},
	} {
		if d, ok := e.agent.RetryWait(c.after, c.attempt); d != c.want || ok != c.ok {
			t.Errorf("RetryWait(%v, %d) = %v, %v; want %v, %v", c.after, c.attempt, d, ok, c.want, c.ok)
		}
	}
}

// PA-4.3-22: every token of a Session's ResourceHTTPClient is issued for
// its resource, whatever the URL.
func TestSessionResourceHTTPClient(t *testing.T) {
	e := newEnv(t, nil, nil)
	s := e.session("alice")
	const res = "https://api.example.test/"
	resp, err := s.ResourceHTTPClient(res).Get(e.srv.EndpointURL(poppytest.EndpointAPI) + "/products")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	found := false
	for _, r := range sdkRequests(e.srv, poppytest.EndpointToken) {
		found = found || r.Form.Get("resource") == res
	}
	if !found {
		t.Fatal("no token request named the resource")
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

// Spec 6: TokenOptions.Refused renews a refused token once for every
// caller that saw it refused, and not at all when the Session already
// holds another.
func TestTokenRefusedRenewsOnce(t *testing.T) {
	e := newEnv(t, nil, nil)
	s := e.session("alice")
	old, err := s.Token(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	before := len(sdkRequests(e.srv, poppytest.EndpointToken))
	var wg sync.WaitGroup
	got := make([]*poppy.Token, 8)
	for i := range got {
		wg.Go(func() {
			tok, err := s.Token(ctx, &poppy.TokenOptions{Refused: old})
			if err != nil {
				t.Error(err)
			}
			got[i] = tok
		})
	}
	wg.Wait()
	if n := len(sdkRequests(e.srv, poppytest.EndpointToken)) - before; n != 1 {
		t.Fatalf("%d token requests for one refusal, want 1", n)
	}
	for _, tok := range got {
		if tok == nil || tok.Value() == old.Value() || tok.Value() != got[0].Value() {
			t.Fatal("a caller kept the refused token or got another new one")
		}
	}
	// The refused token is no longer the Session's: nothing is renewed.
	if tok, err := s.Token(ctx, &poppy.TokenOptions{Refused: old}); err != nil || tok.Value() != got[0].Value() {
		t.Fatalf("Token(Refused: an old one) = %v, %v", tok, err)
	}
	if n := len(sdkRequests(e.srv, poppytest.EndpointToken)) - before; n != 1 {
		t.Fatalf("%d token requests, want still 1", n)
	}
}

// PA-4.8-08: Redact takes the Session's tokens, whole or cut, and its
// Account Token out of text.
func TestSessionRedact(t *testing.T) {
	e := newEnv(t, nil, nil)
	s := signedIn(t, e, "")
	tok, err := s.Token(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	bearer, err := s.Token(ctx, &poppy.TokenOptions{Bearer: true, Resource: e.srv.EndpointURL(poppytest.EndpointMCP)})
	if err != nil {
		t.Fatal(err)
	}
	account := storedAccountToken(t, e, "alice")
	v := tok.Value()
	text := "token " + v + ", bearer " + bearer.Value() + ", account " + account + ", cut " + v[:len(v)/2]
	out := s.Redact(ctx, text)
	for _, secret := range []string{v, bearer.Value(), account, v[:len(v)/2]} {
		if strings.Contains(out, secret) {
			t.Fatalf("Redact left a secret in %q", out)
		}
	}
	if !strings.Contains(out, "[redacted]") || !strings.HasPrefix(out, "token ") {
		t.Fatalf("Redact = %q", out)
	}
	if got := s.Redact(ctx, "nothing secret here"); got != "nothing secret here" {
		t.Fatalf("Redact changed plain text: %q", got)
	}
}

// storedAccountToken reads the value of user's default Account Token from
// the keystore (the SDK never hands it out).
func storedAccountToken(t *testing.T, e *env, user string) string {
	t.Helper()
	b, err := e.store.Get(ctx, keystore.Key{Kind: keystore.KindAccountToken, User: user, Issuer: e.srv.Issuer(), ID: poppy.DefaultAccount})
	if err != nil {
		t.Fatal(err)
	}
	var ar struct {
		Token string `json:"refresh_token"`
	}
	if json.Unmarshal(b, &ar) != nil || ar.Token == "" {
		t.Fatalf("no Account Token in the store: %s", b)
	}
	return ar.Token
}
