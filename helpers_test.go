package poppy_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/poppyproto/poppy/internal/leakcheck"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/poppytest"
)

func TestMain(m *testing.M) {
	leakcheck.VerifyTestMain(m,
		// net/http keeps idle connections' goroutines until the transport
		// is closed; poppytest closes its own at Close.
		"internal/poll.runtime_pollWait",
	)
	_ = os.Stdout
}

// env is one fake Company and one agent talking to it.
type env struct {
	t     testing.TB
	srv   *poppytest.Server
	id    *poppy.Identity
	key   *poppy.SigningKey
	agent *poppy.Agent
	store keystore.Store
}

const (
	testClientID = "https://agent.test/agent.json"
	testJWKS     = "https://agent.test/jwks.json"
	testRedirect = "https://agent.test/oauth/callback"
)

// newIdentity returns an identity on agent.test with one fresh key.
func newIdentity(t testing.TB, exts map[string]string) (*poppy.Identity, *poppy.SigningKey) {
	t.Helper()
	key, err := poppy.GenerateSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	id, err := poppy.NewIdentity(poppy.IdentityConfig{
		ClientID:     testClientID,
		ClientName:   "Example Agent",
		JWKSURI:      testJWKS,
		RedirectURIs: []string{testRedirect},
		Keys:         []*poppy.SigningKey{key},
		Extensions:   exts,
	})
	if err != nil {
		t.Fatal(err)
	}
	return id, key
}

// newEnv starts a fake Company with srvOpts and an agent with agentOpts
// (Store, HTTPClient and Clock filled in when nil).
func newEnv(t testing.TB, srvOpts *poppytest.Options, agentOpts *poppy.AgentOptions) *env {
	t.Helper()
	srv := poppytest.NewServer(t, srvOpts)
	id, key := newIdentity(t, nil)
	srv.HandleAgent("agent.test", id.Handler(nil))
	e := &env{t: t, srv: srv, id: id, key: key}
	e.agent = e.newAgent(agentOpts)
	return e
}

// newAgent returns another agent on the same fake, identity and (unless
// opts names one) store.
func (e *env) newAgent(opts *poppy.AgentOptions) *poppy.Agent {
	e.t.Helper()
	var o poppy.AgentOptions
	if opts != nil {
		o = *opts
	}
	if o.Store == nil {
		if e.store == nil {
			e.store = keystore.NewMemory()
		}
		o.Store = e.store
	}
	if o.HTTPClient == nil {
		o.HTTPClient = e.srv.Client()
	}
	if o.Clock == nil {
		o.Clock = e.srv.Clock()
	}
	a, err := poppy.NewAgent(e.id, &o)
	if err != nil {
		e.t.Fatal(err)
	}
	return a
}

func (e *env) company(domain string) *poppy.Company {
	e.t.Helper()
	c, err := e.agent.Company(context.Background(), domain)
	if err != nil {
		e.t.Fatalf("Company(%q): %v", domain, err)
	}
	return c
}

func (e *env) session(user string) *poppy.Session {
	e.t.Helper()
	s, err := e.company("example.test").Session(context.Background(), user, nil)
	if err != nil {
		e.t.Fatalf("Session(%q): %v", user, err)
	}
	return s
}

// get sends GET path on the fake's API through sess and returns the status
// and body.
func (e *env) get(sess *poppy.Session, path string) (int, string) {
	e.t.Helper()
	resp, err := sess.HTTPClient().Get(e.srv.EndpointURL(poppytest.EndpointAPI) + path)
	if err != nil {
		e.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// sdkRequests returns the requests the SDK sent to the given endpoints,
// leaving out the fake's own fetches of the agent's documents.
func sdkRequests(srv *poppytest.Server, eps ...poppytest.EndpointKind) []poppytest.Request {
	var out []poppytest.Request
	for _, r := range srv.RequestsTo(eps...) {
		if !r.Internal {
			out = append(out, r)
		}
	}
	return out
}

// claim returns a string claim of a decoded proof or JWT.
func claim(m map[string]any, name string) string {
	s, _ := m[name].(string)
	return s
}

// hasHeader reports whether any request carries header h.
func hasHeader(r poppytest.Request, h string) bool { return r.Header.Get(h) != "" }

func errorsAs(err error, target any) bool { return errors.As(err, target) }

type recorder struct {
	h    http.Header
	code int
	body bytes.Buffer
}

func newRecorder() *recorder                    { return &recorder{h: http.Header{}, code: 200} }
func (r *recorder) Header() http.Header         { return r.h }
func (r *recorder) Write(b []byte) (int, error) { return r.body.Write(b) }
func (r *recorder) WriteHeader(code int)        { r.code = code }

// doGet and doPost send through Session.Do and turn the Company's error
// responses into *poppy.Error values with ResponseError.
func doGet(s *poppy.Session, u string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	return doErr(s, req)
}

// doErr sends req with s.Do and returns ResponseError's error, with the
// body closed, for an answer of 400 and above.
func doErr(s *poppy.Session, req *http.Request) (*http.Response, error) {
	resp, err := s.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if err := poppy.ResponseError(resp); err != nil { // reads the body's error
		return nil, err
	}
	return resp, nil
}

func doPost(s *poppy.Session, u, body string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	return doErr(s, req)
}
