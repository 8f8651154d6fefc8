// Package agenttest sets up a Personal Agent for a [poppytest.Server] in one
// call, for tests of code that uses the SDK.
//
// Package poppytest is the fake Company alone: it speaks the wire protocol
// and imports nothing of the SDK, so it can check other implementations
// too. This package joins the two: [New] returns an Agent and its Identity
// wired to the fake the way a test needs, which otherwise takes a key, an
// identity, Server.HandleAgent, and NewAgent with the fake's client and
// clock. Forgetting the client makes every request fail to reach the fake;
// forgetting the clock makes each Device Sign-In wait 5 s of real time;
// forgetting HandleAgent gets invalid_client from the Company, whose
// metadata fetch found nothing.
//
// # Recipe: test your agent code
//
//	func TestOrders(t *testing.T) {
//		srv := poppytest.NewServer(t, nil) // fails t on any protocol violation
//		agent, identity := agenttest.New(t, srv, nil) // the Agent, and its Identity served on agent.test
//		t.Log("the Company sees client_id", identity.ClientID())
//		c, err := agent.Company(ctx, "example.test")
//		...
//		sess, err := c.Session(ctx, "alice", nil)
//		// code under test: sign in, call the API through sess.HTTPClient()
//		got := srv.RequestsTo(poppytest.EndpointAPI) // what reached the Company
//	}
//
// A sign-in callback (signin.Direct) is served behind the identity's
// handler:
//
//	agent, id := agenttest.New(t, srv, nil)
//	direct, _ := signin.NewDirect(agent, nil)
//	srv.HandleAgent(agenttest.Host, id.Handler(direct.Handler()))
//
// The fake's programmable User answers the sign-in pages
// (Server.Browse, ApproveAll, Deny); its Clock advances by itself when the
// SDK sleeps, so polling and renewal tests run at once.
//
// # Recipe: test a command that runs in a child process
//
// See the poppytest package documentation: Server.Env gives the child the
// fake, either through poppytest.ClientFromEnv or, for a binary that does
// not import poppytest at all, as its HTTPS proxy.
package agenttest

import (
	"fmt"
	"net/http"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/poppytest"
)

// Host is the agent's default host, one of poppytest's default
// Options.AgentHosts.
const Host = "agent.test"

// Options configures New. The zero value (or nil) gives the defaults
// described on each field.
type Options struct {
	// Host is the agent's host: its client_id is https://{Host}/agent.json,
	// its JWKS https://{Host}/jwks.json and its redirect URI
	// https://{Host}/oauth/callback. Default Host.
	Host string
	// ClientName is the client_name in the metadata. Default "Test Agent".
	ClientName string
	// Key signs the agent's assertions. Nil means a fresh key; give one to
	// share the identity with a child process (SigningKey.MarshalPrivateJWK).
	Key *poppy.SigningKey
	// Extensions are the identity's extensions, the client metadata's
	// "extensions" member (spec 4.1): name → major version, as
	// poppy.IdentityConfig.Extensions.
	Extensions map[string]string
	// Handler is served behind the identity's handler on Host, e.g. a
	// sign-in callback. It may also be mounted later with
	// srv.HandleAgent(Host, identity.Handler(h)).
	Handler http.Handler
	// Agent holds the Agent's options. A nil Store means a fresh in-memory
	// keystore, a nil HTTPClient the fake's Client and a nil Clock the
	// fake's Clock.
	Agent poppy.AgentOptions
}

// New returns an Agent for srv and the Identity it signs with, for the
// test t. The identity's metadata, JWKS and opts.Handler are served on
// opts.Host by srv. Errors fail t. t must not be nil: a program or an
// Example calls [NewAgent].
func New(t poppytest.TB, srv *poppytest.Server, opts *Options) (*poppy.Agent, *poppy.Identity) {
	if t == nil {
		panic("agenttest: New needs a test; a program or an Example calls NewAgent")
	}
	t.Helper()
	agent, id, err := NewAgent(srv, opts)
	if err != nil {
		t.Fatalf("%v", err)
		return nil, nil
	}
	return agent, id
}

// NewAgent is New for a program or an Example: it returns the error
// instead of failing a test.
func NewAgent(srv *poppytest.Server, opts *Options) (*poppy.Agent, *poppy.Identity, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Host == "" {
		o.Host = Host
	}
	if o.ClientName == "" {
		o.ClientName = "Test Agent"
	}
	if o.Key == nil {
		k, err := poppy.GenerateSigningKey()
		if err != nil {
			return nil, nil, fmt.Errorf("agenttest: %w", err)
		}
		o.Key = k
	}
	base := "https://" + o.Host
	id, err := poppy.NewIdentity(poppy.IdentityConfig{
		ClientID:     base + "/agent.json",
		ClientName:   o.ClientName,
		JWKSURI:      base + "/jwks.json",
		RedirectURIs: []string{base + "/oauth/callback"},
		Keys:         []*poppy.SigningKey{o.Key},
		Extensions:   o.Extensions,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("agenttest: %w", err)
	}
	srv.HandleAgent(o.Host, id.Handler(o.Handler))
	ao := o.Agent
	if ao.Store == nil {
		ao.Store = keystore.NewMemory()
	}
	if ao.HTTPClient == nil {
		ao.HTTPClient = srv.Client()
	}
	if ao.Clock == nil {
		ao.Clock = srv.Clock()
	}
	agent, err := poppy.NewAgent(id, &ao)
	if err != nil {
		return nil, nil, fmt.Errorf("agenttest: %w", err)
	}
	return agent, id, nil
}
