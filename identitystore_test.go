package poppy_test

import (
	"context"
	"strings"
	"testing"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/poppytest"
	"github.com/poppyproto/poppy/signin"
)

// After a rotation the new key signs and a Company that cached the old JWKS
// still verifies: the previous key stays published.
func TestRotatedKeysStillSignIn(t *testing.T) {
	ctx := context.Background()
	store := keystore.NewMemory()
	keys, err := poppy.LoadSigningKeys(ctx, store, "agent")
	if err != nil {
		t.Fatal(err)
	}
	id, err := poppy.NewIdentity(poppy.IdentityConfig{ClientID: testClientID, JWKSURI: testJWKS, RedirectURIs: []string{testRedirect}, Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	srv := poppytest.NewServer(t, nil)
	srv.HandleAgent("agent.test", id.Handler(nil))
	agent, err := poppy.NewAgent(id, &poppy.AgentOptions{Store: store, HTTPClient: srv.Client(), Clock: srv.Clock()})
	if err != nil {
		t.Fatal(err)
	}
	c, err := agent.Company(ctx, "example.test")
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Session(ctx, "alice", nil)
	if err != nil {
		t.Fatal(err)
	}
	rot, err := poppy.RotateSigningKeys(ctx, store, "agent")
	if err != nil {
		t.Fatal(err)
	}
	if err := id.Rotate(rot...); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(id.JWKS()), keys[0].KeyID()) {
		t.Fatal("the previous key is no longer published")
	}
	// PA-4.1-05: keys loaded from the keystore publish their public part only.
	if strings.Contains(string(id.JWKS()), `"d"`) {
		t.Fatal("the JWKS holds a private key")
	}
	u := signin.PrompterFuncs{CredentialsFunc: func(_ context.Context, p *signin.CredentialsPrompt) (*signin.Credentials, error) {
		return signin.NewCredentials(p, map[string]string{"email": "user@example.test", "password": "correct horse"}), nil
	}}
	if _, err := signin.Mediated(ctx, s, &poppy.SignInOptions{Scopes: []string{"poppy:read"}}, u); err != nil {
		t.Fatalf("signing in with the rotated key: %v", err)
	}
}

// StoredSessions and StoredAccountTokens read the keystore without a
// request and never hold a token value.
func TestStoredState(t *testing.T) {
	e := newEnv(t, nil, nil)
	ctx := context.Background()
	s := e.session("alice")
	u := signin.PrompterFuncs{CredentialsFunc: func(_ context.Context, p *signin.CredentialsPrompt) (*signin.Credentials, error) {
		return signin.NewCredentials(p, map[string]string{"email": "user@example.test", "password": "correct horse"}), nil
	}}
	if _, err := signin.Mediated(ctx, s, &poppy.SignInOptions{Scopes: []string{"poppy:read"}}, u); err != nil {
		t.Fatal(err)
	}
	before := len(e.srv.Requests())
	iss := e.srv.Issuer()
	ss, err := e.agent.StoredSessions(ctx, "alice", iss)
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) != 1 || ss[0].ID != s.ID() || !ss[0].SignedIn || ss[0].Account != poppy.DefaultAccount ||
		strings.Join(ss[0].Scopes, " ") != "poppy:read" || ss[0].Expiry.IsZero() {
		t.Fatalf("StoredSessions = %+v", ss)
	}
	ats, err := e.agent.StoredAccountTokens(ctx, "alice", iss)
	if err != nil {
		t.Fatal(err)
	}
	if len(ats) != 1 || ats[0].Account != poppy.DefaultAccount || strings.Join(ats[0].Scopes, " ") != "poppy:read" {
		t.Fatalf("StoredAccountTokens = %v", ats)
	}
	if n := len(e.srv.Requests()); n != before {
		t.Fatalf("listing sent %d requests", n-before)
	}
	if other, _ := e.agent.StoredSessions(ctx, "bob", iss); len(other) != 0 {
		t.Fatalf("bob has %v", other)
	}
}
