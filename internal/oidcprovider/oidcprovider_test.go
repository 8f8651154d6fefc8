package oidcprovider_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/poppyproto/poppy/internal/leakcheck"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/internal/oidcprovider"
	"github.com/poppyproto/poppy/internal/realtest"
	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/signin"
)

func TestMain(m *testing.M) {
	leakcheck.VerifyTestMain(realtest.Main(m)) // one line per missing real component
}

const (
	domain   = oidcprovider.Domain
	issuer   = oidcprovider.Issuer
	clientID = "https://agent.test/agent.json"
	redirect = "https://agent.test/oauth/callback"
	res1     = oidcprovider.Resource1
	res2     = oidcprovider.Resource2
)

// company is oidc-provider run as a Poppy Company (package oidcprovider),
// and an HTTP client that reaches every one of its hosts on loopback over
// TLS, trusting the test's own CA.
type company struct {
	*oidcprovider.Company
	client *http.Client
}

// startCompany starts the Company for the agent id, whose documents
// (client metadata and JWKS) it serves at agent.test for the Company to
// fetch, or skips (fails under POPPY_TEST_REAL=1) when node or the npm
// package is missing.
func startCompany(t *testing.T, id *poppy.Identity) *company {
	t.Helper()
	c := oidcprovider.Start(t, &oidcprovider.Options{Agents: map[string]http.Handler{"agent.test": id.Handler(nil)}})
	return &company{Company: c, client: c.Client}
}

// introspection is what the glue's introspection says of a token.
type introspection struct {
	Active    bool   `json:"active"`
	Scope     string `json:"scope"`
	Aud       any    `json:"aud"`
	JKT       string `json:"jkt"`
	Account   string `json:"account"`
	SessionID string `json:"session_id"`
}

func (c *company) introspect(t *testing.T, tok *poppy.Token) introspection {
	t.Helper()
	resp, err := c.client.PostForm(issuer+"/poppy-test/introspect", url.Values{"token": {tok.Value()}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var in introspection
	if err := json.NewDecoder(resp.Body).Decode(&in); err != nil {
		t.Fatal(err)
	}
	return in
}

// whoami calls GET {resource}/whoami through sess's transport and returns
// what the API said of the token it got.
func (c *company) whoami(t *testing.T, sess *poppy.Session, resource string) introspection {
	t.Helper()
	resp, err := sess.HTTPClient().Get(resource + "/whoami")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := poppy.ResponseError(resp); err != nil {
		t.Fatalf("GET %s/whoami: %v", resource, err)
	}
	var in introspection
	if err := json.NewDecoder(resp.Body).Decode(&in); err != nil {
		t.Fatal(err)
	}
	return in
}

// directSignIn opens the authorization URL as the User (the glue logs in
// and consents) and returns the redirect to the agent.
func (c *company) directSignIn(t *testing.T, authz string) string {
	t.Helper()
	loc, err := c.DirectSignIn(context.Background(), authz)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(loc, redirect) {
		t.Fatalf("authorization ended at %s, not at the redirect URI", loc)
	}
	return loc
}

// approveDevice opens verification_uri_complete as the User and submits
// oidc-provider's pages as a browser would (the code's form, then the
// confirmation; the glue logs in and consents in between) until one has
// no form left: the success page.
func (c *company) approveDevice(ctx context.Context, p *signin.CodePrompt) error {
	return c.ApproveDevice(ctx, p.VerificationURIComplete)
}

// The SDK against an OAuth server the project did not write. oidc-provider 9.x, made a Poppy Company with the least glue
// (testdata/provider.mjs: poppy.json and poppy_domains, session_id in
// token responses, the jwt-bearer Session grant, two listed resources),
// with its own defaults for RFC 8707 (a token request must name one of
// several granted resources), DPoP with nonces, RFC 9207 iss, rotation and
// revocation. Session start and renewal, Direct and Device sign-in, the
// default token's renewal twice after a sign-in that named both resources,
// an API call with each resource's token, refresh with rotation, the
// second resource and revocation all go through the SDK.
func TestOIDCProviderCompany(t *testing.T) {
	key, err := poppy.GenerateSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	id, err := poppy.NewIdentity(poppy.IdentityConfig{ClientID: clientID, ClientName: "Example Agent",
		JWKSURI: "https://agent.test/jwks.json", RedirectURIs: []string{redirect}, Keys: []*poppy.SigningKey{key}})
	if err != nil {
		t.Fatal(err)
	}
	c := startCompany(t, id)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	agent, err := poppy.NewAgent(id, &poppy.AgentOptions{Store: keystore.NewMemory(), HTTPClient: c.client})
	if err != nil {
		t.Fatal(err)
	}
	co, err := agent.Company(ctx, domain)
	if err != nil {
		t.Fatalf("discovery: %v", err)
	}
	if got := co.Resources(); !slices.Equal(got, []string{res1, res2}) {
		t.Fatalf("Resources() = %v", got)
	}

	// Session start and renewal (spec 4.2), signed out, with DPoP nonces.
	sess, err := co.Session(ctx, "alice", nil)
	if err != nil {
		t.Fatalf("Session start: %v", err)
	}
	t0, err := sess.Token(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if in := c.introspect(t, t0); !in.Active || in.SessionID != sess.ID() || in.JKT != sess.Thumbprint() {
		t.Fatalf("signed-out token: %+v (Session %s)", in, sess.ID())
	}
	t1, err := sess.Token(ctx, &poppy.TokenOptions{Renew: true})
	if err != nil {
		t.Fatalf("renewal: %v", err)
	}
	if t1.Value() == t0.Value() || t1.SessionID != sess.ID() || !c.introspect(t, t1).Active {
		t.Fatalf("renewal gave %v", t1)
	}
	if rt, err := sess.Token(ctx, &poppy.TokenOptions{Resource: res2}); err != nil || c.introspect(t, rt).Aud != res2 {
		t.Fatalf("signed-out token for the second resource: %v", err)
	}

	// Direct Sign-In (spec 4.5): PKCE, iss, one resource per token request.
	direct, err := signin.NewDirect(agent, nil)
	if err != nil {
		t.Fatal(err)
	}
	opts := &poppy.SignInOptions{Scopes: []string{"poppy:read"}}
	st, err := direct.Start(ctx, sess, opts)
	if err != nil {
		t.Fatal(err)
	}
	res, err := direct.Complete(ctx, c.directSignIn(t, st.URL))
	if err != nil {
		t.Fatalf("Direct Sign-In: %v", err)
	}
	if !slices.Contains(res.Granted, "poppy:read") || !sess.SignedIn() {
		t.Fatalf("Direct Sign-In result %+v, signed in %v", res, sess.SignedIn())
	}
	// The Session's default token renewed twice after a sign-in that named
	// both resources: every refresh names exactly one (oidc-provider
	// refuses one naming none with invalid_target, having used the
	// Account Token up, and the second would then revoke the grant).
	for i := range 2 {
		tok, err := sess.Token(ctx, &poppy.TokenOptions{Renew: true})
		if err != nil {
			t.Fatalf("renewal %d of the default token: %v", i, err)
		}
		if in := c.introspect(t, tok); !in.Active || in.Aud != res1 || in.Account != "acct_1" || !tok.SignedIn {
			t.Fatalf("renewal %d of the default token: %+v", i, in)
		}
	}
	// An API call with each resource's token: the transport picks the
	// resource by the URL, and each API accepts only its own.
	for _, r := range []string{res1, res2} {
		if who := c.whoami(t, sess, r); who.Aud != r || who.Account != "acct_1" || who.SessionID != sess.ID() {
			t.Fatalf("API call at %s: %+v", r, who)
		}
	}
	// Each resource's signed-in token, then refreshes with rotation: a
	// lost rotated token would make the next refresh "already used",
	// which revokes the grant.
	var signedIn []*poppy.Token
	for round := range 3 {
		for _, r := range []string{res1, res2} {
			tok, err := sess.Token(ctx, &poppy.TokenOptions{Resource: r, Renew: round > 0})
			if err != nil {
				t.Fatalf("round %d, %s: %v", round, r, err)
			}
			in := c.introspect(t, tok)
			if !in.Active || in.Aud != r || in.Account != "acct_1" || !strings.Contains(in.Scope, "poppy:read") {
				t.Fatalf("round %d, signed-in token for %s: %+v", round, r, in)
			}
			signedIn = append(signedIn, tok)
		}
	}
	// Another process resumes the signed-in Session.
	agent2, err := poppy.NewAgent(id, &poppy.AgentOptions{Store: agentStore(agent), HTTPClient: c.client})
	if err != nil {
		t.Fatal(err)
	}
	co2, err := agent2.Company(ctx, domain)
	if err != nil {
		t.Fatal(err)
	}
	if s2, err := co2.Session(ctx, "alice", nil); err != nil || !s2.SignedIn() {
		t.Fatalf("resuming the signed-in Session: %v", err)
	}

	// Device Sign-In (spec 4.6) for another User.
	bob, err := co.Session(ctx, "bob", nil)
	if err != nil {
		t.Fatal(err)
	}
	dres, err := signin.Device(ctx, bob, opts, signin.PrompterFuncs{ShowCodeFunc: c.approveDevice})
	if err != nil {
		t.Fatalf("Device Sign-In: %v", err)
	}
	if !slices.Contains(dres.Granted, "poppy:read") || !bob.SignedIn() {
		t.Fatalf("Device Sign-In result %+v", dres)
	}
	for _, r := range []string{res2, res1} {
		tok, err := bob.Token(ctx, &poppy.TokenOptions{Resource: r, Renew: true})
		if err != nil {
			t.Fatalf("bob's token for %s: %v", r, err)
		}
		if in := c.introspect(t, tok); !in.Active || in.Aud != r {
			t.Fatalf("bob's token for %s: %+v", r, in)
		}
	}

	// Revocation (spec 4.9): the Account Token is revoked, oidc-provider
	// revokes its grant, and the Session Tokens it issued go inactive.
	if err := sess.SignOut(ctx, ""); err != nil {
		t.Fatalf("SignOut: %v", err)
	}
	if sess.SignedIn() {
		t.Fatal("still signed in after SignOut")
	}
	for _, tok := range signedIn[len(signedIn)-2:] {
		if in := c.introspect(t, tok); in.Active {
			t.Fatalf("a signed-in token still active after SignOut: %+v", in)
		}
	}
	if _, err := sess.AccountToken(ctx, ""); !errors.Is(err, poppy.ErrNoAccountToken) {
		t.Fatalf("Account Token kept after SignOut: %v", err)
	}
	// The Session carries on signed out.
	if tok, err := sess.Token(ctx, &poppy.TokenOptions{Renew: true}); err != nil || tok.SignedIn {
		t.Fatalf("signed-out renewal after SignOut: %v %v", tok, err)
	}
}

// agentStore returns the keystore a's Sessions live in.
func agentStore(a *poppy.Agent) keystore.Store { return a.Store() }
