package signin_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/poppytest"
	"github.com/poppyproto/poppy/signin"
)

const password = "correct horse"

func TestPA_4_7_MediatedSignIn(t *testing.T) {
	var logs strings.Builder
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e := newEnv(t, &poppytest.Options{
		SignIn: poppytest.SignInPolicy{MediatedFields: []poppytest.CredentialField{
			{Name: "email", Label: "Email"}, {Name: "password", Label: "Password", Secret: true}, {Name: "pin", Label: "PIN", Secret: true},
		}},
	}, &poppy.AgentOptions{Logger: logger})
	sess := e.Session("alice")
	b := e.browser()
	b.values = map[string]string{"email": "user@example.test", "password": password, "pin": "4071"}
	res, err := signin.Mediated(ctx, sess, scopes("poppy:read"), b)
	if err != nil {
		t.Fatal(err)
	}
	m := e.Requests(poppytest.EndpointSignIn)
	if len(m) != 1 {
		t.Fatalf("%d mediated requests", len(m))
	}
	r := m[0]
	// PA-4.7-02: POST JSON with the Session Token and a proof.
	if r.Method != "POST" || r.Header.Get("Content-Type") != "application/json" || r.AuthScheme != "DPoP" || r.Proof == nil ||
		r.URL != e.Srv.EndpointURL(poppytest.EndpointSignIn) {
		t.Fatalf("%s %s %q %q", r.Method, r.URL, r.Header.Get("Content-Type"), r.AuthScheme)
	}
	var body struct {
		Scope       string            `json:"scope"`
		Credentials map[string]string `json:"credentials"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil {
		t.Fatal(err)
	}
	// PA-4.7-01: exactly the listed fields, under their names.
	var keys []string
	for k := range body.Credentials {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if strings.Join(keys, ",") != "email,password,pin" || body.Scope != "poppy:read" {
		t.Fatalf("body keys %v scope %q", keys, body.Scope)
	}
	if p := b.creds[0]; len(p.Fields) != 3 || p.Fields[1].Label != "Password" || !p.Fields[1].Secret {
		t.Fatalf("prompt fields %+v", p.Fields)
	}
	// PA-4.7-07
	if !sess.SignedIn() || res.Account != poppy.DefaultAccount {
		t.Fatalf("signed in %v", sess.SignedIn())
	}
	if _, err := sess.AccountToken(ctx, ""); err != nil {
		t.Fatal(err)
	}
	// PA-4.7-03, PA-4.7-04: neither secret appears in logs or formatted values.
	creds := signin.NewCredentials(b.creds[0], b.values)
	out := fmt.Sprintf("%v %+v %#v %s", creds, creds, creds, creds) + logs.String()
	for _, secret := range []string{password, "4071"} {
		if strings.Contains(out, secret) {
			t.Fatalf("secret %q shown or logged", secret)
		}
	}
	if !strings.Contains(fmt.Sprint(creds), "user@example.test") {
		t.Fatal("a non-secret field is hidden: the test would prove nothing")
	}
	// PA-4.7-05, PA-4.7-06: the fake scans every request for the values and
	// records a violation for any outside this POST; the test fails at
	// cleanup if it did.
	for _, v := range e.Srv.Violations() {
		t.Errorf("violation %v", v)
	}
}

func TestPA_4_7_08_to_10_OneTimeCode(t *testing.T) {
	e := newEnv(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{RequireCode: true}}, nil)
	sess := e.Session("alice")
	b := e.browser()
	wrong := true
	b.code = func() string {
		if wrong {
			wrong = false
			return "000000"
		}
		return e.Srv.SignIn().LastCode()
	}
	if _, err := signin.Mediated(ctx, sess, scopes("poppy:read"), b); err != nil {
		t.Fatal(err)
	}
	m := e.Requests(poppytest.EndpointSignIn)
	// PA-4.7-10: the wrong code, then the right one: two submissions.
	if len(m) != 3 || len(b.otps) != 2 || !b.otps[1].Retry || b.otps[0].SentTo == "" {
		t.Fatalf("%d requests, %d prompts", len(m), len(b.otps))
	}
	for _, r := range m[1:] {
		// PA-4.7-08: to {endpoint}/{sign_in_id}.
		if !strings.HasPrefix(r.URL, e.Srv.EndpointURL(poppytest.EndpointSignIn)+"/") {
			t.Fatalf("code sent to %s", r.URL)
		}
		// PA-4.7-09: only the code, with a token of the same Session.
		var body map[string]any
		if err := json.Unmarshal(r.Body, &body); err != nil || len(body) != 1 || body["code"] == nil {
			t.Fatalf("code body %s", r.Body)
		}
		if r.SessionID != m[0].SessionID {
			t.Fatal("code sent with another Session's token")
		}
		if strings.Contains(string(r.Body), password) {
			t.Fatal("credentials sent again")
		}
	}
	if !sess.SignedIn() {
		t.Fatal("not signed in")
	}
}

func TestPA_4_7_11_Failed(t *testing.T) {
	e := newEnv(t, nil, nil)
	sess := e.Session("alice")
	b := e.browser()
	if _, err := signin.Mediated(ctx, sess, scopes("poppy:read"), b); err != nil {
		t.Fatal(err)
	}
	old, _ := sess.AccountToken(ctx, "")
	b.values = map[string]string{"email": "user@example.test", "password": "wrong"}
	sess2, err := e.Company("example.test").Session(ctx, "bob", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = signin.Mediated(ctx, sess2, scopes("poppy:read"), b)
	// PA-4.7-11
	if !errors.Is(err, signin.ErrSignInFailed) {
		t.Fatalf("err = %v", err)
	}
	if strings.Contains(err.Error(), "wrong") {
		t.Fatal("the password is in the error")
	}
	if now, err := sess.AccountToken(ctx, ""); err != nil || now.Expiry != old.Expiry {
		t.Fatal("the existing Account Token changed")
	}
}

func TestPA_4_7_12_Expired(t *testing.T) {
	e := newEnv(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{RequireCode: true}}, nil)
	sess := e.Session("alice")
	b := e.browser()
	b.code = func() string {
		e.Srv.Clock().Advance(10 * 60e9) // the User takes too long
		return e.Srv.SignIn().LastCode()
	}
	_, err := signin.Mediated(ctx, sess, scopes("poppy:read"), b)
	// PA-4.7-12
	if !errors.Is(err, signin.ErrSignInExpired) {
		t.Fatalf("err = %v", err)
	}
	// Starting again posts the credentials afresh.
	b.code = nil
	if _, err := signin.Mediated(ctx, sess, scopes("poppy:read"), b); err != nil {
		t.Fatal(err)
	}
	posts := 0
	for _, r := range e.Requests(poppytest.EndpointSignIn) {
		if r.URL == e.Srv.EndpointURL(poppytest.EndpointSignIn) {
			posts++
		}
	}
	if posts != 2 {
		t.Fatalf("%d credential posts, want 2", posts)
	}
}

// PA-4.4-07: invalid_scope for a listed scope is typed, and the existing
// Account Token is still used afterwards.
func TestPA_4_4_07_InvalidScopeKeepsTokens(t *testing.T) {
	e := newEnv(t, nil, nil)
	sess := e.Session("alice")
	if _, err := signin.Mediated(ctx, sess, scopes("poppy:read"), e.browser()); err != nil {
		t.Fatal(err)
	}
	s2, _ := e.Company("example.test").Session(ctx, "alice", &poppy.SessionOptions{Name: "t2"})
	e.Srv.Faults().ForceError(poppytest.EndpointAuthorize, poppytest.Fault{Status: 400, Code: "invalid_scope"})
	_, err := e.direct.SignIn(ctx, s2, scopes("addresses"), e.browser())
	if !errors.Is(err, poppy.ErrInvalidScope) {
		t.Fatalf("err = %v", err)
	}
	if _, err := sess.Token(ctx, &poppy.TokenOptions{Renew: true}); err != nil {
		t.Fatal(err)
	}
	if r := grants(e, "refresh_token"); len(r) == 0 || r[len(r)-1].Status != 200 {
		t.Fatal("the old Account Token was not used")
	}
}
