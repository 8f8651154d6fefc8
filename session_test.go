package poppy_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/poppytest"
)

var ctx = context.Background()

func TestPA_4_2_05_StartRequest(t *testing.T) {
	e := newEnv(t, nil, nil)
	e.session("alice")
	reqs := sdkRequests(e.srv, poppytest.EndpointToken)
	if len(reqs) != 1 {
		t.Fatalf("%d token requests, want 1", len(reqs))
	}
	r := reqs[0]
	// PA-4.2-05
	if ct := r.Header.Get("Content-Type"); ct != "application/x-www-form-urlencoded" {
		t.Errorf("Content-Type %q", ct)
	}
	if r.Form.Get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer" || r.Form.Get("assertion") == "" {
		t.Errorf("grant %q, assertion present %v", r.Form.Get("grant_type"), r.Form.Get("assertion") != "")
	}
	if r.Form.Has("session_id") {
		t.Error("start request carries session_id")
	}
	if !hasHeader(r, "DPoP") {
		t.Error("start request has no DPoP header")
	}
	// PA-4.1-07
	if r.Form.Get("client_id") != testClientID ||
		r.Form.Get("client_assertion_type") != "urn:ietf:params:oauth:client-assertion-type:jwt-bearer" ||
		r.ClientAssertion == nil {
		t.Errorf("client authentication missing: %v", r.Form)
	}
	if r.Status != http.StatusOK {
		t.Fatalf("start status %d %s", r.Status, r.ErrorCode)
	}
}

func TestPA_4_2_06_to_10_SessionAssertionClaims(t *testing.T) {
	e := newEnv(t, nil, nil)
	s := e.session("alice")
	jtis := map[string]bool{}
	for i := 0; i < 50; i++ {
		if _, err := s.Token(ctx, &poppy.TokenOptions{Renew: true}); err != nil {
			t.Fatal(err)
		}
	}
	now := e.srv.Clock().Now().Unix()
	for _, r := range sdkRequests(e.srv, poppytest.EndpointToken) {
		a := r.Assertion
		if a == nil {
			t.Fatal("token request without assertion")
		}
		// PA-4.2-06: the fake verified it against the JWKS (status 200) and iss is the client_id.
		if r.Status != 200 || claim(a.Claims, "iss") != testClientID {
			t.Fatalf("assertion rejected (%d %s) or iss %q", r.Status, r.ErrorCode, claim(a.Claims, "iss"))
		}
		// PA-4.2-07
		if claim(a.Claims, "sub") != s.UserID() {
			t.Errorf("sub %q, want %q", claim(a.Claims, "sub"), s.UserID())
		}
		// PA-4.2-08: aud is a JSON string equal to token_endpoint.
		if !strings.Contains(string(a.RawClaims), `"aud":"`+e.srv.EndpointURL(poppytest.EndpointToken)+`"`) {
			t.Errorf("aud not the token endpoint as a single string: %s", a.RawClaims)
		}
		// PA-4.2-09
		iat, _ := strconv.ParseInt(fmt.Sprint(a.Claims["iat"]), 10, 64)
		exp, err := strconv.ParseInt(fmt.Sprint(a.Claims["exp"]), 10, 64)
		if err != nil || exp-iat <= 0 || exp-iat > 60 || iat < now-5 || iat > now+5 {
			t.Errorf("iat %d exp %d now %d", iat, exp, now)
		}
		// PA-4.2-10
		jti := claim(a.Claims, "jti")
		raw, err := base64.RawURLEncoding.DecodeString(jti)
		if err != nil || len(raw) < 16 {
			t.Errorf("jti %q has fewer than 128 bits", jti)
		}
		if jtis[jti] {
			t.Errorf("jti %q reused", jti)
		}
		jtis[jti] = true
	}
	if len(jtis) != 51 {
		t.Fatalf("%d distinct assertion jti, want 51", len(jtis))
	}
}

func TestPA_4_2_11_TokenResponseRead(t *testing.T) {
	e := newEnv(t, nil, nil)
	s := e.session("alice")
	if !strings.HasPrefix(s.ID(), "ses_") && s.ID() == "" {
		t.Fatalf("session ID %q", s.ID())
	}
	info, ok := e.srv.Sessions().Get(s.ID())
	if !ok {
		t.Fatalf("fake has no Session %q", s.ID())
	}
	// PA-4.2-11
	if s.SignedIn() || len(s.Scopes()) != 0 || info.SignedIn {
		t.Fatalf("signed in %v scopes %v", s.SignedIn(), s.Scopes())
	}
	tok, err := s.Token(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tok.Type != "DPoP" || tok.SessionID != s.ID() || !tok.Expiry.After(e.srv.Clock().Now().Add(59*time.Minute)) {
		t.Fatalf("token %v", tok)
	}
}

// A Session started, or renewed, with the assertion is signed out
// (spec 4.2): a Company that answers signed_in true, with scopes of its
// choosing, is in error, and the Session does not come out signed in.
func TestPA_4_2_11_AssertionAnsweredSignedIn(t *testing.T) {
	signedIn := func(m map[string]any) { m["signed_in"], m["scope"] = true, "poppy:read orders:write" }
	t.Run("start", func(t *testing.T) {
		e, h := hostileEnv(t, nil, nil)
		h.OnJSON(tokenPath, signedIn)
		_, err := e.company("example.test").Session(ctx, "alice", nil)
		// PA-4.2-11
		if !errors.Is(err, poppy.ErrInvalidTokenResponse) {
			t.Fatalf("Session start answered signed_in true: %v, want ErrInvalidTokenResponse", err)
		}
		h.On(tokenPath, nil)
		s := e.session("alice")
		if s.SignedIn() || len(s.Scopes()) != 0 {
			t.Fatalf("after the refused start: signed in %v, scopes %v", s.SignedIn(), s.Scopes())
		}
	})
	t.Run("renewal", func(t *testing.T) {
		e, h := hostileEnv(t, nil, nil)
		s := e.session("alice")
		h.OnJSON(tokenPath, signedIn)
		tok, err := s.Token(ctx, &poppy.TokenOptions{Renew: true})
		// PA-4.2-11
		if !errors.Is(err, poppy.ErrInvalidTokenResponse) || s.SignedIn() || len(s.Scopes()) != 0 {
			t.Fatalf("renewal answered signed_in true: %v, %v; signed in %v, scopes %v", tok, err, s.SignedIn(), s.Scopes())
		}
	})
}

func TestPA_4_2_12_UnexpectedTokenType(t *testing.T) {
	e := newEnv(t, nil, nil)
	e.srv.Tokens().SetType("Bearer")
	_, err := e.company("example.test").Session(ctx, "alice", nil)
	// PA-4.2-12
	if !errors.Is(err, poppy.ErrUnexpectedTokenType) {
		t.Fatalf("err = %v, want ErrUnexpectedTokenType", err)
	}
}

func TestPA_4_2_13_NonPositiveExpiresIn(t *testing.T) {
	e := newEnv(t, nil, nil)
	e.srv.Tokens().SetExpiresIn(0, 1)
	_, err := e.company("example.test").Session(ctx, "alice", nil)
	// PA-4.2-13
	if !errors.Is(err, poppy.ErrInvalidTokenResponse) {
		t.Fatalf("err = %v, want ErrInvalidTokenResponse", err)
	}
}

func TestPA_4_2_14_RenewAfterExpiry(t *testing.T) {
	e := newEnv(t, &poppytest.Options{Tokens: poppytest.TokenPolicy{TTL: time.Hour}}, nil)
	s := e.session("alice")
	if code, body := e.get(s, "/products"); code != 200 {
		t.Fatalf("status %d %s", code, body)
	}
	first := sdkRequests(e.srv, poppytest.EndpointToken)[0]
	e.srv.Clock().Advance(61 * time.Minute)
	if code, body := e.get(s, "/products"); code != 200 {
		t.Fatalf("after expiry: status %d %s", code, body)
	}
	toks := sdkRequests(e.srv, poppytest.EndpointToken)
	if len(toks) != 2 {
		t.Fatalf("%d token requests, want 2", len(toks))
	}
	renew := toks[1]
	// PA-4.2-14: same grant, the session_id, fresh jti.
	if renew.Form.Get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer" || renew.Form.Get("session_id") != s.ID() {
		t.Fatalf("renewal form %v", renew.Form)
	}
	if claim(renew.Assertion.Claims, "jti") == claim(first.Assertion.Claims, "jti") ||
		claim(renew.ClientAssertion.Claims, "jti") == claim(first.ClientAssertion.Claims, "jti") {
		t.Fatal("renewal reused a jti")
	}
	// The renewal came before the second API call.
	api := sdkRequests(e.srv, poppytest.EndpointAPI)
	if renew.Index > api[len(api)-1].Index {
		t.Fatal("API call sent before the renewal")
	}
	// PA-4.2-14: renewed when the token expired, before any request
	// carried it: no request was refused and sent again.
	for _, r := range sdkRequests(e.srv, poppytest.EndpointAPI, poppytest.EndpointToken) {
		if r.Status == http.StatusUnauthorized {
			t.Errorf("%s %s answered 401 %s: the expired token was sent", r.Method, r.URL, r.ErrorCode)
		}
	}
	if len(api) != 2 {
		t.Errorf("%d API requests, want 2", len(api))
	}
}

func TestPA_4_2_16_EndedSessionIsReplaced(t *testing.T) {
	var mu sync.Mutex
	var replaced [][2]string
	e := newEnv(t, nil, &poppy.AgentOptions{OnSessionReplaced: func(o, n string) {
		mu.Lock()
		replaced = append(replaced, [2]string{o, n})
		mu.Unlock()
	}})
	s := e.session("alice")
	old := s.ID()
	e.srv.Sessions().End(old)
	e.srv.Clock().Advance(2 * time.Hour) // the token expires; renewal finds the Session ended
	if code, body := e.get(s, "/products"); code != 200 {
		t.Fatalf("status %d %s", code, body)
	}
	toks := sdkRequests(e.srv, poppytest.EndpointToken)
	last := toks[len(toks)-1]
	// PA-4.2-16: a start without session_id, and the replacement reported.
	if last.Form.Has("session_id") || last.Status != 200 {
		t.Fatalf("last token request %v status %d", last.Form, last.Status)
	}
	if toks[len(toks)-2].ErrorCode != "invalid_session" {
		t.Fatalf("renewal answered %q, want invalid_session", toks[len(toks)-2].ErrorCode)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(replaced) != 1 || replaced[0][0] != old || replaced[0][1] != s.ID() || s.ID() == old {
		t.Fatalf("OnSessionReplaced calls %v, Session now %q", replaced, s.ID())
	}
}

func TestPA_4_2_17_InvalidGrantNoLoop(t *testing.T) {
	e := newEnv(t, nil, nil)
	e.srv.Faults().ForceError(poppytest.EndpointToken, poppytest.Fault{Status: 400, Code: "invalid_grant", Times: 5})
	_, err := e.company("example.test").Session(ctx, "alice", nil)
	if !errors.Is(err, poppy.ErrInvalidGrant) {
		t.Fatalf("err = %v", err)
	}
	var pe *poppy.Error
	if !errors.As(err, &pe) || pe.Status != 400 || pe.Code != "invalid_grant" {
		t.Fatalf("err = %#v", err)
	}
	// PA-4.2-17: exactly one token request.
	if n := len(sdkRequests(e.srv, poppytest.EndpointToken)); n != 1 {
		t.Fatalf("%d token requests, want 1", n)
	}
}

func TestPA_4_1_11_InvalidClient(t *testing.T) {
	e := newEnv(t, &poppytest.Options{Clients: poppytest.ClientOptions{RequireRegistration: true}}, nil)
	_, err := e.company("example.test").Session(ctx, "alice", nil)
	if !errors.Is(err, poppy.ErrInvalidClient) {
		t.Fatalf("err = %v, want ErrInvalidClient", err)
	}
	// PA-4.1-11: not retried.
	if n := len(sdkRequests(e.srv, poppytest.EndpointToken)); n != 1 {
		t.Fatalf("%d token requests, want 1", n)
	}
}

func TestPA_4_2_19_TokenEndpointRateLimited(t *testing.T) {
	e := newEnv(t, nil, nil)
	e.srv.Faults().RateLimit(poppytest.EndpointToken, 1, "7")
	e.session("alice")
	toks := sdkRequests(e.srv, poppytest.EndpointToken)
	if len(toks) != 2 || toks[0].Status != 429 || toks[1].Status != 200 {
		t.Fatalf("token requests: %d", len(toks))
	}
	// PA-4.2-19: at least Retry-After later, by the fake clock.
	if d := toks[1].Time.Sub(toks[0].Time); d < 7*time.Second {
		t.Fatalf("retried after %v, want >= 7s", d)
	}
}

func TestPA_4_2_20_TokenContentsIgnored(t *testing.T) {
	renewals := func(opts *poppytest.Options) []time.Duration {
		e := newEnv(t, opts, nil)
		s := e.session("alice")
		start := e.srv.Clock().Now()
		for i := 0; i < 6; i++ {
			e.get(s, "/products")
			e.srv.Clock().Advance(15 * time.Minute)
		}
		var out []time.Duration
		for _, r := range sdkRequests(e.srv, poppytest.EndpointToken) {
			out = append(out, r.Time.Sub(start).Round(time.Minute))
		}
		return out
	}
	opaque := renewals(nil)
	jwt := renewals(&poppytest.Options{Tokens: poppytest.TokenPolicy{JWT: true}})
	// PA-4.2-20: identical renewal timing, driven by expires_in.
	if fmt.Sprint(opaque) != fmt.Sprint(jwt) || len(opaque) < 2 {
		t.Fatalf("renewals opaque %v, JWT-shaped %v", opaque, jwt)
	}
}

func TestPA_4_2_01_to_04_UserIDs(t *testing.T) {
	store := keystore.NewMemory()
	e1 := newEnv(t, nil, &poppy.AgentOptions{Store: store})
	e2 := newEnv(t, &poppytest.Options{Issuer: "https://auth.other.test"}, &poppy.AgentOptions{Store: store})
	subs1, subs2 := map[string]bool{}, map[string]bool{}
	for i := 0; i < 100; i++ {
		u := fmt.Sprintf("user-%d", i)
		id1, err := e1.agent.UserID(ctx, u, e1.srv.Issuer())
		if err != nil {
			t.Fatal(err)
		}
		id2, _ := e2.agent.UserID(ctx, u, e2.srv.Issuer())
		subs1[id1], subs2[id2] = true, true
	}
	// PA-4.2-03: no User ID at both Companies.
	for s := range subs1 {
		if subs2[s] {
			t.Fatalf("User ID %q used at both issuers", s)
		}
	}
	// PA-4.2-01: the assertion sub differs per issuer.
	s1 := e1.session("dana@example.org")
	s2 := e2.session("dana@example.org")
	sub1 := claim(sdkRequests(e1.srv, poppytest.EndpointToken)[0].Assertion.Claims, "sub")
	sub2 := claim(sdkRequests(e2.srv, poppytest.EndpointToken)[0].Assertion.Claims, "sub")
	if sub1 == sub2 || sub1 != s1.UserID() || sub2 != s2.UserID() {
		t.Fatalf("subs %q %q", sub1, sub2)
	}
	// PA-4.2-04: nothing of the User's email or name, and not derived from it.
	for _, sub := range []string{sub1, sub2} {
		if strings.Contains(strings.ToLower(sub), "dana") || strings.Contains(sub, "example.org") {
			t.Fatalf("sub %q holds personal data", sub)
		}
	}
	e3 := newEnv(t, nil, &poppy.AgentOptions{Store: keystore.NewMemory()})
	if id3, _ := e3.agent.UserID(ctx, "dana@example.org", e3.srv.Issuer()); id3 == sub1 {
		t.Fatal("two fresh stores made the same User ID for the same profile")
	}
	// PA-4.2-04, "even with a keyed hash": the User ID is not a function
	// of the profile and anything the agent keeps. The same agent (same
	// identity and signing keys) with a fresh store makes another one, and
	// so does the same store once the User ID record is gone, for every
	// one of 100 profiles; a hash keyed with the agent's key, or with a
	// secret the store keeps, would make the same ID again.
	same := e1.newAgent(&poppy.AgentOptions{Store: keystore.NewMemory()})
	for i := range 100 {
		u := fmt.Sprintf("user-%d@example.org", i)
		first, err := e1.agent.UserID(ctx, u, e1.srv.Issuer())
		if err != nil {
			t.Fatal(err)
		}
		if other, _ := same.UserID(ctx, u, e1.srv.Issuer()); other == first {
			t.Fatalf("the same agent with a fresh store made User ID %q again for %s", first, u)
		}
		key := keystore.Key{Kind: keystore.KindUserID, User: u, Issuer: e1.srv.Issuer()}
		if err := store.Update(ctx, key, func([]byte) ([]byte, error) { return nil, nil }); err != nil {
			t.Fatal(err)
		}
		again, err := e1.agent.UserID(ctx, u, e1.srv.Issuer())
		if err != nil {
			t.Fatal(err)
		}
		if again == first {
			t.Fatalf("User ID %q made again for %s after its record was deleted: derived, not random", first, u)
		}
		if strings.Contains(again, "user-") || strings.Contains(again, "example.org") {
			t.Fatalf("User ID %q holds the profile %s", again, u)
		}
	}
	// PA-4.2-02: stable across a rebuilt agent sharing the store.
	a2 := e1.newAgent(&poppy.AgentOptions{Store: store})
	c, err := a2.Company(ctx, "example.test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Session(ctx, "dana@example.org", &poppy.SessionOptions{Name: "second"}); err != nil {
		t.Fatal(err)
	}
	toks := sdkRequests(e1.srv, poppytest.EndpointToken)
	if got := claim(toks[len(toks)-1].Assertion.Claims, "sub"); got != sub1 {
		t.Fatalf("rebuilt agent used sub %q, want %q", got, sub1)
	}
}

func TestPA_4_01_ConcurrentSessions(t *testing.T) {
	e := newEnv(t, nil, nil)
	c := e.company("example.test")
	var wg sync.WaitGroup
	ids := make([]string, 3)
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := c.Session(ctx, "alice", &poppy.SessionOptions{Name: fmt.Sprint("task-", i)})
			if err != nil {
				t.Error(err)
				return
			}
			if code, body := e.get(s, "/products"); code != 200 {
				t.Errorf("status %d %s", code, body)
			}
			ids[i] = s.ID()
		}()
	}
	wg.Wait()
	// PA-4-01: three Sessions, and no request carried another's token.
	if ids[0] == ids[1] || ids[1] == ids[2] || ids[0] == ids[2] {
		t.Fatalf("session IDs %v", ids)
	}
	for _, r := range sdkRequests(e.srv, poppytest.EndpointAPI) {
		info, ok := e.srv.Tokens().Get(r.AccessToken)
		if !ok || r.SessionID != info.SessionID {
			t.Fatalf("request carried an unknown or foreign token")
		}
	}
}

// One expired token and 1,000 goroutines: exactly one token request.
func TestSingleRenewalForConcurrentCallers(t *testing.T) {
	e := newEnv(t, nil, nil)
	s := e.session("alice")
	e.srv.Clock().Advance(2 * time.Hour)
	before := len(sdkRequests(e.srv, poppytest.EndpointToken))
	var wg sync.WaitGroup
	for range 1000 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Token(ctx, nil); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := len(sdkRequests(e.srv, poppytest.EndpointToken)) - before; n != 1 {
		t.Fatalf("%d token requests for 1000 concurrent callers, want 1", n)
	}
}

// A second process sharing the store resumes the Session without a token
// request while the token is valid.
func TestSessionResumedFromStore(t *testing.T) {
	e := newEnv(t, nil, nil)
	s := e.session("alice")
	a2 := e.newAgent(nil)
	c, err := a2.Company(ctx, "example.test")
	if err != nil {
		t.Fatal(err)
	}
	s2, err := c.Session(ctx, "alice", nil)
	if err != nil {
		t.Fatal(err)
	}
	if s2.ID() != s.ID() {
		t.Fatalf("resumed %q, want %q", s2.ID(), s.ID())
	}
	if n := len(sdkRequests(e.srv, poppytest.EndpointToken)); n != 1 {
		t.Fatalf("%d token requests, want 1", n)
	}
	if code, body := e.get(s2, "/products"); code != 200 {
		t.Fatalf("status %d %s", code, body)
	}
}

func TestTokenRedactsItself(t *testing.T) {
	e := newEnv(t, nil, nil)
	s := e.session("alice")
	tok, err := s.Token(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x"} {
		if out := fmt.Sprintf(f, tok); strings.Contains(out, tok.Value()) {
			t.Fatalf("%s prints the token: %s", f, out)
		}
	}
	if out := fmt.Sprintf("%v %#v", e.key, e.key); strings.Contains(out, `"d"`) {
		t.Fatalf("signing key prints private part: %s", out)
	}
}

// Nothing the SDK logs at debug level, nor any error it returns, holds a
// token, proof or assertion the fake saw.
func TestNoSecretsInLogsOrErrors(t *testing.T) {
	var logs strings.Builder
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e := newEnv(t, &poppytest.Options{Tokens: poppytest.TokenPolicy{RequireNonce: true}}, &poppy.AgentOptions{Logger: logger})
	s := e.session("alice")
	mixedWorkload(t, e, s)
	var errs []string
	e.srv.Faults().ForceError(poppytest.EndpointAPI, poppytest.Fault{Status: 401, Code: "invalid_dpop_proof"})
	_, err := s.HTTPClient().Get(e.srv.EndpointURL(poppytest.EndpointAPI) + "/products")
	errs = append(errs, fmt.Sprint(err))
	e.srv.Faults().RateLimit(poppytest.EndpointAPI, 10, "")
	_, err = s.HTTPClient().Get(e.srv.EndpointURL(poppytest.EndpointAPI) + "/products")
	errs = append(errs, fmt.Sprint(err))
	e.srv.Faults().ForceError(poppytest.EndpointToken, poppytest.Fault{Status: 400, Code: "invalid_grant"})
	_, err = s.Token(ctx, &poppy.TokenOptions{Renew: true})
	errs = append(errs, fmt.Sprint(err))
	mu.Lock()
	all := logs.String() + strings.Join(errs, "\n")
	mu.Unlock()
	if !strings.Contains(logs.String(), "poppy:") {
		t.Fatal("nothing was logged: the test would prove nothing")
	}
	var secrets []string
	for _, r := range e.srv.Requests() {
		if r.AccessToken != "" {
			secrets = append(secrets, r.AccessToken)
		}
		if p := r.Header.Get("DPoP"); p != "" {
			secrets = append(secrets, p)
		}
		for _, f := range []string{"assertion", "client_assertion"} {
			if v := r.Form.Get(f); v != "" {
				secrets = append(secrets, v)
			}
		}
	}
	if len(secrets) < 50 {
		t.Fatalf("only %d secrets collected", len(secrets))
	}
	for _, sec := range secrets {
		if strings.Contains(all, sec) {
			t.Fatalf("a secret reached a log line or error string")
		}
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *strings.Builder
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
