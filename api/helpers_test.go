package api_test

import (
	"context"
	"testing"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/api"
	"github.com/poppyproto/poppy/internal/testenv"
	"github.com/poppyproto/poppy/poppytest"
	"github.com/poppyproto/poppy/signin"
)

// entry returns the Company's first API of type typ.
func entry(t testing.TB, c *poppy.Company, typ string) poppy.API {
	t.Helper()
	for _, e := range api.List(c) {
		if e.Type == typ {
			return e
		}
	}
	t.Fatalf("no %s API listed", typ)
	return poppy.API{}
}

// setup starts a fake and a Session for user "alice".
func setup(t testing.TB, opts *poppytest.Options) (*testenv.Env, *poppy.Session) {
	t.Helper()
	env := testenv.New(t, opts, nil)
	return env, env.Session("alice")
}

// setupOperations starts a fake and an agent that supports the operations
// extension, with "alice" signed in to read and write.
func setupOperations(t testing.TB) (*testenv.Env, *poppy.Session) {
	t.Helper()
	env := testenv.NewWithExtensions(t, poppytest.NewServer(t, nil), map[string]string{"operations": "1"}, nil)
	sess := env.Session("alice")
	signIn(t, env, sess, "poppy:read", "poppy:write")
	return env, sess
}

func loadOpenAPI(t testing.TB, sess *poppy.Session) *api.OpenAPI {
	t.Helper()
	oa, err := api.LoadOpenAPI(context.Background(), sess, entry(t, sess.Company(), api.TypeOpenAPI), nil)
	if err != nil {
		t.Fatalf("LoadOpenAPI: %v", err)
	}
	return oa
}

func connectMCP(t testing.TB, sess *poppy.Session) *api.MCP {
	t.Helper()
	m, err := api.ConnectMCP(context.Background(), sess, entry(t, sess.Company(), api.TypeMCP), nil)
	if err != nil {
		t.Fatalf("ConnectMCP: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// signIn signs sess in with Device Sign-In, the fake's User approving.
func signIn(t testing.TB, env *testenv.Env, sess *poppy.Session, scopes ...string) {
	t.Helper()
	p := signin.PrompterFuncs{ShowCodeFunc: func(ctx context.Context, p *signin.CodePrompt) error {
		_, err := env.Srv.Browse(ctx, p.VerificationURIComplete)
		return err
	}}
	if _, err := signin.Device(context.Background(), sess, &poppy.SignInOptions{Scopes: scopes}, p); err != nil {
		t.Fatalf("Device Sign-In: %v", err)
	}
}
