package poppy_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/poppytest"
	"github.com/poppyproto/poppy/signin"
)

// user plays the User for Mediated Sign-In with the fake's default account.
var user = signin.PrompterFuncs{
	CredentialsFunc: func(_ context.Context, p *signin.CredentialsPrompt) (*signin.Credentials, error) {
		return signin.NewCredentials(p, map[string]string{"email": "user@example.test", "password": "correct horse"}), nil
	},
}

// signedIn returns a Session of alice signed in with Mediated Sign-In.
func signedIn(t *testing.T, e *env, name string) *poppy.Session {
	t.Helper()
	s, err := e.company("example.test").Session(ctx, "alice", &poppy.SessionOptions{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := signin.Mediated(ctx, s, &poppy.SignInOptions{Scopes: []string{"poppy:read"}}, user); err != nil {
		t.Fatal(err)
	}
	return s
}

func grantsOf(e *env, grant string) []poppytest.Request {
	var out []poppytest.Request
	for _, r := range sdkRequests(e.srv, poppytest.EndpointToken) {
		if r.Form.Get("grant_type") == grant {
			out = append(out, r)
		}
	}
	return out
}

func TestPA_4_8_01_02_UseAccountToken(t *testing.T) {
	e := newEnv(t, nil, nil)
	signedIn(t, e, "first")
	s2, err := e.company("example.test").Session(ctx, "alice", &poppy.SessionOptions{Name: "second"})
	if err != nil {
		t.Fatal(err)
	}
	res, ok, err := s2.UseAccountToken(ctx, &poppy.SignInOptions{Scopes: []string{"poppy:read"}})
	if err != nil || !ok || !res.Reused {
		t.Fatalf("UseAccountToken: %v %v", ok, err)
	}
	rs := grantsOf(e, "refresh_token")
	if len(rs) != 1 {
		t.Fatalf("%d refresh grants", len(rs))
	}
	r := rs[0]
	// PA-4.8-01
	if r.Form.Get("refresh_token") == "" || r.ClientAssertion == nil || r.Proof == nil || r.Form.Get("client_assertion_type") == "" {
		t.Fatalf("refresh form %v", r.Form)
	}
	// PA-4.8-02: with session_id, that Session is signed in.
	if r.Form.Get("session_id") != s2.ID() || !s2.SignedIn() {
		t.Fatalf("session_id %q, Session %q", r.Form.Get("session_id"), s2.ID())
	}
	if info, _ := e.srv.Sessions().Get(s2.ID()); !info.SignedIn {
		t.Fatal("the fake sees it signed out")
	}
}

func TestPA_4_2_15_SignedInRenewal(t *testing.T) {
	e := newEnv(t, nil, nil)
	s := signedIn(t, e, "")
	before := len(grantsOf(e, "urn:ietf:params:oauth:grant-type:jwt-bearer"))
	e.srv.Clock().Advance(2 * time.Hour)
	if code, body := e.get(s, "/orders"); code != 200 {
		t.Fatalf("status %d %s", code, body)
	}
	// PA-4.2-15: the Account Token renews it, not the assertion.
	rs := grantsOf(e, "refresh_token")
	if len(rs) != 1 || rs[0].Form.Get("session_id") != s.ID() {
		t.Fatalf("%d refresh grants", len(rs))
	}
	if n := len(grantsOf(e, "urn:ietf:params:oauth:grant-type:jwt-bearer")); n != before {
		t.Fatal("a signed-in Session was renewed with the assertion")
	}
}

func TestPA_4_8_03_FewerScopes(t *testing.T) {
	e := newEnv(t, nil, nil)
	s := signedIn(t, e, "")
	tok, err := s.Token(ctx, &poppy.TokenOptions{Scopes: []string{"poppy:read"}})
	if err != nil {
		t.Fatal(err)
	}
	rs := grantsOf(e, "refresh_token")
	// PA-4.8-03
	if len(rs) != 1 || rs[0].Form.Get("scope") != "poppy:read" || strings.Join(tok.Scopes, " ") != "poppy:read" {
		t.Fatalf("refresh %v, token scopes %v", rs, tok.Scopes)
	}
}

func TestPA_4_8_04_05_Rotation(t *testing.T) {
	e := newEnv(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{RotateAccountTokens: true}}, nil)
	signedIn(t, e, "")
	c := e.company("example.test")
	var sessions []*poppy.Session
	for i := range 10 {
		s, err := c.Session(ctx, "alice", &poppy.SessionOptions{Name: fmt.Sprint("task-", i)})
		if err != nil {
			t.Fatal(err)
		}
		sessions = append(sessions, s)
	}
	// PA-4.8-05: ten Sessions sign in with the one rotating Account Token
	// at once; refreshes are serialised, so none sends a rotated-away token.
	var wg sync.WaitGroup
	for _, s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, ok, err := s.UseAccountToken(ctx, nil); err != nil || !ok {
				t.Errorf("UseAccountToken: %v %v", ok, err)
			}
		}()
	}
	wg.Wait()
	rs := grantsOf(e, "refresh_token")
	if len(rs) != 10 {
		t.Fatalf("%d refresh grants", len(rs))
	}
	// PA-4.8-04: each refresh sends the token the previous one rotated to.
	for i, r := range rs {
		if r.Status != 200 || r.ErrorCode == "invalid_grant" {
			t.Fatalf("refresh %d answered %d %s", i, r.Status, r.ErrorCode)
		}
		if _, ok := e.srv.Tokens().Account(r.Form.Get("refresh_token")); !ok {
			t.Fatalf("refresh %d sent an unknown token", i)
		}
	}
	seen := map[string]bool{}
	for _, r := range rs {
		if seen[r.Form.Get("refresh_token")] {
			t.Fatal("an Account Token was sent twice under rotation")
		}
		seen[r.Form.Get("refresh_token")] = true
	}
	// The store holds the latest: the next use sends the value the Company
	// says is current.
	last, _ := e.srv.Tokens().Account(rs[len(rs)-1].Form.Get("refresh_token"))
	s, _ := c.Session(ctx, "alice", &poppy.SessionOptions{Name: "after"})
	if _, ok, err := s.UseAccountToken(ctx, nil); !ok || err != nil {
		t.Fatalf("UseAccountToken: %v %v", ok, err)
	}
	rs = grantsOf(e, "refresh_token")
	if got := rs[len(rs)-1].Form.Get("refresh_token"); got != last.Current || rs[len(rs)-1].Status != 200 {
		t.Fatal("the rotated Account Token was not the one kept")
	}
}

func TestPA_4_8_06_RevokedAccountToken(t *testing.T) {
	e := newEnv(t, nil, nil)
	s := signedIn(t, e, "")
	// Revoke it at the Company, then let the Session Token expire.
	e.srv.Sessions().Disconnect("acct_1")
	e.srv.Clock().Advance(2 * time.Hour)
	_, err := doGet(s, e.srv.EndpointURL(poppytest.EndpointAPI)+"/orders")
	// PA-4.8-06: the refresh gets invalid_grant, the Account Token is
	// deleted, the Session renews signed out, and the account call needs a
	// sign-in.
	if !errors.Is(err, poppy.ErrSignInRequired) {
		t.Fatalf("err = %v, want ErrSignInRequired", err)
	}
	var pe *poppy.Error
	if !errors.As(err, &pe) || len(pe.SignInTypes) == 0 {
		t.Fatalf("no eligible sign-in types in %v", err)
	}
	if _, err := s.AccountToken(ctx, ""); !errors.Is(err, poppy.ErrNoAccountToken) {
		t.Fatalf("Account Token still stored: %v", err)
	}
	ig := grantsOf(e, "refresh_token")
	if ig[len(ig)-1].ErrorCode != "invalid_grant" {
		t.Fatalf("last refresh %s", ig[len(ig)-1].ErrorCode)
	}
	jb := grantsOf(e, "urn:ietf:params:oauth:grant-type:jwt-bearer")
	if last := jb[len(jb)-1]; last.Form.Get("session_id") != s.ID() || last.Status != 200 {
		t.Fatal("the Session did not carry on signed out")
	}
	if s.SignedIn() {
		t.Fatal("still signed in")
	}
	if code, _ := e.get(s, "/products"); code != 200 {
		t.Fatal("signed-out use fails")
	}
}

// PA-4.9-06: a disconnect is noticed through sign_in_required, then the
// Account Token's invalid_grant, and the Session carries on signed out.
func TestPA_4_9_06_Disconnect(t *testing.T) {
	e := newEnv(t, nil, nil)
	s := signedIn(t, e, "")
	e.srv.Sessions().Disconnect("acct_1")
	_, err := doGet(s, e.srv.EndpointURL(poppytest.EndpointAPI)+"/orders")
	if !errors.Is(err, poppy.ErrSignInRequired) {
		t.Fatalf("err = %v", err)
	}
	if _, err := s.AccountToken(ctx, ""); !errors.Is(err, poppy.ErrNoAccountToken) {
		t.Fatal("Account Token kept after disconnect")
	}
	if s.SignedIn() {
		t.Fatal("the Session still says it is signed in")
	}
	if code, _ := e.get(s, "/products"); code != 200 {
		t.Fatal("the Session does not continue signed out")
	}
}

func TestPA_4_9_01_02_SignOut(t *testing.T) {
	e := newEnv(t, nil, nil)
	s := signedIn(t, e, "")
	old, _ := s.Token(ctx, nil)
	if err := s.SignOut(ctx, ""); err != nil {
		t.Fatal(err)
	}
	rv := sdkRequests(e.srv, poppytest.EndpointRevoke)
	if len(rv) != 1 {
		t.Fatalf("%d revocations", len(rv))
	}
	// PA-4.9-01, PA-4.1-08: token, hint and client authentication; no proof.
	f := rv[0].Form
	if f.Get("token") == "" || f.Get("token_type_hint") != "refresh_token" || f.Get("client_id") == "" || rv[0].ClientAssertion == nil || rv[0].Proof != nil {
		t.Fatalf("revocation form %v", f)
	}
	if _, err := s.AccountToken(ctx, ""); !errors.Is(err, poppy.ErrNoAccountToken) {
		t.Fatal("Account Token kept")
	}
	if code, body := e.get(s, "/products"); code != 200 {
		t.Fatalf("status %d %s", code, body)
	}
	// PA-4.9-02: the next call is preceded by a jwt-bearer renewal of the
	// same Session and carries a signed-out token.
	jb := grantsOf(e, "urn:ietf:params:oauth:grant-type:jwt-bearer")
	if last := jb[len(jb)-1]; last.Form.Get("session_id") != s.ID() || last.Index < rv[0].Index {
		t.Fatal("no signed-out renewal after sign-out")
	}
	api := sdkRequests(e.srv, poppytest.EndpointAPI)
	last := api[len(api)-1]
	if info, _ := e.srv.Tokens().Get(last.AccessToken); info.SignedIn || last.AccessToken == old.Value() {
		t.Fatal("a signed-in token was used after sign-out")
	}
}

func TestPA_4_9_03_SessionsEndedOnSignOut(t *testing.T) {
	var replaced []string
	e := newEnv(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{EndSessionsOnSignOut: true}}, &poppy.AgentOptions{OnSessionReplaced: func(o, n string) { replaced = append(replaced, o, n) }})
	s := signedIn(t, e, "")
	old := s.ID()
	if err := s.SignOut(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if code, body := e.get(s, "/products"); code != 200 {
		t.Fatalf("status %d %s", code, body)
	}
	// PA-4.9-03
	jb := grantsOf(e, "urn:ietf:params:oauth:grant-type:jwt-bearer")
	if last := jb[len(jb)-1]; last.Form.Has("session_id") || s.ID() == old || len(replaced) != 2 {
		t.Fatalf("no new Session: %v", replaced)
	}
}

func TestPA_4_9_04_RevocationFails(t *testing.T) {
	e := newEnv(t, nil, nil)
	s := signedIn(t, e, "")
	e.srv.Faults().ForceError(poppytest.EndpointRevoke, poppytest.Fault{Status: 503, Code: "temporarily_unavailable"})
	err := s.SignOut(ctx, "")
	// PA-4.9-04
	if !errors.Is(err, poppy.ErrRevocationFailed) {
		t.Fatalf("err = %v", err)
	}
	if _, err := s.AccountToken(ctx, ""); !errors.Is(err, poppy.ErrNoAccountToken) {
		t.Fatal("Account Token kept after a failed revocation")
	}
}

func TestPA_4_9_05_CloseKeepsAccountToken(t *testing.T) {
	e := newEnv(t, nil, nil)
	s := signedIn(t, e, "")
	s.Close()
	// PA-4.9-05: nothing revoked; a new Session signs in with the token.
	if n := len(sdkRequests(e.srv, poppytest.EndpointRevoke)); n != 0 {
		t.Fatal("Close revoked")
	}
	s2, err := e.company("example.test").Session(ctx, "alice", &poppy.SessionOptions{Name: "next"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s2.UseAccountToken(ctx, nil); !ok || err != nil {
		t.Fatalf("UseAccountToken: %v %v", ok, err)
	}
}

func TestPA_4_2_18_AccountMismatch(t *testing.T) {
	var replaced []string
	e := newEnv(t, nil, &poppy.AgentOptions{OnSessionReplaced: func(o, n string) { replaced = append(replaced, o, n) }})
	s := signedIn(t, e, "")
	old := s.ID()
	e.srv.Faults().ForceError(poppytest.EndpointToken, poppytest.Fault{Status: 400, Code: "account_mismatch"})
	if _, err := s.Token(ctx, &poppy.TokenOptions{Renew: true}); err != nil {
		t.Fatal(err)
	}
	rs := grantsOf(e, "refresh_token")
	// PA-4.2-18: a refresh without session_id, a new signed-in Session.
	if n := len(rs); n < 2 || rs[n-2].ErrorCode != "account_mismatch" || rs[n-1].Form.Has("session_id") || rs[n-1].Status != 200 {
		t.Fatalf("refreshes: %d", len(rs))
	}
	if s.ID() == old || !s.SignedIn() || len(replaced) != 2 {
		t.Fatalf("Session %q (was %q), replaced %v", s.ID(), old, replaced)
	}
}

func TestPA_4_4_12_AccountTokenExpiry(t *testing.T) {
	e := newEnv(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{AccountTokenTTL: 100 * time.Second}}, nil)
	s := signedIn(t, e, "")
	e.srv.Clock().Advance(101 * time.Second)
	s2, _ := e.company("example.test").Session(ctx, "alice", &poppy.SessionOptions{Name: "later"})
	_, ok, err := s2.UseAccountToken(ctx, nil)
	// PA-4.4-12: past refresh_token_expires_in it is not used at all.
	if ok || err != nil {
		t.Fatalf("UseAccountToken: %v %v", ok, err)
	}
	if n := len(grantsOf(e, "refresh_token")); n != 0 {
		t.Fatalf("%d refresh grants with an expired Account Token", n)
	}
	_ = s
}

func TestPA_4_4_13_AccountsKeptApart(t *testing.T) {
	e := newEnv(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{Accounts: []poppytest.Account{
		{ID: "personal", Credentials: map[string]string{"email": "p@example.test", "password": "pw1"}},
		{ID: "business", Credentials: map[string]string{"email": "b@example.test", "password": "pw2"}},
	}}}, nil)
	c := e.company("example.test")
	login := func(name, email, pw string) *poppy.Session {
		s, _ := c.Session(ctx, "alice", &poppy.SessionOptions{Name: name})
		u := signin.PrompterFuncs{CredentialsFunc: func(_ context.Context, p *signin.CredentialsPrompt) (*signin.Credentials, error) {
			return signin.NewCredentials(p, map[string]string{"email": email, "password": pw}), nil
		}}
		if _, err := signin.Mediated(ctx, s, &poppy.SignInOptions{Scopes: []string{"poppy:read"}, Account: name}, u); err != nil {
			t.Fatal(err)
		}
		return s
	}
	p := login("personal", "p@example.test", "pw1")
	b := login("business", "b@example.test", "pw2")
	// PA-4.4-13: two Account Tokens, and one account's token is never sent
	// with the other account's Session.
	pt, err1 := p.AccountToken(ctx, "personal")
	bt, err2 := b.AccountToken(ctx, "business")
	if err1 != nil || err2 != nil || pt.Account == bt.Account {
		t.Fatal("two accounts, not two Account Tokens")
	}
	if _, _, err := p.UseAccountToken(ctx, &poppy.SignInOptions{Account: "business"}); !errors.Is(err, poppy.ErrAccountMismatch) {
		t.Fatalf("err = %v", err)
	}
	e.srv.Clock().Advance(2 * time.Hour)
	e.get(p, "/orders")
	e.get(b, "/orders")
	for _, r := range grantsOf(e, "refresh_token") {
		info, _ := e.srv.Tokens().Account(r.Form.Get("refresh_token"))
		si, _ := e.srv.Sessions().Get(r.Form.Get("session_id"))
		if si.Account != "" && si.Account != info.Account {
			t.Fatal("an Account Token was sent with another account's Session")
		}
	}
}

func TestPA_4_4_14_StaleTokenInSharedSession(t *testing.T) {
	e := newEnv(t, nil, nil)
	// Two processes (two agents on one store) share the Session.
	s1 := e.session("alice")
	a2 := e.newAgent(nil)
	c2, _ := a2.Company(ctx, "example.test")
	s2, err := c2.Session(ctx, "alice", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := signin.Mediated(ctx, s1, &poppy.SignInOptions{Scopes: []string{"poppy:read"}}, user); err != nil {
		t.Fatal(err)
	}
	// s2 still holds the signed-out token: 403, then the signed-in token
	// the other task stored, and a 200 retry; no second sign-in.
	if code, body := e.get(s2, "/orders"); code != 200 {
		t.Fatalf("status %d %s", code, body)
	}
	api := sdkRequests(e.srv, poppytest.EndpointAPI)
	// PA-4.4-14
	if len(api) != 2 || api[0].ErrorCode != "sign_in_required" || api[1].Status != 200 {
		t.Fatalf("%d API requests", len(api))
	}
	if n := len(sdkRequests(e.srv, poppytest.EndpointSignIn)); n != 1 {
		t.Fatalf("%d sign-ins", n)
	}
}

func TestPA_4_4_15_ExistingAccountTokenFirst(t *testing.T) {
	e := newEnv(t, nil, nil)
	signedIn(t, e, "")
	s2, _ := e.company("example.test").Session(ctx, "alice", &poppy.SessionOptions{Name: "read-task"})
	res, err := signin.Device(ctx, s2, &poppy.SignInOptions{Scopes: []string{"poppy:read"}}, signin.PrompterFuncs{})
	if err != nil || !res.Reused {
		t.Fatalf("Device: %+v %v", res, err)
	}
	// PA-4.4-15: a refresh grant, no device or authorization request.
	if n := len(sdkRequests(e.srv, poppytest.EndpointDevice, poppytest.EndpointAuthorize, poppytest.EndpointSignIn)); n != 1 {
		t.Fatalf("%d sign-in requests, want only the first Mediated one", n)
	}
	if len(grantsOf(e, "refresh_token")) != 1 {
		t.Fatal("no refresh grant")
	}
}

func TestPA_4_4_08_09_MoreScopes(t *testing.T) {
	e := newEnv(t, nil, nil)
	s := signedIn(t, e, "") // poppy:read only
	before, _ := s.AccountToken(ctx, "")
	// The write task: the Account Token doesn't cover it, so a sign-in
	// through a type listing both scopes, asking for all the task needs.
	_, err := signin.Mediated(ctx, s, &poppy.SignInOptions{Scopes: []string{"poppy:read", "poppy:write"}}, user)
	if !errors.Is(err, signin.ErrSignInTypeUnavailable) {
		t.Fatalf("mediated (read only) for write: %v", err)
	}
	var shown *signin.CodePrompt
	_, err = signin.Device(ctx, s, &poppy.SignInOptions{Scopes: []string{"poppy:read", "poppy:write"}}, signin.PrompterFuncs{
		ShowCodeFunc: func(ctx context.Context, p *signin.CodePrompt) error {
			shown = p
			_, err := e.srv.Browse(ctx, p.VerificationURIComplete)
			return err
		}})
	if err != nil {
		t.Fatal(err)
	}
	// PA-4.4-08
	dev := sdkRequests(e.srv, poppytest.EndpointDevice)
	if len(dev) != 1 || dev[0].Form.Get("scope") != "poppy:read poppy:write" || shown == nil {
		t.Fatal("no device sign-in for read and write")
	}
	// PA-4.4-09: the replaced Account Token is revoked; only the new one is kept.
	rv := sdkRequests(e.srv, poppytest.EndpointRevoke)
	after, _ := s.AccountToken(ctx, "")
	if len(rv) != 1 || strings.Join(after.Scopes, " ") != "poppy:read poppy:write" || strings.Join(before.Scopes, " ") != "poppy:read" {
		t.Fatalf("%d revocations; scopes now %v", len(rv), after.Scopes)
	}
	if info, ok := e.srv.Tokens().Account(rv[0].Form.Get("token")); !ok || !info.Revoked {
		t.Fatal("the old Account Token was not revoked")
	}
}

func TestPA_4_8_07_10_11_AccountTokenSecret(t *testing.T) {
	var logs strings.Builder
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e := newEnv(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{RotateAccountTokens: true}}, &poppy.AgentOptions{Logger: logger})
	s := signedIn(t, e, "")
	for range 3 {
		if _, err := s.Token(ctx, &poppy.TokenOptions{Renew: true}); err != nil {
			t.Fatal(err)
		}
	}
	at, err := s.AccountToken(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var values []string
	for _, r := range grantsOf(e, "refresh_token") {
		values = append(values, r.Form.Get("refresh_token"))
	}
	mu.Lock()
	out := logs.String() + fmt.Sprintf("%v %+v %#v %s", at, at, at, at)
	mu.Unlock()
	for _, v := range values {
		// PA-4.8-07, PA-4.8-10
		if strings.Contains(out, v) {
			t.Fatal("an Account Token is logged or printed")
		}
		// PA-4.8-11
		for _, r := range e.srv.Requests() {
			if strings.Contains(r.URL, v) {
				t.Fatal("an Account Token in a URL")
			}
		}
	}
	if !strings.Contains(fmt.Sprint(at), "REDACTED") {
		t.Fatalf("AccountToken prints %v", at)
	}
	// Stored as a secret: the keystore kind that holds it is a secret kind.
	if !keystore.KindAccountToken.Secret() {
		t.Fatal("Account Tokens are not a secret kind")
	}
}

// nestingStore fails the test when an Update starts while another one's fn
// runs: the SDK must never hold two keystore locks at once, or a store
// whose locks are pooled database connections could run out of them.
type nestingStore struct {
	keystore.Store
	t     *testing.T
	mu    sync.Mutex
	depth int
	max   int
}

func (n *nestingStore) Update(ctx context.Context, key keystore.Key, fn func([]byte) ([]byte, error)) error {
	return n.Store.Update(ctx, key, func(cur []byte) ([]byte, error) {
		n.mu.Lock()
		n.depth++
		if n.depth > n.max {
			n.max = n.depth
		}
		n.mu.Unlock()
		defer func() {
			n.mu.Lock()
			n.depth--
			n.mu.Unlock()
		}()
		return fn(cur)
	})
}

func TestNoNestedKeystoreLocks(t *testing.T) {
	ns := &nestingStore{Store: keystore.NewMemory(), t: t}
	e := newEnv(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{RotateAccountTokens: true}}, &poppy.AgentOptions{Store: ns})
	direct, err := signin.NewDirect(e.agent, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.srv.HandleAgent("agent.test", e.id.Handler(direct.Handler()))
	s := e.session("alice")
	browser := signin.PrompterFuncs{OpenURLFunc: func(ctx context.Context, p *signin.URLPrompt) error {
		loc, err := e.srv.Browse(ctx, p.URL)
		if err != nil {
			return err
		}
		resp, err := e.srv.Client().Get(loc)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}}
	if _, err := direct.SignIn(ctx, s, &poppy.SignInOptions{Scopes: []string{"poppy:read"}}, browser); err != nil {
		t.Fatal(err)
	}
	e.srv.Clock().Advance(2 * time.Hour) // signed-in renewal with a rotating Account Token
	if code, body := e.get(s, "/orders"); code != 200 {
		t.Fatalf("status %d %s", code, body)
	}
	s2, _ := e.company("example.test").Session(ctx, "alice", &poppy.SessionOptions{Name: "two"})
	if _, ok, err := s2.UseAccountToken(ctx, nil); !ok || err != nil {
		t.Fatal(ok, err)
	}
	e.srv.Sessions().Disconnect("acct_1") // the refused-Account-Token path
	e.srv.Clock().Advance(2 * time.Hour)
	e.get(s, "/products")
	if err := s2.SignOut(ctx, ""); err != nil && !errors.Is(err, poppy.ErrNoAccountToken) {
		t.Fatal(err)
	}
	if ns.max != 1 {
		t.Fatalf("keystore Updates nested %d deep", ns.max)
	}
}

// A read-only sign-in, then an exchange that needs poppy:write: the error
// says which scopes the action needs and which sign-in types can grant
// them (spec 4.4, 6; A-21), and nothing is retried.
func TestInsufficientScopeNamesScopesAndTypes(t *testing.T) {
	e := newEnv(t, nil, nil)
	s := signedIn(t, e, "") // Mediated: poppy:read only
	_, err := doPost(s, e.srv.EndpointURL(poppytest.EndpointAPI)+"/orders/ord_7Hk2/exchanges", `{}`)
	if !errors.Is(err, poppy.ErrInsufficientScope) {
		t.Fatalf("err = %v, want ErrInsufficientScope", err)
	}
	var pe *poppy.Error
	if !errors.As(err, &pe) || strings.Join(pe.Scope, " ") != "poppy:read poppy:write" || pe.Status != 403 {
		t.Fatalf("error %+v", pe)
	}
	// Mediated lists only poppy:read here: Direct and Device can grant both.
	if strings.Join(pe.SignInTypes, " ") != "direct device" {
		t.Fatalf("eligible types %v", pe.SignInTypes)
	}
	if n := len(sdkRequests(e.srv, poppytest.EndpointAPI)); n != 1 {
		t.Fatalf("%d API requests, want 1", n)
	}
}

// accountRecordOf reads the raw Account Token record of alice's default
// account.
func accountRecordOf(t *testing.T, e *env) (keystore.Key, map[string]any) {
	t.Helper()
	k := keystore.Key{Kind: keystore.KindAccountToken, User: "alice", Issuer: e.company("example.test").Issuer(), ID: poppy.DefaultAccount}
	b, err := e.store.Get(ctx, k)
	if errors.Is(err, keystore.ErrNotFound) {
		return k, nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return k, m
}

// Issue 21 item 2 (PA-4.9-02, PA-4.8-06): an Account Token record restored
// from before SignOut, with the Session Tokens its refreshes got (Recent),
// never signs a Session in without asking the Company: the refresh is
// sent, refused, and the Session stays signed out.
func TestRestoredAccountRecordAfterSignOutSignsNothingIn(t *testing.T) {
	e := newEnv(t, nil, nil)
	s := signedIn(t, e, "default")
	if _, err := s.Token(ctx, &poppy.TokenOptions{Renew: true}); err != nil {
		t.Fatal(err)
	}
	k, rec := accountRecordOf(t, e)
	if rec["recent"] == nil {
		t.Fatalf("the refresh left no Recent entry to test with: %v", rec)
	}
	snapshot, err := e.store.Get(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SignOut(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Update(ctx, k, func([]byte) ([]byte, error) { return snapshot, nil }); err != nil {
		t.Fatal(err)
	}
	before := len(grantsOf(e, "refresh_token"))
	res, ok, err := s.UseAccountToken(ctx, &poppy.SignInOptions{Scopes: []string{"poppy:read"}})
	if ok || s.SignedIn() {
		t.Fatalf("UseAccountToken with a restored, revoked record: ok %v, result %+v, err %v, signed in %v", ok, res, err, s.SignedIn())
	}
	if len(grantsOf(e, "refresh_token")) != before+1 {
		t.Fatal("no refresh was sent: the restored record stood in for the Company's answer")
	}
	if st, _ := e.get(s, "/orders"); st == 200 {
		t.Fatal("GET /orders ran as the account after sign-out")
	}
}

// Issue 21 item 2 (PA-4.8-04): a refresh whose answer never arrived may
// have rotated the Account Token at the Company; the record then keeps no
// Session Token that could stand in for the next refresh.
func TestLostRotationClearsRecent(t *testing.T) {
	e, h := hostileEnv(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{RotateAccountTokens: true}}, nil)
	s := signedIn(t, e, "default")
	if _, err := s.Token(ctx, &poppy.TokenOptions{Renew: true}); err != nil {
		t.Fatal(err)
	}
	if _, rec := accountRecordOf(t, e); rec["recent"] == nil {
		t.Fatalf("the refresh left no Recent entry to test with: %v", rec)
	}
	h.On(tokenPath, func(req *http.Request, next http.RoundTripper) (*http.Response, error) {
		b, _ := req.GetBody()
		form, _ := io.ReadAll(b)
		resp, err := next.RoundTrip(req)
		if err == nil && strings.Contains(string(form), "grant_type=refresh_token") {
			resp.Body.Close()
			return nil, errors.New("connection reset after the Company answered")
		}
		return resp, err
	})
	if _, err := s.Token(ctx, &poppy.TokenOptions{Scopes: []string{"poppy:read"}}); err == nil {
		t.Fatal("the refresh whose answer was lost succeeded")
	}
	if _, rec := accountRecordOf(t, e); rec == nil || rec["recent"] != nil {
		t.Fatalf("after a lost rotation the record is %v, want it kept without recent", rec)
	}
}

// Issue 21 item 9: a Company that sends scopes with a signed-out token
// (signed_in false): Token.Scopes and Session.Scopes are none, as
// documented, not the Company's list.
func TestSignedOutTokenHasNoScopes(t *testing.T) {
	e, h := hostileEnv(t, nil, nil)
	h.OnJSON(tokenPath, func(m map[string]any) { m["scope"] = "poppy:read poppy:write" })
	s := e.session("alice")
	tok, err := s.Token(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tok.SignedIn || len(tok.Scopes) != 0 || len(s.Scopes()) != 0 {
		t.Fatalf("signed-out token: signed in %v, Token.Scopes %q, Session.Scopes %q", tok.SignedIn, tok.Scopes, s.Scopes())
	}
}
