package agenttest_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/poppyproto/poppy/internal/leakcheck"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/poppytest"
	"github.com/poppyproto/poppy/poppytest/agenttest"
	"github.com/poppyproto/poppy/signin"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

var ctx = context.Background()

// The agent New returns reaches the fake, is accepted by it, and sleeps on
// its clock: a Device Sign-In with three pending polls takes no real time.
func TestNewReadyAgent(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	agent, id := agenttest.New(t, srv, nil)
	if id.ClientID() != "https://agent.test/agent.json" || agent.Identity() != id {
		t.Fatalf("identity %s", id.ClientID())
	}
	c, err := agent.Company(ctx, "example.test")
	if err != nil {
		t.Fatal(err)
	}
	sess, err := c.Session(ctx, "alice", nil)
	if err != nil {
		t.Fatal(err)
	}
	before := srv.Clock().Now()
	srv.SignIn().HoldDevicePolls(3)
	p := signin.PrompterFuncs{ShowCodeFunc: func(ctx context.Context, p *signin.CodePrompt) error {
		_, err := srv.Browse(ctx, p.VerificationURIComplete)
		return err
	}}
	if _, err := signin.Device(ctx, sess, &poppy.SignInOptions{Scopes: []string{"poppy:read"}}, p); err != nil {
		t.Fatal(err)
	}
	if d := srv.Clock().Now().Sub(before); d < 20e9 {
		t.Fatalf("the fake's clock moved %v: the agent does not sleep on it", d)
	}
}

// Options: another host, a given key and store, and a handler behind the
// identity's.
func TestNewOptions(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	key, err := poppy.GenerateSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	store := keystore.NewMemory()
	var direct *signin.Direct
	agent, id := agenttest.New(t, srv, &agenttest.Options{Host: "bot.test", Key: key, Agent: poppy.AgentOptions{Store: store}})
	if agent.Store() != store || id.ClientID() != "https://bot.test/agent.json" || id.RedirectURIs()[0] != "https://bot.test/oauth/callback" {
		t.Fatalf("agent %v, identity %s", agent.Store(), id.ClientID())
	}
	direct, err = signin.NewDirect(agent, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv.HandleAgent("bot.test", id.Handler(direct.Handler()))
	c, err := agent.Company(ctx, "example.test")
	if err != nil {
		t.Fatal(err)
	}
	sess, err := c.Session(ctx, "alice", nil)
	if err != nil {
		t.Fatal(err)
	}
	p := signin.PrompterFuncs{OpenURLFunc: func(ctx context.Context, p *signin.URLPrompt) error {
		back, err := srv.Browse(ctx, p.URL)
		if err != nil {
			return err
		}
		resp, err := srv.Client().Get(back)
		if err != nil {
			return err
		}
		return resp.Body.Close()
	}}
	if _, err := direct.SignIn(ctx, sess, &poppy.SignInOptions{Scopes: []string{"poppy:read"}}, p); err != nil {
		t.Fatal(err)
	}
}

// An agent whose identity nobody serves gets invalid_client, and the
// Company's description says what the test forgot.
func TestUnservedIdentityHint(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	key, _ := poppy.GenerateSigningKey()
	id, err := poppy.NewIdentity(poppy.IdentityConfig{ClientID: "https://agent.test/agent.json", JWKSURI: "https://agent.test/jwks.json", Keys: []*poppy.SigningKey{key}})
	if err != nil {
		t.Fatal(err)
	}
	agent, err := poppy.NewAgent(id, &poppy.AgentOptions{HTTPClient: srv.Client(), Clock: srv.Clock()})
	if err != nil {
		t.Fatal(err)
	}
	c, err := agent.Company(ctx, "example.test")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Session(ctx, "alice", nil)
	if !errors.Is(err, poppy.ErrInvalidClient) || !strings.Contains(err.Error(), "HTTP 404") || !strings.Contains(err.Error(), `Server.HandleAgent("agent.test"`) {
		t.Fatalf("err = %v", err)
	}
}
