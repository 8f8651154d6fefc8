// Package testenv wires an Agent to a poppytest fake Company for the tests
// of the SDK's packages.
package testenv

import (
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/poppytest"
	"github.com/poppyproto/poppy/signin"
)

// The agent identity every test uses.
const (
	ClientID = "https://agent.test/agent.json"
	JWKS     = "https://agent.test/jwks.json"
	Redirect = "https://agent.test/oauth/callback"
)

// Env is one fake Company and one agent talking to it.
type Env struct {
	T     testing.TB
	Srv   *poppytest.Server
	ID    *poppy.Identity
	Key   *poppy.SigningKey
	Agent *poppy.Agent
	Store keystore.Store
}

// NewIdentity returns an identity on agent.test with one fresh key.
func NewIdentity(t testing.TB, exts map[string]string) (*poppy.Identity, *poppy.SigningKey) {
	t.Helper()
	key, err := poppy.GenerateSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	id, err := poppy.NewIdentity(poppy.IdentityConfig{
		ClientID:     ClientID,
		ClientName:   "Example Agent",
		JWKSURI:      JWKS,
		RedirectURIs: []string{Redirect},
		Keys:         []*poppy.SigningKey{key},
		Extensions:   exts,
	})
	if err != nil {
		t.Fatal(err)
	}
	return id, key
}

// New starts a fake Company with srvOpts and an agent with agentOpts
// (Store, HTTPClient and Clock filled in when nil). The identity's handler
// serves agent.test, with next behind it for other paths.
func New(t testing.TB, srvOpts *poppytest.Options, agentOpts *poppy.AgentOptions) *Env {
	t.Helper()
	return NewOn(t, poppytest.NewServer(t, srvOpts), agentOpts)
}

// NewOn is New with a fake the caller started.
func NewOn(t testing.TB, srv *poppytest.Server, agentOpts *poppy.AgentOptions) *Env {
	t.Helper()
	return NewWithExtensions(t, srv, nil, agentOpts)
}

// NewWithExtensions is NewOn with an agent whose metadata lists extensions
// (name to version), such as {"operations": "1"}.
func NewWithExtensions(t testing.TB, srv *poppytest.Server, extensions map[string]string, agentOpts *poppy.AgentOptions) *Env {
	t.Helper()
	id, key := NewIdentity(t, extensions)
	e := &Env{T: t, Srv: srv, ID: id, Key: key}
	e.Serve(nil)
	e.Agent = e.NewAgent(agentOpts)
	return e
}

// Serve mounts the identity's handler on agent.test, with next behind it.
func (e *Env) Serve(next http.Handler) {
	if next == nil {
		e.Srv.HandleAgent("agent.test", e.ID.Handler(nil))
		return
	}
	e.Srv.HandleAgent("agent.test", e.ID.Handler(next))
}

// NewAgent returns another agent on the same fake and identity, sharing the
// Env's store unless opts names one.
func (e *Env) NewAgent(opts *poppy.AgentOptions) *poppy.Agent {
	e.T.Helper()
	var o poppy.AgentOptions
	if opts != nil {
		o = *opts
	}
	if o.Store == nil {
		if e.Store == nil {
			e.Store = keystore.NewMemory()
		}
		o.Store = e.Store
	}
	if o.HTTPClient == nil {
		o.HTTPClient = e.Srv.Client()
	}
	if o.Clock == nil {
		o.Clock = e.Srv.Clock()
	}
	a, err := poppy.NewAgent(e.ID, &o)
	if err != nil {
		e.T.Fatal(err)
	}
	return a
}

// Company resolves domain with the Env's agent.
func (e *Env) Company(domain string) *poppy.Company {
	e.T.Helper()
	c, err := e.Agent.Company(context.Background(), domain)
	if err != nil {
		e.T.Fatalf("Company(%q): %v", domain, err)
	}
	return c
}

// Session starts or resumes the default Session of user at example.test.
func (e *Env) Session(user string) *poppy.Session {
	e.T.Helper()
	s, err := e.Company("example.test").Session(context.Background(), user, nil)
	if err != nil {
		e.T.Fatalf("Session(%q): %v", user, err)
	}
	return s
}

// DeviceSignIn signs s in with Device Sign-In for opts, the fake's User
// approving the code as soon as it is shown.
func (e *Env) DeviceSignIn(ctx context.Context, s *poppy.Session, opts *poppy.SignInOptions) (*poppy.SignInResult, error) {
	p := signin.PrompterFuncs{ShowCodeFunc: func(ctx context.Context, p *signin.CodePrompt) error {
		_, err := e.Srv.Browse(ctx, p.VerificationURIComplete)
		return err
	}}
	return signin.Device(ctx, s, opts, p)
}

// Get sends GET path on the fake's API through sess and returns the status
// and body; a transport error fails the test.
func (e *Env) Get(sess *poppy.Session, path string) (int, string) {
	e.T.Helper()
	resp, err := sess.HTTPClient().Get(e.Srv.EndpointURL(poppytest.EndpointAPI) + path)
	if err != nil {
		e.T.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Requests returns the requests the SDK sent to the given endpoints (all
// when none are given), leaving out the fake's own fetches.
func (e *Env) Requests(eps ...poppytest.EndpointKind) []poppytest.Request {
	var out []poppytest.Request
	all := e.Srv.Requests()
	if len(eps) > 0 {
		all = e.Srv.RequestsTo(eps...)
	}
	for _, r := range all {
		if !r.Internal {
			out = append(out, r)
		}
	}
	return out
}

// Claim returns a string claim of a decoded proof or JWT.
func Claim(m map[string]any, name string) string {
	s, _ := m[name].(string)
	return s
}
