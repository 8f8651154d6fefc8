package signin_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/poppyproto/poppy/internal/leakcheck"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/internal/testenv"
	"github.com/poppyproto/poppy/poppytest"
	"github.com/poppyproto/poppy/signin"
)

func TestMain(m *testing.M) {
	leakcheck.VerifyTestMain(m)
	_ = os.Stdout
}

var ctx = context.Background()

// env is a fake Company, an agent, and Direct Sign-In served on agent.test.
type env struct {
	*testenv.Env
	direct *signin.Direct
}

func newEnv(t *testing.T, opts *poppytest.Options, aopts *poppy.AgentOptions) *env {
	t.Helper()
	return withDirect(t, &env{Env: testenv.New(t, opts, aopts)})
}

// newEnvOn is newEnv with a fake the test started.
func newEnvOn(t *testing.T, srv *poppytest.Server, aopts *poppy.AgentOptions) *env {
	t.Helper()
	return withDirect(t, &env{Env: testenv.NewOn(t, srv, aopts)})
}

func withDirect(t *testing.T, e *env) *env {
	t.Helper()
	d, err := signin.NewDirect(e.Agent, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.direct = d
	e.Serve(d.Handler())
	return e
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// browser plays the User's browser: it opens the authorization URL at the
// fake Company, whose programmable User decides, and follows the redirect
// back to the agent's callback. It records what it saw.
type browser struct {
	e       *env
	mu      sync.Mutex
	urls    []string
	codes   []*signin.CodePrompt
	creds   []*signin.CredentialsPrompt
	otps    []*signin.OneTimeCodePrompt
	values  map[string]string // credentials to give
	code    func() string     // one-time code to give
	mangle  func(string) string
	noVisit bool
	client  *http.Client // the browser's; nil means the fake's Client
}

func (e *env) browser() *browser { return &browser{e: e} }

func (b *browser) OpenURL(ctx context.Context, p *signin.URLPrompt) error {
	b.mu.Lock()
	b.urls = append(b.urls, p.URL)
	b.mu.Unlock()
	if b.noVisit {
		return nil
	}
	loc, err := b.e.Srv.Browse(ctx, p.URL)
	if err != nil || loc == "" {
		return err
	}
	if b.mangle != nil {
		loc = b.mangle(loc)
	}
	return b.visit(loc)
}

// visit GETs the agent's callback as the User's browser would.
func (b *browser) visit(loc string) error {
	c := b.client
	if c == nil {
		c = b.e.Srv.Client()
	}
	resp, err := c.Get(loc)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil
}

func (b *browser) ShowCode(ctx context.Context, p *signin.CodePrompt) error {
	b.mu.Lock()
	b.codes = append(b.codes, p)
	b.mu.Unlock()
	if b.noVisit {
		return nil
	}
	u := p.VerificationURIComplete
	if u == "" {
		u = p.VerificationURI + "?user_code=" + url.QueryEscape(p.UserCode)
	}
	_, err := b.e.Srv.Browse(ctx, u)
	return err
}

func (b *browser) Credentials(ctx context.Context, p *signin.CredentialsPrompt) (*signin.Credentials, error) {
	b.mu.Lock()
	b.creds = append(b.creds, p)
	b.mu.Unlock()
	v := b.values
	if v == nil {
		v = map[string]string{"email": "user@example.test", "password": "correct horse"}
	}
	return signin.NewCredentials(p, v), nil
}

func (b *browser) OneTimeCode(ctx context.Context, p *signin.OneTimeCodePrompt) (string, error) {
	b.mu.Lock()
	b.otps = append(b.otps, p)
	b.mu.Unlock()
	if b.code != nil {
		return b.code(), nil
	}
	return b.e.Srv.SignIn().LastCode(), nil
}

func scopes(s ...string) *poppy.SignInOptions { return &poppy.SignInOptions{Scopes: s} }

func query(t *testing.T, raw string) url.Values {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Query()
}

func grants(e *env, grant string) []poppytest.Request {
	var out []poppytest.Request
	for _, r := range e.Requests(poppytest.EndpointToken) {
		if r.Form.Get("grant_type") == grant {
			out = append(out, r)
		}
	}
	return out
}

func has(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

var _ = strings.Contains
var _ = http.MethodGet
